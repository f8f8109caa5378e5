//! What a sweep's capacity search found on each host, as the run kept it (the step's `search`
//! details in run.json): per column and series, the highest candidate that met the limits, the
//! lowest that missed them, and the probes it took. Told beside the SLO headline (a search of
//! concurrency), or as the headline itself when the searched axis is another (a request rate),
//! whose levels the concurrency-based capacity cannot tell apart.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use super::Run;
use crate::point::value_text;
use crate::words::count;

/// One step's searches across the run's columns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchSummary {
    pub axis: String,
    pub found: Vec<Found>,
}

/// What one series' search found on one column, as the step's details say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Found {
    /// The host, or `host/variant`.
    #[serde(default)]
    pub column: String,
    /// The other axes' values (`(single)` without any).
    pub series: String,
    pub met: Option<Json>,
    pub missed: Option<Json>,
    pub exact: bool,
    pub probes: u32,
    pub candidates: usize,
}

impl Found {
    /// `blackwell`, or `blackwell (input_len=8000)` for a series of other axes.
    pub fn name(&self) -> String {
        crate::point::series_name(&self.column, &self.series)
    }
}

impl SearchSummary {
    /// The searches step `index` made in `run`, in the order of `columns`; none when it made none.
    pub fn of(run: &Run, index: usize, axis: &str, columns: &[String]) -> Option<SearchSummary> {
        let mut found = Vec::new();
        for (host, entry) in &run.manifest.hosts {
            for step in entry.steps.iter().filter(|s| s.index == index) {
                let column = crate::point::column(host, step.variant.as_deref());
                let searches = step.details.get("search").and_then(Json::as_array);
                for search in searches.into_iter().flatten() {
                    let mut one = match serde_json::from_value::<Found>(search.clone()) {
                        Ok(one) => one,
                        Err(why) => {
                            eprintln!(
                                "warning: {}: host {host}, step {}: a search's details are not \
                                 readable ({why}); that search is left out of the report",
                                run.dir.join("run.json").display(),
                                step.name
                            );
                            continue;
                        }
                    };
                    one.column = column.clone();
                    found.retain(|f: &Found| (&f.column, &f.series) != (&one.column, &one.series));
                    found.push(one);
                }
            }
        }
        found.sort_by_key(|f| columns.iter().position(|c| *c == f.column));
        (!found.is_empty()).then(|| SearchSummary {
            axis: axis.to_string(),
            found,
        })
    }

    /// `blackwell: concurrency=141 (142 did not; 13 probes of 160 candidates)`, one per series,
    /// joined.
    pub fn sentence(&self) -> String {
        let parts: Vec<String> = self.found.iter().map(|f| self.one(f)).collect();
        parts.join("; ")
    }

    fn one(&self, f: &Found) -> String {
        let name = f.name();
        let value = |v: &Json| format!("{}={}", self.axis, value_text(v));
        let probes = format!(
            "{} of {} candidates",
            count(f.probes as usize, "probe"),
            f.candidates
        );
        match (&f.met, &f.missed) {
            (Some(m), Some(x)) if f.exact => {
                format!("{name}: {} ({} did not; {probes})", value(m), value_text(x))
            }
            (Some(m), Some(x)) => format!(
                "{name}: at least {}, less than {} (the probes ran out; {probes})",
                value(m),
                value_text(x)
            ),
            (Some(m), None) => format!("{name}: {}, the highest candidate ({probes})", value(m)),
            (None, Some(x)) => format!("{name}: none, not even {} ({probes})", value(x)),
            (None, None) => format!("{name}: nothing measured"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(column: &str, met: Option<u32>, missed: Option<u32>, exact: bool) -> Found {
        Found {
            column: column.into(),
            series: crate::point::SINGLE.into(),
            met: met.map(Json::from),
            missed: missed.map(Json::from),
            exact,
            probes: 9,
            candidates: 160,
        }
    }

    #[test]
    fn each_outcome_reads_as_what_was_found() {
        let summary = SearchSummary {
            axis: "concurrency".into(),
            found: vec![
                found("blackwell", Some(141), Some(142), true),
                found("a6000", Some(31), Some(47), false),
                found("tiny", None, Some(1), true),
                found("huge", Some(160), None, true),
            ],
        };
        assert_eq!(
            summary.sentence(),
            "blackwell: concurrency=141 (142 did not; 9 probes of 160 candidates); \
             a6000: at least concurrency=31, less than 47 (the probes ran out; 9 probes of 160 candidates); \
             tiny: none, not even concurrency=1 (9 probes of 160 candidates); \
             huge: concurrency=160, the highest candidate (9 probes of 160 candidates)"
        );
    }
}
