//! What the client asks of the operating system: enough open files for C sockets, and its own
//! CPU time and memory, so that each level can say whether the client kept up.

use std::time::Duration;

/// Lifts the soft open-file limit to the hard one (each stream holds a socket; many hosts
/// default to 1024, fewer than C=1024 streams plus the runtime need). Returns the limit now in
/// force: the old one if it could not be raised, 0 if it cannot be read.
pub fn raise_open_file_limit() -> u64 {
    rlimit::increase_nofile_limit(u64::MAX)
        .or_else(|_| rlimit::Resource::NOFILE.get().map(|(soft, _)| soft))
        .unwrap_or(0)
}

/// This process's resource use so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User plus system CPU time of all threads.
    pub cpu: Duration,
    /// Peak resident memory in bytes.
    pub max_rss_bytes: u64,
}

/// Reads `getrusage(RUSAGE_SELF)`; zeros when the call fails.
pub fn usage() -> Usage {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut raw: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut raw) } != 0 {
        return Usage::default();
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Usage {
        cpu: time(raw.ru_utime) + time(raw.ru_stime),
        max_rss_bytes: max_rss_bytes(raw.ru_maxrss),
    }
}

/// `ru_maxrss` in bytes: Linux and the BSDs count kilobytes, macOS (and iOS) bytes.
fn max_rss_bytes(ru_maxrss: libc::c_long) -> u64 {
    let unit = match cfg!(any(target_os = "macos", target_os = "ios")) {
        true => 1,
        false => 1024,
    };
    (ru_maxrss.max(0) as u64) * unit
}

/// CPU cores this process may use (affinity and cgroup quota respected).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_the_open_file_limit_to_the_hard_one() {
        let limit = raise_open_file_limit();
        let (soft, hard) = rlimit::Resource::NOFILE.get().unwrap();
        assert_eq!((limit, soft), (hard, hard));
    }

    #[test]
    fn reads_usage() {
        let before = usage();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let after = usage();
        assert!(after.cpu >= before.cpu);
        assert!(after.max_rss_bytes > 0);
        assert!(cores() >= 1);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_peak_memory_is_in_bytes_as_proc_counts_it() {
        let peak = usage().max_rss_bytes;
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let hwm = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
        let kib: u64 = hwm.trim().trim_end_matches("kB").trim().parse().unwrap();
        // At least this process's own peak (a forked process's count starts from its
        // parent's, so it may be more): read in the wrong unit it would be 1024 times less.
        assert!(peak + (1 << 20) >= kib * 1024, "{peak} vs {kib} kB");
    }
}
