//! Compare and report on a real run: two local hosts each start `rigrun sim` (a calibrated
//! simulated GPU server), verify it, copy the real benchmark script and sweep the concurrency
//! with streaming (so TTFT and TPOT are measured); then `compare` puts the hosts side by side and
//! `report` writes the HTML, checked in headless Chromium (screenshot in target/test-artifacts/).

use crate::chromium::{artifact, Browser};
use crate::common::{free_port, text};
use crate::reporting::rigrun_ok;

fn inventory(dir: &std::path::Path) -> String {
    format!(
        r#"
hosts:
  blackwell:
    connection: local
    workdir: {dir}/wd/blackwell
    labels: {{gpu: "8x RTX PRO 6000 Blackwell (simulated)"}}
    vars: {{profile: blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4, model: Qwen/Qwen3.5-397B-A17B-NVFP4, port: {}, kv_capacity_tokens: 1570000}}
  a6000:
    connection: local
    workdir: {dir}/wd/a6000
    labels: {{gpu: "RTX A6000 (simulated)"}}
    vars: {{profile: a6000-qwen3.6-27b, model: Qwen/Qwen3.6-27B, port: {}, kv_capacity_tokens: 40000}}
"#,
        free_port(),
        free_port(),
        dir = dir.display()
    )
}

const PLAYBOOK: &str = r#"
name: sim-report
# 64 output tokens: each request lasts long enough that the script holds C of them at once
# (with 16 a C=64 point could end with the server never running 64, which telemetry flags).
vars: {input_len: 1000, output_len: 64}
steps:
  - start-server:
      command: "{{ rigrun }} sim --profile {{ profile }} --port {{ port }}"
      url: "http://127.0.0.1:{{ port }}"
  - verify-server:
      url: "http://127.0.0.1:{{ port }}"
      model: "{{ model }}"
  - copy-script:
      src: bench_throughput.py
      dest: "{{ workdir }}/bench_throughput.py"
  - run-sweep:
      matrix: {concurrency: [1, 4, 16, 64]}
      skip_if: "concurrency * (input_len + output_len) > kv_capacity_tokens"
      command: >-
        python3 {{ workdir }}/bench_throughput.py --url http://127.0.0.1:{{ port }} --model {{ model }}
        --concurrency {{ concurrency }} --input-len {{ input_len }} --output-len {{ output_len }}
        --num-requests {{ concurrency * 2 }} --stream
      timeout: 2m
"#;

/// The ratio in a Markdown row's last cell: `×0.13`.
fn ratio(row: &str) -> f64 {
    let cell = row.trim_end_matches('|').rsplit('|').next().unwrap().trim();
    cell.trim_start_matches('×')
        .parse()
        .unwrap_or_else(|_| panic!("no ratio in {row}"))
}

#[test]
fn compare_and_report_a_run_on_simulated_gpu_servers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("hosts.yaml"), inventory(d)).unwrap();
    std::fs::write(d.join("sweep.yaml"), PLAYBOOK).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench_throughput.py");
    std::fs::copy(script, d.join("bench_throughput.py")).unwrap();
    let out = crate::common::rigrun()
        .current_dir(d)
        .args(["run", "sweep.yaml", "--runs-dir", "runs", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    let run = crate::common::only_run_dir(&d.join("runs"));
    let run = run.to_str().unwrap();

    let md = rigrun_ok(&["compare", run, "--format", "markdown"], 0);
    assert!(md.starts_with("### What differs: hosts of run "), "{md}");
    assert!(
        md.contains("\n- **blackwell: gpu: 8x RTX PRO 6000 Blackwell (simulated)**\n"),
        "{md}"
    );
    assert!(
        md.contains("  - server: "),
        "verify-server's facts are in the header: {md}"
    );
    assert!(
        md.contains("| point | blackwell | a6000 | a6000 / blackwell |"),
        "{md}"
    );
    for c in [1, 4, 16] {
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| concurrency={c} |")))
            .unwrap_or_else(|| panic!("no row for C={c}: {md}"));
        let r = ratio(row);
        assert!(
            r > 0.02 && r < 1.0,
            "the A6000 serves less than the Blackwell node at C={c}: {row}"
        );
    }
    let row = md.lines().find(|l| l.starts_with("| concurrency=64 |")).unwrap();
    assert!(row.ends_with("| skipped [1] | — |"), "{row}");
    assert!(md.contains("\n- blackwell: 1→4 ×"), "{md}");
    // Markdown escapes the `*` of the skip_if expression.
    assert!(md.contains("capacity limit: C=64 skipped (concurrency \\* (input_len + output_len) = 68096 > kv_capacity_tokens = 40000)"), "{md}");

    let html = d.join("report.html");
    rigrun_ok(&["report", run, "--out", html.to_str().unwrap()], 0);
    let mut browser = Browser::launch();
    let shot = artifact("report-sim.png");
    let page = browser.check_page(
        &html,
        "[...document.querySelectorAll('svg.chart')].map(s => s.dataset.chart + ':' + s.querySelectorAll('.marker').length)",
        &shot,
    );
    assert_eq!(page.errors, Vec::<String>::new(), "the page logged errors");
    let charts: Vec<String> = serde_json::from_value(page.evaluated).unwrap();
    for kind in ["throughput:7", "ttft:14", "tradeoff:7"] {
        assert!(
            charts.iter().any(|c| c == kind),
            "expected {kind} (chart:markers) in {charts:?}"
        );
    }
    crate::report_html::assert_no_overlap(&mut browser, &html, "report-sim-overlaps.png");
    eprintln!("screenshot: {}", shot.display());
}
