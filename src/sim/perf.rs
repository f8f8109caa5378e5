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
    /// Speculative decoding (`rigrun sim --speculative-tokens N --acceptance P`), when on.
    pub speculative: Option<Speculative>,
}

/// Speculative decoding (MTP / NEXTN / EAGLE): every decoding sequence drafts `tokens` tokens
/// and verifies them in the step's forward pass; each is accepted with probability
/// `acceptance` if the ones before it were. See `src/sim/README.md` for the figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speculative {
    pub tokens: u32,
    pub acceptance: f64,
    /// `--repetitive-acceptance`: the acceptance for a wholly repetitive prompt; a prompt's
    /// acceptance then lies between `acceptance` and this, by its [`repetitiveness`].
    pub repetitive_acceptance: Option<f64>,
}

/// What drafting costs per draft token, as a fraction of the step: one MTP layer beside the
/// model's dozens (DeepSeek-V3: 1.8× decode speed at 85–90% acceptance of one draft token).
pub const DRAFT_COST: f64 = 0.05;

impl Speculative {
    /// Draft tokens accepted per step on average: p + p² + … + pᵏ.
    pub fn expected_accepted(&self) -> f64 {
        (1..=self.tokens).map(|i| self.acceptance.powi(i as i32)).sum()
    }

    /// The speculation a prompt of `repetitiveness` (0 to 1) gets: with
    /// `--repetitive-acceptance Q`, acceptance `P + (Q − P) × repetitiveness`; else `P`.
    pub fn for_prompt(self, repetitiveness: f64) -> Self {
        let Some(repetitive) = self.repetitive_acceptance else {
            return self;
        };
        let r = repetitiveness.clamp(0.0, 1.0);
        Self {
            acceptance: self.acceptance + (repetitive - self.acceptance) * r,
            ..self
        }
    }
}

/// Tokens an n-gram of the prompt must repeat to count as repeated text.
const REPEAT_NGRAM: usize = 3;

/// How repetitive a prompt is, 0 to 1: the share of its 3-token windows that already occurred
/// earlier in it. Drafters (MTP heads, EAGLE, n-gram lookup) guess repeated text well, so this
/// is what raises acceptance: catid's one repeated token scores 0.999 at 1000 tokens, random
/// ids and natural prose (12-byte runs rarely recur) near 0.
pub fn repetitiveness(ids: &[u32]) -> f64 {
    let Some(windows) = ids.len().checked_sub(REPEAT_NGRAM - 1).filter(|&n| n > 0) else {
        return 0.0;
    };
    let mut seen = std::collections::HashSet::with_capacity(windows);
    let repeated = ids
        .windows(REPEAT_NGRAM)
        .filter(|window| !seen.insert(*window))
        .count();
    repeated as f64 / windows as f64
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

    /// A step with `prefilling` sequences computing prompt tokens and `decoding` sequences
    /// decoding. With speculation each decoder computes 1 + k positions (the verify pass, which
    /// costs what that many sequences cost: nearly nothing while decoding is memory bound, in
    /// full once it is compute bound) and the draft heads add [`DRAFT_COST`] per draft token.
    pub fn batch_step_ns(
        &self,
        prefilling: usize,
        decoding: usize,
        attended: u64,
        prefill_tokens: u64,
    ) -> u64 {
        let Some(spec) = self.speculative.filter(|_| decoding > 0) else {
            return self.step_ns(prefilling + decoding, attended, prefill_tokens);
        };
        let positions = prefilling + decoding * (1 + spec.tokens as usize);
        let ns = self.step_ns(positions, attended, prefill_tokens) as f64;
        (ns * (1.0 + DRAFT_COST * f64::from(spec.tokens))).round() as u64
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
            speculative: None,
        };
        assert_eq!(model.step_ns(1, 0, 0), 5_000_000);
        assert_eq!(model.step_ns(3, 2000, 0), 8_000_000);
        assert_eq!(model.step_ns(1, 0, 1000), 105_000_000);
        assert_eq!(model.step_ns(0, 0, 0), 5_000_000);
    }

    #[test]
    fn repetition_raises_acceptance_from_p_towards_q() {
        assert_eq!(repetitiveness(&[7; 1000]), 997.0 / 998.0);
        assert_eq!(repetitiveness(&(0..1000).collect::<Vec<u32>>()), 0.0);
        assert_eq!(repetitiveness(&[1, 2]), 0.0);
        // Windows 123, 231, 312, 123: the last repeats the first.
        assert_eq!(repetitiveness(&[1, 2, 3, 1, 2, 3]), 0.25);
        let plain = Speculative {
            tokens: 2,
            acceptance: 0.6,
            repetitive_acceptance: None,
        };
        assert_eq!(plain.for_prompt(1.0), plain);
        let by_content = Speculative {
            repetitive_acceptance: Some(0.9),
            ..plain
        };
        assert_eq!(by_content.for_prompt(0.0).acceptance, 0.6);
        assert!((by_content.for_prompt(0.5).acceptance - 0.75).abs() < 1e-12);
        assert!((by_content.for_prompt(1.0).acceptance - 0.9).abs() < 1e-12);
    }

    #[test]
    fn speculation_verifies_more_positions_and_pays_for_drafts() {
        let mut model = PerfModel {
            batch_ms: table(&[(1.0, 10.0), (4.0, 10.0), (64.0, 40.0)]),
            attention_ms: table(&[(0.0, 0.0)]),
            prefill_tokens_per_second: 10_000.0,
            speculative: None,
        };
        assert_eq!(model.batch_step_ns(0, 1, 0, 0), 10_000_000);
        let spec = Speculative {
            tokens: 3,
            acceptance: 0.5,
            repetitive_acceptance: None,
        };
        assert!((spec.expected_accepted() - 0.875).abs() < 1e-12);
        model.speculative = Some(spec);
        // One decoder verifies 4 positions, still memory bound: only the drafts' 15% more.
        assert_eq!(model.batch_step_ns(0, 1, 0, 0), 11_500_000);
        // 16 decoders verify 64 positions: the batch cost itself grows.
        assert_eq!(model.batch_step_ns(0, 16, 0, 0), 46_000_000);
    }
}
