//! One latency's distribution (TTFT, TPOT, ITL, E2EL, time queued, a replay's lateness): the
//! exact mean, and percentiles from an HDR histogram at 0.1 %, summarized in milliseconds.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Histograms record microseconds up to an hour, to three significant digits (0.1%).
const MAX_MICROS: u64 = 3_600_000_000;

/// A latency distribution: exact mean, percentiles from an HDR histogram.
#[derive(Debug, Clone)]
pub struct Latency {
    histogram: Histogram<u64>,
    sum_ns: f64,
}

/// Summary statistics in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyStats {
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            // 1 µs .. 1 h at 3 significant digits cannot be an invalid configuration.
            histogram: Histogram::new_with_bounds(1, MAX_MICROS, 3)
                .unwrap_or_else(|_| unreachable!("valid histogram bounds")),
            sum_ns: 0.0,
        }
    }
}

impl Latency {
    pub fn record(&mut self, value: Duration) {
        let ns = value.as_nanos() as f64;
        self.sum_ns += ns;
        let micros = (ns / 1e3).round().max(1.0) as u64;
        self.histogram.saturating_record(micros);
    }

    /// None when nothing was recorded.
    pub fn stats(&self) -> Option<LatencyStats> {
        let n = self.histogram.len();
        if n == 0 {
            return None;
        }
        let ms = |q: f64| self.histogram.value_at_quantile(q) as f64 / 1e3;
        Some(LatencyStats {
            mean: self.sum_ns / n as f64 / 1e6,
            median: ms(0.5),
            p90: ms(0.9),
            p99: ms(0.99),
        })
    }

    /// The largest value recorded, in ms; None when nothing was.
    pub fn max_ms(&self) -> Option<f64> {
        (!self.histogram.is_empty()).then(|| self.histogram.max() as f64 / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_stats_are_exact_in_the_mean_and_close_in_percentiles() {
        let mut l = Latency::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.stats().unwrap();
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert!((s.median - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p90 - 90.0).abs() < 0.1 && (s.p99 - 99.0).abs() < 0.1, "{s:?}");
        assert!(Latency::default().stats().is_none());
    }
}
