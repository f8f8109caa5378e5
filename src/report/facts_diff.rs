//! What differs between the columns a report compares: the hosts of one run, or one host across
//! runs. Each column's facts (its labels, GPUs, driver, server and how it was launched, system,
//! CPU, memory) are lined up by name; only the facts whose values differ are kept with a value
//! per column, and the names of the identical ones are listed once, so a reader sees first what
//! could explain a difference in the tables and is not shown the same value twice.
//!
//! The facts are the ones the run recorded (`HostFacts` when the host connected, and the
//! `ServerReply` of its server: served models, context length, `ServerFacts`): the CUDA version
//! and the model's revision are not among them unless the server reports them in its launch
//! arguments.

use std::collections::BTreeSet;

use super::header::{field, memory, server_facts, server_replies};
use super::Run;
use crate::point::value_text;
use crate::store::HostEntry;

/// How a fact one column did not record reads.
pub const NOT_RECORDED: &str = "—";

/// One comparison's facts: what is compared, its columns, the facts that differ and the names
/// of the facts every column has with the same value.
#[derive(Clone, Debug, PartialEq)]
pub struct FactsDiff {
    /// `hosts of run 20261201T102538Z-demo` or `host a6000 across runs`.
    pub subject: String,
    /// A host per column (within a run) or a run per column (one host across runs).
    pub columns: Vec<String>,
    pub differ: Vec<Fact>,
    pub same: Vec<String>,
}

/// A fact that differs: its name and its value in each column (`None`: not recorded there).
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    pub name: String,
    pub values: Vec<Option<String>>,
}

impl Fact {
    /// The values as text, [`NOT_RECORDED`] where a column has none.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(|v| v.as_deref().unwrap_or(NOT_RECORDED))
    }
}

impl FactsDiff {
    /// Lines up each column's (name, value) facts by name, in the order first seen: a fact with
    /// the same value in every column goes to `same`, any other (a value differs, or a column
    /// did not record it) to `differ`.
    pub fn new(subject: String, columns: Vec<(String, Vec<(String, String)>)>) -> FactsDiff {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in columns.iter().flat_map(|(_, facts)| facts) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        let (mut differ, mut same) = (Vec::new(), Vec::new());
        for name in names {
            let values: Vec<Option<String>> = columns
                .iter()
                .map(|(_, facts)| facts.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
                .collect();
            match values.iter().all(|v| v.is_some() && *v == values[0]) {
                true => same.push(name.to_string()),
                false => differ.push(Fact {
                    name: name.to_string(),
                    values,
                }),
            }
        }
        FactsDiff {
            subject,
            columns: columns.into_iter().map(|(c, _)| c).collect(),
            differ,
            same,
        }
    }

    /// `the same: engine, kernel, OS` or `no fact differs`, for the line under the facts.
    pub fn same_line(&self) -> String {
        match (self.differ.is_empty(), self.same.is_empty()) {
            (true, true) => "no facts recorded".to_string(),
            (true, false) => format!("all facts the same: {}", self.same.join(", ")),
            (false, true) => "no fact the same".to_string(),
            (false, false) => format!("the same: {}", self.same.join(", ")),
        }
    }
}

/// The hosts of each run, side by side (runs of a single host compare nothing).
pub fn within_runs(runs: &[Run]) -> Vec<FactsDiff> {
    let diff = |run: &Run| {
        let columns = run.manifest.hosts.iter();
        let columns = columns
            .map(|(host, entry)| (host.clone(), facts_of(entry)))
            .collect();
        FactsDiff::new(format!("hosts of run {}", run.manifest.run_id), columns)
    };
    runs.iter()
        .filter(|r| r.manifest.hosts.len() > 1)
        .map(diff)
        .collect()
}

/// Each host across the runs that have it (a host in a single run compares nothing); hosts in
/// the order first seen.
pub fn across_runs(runs: &[Run]) -> Vec<FactsDiff> {
    let mut hosts: Vec<&str> = Vec::new();
    for host in runs.iter().flat_map(|r| r.manifest.hosts.keys()) {
        if !hosts.contains(&host.as_str()) {
            hosts.push(host);
        }
    }
    let diff = |host: &str| {
        let columns: Vec<(String, Vec<(String, String)>)> = runs
            .iter()
            .filter_map(|run| {
                let entry = run.manifest.hosts.get(host)?;
                let mut facts = facts_of(entry);
                facts.extend(super::workload::facts(run, host));
                Some((format!("@{}", run.label(runs)), facts))
            })
            .collect();
        (columns.len() > 1).then(|| FactsDiff::new(format!("host {host} across runs"), columns))
    };
    hosts.into_iter().filter_map(diff).collect()
}

/// A host's facts in one run as (name, value), in the order the diff lists them: labels, GPUs,
/// server, system, CPU, memory. Facts the host did not record are left out.
pub fn facts_of(entry: &HostEntry) -> Vec<(String, String)> {
    let facts = &entry.facts;
    let mut out: Vec<(String, String)> = entry
        .labels
        .iter()
        .map(|(k, v)| (format!("label {k}"), v.clone()))
        .collect();
    let mut push = |name: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            out.push((name.to_string(), v));
        }
    };
    let distinct = |get: fn(&crate::facts::Gpu) -> Option<&str>| {
        let values: BTreeSet<&str> = facts.gpus.iter().filter_map(get).collect();
        (!values.is_empty()).then(|| values.into_iter().collect::<Vec<_>>().join(", "))
    };
    let gpu = match facts.gpus.is_empty() {
        false => distinct(|g| Some(g.name.as_str()).filter(|n| !n.is_empty())),
        true => facts
            .nvidia_smi
            .as_deref()
            .filter(|s| *s != "present")
            .map(|s| format!("none found (nvidia-smi {s})")),
    };
    push("GPU", gpu);
    let count = match facts.gpus.len() {
        0 => facts.gpu_count,
        n => Some(n as u64),
    };
    push("GPU count", count.map(|n| n.to_string()));
    push("GPU memory", distinct(|g| field(&g.memory)));
    push("GPU power limit", distinct(|g| field(&g.power_limit)));
    push("GPU links", facts.gpu_interconnect.clone());
    push("driver", distinct(|g| field(&g.driver)));
    let server = server_facts(entry).unwrap_or_default();
    push("engine", server.engine);
    push("engine version", server.version);
    let reply = server_replies(entry).next();
    push("model", reply.map(|r| r.models.join(", ")));
    let max_len = reply.and_then(|r| r.max_model_len);
    push("max model length", max_len.map(|n| n.to_string()));
    for (name, value) in server.launch_args.iter().flatten() {
        push(&format!("launch {name}"), Some(value_text(value)));
    }
    push("kernel", facts.kernel.clone());
    push("OS", facts.os.clone());
    push("arch", facts.arch.clone());
    push("CPU", facts.cpu.clone());
    push("CPU threads", facts.cpus.map(|n| n.to_string()));
    push("memory", facts.memory_kib.map(memory));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn column(name: &str, facts: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
        let facts = facts.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        (name.to_string(), facts.collect())
    }

    #[test]
    fn identical_facts_are_dropped_and_differing_ones_kept_per_column() {
        let diff = FactsDiff::new(
            "hosts of run r".into(),
            vec![
                column("a", &[("GPU", "A6000"), ("kernel", "Linux 6.8")]),
                column("b", &[("GPU", "B200"), ("kernel", "Linux 6.8")]),
            ],
        );
        assert_eq!(diff.columns, ["a", "b"]);
        assert_eq!(
            diff.differ,
            [Fact {
                name: "GPU".into(),
                values: vec![Some("A6000".into()), Some("B200".into())],
            }]
        );
        assert_eq!(diff.same, ["kernel"]);
        assert_eq!(diff.same_line(), "the same: kernel");
    }

    #[test]
    fn a_fact_one_column_lacks_differs_and_reads_as_not_recorded() {
        let diff = FactsDiff::new(
            "s".into(),
            vec![
                column("a", &[("OS", "Debian 12")]),
                column("b", &[("OS", "Debian 12"), ("driver", "575.57.08")]),
            ],
        );
        assert_eq!(diff.differ.len(), 1);
        let texts: Vec<&str> = diff.differ[0].texts().collect();
        assert_eq!(
            (diff.differ[0].name.as_str(), texts),
            ("driver", vec!["—", "575.57.08"])
        );
        let same = FactsDiff::new(
            "s".into(),
            vec![column("a", &[("OS", "x")]), column("b", &[("OS", "x")])],
        );
        assert_eq!(same.same_line(), "all facts the same: OS");
        assert_eq!(
            FactsDiff::new("s".into(), vec![]).same_line(),
            "no facts recorded"
        );
    }

    #[test]
    fn a_hosts_facts_cover_gpus_server_and_system() {
        let entry: HostEntry = serde_json::from_value(json!({
            "status": "ok",
            "labels": {"gpu": "8x B200"},
            "facts": {"home": "/root", "kernel": "Linux 6.8", "os": "Ubuntu 24.04", "cpus": 64,
                "memory_kib": 8 * 1024 * 1024, "nvidia_smi": "present", "gpus": [
                {"name": "NVIDIA B200", "memory": "183359 MiB", "driver": "575.57.08"},
                {"name": "NVIDIA B200", "memory": "183359 MiB", "driver": "575.57.08"}]},
            "steps": [{"index": 0, "name": "verify", "kind": "verify-server", "status": "ok",
                "started_at": "2026-12-01T10:00:00Z", "finished_at": null,
                "details": {"models": ["Qwen/Q"], "max_model_len": 4096, "server_facts": {
                    "engine": "vllm", "version": "0.9.1", "launch_args": {"tensor_parallel_size": 2}}}}]
        }))
        .unwrap();
        let facts = facts_of(&entry);
        let get = |name: &str| facts.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("label gpu"), Some("8x B200"));
        assert_eq!(get("GPU"), Some("NVIDIA B200"));
        assert_eq!(get("GPU count"), Some("2"));
        assert_eq!(get("driver"), Some("575.57.08"));
        assert_eq!(get("engine"), Some("vllm"));
        assert_eq!(get("engine version"), Some("0.9.1"));
        assert_eq!(get("model"), Some("Qwen/Q"));
        assert_eq!(get("max model length"), Some("4096"));
        assert_eq!(get("launch tensor_parallel_size"), Some("2"));
        assert_eq!(get("memory"), Some("8.0 GiB"));
        assert_eq!(get("CPU"), None, "not recorded, not invented");
    }
}
