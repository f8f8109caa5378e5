//! `rigrun runs`: the runs a runs directory keeps, one row each, oldest first, so that a run is
//! found by what it was (playbook, hosts, label) rather than by its time-stamped name.

use std::path::PathBuf;

use tabled::builder::Builder;
use tabled::settings::Style;

use crate::events::Status;
use crate::store::Manifest;

/// The runs as a table: run, playbook, hosts, status, started (UTC), attempts, label. A
/// directory whose run.json cannot be read is a row saying why.
pub fn runs_table(runs: &[(PathBuf, anyhow::Result<Manifest>)]) -> String {
    let mut table = Builder::default();
    table.push_record([
        "run",
        "playbook",
        "hosts",
        "status",
        "started (UTC)",
        "attempts",
        "label",
    ]);
    for (dir, manifest) in runs {
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        table.push_record(match manifest {
            Ok(m) => row(name, m),
            Err(e) => vec![name, format!("unreadable: {e:#}")],
        });
    }
    format!("{}\n", table.build().with(Style::rounded()))
}

fn row(name: String, m: &Manifest) -> Vec<String> {
    let hosts: Vec<&str> = m.hosts.keys().map(String::as_str).collect();
    vec![
        name,
        m.playbook.name.clone(),
        hosts.join(", "),
        status_text(m),
        m.started_at.format("%Y-%m-%d %H:%M").to_string(),
        m.attempts().to_string(),
        m.label.clone().unwrap_or_default(),
    ]
}

/// The run's status in a word, `interrupted` for a run whose rigrun is gone while it ran.
fn status_text(m: &Manifest) -> String {
    match (m.status, m.abandoned) {
        (Status::Running, true) => "interrupted (its rigrun is gone)".into(),
        (status, _) => serde_json::to_value(status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
    }
}
