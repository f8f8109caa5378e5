//! This machine's wall clock as Unix seconds, the one timescale that telemetry's samples and
//! `rigrun bench`'s windows share so that one can be clipped to the other. Ground floor:
//! imports nothing of rigrun.

/// Now, as Unix seconds on this machine's clock (0 for a clock set before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
