//! The cost of one forward step, from a profile's tables.
//!
//! A step runs every sequence in the batch once: decoding sequences add one token each,
//! prefilling sequences add a chunk of their prompt. Its duration is
//!
//! ```text
//! batch_ms(sequences in the step) + attention_ms(tokens the decoders attend over)
//!   + prefill tokens / prefill tokens_per_second
//! ```
//!
//! `batch_ms` is the weight-bound part (weights are read once per step, whatever the batch; a
//! MoE model reads more experts as the batch grows), `attention_ms` the KV reads, which grow
//! with the context held by the batch.

/// A piecewise-linear function through `(x, y)` points: constant below the first point, and
/// continued with the last segment's slope beyond the last one (growth goes on at the last
/// measured rate).
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    points: Vec<(f64, f64)>,
}

impl Table {
    /// Checks the points: at least one, finite, `x` strictly increasing, `y` not negative.
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self, String> {
        if points.is_empty() {
            return Err("needs at least one [x, y] point".into());
        }
        if let Some((x, y)) = points.iter().find(|(x, y)| !x.is_finite() || !y.is_finite()) {
            return Err(format!("point [{x}, {y}] is not a finite number"));
        }
        if let Some((x, y)) = points.iter().find(|(_, y)| *y < 0.0) {
            return Err(format!("point [{x}, {y}] has a negative value"));
        }
        if let Some(pair) = points.windows(2).find(|w| w[1].0 <= w[0].0) {
            return Err(format!(
                "x values must strictly increase, but {} follows {}",
                pair[1].0, pair[0].0
            ));
        }
        Ok(Self { points })
    }

    /// The value at `x`, never negative.
    pub fn eval(&self, x: f64) -> f64 {
        let points = &self.points;
        if x <= points[0].0 || points.len() == 1 {
            return points[0].1;
        }
        // The segment holding x, or the last one when x is beyond the table.
        let upper = points.partition_point(|p| p.0 < x).min(points.len() - 1);
        let (a, b) = (points[upper - 1], points[upper]);
        (a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)).max(0.0)
    }
}

/// How long forward steps take.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfModel {
    /// Milliseconds by number of sequences in the step.
    pub batch_ms: Table,
    /// Milliseconds by total context tokens the decoding sequences attend over.
    pub attention_ms: Table,
    /// Prompt tokens computed per second.
    pub prefill_tokens_per_second: f64,
}

impl PerfModel {
    /// Duration in nanoseconds of a step with `sequences` in the batch, decoders attending over
    /// `attended` tokens in total, and `prefill_tokens` prompt tokens computed.
    pub fn step_ns(&self, sequences: usize, attended: u64, prefill_tokens: u64) -> u64 {
        let ms = self.batch_ms.eval(sequences as f64) + self.attention_ms.eval(attended as f64);
        let prefill_s = prefill_tokens as f64 / self.prefill_tokens_per_second;
        // At least 1 µs so that the virtual clock always advances.
        ((ms * 1e6 + prefill_s * 1e9).round() as u64).max(1_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(points: &[(f64, f64)]) -> Table {
        Table::new(points.to_vec()).unwrap()
    }

    #[test]
    fn interpolates_between_points() {
        let t = table(&[(1.0, 10.0), (5.0, 18.0), (10.0, 28.0)]);
        assert_eq!(t.eval(1.0), 10.0);
        assert_eq!(t.eval(3.0), 14.0);
        assert_eq!(t.eval(5.0), 18.0);
        assert_eq!(t.eval(7.5), 23.0);
        assert_eq!(t.eval(10.0), 28.0);
    }

    #[test]
    fn clamps_below_and_extrapolates_above() {
        let t = table(&[(1.0, 10.0), (5.0, 18.0)]);
        assert_eq!(t.eval(0.0), 10.0);
        assert_eq!(t.eval(9.0), 26.0);
        let falling = table(&[(0.0, 2.0), (1.0, 1.0)]);
        assert_eq!(falling.eval(5.0), 0.0);
        assert_eq!(table(&[(3.0, 4.0)]).eval(100.0), 4.0);
    }

    #[test]
    fn rejects_bad_tables() {
        assert!(Table::new(vec![]).is_err());
        assert!(Table::new(vec![(1.0, 1.0), (1.0, 2.0)]).is_err());
        assert!(Table::new(vec![(2.0, 1.0), (1.0, 2.0)]).is_err());
        assert!(Table::new(vec![(1.0, -1.0)]).is_err());
        assert!(Table::new(vec![(f64::NAN, 1.0)]).is_err());
    }

    #[test]
    fn step_adds_batch_attention_and_prefill() {
        let model = PerfModel {
            batch_ms: table(&[(1.0, 5.0), (11.0, 10.0)]),
            attention_ms: table(&[(0.0, 0.0), (1000.0, 1.0)]),
            prefill_tokens_per_second: 10_000.0,
        };
        assert_eq!(model.step_ns(1, 0, 0), 5_000_000);
        assert_eq!(model.step_ns(3, 2000, 0), 8_000_000);
        assert_eq!(model.step_ns(1, 0, 1000), 105_000_000);
        assert_eq!(model.step_ns(0, 0, 0), 5_000_000);
    }
}
