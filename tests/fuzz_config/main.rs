//! Property test of configuration loading: generated playbooks and inventories (well formed,
//! broken, hostile, with bytes flipped) go through `Config::load` and, when they load, through
//! `plan::build` and `plan::describe`, as `check` and `plan` do. No input may panic; in the long
//! run (`fuzz_many`, release) none may take more than a second either.
//!
//! `cargo test --test fuzz_config` runs a few hundred cases; `bash fuzz/config.sh` runs a million
//! in release and prints cases/s and the slowest input; `FUZZ_DEBUG=1` prints why each input
//! was refused.

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use rigrun::config::{Builtins, Config, LoadOptions};
use rigrun::plan;

/// One generated input: the two files as bytes and the `-e` items.
#[derive(Debug, Clone)]
struct Input {
    playbook: Vec<u8>,
    inventory: Vec<u8>,
    extra_vars: Vec<String>,
}

/// Names templates use: defined ones, built-ins, minijinja functions and unknown ones.
fn name() -> impl Strategy<Value = String> {
    let defined = prop::sample::select(vec!["c", "n", "kv", "url", "host", "workdir", "run_id", "labels"]);
    let other = prop::sample::select(vec!["server", "range", "dict", "nosuch", "loop", "a0", "model"]);
    prop_oneof![6 => defined, 1 => other].prop_map(String::from)
}

/// One piece of a template, from plain text to loops that would run for minutes unbounded.
fn fragment() -> impl Strategy<Value = String> {
    let filter = prop::sample::select(vec![
        "upper",
        "length",
        "safe",
        "int",
        "string",
        "join(',')",
        "default('x')",
        "nofilter",
        "first",
    ]);
    prop_oneof![
        4 => "[a-z0-9 $;'\"|()/.-]{0,12}",
        1 => "[a-z0-9 $;'\"{}%|()/.-]{0,12}",
        4 => name().prop_map(|n| format!("{{{{ {n} }}}}")),
        2 => (name(), filter).prop_map(|(n, f)| format!("{{{{ {n} | {f} }}}}")),
        2 => (0u32..20_000, 0u32..20_000).prop_map(|(a, b)| format!(
            "{{% for i in range({a}) %}}{{% for j in range({b}) %}}x{{% endfor %}}{{% endfor %}}"
        )),
        1 => (0u64..10_000_000).prop_map(|n| format!("{{{{ 'x' * {n} }}}}")),
        1 => (name(), 0u32..5).prop_map(|(f, n)| format!("{{{{ {f}({n}) }}}}")),
        2 => name().prop_map(|n| format!("{{% if {n} > 3 %}}a{{% else %}}b{{% endif %}}")),
        1 => prop::sample::select(vec![
            "{{",
            "{% for %}",
            "{{ a +* }}",
            "}}",
            "{% endfor %}",
            "é\u{0}\u{1b}"
        ])
        .prop_map(String::from),
    ]
}

fn template() -> impl Strategy<Value = String> {
    prop::collection::vec(fragment(), 0..4).prop_map(|parts| parts.concat())
}

/// A template as a YAML double-quoted scalar (JSON strings are YAML).
fn quoted() -> impl Strategy<Value = String> {
    template().prop_map(|t| serde_json::to_string(&t).unwrap())
}

/// `skip_if` expressions: comparisons, `or`, filters, nonsense.
fn expression() -> impl Strategy<Value = String> {
    prop_oneof![
        (name(), name()).prop_map(|(a, b)| format!("{a} * ({b} + 3) > kv")),
        (name(), name()).prop_map(|(a, b)| format!("{a} > 1 or {b} >= 2")),
        (0u32..20_000).prop_map(|n| format!("range({n}) | length > 2")),
        "[a-z0-9 *+()<>=|'-]{0,16}",
    ]
    .prop_map(|e| serde_json::to_string(&e).unwrap())
}

/// A matrix: usually small, sometimes at or far beyond the limit (which must be counted, not built).
fn matrix() -> impl Strategy<Value = String> {
    let axis = |len: std::ops::Range<usize>| {
        prop::collection::vec(prop_oneof!["[0-9]{1,4}", "[a-z]{1,3}"], len).prop_map(|v| v.join(", "))
    };
    let axes = |count: std::ops::Range<usize>, len: std::ops::Range<usize>| {
        prop::collection::btree_map(name(), axis(len), count).prop_map(|axes| {
            let axes: Vec<String> = axes.iter().map(|(n, v)| format!("{n}: [{v}]")).collect();
            format!("{{{}}}", axes.join(", "))
        })
    };
    // Small; exactly at the limit (10 × 10 × 10 × 10); far beyond it.
    prop_oneof![16 => axes(0..4, 0..8), 1 => axes(4..5, 10..11), 4 => axes(5..10, 8..14)]
}

/// One step of any kind, with templates in every field that takes one.
fn step() -> impl Strategy<Value = String> {
    let timeout = prop_oneof![
        16 => Just(""),
        3 => Just("timeout: 30s, "),
        1 => Just("timeout: soon, "),
    ];
    prop_oneof![
        4 => quoted().prop_map(|c| format!("shell: {{command: {c}}}")),
        8 => (matrix(), prop::option::of(expression()), quoted(), any::<bool>()).prop_map(|(m, skip, c, refs)| {
            let skip = skip.map(|e| format!(", skip_if: {e}")).unwrap_or_default();
            let refs = if refs {
                ", references: {gpu1: {\"c=1\": {x: 5 ±1%}, 4: {y: 2}}}"
            } else {
                ""
            };
            format!("run-sweep: {{matrix: {m}{skip}, command: {c}{refs}}}")
        }),
        2 => (
            prop::sample::select(vec!["bench.py", "missing.py", "{{ nosuch }}.py"]),
            quoted(),
            any::<bool>()
        )
            .prop_map(|(src, dest, t)| format!(
                "copy-script: {{src: \"{src}\", dest: {dest}, template: {t}, mode: \"0755\"}}"
            )),
        2 => (quoted(), quoted()).prop_map(|(u, m)| format!("verify-server: {{url: {u}, model: {m}}}")),
        2 => quoted().prop_map(|s| format!("fetch-results: {{src: {s}}}")),
        2 => (quoted(), quoted()).prop_map(|(c, u)| format!("start-server: {{command: {c}, url: {u}}}")),
        1 => "[a-z-]{1,14}".prop_map(|k| format!("{k}: {{}}")),
    ]
    .prop_flat_map(move |s| {
        timeout
            .clone()
            .prop_map(move |t| s.replacen(": {", &format!(": {{{t}"), 1))
    })
}

fn playbook() -> impl Strategy<Value = String> {
    let hosts = prop_oneof![
        3 => Just(""),
        4 => Just("hosts: [gpu1]\n"),
        4 => Just("hosts: [gpu]\n"),
        1 => Just("hosts: [gpu3]\n"),
    ];
    let var = prop::sample::select(vec![
        "c", "n", "model", "a0", "a1", "c", "n", "model", "a0", "a1", "host",
    ]);
    let vars = prop::collection::btree_map(var, "[0-9]{1,6}|[a-z]{0,4}", 0..4).prop_map(|v| {
        v.iter()
            .map(|(k, v)| format!("{k}: {v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    (hosts, vars, prop::collection::vec(step(), 0..5)).prop_map(|(hosts, vars, steps)| {
        let steps: String = steps.iter().map(|s| format!("\n  - {s}")).collect();
        let steps = if steps.is_empty() {
            " []".to_string()
        } else {
            steps
        };
        format!("name: fuzz\n{hosts}vars: {{{vars}}}\nsteps:{steps}\n")
    })
}

/// An inventory: gpu1 and gpu2, sometimes a third host (rarely one with a bad name or port).
fn inventory() -> impl Strategy<Value = String> {
    let how = || {
        prop_oneof![
            12 => Just("connection: local"),
            6 => Just("address: 127.0.0.1, port: 1"),
            1 => Just("port: 70000"),
        ]
    };
    let third = prop_oneof![6 => Just(""), 3 => Just("h.x"), 1 => Just("../evil")];
    (how(), how(), third, 0u32..3000).prop_map(|(one, two, third, kv)| {
        let extra = if third.is_empty() {
            String::new()
        } else {
            format!("  {third}: {{connection: local}}\n")
        };
        format!(
            "vars: {{url: \"http://127.0.0.1:1\", c: 1}}\nhosts:\n  gpu1: {{{one}, vars: {{kv: {kv}}}}}\n  gpu2: {{{two}, vars: {{kv: 1}}}}\n{extra}groups:\n  gpu: [gpu1, gpu2]\n"
        )
    })
}

/// Flips, inserts or deletes a few bytes, so that broken YAML and invalid UTF-8 come up too.
fn mutated(text: impl Strategy<Value = String>) -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<prop::sample::Index>(), any::<u8>(), 0u8..3);
    let edits = prop_oneof![8 => Just(Vec::new()), 1 => prop::collection::vec(edit, 1..3)];
    (text, edits).prop_map(|(text, edits)| {
        let mut bytes = text.into_bytes();
        for (at, byte, how) in edits {
            let i = at.index(bytes.len() + 1);
            match how {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if i < bytes.len() => {
                    bytes.remove(i);
                }
                _ => {}
            }
        }
        bytes
    })
}

fn input() -> impl Strategy<Value = Input> {
    let extra = prop::collection::vec(
        prop_oneof![
            16 => "[a-z_]{1,4}=[0-9a-z ]{0,4}",
            1 => "[a-z\n=]{0,6}",
            1 => "k=a\u{0}b",
            16 => "kv=[0-9]{1,5}",
        ],
        0..3,
    );
    let pick = prop_oneof![
        10 => (mutated(playbook()), mutated(inventory())),
        1 => (prop::collection::vec(any::<u8>(), 0..200), mutated(inventory())),
    ];
    (pick, extra).prop_map(|((playbook, inventory), extra_vars)| Input {
        playbook,
        inventory,
        extra_vars,
    })
}

/// How far an input got.
#[derive(PartialEq, PartialOrd)]
enum Reached {
    Refused,
    Loaded,
    Planned,
}

/// What `check` and `plan` do with the files: load, plan, describe.
fn exercise(dir: &Path, input: &Input) -> Reached {
    let opts = LoadOptions {
        playbook: dir.join("fuzz.yaml"),
        inventory: dir.join("hosts.yaml"),
        limit: None,
        extra_vars: input.extra_vars.clone(),
        repeat: None,
        only: Vec::new(),
    };
    std::fs::write(&opts.playbook, &input.playbook).unwrap();
    std::fs::write(&opts.inventory, &input.inventory).unwrap();
    let config = match Config::load(&opts) {
        Ok(c) => c,
        Err(e) => {
            if std::env::var("FUZZ_DEBUG").is_ok() {
                eprintln!("{e}");
            }
            return Reached::Refused;
        }
    };
    // `check` also judges the -e keys against the templates.
    let _ = rigrun::config::extra_vars::check_use(&config, &input.extra_vars);
    let builtins = Builtins {
        run_id: "RUN_ID".into(),
        rigrun: "rigrun".into(),
    };
    match plan::build(&config, &builtins) {
        Ok(plan) => {
            let _ = plan::describe(&config, &plan);
            Reached::Planned
        }
        Err(_) => Reached::Loaded,
    }
}

/// The slowest input seen and how many ran.
#[derive(Default)]
struct Stats {
    cases: u64,
    /// Inputs that loaded (passed `check`'s first half), and that planned too.
    loaded: u64,
    planned: u64,
    slowest: Duration,
    slowest_input: Option<Input>,
}

/// Runs `cases` generated inputs and prints the figures the docs quote; with `limit`, an input
/// that takes longer fails the run.
fn fuzz(cases: u32, limit: Option<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bench.py"), "print('{}')\n").unwrap();
    let stats = std::cell::RefCell::new(Stats::default());
    let config = RunnerConfig {
        cases,
        failure_persistence: None,
        // Maps drawn from few names retry now and then; over a million cases those retries add
        // up past proptest's default limit (65,536), which ended a first run at 856,614 cases.
        max_local_rejects: u32::MAX,
        ..RunnerConfig::default()
    };
    let started = Instant::now();
    let result = TestRunner::new(config).run(&input(), |input| {
        let start = Instant::now();
        let reached = exercise(dir.path(), &input);
        let took = start.elapsed();
        let mut s = stats.borrow_mut();
        s.cases += 1;
        s.loaded += u64::from(reached >= Reached::Loaded);
        s.planned += u64::from(reached == Reached::Planned);
        if s.cases % 10_000 == 0 {
            report(&s, started.elapsed(), false);
        }
        if took > s.slowest {
            s.slowest = took;
            s.slowest_input = Some(input.clone());
        }
        if limit.is_some_and(|limit| took > limit) {
            return Err(TestCaseError::fail(format!("took {took:?}")));
        }
        Ok(())
    });
    report(&stats.borrow(), started.elapsed(), true);
    result.unwrap();
}

/// Cases, cases/s and the slowest time on stderr; with `show_slowest`, the slowest input too.
fn report(stats: &Stats, elapsed: Duration, show_slowest: bool) {
    eprintln!(
        "fuzz_config: {} cases ({} loaded, {} planned) in {:.1}s ({:.0} cases/s); slowest input {:.1} ms",
        stats.cases,
        stats.loaded,
        stats.planned,
        elapsed.as_secs_f64(),
        stats.cases as f64 / elapsed.as_secs_f64(),
        stats.slowest.as_secs_f64() * 1000.0
    );
    if let Some(input) = stats.slowest_input.as_ref().filter(|_| show_slowest) {
        eprintln!(
            "slowest playbook:\n{}\nslowest inventory:\n{}\n-e {:?}",
            String::from_utf8_lossy(&input.playbook),
            String::from_utf8_lossy(&input.inventory),
            input.extra_vars
        );
    }
}

/// A few hundred cases, for every test run: no panic. (Time is not asserted on a shared
/// machine; `fuzz_many` holds every input to a second in release.)
#[test]
fn loading_checking_and_planning_never_panic() {
    fuzz(300, None);
}

/// As many cases as `PROPTEST_CASES` says (a million by default): `bash fuzz/config.sh`.
#[test]
#[ignore]
fn fuzz_many() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let limit = if cfg!(debug_assertions) {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(1)
    };
    fuzz(cases, Some(limit));
}
