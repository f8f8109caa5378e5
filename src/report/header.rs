//! What each table measured: per host, its labels, GPUs and how they are linked, CPU, memory,
//! system, and the inference server's engine, version and launch arguments. Printed above every
//! human-readable table and in the HTML report.

use serde_json::Value as Json;

use crate::facts::{Allocation, Gpu, HostFacts as Facts, ServerFacts, ServerReply};
use crate::point::value_text;
use crate::store::{HostEntry, Manifest};

/// Launch arguments worth a place in the one-line summary, in this order (SGLang, vLLM and
/// llama.cpp spellings); the report lists all of them.
const KEY_ARGS: &[&str] = &[
    "model_path",
    "tp_size",
    "tensor_parallel_size",
    "pp_size",
    "dp_size",
    "ep_size",
    "quantization",
    "kv_cache_dtype",
    "context_length",
    "max_model_len",
    "max_running_requests",
    "max_num_seqs",
    "mem_fraction_static",
    "gpu_memory_utilization",
    "chunked_prefill_size",
    "attention_backend",
    "n_ctx",
    "total_slots",
];

/// The facts of one host in one run.
pub struct HostHeader {
    pub host: String,
    /// `gpu: 8x RTX PRO 6000, model: …`.
    pub labels: String,
    /// (what, summary) lines: GPUs, GPU links, CPU, system, server.
    pub lines: Vec<(String, String)>,
    /// `nvidia-smi topo -m`, when the host has it.
    pub topology: Option<String>,
    /// Everything the server said about how it was launched.
    pub launch_args: Option<serde_json::Map<String, Json>>,
}

/// The facts of every host of one run.
pub struct RunFacts {
    pub run_id: String,
    /// The user's note on the run (`run --label`).
    pub label: Option<String>,
    pub hosts: Vec<HostHeader>,
}

/// The facts of the hosts of each run, in order.
pub struct Header {
    pub runs: Vec<RunFacts>,
}

impl Header {
    pub fn new(manifests: &[&Manifest]) -> Header {
        let runs = manifests
            .iter()
            .map(|m| RunFacts {
                run_id: m.run_id.clone(),
                label: m.label.clone(),
                hosts: m.hosts.iter().map(|(h, e)| host_facts(h, e)).collect(),
            })
            .collect();
        Header { runs }
    }

    /// Lines for the terminal: `host: labels`, then indented `what: summary` lines. Runs get a
    /// heading of their own when there are several.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for run in &self.runs {
            let label = run.label.as_ref().map(|l| format!(" ({l})")).unwrap_or_default();
            match (self.runs.len(), &run.label) {
                (1, None) => {}
                (1, Some(l)) => lines.push(format!("label: {l}")),
                _ => lines.push(format!("run {}{label}", run.run_id)),
            }
            for host in &run.hosts {
                lines.push(match host.labels.is_empty() {
                    true => host.host.clone(),
                    false => format!("{}: {}", host.host, host.labels),
                });
                lines.extend(host.lines.iter().map(|(k, v)| format!("  {k}: {v}")));
            }
        }
        lines
    }
}

fn host_facts(host: &str, entry: &HostEntry) -> HostHeader {
    let facts = &entry.facts;
    let mut lines = Vec::new();
    if let Some(gpus) = gpu_line(facts) {
        lines.push(("GPUs".to_string(), gpus));
    }
    if let Some(links) = &facts.gpu_interconnect {
        lines.push(("GPU links".to_string(), links.clone()));
    }
    if let Some(cpu) = cpu_line(facts) {
        lines.push(("CPU".to_string(), cpu));
    }
    let system: Vec<String> = [&facts.hostname, &facts.os, &facts.kernel, &facts.arch]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    if !system.is_empty() {
        lines.push(("system".to_string(), system.join(", ")));
    }
    if let Some(allocation) = &facts.allocation {
        lines.push(("Slurm".to_string(), allocation_line(allocation)));
    }
    let server = server_facts(entry);
    match variant_facts(entry) {
        // Each variant's server says how it was launched, which is what differs between them.
        variants if !variants.is_empty() && !verified(entry) => {
            for (label, facts) in variants {
                lines.push((format!("server {label}"), server_line(&facts)));
            }
        }
        _ => {
            if let Some(summary) = server.as_ref().map(server_line) {
                lines.push(("server".to_string(), summary));
            }
        }
    }
    HostHeader {
        host: host.to_string(),
        labels: entry
            .labels
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        lines,
        topology: facts.gpu_topology.clone(),
        launch_args: server.and_then(|s| s.launch_args),
    }
}

/// `8× NVIDIA RTX PRO 6000 (97887 MiB, power limit 600.00 W), driver 575.57.08`; GPUs of
/// different kinds are counted separately; without GPUs, what nvidia-smi said.
/// `job 4242 on node gpu07, asked from login1`: which allocation the facts above are of.
fn allocation_line(allocation: &Allocation) -> String {
    let from = allocation.login_node.as_deref();
    format!(
        "job {} on node {}{}",
        allocation.job_id,
        allocation.node,
        from.map(|l| format!(", asked from {l}")).unwrap_or_default()
    )
}

fn gpu_line(facts: &Facts) -> Option<String> {
    if facts.gpus.is_empty() {
        return match facts.nvidia_smi.as_deref() {
            Some("absent") => Some("none found (nvidia-smi absent)".to_string()),
            Some(other) if other != "present" => Some(format!("unknown (nvidia-smi {other})")),
            _ => None,
        };
    }
    let mut kinds: Vec<(String, usize)> = Vec::new();
    let mut drivers: Vec<&str> = Vec::new();
    for gpu in &facts.gpus {
        let (kind, driver) = gpu_kind(gpu);
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
        if let Some(d) = driver.filter(|d| !drivers.contains(d)) {
            drivers.push(d);
        }
    }
    let mut line: Vec<String> = kinds.iter().map(|(k, n)| format!("{n}× {k}")).collect();
    if !drivers.is_empty() {
        line.push(format!("driver {}", drivers.join(", ")));
    }
    let source = facts.gpu_source.as_ref().map(|s| format!(" (from the {s})"));
    Some(line.join(", ") + &source.unwrap_or_default())
}

/// One GPU as `name (memory, power limit …)`, and its driver.
fn gpu_kind(gpu: &Gpu) -> (String, Option<&str>) {
    let name = Some(gpu.name.as_str()).filter(|n| !n.is_empty()).unwrap_or("GPU");
    let details: Vec<String> = [
        field(&gpu.memory).map(str::to_string),
        field(&gpu.power_limit).map(|p| format!("power limit {p}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    let kind = match details.is_empty() {
        true => name.to_string(),
        false => format!("{name} ({})", details.join(", ")),
    };
    (kind, field(&gpu.driver))
}

/// A field that is present and not empty.
pub(super) fn field(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// `AMD EPYC 9555 64-Core Processor, 128 threads, 1.5 TiB memory`.
fn cpu_line(facts: &Facts) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(cpu) = &facts.cpu {
        parts.push(cpu.clone());
    }
    if let Some(n) = facts.cpus {
        parts.push(format!("{n} threads"));
    }
    if let Some(kib) = facts.memory_kib {
        parts.push(format!("{} memory", memory(kib)));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// `23.5 GiB` or `1.5 TiB`.
pub(super) fn memory(kib: u64) -> String {
    let gib = kib as f64 / (1024.0 * 1024.0);
    if gib >= 1024.0 {
        format!("{:.1} TiB", gib / 1024.0)
    } else {
        format!("{gib:.1} GiB")
    }
}

/// What the host's server said of itself: at its checks (`verify-server`), the latest first,
/// then at each server variant's start, in order.
pub(super) fn server_replies(entry: &HostEntry) -> impl Iterator<Item = &ServerReply> {
    entry
        .server_checks()
        .chain(entry.variant_servers().map(|(_, reply)| reply))
}

/// The server facts the host's server gave (the latest check that recorded any, else its first
/// server variant that did).
pub(super) fn server_facts(entry: &HostEntry) -> Option<ServerFacts> {
    server_replies(entry).find_map(|r| r.facts.clone())
}

/// Whether a check of the host's server recorded what it said of itself.
fn verified(entry: &HostEntry) -> bool {
    entry.server_checks().any(|r| r.facts.is_some())
}

/// Each server variant's facts, by its label, where its startup recorded them.
fn variant_facts(entry: &HostEntry) -> Vec<(String, ServerFacts)> {
    let variants = entry.variant_servers();
    variants
        .filter_map(|(label, r)| Some((label.to_string(), r.facts.clone()?)))
        .collect()
}

/// `sglang 0.4.6, tp_size=8, quantization=modelopt_fp4` or `rigrun (no version reported)`.
fn server_line(facts: &ServerFacts) -> String {
    let engine = facts.engine.as_deref().unwrap_or("server");
    let mut line = match &facts.version {
        Some(v) => format!("{engine} {v}"),
        None => format!("{engine} (no version reported)"),
    };
    if let Some(args) = &facts.launch_args {
        let shown: Vec<String> = KEY_ARGS
            .iter()
            .filter_map(|k| args.get(*k).filter(|v| !v.is_null()).map(|v| (k, v)))
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect();
        if !shown.is_empty() {
            line.push_str(", ");
            line.push_str(&shown.join(", "));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gpus_are_counted_by_kind_with_their_driver() {
        let facts = |v: serde_json::Value| serde_json::from_value::<Facts>(v).unwrap();
        let two = facts(json!({"gpus": [
            {"name": "NVIDIA RTX A6000", "memory": "49140 MiB", "driver": "570.86", "power_limit": "300.00 W"},
            {"name": "NVIDIA RTX A6000", "memory": "49140 MiB", "driver": "570.86", "power_limit": "300.00 W"},
        ]}));
        assert_eq!(
            gpu_line(&two).unwrap(),
            "2× NVIDIA RTX A6000 (49140 MiB, power limit 300.00 W), driver 570.86"
        );
        assert_eq!(
            gpu_line(&facts(json!({"nvidia_smi": "absent"}))).unwrap(),
            "none found (nvidia-smi absent)"
        );
        assert_eq!(
            gpu_line(&facts(json!({"gpus": ["NVIDIA A100, 80 GB"]}))).unwrap(),
            "1× NVIDIA A100"
        );
        assert_eq!(gpu_line(&Facts::default()), None);
        let from_dcgm = facts(
            json!({"nvidia_smi": "absent", "gpu_source": "DCGM exporter http://h:9400/metrics",
            "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB"}]}),
        );
        assert_eq!(
            gpu_line(&from_dcgm).unwrap(),
            "1× NVIDIA H100 80GB HBM3 (81559 MiB) (from the DCGM exporter http://h:9400/metrics)"
        );
    }

    #[test]
    fn the_server_line_names_engine_version_and_key_arguments() {
        let f = json!({"engine": "sglang", "version": "0.4.6", "launch_args": {"tp_size": 8, "model_path": "Qwen/Q", "log_level": "info"}});
        let f: ServerFacts = serde_json::from_value(f).unwrap();
        assert_eq!(server_line(&f), "sglang 0.4.6, model_path=Qwen/Q, tp_size=8");
        let bare = ServerFacts {
            engine: Some("rigrun".into()),
            ..ServerFacts::default()
        };
        assert_eq!(server_line(&bare), "rigrun (no version reported)");
    }

    #[test]
    fn a_slurm_allocation_names_its_job_node_and_login_node() {
        let mut allocation = Allocation {
            job_id: "4242".into(),
            node: "gpu07".into(),
            login_node: Some("login1".into()),
        };
        assert_eq!(
            allocation_line(&allocation),
            "job 4242 on node gpu07, asked from login1"
        );
        allocation.login_node = None;
        assert_eq!(allocation_line(&allocation), "job 4242 on node gpu07");
    }

    #[test]
    fn memory_reads_in_gib_or_tib() {
        assert_eq!(memory(8 * 1024 * 1024), "8.0 GiB");
        assert_eq!(memory(1536 * 1024 * 1024), "1.5 TiB");
    }
}
