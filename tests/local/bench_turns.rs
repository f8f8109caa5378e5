//! `rigrun bench --turns`: multi-turn conversations against the real `rigrun sim` with its prefix
//! cache (16-token blocks in the `tiny` profile). Each turn's prompt is the conversation so far, so
//! turn k's prompt starts with all of turn k−1's and the sim serves that prefix from its cache:
//! exactly its full blocks. Concurrency counts conversations, think time included.

use serde_json::Value;

use crate::bench_support::*;

/// The `tiny` profile's prefix-cache block.
const BLOCK: f64 = 16.0;

fn turn_figure(turn: &Value, key: &str) -> f64 {
    turn[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {turn}"))
}

/// Runs 4 conversations of 3 turns, 2 in flight, 0.1 s of think time, on `api`; checks the
/// record and returns it with the sim's prefix-cache hits counted during the run.
async fn conversations(api: &str) -> (Value, f64) {
    let sim = Sim::start("tiny", &[]);
    let hits_before = sim.metric("vllm:prefix_cache_hits_total").await;
    let run = bench(
        &sim.base,
        &[
            "--api",
            api,
            "--workload",
            "random",
            "--seed",
            "5",
            "--concurrency",
            "2",
            "--turns",
            "3",
            "--think-time",
            "0.1s",
            "--num-requests",
            "12",
            "--warmup",
            "0",
            "--input-len",
            "32",
            "--output-len",
            "16",
        ],
    );
    assert_eq!(run.code, 0, "{api}: {}", run.stderr);
    let hits = sim.metric("vllm:prefix_cache_hits_total").await - hits_before;
    let r = run.records[0].clone();
    eprintln!("{api}: sim prefix-cache hits {hits}, per_turn {}", r["per_turn"]);
    assert_eq!(
        (r["completed"].as_u64(), r["num_prompts"].as_u64()),
        (Some(12), Some(12)),
        "{r}"
    );
    assert_eq!(r["turns"], 3);
    assert_eq!(r["think_time"], 0.1);
    assert_eq!(r["total_output_tokens"], 12 * 16);
    // Two conversations were in flight throughout, though each spent think time between turns.
    assert_eq!(r["peak_concurrency"], 2, "{r}");
    assert_eq!(r["valid"], true, "{r}");
    // A slot runs two conversations, each with two think times: at least 0.4 s.
    assert!(num(&r, "duration") >= 0.4, "{r}");
    (r, hits)
}

/// Turn k's prompt holds turn k−1's and more; the cache served turn k−1's full blocks, no more.
fn check_turns(r: &Value, first_prompt: f64, hits: f64) {
    let turns = r["per_turn"]
        .as_array()
        .unwrap_or_else(|| panic!("no per_turn: {r}"));
    assert_eq!(turns.len(), 3, "{r}");
    let mut cached_total = 0.0;
    for (k, turn) in turns.iter().enumerate() {
        assert_eq!(turn["turn"], k + 1);
        assert_eq!(turn["completed"], 4, "{turn}");
        assert!(turn_figure(turn, "median_ttft_ms") > 0.0, "{turn}");
        assert!(turn_figure(turn, "p99_ttft_ms") >= turn_figure(turn, "median_ttft_ms"));
        let cached = turn_figure(turn, "mean_cached_tokens");
        cached_total += cached * 4.0;
        if k == 0 {
            assert_eq!(turn_figure(turn, "mean_input_tokens"), first_prompt, "{turn}");
            assert_eq!(
                cached, 0.0,
                "distinct random first messages share nothing: {turn}"
            );
            continue;
        }
        let previous = turn_figure(&turns[k - 1], "mean_input_tokens");
        // The previous prompt, then its reply (16 words, at least 4 tokens) and a new message.
        assert!(
            turn_figure(turn, "mean_input_tokens") >= previous + 4.0 + 32.0,
            "{turn}"
        );
        assert!(
            cached <= previous && cached > previous - BLOCK,
            "turn {}: {cached} cached of a previous prompt of {previous}: {r}",
            k + 1
        );
    }
    // The record's cached tokens are the sim's own count of prefix-cache hits.
    assert!(
        (cached_total - hits).abs() < 0.5,
        "record {cached_total}, sim {hits}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_turns_resend_the_history_and_hit_the_prefix_cache() {
    let (r, hits) = conversations("chat").await;
    // 32 one-token words in one user message: 5 tokens of ChatML frame, 3 of the reply header.
    check_turns(&r, 32.0 + 8.0, hits);
    assert!(hits > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn completion_turns_send_the_conversation_as_one_text() {
    let (r, hits) = conversations("completions").await;
    check_turns(&r, 32.0, hits);
    // Turn 1's 32 tokens are two full blocks, all served to turn 2.
    assert_eq!(r["per_turn"][1]["mean_cached_tokens"], 32.0, "{r}");
}

#[test]
fn turns_refuse_prompt_files_and_conversations_beyond_the_context() {
    let sim = Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.jsonl");
    std::fs::write(&file, "{\"prompt\": \"hello\"}\n").unwrap();
    let run = bench(&sim.base, &["--workload", file.to_str().unwrap(), "--turns", "2"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("already are a conversation"),
        "{}",
        run.stderr
    );
    let run = bench(
        &sim.base,
        &[
            "--api",
            "chat",
            "--turns",
            "3",
            "--input-len",
            "1000",
            "--output-len",
            "500",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("--turns 3 × (--input-len 1000 + --output-len 500) by the last turn = 4500 tokens"),
        "{}",
        run.stderr
    );
}
