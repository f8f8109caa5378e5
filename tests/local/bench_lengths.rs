//! `rigrun bench`'s length distributions against the real `rigrun sim`: the prompt and output
//! tokens the sim counts in its usage are exactly the lengths drawn for the seed, request by
//! request, on both APIs, and the record says which distribution and seed were used.

use rigrun::bench::lengths::{Dist, Lengths};

use crate::bench_support::*;

/// The lengths drawn for requests `from..to` of a run with `seed` (warm-up requests come first).
fn drawn(lengths: Lengths, from: u64, to: u64) -> Vec<(u32, u32)> {
    (from..to).map(|i| lengths.of(i)).collect()
}

fn sums(draws: &[(u32, u32)]) -> (u64, u64) {
    draws
        .iter()
        .fold((0, 0), |(i, o), &(a, b)| (i + u64::from(a), o + u64::from(b)))
}

#[test]
fn the_sims_usage_counts_are_the_drawn_lengths() {
    let sim = Sim::start("tiny", &[]);
    // Two warm-up requests (numbers 0 and 1), then 20 measured (2..22).
    let common = [
        "--concurrency",
        "2",
        "--warmup",
        "2",
        "--num-requests",
        "20",
        "--seed",
        "42",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--workload",
        "random",
    ];
    let normal_in = Lengths {
        input_len: 64,
        input_dist: Dist::Normal { sd: 20.0 },
        output_len: 16,
        output_dist: Dist::Uniform { ratio: 0.5 },
        seed: 42,
    };
    let both_uniform = Lengths {
        input_dist: Dist::Uniform { ratio: 0.5 },
        ..normal_in
    };
    // Chat prompts are four-byte words, one token each in the sim's count, inside one user
    // message: 5 tokens of ChatML frame and 3 of the reply header per request.
    for (extra, lengths, chat_overhead) in [
        (
            &[
                "--input-dist",
                "normal:sd=20",
                "--output-dist",
                "uniform:ratio=0.5",
            ][..],
            normal_in,
            0,
        ),
        (&["--range-ratio", "0.5", "--api", "chat"], both_uniform, 8),
    ] {
        let run = bench(&sim.base, &[&common[..], extra].concat());
        // Each output is judged against its own max_tokens, so a varied length is no problem:
        // the only problem a level may have is this shared machine's load on the client.
        assert_measured(&run, &format!("{extra:?}"));
        let r = &run.records[0];
        let draws = drawn(lengths, 2, 22);
        let (inputs, outputs) = sums(&draws);
        let distinct = |f: fn(&(u32, u32)) -> u32| {
            let mut v: Vec<u32> = draws.iter().map(f).collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        assert!(
            distinct(|d| d.0) > 5 && distinct(|d| d.1) > 5,
            "the draws vary: {draws:?}"
        );
        eprintln!("{extra:?}: drawn {inputs} in / {outputs} out over 20 requests: {draws:?}");
        assert_eq!(r["completed"], 20, "{r}");
        assert_eq!(
            r["total_input_tokens"],
            inputs + 20 * chat_overhead,
            "{extra:?}: {r}"
        );
        assert_eq!(r["total_output_tokens"], outputs, "{extra:?}: {r}");
        assert_eq!(r["seed"], 42);
        assert_eq!(r["input_len"], 64);
        assert_eq!(r["input_dist"], lengths.input_dist.label().unwrap());
        assert_eq!(r["output_dist"], "uniform:ratio=0.5");
        // Throughput is the drawn tokens over the measured time.
        let throughput = outputs as f64 / num(r, "duration");
        assert!(
            (num(r, "output_throughput") - throughput).abs() < 0.01 * throughput,
            "{r}"
        );
    }
    // Fixed lengths say nothing of a distribution, as before.
    let run = bench(&sim.base, &common);
    assert!(run.records[0].get("input_dist").is_none(), "{}", run.stdout);
}

#[test]
fn bad_distributions_are_refused_with_the_flag_named() {
    let sim = Sim::start("tiny", &[]);
    for (args, says) in [
        (&["--input-dist", "normal:sd=x"][..], "--input-dist"),
        (&["--range-ratio", "1.5"], "below 1"),
        (
            &["--range-ratio", "0.5", "--output-dist", "fixed"],
            "cannot be used with",
        ),
        // Bounded draws must fit the context window at their longest: 3000·1.5 + 10·1.5 > 4096.
        (
            &[
                "--input-len",
                "3000",
                "--output-len",
                "10",
                "--range-ratio",
                "0.5",
            ],
            "drawn at their longest (4500 + 15) = 4515 tokens, more than the server's max_model_len 4096",
        ),
    ] {
        let run = bench(&sim.base, args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.jsonl");
    std::fs::write(&file, "{\"prompt\": \"hello\"}\n").unwrap();
    let run = bench(
        &sim.base,
        &[
            "--workload",
            file.to_str().unwrap(),
            "--input-dist",
            "normal:sd=3",
        ],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot be drawn from normal:sd=3"),
        "{}",
        run.stderr
    );
}
