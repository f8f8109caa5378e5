//! A sweep's `search:`: instead of measuring every value of an axis, find per series (each
//! combination of the other axes) the highest value whose measurement meets the playbook's
//! `slo:`, by bracketing upwards from the lowest value (1, 2, 4, 8… candidates up) and then
//! bisecting the bracket, in at most a stated number of probes. Each probe is an ordinary point
//! of the sweep (records, validity, telemetry, resume); the candidates it did not need are
//! recorded skipped as not probed.
//!
//! ```yaml
//! search: {axis: concurrency, from: 1, to: 256, probes: 12}
//! ```
//!
//! The search assumes what capacity means: a load that meets the limits is met by every lower
//! load. A probe that fails, is invalid or lacks a limited metric does not meet them.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_saphyr::Spanned;

/// The most candidates a search may have: bisection makes their number cheap, but each is a
/// planned point (see `run_sweep::MAX_POINTS`).
pub const MAX_CANDIDATES: usize = 10_000;

/// `search:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    /// The axis searched (a variable of the command, not a matrix axis).
    pub axis: Spanned<String>,
    pub from: Spanned<Json>,
    pub to: Spanned<Json>,
    /// The distance between candidates, the search's resolution (1 when absent).
    pub step: Option<Spanned<Json>>,
    /// The most probes per series (when absent: as many as the worst case needs, so the search
    /// always ends at the resolution).
    pub probes: Option<Spanned<u32>>,
}

/// A search as planned: the axis, its candidates' count and the probes allowed per series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchPlan {
    pub axis: String,
    pub candidates: usize,
    pub probes: u32,
    /// The candidates' spacing, as the resolution the search can reach.
    pub step: f64,
}

impl SearchSpec {
    /// The candidates, lowest first: `from`, `from + step`, … up to `to`. Whole numbers are
    /// written whole (`concurrency=16`, `request_rate=2`, not `2.0`). The error names the field
    /// at fault.
    pub fn candidates(&self) -> Result<Vec<Json>, (&serde_saphyr::Location, String)> {
        let (from, to) = (number("from", &self.from)?, number("to", &self.to)?);
        let step = match &self.step {
            Some(s) => number("step", s)?,
            None => 1.0,
        };
        let step_at = self.step.as_ref().map_or(&self.to.referenced, |s| &s.referenced);
        if step <= 0.0 {
            return Err((step_at, format!("search: step: {step} is not above 0")));
        }
        if to < from {
            return Err((
                &self.to.referenced,
                format!("search: to: {to} is below from: {from}"),
            ));
        }
        let count = ((to - from) / step + 1e-9).floor() + 1.0;
        if count > MAX_CANDIDATES as f64 {
            return Err((
                step_at,
                format!(
                    "search: {count} candidates from {from} to {to} by {step}; at most \
                     {MAX_CANDIDATES}: take a larger step"
                ),
            ));
        }
        Ok((0..count as usize)
            .map(|i| {
                let x = ((from + i as f64 * step) * 1e9).round() / 1e9;
                match x.fract() == 0.0 {
                    true => Json::from(x as i64),
                    false => Json::from(x),
                }
            })
            .collect())
    }
}

/// A field that must be a finite number.
fn number<'a>(field: &str, v: &'a Spanned<Json>) -> Result<f64, (&'a serde_saphyr::Location, String)> {
    v.value.as_f64().filter(|x| x.is_finite()).ok_or_else(|| {
        let text = crate::point::value_text(&v.value);
        (
            &v.referenced,
            format!("search: {field}: `{text}` is not a number"),
        )
    })
}

/// What a search asks next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Measure the candidate at this index.
    Probe(usize),
    /// Nothing more to measure.
    Done,
}

/// What a search found, as indices into its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The highest candidate measured within the limits.
    pub met: Option<usize>,
    /// The lowest candidate measured outside them.
    pub missed: Option<usize>,
    pub probes: u32,
}

impl Found {
    /// Whether the search reached its resolution: the capacity is a candidate, the next one up
    /// (when there is one) missed, or the lowest already missed.
    pub fn is_exact(&self, candidates: usize) -> bool {
        match (self.met, self.missed) {
            (Some(m), Some(x)) => x == m + 1,
            (Some(m), None) => m + 1 == candidates,
            (None, Some(x)) => x == 0,
            (None, None) => candidates == 0,
        }
    }
}

/// The search over `candidates` values (lowest first) in at most `budget` probes: galloping
/// up from the lowest (indices 0, 1, 3, 7, …) until one misses, then bisecting between the
/// highest that met and the lowest that missed.
#[derive(Debug, Clone)]
pub struct Bisection {
    candidates: usize,
    budget: u32,
    found: Found,
}

impl Bisection {
    pub fn new(candidates: usize, budget: u32) -> Bisection {
        Bisection {
            candidates,
            budget,
            found: Found {
                met: None,
                missed: None,
                probes: 0,
            },
        }
    }

    /// The next candidate to measure, or done.
    pub fn next(&self) -> Next {
        let Found { met, missed, probes } = self.found;
        if probes >= self.budget || self.found.is_exact(self.candidates) {
            return Next::Done;
        }
        Next::Probe(match (met, missed) {
            (None, None) => 0,
            (Some(m), None) => (2 * m + 1).min(self.candidates - 1),
            (Some(m), Some(x)) => m + (x - m) / 2,
            // Only a lowest probe that missed brackets from below nothing: exact, handled above.
            (None, Some(x)) => x / 2,
        })
    }

    /// The measurement of candidate `index`: within the limits or not.
    pub fn measured(&mut self, index: usize, met: bool) {
        let f = &mut self.found;
        f.probes += 1;
        if met {
            f.met = Some(f.met.map_or(index, |m| m.max(index)));
        } else {
            f.missed = Some(f.missed.map_or(index, |x| x.min(index)));
        }
    }

    pub fn found(&self) -> Found {
        self.found
    }
}

/// The most probes a search of `candidates` values can need to reach its resolution, over
/// every place the capacity can be.
pub fn worst_case(candidates: usize) -> u32 {
    (0..=candidates)
        .map(|capacity| probes_for(candidates, capacity))
        .max()
        .unwrap_or(0)
}

/// The probes a search needs when exactly the lowest `capacity` candidates meet the limits.
fn probes_for(candidates: usize, capacity: usize) -> u32 {
    let mut search = Bisection::new(candidates, u32::MAX);
    while let Next::Probe(i) = search.next() {
        search.measured(i, i < capacity);
    }
    search.found().probes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(yaml: &str) -> SearchSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn every_capacity_is_found_exactly_within_the_worst_case() {
        for n in [1, 2, 3, 7, 8, 100, 128, 256] {
            let budget = worst_case(n);
            for capacity in 0..=n {
                let mut search = Bisection::new(n, budget);
                let mut probed = Vec::new();
                while let Next::Probe(i) = search.next() {
                    assert!(!probed.contains(&i), "n={n} c={capacity}: {i} probed twice");
                    probed.push(i);
                    search.measured(i, i < capacity);
                }
                let f = search.found();
                assert!(f.is_exact(n), "n={n} capacity={capacity}: {f:?}");
                assert_eq!(f.met, capacity.checked_sub(1), "n={n}: {probed:?}");
            }
        }
    }

    #[test]
    fn the_worst_case_is_logarithmic_and_far_below_the_grid() {
        assert_eq!(worst_case(1), 1);
        assert_eq!(worst_case(128), 14);
        assert_eq!(worst_case(160), 14);
        assert!(worst_case(10_000) <= 28, "{}", worst_case(10_000));
    }

    #[test]
    fn galloping_doubles_the_load_from_the_lowest() {
        let mut search = Bisection::new(256, 100);
        let mut order = Vec::new();
        while let Next::Probe(i) = search.next() {
            order.push(i + 1);
            search.measured(i, i < 40);
        }
        assert_eq!(order[..7], [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(search.found().met, Some(39));
        assert_eq!(search.found().missed, Some(40));
    }

    #[test]
    fn a_spent_budget_leaves_a_bracket() {
        let mut search = Bisection::new(128, 9);
        while let Next::Probe(i) = search.next() {
            search.measured(i, i < 84);
        }
        let f = search.found();
        assert_eq!((f.probes, f.met, f.missed), (9, Some(63), Some(95)));
        assert!(!f.is_exact(128));
    }

    #[test]
    fn candidates_are_whole_when_written_whole_and_the_bad_fields_named() {
        let c = spec("{axis: concurrency, from: 1, to: 5}").candidates().unwrap();
        assert_eq!(c, [1, 2, 3, 4, 5].map(Json::from));
        let c = spec("{axis: request_rate, from: 0.5, to: 2, step: 0.5}")
            .candidates()
            .unwrap();
        assert_eq!(c, [json!(0.5), json!(1), json!(1.5), json!(2)]);
        let err = |yaml| spec(yaml).candidates().unwrap_err().1;
        assert_eq!(err("{axis: c, from: 8, to: 4}"), "search: to: 4 is below from: 8");
        assert_eq!(
            err("{axis: c, from: 1, to: 4, step: 0}"),
            "search: step: 0 is not above 0"
        );
        assert_eq!(
            err("{axis: c, from: x, to: 4}"),
            "search: from: `x` is not a number"
        );
        assert!(err("{axis: c, from: 1, to: 100000}").contains("take a larger step"));
    }
}
