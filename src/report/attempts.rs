//! A run's records as its tables use them: per host, step and point, the records of its
//! latest attempt only (a retried, re-run or resumed point shows how it ended last; each
//! repetition of a repeated point on its own), and how many points took more than one attempt.

use std::collections::{HashMap, HashSet};

use crate::events::Record;
use crate::point::PointKey;

/// The records of each point's latest attempt, in their order, and the number of points whose
/// latest attempt is not their first. In a `resumed` run, a record repeated exactly within one
/// attempt (the output of a command re-attached after the resume, read again) is kept once.
pub fn latest(records: Vec<Record>, resumed: bool) -> (Vec<Record>, usize) {
    let key = |r: &Record| (r.column(), r.key());
    let mut last: HashMap<(String, PointKey), u32> = HashMap::new();
    for record in &records {
        let attempt = last.entry(key(record)).or_insert(record.at.attempt);
        *attempt = (*attempt).max(record.at.attempt);
    }
    let rerun = last.values().filter(|&&a| a > 1).count();
    let mut seen: HashSet<String> = HashSet::new();
    let kept = records
        .into_iter()
        .filter(|r| last.get(&key(r)) == Some(&r.at.attempt))
        .filter(|r| !resumed || seen.insert(serde_json::to_string(r).unwrap_or_default()))
        .collect();
    (kept, rerun)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RecordStatus;
    use serde_json::json;

    fn record(c: u64, attempt: u32, status: RecordStatus, x: f64) -> Record {
        Record {
            at: crate::events::PointRun::once(attempt),
            ..crate::testutil::record("a", &[("c", json!(c))], json!({ "x": x }), status)
        }
    }

    #[test]
    fn each_point_keeps_its_latest_attempt() {
        let records = vec![
            record(1, 1, RecordStatus::Failed, 0.0),
            record(2, 1, RecordStatus::Ok, 2.0),
            record(1, 2, RecordStatus::Failed, 0.0),
            record(1, 3, RecordStatus::Ok, 1.0),
            record(1, 3, RecordStatus::Ok, 1.0),
        ];
        let (kept, rerun) = latest(records, true);
        let attempts: Vec<(u64, u32)> = kept
            .iter()
            .map(|r| (r.point["c"].as_u64().unwrap(), r.at.attempt))
            .collect();
        assert_eq!(attempts, [(2, 1), (1, 3)]);
        assert_eq!(rerun, 1);
    }
}
