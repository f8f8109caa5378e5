//! When what the GPUs and the server did says a point's numbers cannot be trusted: each problem
//! names the metric and its value, and goes into the record's `problems` (marking it invalid,
//! as the benchmark's own problems do). The thresholds are here, and in the README.

use serde_json::{Map, Value as Json};

use crate::point::{self, Values};

/// Prefix-cache hits serving at least this share of prompt tokens: prefill was not measured.
pub const PREFIX_HIT_LIMIT: f64 = 0.5;
/// Speculative decoding accepting less than this share of drafted tokens: the prompts defeat
/// the drafter, and the throughput is that of a server paying for drafts it throws away.
pub const SPEC_ACCEPT_FLOOR: f64 = 0.05;
/// A mean accepted length (the step's own token counted) below this, where the server gives no
/// acceptance rate (older SGLang): the same as an acceptance near zero.
pub const SPEC_LENGTH_FLOOR: f64 = 1.05;
/// The fewest scrapes inside a point before its peak of running requests is judged: a short
/// point seen only before and after would look idle.
pub const MIN_SCRAPES_FOR_PEAK: f64 = 4.0;

/// What a point says of itself, by its matrix values: the requests it sends at once (see
/// [`point::concurrency`]), and whether it measures prefill.
#[derive(Debug, Clone, Default)]
pub struct Claims {
    point: Values,
}

impl Claims {
    /// From the point's matrix values (`concurrency`, `input_len`).
    pub fn of(point: &Values) -> Claims {
        Claims { point: point.clone() }
    }

    /// Whether the point measures prefill: its sweep varies `input_len`, as long-context
    /// sweeps do.
    fn measures_prefill(&self) -> bool {
        self.point.contains_key("input_len")
    }
}

/// The problems the telemetry in `m` (a record's metrics, telemetry merged) shows for a point
/// that claims `claims`.
pub fn problems(m: &Map<String, Json>, claims: Claims) -> Vec<String> {
    let get = |name: &str| m.get(name).and_then(Json::as_f64);
    let concurrency = point::concurrency(&claims.point, m);
    let mut out = Vec::new();
    if let Some(n) = get("server_preemptions").filter(|n| *n > 0.0) {
        out.push(format!(
            "server_preemptions = {n}: the server preempted requests during the point (its KV cache \
             overflowed), so they were recomputed and timings include that"
        ));
    }
    if let Some(n) = get("server_retracted_peak").filter(|n| *n > 0.0) {
        out.push(format!(
            "server_retracted_peak = {n}: the server retracted requests for lack of KV cache during \
             the point"
        ));
    }
    // Scrapes are instants: between two short requests the server runs none. Only requests
    // seen waiting in its queue show that it held them back (where it reports a queue).
    let queued = get("server_waiting_peak").is_none_or(|w| w > 0.0);
    if let (Some(peak), Some(c), Some(scrapes)) =
        (get("server_running_peak"), concurrency, get("server_scrapes"))
    {
        if scrapes >= MIN_SCRAPES_FOR_PEAK && peak < c && queued {
            out.push(format!(
                "server_running_peak = {peak} < concurrency {c}: the server never ran as many requests \
                 as the point sent at once (the rest waited in its queue)"
            ));
        }
    }
    if let Some(reasons) = m.get("gpu_throttle_reasons").and_then(Json::as_str) {
        out.push(format!(
            "gpu_throttle_reasons = {reasons}: a GPU was held back by power or heat during the window"
        ));
    }
    let decode_only = m
        .get("workload_note")
        .and_then(Json::as_str)
        .is_some_and(|n| n.starts_with("decode-throughput test"));
    let decode_only = decode_only || !claims.measures_prefill();
    if let Some(rate) = get("server_prefix_cache_hit_rate").filter(|r| *r >= PREFIX_HIT_LIMIT) {
        if !decode_only {
            out.push(format!(
                "server_prefix_cache_hit_rate = {rate}: prefix-cache hits served most of the prompt \
                 tokens, so prefill (TTFT, input throughput) was mostly not measured"
            ));
        }
    }
    match (
        get("server_spec_acceptance_rate"),
        get("server_spec_accepted_length"),
    ) {
        (Some(rate), _) if rate < SPEC_ACCEPT_FLOOR => out.push(format!(
            "server_spec_acceptance_rate = {rate}: speculative decoding accepted almost no drafted \
             tokens (prompts that defeat the drafter)"
        )),
        // 0 is what a server without speculative decoding reports.
        (None, Some(length)) if length > 0.0 && length < SPEC_LENGTH_FLOOR => out.push(format!(
            "server_spec_accepted_length = {length}: speculative decoding accepted almost no drafted \
             tokens (prompts that defeat the drafter)"
        )),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A point of a sweep over input lengths at `concurrency`.
    fn long_context(concurrency: u64) -> Claims {
        let point = json!({"concurrency": concurrency, "input_len": 1000});
        Claims::of(&point.as_object().unwrap().clone().into_iter().collect())
    }

    fn metrics(v: Json) -> Map<String, Json> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_problem_names_its_metric_and_value() {
        let m = metrics(json!({
            "server_preemptions": 3.0, "server_running_peak": 8.0, "server_scrapes": 5.0,
            "server_waiting_peak": 8.0,
            "gpu_throttle_reasons": "gpu0:sw_power_cap", "server_prefix_cache_hit_rate": 0.9,
            "server_spec_acceptance_rate": 0.01,
        }));
        let claims = long_context(16);
        let p = problems(&m, claims.clone());
        assert_eq!(p.len(), 5, "{p:#?}");
        assert!(p[0].starts_with("server_preemptions = 3"), "{p:#?}");
        assert!(
            p[1].starts_with("server_running_peak = 8 < concurrency 16"),
            "{p:#?}"
        );
        assert!(p[2].contains("gpu0:sw_power_cap"), "{p:#?}");
        assert!(p[3].starts_with("server_prefix_cache_hit_rate = 0.9"), "{p:#?}");
        assert!(p[4].starts_with("server_spec_acceptance_rate = 0.01"), "{p:#?}");
    }

    #[test]
    fn healthy_points_short_points_and_decode_tests_pass() {
        let m = metrics(json!({
            "server_preemptions": 0.0, "server_running_peak": 2.0, "server_scrapes": 2.0,
            "server_prefix_cache_hit_rate": 0.99, "server_spec_acceptance_rate": 0.6,
            "workload_note": "decode-throughput test: every request sends the same prompt",
        }));
        let claims = long_context(16);
        assert!(problems(&m, claims.clone()).is_empty());
        // Scrapes that fell between short requests: none running, none waiting.
        let between =
            metrics(json!({"server_running_peak": 0.0, "server_waiting_peak": 0.0, "server_scrapes": 5.0}));
        assert!(problems(&between, claims.clone()).is_empty());
        let sglang = metrics(json!({"server_spec_accepted_length": 1.01}));
        assert!(problems(&sglang, claims.clone())[0].starts_with("server_spec_accepted_length = 1.01"));
        let off = metrics(json!({"server_spec_accepted_length": 0.0}));
        assert!(
            problems(&off, claims).is_empty(),
            "no speculative decoding, nothing to judge"
        );
        let catid = metrics(json!({"server_prefix_cache_hit_rate": 0.99}));
        assert!(
            problems(&catid, Claims::default()).is_empty(),
            "a sweep of one input length measures decode"
        );
    }
}
