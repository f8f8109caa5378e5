//! Telemetry per sweep point: the host's GPUs (nvidia-smi's query mode in a loop on the host,
//! `gpu.rs`, or a DCGM exporter the inventory names, `dcgm.rs`) and the inference server's own counters (its Prometheus `/metrics` through the SSH
//! forward: `prometheus.rs` reads the text, `server_metrics.rs` knows vLLM's, SGLang's and llama.cpp's
//! names), watched while a sweep runs (`watch.rs`), folded into each record's metrics
//! (`summary.rs`, energy per output token) and judged (`problems.rs`); the GPUs' errors before,
//! during and after a sweep (`gpu_health.rs`).

pub mod dcgm;
pub mod gpu;
pub mod gpu_health;
pub mod problems;
pub mod prometheus;
pub mod server_metrics;
pub mod summary;
mod watch;

pub use watch::{GpuSource, Mark, Sources, Watch};

/// `x` rounded to `digits` decimals as JSON (an integer for 0 digits), null when not finite.
pub fn number(x: f64, digits: i32) -> serde_json::Value {
    let scale = 10f64.powi(digits);
    let rounded = (x * scale).round() / scale;
    if digits == 0 && rounded.abs() < 9e15 {
        return serde_json::Value::from(rounded as i64);
    }
    serde_json::Number::from_f64(rounded).map_or(serde_json::Value::Null, serde_json::Value::Number)
}
