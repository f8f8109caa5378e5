//! The errors a command gets when the host, not the command, failed: [`Lost`], the connection
//! could not be kept or got back in time, or the command vanished on the host (a reboot); and
//! [`DiskFull`], the host's disk could not take the command's files. A step tells the first from
//! the command's own failure with [`is_lost`]: a lost point may be run again, a failed one only
//! when the step asks for retries; the second ([`is_disk_full`]) fails the point, not the host.

use std::fmt;

/// The host was lost while (or before) a command ran; the reason in the user's words.
#[derive(Debug, Clone)]
pub struct Lost {
    pub reason: String,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Lost {}

/// Whether `error` (or what it wraps) says the host was lost rather than the command failing.
pub fn is_lost(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<Lost>().is_some())
}

/// The disk holding the host's workdir is full: a command could not be started there, or its
/// end could not be kept. The point fails with this; the host is not lost.
#[derive(Debug, Clone)]
pub struct DiskFull {
    pub reason: String,
}

impl fmt::Display for DiskFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for DiskFull {}

/// Whether `error` (or what it wraps) says the host's disk is full.
pub fn is_disk_full(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<DiskFull>().is_some())
}
