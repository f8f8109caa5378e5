//! Helpers shared by the unit tests and the tests in `tests/` (not part of the CLI).

use std::time::{Duration, Instant};

/// Waits (at most 10 s) until process `pid` has exited; true when it did.
pub fn wait_until_gone(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether process `pid` is gone, or a zombie waiting for a parent that is not ours to reap.
/// Linux reads `/proc`.
#[cfg(target_os = "linux")]
fn is_gone(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")
}

/// Unixes without `/proc` (macOS) ask `ps`.
#[cfg(not(target_os = "linux"))]
fn is_gone(pid: &str) -> bool {
    is_gone_by_ps(pid)
}

/// [`is_gone`] as POSIX `ps -o stat=` tells it (no line: gone; `Z…`: a zombie). The fallback
/// of unixes without `/proc`, compiled on Linux too so that its test runs here.
#[cfg_attr(all(target_os = "linux", not(test)), allow(dead_code))]
fn is_gone_by_ps(pid: &str) -> bool {
    let Ok(out) = std::process::Command::new("ps")
        .args(["-o", "stat=", "-p", pid])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return false;
    };
    let state = String::from_utf8_lossy(&out.stdout);
    state.trim().is_empty() || state.trim_start().starts_with('Z')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ps_and_proc_tell_a_running_a_zombie_and_a_gone_process_alike() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id().to_string();
        assert!(!is_gone(&pid) && !is_gone_by_ps(&pid));
        child.kill().unwrap();
        // Killed but not yet reaped: a zombie, which both take for gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_gone(&pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(is_gone(&pid) && is_gone_by_ps(&pid));
        child.wait().unwrap();
        assert!(is_gone(&pid) && is_gone_by_ps(&pid));
        assert!(wait_until_gone(&pid));
    }
}
