//! The errors a command gets when the host, not the command, failed: [`Lost`], the connection
//! could not be kept or got back in time, or the command vanished on the host; [`Rebooted`], the
//! host rebooted while the command ran (its boot id changed: the command died with the host);
//! and [`DiskFull`], the host's disk could not take the command's files. A step tells the first
//! two from the command's own failure with [`is_lost`]: a lost point may be run again, a failed
//! one only when the step asks for retries; [`is_rebooted`] tells a reboot apart (a server
//! rigrun started is gone too); the third ([`is_disk_full`]) fails the point, not the host.

use std::fmt;

/// An error type that is its reason, in the user's words.
macro_rules! reason_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone)]
        pub struct $name {
            pub reason: String,
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.reason)
            }
        }

        impl std::error::Error for $name {}
    };
}

reason_error!(
    /// The host was lost while (or before) a command ran.
    Lost
);

reason_error!(
    /// The host rebooted while (or before) a command ran: the command's processes died with the
    /// host, its files in the workdir stay but are not its result. A kind of lost.
    Rebooted
);

reason_error!(
    /// The disk holding the host's workdir is full: a command could not be started there, or its
    /// end could not be kept. The point fails with this; the host is not lost.
    DiskFull
);

/// Whether `error` (or what it wraps) says the host was lost (or rebooted) rather than the
/// command failing.
pub fn is_lost(error: &anyhow::Error) -> bool {
    caused_by::<Lost>(error) || is_rebooted(error)
}

/// Whether `error` (or what it wraps) says the host rebooted while the command ran.
pub fn is_rebooted(error: &anyhow::Error) -> bool {
    caused_by::<Rebooted>(error)
}

/// Whether `error` (or what it wraps) says the host's disk is full.
pub fn is_disk_full(error: &anyhow::Error) -> bool {
    caused_by::<DiskFull>(error)
}

fn caused_by<E: std::error::Error + 'static>(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<E>().is_some())
}
