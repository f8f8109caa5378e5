//! GPU samples from an NVIDIA DCGM exporter's Prometheus text (`DCGM_FI_DEV_*` gauges, one series
//! per GPU by its `gpu` label), for hosts whose inventory names one (`dcgm_exporter: URL`):
//! the same [`GpuSample`]s as nvidia-smi's, stamped when scraped.

use std::collections::BTreeMap;

use super::gpu::GpuSample;
use super::prometheus;
use crate::facts::Gpu;

/// The exporter's field names, for what [`GpuSample`] holds.
const POWER: &str = "DCGM_FI_DEV_POWER_USAGE";
const UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
const MEM_UTIL: &str = "DCGM_FI_DEV_MEM_COPY_UTIL";
const MEM_USED: &str = "DCGM_FI_DEV_FB_USED";
const MEM_FREE: &str = "DCGM_FI_DEV_FB_FREE";
const POWER_LIMIT: &str = "DCGM_FI_DEV_POWER_MGMT_LIMIT";
const SM_CLOCK: &str = "DCGM_FI_DEV_SM_CLOCK";
const TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
/// Newer exporters call the throttle reasons clock events.
const THROTTLE: [&str; 2] = [
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
];

/// One sample per GPU found in a scrape taken at `t`; none when the text has no DCGM fields.
pub fn samples(t: f64, scrape: &[prometheus::MetricSample]) -> Vec<GpuSample> {
    let mut gpus: BTreeMap<u32, GpuSample> = BTreeMap::new();
    for s in scrape.iter().filter(|s| s.name.starts_with("DCGM_FI_DEV_")) {
        let Some(gpu) = s
            .labels
            .iter()
            .find(|(k, _)| k == "gpu")
            .and_then(|(_, v)| v.parse().ok())
        else {
            continue;
        };
        let sample = gpus.entry(gpu).or_insert_with(|| empty(t, gpu));
        let v = Some(s.value).filter(|v| v.is_finite());
        match s.name.as_str() {
            POWER => sample.power_w = v,
            UTIL => sample.util_pct = v,
            MEM_UTIL => sample.mem_util_pct = v,
            MEM_USED => sample.mem_used_mib = v,
            SM_CLOCK => sample.sm_mhz = v,
            TEMP => sample.temp_c = v,
            name if THROTTLE.contains(&name) => sample.throttle = v.map(|v| v as u64),
            _ => {}
        }
    }
    gpus.into_values().collect()
}

/// The GPUs a scrape describes, as facts: the card's name (`modelName`), its memory (used +
/// free framebuffer), driver (`DCGM_FI_DRIVER_VERSION`, where the exporter labels it) and power
/// limit, each where the exporter gives it.
pub fn gpus(scrape: &[prometheus::MetricSample]) -> Vec<Gpu> {
    let mut found: BTreeMap<u32, (Gpu, f64, f64)> = BTreeMap::new();
    for s in scrape.iter().filter(|s| s.name.starts_with("DCGM_FI_DEV_")) {
        let label = |name: &str| s.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let Some(index) = label("gpu").and_then(|g| g.parse().ok()) else {
            continue;
        };
        let (gpu, used, free) = found
            .entry(index)
            .or_insert_with(|| (Gpu::default(), f64::NAN, f64::NAN));
        gpu.name = label("modelName")
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| gpu.name.clone());
        gpu.driver = label("DCGM_FI_DRIVER_VERSION").or(gpu.driver.take());
        match s.name.as_str() {
            MEM_USED => *used = s.value,
            MEM_FREE => *free = s.value,
            POWER_LIMIT => gpu.power_limit = Some(format!("{:.2} W", s.value)),
            _ => {}
        }
    }
    found
        .into_values()
        .map(|(mut gpu, used, free)| {
            let total = used + free;
            gpu.memory = total.is_finite().then(|| format!("{total:.0} MiB"));
            gpu
        })
        .collect()
}

fn empty(t: f64, gpu: u32) -> GpuSample {
    GpuSample {
        t,
        gpu,
        power_w: None,
        util_pct: None,
        mem_util_pct: None,
        mem_used_mib: None,
        sm_mhz: None,
        temp_c: None,
        throttle: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_exporters_fields_per_gpu() {
        let text = "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n\
            # TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",device=\"nvidia0\",modelName=\"NVIDIA RTX A6000\"} 212.5\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"GPU-b\",device=\"nvidia1\"} 99\n\
            DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\"} 97\n\
            DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\"} 45000\n\
            DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu=\"1\",UUID=\"GPU-b\"} 64\n\
            vllm:num_requests_running 3\n";
        let (scrape, bad) = prometheus::parse(text);
        assert!(bad.is_empty(), "{bad:?}");
        let s = samples(5.0, &scrape);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].gpu, s[0].power_w, s[0].util_pct),
            (0, Some(212.5), Some(97.0))
        );
        assert_eq!(s[0].mem_used_mib, Some(45000.0));
        assert_eq!((s[1].power_w, s[1].throttle, s[1].t), (Some(99.0), Some(64), 5.0));
        assert!(samples(0.0, &prometheus::parse("x 1\n").0).is_empty());
    }

    #[test]
    fn the_gpus_an_exporter_describes_are_facts() {
        let text = "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-a\",pci_bus_id=\"00000000:01:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"h\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"} 70000\n\
            DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\",DCGM_FI_DRIVER_VERSION=\"550.54.15\"} 11559\n\
            DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\"} 700\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\"} 120.5\n";
        let (scrape, bad) = prometheus::parse(text);
        assert!(bad.is_empty(), "{bad:?}");
        let gpus = gpus(&scrape);
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory.as_deref(), Some("81559 MiB"));
        assert_eq!(gpus[0].driver.as_deref(), Some("550.54.15"));
        assert_eq!(gpus[0].power_limit.as_deref(), Some("700.00 W"));
        assert_eq!(
            (gpus[1].memory.as_deref(), gpus[1].driver.as_deref()),
            (None, None)
        );
    }
}
