//! The request histograms vLLM and SGLang serve on `/metrics` (time to first token, inter-token
//! latency, end-to-end latency, prompt and output lengths), under their names and with their
//! bucket boundaries, so Prometheus-based clients read the sim's as they read the servers'.
//!
//! Boundaries as the engines define them: vLLM's `vllm/v1/metrics/loggers.py` (v0.11),
//! SGLang's `python/sglang/srt/metrics/collector.py` (`TokenizerMetricsCollector`, 2025). Times
//! count from when the HTTP handler received the request (as both servers take the arrival
//! time in their API server) to the step deadline that delivered the token.

use std::fmt::Write as _;
use std::time::Instant;

use super::metrics_endpoint::Names;

/// vLLM's `vllm:time_to_first_token_seconds` buckets.
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's `vllm:inter_token_latency_seconds` and `vllm:request_time_per_output_token_seconds`.
const VLLM_ITL: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
];
/// vLLM's request latency buckets (`vllm:e2e_request_latency_seconds`).
const VLLM_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
];
/// SGLang's `sglang:time_to_first_token_seconds` buckets.
const SGLANG_TTFT: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
];
/// SGLang's `sglang:inter_token_latency_seconds` buckets.
const SGLANG_ITL: &[f64] = &[
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200,
    0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
];
/// SGLang's `sglang:e2e_request_latency_seconds` buckets.
const SGLANG_E2E: &[f64] = &[
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0,
    600.0, 1200.0, 1800.0, 2400.0,
];
/// SGLang's default token-length buckets (`sglang:prompt_tokens_histogram`,
/// `sglang:generation_tokens_histogram`).
const SGLANG_TOKENS: &[f64] = &[
    100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0,
    9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0, 30000.0, 35000.0,
    40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0, 600000.0, 800000.0, 1000000.0,
    1100000.0,
];

/// vLLM's token-length buckets: 1, 2, 5, 10, 20, 50, … up to `max` (`build_1_2_5_buckets`).
fn one_two_five_up_to(max: u32) -> Vec<f64> {
    let mut bounds = Vec::new();
    let mut scale = 1u64;
    loop {
        for m in [1, 2, 5] {
            if m * scale > u64::from(max) {
                return bounds;
            }
            bounds.push((m * scale) as f64);
        }
        scale *= 10;
    }
}

/// A Prometheus histogram: counts per bucket (the last one above every bound), and their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    name: &'static str,
    bounds: Vec<f64>,
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(name: &'static str, bounds: Vec<f64>) -> Self {
        Self {
            name,
            counts: vec![0; bounds.len() + 1],
            bounds,
            sum: 0.0,
        }
    }

    /// One observation.
    fn observe(&mut self, value: f64) {
        self.observe_many(value, 1, value);
    }

    /// `n` observations in the bucket of `value`, adding `sum` to the sum: SGLang counts a step's
    /// tokens at their mean gap and adds the whole gap.
    fn observe_many(&mut self, value: f64, n: u64, sum: f64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        self.counts[bucket] += n;
        self.sum += sum;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `_bucket` lines (cumulative, `le` as Python's client writes it), `_sum` and `_count`.
    fn write(&self, labels: &str, out: &mut String) {
        let name = self.name;
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count;
            let le = go_float(*bound);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let total = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {total}");
    }
}

/// One request's timing as the engine delivers its tokens (kept beside its sink).
#[derive(Debug, Clone, Copy)]
pub struct RequestClock {
    /// When the HTTP handler received it.
    received: Instant,
    prompt_tokens: u32,
    first: Option<Instant>,
    last: Option<Instant>,
    generated: u32,
}

impl RequestClock {
    /// A request of `prompt_tokens` received at `received`.
    pub fn new(received: Instant, prompt_tokens: u32) -> Self {
        Self {
            received,
            prompt_tokens,
            first: None,
            last: None,
            generated: 0,
        }
    }
}

/// The histograms of one server, under vLLM's or SGLang's names.
#[derive(Debug, Clone, PartialEq)]
pub struct Latencies {
    names: Names,
    ttft: Histogram,
    itl: Histogram,
    /// vLLM's per-request mean time per output token (SGLang has none by default).
    tpot: Option<Histogram>,
    e2e: Histogram,
    prompt_tokens: Histogram,
    generation_tokens: Histogram,
}

impl Latencies {
    /// Empty histograms with `names`' names and buckets (vLLM's token buckets reach
    /// `max_model_len`).
    pub fn new(names: Names, max_model_len: u32) -> Self {
        let h = |name, bounds: &[f64]| Histogram::new(name, bounds.to_vec());
        match names {
            Names::Vllm => Self {
                names,
                ttft: h("vllm:time_to_first_token_seconds", VLLM_TTFT),
                itl: h("vllm:inter_token_latency_seconds", VLLM_ITL),
                tpot: Some(h("vllm:request_time_per_output_token_seconds", VLLM_ITL)),
                e2e: h("vllm:e2e_request_latency_seconds", VLLM_E2E),
                prompt_tokens: Histogram::new(
                    "vllm:request_prompt_tokens",
                    one_two_five_up_to(max_model_len),
                ),
                generation_tokens: Histogram::new(
                    "vllm:request_generation_tokens",
                    one_two_five_up_to(max_model_len),
                ),
            },
            Names::Sglang => Self {
                names,
                ttft: h("sglang:time_to_first_token_seconds", SGLANG_TTFT),
                itl: h("sglang:inter_token_latency_seconds", SGLANG_ITL),
                tpot: None,
                e2e: h("sglang:e2e_request_latency_seconds", SGLANG_E2E),
                prompt_tokens: h("sglang:prompt_tokens_histogram", SGLANG_TOKENS),
                generation_tokens: h("sglang:generation_tokens_histogram", SGLANG_TOKENS),
            },
        }
    }

    /// Records that the request of `clock` has `generated` tokens at `at`: its first token
    /// (TTFT), the gap since its previous ones (ITL: vLLM one observation per step, SGLang one
    /// per token at the step's mean gap), and once `done`, its latency, lengths and TPOT.
    pub fn record(&mut self, clock: &mut RequestClock, generated: u32, done: bool, at: Instant) {
        let new_tokens = generated.saturating_sub(clock.generated);
        if new_tokens == 0 && !done {
            return;
        }
        match clock.last {
            None => {
                self.ttft.observe(seconds(clock.received, at));
                clock.first = Some(at);
            }
            Some(last) => {
                let gap = seconds(last, at);
                match self.names {
                    Names::Vllm => self.itl.observe(gap),
                    Names::Sglang => {
                        let n = u64::from(new_tokens.max(1));
                        self.itl.observe_many(gap / n as f64, n, gap);
                    }
                }
            }
        }
        clock.last = Some(at);
        clock.generated = generated;
        if done {
            self.finish(clock, at);
        }
    }

    /// A finished request's end-to-end latency, lengths and mean time per output token.
    fn finish(&mut self, clock: &RequestClock, at: Instant) {
        self.e2e.observe(seconds(clock.received, at));
        self.prompt_tokens.observe(f64::from(clock.prompt_tokens));
        self.generation_tokens.observe(f64::from(clock.generated));
        if let Some(tpot) = &mut self.tpot {
            let decode = clock.first.map_or(0.0, |first| seconds(first, at));
            let mean = match clock.generated {
                0 | 1 => 0.0,
                n => decode / f64::from(n - 1),
            };
            tpot.observe(mean);
        }
    }

    /// The exposition of every histogram, each series labelled with `labels` (`model_name="…"`).
    pub fn write(&self, labels: &str, out: &mut String) {
        let all = [
            &self.ttft,
            &self.itl,
            &self.e2e,
            &self.prompt_tokens,
            &self.generation_tokens,
        ];
        for histogram in all.into_iter().chain(&self.tpot) {
            histogram.write(labels, out);
        }
    }
}

/// A bound as Python's Prometheus client writes `le`: Python's float repr, but with Go's
/// exponent from a million up (`1e+06`, `1.1e+06`).
fn go_float(x: f64) -> String {
    let repr = format!("{x:?}");
    match repr.find('.') {
        Some(dot) if x > 0.0 && dot > 6 => {
            let digits = format!("{}.{}{}", &repr[..1], &repr[1..dot], &repr[dot + 1..]);
            let mantissa = digits.trim_end_matches(['0', '.']);
            format!("{mantissa}e+0{}", dot - 1)
        }
        _ => repr,
    }
}

/// Seconds from `from` to `to` (0 if `to` is earlier).
fn seconds(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bounds_are_written_as_pythons_client_writes_them() {
        let written: Vec<String> = [0.001, 1.0, 2560.0, 100000.0, 1000000.0, 1100000.0]
            .into_iter()
            .map(go_float)
            .collect();
        assert_eq!(
            written,
            ["0.001", "1.0", "2560.0", "100000.0", "1e+06", "1.1e+06"]
        );
    }

    #[test]
    fn token_buckets_are_vllms_one_two_five() {
        assert_eq!(one_two_five_up_to(100), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(one_two_five_up_to(4096).last(), Some(&2000.0));
    }

    /// A request of 3 tokens over 2 steps (1 then 2) at 0.1 s, 0.3 s: TTFT 0.1, one vLLM gap of
    /// 0.2 s but two SGLang ones of 0.1 s (sum 0.2), e2e 0.3, TPOT 0.1; buckets cumulative.
    #[test]
    fn records_ttft_gaps_and_the_end_as_each_engine_does() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        for (names, itl_count) in [(Names::Vllm, 1), (Names::Sglang, 2)] {
            let mut latencies = Latencies::new(names, 4096);
            let mut clock = RequestClock::new(t0, 40);
            latencies.record(&mut clock, 1, false, at(100));
            latencies.record(&mut clock, 3, true, at(300));
            assert_eq!(latencies.ttft.count(), 1);
            assert!((latencies.ttft.sum - 0.1).abs() < 1e-9);
            assert_eq!(latencies.itl.count(), itl_count, "{names:?}");
            assert!((latencies.itl.sum - 0.2).abs() < 1e-9);
            assert!((latencies.e2e.sum - 0.3).abs() < 1e-9);
            assert_eq!(latencies.generation_tokens.sum, 3.0);
            assert_eq!(latencies.prompt_tokens.sum, 40.0);
            if let Some(tpot) = &latencies.tpot {
                assert!((tpot.sum - 0.1).abs() < 1e-9);
            }
            let mut text = String::new();
            latencies.write("model_name=\"m\"", &mut text);
            let prefix = match names {
                Names::Vllm => "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=",
                Names::Sglang => "sglang:time_to_first_token_seconds_bucket{model_name=\"m\",le=",
            };
            let counts: Vec<u64> = text
                .lines()
                .filter(|l| l.starts_with(prefix))
                .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
                .collect();
            assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
            assert_eq!(counts.last(), Some(&1));
            assert!(text.contains("le=\"+Inf\"} 1\n"), "{text}");
            let (samples, bad) = crate::telemetry::prometheus::parse(&text);
            assert!(
                bad.is_empty() && !samples.is_empty(),
                "rigrun's own scraper reads it: {bad:?}"
            );
        }
    }
}
