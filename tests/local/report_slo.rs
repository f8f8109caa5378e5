//! Capacity under an SLO on real runs: the playbook's `slo:` is kept in the run and judged by
//! `show` without a flag; `compare --slo` judges by other limits, naming each host's highest
//! concurrency within them, the throughput there and its ratio to the baseline, in every format.

use crate::common::{rigrun, text};
use crate::reporting::{rigrun_ok, run, setup};

/// p99 TTFT = 40·C·200/speed ms and median TPOT = 10 + C·100/speed ms: `fast` (speed 200) meets
/// p99 ≤ 1000 and TPOT ≤ 30 up to C=16 (640 ms, 18 ms; C=64 has 2560 ms), `slow` (speed 100)
/// up to C=4 (320 ms; C=16 has 1280 ms). Throughput is speed·C^0.7.
const PLAYBOOK: &str = r#"
name: slo-sweep
slo: {p99_ttft_ms: 1000, median_tpot_ms: 30}
steps:
  - run-sweep:
      name: throughput
      matrix: {concurrency: [1, 4, 16, 64]}
      skip_if: concurrency > cap
      command: >-
        echo '{"output_throughput": {{ speed * concurrency ** 0.7 }},
        "p99_ttft_ms": {{ 40 * concurrency * 200 / speed }}, "median_tpot_ms": {{ 10 + concurrency * 100 / speed }}}'
"#;

#[test]
fn show_judges_a_run_by_its_playbooks_slo() {
    let dir = setup(PLAYBOOK);
    let (run_dir, out) = run(dir.path(), &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let want = "step 1: throughput — within SLO (p99_ttft_ms ≤ 1000, median_tpot_ms ≤ 30): \
        fast: concurrency=16 at 1392.9 output_throughput; slow: concurrency=4 at 263.9 output_throughput (×0.19 of fast)";
    let closing = text(&out).0;
    assert!(closing.contains(want), "run's closing table: {closing}");
    let table = rigrun_ok(&["show", run_dir.to_str().unwrap()], 0);
    assert!(table.contains(want), "{table}");
    assert!(
        table.contains("  fast: above concurrency=16, concurrency=64 breaks p99_ttft_ms (2560 > 1000)"),
        "{table}"
    );
    assert!(
        table.contains("  slow: above concurrency=4, concurrency=16 breaks p99_ttft_ms (1280 > 1000)"),
        "{table}"
    );
    assert!(
        table.find("within SLO").unwrap() < table.find("throughput — output_throughput").unwrap(),
        "the headline comes before the tables: {table}"
    );
}

#[test]
fn compare_slo_overrides_the_playbooks_limits_in_every_format() {
    let dir = setup(PLAYBOOK);
    let (run_dir, _) = run(dir.path(), &[]);
    let run = run_dir.to_str().unwrap();
    let slo = ["--slo", "p99_ttft_ms=5000"];

    let table = rigrun_ok(&[&["compare", run][..], &slo].concat(), 0);
    assert!(
        table.contains(
            "within SLO (p99_ttft_ms ≤ 5000): fast: concurrency=64 at 3675.8 output_throughput; \
             slow: concurrency=16 at 696.4 output_throughput (×0.19 of fast)"
        ),
        "{table}"
    );
    let against_slow = rigrun_ok(&[&["compare", run, "--baseline", "slow"][..], &slo].concat(), 0);
    assert!(
        against_slow.contains("fast: concurrency=64 at 3675.8 output_throughput (×5.28 of slow); slow: concurrency=16 at 696.4 output_throughput"),
        "{against_slow}"
    );

    let json: serde_json::Value = serde_json::from_str(&rigrun_ok(
        &[&["compare", run, "--format", "json"][..], &slo].concat(),
        0,
    ))
    .unwrap();
    let s = &json["tables"][0]["slo"];
    assert_eq!(s["limits"], serde_json::json!({"p99_ttft_ms": 5000.0}));
    assert_eq!(s["baseline"], "fast");
    assert_eq!(s["series"][0]["host"], "fast");
    assert_eq!(s["series"][0]["within"]["concurrency"], 64.0);
    assert_eq!(
        s["series"][0]["breach"],
        serde_json::Value::Null,
        "fast meets it up to its top"
    );
    assert_eq!(s["series"][1]["within"]["concurrency"], 16.0);
    let ratio = s["series"][1]["ratio"].as_f64().unwrap();
    assert!((ratio - 0.25f64.powf(0.7) / 2.0).abs() < 1e-3, "{ratio}");
    assert_eq!(s["series"][1]["breach"]["concurrency"], 64.0);
    assert_eq!(s["series"][1]["breach"]["metric"], serde_json::Value::Null);
    assert!(
        s["series"][1]["breach"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("is not within SLO: skipped"),
        "{s}"
    );

    let csv = rigrun_ok(&[&["compare", run, "--format", "csv"][..], &slo].concat(), 0);
    assert!(csv.contains(",slo,p99_ttft_ms,limit,5000,limit,\n"), "{csv}");
    assert!(csv.contains(",slo,slow,within slo,16,within slo,\n"), "{csv}");
    assert!(
        csv.contains(",slo,slow,output_throughput / fast,0.1895,x,\n"),
        "{csv}"
    );
    let md = rigrun_ok(&[&["compare", run, "--format", "markdown"][..], &slo].concat(), 0);
    assert!(
        md.contains("— within SLO (p99_ttft_ms ≤ 5000): fast: concurrency=64"),
        "{md}"
    );

    let none = rigrun_ok(&["compare", run, "--slo", "p99_ttft_ms=10"], 0);
    assert!(
        none.contains("fast: no point within SLO; slow: no point within SLO"),
        "{none}"
    );
    assert!(
        none.contains("  fast: concurrency=1, the lowest, breaks p99_ttft_ms (40 > 10)"),
        "{none}"
    );

    let html = dir.path().join("report.html");
    let html_arg = html.to_str().unwrap();
    rigrun_ok(&[&["report", run, "-o", html_arg][..], &slo].concat(), 0);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(r#"<section id="slo"><h2>Within SLO</h2>"#),
        "{page}"
    );
    assert!(
        page.contains(r#"<g class="limit">"#) && page.contains("SLO p99_ttft_ms ≤ 5000</text>"),
        "the limit is a line on the TTFT chart"
    );
}

#[test]
fn a_bad_slo_is_refused_naming_the_bad_part() {
    let dir = setup(PLAYBOOK);
    let (run_dir, _) = run(dir.path(), &[]);
    for command in ["show", "compare", "report"] {
        let out = rigrun()
            .args([
                command,
                run_dir.to_str().unwrap(),
                "--slo",
                "p99_ttft_ms=2000,median_tpot_ms",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            text(&out).1.contains("`median_tpot_ms` is not METRIC=LIMIT"),
            "{command}: {:?}",
            text(&out)
        );
    }
    let bad = PLAYBOOK.replace("median_tpot_ms: 30", "median_tpot_ms: fast");
    let dir = setup(&bad);
    let out = rigrun()
        .current_dir(dir.path())
        .args(["check", "sweep.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out).1;
    assert!(stderr.contains("sweep.yaml:3:"), "{stderr}");
    assert!(
        stderr.contains("slo: median_tpot_ms: the limit is `fast` is not a number"),
        "{stderr}"
    );
}

/// The demo's two hosts, as recorded in a fixture run of `playbooks/demo.yaml`: the capacity
/// under a TPOT limit is the one the sim's own model predicts for each host's profile
/// (`rigrun sim --predict` at the demo's lengths, at the levels the host measured). The limit
/// sits at least 5% away from every predicted value, so the test is about the model, not rounding.
#[test]
fn slo_capacity_on_the_demo_hosts_matches_the_sims_prediction() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/runs/20261201T102538Z-demo"
    );
    let limit = 50.0;
    let manifest = std::fs::read_to_string(format!("{fixture}/run.json")).unwrap();
    let records: Vec<serde_json::Value> = std::fs::read_to_string(format!("{fixture}/records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let json: serde_json::Value = serde_json::from_str(&rigrun_ok(
        &[
            "compare",
            fixture,
            "--slo",
            &format!("mean_tpot_ms={limit}"),
            "--format",
            "json",
        ],
        0,
    ))
    .unwrap();
    let series = json["tables"][0]["slo"]["series"].as_array().unwrap();
    for (host, profile) in [
        ("blackwell", "blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4"),
        ("a6000", "a6000-qwen3.6-27b"),
    ] {
        assert!(
            manifest.contains(&format!("profile: {profile}")),
            "the demo's {host} serves {profile}"
        );
        let measured: Vec<String> = records
            .iter()
            .filter(|r| r["host"] == host && r["status"] == "ok" && r["point"]["concurrency"].is_u64())
            .map(|r| r["point"]["concurrency"].to_string())
            .collect();
        let out = rigrun()
            .args(["sim", "--profile", profile, "--predict", &measured.join(",")])
            .args(["--input-len", "1000", "--output-len", "32"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", text(&out));
        let predicted: Vec<(f64, f64)> = text(&out)
            .0
            .lines()
            .map(|l| {
                let p: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    p["max_concurrency"].as_f64().unwrap(),
                    p["mean_tpot_ms"].as_f64().unwrap(),
                )
            })
            .collect();
        assert!(
            predicted
                .iter()
                .all(|(_, tpot)| (tpot / limit - 1.0).abs() > 0.05),
            "{predicted:?}"
        );
        let capacity = predicted
            .iter()
            .rev()
            .find(|(_, tpot)| *tpot <= limit)
            .map(|(c, _)| *c);
        assert!(
            capacity.is_some(),
            "{host} meets {limit} ms at C=1: {predicted:?}"
        );
        let reported = series.iter().find(|s| s["host"] == host).unwrap();
        assert_eq!(
            reported["within"]["concurrency"].as_f64(),
            capacity,
            "{host}: {reported}"
        );
    }
}

/// Across runs, each host's capacity in every run, judged by the same limits, with its ratio to
/// the host's capacity in the first run: here the second run slows every host to speed 100, so
/// `fast` falls from C=16 to C=4 (throughput 100·4^0.7 against 200·16^0.7).
#[test]
fn compare_across_runs_gives_each_runs_capacity_against_the_first() {
    let dir = setup(PLAYBOOK);
    let (first, _) = run(dir.path(), &[]);
    let (second, _) = run(dir.path(), &["-e", "speed=100"]);
    let (first, second) = (first.to_str().unwrap(), second.to_str().unwrap());
    let table = rigrun_ok(&["compare", first, second], 0);
    let headline = table
        .lines()
        .find(|l| l.contains("within SLO ("))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        headline.contains("fast @") && headline.contains("slow @"),
        "{headline}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["compare", first, second, "--format", "json"], 0)).unwrap();
    let series = json["tables"][0]["slo"]["series"].as_array().unwrap();
    let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names[0].starts_with("fast @") && names[1].starts_with("fast @"),
        "{names:?}"
    );
    assert_eq!(series[0]["within"]["concurrency"], 16.0);
    assert_eq!(series[1]["within"]["concurrency"], 4.0);
    assert_eq!(series[1]["ratio_of"], names[0]);
    let expected = (100.0 * 4f64.powf(0.7)) / (200.0 * 16f64.powf(0.7));
    assert!(
        (series[1]["ratio"].as_f64().unwrap() - expected).abs() < 1e-3,
        "{}",
        series[1]
    );
    assert!(
        headline.contains(&format!("(×{expected:.2} of {})", names[0])),
        "{headline}"
    );
    // `--slo` judges every run by the limits given.
    let loose = rigrun_ok(&["compare", first, second, "--slo", "p99_ttft_ms=100000"], 0);
    assert!(loose.contains("within SLO (p99_ttft_ms ≤ 100000)"), "{loose}");
}

/// A playbook's `slo:` reaches `rigrun bench` on the host (as `RIGRUN_SLO`): its records carry
/// goodput without a `--slo` in the command — judged by the latency limits only, the others
/// said and left to the report — and a playbook without `slo:` gets none.
#[test]
fn the_playbooks_slo_gives_goodput_to_rigrun_bench_without_a_flag() {
    let sim = crate::sim_support::Sim::start("tiny", &[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hosts.yaml"),
        "hosts:\n  a: {connection: local}\n",
    )
    .unwrap();
    let playbook = |slo: &str| {
        format!(
            "name: goodput\n{slo}steps:\n  - run-sweep:\n      matrix: {{concurrency: [1]}}\n      command: >-\n        \
             {{{{ rigrun }}}} bench --url {} --model rigrun/tiny --concurrency {{{{ concurrency }}}}\n        \
             --num-requests 5 --warmup 0 --input-len 16 --output-len 8\n",
            sim.base
        )
    };
    let run = |slo: &str| {
        std::fs::write(dir.path().join("sweep.yaml"), playbook(slo)).unwrap();
        let (run_dir, out) = run(dir.path(), &[]);
        assert!(out.status.success(), "{:?}", text(&out));
        let log = run_dir.join("hosts/a/01-run-sweep/001-concurrency=1.stderr.log");
        (
            crate::common::records(&run_dir),
            std::fs::read_to_string(log).unwrap(),
        )
    };
    let (judged, said) = run("slo: {p99_ttft_ms: 100000, output_throughput: 1}\n");
    assert_eq!(judged[0]["metrics"]["good_requests"], 5, "{}", judged[0]);
    assert!(judged[0]["metrics"]["goodput"].as_f64().unwrap() > 0.0);
    assert!(
        said.contains("without output_throughput (not a request's latency)"),
        "{said}"
    );
    let (unjudged, _) = run("");
    assert!(unjudged[0]["metrics"].get("goodput").is_none(), "{}", unjudged[0]);
}
