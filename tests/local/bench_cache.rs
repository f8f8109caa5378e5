//! `rigrun bench --reset-cache` against the real sim: the prefix cache emptied after each level's
//! warm-up through vLLM's route or, failing that, SGLang's, seen in the sim's own hit counters;
//! every record saying `"cache": "reset"` or `"warm"`.

use crate::bench_support::*;
use crate::sim_support::profile_yaml;

/// Two levels of 1 warm-up and 5 measured catid requests of 64 tokens (4 blocks of 16, of
/// which a repeat can reuse 3: 48 tokens), against a fresh sim under `names`: the records,
/// and the prompt tokens the sim's prefix cache served. Steps of 100 ms, so that a loaded
/// machine's delays in the client do not make the levels invalid.
fn run_two_levels(names: &str, reset: bool) -> (BenchRun, f64) {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("slow.yaml");
    std::fs::write(&profile, profile_yaml(65_536, 4096, 100.0, 100_000, 2048)).unwrap();
    let sim = Sim::start(profile.to_str().unwrap(), &["--metrics-names", names]);
    let mut args = vec![
        "--concurrency",
        "1,1",
        "--warmup",
        "1",
        "--num-requests",
        "5",
        "--input-len",
        "64",
        "--output-len",
        "2",
    ];
    if reset {
        args.push("--reset-cache");
    }
    let run = bench(&sim.base, &args);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let served = match names {
        "vllm" => runtime.block_on(sim.metric("vllm:prefix_cache_hits_total")),
        _ => runtime.block_on(sim.metric("sglang:cache_hit_rate")) * 12.0 * 64.0,
    };
    (run, served)
}

#[test]
fn reset_cache_empties_the_servers_prefix_cache_before_each_level_under_either_engine() {
    for names in ["vllm", "sglang"] {
        let (warm, warm_hits) = run_two_levels(names, false);
        assert_eq!(warm.code, 0, "{}", warm.stderr);
        for r in &warm.records {
            assert_eq!(r["cache"], "warm", "{r}");
        }
        // Warm: every request after the very first reuses 48 tokens (11 × 48).
        assert_eq!(warm_hits, 528.0, "{names}");
        let (reset, reset_hits) = run_two_levels(names, true);
        assert_eq!(reset.code, 0, "{}", reset.stderr);
        assert_eq!(reset.records.len(), 2);
        for r in &reset.records {
            assert_eq!(r["cache"], "reset", "{r}");
            assert_eq!(r["valid"], true, "{r}");
        }
        // Reset after each warm-up: the first measured request of each level misses (9 × 48).
        assert_eq!(reset_hits, 432.0, "{names}");
    }
}
