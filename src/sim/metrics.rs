//! `/metrics` of the simulated server: its state under vLLM's or SGLang's Prometheus names
//! (`--metrics-names`), so tools that read either server's metrics read the sim's. One line of
//! [`LINES`] per metric: a new counter of the scheduler is one line here.

use std::fmt::Write as _;

use super::scheduler::Stats;

/// Whose metric names the sim uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Names {
    #[default]
    Vllm,
    Sglang,
}

/// What the exposition reads: the scheduler's stats and the KV cache's size.
pub struct State {
    pub stats: Stats,
    pub kv_capacity: u64,
}

type Value = fn(&State) -> f64;

/// vLLM's name, SGLang's (None where one of them has no such metric), the type, the value.
const LINES: &[(Option<&str>, Option<&str>, &str, Value)] = &[
    (
        Some("vllm:num_requests_running"),
        Some("sglang:num_running_reqs"),
        "gauge",
        |s| s.stats.running as f64,
    ),
    (
        Some("vllm:num_requests_waiting"),
        Some("sglang:num_queue_reqs"),
        "gauge",
        |s| s.stats.waiting as f64,
    ),
    (
        Some("rigrun_sim:kv_cache_used_tokens"),
        Some("rigrun_sim:kv_cache_used_tokens"),
        "gauge",
        |s| s.stats.kv_used_tokens as f64,
    ),
    (
        Some("vllm:kv_cache_usage_perc"),
        Some("sglang:token_usage"),
        "gauge",
        |s| s.stats.kv_used_tokens as f64 / s.kv_capacity.max(1) as f64,
    ),
    (
        Some("vllm:prompt_tokens_total"),
        Some("sglang:prompt_tokens_total"),
        "counter",
        |s| s.stats.prompt_tokens_total as f64,
    ),
    (Some("vllm:prefix_cache_queries_total"), None, "counter", |s| {
        s.stats.prompt_tokens_total as f64
    }),
    (Some("vllm:prefix_cache_hits_total"), None, "counter", |s| {
        s.stats.cached_prompt_tokens_total as f64
    }),
    // SGLang's is a recent rate; the sim's is since it started.
    (None, Some("sglang:cache_hit_rate"), "gauge", |s| {
        s.stats.cached_prompt_tokens_total as f64 / s.stats.prompt_tokens_total.max(1) as f64
    }),
    (
        Some("vllm:generation_tokens_total"),
        Some("sglang:generation_tokens_total"),
        "counter",
        |s| s.stats.generation_tokens_total as f64,
    ),
    (Some("vllm:request_success_total"), None, "counter", |s| {
        s.stats.requests_finished_total as f64
    }),
    // SGLang retracts what vLLM preempts.
    (
        Some("vllm:num_preemptions_total"),
        Some("sglang:num_retracted_requests_total"),
        "counter",
        |s| s.stats.preemptions_total as f64,
    ),
];

/// The Prometheus text for `state` under `names`, every series labelled with the model.
pub fn exposition(names: Names, state: &State, model: &str) -> String {
    let label = format!("{{model_name={}}}", serde_json::Value::from(model));
    let mut text = String::new();
    for (vllm, sglang, kind, value) in LINES {
        let name = match names {
            Names::Vllm => vllm,
            Names::Sglang => sglang,
        };
        if let Some(name) = name {
            let _ = writeln!(text, "# TYPE {name} {kind}\n{name}{label} {}", value(state));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{prometheus, server};

    #[test]
    fn both_servers_names_read_back_as_the_same_quantities() {
        let state = State {
            stats: Stats {
                running: 3,
                waiting: 2,
                kv_used_tokens: 50,
                preemptions_total: 4,
                ..Stats::default()
            },
            kv_capacity: 200,
        };
        for (names, server) in [(Names::Vllm, "vLLM"), (Names::Sglang, "SGLang")] {
            let (samples, bad) = prometheus::parse(&exposition(names, &state, "m\"x"));
            assert!(bad.is_empty(), "{bad:?}");
            assert_eq!(server::server_of(&samples), Some(server));
            let read = server::read(0.0, &samples).values;
            assert_eq!(read[&server::Quantity::Running], 3.0, "{names:?}");
            assert_eq!(read[&server::Quantity::Waiting], 2.0, "{names:?}");
            assert_eq!(read[&server::Quantity::KvUsage], 0.25, "{names:?}");
            assert_eq!(read[&server::Quantity::Preemptions], 4.0, "{names:?}");
        }
    }
}
