//! What a run measured, so that a change across runs is only called one between like and like:
//! per run and host, the playbook, its `-e` values and variables, each sweep's command as
//! written and the benchmark's parameters its records carry (facts, for what differs); per
//! record, the command it ran (the run's own id masked) and those parameters (for each cell).

use indexmap::IndexMap;
use serde_json::Value as Json;
use similar::{capture_diff_slices, Algorithm, DiffOp};

use super::Run;
use crate::config::{Inventory, Playbook, Step};
use crate::events::{Record, RecordStatus};
use crate::point::value_text;

/// Record fields that say what load was sent rather than what was measured: `vllm bench
/// serve`'s names, `rigrun bench`'s and `bench_throughput.py`'s. Those of a point (its
/// concurrency) are compared row by row, not as a fact of the run. A random seed is not among
/// them: prompts drawn with another seed are the same workload, drawn again.
const PARAMETERS: &[&str] = &[
    "backend",
    "model",
    "model_id",
    "tokenizer_id",
    "api",
    "stream",
    "workload",
    "dataset_name",
    "input_len",
    "output_len",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "input_dist",
    "output_dist",
    "turns",
    "think_time",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "token_id",
    "unique_prefix",
    "ignore_eos",
    "warmup",
    // rigrun bench's prefix-cache state when measuring began (`reset` or `warm`).
    "cache",
    // What `--workload text` cut its prompts from, and what `--trace` replayed at what speed.
    "text_corpus_sha256",
    "trace_sha256",
    "trace_speed",
];

/// How a run's own id reads in its commands once masked, so that runs compare.
const RUN_ID: &str = "{{ run_id }}";

/// The workload facts of `host` in `run`, as (name, value): the playbook, the `-e` values, the
/// playbook's and the host's variables, each sweep's command as written, and the benchmark
/// parameters every measurement of a sweep shares.
pub fn facts(run: &Run, host: &str) -> Vec<(String, String)> {
    let m = &run.manifest;
    let mut out = vec![("playbook".to_string(), m.playbook.name.clone())];
    if let Some(extra) = m.playbook.extra_vars.as_object() {
        out.extend(extra.iter().map(|(k, v)| (format!("-e {k}"), value_text(v))));
    }
    let playbook: Option<Playbook> = serde_saphyr::from_str(&m.playbook.source).ok();
    let inventory: Option<Inventory> = serde_saphyr::from_str(&m.inventory.source).ok();
    if let Some(p) = &playbook {
        out.extend(vars("var", &p.vars));
    }
    if let Some(inv) = &inventory {
        out.extend(vars("inventory var", &inv.vars));
        if let Some(spec) = inv.hosts.get(host) {
            out.extend(vars("host var", &spec.value.vars));
        }
    }
    for (i, step) in playbook.iter().flat_map(|p| p.steps.iter()).enumerate() {
        if let Step::RunSweep(sweep) = step {
            out.push((format!("step {} command", i + 1), sweep.command.value.clone()));
        }
    }
    out.extend(shared_parameters(run, host));
    out
}

fn vars<'v>(kind: &'v str, vars: &'v IndexMap<String, Json>) -> impl Iterator<Item = (String, String)> + 'v {
    vars.iter()
        .map(move |(k, v)| (format!("{kind} {k}"), value_text(v)))
}

/// Per sweep step, the parameters with one value over all of the host's measurements
/// (`step 4 output_len` = 32; fetched result files, which repeat them, left out); those that
/// vary by point are the rows' to compare.
fn shared_parameters(run: &Run, host: &str) -> Vec<(String, String)> {
    let mut seen: IndexMap<(usize, &str), Option<&Json>> = IndexMap::new();
    let measured = run
        .records
        .iter()
        .filter(|r| r.column() == host && r.status == RecordStatus::Ok && !r.point.contains_key("file"));
    for record in measured {
        for name in PARAMETERS {
            let value = record.metrics.get(*name).filter(|v| !v.is_null());
            let entry = seen.entry((record.step_index, name)).or_insert(value);
            if *entry != value {
                *entry = None;
            }
        }
    }
    seen.into_iter()
        .filter_map(|((step, name), value)| Some((format!("step {} {name}", step + 1), value_text(value?))))
        .collect()
}

/// Why `other` (of run `other_id`) did not measure the same workload as `base` (of run
/// `base_id`), at the same point of the same host; None when nothing says they differ. Where
/// both records carry the benchmark's parameters, those decide (`output_len 32 → 40`): the
/// command may differ in what is not the load (the server's URL, an output path). Else the
/// command's words that differ do.
pub fn differs((base, base_id): (&Record, &str), (other, other_id): (&Record, &str)) -> Option<String> {
    let both: Vec<(&str, &Json, &Json)> = PARAMETERS
        .iter()
        .filter_map(|name| Some((*name, base.metrics.get(*name)?, other.metrics.get(*name)?)))
        .collect();
    if !both.is_empty() {
        let why: Vec<String> = both
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(name, a, b)| format!("{name} {} → {}", value_text(a), value_text(b)))
            .collect();
        return (!why.is_empty()).then(|| why.join(", "));
    }
    let (a, b) = (base.command.as_ref()?, other.command.as_ref()?);
    let (a, b) = (a.replace(base_id, RUN_ID), b.replace(other_id, RUN_ID));
    (a != b).then(|| format!("command {}", changed_words(&a, &b)))
}

/// The words that differ between two commands, each change with the word before it:
/// `` `--output-len 32` → `--output-len 40` ``.
fn changed_words(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split_whitespace().collect(), b.split_whitespace().collect());
    let words = |all: &[&str], range: std::ops::Range<usize>| {
        let from = range.start.saturating_sub(1);
        all[from..range.end].join(" ")
    };
    let changes: Vec<String> = capture_diff_slices(Algorithm::Myers, &a, &b)
        .iter()
        .filter(|op| !matches!(op, DiffOp::Equal { .. }))
        .map(|op| {
            format!(
                "`{}` → `{}`",
                words(&a, op.old_range()),
                words(&b, op.new_range())
            )
        })
        .collect();
    changes.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(command: &str, metrics: Json) -> Record {
        Record {
            command: Some(command.to_string()),
            ..crate::testutil::record("a", &[("concurrency", json!(1))], metrics, RecordStatus::Ok)
        }
    }

    #[test]
    fn the_same_workload_in_two_runs_differs_only_in_the_runs_ids() {
        let a = record(
            "bench --out /w/results/r1 --output-len 32",
            json!({"output_len": 32}),
        );
        let b = record(
            "bench --out /w/results/r2 --output-len 32",
            json!({"output_len": 32}),
        );
        assert_eq!(differs((&a, "r1"), (&b, "r2")), None);
    }

    /// A cold prefix cache is another workload than a warm one; a record from before bench
    /// said so compares on what both carry.
    #[test]
    fn a_reset_cache_differs_from_a_warm_one() {
        let warm = record("bench", json!({"output_len": 32, "cache": "warm"}));
        let reset = record("bench --reset-cache", json!({"output_len": 32, "cache": "reset"}));
        let old = record("bench", json!({"output_len": 32}));
        assert_eq!(
            differs((&warm, "r1"), (&reset, "r2")).unwrap(),
            "cache warm → reset"
        );
        assert_eq!(differs((&old, "r1"), (&warm, "r2")), None);
    }

    #[test]
    fn a_parameter_or_a_word_of_the_command_that_differs_is_named() {
        let a = record(
            "bench --num 3 --output-len 32",
            json!({"output_len": 32, "stream": true}),
        );
        let b = record(
            "bench --num 3 --output-len 40",
            json!({"output_len": 40, "stream": true}),
        );
        assert_eq!(differs((&a, "r1"), (&b, "r2")).unwrap(), "output_len 32 → 40");
        // The benchmark's parameters decide where both carry them: another URL is no other load.
        let c = record(
            "bench --url :30001 --num 3 --output-len 40",
            json!({"output_len": 40}),
        );
        assert_eq!(differs((&b, "r1"), (&c, "r2")), None);
        // Without parameters, the command's words do.
        let (d, e) = (
            record("run --num 3 --x", json!({})),
            record("run --num 5 --x", json!({})),
        );
        assert_eq!(
            differs((&d, "r1"), (&e, "r2")).unwrap(),
            "command `--num 3` → `--num 5`"
        );
    }
}
