//! A point's GPU samples folded into its record's metrics: power (mean and peak, summed over
//! the host's GPUs), utilisation, memory, clocks, temperature, throttle reasons, and energy over
//! the window with the energy per output token derived from it — only when the window is the
//! benchmark's own, so that energy and tokens cover the same seconds.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use super::gpu::{self, GpuSample};
use super::number;
use crate::events::UNKNOWN_METRICS as UNKNOWN;

/// The stretch of time a record's energy covers (Unix seconds on the host's clock), and what it
/// is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub start: f64,
    pub end: f64,
    pub kind: WindowKind,
}

/// Where a record's window comes from: the benchmark's steady state (all C streams running),
/// its measured phase, or, when it says neither, the whole point as rigrun saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Steady,
    Measured,
    Point,
}

impl WindowKind {
    /// As records name it (`gpu_energy_window`).
    pub fn name(self) -> &'static str {
        match self {
            WindowKind::Steady => "steady_state",
            WindowKind::Measured => "measured",
            WindowKind::Point => "point",
        }
    }
}

impl Window {
    pub fn seconds(&self) -> f64 {
        (self.end - self.start).max(0.0)
    }

    pub fn holds(&self, t: f64) -> bool {
        t >= self.start && t <= self.end
    }
}

/// The metrics of energy per unit of work: only over the benchmark's own window.
pub const PER_TOKEN: [&str; 2] = ["joules_per_output_token", "output_tokens_per_joule"];

/// Why energy per token is unknown for a record without a window of its own.
const NO_WINDOW: &str = "the benchmark reported no measured window (measure_start_unix and \
     measure_end_unix, or steady_state_start_unix and steady_state_end_unix), so its tokens \
     cannot be set against the GPU energy of the same seconds; the point's energy also covers \
     start-up and warm-up";

/// The metrics of the samples inside `window`: none when no sample falls in it, and then the
/// per-token metrics are unknown with the reason. Energy is the host's mean power times the
/// window's length, so samples a little late to arrive do not shorten it; `output_tokens` are
/// the tokens made in the window (none for a point's window).
pub fn gpu_metrics(samples: &[GpuSample], window: Window, output_tokens: Option<f64>) -> Map<String, Json> {
    let inside: Vec<&GpuSample> = samples.iter().filter(|s| window.holds(s.t)).collect();
    let mut m = Map::new();
    if inside.is_empty() {
        let why = format!(
            "no GPU sample fell inside the benchmark's {:.2} s window (sampled every {} ms)",
            window.seconds(),
            gpu::INTERVAL_MS
        );
        if window.kind != WindowKind::Point && !samples.is_empty() {
            unknown(&mut m, &PER_TOKEN, &why);
        }
        return m;
    }
    let mut put = |name: &str, value: Option<f64>, digits: i32| {
        if let Some(v) = value {
            m.insert(name.into(), number(v, digits));
        }
    };
    let power = host_power(&inside);
    put("gpu_samples", Some(inside.len() as f64), 0);
    put("gpu_power_mean_w", power.mean, 2);
    put("gpu_power_peak_w", power.peak, 2);
    put("gpu_util_mean_pct", mean(&inside, |s| s.util_pct), 2);
    put("gpu_mem_util_mean_pct", mean(&inside, |s| s.mem_util_pct), 2);
    put("gpu_memory_used_peak_mib", peak(&inside, |s| s.mem_used_mib), 0);
    put("gpu_sm_clock_mean_mhz", mean(&inside, |s| s.sm_mhz), 1);
    put("gpu_temperature_peak_c", peak(&inside, |s| s.temp_c), 1);
    let energy = power.mean.map(|w| w * window.seconds());
    put("gpu_energy_j", energy, 2);
    put("gpu_energy_window_s", Some(window.seconds()), 3);
    match window.kind {
        WindowKind::Point => unknown(&mut m, &PER_TOKEN, NO_WINDOW),
        _ => per_token(&mut m, energy, output_tokens),
    }
    m.insert("gpu_energy_window".into(), Json::from(window.kind.name()));
    let throttled = throttled(&inside);
    if !throttled.is_empty() {
        m.insert("gpu_throttle_reasons".into(), Json::from(throttled.join(",")));
    }
    m
}

/// Joules per output token and its inverse, from the energy and the tokens of one window.
fn per_token(m: &mut Map<String, Json>, energy: Option<f64>, tokens: Option<f64>) {
    let (Some(j), Some(tokens)) = (energy, tokens.filter(|t| *t > 0.0)) else {
        return;
    };
    m.insert("joules_per_output_token".into(), number(j / tokens, 6));
    if j > 0.0 {
        m.insert("output_tokens_per_joule".into(), number(tokens / j, 6));
    }
}

/// Says in the record that `metrics` are unknown, and why.
pub fn unknown(m: &mut Map<String, Json>, metrics: &[&str], why: &str) {
    let entry = m.entry(UNKNOWN).or_insert_with(|| Json::Object(Map::new()));
    if let Json::Object(reasons) = entry {
        for metric in metrics {
            reasons.insert((*metric).into(), Json::from(why));
        }
    }
}

/// Records made before energy per token needed the benchmark's window divided the whole
/// point's energy by the measured tokens (1.4–2.4× too high on short points): their per-token
/// figures are withdrawn, said unknown with the reason, when the record is read.
pub fn withdraw_mismatched(m: &mut Map<String, Json>) {
    let over_point = m.get("gpu_energy_window").and_then(Json::as_str) == Some("point");
    if !over_point || !PER_TOKEN.iter().any(|k| m.contains_key(*k)) {
        return;
    }
    for metric in PER_TOKEN {
        m.remove(metric);
    }
    unknown(
        m,
        &PER_TOKEN,
        "recorded by an earlier rigrun over the whole point (start-up and warm-up included) \
         while the tokens were the benchmark's: not comparable, left out",
    );
}

/// Mean and peak of the host's power: per GPU its mean (summed), per moment the GPUs' sum.
struct Power {
    mean: Option<f64>,
    peak: Option<f64>,
}

fn host_power(samples: &[&GpuSample]) -> Power {
    let mut per_gpu: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut per_moment: BTreeMap<u64, f64> = BTreeMap::new();
    for s in samples {
        let Some(w) = s.power_w else { continue };
        per_gpu.entry(s.gpu).or_default().push(w);
        // nvidia-smi stamps every GPU's line of one loop with the same time (to the ms).
        *per_moment.entry((s.t * 1000.0).round() as u64).or_default() += w;
    }
    let mean = (!per_gpu.is_empty()).then(|| {
        per_gpu
            .values()
            .map(|v| v.iter().sum::<f64>() / v.len() as f64)
            .sum()
    });
    Power {
        mean,
        peak: per_moment.values().copied().reduce(f64::max),
    }
}

fn mean(samples: &[&GpuSample], field: fn(&GpuSample) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = samples.iter().filter_map(|s| field(s)).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn peak(samples: &[&GpuSample], field: fn(&GpuSample) -> Option<f64>) -> Option<f64> {
    samples.iter().filter_map(|s| field(s)).reduce(f64::max)
}

/// `gpu0:sw_power_cap`, … for every GPU held back by power or heat in the window.
fn throttled(samples: &[&GpuSample]) -> Vec<String> {
    let mut masks: BTreeMap<u32, u64> = BTreeMap::new();
    for s in samples {
        *masks.entry(s.gpu).or_default() |= s.throttle.unwrap_or(0);
    }
    masks
        .iter()
        .flat_map(|(gpu, mask)| {
            gpu::power_or_heat(*mask)
                .into_iter()
                .map(move |r| format!("gpu{gpu}:{r}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample(t: f64, gpu: u32, power: f64, throttle: u64) -> GpuSample {
        GpuSample {
            t,
            gpu,
            power_w: Some(power),
            util_pct: Some(50.0),
            mem_util_pct: None,
            mem_used_mib: Some(1000.0 + power),
            sm_mhz: Some(1800.0),
            temp_c: Some(60.0),
            throttle: Some(throttle),
        }
    }

    #[test]
    fn sums_gpus_clips_to_the_window_and_derives_energy_per_token() {
        let samples = vec![
            sample(9.0, 0, 999.0, 0x4), // before the window: left out
            sample(10.0, 0, 100.0, 0),
            sample(10.0, 1, 200.0, 0),
            sample(11.0, 0, 300.0, 0x1),
            sample(11.0, 1, 200.0, 0x40),
            sample(13.0, 0, 999.0, 0), // after
        ];
        let window = Window {
            start: 10.0,
            end: 12.0,
            kind: WindowKind::Steady,
        };
        let m = gpu_metrics(&samples, window, Some(100.0));
        assert_eq!(m["gpu_samples"], json!(4));
        assert_eq!(m["gpu_power_mean_w"], json!(400.0));
        assert_eq!(m["gpu_power_peak_w"], json!(500.0));
        assert_eq!(m["gpu_energy_j"], json!(800.0));
        assert_eq!(m["joules_per_output_token"], json!(8.0));
        assert_eq!(m["output_tokens_per_joule"], json!(0.125));
        assert_eq!(m["gpu_energy_window"], json!("steady_state"));
        assert_eq!(m["gpu_throttle_reasons"], json!("gpu1:hw_thermal_slowdown"));
        assert_eq!(m["gpu_memory_used_peak_mib"], json!(1300));
    }

    #[test]
    fn no_sample_in_the_window_no_metrics() {
        let window = Window {
            start: 0.0,
            end: 1.0,
            kind: WindowKind::Point,
        };
        assert!(gpu_metrics(&[sample(5.0, 0, 1.0, 0)], window, Some(1.0)).is_empty());
    }

    #[test]
    fn a_benchmark_window_without_samples_says_why_energy_per_token_is_unknown() {
        let window = Window {
            start: 0.0,
            end: 0.2,
            kind: WindowKind::Measured,
        };
        let m = gpu_metrics(&[sample(5.0, 0, 1.0, 0)], window, Some(10.0));
        let why = m[UNKNOWN]["joules_per_output_token"].as_str().unwrap();
        assert!(
            why.contains("no GPU sample fell inside the benchmark's 0.20 s window"),
            "{why}"
        );
        assert!(!m.contains_key("joules_per_output_token"));
    }

    #[test]
    fn over_the_whole_point_energy_is_kept_and_energy_per_token_is_unknown() {
        let samples = [sample(1.0, 0, 300.0, 0), sample(2.0, 0, 500.0, 0)];
        let window = Window {
            start: 0.5,
            end: 2.5,
            kind: WindowKind::Point,
        };
        let m = gpu_metrics(&samples, window, Some(100.0));
        assert_eq!(m["gpu_energy_j"], json!(800.0));
        assert_eq!(m["gpu_energy_window"], json!("point"));
        assert!(!m.contains_key("joules_per_output_token"), "{m:#?}");
        assert!(m[UNKNOWN]["output_tokens_per_joule"]
            .as_str()
            .unwrap()
            .contains("no measured window"));
    }

    #[test]
    fn per_token_figures_of_earlier_runs_over_the_point_are_withdrawn() {
        let mut point = json!({"gpu_energy_window": "point", "joules_per_output_token": 9.06,
                               "output_tokens_per_joule": 0.11, "gpu_energy_j": 1205.0});
        let m = point.as_object_mut().unwrap();
        withdraw_mismatched(m);
        assert!(!m.contains_key("joules_per_output_token"));
        assert_eq!(m["gpu_energy_j"], json!(1205.0));
        assert!(m[UNKNOWN]["joules_per_output_token"]
            .as_str()
            .unwrap()
            .contains("earlier rigrun"));
        let mut steady = json!({"gpu_energy_window": "steady_state", "joules_per_output_token": 4.4});
        let m = steady.as_object_mut().unwrap();
        withdraw_mismatched(m);
        assert_eq!(m["joules_per_output_token"], json!(4.4));
    }
}
