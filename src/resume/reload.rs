//! The configuration of a run as it ran, for `rigrun run --resume`: the playbook and inventory
//! kept in run.json, the `-e` values and hosts of the first run; and a refusal when the files
//! have since changed in a way that changes what runs (steps, points, commands).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::Value as Json;

use crate::config::{Builtins, Config, LoadOptions};
use crate::exit::Invalid;
use crate::plan::{self, Plan};
use crate::store::Manifest;

/// At most this many differences are named when the files changed.
const NAMED_CHANGES: usize = 6;

/// The run's configuration as kept in its manifest, checked against the files where they
/// still are: an [`Invalid`] error names what changed when the plan differs.
pub fn config_as_run(manifest: &Manifest) -> Result<Config> {
    let opts = options(manifest);
    let kept = kept(manifest).map_err(|e| {
        Invalid(format!(
            "the playbook and inventory kept in run.json no longer load with this rigrun:\n{e}"
        ))
    })?;
    if !opts.playbook.exists() || !opts.inventory.exists() {
        eprintln!(
            "note: {} or {} is gone; the resume runs the copies kept in run.json",
            opts.playbook.display(),
            opts.inventory.display()
        );
        return Ok(kept);
    }
    let now = Config::load(&opts).map_err(|e| {
        Invalid(format!(
            "{} or {} changed since the run started and no longer loads; restore them as they \
             were (run.json keeps a copy of both) to resume:\n{e}",
            opts.playbook.display(),
            opts.inventory.display()
        ))
    })?;
    let builtins = Builtins {
        run_id: manifest.run_id.clone(),
        rigrun: "rigrun".into(),
    };
    let changes = differences(&plan::build(&kept, &builtins)?, &plan::build(&now, &builtins)?);
    if !changes.is_empty() {
        return Err(Invalid(format!(
            "cannot resume {}: the playbook or inventory changed since the run started, in what \
             runs:\n  {}\nrestore them as they were (run.json keeps a copy of both), or start a \
             new run",
            manifest.run_id,
            changes.join("\n  ")
        ))
        .into());
    }
    if now.playbook_text != kept.playbook_text || now.inventory_text != kept.inventory_text {
        eprintln!(
            "note: the playbook or inventory was edited since the run started, not in what \
             runs; the resume runs them as they were"
        );
    }
    Ok(kept)
}

/// The configuration run.json keeps (its playbook and inventory with the first run's hosts,
/// `-e` values and `--repeat`), whatever the files are now.
pub fn kept(manifest: &Manifest) -> Result<Config, crate::config::ConfigErrors> {
    Config::from_text(
        &options(manifest),
        manifest.playbook.source.clone(),
        manifest.inventory.source.clone(),
    )
}

/// The first run's command line, as its manifest records it.
fn options(manifest: &Manifest) -> LoadOptions {
    let base = manifest.cwd.as_deref().map(Path::new);
    LoadOptions {
        playbook: resolve(base, &manifest.playbook.path),
        inventory: resolve(base, &manifest.inventory.path),
        limit: Some(manifest.hosts.keys().cloned().collect()),
        extra_vars: extra_vars(&manifest.playbook.extra_vars),
        repeat: manifest.playbook.repeat,
        only: manifest.playbook.only.clone(),
    }
}

/// A path as the first run read it: relative to the directory it started in.
fn resolve(base: Option<&Path>, path: &str) -> PathBuf {
    match base {
        Some(base) if Path::new(path).is_relative() => base.join(path),
        _ => PathBuf::from(path),
    }
}

/// The `-e` values back as `KEY=VALUE`; a string is written as a quoted YAML scalar, so that
/// it reads back as the same string (`"2000"` stays text).
fn extra_vars(values: &Json) -> Vec<String> {
    let Some(map) = values.as_object() else {
        return Vec::new();
    };
    map.iter()
        .map(|(key, value)| match value {
            Json::String(s) => format!("{key}={}", Json::from(s.as_str())),
            other => format!("{key}={other}"),
        })
        .collect()
}

/// What differs between the plan as it ran and as it is now, one line per difference.
fn differences(was: &Plan, now: &Plan) -> Vec<String> {
    let mut changes = Vec::new();
    for (old, new) in was.hosts.iter().zip(&now.hosts) {
        let host = &old.host;
        if old.steps.len() != new.steps.len() {
            changes.push(format!(
                "host {host}: the playbook had {} steps, now {}",
                old.steps.len(),
                new.steps.len()
            ));
            continue;
        }
        for (a, b) in old.steps.iter().zip(&new.steps) {
            changes.extend(step_change(a, b).map(|c| format!("host {host}, step {}: {c}", a.index + 1)));
        }
    }
    changes.dedup();
    if changes.len() > NAMED_CHANGES {
        let more = changes.len() - NAMED_CHANGES;
        changes.truncate(NAMED_CHANGES);
        changes.push(format!("and {more} more"));
    }
    changes
}

/// How one step changed, if it did: its kind or name, its points, a point's command, or else
/// its settings.
fn step_change(was: &plan::PlannedStep, now: &plan::PlannedStep) -> Option<String> {
    if (was.kind, &was.name) != (now.kind, &now.name) {
        return Some(format!(
            "was {} `{}`, now {} `{}`",
            was.kind, was.name, now.kind, now.name
        ));
    }
    let labels =
        |s: &plan::PlannedStep| -> Vec<String> { s.action.points().iter().map(|p| p.label()).collect() };
    let (before, after) = (labels(was), labels(now));
    let removed: Vec<&String> = before.iter().filter(|l| !after.contains(l)).collect();
    let added: Vec<&String> = after.iter().filter(|l| !before.contains(l)).collect();
    if !removed.is_empty() || !added.is_empty() {
        return Some(format!(
            "`{}`: its points changed (removed: {}; added: {})",
            was.name,
            list(&removed),
            list(&added)
        ));
    }
    let changed: Vec<String> = was
        .action
        .points()
        .iter()
        .zip(now.action.points())
        .filter(|(a, b)| a.command != b.command || a.skip != b.skip)
        .map(|(a, _)| a.label())
        .collect();
    if !changed.is_empty() {
        return Some(format!(
            "`{}`: the command of {} changed",
            was.name,
            list(&changed.iter().collect::<Vec<_>>())
        ));
    }
    let json = |s: &plan::PlannedStep| serde_json::to_value(&s.action).ok();
    (json(was) != json(now)).then(|| format!("`{}`: its settings changed", was.name))
}

fn list(items: &[&String]) -> String {
    match items.len() {
        0 => "none".into(),
        1..=4 => items.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
        n => format!(
            "{} and {} more",
            items[..3]
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            n - 3
        ),
    }
}
