//! GPU samples from an NVIDIA DCGM exporter's Prometheus text (`DCGM_FI_DEV_*` gauges, one series
//! per GPU by its `gpu` label), for hosts whose inventory names one (`dcgm_exporter: URL`):
//! the same [`Sample`]s as nvidia-smi's, stamped when scraped.

use std::collections::BTreeMap;

use super::gpu::Sample;
use super::prometheus;

/// The exporter's field names, for what [`Sample`] holds.
const POWER: &str = "DCGM_FI_DEV_POWER_USAGE";
const UTIL: &str = "DCGM_FI_DEV_GPU_UTIL";
const MEM_UTIL: &str = "DCGM_FI_DEV_MEM_COPY_UTIL";
const MEM_USED: &str = "DCGM_FI_DEV_FB_USED";
const SM_CLOCK: &str = "DCGM_FI_DEV_SM_CLOCK";
const TEMP: &str = "DCGM_FI_DEV_GPU_TEMP";
/// Newer exporters call the throttle reasons clock events.
const THROTTLE: [&str; 2] = [
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
];

/// One sample per GPU found in a scrape taken at `t`; none when the text has no DCGM fields.
pub fn samples(t: f64, scrape: &[prometheus::Sample]) -> Vec<Sample> {
    let mut gpus: BTreeMap<u32, Sample> = BTreeMap::new();
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

fn empty(t: f64, gpu: u32) -> Sample {
    Sample {
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
}
