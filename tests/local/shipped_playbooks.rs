//! The playbooks and inventories shipped in the repo stay valid, and plan what their comments say.

use std::path::Path;

use crate::common::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn plan(playbook: &str, inventory: &str) -> String {
    for command in ["check", "plan"] {
        let out = run_rigrun(repo(), &[command, playbook, "-i", inventory]);
        assert!(out.status.success(), "{command} {playbook}: {:?}", text(&out));
    }
    text(&run_rigrun(repo(), &["plan", playbook, "-i", inventory])).0
}

#[test]
fn the_throughput_sweep_guards_the_kv_capacity() {
    let plan = plan("playbooks/throughput-sweep.yaml", "hosts.yaml");
    assert!(
        plan.contains("host blackwell") && plan.contains("host kpro5"),
        "{plan}"
    );
    assert!(
        plan.contains("concurrency=1024  SKIP: concurrency * (input_len + output_len) = 2048000 > kv_capacity_tokens = 1570000"),
        "{plan}"
    );
    assert!(
        plan.contains("concurrency=512  $ python3 ~/.rigrun/bench_throughput.py"),
        "{plan}"
    );
    // Streamed, so every point has TTFT, TPOT and ITL for the latency tables and SLOs.
    let points: Vec<&str> = plan.lines().filter(|l| l.contains("$ python3")).collect();
    assert!(
        !points.is_empty() && points.iter().all(|l| l.contains(" --stream ")),
        "{plan}"
    );
}

#[test]
fn the_long_context_sweep_decides_its_skips_at_run_time() {
    let plan = plan("playbooks/long-context.yaml", "hosts.yaml");
    assert!(
        plan.contains("input_len=100000") && plan.contains("decided at run time"),
        "{plan}"
    );
}

#[test]
fn the_demo_runs_two_simulated_hosts_and_skips_what_the_a6000_cannot_hold() {
    let plan = plan("playbooks/demo.yaml", "playbooks/demo-hosts.yaml");
    assert!(
        plan.contains("host blackwell (local") && plan.contains("host a6000 (local"),
        "{plan}"
    );
    assert!(
        plan.contains("sim --profile a6000-qwen3.6-27b --port 31002"),
        "{plan}"
    );
    let a6000 = plan.split("host a6000").nth(1).unwrap();
    assert!(a6000.contains("concurrency=256  SKIP:"), "{plan}");
    let blackwell = plan.split("host a6000").next().unwrap();
    assert!(!blackwell.contains("SKIP"), "{plan}");
}

#[test]
fn the_native_sweep_runs_rigrun_bench_on_every_host() {
    let plan = plan("playbooks/throughput-sweep-native.yaml", "hosts.yaml");
    assert!(
        plan.contains("host blackwell") && plan.contains("host kpro5"),
        "{plan}"
    );
    assert!(plan.contains("bench --url"), "{plan}");
    assert!(plan.contains("concurrency=1024  SKIP:"), "{plan}");
}

#[test]
fn the_variant_demo_starts_the_sim_without_and_with_speculation_on_both_hosts() {
    let plan = plan("playbooks/demo-variants.yaml", "playbooks/demo-hosts.yaml");
    for (host, port) in [("blackwell", 31001), ("a6000", 31002)] {
        let of_host = plan.split(&format!("host {host} (local")).nth(1).unwrap();
        assert!(
            of_host.contains("server, 2 variants, one after another"),
            "{plan}"
        );
        assert!(
            of_host.contains("variant 1: spec=off: start `rigrun sim --profile"),
            "{plan}"
        );
        assert!(
            of_host.contains(&format!("--port {port} --speculative-tokens 3 --acceptance 0.7`")),
            "{plan}"
        );
    }
}

#[test]
fn the_speculative_decoding_playbook_starts_sglang_without_and_with_nextn() {
    let plan = plan("playbooks/speculative-decoding.yaml", "hosts.yaml");
    assert!(
        plan.contains("variant 1: spec=off: start `python3 -m sglang.launch_server --model-path Qwen/Qwen3.5-397B-A17B-NVFP4 --tp 8"),
        "{plan}"
    );
    assert!(
        plan.contains("--port 30000 --speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4`"),
        "{plan}"
    );
    assert!(
        plan.contains("host kpro5") && plan.contains("Qwen/Qwen3.6-27B --tp 1"),
        "{plan}"
    );
    // Speculation is measured on natural text, never on catid's repeated token.
    let points: Vec<&str> = plan.lines().filter(|l| l.contains("$ rigrun bench")).collect();
    assert!(!points.is_empty(), "{plan}");
    for point in points {
        assert!(
            point.contains("--api chat --workload ~/.rigrun/prompts/chat-longform.jsonl"),
            "{point}"
        );
    }
    assert!(
        plan.contains("upload playbooks/../prompts/chat-longform.jsonl"),
        "{plan}"
    );
}

/// The natural-text prompts the speculative-decoding playbook sends: every line a chat prompt
/// `rigrun bench` takes, served and counted by the sim.
#[test]
fn the_shipped_chat_prompts_are_a_workload_rigrun_bench_runs() {
    let prompts = repo().join("prompts/chat-longform.jsonl");
    let lines = std::fs::read_to_string(&prompts).unwrap();
    for (n, line) in lines.lines().enumerate() {
        let prompt: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", n + 1));
        let text = prompt["messages"][0]["content"].as_str().unwrap();
        assert!(text.split_whitespace().count() >= 15, "line {}: {text}", n + 1);
    }
    let sim = crate::sim_support::Sim::start("tiny", &[]);
    let path = prompts.to_str().unwrap();
    let args = [
        "--api",
        "chat",
        "--workload",
        path,
        "--concurrency",
        "2",
        "--num-requests",
        "10",
        "--output-len",
        "8",
    ];
    let run = crate::bench_support::bench(&sim.base, &args);
    // Every request answered (a busy machine may still find the level invalid: exit 1).
    let r = &run.records[0];
    assert!(run.code == 0 || r["valid"] == false, "{}", run.stderr);
    assert_eq!(
        (r["completed"].as_u64(), r["failed"].as_u64()),
        (Some(10), Some(0)),
        "{r:#}"
    );
    assert_eq!(r["workload"], format!("file:{path}"), "{r:#}");
    // Real prompts of tens of words each, not a handful of tokens.
    assert!(r["total_input_tokens"].as_u64().unwrap() >= 10 * 20, "{r:#}");
}

/// Runs a shipped playbook for `gpu` hosts on one local host measuring a fresh `rigrun sim`
/// (vLLM's names), with `extra` arguments (`-e`, `--only`); returns its records.
fn run_on_a_sim(playbook: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let sim = crate::sim_support::Sim::start("tiny", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let inventory = format!(
        "vars: {{server_url: \"{}\", model: rigrun/tiny, kv_capacity_tokens: 1000000}}\n\
         hosts:\n  sim: {{connection: local, workdir: {}}}\ngroups:\n  gpu: [sim]\n",
        sim.base,
        tmp.path().join("work").display()
    );
    std::fs::write(tmp.path().join("hosts.yaml"), inventory).unwrap();
    let playbook = repo().join(playbook);
    let runs = tmp.path().join("runs");
    let mut args = vec![
        "run",
        playbook.to_str().unwrap(),
        "-i",
        "hosts.yaml",
        "--runs-dir",
        runs.to_str().unwrap(),
        "-q",
    ];
    args.extend(extra);
    let out = run_rigrun(tmp.path(), &args);
    assert!(out.status.success(), "{playbook:?}: {:?}", text(&out));
    records(&only_run_dir(&runs))
}

/// The chat workload sends text with drawn lengths after emptying the prefix cache, and says so.
#[test]
fn the_chat_workload_draws_its_lengths_and_resets_the_cache() {
    let records = run_on_a_sim(
        "playbooks/chat-workload.yaml",
        &["--only", "concurrency=4", "-e", "output_len=16"],
    );
    let sweep: Vec<_> = records
        .iter()
        .filter(|r| r["point"]["concurrency"] == 4)
        .collect();
    assert_eq!(sweep.len(), 1, "{records:?}");
    let m = &sweep[0]["metrics"];
    assert_eq!(sweep[0]["status"], "ok", "{m}");
    assert_eq!(
        (&m["cache"], &m["input_dist"], &m["output_dist"], &m["seed"]),
        (
            &serde_json::json!("reset"),
            &serde_json::json!("normal:sd=256"),
            &serde_json::json!("uniform:ratio=0.5"),
            &serde_json::json!(1)
        ),
        "{m}"
    );
}

/// The multi-turn playbook's later turns resend the conversation and hit the prefix cache.
#[test]
fn the_multi_turn_playbook_measures_each_turn_and_its_cache_hits() {
    let records = run_on_a_sim(
        "playbooks/multi-turn.yaml",
        &[
            "--only",
            "concurrency=1",
            "-e",
            "turns=2",
            "-e",
            "think_time=0s",
            "-e",
            "output_len=16",
        ],
    );
    let sweep: Vec<_> = records
        .iter()
        .filter(|r| r["point"]["concurrency"] == 1)
        .collect();
    assert_eq!(sweep.len(), 1, "{records:?}");
    let per_turn = sweep[0]["metrics"]["per_turn"].as_array().expect("per_turn");
    assert_eq!(per_turn.len(), 2, "{per_turn:?}");
    let cached = |t: usize| per_turn[t]["mean_cached_tokens"].as_f64().unwrap_or(0.0);
    let input = |t: usize| per_turn[t]["mean_input_tokens"].as_f64().unwrap();
    assert!(input(1) > input(0) + 256.0, "turn 2 resends turn 1: {per_turn:?}");
    assert!(
        cached(1) >= 256.0,
        "turn 2's history comes from the cache: {per_turn:?}"
    );
}
