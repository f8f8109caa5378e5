//! The statistics of a repeated point: the mean of its repetitions with a 95% confidence
//! interval from Student's t, and its coefficient of variation, which flags noisy cells.
//!
//! The mean (not the median) is shown because it is what the t interval is about: with the
//! handful of repetitions a sweep affords (3 to 10), the t interval of the mean is the standard,
//! well-understood statement of how far the true value may be; a median's interval needs many
//! more samples to say anything.
//!
//! Two hosts' repeated values are compared through their ratio's interval (the log of the ratio
//! of means, its standard error by the delta method, Welch–Satterthwaite degrees of freedom); two
//! runs' through Welch's t-test, which does not assume equal variances (a host's noise changes
//! between runs). Both are standard for the few repetitions a sweep affords.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// A cell whose coefficient of variation (standard deviation over the mean) exceeds this is
/// flagged noisy: benchmark repetitions on a quiet host typically vary by 1–2%; beyond 5% the
/// host or the benchmark is disturbed and a difference between hosts of that order means little.
pub const NOISY_CV: f64 = 0.05;

/// The significance level of the run-to-run test: a change is significant when the probability
/// of a difference at least as large, were the true values equal, is below 5%.
pub const ALPHA: f64 = 0.05;

/// t(0.975, df): the factor of the standard error that makes a two-sided 95% interval, at any
/// (also fractional, as Welch's) degrees of freedom; None below one.
pub fn t_975(df: f64) -> Option<f64> {
    let t = StudentsT::new(0.0, 1.0, df).ok().filter(|_| df >= 1.0)?;
    Some(t.inverse_cdf(0.975))
}

/// What several measurements of one value say together.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub n: usize,
    pub mean: f64,
    /// The sample standard deviation (n − 1 in the denominator); 0 for one measurement.
    pub sd: f64,
    /// Half the width of the 95% confidence interval of the mean; None for one measurement.
    pub ci95: Option<f64>,
    /// The standard deviation over the mean's magnitude; None for one measurement or a mean of 0.
    pub cv: Option<f64>,
}

impl Estimate {
    /// The summary of `values`; None when there are none or one is not finite.
    pub fn of(values: &[f64]) -> Option<Estimate> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = match n {
            1 => 0.0,
            _ => (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt(),
        };
        let ci95 = t_975((n - 1) as f64).map(|t| t * sd / (n as f64).sqrt());
        let cv = (n > 1 && mean != 0.0).then(|| sd / mean.abs());
        Some(Estimate {
            n,
            mean,
            sd,
            ci95,
            cv,
        })
    }

    /// Whether the measurements vary by more than [`NOISY_CV`].
    pub fn is_noisy(&self) -> bool {
        self.cv.is_some_and(|cv| cv > NOISY_CV)
    }
}

/// The 95% confidence interval of the ratio of two means, `a.mean / b.mean`: the ratio times
/// exp(± t × se), where se² = sd_a²/(n_a·mean_a²) + sd_b²/(n_b·mean_b²) is the delta method's
/// variance of the log ratio, and t is at the Welch–Satterthwaite degrees of freedom of its two
/// terms. None unless both have two or more measurements and positive means (throughputs and
/// latencies are).
pub fn ratio_interval(a: &Estimate, b: &Estimate) -> Option<(f64, f64)> {
    if a.n < 2 || b.n < 2 || a.mean <= 0.0 || b.mean <= 0.0 {
        return None;
    }
    let rel = |s: &Estimate| s.sd.powi(2) / (s.n as f64 * s.mean.powi(2));
    let ratio = a.mean / b.mean;
    let se = (rel(a) + rel(b)).sqrt();
    if se == 0.0 {
        return Some((ratio, ratio));
    }
    let t = t_975(welch_df(rel(a), a.n, rel(b), b.n))?;
    Some((ratio * (-t * se).exp(), ratio * (t * se).exp()))
}

/// The Welch–Satterthwaite degrees of freedom of a sum of two variance terms, each from a
/// sample of `n` values.
fn welch_df(va: f64, na: usize, vb: f64, nb: usize) -> f64 {
    (va + vb).powi(2) / (va.powi(2) / (na - 1) as f64 + vb.powi(2) / (nb - 1) as f64)
}

/// Welch's t-test of two samples' means: how surprising their difference would be were the true
/// means equal.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Welch {
    /// (mean_a − mean_b) / √(sd_a²/n_a + sd_b²/n_b).
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// The two-sided p-value.
    pub p_value: f64,
}

impl Welch {
    /// The test of `a` against `b`; None unless each has two or more measurements. Samples
    /// without any spread differ surely (p = 0) or not at all (p = 1).
    pub fn test(a: &Estimate, b: &Estimate) -> Option<Welch> {
        if a.n < 2 || b.n < 2 {
            return None;
        }
        let (va, vb) = (a.sd.powi(2) / a.n as f64, b.sd.powi(2) / b.n as f64);
        let diff = a.mean - b.mean;
        if va + vb == 0.0 {
            let p_value = if diff == 0.0 { 1.0 } else { 0.0 };
            let t = if diff == 0.0 {
                0.0
            } else {
                diff.signum() * f64::INFINITY
            };
            return Some(Welch {
                t,
                df: (a.n + b.n - 2) as f64,
                p_value,
            });
        }
        let t = diff / (va + vb).sqrt();
        let df = welch_df(va, a.n, vb, b.n);
        let dist = StudentsT::new(0.0, 1.0, df).ok()?;
        let p_value = (2.0 * dist.sf(t.abs())).min(1.0);
        Some(Welch { t, df, p_value })
    }

    /// Whether the difference is significant at [`ALPHA`].
    pub fn is_significant(&self) -> bool {
        self.p_value < ALPHA
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two-sided 95% quantiles of Student's t as printed in the standard tables.
    #[test]
    fn t_quantiles_match_the_tables() {
        assert_eq!(t_975(0.0), None);
        for (df, table) in [
            (1.0, 12.706),
            (2.0, 4.303),
            (4.0, 2.776),
            (9.0, 2.262),
            (29.0, 2.045),
            (30.0, 2.042),
            (120.0, 1.980),
        ] {
            let t = t_975(df).unwrap();
            assert!(
                (t - table).abs() < 5e-4,
                "df {df}: {t} against the table's {table}"
            );
        }
    }

    fn summary(values: &[f64]) -> Estimate {
        Estimate::of(values).unwrap()
    }

    /// The three worked examples of Wikipedia's "Welch's t-test" article (its data sets and its
    /// t, df and p; scipy.stats.ttest_ind(equal_var=False) gives the same).
    #[test]
    fn welch_matches_the_published_examples() {
        // Each: the two samples, then the article's t, df and p.
        type Example<'a> = (&'a [f64], &'a [f64], f64, f64, f64);
        let examples: [Example; 3] = [
            (
                &[
                    27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4,
                ],
                &[
                    27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4,
                ],
                -2.4554,
                24.9885,
                0.021378,
            ),
            (
                &[17.2, 20.9, 22.6, 18.1, 21.7, 21.4, 23.5, 24.2, 14.7, 21.8],
                &[
                    21.5, 22.8, 21.0, 23.0, 21.6, 23.6, 22.5, 20.7, 23.4, 21.8, 20.7, 21.7, 21.5, 22.5, 23.6,
                    21.5, 22.5, 23.5, 21.5, 21.8,
                ],
                -1.5654,
                9.9047,
                0.148842,
            ),
            (
                &[19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3, 18.9, 19.5, 22.0],
                &[
                    28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6, 20.6, 13.7, 23.2, 17.5, 20.6, 18.0, 23.9,
                    21.6, 24.3, 20.4, 23.9, 13.3,
                ],
                -2.2255,
                24.5246,
                0.035485,
            ),
        ];
        for (a, b, t, df, p) in examples {
            let w = Welch::test(&summary(a), &summary(b)).unwrap();
            assert!((w.t - t).abs() < 1e-4, "t {} against {t}", w.t);
            assert!((w.df - df).abs() < 1e-3, "df {} against {df}", w.df);
            assert!((w.p_value - p).abs() < 1e-5, "p {} against {p}", w.p_value);
        }
        let (a, b) = (
            summary(&[2411.0, 2398.0, 2425.0]),
            summary(&[2300.0, 2350.0, 2280.0]),
        );
        let w = Welch::test(&a, &b).unwrap();
        assert!(w.is_significant() && (w.p_value - 0.027865).abs() < 1e-5, "{w:?}");
        assert_eq!(Welch::test(&summary(&[1.0]), &b), None);
        let flat = Welch::test(&summary(&[5.0, 5.0]), &summary(&[5.0, 5.0])).unwrap();
        assert_eq!(flat.p_value, 1.0);
        assert_eq!(
            Welch::test(&summary(&[5.0, 5.0]), &summary(&[6.0, 6.0]))
                .unwrap()
                .p_value,
            0.0
        );
    }

    /// The ratio's interval against the same formula evaluated independently (numpy and
    /// scipy.stats.t.ppf at the Welch–Satterthwaite df, 3.3906).
    #[test]
    fn ratio_interval_of_two_hosts() {
        let a = summary(&[2411.0, 2398.0, 2425.0]);
        let b = summary(&[985.0, 1002.0, 990.0]);
        let (low, high) = ratio_interval(&a, &b).unwrap();
        assert!(
            (low - 2.386660).abs() < 1e-5 && (high - 2.474052).abs() < 1e-5,
            "{low} {high}"
        );
        assert_eq!(ratio_interval(&a, &summary(&[990.0])), None);
        assert_eq!(
            ratio_interval(&summary(&[2.0, 2.0]), &summary(&[1.0, 1.0])),
            Some((2.0, 2.0))
        );
    }

    #[test]
    fn a_worked_example() {
        let s = Estimate::of(&[10.0, 12.0, 9.0, 11.0, 13.0]).unwrap();
        assert_eq!((s.n, s.mean), (5, 11.0));
        assert!((s.sd - 1.5811).abs() < 1e-4, "{}", s.sd);
        // 2.776 × 1.5811 / √5
        assert!((s.ci95.unwrap() - 1.963).abs() < 1e-3, "{:?}", s.ci95);
        assert!((s.cv.unwrap() - 0.14374).abs() < 1e-4);
        assert!(s.is_noisy());
    }

    #[test]
    fn one_value_has_no_interval_and_bad_input_no_summary() {
        let one = Estimate::of(&[5.0]).unwrap();
        assert_eq!((one.ci95, one.cv, one.sd), (None, None, 0.0));
        assert!(!one.is_noisy());
        assert_eq!(Estimate::of(&[]), None);
        assert_eq!(Estimate::of(&[1.0, f64::NAN]), None);
        let quiet = Estimate::of(&[100.0, 101.0, 99.0]).unwrap();
        assert!(!quiet.is_noisy());
        assert_eq!(Estimate::of(&[0.0, 0.0]).unwrap().cv, None);
    }
}
