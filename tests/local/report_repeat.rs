//! `repeat: N` on a run-sweep, end to end on a local host: every point measured N times in
//! interleaved order, and `show` giving the mean with its 95% interval, noisy cells flagged.

use std::path::{Path, PathBuf};

use crate::common::*;

const INVENTORY: &str = "hosts:\n  a:\n    connection: local\n";

/// Each run of a point counts itself in a file: the n-th run of `c=1` prints 100 + n (quiet),
/// of `c=2` 100 × n (noisy).
const PLAYBOOK: &str = r#"
name: repeated
steps:
  - run-sweep:
      repeat: 3
      matrix: {c: [1, 2]}
      command: >-
        f={{ dir }}/count-{{ c }}; n=$(( $(cat $f 2>/dev/null || echo 0) + 1 )); echo $n > $f;
        echo "{\"x\": {% if c == 1 %}$((100 + n)){% else %}$((100 * n)){% endif %}}"
"#;

fn run_dir(dir: &Path) -> PathBuf {
    let out = run_rigrun(
        dir,
        &[
            "run",
            "sweep.yaml",
            "-e",
            &format!("dir={}", dir.display()),
            "--runs-dir",
            "runs",
        ],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    crate::common::only_run_dir(&dir.join("runs"))
}

fn show(run: &Path, format: &str) -> String {
    crate::reporting::rigrun_ok(&["show", run.to_str().unwrap(), "--format", format], 0)
}

fn lines(path: PathBuf) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_repeated_sweep_measures_each_point_n_times_and_shows_mean_and_interval() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    std::fs::write(dir.path().join("sweep.yaml"), PLAYBOOK).unwrap();
    let run = run_dir(dir.path());

    let records = lines(run.join("records.jsonl"));
    let of = |c: u64| -> Vec<(u64, f64)> {
        records
            .iter()
            .filter(|r| r["point"]["c"] == c)
            .map(|r| {
                (
                    r["repetition"].as_u64().unwrap_or(1),
                    r["metrics"]["x"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(of(1), [(1, 101.0), (2, 102.0), (3, 103.0)]);
    assert_eq!(of(2), [(1, 100.0), (2, 200.0), (3, 300.0)]);

    let started: Vec<(String, u64)> = lines(run.join("events.jsonl"))
        .iter()
        .filter(|e| e["event"] == "point_started")
        .map(|e| {
            (
                e["point"].as_str().unwrap().to_string(),
                e["repetition"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    let interleaved: Vec<(String, u64)> = (1..=3)
        .flat_map(|r| [("c=1".to_string(), r), ("c=2".to_string(), r)])
        .collect();
    assert_eq!(started, interleaved);

    // c=1: mean 102, s = 1, 4.303 × 1 / √3 = 2.484; c=2: mean 200, s = 100, half-width 248.4.
    let table = show(&run, "table");
    assert!(table.contains("102 ± 2.48"), "{table}");
    assert!(table.contains("200 ± 248.4 noisy"), "{table}");
    assert!(
        table.contains("noisy: the 3 repetitions vary by 50.0%"),
        "{table}"
    );
    assert!(!table.contains("102 ± 2.48 noisy"), "{table}");

    let json: serde_json::Value = serde_json::from_str(&show(&run, "json")).unwrap();
    let cells: Vec<&serde_json::Value> = json
        .pointer("/tables/0/rows")
        .and_then(|r| r.as_array())
        .map(|rows| rows.iter().filter_map(|row| row["cells"].get(1)).collect())
        .unwrap_or_default();
    assert_eq!(cells.len(), 2, "{json}");
    assert_eq!(cells[0]["value"], 102.0);
    assert_eq!(cells[0]["n"], 3);
    assert!((cells[0]["ci95"].as_f64().unwrap() - 2.484).abs() < 1e-3);
    assert_eq!(cells[0]["noisy"], false);
    assert_eq!(cells[1]["noisy"], true);
    assert_eq!(cells[1]["excluded"], 0);
}

/// `run --repeat N` repeats every sweep without its own `repeat:` (a sweep that says `repeat: 1`
/// keeps it), and the count is kept in run.json for a resume.
#[test]
fn run_repeat_applies_to_sweeps_without_their_own_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    let playbook = "name: twice\nsteps:\n  - run-sweep:\n      matrix: {c: [1, 2]}\n      \
                    command: \"echo '{\\\"x\\\": {{ c }}}'\"\n  - run-sweep:\n      repeat: 1\n      \
                    matrix: {d: [1]}\n      command: \"echo '{\\\"y\\\": 1}'\"\n";
    std::fs::write(dir.path().join("twice.yaml"), playbook).unwrap();
    let out = run_rigrun(
        dir.path(),
        &["run", "twice.yaml", "--repeat", "2", "--runs-dir", "runs", "-q"],
    );
    assert!(out.status.success(), "{:?}", text(&out));
    let run = only_run_dir(&dir.path().join("runs"));
    let recs = records(&run);
    let reps = |step: u64, key: &str| -> Vec<u64> {
        let mut r: Vec<u64> = recs
            .iter()
            .filter(|r| r["step_index"] == step && r["metrics"].get(key).is_some())
            .map(|r| r["repetition"].as_u64().unwrap_or(1))
            .collect();
        r.sort();
        r
    };
    assert_eq!(reps(0, "x"), [1, 1, 2, 2], "{recs:?}");
    assert_eq!(reps(1, "y"), [1], "its own repeat: 1 stands");
    assert_eq!(manifest(&run)["playbook"]["repeat"], 2);

    let bad = run_rigrun(dir.path(), &["run", "twice.yaml", "--repeat", "0"]);
    assert_eq!(bad.status.code(), Some(2), "{:?}", text(&bad));
}

/// A point whose value has a dot keeps one log per repetition (the name is not cut at the dot).
#[test]
fn each_repetition_of_a_dotted_point_keeps_its_own_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hosts.yaml"), INVENTORY).unwrap();
    std::fs::write(
        dir.path().join("sweep.yaml"),
        "name: dotted\nsteps:\n  - run-sweep:\n      repeat: 2\n      matrix: {t: [0.7]}\n      command: >-\n        \
         f={{ dir }}/n; n=$(( $(cat $f 2>/dev/null || echo 0) + 1 )); echo $n > $f; echo \"run $n\"; echo \"{\\\"n\\\": $n}\"\n",
    )
    .unwrap();
    let run = run_dir(dir.path());
    let log = |name: &str| std::fs::read_to_string(run.join("hosts/a/01-run-sweep").join(name)).unwrap();
    assert_eq!(log("001-t=0.7.stdout.log"), "run 1\n{\"n\": 1}\n");
    assert_eq!(log("001-t=0.7-rep2.stdout.log"), "run 2\n{\"n\": 2}\n");
}
