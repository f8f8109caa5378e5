//! The statistics of a repeated point: the mean of its repetitions with a 95% confidence
//! interval from Student's t, and its coefficient of variation, which flags noisy cells.
//!
//! The mean (not the median) is shown because it is what the t interval is about: with the
//! handful of repetitions a sweep affords (3 to 10), the t interval of the mean is the standard,
//! well-understood statement of how far the true value may be; a median's interval needs many
//! more samples to say anything.

/// A cell whose coefficient of variation (standard deviation over the mean) exceeds this is
/// flagged noisy: benchmark repetitions on a quiet host typically vary by 1–2%; beyond 5% the
/// host or the benchmark is disturbed and a difference between hosts of that order means little.
pub const NOISY_CV: f64 = 0.05;

/// Two-sided 95% quantiles of Student's t (t(0.975, df)) for df 1 to 30, from the standard
/// tables.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/// The normal quantile used beyond 30 degrees of freedom, where t is within 2% of it.
const Z_975: f64 = 1.96;

/// t(0.975, df): the factor of the standard error that makes a 95% interval; None for df 0 (one
/// sample says nothing about its spread).
pub fn t_975(df: usize) -> Option<f64> {
    match df {
        0 => None,
        d if d <= T_975.len() => Some(T_975[d - 1]),
        _ => Some(Z_975),
    }
}

/// What several measurements of one value say together.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// The sample standard deviation (n − 1 in the denominator); 0 for one measurement.
    pub sd: f64,
    /// Half the width of the 95% confidence interval of the mean; None for one measurement.
    pub ci95: Option<f64>,
    /// The standard deviation over the mean's magnitude; None for one measurement or a mean of 0.
    pub cv: Option<f64>,
}

impl Summary {
    /// The summary of `values`; None when there are none or one is not finite.
    pub fn of(values: &[f64]) -> Option<Summary> {
        if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let n = values.len();
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = match n {
            1 => 0.0,
            _ => (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt(),
        };
        let ci95 = t_975(n - 1).map(|t| t * sd / (n as f64).sqrt());
        let cv = (n > 1 && mean != 0.0).then(|| sd / mean.abs());
        Some(Summary {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_tables() {
        assert_eq!(t_975(0), None);
        assert_eq!(t_975(1), Some(12.706));
        assert_eq!(t_975(4), Some(2.776));
        assert_eq!(t_975(9), Some(2.262));
        assert_eq!(t_975(29), Some(2.045));
        assert_eq!(t_975(30), Some(2.042));
        assert_eq!(t_975(31), Some(1.96));
    }

    #[test]
    fn a_worked_example() {
        let s = Summary::of(&[10.0, 12.0, 9.0, 11.0, 13.0]).unwrap();
        assert_eq!((s.n, s.mean), (5, 11.0));
        assert!((s.sd - 1.5811).abs() < 1e-4, "{}", s.sd);
        // 2.776 × 1.5811 / √5
        assert!((s.ci95.unwrap() - 1.963).abs() < 1e-3, "{:?}", s.ci95);
        assert!((s.cv.unwrap() - 0.14374).abs() < 1e-4);
        assert!(s.is_noisy());
    }

    #[test]
    fn one_value_has_no_interval_and_bad_input_no_summary() {
        let one = Summary::of(&[5.0]).unwrap();
        assert_eq!((one.ci95, one.cv, one.sd), (None, None, 0.0));
        assert!(!one.is_noisy());
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
        let quiet = Summary::of(&[100.0, 101.0, 99.0]).unwrap();
        assert!(!quiet.is_noisy());
        assert_eq!(Summary::of(&[0.0, 0.0]).unwrap().cv, None);
    }
}
