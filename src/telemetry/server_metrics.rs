//! The inference server's own counters, read from its Prometheus `/metrics`: which of vLLM's,
//! SGLang's and llama.cpp's names mean what ([`NAMES`]: one line per name, so a server's new
//! metric is one line), one scrape read into [`Quantity`] values, and a point's scrapes folded
//! into deltas (counters) and peaks (gauges).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value as Json};

use super::prometheus;

/// What rigrun reads from a server, whatever its names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    Running,
    Waiting,
    /// Requests preempted (vLLM), a counter.
    Preemptions,
    /// Requests retracted for lack of KV cache (SGLang), a gauge.
    Retracted,
    /// KV cache in use, 0..1.
    KvUsage,
    PromptTokens,
    GenerationTokens,
    /// Prompt tokens looked up in the prefix cache, and those found (vLLM, counters).
    PrefixQueries,
    PrefixHits,
    /// The prefix cache's hit rate, 0..1 (SGLang, a gauge).
    PrefixHitRate,
    /// Speculative decoding: drafts proposed, tokens drafted, tokens accepted (vLLM, counters).
    SpecDrafts,
    SpecDraftTokens,
    SpecAcceptedTokens,
    /// Speculative decoding's acceptance rate (0..1) and mean accepted length, as gauges.
    SpecAcceptRate,
    SpecAcceptLength,
}

/// How a quantity's samples combine and what a point keeps of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Summed over series; the point keeps its increase.
    Counter,
    /// Summed over series (requests of several engines add up); the point keeps its peak.
    Gauge,
    /// A ratio: the largest series; the point keeps its peak or mean.
    Ratio,
}

/// Server metric names by quantity, the first present winning (newer names first).
pub const NAMES: &[(Quantity, &str)] = &[
    (Quantity::Running, "vllm:num_requests_running"),
    (Quantity::Running, "sglang:num_running_reqs"),
    (Quantity::Running, "llamacpp:requests_processing"),
    (Quantity::Waiting, "vllm:num_requests_waiting"),
    (Quantity::Waiting, "sglang:num_queue_reqs"),
    (Quantity::Waiting, "llamacpp:requests_deferred"),
    (Quantity::Preemptions, "vllm:num_preemptions_total"),
    (Quantity::Preemptions, "vllm:num_preemptions"),
    // SGLang retracts requests when its KV cache runs out, as vLLM preempts them.
    (Quantity::Preemptions, "sglang:num_retracted_requests_total"),
    (Quantity::Retracted, "sglang:num_retracted_reqs"),
    (Quantity::KvUsage, "vllm:kv_cache_usage_perc"),
    (Quantity::KvUsage, "vllm:gpu_cache_usage_perc"),
    (Quantity::KvUsage, "sglang:token_usage"),
    (Quantity::KvUsage, "llamacpp:kv_cache_usage_ratio"),
    (Quantity::PromptTokens, "vllm:prompt_tokens_total"),
    (Quantity::PromptTokens, "sglang:prompt_tokens_total"),
    (Quantity::PromptTokens, "llamacpp:prompt_tokens_total"),
    (Quantity::GenerationTokens, "vllm:generation_tokens_total"),
    (Quantity::GenerationTokens, "sglang:generation_tokens_total"),
    (Quantity::GenerationTokens, "llamacpp:tokens_predicted_total"),
    (Quantity::PrefixQueries, "vllm:prefix_cache_queries_total"),
    (Quantity::PrefixQueries, "vllm:gpu_prefix_cache_queries_total"),
    (Quantity::PrefixHits, "vllm:prefix_cache_hits_total"),
    (Quantity::PrefixHits, "vllm:gpu_prefix_cache_hits_total"),
    (Quantity::PrefixHitRate, "sglang:cache_hit_rate"),
    (Quantity::SpecDrafts, "vllm:spec_decode_num_drafts_total"),
    (
        Quantity::SpecDraftTokens,
        "vllm:spec_decode_num_draft_tokens_total",
    ),
    (
        Quantity::SpecAcceptedTokens,
        "vllm:spec_decode_num_accepted_tokens_total",
    ),
    (Quantity::SpecAcceptRate, "vllm:spec_decode_draft_acceptance_rate"),
    (Quantity::SpecAcceptRate, "sglang:spec_accept_rate"),
    (Quantity::SpecAcceptLength, "sglang:spec_accept_length"),
];

/// The servers whose names [`NAMES`] knows, by the prefix of their metric names.
pub const SERVERS: &[(&str, &str)] = &[
    ("vllm:", "vLLM"),
    ("sglang:", "SGLang"),
    ("llamacpp:", "llama.cpp"),
];

impl Quantity {
    fn kind(self) -> Kind {
        use Quantity::*;
        match self {
            Running | Waiting | Retracted => Kind::Gauge,
            KvUsage | PrefixHitRate | SpecAcceptRate | SpecAcceptLength => Kind::Ratio,
            Preemptions | PromptTokens | GenerationTokens | PrefixQueries | PrefixHits | SpecDrafts
            | SpecDraftTokens | SpecAcceptedTokens => Kind::Counter,
        }
    }
}

/// One scrape: when (Unix seconds, this machine's clock) and the quantities the server reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scrape {
    pub t: f64,
    pub values: BTreeMap<Quantity, f64>,
}

/// The server a scrape's names come from (`vLLM`), if rigrun knows it.
pub fn server_of(samples: &[prometheus::MetricSample]) -> Option<&'static str> {
    SERVERS
        .iter()
        .find(|(prefix, _)| samples.iter().any(|s| s.name.starts_with(prefix)))
        .map(|(_, name)| *name)
}

/// The quantities in one `/metrics` reply.
pub fn read(t: f64, samples: &[prometheus::MetricSample]) -> Scrape {
    let mut values = BTreeMap::new();
    for (quantity, name) in NAMES {
        if values.contains_key(quantity) {
            continue;
        }
        let value = match quantity.kind() {
            Kind::Ratio => prometheus::max(samples, name),
            Kind::Counter | Kind::Gauge => prometheus::total(samples, name),
        };
        if let Some(v) = value.filter(|v| v.is_finite()) {
            values.insert(*quantity, v);
        }
    }
    Scrape { t, values }
}

/// A point's server metrics from its scrapes, first (before the point) to last (at its
/// record): peaks of gauges, increases of counters (None when a counter went down: the server
/// restarted), rates from those, and how many scrapes there were.
pub fn summarize(scrapes: &[Scrape]) -> Map<String, Json> {
    let mut m = Map::new();
    let (Some(first), Some(last)) = (scrapes.first(), scrapes.last()) else {
        return m;
    };
    let delta = |q: Quantity| {
        let d = last.values.get(&q)? - first.values.get(&q)?;
        (d >= 0.0).then_some(d)
    };
    let peak = |q: Quantity| {
        scrapes
            .iter()
            .filter_map(|s| s.values.get(&q).copied())
            .reduce(f64::max)
    };
    let mean = |q: Quantity| {
        let v: Vec<f64> = scrapes.iter().filter_map(|s| s.values.get(&q).copied()).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let hits = ratio(delta(Quantity::PrefixHits), delta(Quantity::PrefixQueries));
    let drafted = delta(Quantity::SpecDraftTokens);
    let accepted = delta(Quantity::SpecAcceptedTokens);
    // vLLM's mean acceptance length counts the token each step makes anyway.
    let length = ratio(accepted, delta(Quantity::SpecDrafts)).map(|r| r + 1.0);
    // Counts are whole numbers (servers print them as floats); ratios keep 4 decimals.
    let (count, rate) = (0, 4);
    let metrics = [
        ("server_scrapes", Some(scrapes.len() as f64), count),
        ("server_running_peak", peak(Quantity::Running), count),
        ("server_waiting_peak", peak(Quantity::Waiting), count),
        ("server_kv_cache_usage_peak", peak(Quantity::KvUsage), rate),
        ("server_preemptions", delta(Quantity::Preemptions), count),
        ("server_retracted_peak", peak(Quantity::Retracted), count),
        ("server_prompt_tokens", delta(Quantity::PromptTokens), count),
        (
            "server_generation_tokens",
            delta(Quantity::GenerationTokens),
            count,
        ),
        (
            "server_prefix_cache_hit_rate",
            hits.or_else(|| mean(Quantity::PrefixHitRate)),
            rate,
        ),
        (
            "server_spec_acceptance_rate",
            ratio(accepted, drafted).or_else(|| mean(Quantity::SpecAcceptRate)),
            rate,
        ),
        (
            "server_spec_accepted_length",
            length.or_else(|| mean(Quantity::SpecAcceptLength)),
            rate,
        ),
        ("server_spec_draft_tokens", drafted, count),
    ];
    for (name, value, digits) in metrics {
        if let Some(v) = value {
            m.insert(name.into(), super::number(v, digits));
        }
    }
    m
}

/// `a / b`, when both are known and `b` is not zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scrape(t: f64, text: &str) -> Scrape {
        let (samples, bad) = prometheus::parse(text);
        assert!(bad.is_empty(), "{bad:?}");
        read(t, &samples)
    }

    #[test]
    fn vllm_counters_become_deltas_and_gauges_peaks() {
        let before = scrape(
            0.0,
            "vllm:num_requests_running{model_name=\"m\"} 0\nvllm:num_preemptions_total 2\n\
             vllm:prefix_cache_queries_total 1000\nvllm:prefix_cache_hits_total 0\n\
             vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n\
             vllm:spec_decode_num_accepted_tokens_total 20\nvllm:kv_cache_usage_perc 0.1\n",
        );
        let during = scrape(
            1.0,
            "vllm:num_requests_running 12\nvllm:kv_cache_usage_perc 0.97\n",
        );
        let after = scrape(
            2.0,
            "vllm:num_requests_running 3\nvllm:num_preemptions_total 5\n\
             vllm:prefix_cache_queries_total 3000\nvllm:prefix_cache_hits_total 1500\n\
             vllm:spec_decode_num_drafts_total 110\nvllm:spec_decode_num_draft_tokens_total 330\n\
             vllm:spec_decode_num_accepted_tokens_total 170\nvllm:kv_cache_usage_perc 0.2\n",
        );
        let m = summarize(&[before, during, after]);
        assert_eq!(m["server_running_peak"], json!(12));
        assert_eq!(m["server_kv_cache_usage_peak"], json!(0.97));
        assert_eq!(m["server_preemptions"], json!(3));
        assert_eq!(m["server_prefix_cache_hit_rate"], json!(0.75));
        assert_eq!(m["server_spec_acceptance_rate"], json!(0.5));
        assert_eq!(m["server_spec_accepted_length"], json!(2.5));
        assert_eq!(m["server_scrapes"], json!(3));
    }

    #[test]
    fn sglang_gauges_and_a_restarted_server() {
        let a = scrape(
            0.0,
            "sglang:num_running_reqs{name=\"m\"} 4\nsglang:cache_hit_rate 0.5\n\
             sglang:spec_accept_length 1.2\nsglang:prompt_tokens_total 100\n",
        );
        let b = scrape(
            1.0,
            "sglang:num_running_reqs 8\nsglang:cache_hit_rate 0.7\nsglang:spec_accept_length 1.4\n\
             sglang:prompt_tokens_total 10\n",
        );
        let m = summarize(&[a, b]);
        assert_eq!(m["server_running_peak"], json!(8));
        assert_eq!(m["server_prefix_cache_hit_rate"], json!(0.6));
        assert_eq!(m["server_spec_accepted_length"], json!(1.3));
        assert!(
            !m.contains_key("server_prompt_tokens"),
            "a counter that fell is not a delta"
        );
    }

    #[test]
    fn knows_servers_by_their_names_only() {
        let (samples, _) = prometheus::parse("llamacpp:requests_processing 1\n");
        assert_eq!(server_of(&samples), Some("llama.cpp"));
        let (samples, _) = prometheus::parse("process_cpu_seconds_total 1\n");
        assert_eq!(server_of(&samples), None);
        assert!(read(0.0, &samples).values.is_empty());
    }
}
