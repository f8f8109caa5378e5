//! GPU samples: nvidia-smi's query mode run in a loop on the host (one process for a whole
//! sweep, not one per sample) and its CSV lines read back. The fields are nvidia-smi's own
//! (`nvidia-smi --help-query-gpu`); `TZ=UTC0` makes its `timestamp` field UTC, so samples are
//! placed on the host's clock without knowing its time zone.

use serde::Serialize;

use crate::config::template::shell_quote;

/// The fields asked for, in the order the CSV prints them, then the throttle reasons' field.
pub const FIELDS: &str = "timestamp,index,power.draw,utilization.gpu,utilization.memory,memory.used,\
clocks.sm,temperature.gpu";
/// The active throttle reasons: `clocks_event_reasons.active` since driver 535, and
/// `clocks_throttle_reasons.active` before it (an unknown field fails the whole query).
const THROTTLE_FIELDS: [&str; 2] = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"];

/// How often nvidia-smi samples (`-lms`): 3 Hz.
pub const INTERVAL_MS: u32 = 333;

/// The throttle reasons (nvidia-smi's `clocks_event_reasons.*` bits) that mean the GPU was
/// held back by power or heat, not by being idle or by the application's clock setting.
pub const POWER_OR_HEAT: &[(u64, &str)] = &[
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
];

/// One GPU at one moment, as nvidia-smi reported it; a field it reported as `[N/A]` or
/// `[Not Supported]` is None.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSample {
    /// Unix time in seconds, on the host's clock.
    pub t: f64,
    pub gpu: u32,
    pub power_w: Option<f64>,
    pub util_pct: Option<f64>,
    pub mem_util_pct: Option<f64>,
    pub mem_used_mib: Option<f64>,
    pub sm_mhz: Option<f64>,
    pub temp_c: Option<f64>,
    /// The active throttle reasons as a bit mask.
    pub throttle: Option<u64>,
}

/// The sampler's command: nvidia-smi printing a CSV line per GPU every `interval_ms`, asked
/// first which name of the throttle reasons' field this driver knows.
pub fn command(interval_ms: u32) -> String {
    let [new, old] = THROTTLE_FIELDS;
    format!(
        "t={new}; nvidia-smi --query-gpu=$t --format=csv,noheader >/dev/null 2>&1 || t={old}; \
         TZ=UTC0 exec nvidia-smi --query-gpu={},$t --format=csv,noheader,nounits -lms {interval_ms}",
        shell_quote(FIELDS),
    )
}

/// One CSV line of [`command`]'s output, or why it is not one.
pub fn parse(line: &str) -> Result<GpuSample, String> {
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    let [t, gpu, power, util, mem_util, mem_used, sm, temp, throttle] = fields[..] else {
        return Err(format!(
            "{} fields where {} were asked for",
            fields.len(),
            FIELDS.split(',').count() + 1
        ));
    };
    Ok(GpuSample {
        t: timestamp(t)?,
        gpu: gpu
            .parse()
            .map_err(|_| format!("GPU index `{gpu}` is not a number"))?,
        power_w: value(power, "power.draw")?,
        util_pct: value(util, "utilization.gpu")?,
        mem_util_pct: value(mem_util, "utilization.memory")?,
        mem_used_mib: value(mem_used, "memory.used")?,
        sm_mhz: value(sm, "clocks.sm")?,
        temp_c: value(temp, "temperature.gpu")?,
        throttle: mask(throttle)?,
    })
}

/// The names of the power or heat reasons set in `mask`.
pub fn power_or_heat(mask: u64) -> Vec<&'static str> {
    POWER_OR_HEAT
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| *name)
        .collect()
}

/// `2026/12/01 15:40:00.123` (UTC, as `TZ=UTC0` makes it) → Unix seconds.
fn timestamp(text: &str) -> Result<f64, String> {
    let iso = text.replacen('/', "-", 2);
    let at = humantime::parse_rfc3339_weak(&iso)
        .map_err(|_| format!("`{text}` is not a timestamp like 2026/12/01 15:40:00.123"))?;
    at.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .map_err(|_| format!("`{text}` is before 1970"))
}

/// A number, or None for what nvidia-smi prints when a GPU lacks the field.
fn value(text: &str, field: &str) -> Result<Option<f64>, String> {
    if unsupported(text) {
        return Ok(None);
    }
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(Some(v)),
        _ => Err(format!("{field} `{text}` is not a number")),
    }
}

fn mask(text: &str) -> Result<Option<u64>, String> {
    if unsupported(text) {
        return Ok(None);
    }
    let digits = text.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(digits, 16)
        .map(Some)
        .map_err(|_| format!("the throttle reasons' `{text}` is not a hex mask"))
}

fn unsupported(text: &str) -> bool {
    text.starts_with('[') || text == "N/A"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sampler's command against two stand-ins for nvidia-smi: a driver that knows only the
    /// new name of the throttle field, and one that knows only the old.
    #[test]
    fn the_sampler_asks_for_the_throttle_field_by_the_name_the_driver_knows() {
        for [knows, refuses] in [THROTTLE_FIELDS, [THROTTLE_FIELDS[1], THROTTLE_FIELDS[0]]] {
            let dir = tempfile::tempdir().unwrap();
            let tool = dir.path().join("nvidia-smi");
            let script = format!(
                "#!/bin/sh\ncase \"$*\" in *{refuses}*) echo \"Field \\\"{refuses}\\\" is not a valid field to query.\" >&2; exit 2 ;; esac\n\
                 case \"$*\" in *-lms*) printf '%s\\n' \"$*\" ;; esac\n"
            );
            std::fs::write(&tool, script).unwrap();
            std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let out = std::process::Command::new("sh")
                .args(["-c", &command(333)])
                .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let asked = String::from_utf8(out.stdout).unwrap();
            assert!(asked.contains(&format!("{FIELDS},{knows} ")), "{asked}");
            assert!(asked.contains("-lms 333"), "{asked}");
        }
    }

    #[test]
    fn reads_nvidia_smi_query_lines() {
        let s =
            parse("2026/12/01 15:40:00.500, 1, 287.45, 98, 61, 45012, 1875, 71, 0x0000000000000004").unwrap();
        assert_eq!(s.gpu, 1);
        assert_eq!(s.power_w, Some(287.45));
        assert_eq!(s.util_pct, Some(98.0));
        assert_eq!(s.mem_used_mib, Some(45012.0));
        assert_eq!(s.throttle, Some(4));
        assert_eq!(power_or_heat(4 | 1), vec!["sw_power_cap"]);
        assert!((s.t - 1_796_139_600.5).abs() < 1e-6, "{}", s.t);
    }

    #[test]
    fn fields_a_gpu_lacks_are_none() {
        let s = parse("2026/12/01 15:40:00.000, 0, [N/A], 5, [Not Supported], 10, 300, 40, [N/A]").unwrap();
        assert_eq!((s.power_w, s.mem_util_pct, s.throttle), (None, None, None));
    }

    #[test]
    fn says_what_is_wrong_with_a_line() {
        assert!(parse("garbage").unwrap_err().contains("1 fields where 9"));
        let e = parse("yesterday, 0, 1, 1, 1, 1, 1, 1, 0x0").unwrap_err();
        assert!(e.contains("`yesterday` is not a timestamp"), "{e}");
        let e = parse("2026/12/01 15:40:00.000, 0, lots, 1, 1, 1, 1, 1, 0x0").unwrap_err();
        assert!(e.contains("power.draw `lots`"), "{e}");
    }

    #[test]
    fn the_command_quotes_its_fields() {
        assert!(command(333).contains("TZ=UTC0 exec nvidia-smi --query-gpu="));
        assert!(command(333).ends_with("-lms 333"));
    }
}
