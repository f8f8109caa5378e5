//! The error a command gets when the host, not the command, failed: the connection could not be
//! kept or got back in time, or the command vanished on the host (a reboot). A step tells it
//! from the command's own failure with [`is_lost`]: a lost point may be run again, a failed one
//! only when the step asks for retries.

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
