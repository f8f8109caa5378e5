//! Terminal tables within the terminal's width: with `COLUMNS=100`, every line `compare` and
//! `run` print for real runs (server variants side by side, ~180 columns wide; two runs
//! across, ~190) is at most 100 columns, with every cell of the wide table still there, in
//! order, the point column repeated; piped without `COLUMNS`, nothing is split or wrapped.

use std::path::Path;

use console::measure_text_width;

use crate::common::{free_port, only_run_dir, rigrun, text};

/// rigrun's stdout, with `COLUMNS` set to `columns` or, for `None`, removed.
fn stdout_of(dir: &Path, args: &[&str], columns: Option<&str>) -> String {
    let mut cmd = rigrun();
    cmd.current_dir(dir).args(args).env_remove("COLUMNS");
    if let Some(columns) = columns {
        cmd.env("COLUMNS", columns);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "rigrun {args:?}:\n{stdout}\n{stderr}");
    stdout
}

fn widest(text: &str) -> usize {
    text.lines().map(measure_text_width).max().unwrap_or(0)
}

/// Each table row's cells after the first, joined per first cell (the point, or `point` for
/// the header) across every table in which that first cell appears: what a split table must
/// keep of the whole one.
fn cells_by_row(text: &str) -> Vec<(String, Vec<String>)> {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines().filter(|l| l.starts_with('│')) {
        let mut cells = line.trim_matches('│').split('│').map(|c| c.trim().to_string());
        let label = cells.next().unwrap();
        match rows.iter_mut().find(|(l, _)| *l == label) {
            Some((_, row)) => row.extend(cells),
            None => rows.push((label, cells.collect())),
        }
    }
    rows
}

/// `args` print a table wider than `COLUMNS=100` without it, and within 100 columns with it,
/// holding the same cells.
fn fits_100_columns(dir: &Path, args: &[&str], wider_than: usize) {
    let whole = stdout_of(dir, args, None);
    assert!(widest(&whole) > wider_than, "the table is wide:\n{whole}");
    let fitted = stdout_of(dir, args, Some("100"));
    for line in fitted.lines() {
        assert!(
            measure_text_width(line) <= 100,
            "{} columns: {line}\n{fitted}",
            measure_text_width(line)
        );
    }
    assert!(
        fitted.matches("│ point").count() > whole.matches("│ point").count(),
        "the wide tables are split:\n{fitted}"
    );
    assert_eq!(cells_by_row(&fitted), cells_by_row(&whole), "{fitted}");
}

#[test]
fn report_width_compare_across_runs_fits_100_columns() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs");
    let a = fixtures.join("20261201T102538Z-demo");
    let b = fixtures.join("20261201T102606Z-demo");
    let args = ["compare", a.to_str().unwrap(), b.to_str().unwrap()];
    fits_100_columns(Path::new("."), &args, 180);
    // A terminal too narrow for even two columns: the cells are wrapped within it.
    let narrow = stdout_of(Path::new("."), &args, Some("40"));
    assert!(widest(&narrow) <= 40, "{narrow}");
}

/// The demo's hosts and variants (so the demo's column names) on the tiny sim, with records
/// printed by the sweep: speculation doubles the throughput.
const VARIANTS: &str = r#"
name: variants-width
server:
  command: "{{ rigrun }} sim --profile tiny --port {{ port }}"
  url: "http://127.0.0.1:{{ port }}"
  wait: 30s
  stop_grace: 1s
  variants: {spec: [off, nextn3]}
steps:
  - run-sweep:
      matrix: {concurrency: [1, 8, 32]}
      command: >-
        echo '{"output_throughput": {{ speed * concurrency * (2 if spec == "nextn3" else 1) }}}'
"#;

#[test]
fn report_width_variants_side_by_side_fit_100_columns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let host = |name: &str, speed: u32| {
        format!(
            "  {name}:\n    connection: local\n    workdir: {}\n    vars: {{port: {}, speed: {speed}}}\n",
            dir.join(name).display(),
            free_port()
        )
    };
    let inventory = format!("hosts:\n{}{}", host("blackwell", 200), host("a6000", 30));
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
    std::fs::write(dir.join("p.yaml"), VARIANTS).unwrap();
    // The closing table of the run itself fits too.
    let closing = stdout_of(dir, &["run", "p.yaml", "--runs-dir", "runs", "-q"], Some("100"));
    assert!(
        closing.contains("blackwell/spec=nextn3 / blackwell/spec=off"),
        "{closing}"
    );
    assert!(widest(&closing) <= 100, "{closing}");
    let run = only_run_dir(&dir.join("runs"));
    fits_100_columns(dir, &["compare", run.to_str().unwrap()], 170);
}
