//! `compare --facts` on real runs of two local hosts whose labels differ (`gpu`) and whose
//! system facts are the same machine's: the differing fact is listed with each host's value,
//! the identical ones only named once, and none of the tables is printed.

use crate::common::text;
use crate::reporting::{rigrun_ok, run, setup};

const PLAYBOOK: &str = r#"
name: facts-diff
steps:
  - run-sweep:
      matrix: {concurrency: [1]}
      command: >-
        echo '{"output_throughput": {{ speed }}}'
"#;

#[test]
fn compare_facts_prints_only_what_differs() {
    let dir = setup(PLAYBOOK);
    let (run_dir, out) = run(dir.path(), &[]);
    assert!(out.status.success(), "{:?}", text(&out));
    let first = run_dir.to_str().unwrap();

    let table = rigrun_ok(&["compare", first, "--facts"], 0);
    assert!(table.starts_with("what differs: hosts of run "), "{table}");
    let gpu = table.lines().find(|l| l.contains("label gpu")).expect(&table);
    assert!(
        gpu.contains("8x RTX PRO 6000 Blackwell") && gpu.contains("RTX A6000"),
        "{gpu}"
    );
    assert!(
        !table.lines().any(|l| l.starts_with("│ kernel")),
        "kernel is the same: {table}"
    );
    let same = table
        .lines()
        .find(|l| l.starts_with("  the same: "))
        .expect(&table);
    assert!(same.contains("kernel"), "{same}");
    assert!(!table.contains("output_throughput"), "only the facts: {table}");

    let json: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["compare", first, "--facts", "--format", "json"], 0)).unwrap();
    let diff = &json["facts_diff"][0];
    assert_eq!(diff["columns"], serde_json::json!(["fast", "slow"]));
    let differ = diff["differ"].as_array().unwrap();
    let gpu = differ
        .iter()
        .find(|f| f["fact"] == "label gpu")
        .expect("label gpu differs");
    assert_eq!(
        gpu["values"],
        serde_json::json!(["8x RTX PRO 6000 Blackwell", "RTX A6000"])
    );
    assert!(!differ.iter().any(|f| f["fact"] == "kernel"), "{diff}");
    assert!(
        diff["same"].as_array().unwrap().iter().any(|f| f == "kernel"),
        "{diff}"
    );

    // The full comparison says it first, and with every table in JSON.
    let full = rigrun_ok(&["compare", first], 0);
    assert!(full.starts_with("what differs: hosts of run "), "{full}");
    let tables: serde_json::Value =
        serde_json::from_str(&rigrun_ok(&["compare", first, "--format", "json"], 0)).unwrap();
    assert_eq!(tables["tables"][0]["facts_diff"], json["facts_diff"]);

    // The same hosts across two runs: nothing differs.
    let (second, _) = run(dir.path(), &[]);
    let across = rigrun_ok(&["compare", first, second.to_str().unwrap(), "--facts"], 0);
    assert!(
        across.contains("what differs: host fast across runs\n  all facts the same: label gpu"),
        "{across}"
    );
}
