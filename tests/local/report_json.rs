//! `--format json` for programs: a versioned document whose rows carry their point as an object
//! of typed matrix values. Checked against the run's records.jsonl read here, independently of
//! the report's own reading: each row's point is a point some record of its step carries (types
//! included), every recorded point has its row, and each value cell is its record's metric.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::records;
use crate::reporting::{rigrun_ok, run, setup};

/// Axes of four JSON types: the point object keeps each as written.
const TYPED: &str = r#"
name: typed-points
steps:
  - run-sweep:
      matrix: {concurrency: [1, 4], model: [tiny, "big one"], stream: [true], temperature: [0.5]}
      skip_if: model == "big one" and host == "slow"
      command: >-
        echo '{"output_throughput": {{ concurrency * speed }}{% if model == "tiny" %}.5{% endif %}}'
"#;

/// The document of `rigrun <args> --format json`, its version checked.
fn document(args: &[&str]) -> Value {
    let out = rigrun_ok(&[args, &["--format", "json"]].concat(), 0);
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["format_version"], 1, "{out}");
    doc
}

/// The step index (from 0) a table's title names (`… step 4: run-sweep …`).
fn step_of(table: &Value) -> Option<u64> {
    let title = table["title"].as_str().unwrap();
    let after = title.split("step ").nth(1)?;
    let number: String = after.chars().take_while(char::is_ascii_digit).collect();
    number.parse::<u64>().ok().map(|n| n - 1)
}

/// The rows of a table as (point, cells).
fn rows(table: &Value) -> Vec<(&serde_json::Map<String, Value>, &Vec<Value>)> {
    let rows = table["rows"].as_array().unwrap();
    rows.iter()
        .map(|row| {
            let point = row["point"]
                .as_object()
                .unwrap_or_else(|| panic!("a point object: {row}"));
            (point, row["cells"].as_array().unwrap())
        })
        .collect()
}

/// Checks the tables of `show` against `records`: points as the records carry them, every
/// recorded point with its row, every value cell its record's metric.
fn check_show(doc: &Value, records: &[Value]) -> usize {
    let mut checked = 0;
    for table in doc["tables"].as_array().unwrap() {
        let Some(step) = step_of(table) else { continue };
        let of_step: Vec<&Value> = records.iter().filter(|r| r["step_index"] == step).collect();
        let points: Vec<&Value> = of_step.iter().map(|r| &r["point"]).collect();
        let columns = table["columns"].as_array().unwrap();
        let metric = table["metric"].as_str().unwrap();
        let rows = rows(table);
        for (point, cells) in &rows {
            let point = Value::Object((*point).clone());
            assert!(
                points.contains(&&point),
                "{point} is no recorded point of step {step}"
            );
            assert_eq!(cells.len(), columns.len(), "a cell per column: {cells:?}");
            for (column, cell) in columns.iter().zip(cells.iter()).skip(1) {
                if cell["status"] != "value" {
                    continue;
                }
                let measured: Vec<f64> = (of_step.iter())
                    .filter(|r| r["host"] == *column && r["point"] == point && r["status"] == "ok")
                    .filter_map(|r| r["metrics"][metric].as_f64())
                    .collect();
                let value = cell["value"].as_f64().unwrap();
                assert!(
                    measured.contains(&value),
                    "{column} at {point}: {value} is not its record's {metric} ({measured:?})"
                );
                checked += 1;
            }
        }
        for point in &points {
            assert!(
                rows.iter().any(|(p, _)| Value::Object((*p).clone()) == **point),
                "the recorded point {point} of step {step} has a row in {}",
                table["title"]
            );
        }
    }
    checked
}

#[test]
fn points_are_typed_objects_as_the_records_hold_them() {
    let dir = setup(TYPED);
    let (run_dir, out) = run(dir.path(), &[]);
    assert!(out.status.success(), "{out:?}");
    let recorded = records(&run_dir);
    let run_arg = run_dir.to_str().unwrap();

    let doc = document(&["show", run_arg]);
    let checked = check_show(&doc, &recorded);
    // 4 points on fast, 2 on slow (the other 2 skipped).
    assert_eq!(checked, 6, "{doc}");
    let first = &doc["tables"][0]["rows"][0];
    assert_eq!(
        first["point"],
        json!({"concurrency": 1, "model": "tiny", "stream": true, "temperature": 0.5}),
        "{first}"
    );
    assert!(first["point"]["concurrency"].is_u64() && first["point"]["stream"].is_boolean());
    assert_eq!(
        first["cells"][0]["text"],
        "concurrency=1 model=tiny stream=true temperature=0.5"
    );
    let skipped = &doc["tables"][0]["rows"][1];
    assert_eq!(skipped["point"]["model"], "big one", "{skipped}");
    assert_eq!(skipped["cells"][2]["status"], "skipped", "{skipped}");

    // compare: the same points, in the same order, with the ratio columns after.
    let compared = document(&["compare", run_arg]);
    let points = |doc: &Value| -> Vec<Value> {
        rows(&doc["tables"][0])
            .into_iter()
            .map(|(p, _)| Value::Object(p.clone()))
            .collect()
    };
    assert_eq!(points(&compared), points(&doc));
}

#[test]
fn the_fixture_runs_points_match_their_records() {
    let fixture = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runs")
            .join(name)
    };
    let (a, b) = (fixture("20261201T102538Z-demo"), fixture("20261201T102606Z-demo"));
    let (a_arg, b_arg) = (a.to_str().unwrap(), b.to_str().unwrap());
    let doc = document(&["show", a_arg]);
    assert!(check_show(&doc, &records(&a)) >= 9, "{doc}");
    // A sweep's point is a number, a fetched file's a string.
    let points: Vec<Value> = (doc["tables"].as_array().unwrap().iter())
        .flat_map(|t| rows(t).into_iter().map(|(p, _)| Value::Object(p.clone())))
        .collect();
    assert!(points.contains(&json!({"concurrency": 16})), "{points:?}");
    assert!(points.iter().any(|p| p["file"].is_string()), "{points:?}");

    // Across runs, each row's point is one both runs recorded at that step.
    let across = document(&["compare", a_arg, b_arg]);
    let (first, second) = (records(&a), records(&b));
    for table in across["tables"].as_array().unwrap() {
        let step = step_of(table).unwrap();
        for (point, _) in rows(table) {
            let point = Value::Object(point.clone());
            for recorded in [&first, &second] {
                assert!(
                    recorded
                        .iter()
                        .any(|r| r["step_index"] == step && r["point"] == point),
                    "{point} is recorded at step {step}"
                );
            }
        }
    }
    // `compare --facts` alone carries the version too.
    let facts = document(&["compare", a_arg, "--facts"]);
    assert!(facts["facts_diff"].is_array(), "{facts}");
}
