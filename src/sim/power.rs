//! Simulated GPU telemetry, for demos: a profile's `gpu:` cards and a **model** of their power
//! (not a measurement), served in the NVIDIA DCGM exporter's Prometheus format at
//! `/dcgm-exporter/metrics`. Power rises with the batch toward the card's limit:
//! `P = idle + (limit − idle) × b / (b + half_power_batch)` per GPU, with `b` the running
//! requests; utilisation, temperature and memory follow the same load. Figures and their
//! sources are in the profiles and `src/sim/README.md`.

use std::fmt::Write as _;

use serde::Deserialize;

/// A profile's `gpu:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuModel {
    /// As nvidia-smi names the card.
    pub name: String,
    pub count: u32,
    /// The board's power limit (W).
    pub power_limit_w: f64,
    /// Power with nothing running (W), an assumption.
    pub idle_power_w: f64,
    /// Running requests at which the dynamic power is half of its range.
    pub half_power_batch: f64,
    /// Framebuffer in use by the server (MiB): servers preallocate most of it.
    pub memory_used_mib: f64,
    pub sm_clock_mhz: f64,
}

/// A field's value for a card at a load (0..1).
type Field = fn(&GpuModel, f64) -> f64;

/// The DCGM fields served, their help text and how each follows the load.
const FIELDS: &[(&str, &str, Field)] = &[
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |g, load| {
        g.idle_power_w + (g.power_limit_w - g.idle_power_w) * load
    }),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |_, load| {
        if load > 0.0 {
            (50.0 + 50.0 * load).round()
        } else {
            0.0
        }
    }),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        |_, load| (80.0 * load).round(),
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |g, _| g.memory_used_mib,
    ),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", |g, _| {
        g.sm_clock_mhz
    }),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |_, load| {
        (35.0 + 45.0 * load).round()
    }),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons.",
        |_, _| 0.0,
    ),
];

impl GpuModel {
    /// Why the section cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        let ok = self.count >= 1
            && self.idle_power_w >= 0.0
            && self.power_limit_w > self.idle_power_w
            && self.half_power_batch > 0.0;
        match ok {
            true => Ok(()),
            false => Err(
                "gpu: needs count >= 1, 0 <= idle_power_w < power_limit_w and half_power_batch > 0".into(),
            ),
        }
    }

    /// The share of the dynamic power range in use with `running` requests.
    pub fn load(&self, running: usize) -> f64 {
        let b = running as f64;
        b / (b + self.half_power_batch)
    }

    /// The exporter's text with `running` requests in the batch (spread over every GPU, as
    /// tensor parallelism does).
    pub fn exposition(&self, running: usize) -> String {
        let load = self.load(running);
        let mut text = String::new();
        for (name, help, value) in FIELDS {
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} gauge");
            for gpu in 0..self.count {
                let _ = writeln!(
                    text,
                    "{name}{{gpu=\"{gpu}\",UUID=\"GPU-rigrun-sim-{gpu}\",device=\"nvidia{gpu}\",modelName={},Hostname=\"rigrun-sim\"}} {}",
                    serde_json::Value::from(self.name.as_str()),
                    value(self, load)
                );
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::{dcgm, prometheus};

    fn a6000() -> GpuModel {
        GpuModel {
            name: "NVIDIA RTX A6000".into(),
            count: 2,
            power_limit_w: 300.0,
            idle_power_w: 25.0,
            half_power_batch: 8.0,
            memory_used_mib: 44000.0,
            sm_clock_mhz: 1800.0,
        }
    }

    #[test]
    fn power_rises_with_the_batch_toward_the_limit_and_reads_back_as_dcgm() {
        let g = a6000();
        let power = |running| {
            let (scrape, bad) = prometheus::parse(&g.exposition(running));
            assert!(bad.is_empty(), "{bad:?}");
            let samples = dcgm::samples(0.0, &scrape);
            assert_eq!(samples.len(), 2);
            samples[0].power_w.unwrap()
        };
        assert_eq!(power(0), 25.0);
        assert_eq!(power(8), 162.5);
        assert!(power(64) > power(8) && power(1024) < 300.0);
        assert!(g.check().is_ok());
        assert!(GpuModel {
            idle_power_w: 400.0,
            ..a6000()
        }
        .check()
        .is_err());
    }
}
