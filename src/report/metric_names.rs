//! Which metrics the tables show, and the names users give checked against what the runs hold:
//! `--metric a,b` (a table per metric), else a summary in the spirit of `vllm bench serve`'s
//! for a sweep (throughput, TTFT, TPOT, ITL) of the metrics its records have; a name no record
//! has is refused with the closest one and the list, never shown as a table of empty cells.

use std::collections::BTreeSet;

use super::steps::StepRecords;
use super::{Run, DEFAULT_METRIC};
use crate::config::slo::Slo;
use crate::events::{Record, RecordStatus, UNKNOWN_METRICS};
use crate::exit::Invalid;

/// A sweep's tables when the user names no metric, those its records have: output throughput,
/// then time to first token (median, p99), time per output token (median) and inter-token
/// latency (p99), as `vllm bench serve` sums a run up.
pub const SUMMARY: [&str; 5] = [
    DEFAULT_METRIC,
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_itl_ms",
];

/// Numbers in records that describe the point rather than measure it.
const CONTEXT_KEYS: &[&str] = &[
    "exit_code",
    "max_concurrency",
    "input_len",
    "output_len",
    "num_prompts",
    "request_rate",
];

/// The metrics of a step's tables, in order: the ones asked for; else, for a main step, the
/// summary metrics its records have; else its one metric (see [`pick_metric`]).
pub fn pick_metrics(step: &StepRecords, asked: &[String], main: bool) -> Vec<String> {
    if !asked.is_empty() {
        return asked.to_vec();
    }
    let summary: Vec<String> = match main {
        true => SUMMARY
            .iter()
            .filter(|m| ok_records(step).any(|r| r.metrics.get(**m).is_some_and(|v| v.is_number())))
            .map(|m| m.to_string())
            .collect(),
        false => Vec::new(),
    };
    match summary.is_empty() {
        true => vec![pick_metric(step)],
        false => summary,
    }
}

/// A step's one metric when none is asked for: `output_throughput`, else the first numeric
/// metric of its first successful record.
pub fn pick_metric(step: &StepRecords) -> String {
    if ok_records(step).any(|r| r.metrics.contains_key(DEFAULT_METRIC)) {
        return DEFAULT_METRIC.to_string();
    }
    ok_records(step)
        .flat_map(|r| r.metrics.iter())
        .find(|(k, v)| v.is_number() && !CONTEXT_KEYS.contains(&k.as_str()))
        .map(|(k, _)| k.clone())
        .unwrap_or_else(|| DEFAULT_METRIC.to_string())
}

fn ok_records<'s>(step: &'s StepRecords) -> impl Iterator<Item = &'s Record> + 's {
    step.rows
        .values()
        .flat_map(|h| h.values().flatten())
        .copied()
        .filter(|r| r.status == RecordStatus::Ok)
}

/// Whether any record of the step has `metric`, as a number or said unknown.
pub fn step_holds(step: &StepRecords, metric: &str) -> bool {
    step.rows
        .values()
        .flat_map(|h| h.values().flatten())
        .any(|r| r.metrics.get(metric).is_some_and(|v| v.is_number()) || r.unknown_reason(metric).is_some())
}

/// The metrics any record of `runs` holds: its numeric ones, and those it says are unknown.
pub fn held(runs: &[Run]) -> BTreeSet<String> {
    names_of(runs.iter().flat_map(|r| &r.records))
}

/// The metrics any record of the step holds.
pub fn step_names(step: &StepRecords) -> BTreeSet<String> {
    names_of(step.rows.values().flat_map(|h| h.values().flatten()).copied())
}

fn names_of<'r>(records: impl Iterator<Item = &'r Record>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for record in records {
        for (name, value) in &record.metrics {
            if value.is_number() {
                names.insert(name.clone());
            }
        }
        if let Some(unknown) = record.metrics.get(UNKNOWN_METRICS).and_then(|u| u.as_object()) {
            names.extend(unknown.keys().cloned());
        }
    }
    names
}

/// `--metric` and `--slo` checked against the metrics the runs hold: a name none of their
/// records has is bad input, said with the closest name and the list. Runs without any record
/// cannot tell, and are not judged.
pub fn check(runs: &[Run], asked: &[String], slo: Option<&Slo>) -> Result<(), Invalid> {
    let held = held(runs);
    if held.is_empty() {
        return Ok(());
    }
    let limits = slo.into_iter().flat_map(|s| s.limits.keys());
    let unknown: Vec<(&str, &str)> = asked
        .iter()
        .map(|m| ("--metric", m.as_str()))
        .chain(limits.map(|m| ("--slo", m.as_str())))
        .filter(|(_, m)| !held.contains(*m))
        .collect();
    match unknown.first() {
        None => Ok(()),
        Some(&(flag, name)) => Err(Invalid(not_held(runs, &held, flag, name))),
    }
}

/// Why `name` is refused: which runs lack it, the closest name they hold, and all they hold.
fn not_held(runs: &[Run], held: &BTreeSet<String>, flag: &str, name: &str) -> String {
    let whose = match runs {
        [run] => format!("run {}", run.manifest.run_id),
        _ => format!("the {} runs compared", runs.len()),
    };
    let names: Vec<&str> = held.iter().map(String::as_str).collect();
    let hint = match suggestion(name, &names) {
        Some(best) => format!("; did you mean `{best}`?"),
        None => String::new(),
    };
    format!(
        "{flag} {name}: no record of {whose} has this metric{hint}\n  the records hold ({}): {}",
        names.len(),
        names.join(", ")
    )
}

/// The held name closest to `name`: by edit distance, or one that contains it or that it
/// contains (`p99_ttft` for `p99_ttft_ms`; of several, the summary's first).
pub fn suggestion<'a>(name: &str, names: &[&'a str]) -> Option<&'a str> {
    crate::config::closest(name, names).or_else(|| {
        let mut near = names.iter().filter(|n| n.contains(name) || name.contains(**n));
        let first = near.next().copied();
        let summary = SUMMARY.iter().find(|s| s.contains(name) && names.contains(s));
        summary.copied().or(first)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_metric_gets_the_closest_name() {
        let names = ["output_throughput", "p99_ttft_ms", "median_ttft_ms", "p99_itl_ms"];
        assert_eq!(suggestion("p99_ttft", &names), Some("p99_ttft_ms"));
        assert_eq!(
            suggestion("output_throughputt", &names),
            Some("output_throughput")
        );
        assert_eq!(suggestion("ttft", &names), Some("median_ttft_ms"));
        assert_eq!(suggestion("foo", &names), None);
    }
}
