//! Per-request prompt and output lengths: the nominal `--input-len`/`--output-len` for every
//! request, or drawn per request from a distribution around it (`--input-dist`, `--output-dist`,
//! `--range-ratio`), seeded by the run's seed and the request's number, so a seed gives the same
//! lengths on every host.
//!
//! `uniform:ratio=R` follows `vllm bench serve --random-range-ratio R` exactly: integers uniform
//! in `[floor(len·(1−R)), ceil(len·(1+R))]`, both ends included, `0 ≤ R < 1` (vLLM's output low
//! end is at least 1; here both are). `normal:sd=S` rounds `len + S·z` (z standard normal, by
//! Box–Muller) to the nearest integer and clips it to at least 1 (never above: a draw beyond the
//! server's context fails as a request, counted by kind).

use super::rng::Rng;

/// Mixed into the seed so lengths are a stream of their own, independent of the prompts' ids.
const LENGTH_STREAM: u64 = 0x1E46_7145;

/// How one length varies from request to request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dist {
    /// Every request asks the nominal length.
    Fixed,
    /// Uniform integers in `[floor(len·(1−ratio)), ceil(len·(1+ratio))]` (vLLM's range ratio).
    Uniform { ratio: f64 },
    /// Normal with the nominal length as mean and standard deviation `sd` tokens, rounded,
    /// clipped to at least 1.
    Normal { sd: f64 },
}

impl Dist {
    /// `fixed`, `uniform:ratio=R` (0 ≤ R < 1) or `normal:sd=S` (S ≥ 0 tokens).
    pub fn parse(text: &str) -> Result<Dist, String> {
        let (kind, param) = text.split_once(':').unwrap_or((text, ""));
        let value = |key: &str| -> Result<f64, String> {
            let number = param
                .strip_prefix(key)
                .and_then(|rest| rest.strip_prefix('='))
                .ok_or_else(|| format!("`{text}`: write {kind}:{key}=NUMBER"))?;
            number
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("`{text}`: {key} must be a number ≥ 0, not `{number}`"))
        };
        match kind {
            "fixed" if param.is_empty() => Ok(Dist::Fixed),
            "uniform" => Self::uniform(value("ratio")?).map_err(|e| format!("`{text}`: {e}")),
            "normal" => Ok(Dist::Normal { sd: value("sd")? }),
            _ => Err(format!(
                "`{text}` is not a length distribution: fixed, uniform:ratio=R (0 ≤ R < 1, as \
                 vllm bench serve --random-range-ratio) or normal:sd=TOKENS"
            )),
        }
    }

    /// vLLM's range ratio, checked as vLLM checks it.
    pub fn uniform(ratio: f64) -> Result<Dist, String> {
        if (0.0..1.0).contains(&ratio) {
            Ok(Dist::Uniform { ratio })
        } else {
            Err(format!(
                "the range ratio must be at least 0 and below 1, not {ratio}"
            ))
        }
    }

    /// How the record names it (`uniform:ratio=0.5`, `normal:sd=200`), None when fixed.
    pub fn label(&self) -> Option<String> {
        match self {
            Dist::Fixed => None,
            Dist::Uniform { ratio } => Some(format!("uniform:ratio={ratio}")),
            Dist::Normal { sd } => Some(format!("normal:sd={sd}")),
        }
    }

    /// The lowest and highest lengths a nominal `len` can draw (None: unbounded above).
    pub fn bounds(&self, len: u32) -> (u32, Option<u32>) {
        match *self {
            Dist::Fixed => (len, Some(len)),
            Dist::Uniform { ratio } => {
                let (low, high) = uniform_bounds(len, ratio);
                (low, Some(high))
            }
            Dist::Normal { .. } => (1, None),
        }
    }

    /// One length around the nominal `len`.
    pub fn draw(&self, len: u32, rng: &mut Rng) -> u32 {
        match *self {
            Dist::Fixed => len,
            Dist::Uniform { ratio } => {
                let (low, high) = uniform_bounds(len, ratio);
                low + rng.below(u64::from(high - low) + 1) as u32
            }
            Dist::Normal { sd } => {
                let drawn = (f64::from(len) + sd * standard_normal(rng)).round();
                drawn.clamp(1.0, f64::from(u32::MAX)) as u32
            }
        }
    }
}

/// vLLM's bounds: `floor(len·(1−r))` (at least 1) and `ceil(len·(1+r))`, in double precision as
/// vLLM computes them.
fn uniform_bounds(len: u32, ratio: f64) -> (u32, u32) {
    let low = (f64::from(len) * (1.0 - ratio)).floor().max(1.0);
    let high = (f64::from(len) * (1.0 + ratio)).ceil().min(f64::from(u32::MAX));
    (low as u32, high.max(low) as u32)
}

/// A standard normal value (Box–Muller on two uniforms in (0, 1]).
fn standard_normal(rng: &mut Rng) -> f64 {
    let (u1, u2) = (rng.unit(), rng.unit());
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The lengths of a run's requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lengths {
    pub input_len: u32,
    pub input_dist: Dist,
    pub output_len: u32,
    pub output_dist: Dist,
    pub seed: u64,
}

impl Lengths {
    /// Request `index`'s (input, output) lengths: the same for a seed and index everywhere.
    pub fn of(&self, index: u64) -> (u32, u32) {
        let mut rng = Rng::for_item(self.seed ^ LENGTH_STREAM, index);
        let input = self.input_dist.draw(self.input_len, &mut rng);
        let output = self.output_dist.draw(self.output_len, &mut rng);
        (input, output)
    }

    /// The longest prompt and output a request can ask, when both are bounded.
    pub fn longest(&self) -> Option<(u32, u32)> {
        let input = self.input_dist.bounds(self.input_len).1?;
        let output = self.output_dist.bounds(self.output_len).1?;
        Some((input, output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(input_dist: Dist, output_dist: Dist, seed: u64) -> Lengths {
        Lengths {
            input_len: 1000,
            input_dist,
            output_len: 200,
            output_dist,
            seed,
        }
    }

    /// Mean, population standard deviation, min and max, computed on their own.
    fn stats(values: &[u32]) -> (f64, f64, u32, u32) {
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = values.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n;
        let min = *values.iter().min().unwrap();
        let max = *values.iter().max().unwrap();
        (mean, var.sqrt(), min, max)
    }

    /// The input and output lengths of requests 0..20000.
    fn draws(lengths: Lengths) -> (Vec<u32>, Vec<u32>) {
        (0..20_000).map(|i| lengths.of(i)).unzip()
    }

    #[test]
    fn parses_and_names_distributions() {
        assert_eq!(Dist::parse("fixed"), Ok(Dist::Fixed));
        assert_eq!(Dist::parse("uniform:ratio=0.5"), Ok(Dist::Uniform { ratio: 0.5 }));
        assert_eq!(Dist::parse("normal:sd=200"), Ok(Dist::Normal { sd: 200.0 }));
        assert_eq!(
            Dist::parse("normal:sd=200").unwrap().label().unwrap(),
            "normal:sd=200"
        );
        assert_eq!(
            Dist::Uniform { ratio: 0.25 }.label().unwrap(),
            "uniform:ratio=0.25"
        );
        assert_eq!(Dist::Fixed.label(), None);
        for (bad, says) in [
            ("uniform:ratio=1", "below 1"),
            ("normal:sd=-3", "≥ 0"),
            ("normal:mean=3", "normal:sd=NUMBER"),
            ("gamma", "not a length distribution"),
            ("fixed:3", "not a length distribution"),
        ] {
            let err = Dist::parse(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn uniform_bounds_are_vllms() {
        // vLLM: floor(1000 · 0.5) = 500, ceil(1000 · 1.5) = 1500, both included.
        assert_eq!(Dist::Uniform { ratio: 0.5 }.bounds(1000), (500, Some(1500)));
        assert_eq!(Dist::Uniform { ratio: 0.0 }.bounds(7), (7, Some(7)));
        // A low end that floors to 0 is 1, as vLLM's output low end.
        assert_eq!(Dist::Uniform { ratio: 0.9 }.bounds(1), (1, Some(2)));
    }

    #[test]
    fn uniform_draws_cover_the_range_with_its_mean_and_spread() {
        let dist = Dist::Uniform { ratio: 0.5 };
        let (inputs, outputs) = draws(lengths(dist, dist, 11));
        let (mean, sd, min, max) = stats(&inputs);
        // Discrete uniform on 500..=1500: mean 1000, sd sqrt((1001² − 1) / 12) = 288.96.
        assert!((mean - 1000.0).abs() < 5.0, "{mean}");
        assert!((sd - 288.96).abs() < 4.0, "{sd}");
        assert_eq!((min, max), (500, 1500));
        assert_eq!((stats(&outputs).2, stats(&outputs).3), (100, 300));
    }

    #[test]
    fn normal_draws_have_the_asked_mean_and_sd_and_are_clipped_at_1() {
        let dist = Dist::Normal { sd: 200.0 };
        let (inputs, outputs) = draws(lengths(dist, dist, 5));
        let (mean, sd, _, _) = stats(&inputs);
        assert!((mean - 1000.0).abs() < 5.0, "{mean}");
        assert!((sd - 200.0).abs() < 4.0, "{sd}");
        // Output: mean 200, sd 200, so about 16% of draws fall below 1 and are clipped to 1.
        let clipped = outputs.iter().filter(|&&o| o == 1).count() as f64 / outputs.len() as f64;
        assert_eq!(stats(&outputs).2, 1);
        assert!((clipped - 0.16).abs() < 0.015, "{clipped}");
    }

    #[test]
    fn a_seed_gives_the_same_lengths_and_another_seed_others() {
        let dist = Dist::Normal { sd: 100.0 };
        let a: Vec<(u32, u32)> = (0..50).map(|i| lengths(dist, dist, 3).of(i)).collect();
        let b: Vec<(u32, u32)> = (0..50).map(|i| lengths(dist, dist, 3).of(i)).collect();
        let c: Vec<(u32, u32)> = (0..50).map(|i| lengths(dist, dist, 4).of(i)).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Pinned, so a change of the draws cannot slip in (say so in docs/bench.md if you must).
        let u = lengths(Dist::Uniform { ratio: 0.5 }, Dist::Fixed, 1);
        assert_eq!(
            [u.of(0), u.of(1), u.of(2)],
            [(1087, 200), (1160, 200), (1306, 200)]
        );
        assert_eq!(lengths(Dist::Fixed, Dist::Fixed, 1).of(9), (1000, 200));
    }
}
