//! Helpers shared by the unit tests and the tests in `tests/` (not part of the CLI).

use std::time::{Duration, Instant};

/// Waits (at most 10 s) until process `pid` has exited; true when it did.
pub fn wait_until_gone(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie waiting for a parent that is not ours to reap.
        if stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A record for unit tests: of `host` at `point`, with `metrics` (a JSON object) and `status`
/// (a reason when not ok), of step 1 `run-sweep`, attempt and repetition 1.
pub fn record(
    host: &str,
    point: &[(&str, serde_json::Value)],
    metrics: serde_json::Value,
    status: crate::events::RecordStatus,
) -> crate::events::Record {
    crate::events::Record {
        run: "r".into(),
        host: host.into(),
        step: "run-sweep".into(),
        step_index: 0,
        point: point.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        metrics: metrics.as_object().cloned().unwrap_or_default(),
        status,
        reason: (status != crate::events::RecordStatus::Ok).then(|| "why".to_string()),
        at: crate::events::PointRun::once(1),
        variant: None,
        command: None,
    }
}
