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
