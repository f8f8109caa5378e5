//! `/metrics` of the simulated server: its state under vLLM's or SGLang's Prometheus names
//! (`--metrics-names`), so tools that read either server's metrics read the sim's. One line of
//! [`LINES`] per metric: a new counter of the scheduler is one line here.

use std::fmt::Write as _;

use super::scheduler::EngineStats;

/// Whose metric names the sim uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Names {
    #[default]
    Vllm,
    Sglang,
}

/// What the exposition reads: the scheduler's stats, the KV cache's size, and whether the sim
/// models speculative decoding (a server without it has no speculative metrics).
pub struct State {
    pub stats: EngineStats,
    pub kv_capacity: u64,
    pub speculative: bool,
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

/// Speculative decoding's, served only when the sim models it: vLLM's counters, SGLang's
/// acceptance rate and accept length (tokens per verify step, the verified one included), both
/// since the sim started.
const SPECULATIVE_LINES: &[(Option<&str>, Option<&str>, &str, Value)] = &[
    (Some("vllm:spec_decode_num_drafts_total"), None, "counter", |s| {
        s.stats.spec_drafts_total as f64
    }),
    (
        Some("vllm:spec_decode_num_draft_tokens_total"),
        None,
        "counter",
        |s| s.stats.spec_draft_tokens_total as f64,
    ),
    (
        Some("vllm:spec_decode_num_accepted_tokens_total"),
        None,
        "counter",
        |s| s.stats.spec_accepted_tokens_total as f64,
    ),
    (None, Some("sglang:spec_accept_rate"), "gauge", |s| {
        s.stats.spec_accepted_tokens_total as f64 / s.stats.spec_draft_tokens_total.max(1) as f64
    }),
    (None, Some("sglang:spec_accept_length"), "gauge", |s| {
        1.0 + s.stats.spec_accepted_tokens_total as f64 / s.stats.spec_drafts_total.max(1) as f64
    }),
];

/// The Prometheus text for `state` under `names`, every series labelled with the model.
pub fn exposition(names: Names, state: &State, model: &str) -> String {
    let label = format!("{{model_name={}}}", serde_json::Value::from(model));
    let mut text = String::new();
    let speculative = if state.speculative { SPECULATIVE_LINES } else { &[] };
    for (vllm, sglang, kind, value) in LINES.iter().chain(speculative) {
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
    use crate::telemetry::{prometheus, server_metrics};

    #[test]
    fn both_servers_names_read_back_as_the_same_quantities() {
        let state = State {
            stats: EngineStats {
                running: 3,
                waiting: 2,
                kv_used_tokens: 50,
                preemptions_total: 4,
                ..EngineStats::default()
            },
            kv_capacity: 200,
            speculative: false,
        };
        for (names, server) in [(Names::Vllm, "vLLM"), (Names::Sglang, "SGLang")] {
            let (samples, bad) = prometheus::parse(&exposition(names, &state, "m\"x"));
            assert!(bad.is_empty(), "{bad:?}");
            assert_eq!(server_metrics::server_of(&samples), Some(server));
            let read = server_metrics::read(0.0, &samples).values;
            assert_eq!(read[&server_metrics::Quantity::Running], 3.0, "{names:?}");
            assert_eq!(read[&server_metrics::Quantity::Waiting], 2.0, "{names:?}");
            assert_eq!(read[&server_metrics::Quantity::KvUsage], 0.25, "{names:?}");
            assert_eq!(read[&server_metrics::Quantity::Preemptions], 4.0, "{names:?}");
        }
    }

    /// Speculative decoding's metrics read back as telemetry reads a real server's: 70 of 100
    /// draft tokens accepted over 50 drafts (2 tokens each) is a rate of 0.7 and an accepted
    /// length of 2.4 under both names; without speculation there are none to misjudge.
    #[test]
    fn speculative_metrics_read_back_as_rate_and_length_and_only_when_speculating() {
        let stats = EngineStats {
            spec_drafts_total: 50,
            spec_draft_tokens_total: 100,
            spec_accepted_tokens_total: 70,
            ..EngineStats::default()
        };
        let at = |speculative, names| {
            let state = State {
                stats,
                kv_capacity: 1,
                speculative,
            };
            prometheus::parse(&exposition(names, &state, "m")).0
        };
        let zero = server_metrics::read(0.0, &at(true, Names::Vllm));
        let before = server_metrics::Scrape {
            t: 0.0,
            values: zero.values.keys().map(|q| (*q, 0.0)).collect(),
        };
        let vllm = server_metrics::summarize(&[before, server_metrics::read(1.0, &at(true, Names::Vllm))]);
        assert_eq!(vllm["server_spec_acceptance_rate"], 0.7, "{vllm:?}");
        assert_eq!(vllm["server_spec_accepted_length"], 2.4, "{vllm:?}");
        let sglang = server_metrics::summarize(&[server_metrics::read(1.0, &at(true, Names::Sglang))]);
        assert_eq!(sglang["server_spec_acceptance_rate"], 0.7, "{sglang:?}");
        assert_eq!(sglang["server_spec_accepted_length"], 2.4, "{sglang:?}");
        for names in [Names::Vllm, Names::Sglang] {
            assert!(!exposition(
                names,
                &State {
                    stats,
                    kv_capacity: 1,
                    speculative: false
                },
                "m"
            )
            .contains("spec"));
        }
    }
}
