//! A run's records grouped the way tables show them: by step, then by row (a sweep point, or
//! one record of it when a point produced several), then by host; which steps are the main
//! ones.

use std::collections::HashMap;

use indexmap::IndexMap;

use crate::events::{Record, RecordStatus};
use crate::point::PointKey;

/// The records of one step, grouped into rows keyed by point (and record, when a point
/// produced several), in the order they first appeared.
pub struct StepRecords<'a> {
    pub step: String,
    pub step_index: usize,
    pub rows: IndexMap<String, RowRecords<'a>>,
}

/// Records of one row, by column (a host, or `host/variant`).
pub type RowRecords<'a> = IndexMap<String, Vec<&'a Record>>;

/// Groups a run's records by step, then by row label, then by column.
pub fn group(records: &[Record]) -> Vec<StepRecords<'_>> {
    let mut steps: IndexMap<(usize, String), IndexMap<String, RowRecords>> = IndexMap::new();
    // Counted per repetition: the repetitions of a point share its rows.
    let mut seen_per_point: HashMap<(String, PointKey), usize> = HashMap::new();
    for record in records {
        let key = record.key();
        let base = key.point.label.clone();
        let column = record.column();
        let n = seen_per_point.entry((column.clone(), key)).or_insert(0);
        *n += 1;
        let label = match (record.status, *n) {
            (RecordStatus::Ok, k) if k > 1 => sub_label(&base, record, k),
            _ => base,
        };
        steps
            .entry((record.step_index, record.step.clone()))
            .or_default()
            .entry(label)
            .or_default()
            .entry(column)
            .or_default()
            .push(record);
    }
    // A point no column probed (a capacity search did not need it) has no row.
    for rows in steps.values_mut() {
        rows.retain(|_, columns| !columns.values().flatten().all(|r| r.is_not_probed()));
    }
    // In step order: a server variant's startup record comes before its steps' records.
    steps.sort_by_key(|step, _| step.0);
    steps
        .into_iter()
        .map(|((step_index, step), rows)| StepRecords {
            step,
            step_index,
            rows,
        })
        .collect()
}

/// A label for the k-th record of one point: its `max_concurrency` when it has one.
fn sub_label(base: &str, record: &Record, k: usize) -> String {
    match record.metrics.get("max_concurrency") {
        Some(c) => format!("{base} max_concurrency={c}"),
        None => format!("{base} #{k}"),
    }
}

/// Whether a step is one of the run's main tables (compared, charted, told the scaling story
/// of): the sweeps, or every step when no sweep measured anything. Fetched result files repeat
/// a measuring sweep's numbers.
pub fn is_main_step(groups: &[StepRecords], step: &StepRecords) -> bool {
    let measuring_sweep = |g: &StepRecords| {
        !is_fetched(g)
            && g.rows
                .values()
                .flat_map(|h| h.values().flatten())
                .any(|r| r.status == RecordStatus::Ok)
    };
    !is_fetched(step) || !groups.iter().any(measuring_sweep)
}

/// Whether the group's records are fetched files (not run-sweep measurements); a group without
/// records (a sweep that never ran) is not.
pub fn is_fetched(step: &StepRecords) -> bool {
    let mut records = step.rows.values().flat_map(|h| h.values().flatten()).peekable();
    records.peek().is_some() && records.all(|r| r.point.contains_key("file"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::cell::{cell, Cell};
    use crate::report::metric_names::pick_metric;
    use serde_json::{json, Value as Json};

    fn record(host: &str, c: u64, status: RecordStatus, metrics: Json) -> Record {
        Record {
            step_index: 2,
            ..crate::testutil::record(host, &[("concurrency", json!(c))], metrics, status)
        }
    }

    #[test]
    fn rows_are_points_and_cells_follow_status() {
        let recs = vec![
            record("a", 1, RecordStatus::Ok, json!({"output_throughput": 172.0})),
            record("b", 1, RecordStatus::Ok, json!({"output_throughput": 86.0})),
            record("a", 1024, RecordStatus::Skipped, json!({})),
            record("b", 1024, RecordStatus::Failed, json!({"exit_code": 1})),
        ];
        let groups = group(&recs);
        assert_eq!(groups.len(), 1);
        let step = &groups[0];
        assert_eq!(pick_metric(step), "output_throughput");
        let labels: Vec<_> = step.rows.keys().cloned().collect();
        assert_eq!(labels, ["concurrency=1", "concurrency=1024"]);
        let row = &step.rows["concurrency=1024"];
        assert!(matches!(
            cell(row.get("a"), "output_throughput"),
            Cell::Skipped { .. }
        ));
        assert!(matches!(
            cell(row.get("b"), "output_throughput"),
            Cell::Failed { .. }
        ));
        assert!(matches!(cell(row.get("c"), "output_throughput"), Cell::Missing));
        assert_eq!(
            cell(step.rows["concurrency=1"].get("a"), "output_throughput").number(),
            Some(172.0)
        );
    }

    #[test]
    fn several_records_of_one_point_get_their_own_rows() {
        let recs = vec![
            record("a", 1, RecordStatus::Ok, json!({"max_concurrency": 1, "x": 1.0})),
            record("a", 1, RecordStatus::Ok, json!({"max_concurrency": 4, "x": 2.0})),
        ];
        let groups = group(&recs);
        let labels: Vec<_> = groups[0].rows.keys().cloned().collect();
        assert_eq!(labels, ["concurrency=1", "concurrency=1 max_concurrency=4"]);
        assert_eq!(pick_metric(&groups[0]), "x");
    }

    #[test]
    fn records_the_benchmark_marked_invalid_are_never_numbers() {
        let problems = json!({"output_throughput": 900.0, "valid": false, "problems": ["3 of 12 requests failed", "short outputs"]});
        let recs = vec![
            record("a", 4, RecordStatus::Ok, problems),
            record(
                "b",
                4,
                RecordStatus::Ok,
                json!({"output_throughput": 800.0, "valid": true}),
            ),
            record("c", 4, RecordStatus::Ok, json!({"valid": false})),
        ];
        let groups = group(&recs);
        let row = &groups[0].rows["concurrency=4"];
        let a = cell(row.get("a"), "output_throughput");
        assert!(
            matches!(
                a,
                Cell::Invalid {
                    value: Some(900.0),
                    ..
                }
            ),
            "{a:?}"
        );
        assert_eq!(a.number(), None);
        let (short, why) = a.note().unwrap();
        assert_eq!(
            (short.as_str(), why.as_str()),
            ("invalid", "invalid: 3 of 12 requests failed; short outputs")
        );
        assert_eq!(cell(row.get("b"), "output_throughput").number(), Some(800.0));
        let c = cell(row.get("c"), "output_throughput");
        assert_eq!(c.text(), "invalid: the benchmark marked this record invalid");
    }

    #[test]
    fn fetched_files_are_main_steps_only_when_no_sweep_measured() {
        let mut fetched = record("a", 1, RecordStatus::Ok, json!({"output_throughput": 1.0}));
        fetched.point = IndexMap::from([("file".to_string(), json!("c1.json"))]);
        fetched.step_index = 3;
        let measured = record("a", 1, RecordStatus::Ok, json!({"output_throughput": 1.0}));
        let skipped = record("a", 1, RecordStatus::Skipped, json!({}));
        let both = vec![measured, fetched.clone()];
        let groups = group(&both);
        assert!(is_main_step(&groups, &groups[0]) && !is_main_step(&groups, &groups[1]));
        let nothing_measured = vec![skipped, fetched];
        let groups = group(&nothing_measured);
        assert!(groups.iter().all(|g| is_main_step(&groups, g)));
    }
}
