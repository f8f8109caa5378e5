//! Per-turn figures of multi-turn conversations (`--turns`): TTFT by turn and the prompt tokens
//! the server's prefix cache served, so a reader sees later turns grow and hit the cache as
//! conversations do in production.

use std::time::Duration;

use serde_json::{json, Value};

use super::latency::{Latency, LatencyStats};

/// What the completed requests of one turn measured.
#[derive(Debug, Clone, Default)]
struct TurnStats {
    completed: u64,
    input_tokens: u64,
    /// Prompt tokens the prefix cache served, over the requests whose usage said.
    cached_tokens: u64,
    cached_reported: u64,
    ttft: Latency,
}

/// The turns' figures, gathered as requests complete (index 0 is the first turn).
#[derive(Debug, Clone, Default)]
pub struct ByTurn(Vec<TurnStats>);

/// One turn's summary, for the record.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSummary {
    /// 1-based, as a reader counts turns.
    pub turn: u32,
    pub completed: u64,
    pub mean_input_tokens: f64,
    /// None when the server reported no cached tokens for this turn's requests.
    pub mean_cached_tokens: Option<f64>,
    pub ttft: Option<LatencyStats>,
}

impl ByTurn {
    /// A completed request of turn `turn` (0-based) with its prompt tokens, the cached ones
    /// when reported, and its TTFT when streamed.
    pub fn add(&mut self, turn: u32, input_tokens: u64, cached: Option<u64>, ttft: Option<Duration>) {
        let index = turn as usize;
        if self.0.len() <= index {
            self.0.resize(index + 1, TurnStats::default());
        }
        let stats = &mut self.0[index];
        stats.completed += 1;
        stats.input_tokens += input_tokens;
        if let Some(cached) = cached {
            stats.cached_tokens += cached;
            stats.cached_reported += 1;
        }
        if let Some(ttft) = ttft {
            stats.ttft.record(ttft);
        }
    }

    /// Each turn's summary, in order.
    pub fn summaries(&self) -> Vec<TurnSummary> {
        let per = |sum: u64, n: u64| sum as f64 / n.max(1) as f64;
        (1..)
            .zip(&self.0)
            .map(|(turn, s)| TurnSummary {
                turn,
                completed: s.completed,
                mean_input_tokens: per(s.input_tokens, s.completed),
                mean_cached_tokens: (s.cached_reported > 0).then(|| per(s.cached_tokens, s.cached_reported)),
                ttft: s.ttft.stats(),
            })
            .collect()
    }
}

/// The record's `per_turn` list: per turn, requests completed, mean prompt and cached tokens,
/// and TTFT's mean, median, p90 and p99 in ms (null when not measured).
pub fn record(summaries: &[TurnSummary], round: impl Fn(f64, i32) -> Value) -> Value {
    let ms = |s: &Option<LatencyStats>, f: fn(&LatencyStats) -> f64| {
        s.as_ref().map_or(Value::Null, |s| round(f(s), 4))
    };
    summaries
        .iter()
        .map(|t| {
            json!({
                "turn": t.turn,
                "completed": t.completed,
                "mean_input_tokens": round(t.mean_input_tokens, 2),
                "mean_cached_tokens": t.mean_cached_tokens.map_or(Value::Null, |c| round(c, 2)),
                "mean_ttft_ms": ms(&t.ttft, |s| s.mean),
                "median_ttft_ms": ms(&t.ttft, |s| s.median),
                "p90_ttft_ms": ms(&t.ttft, |s| s.p90),
                "p99_ttft_ms": ms(&t.ttft, |s| s.p99),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_each_turn_on_its_own() {
        let mut t = ByTurn::default();
        t.add(0, 10, Some(0), Some(Duration::from_millis(100)));
        t.add(1, 30, Some(16), Some(Duration::from_millis(20)));
        t.add(1, 34, Some(32), Some(Duration::from_millis(40)));
        t.add(2, 50, None, None);
        let s = t.summaries();
        assert_eq!(s.len(), 3);
        assert_eq!((s[0].turn, s[1].turn), (1, 2));
        assert_eq!((s[1].completed, s[1].mean_input_tokens), (2, 32.0));
        assert_eq!(s[1].mean_cached_tokens, Some(24.0));
        assert!((s[1].ttft.unwrap().mean - 30.0).abs() < 1e-9);
        assert_eq!((s[2].mean_cached_tokens, s[2].ttft), (None, None));
        let json = record(&s, |x, _| json!(x));
        assert_eq!(json[1]["mean_cached_tokens"], 24.0);
        assert!(json[2]["median_ttft_ms"].is_null());
    }
}
