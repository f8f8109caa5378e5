//! `search:` in a sweep: the shipped `playbooks/capacity.yaml` on both demo hosts (the real
//! `rigrun sim` per host, on ports and folders of the test's own). Each host's capacity found by
//! the search is where `rigrun sim --predict` (the sim's own model, computed independently of the
//! run) puts the limit, in far fewer probes than the 160-point grid; every probe's verdict agrees
//! with its record; the candidates not probed are recorded so and get no row; a resume of the
//! finished run measures nothing again.

use std::path::Path;

use serde_json::Value;

use crate::common::*;

const HOSTS: [(&str, &str, &str); 2] = [
    (
        "blackwell",
        "blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4",
        "Qwen/Qwen3.5-397B-A17B-NVFP4",
    ),
    ("a6000", "a6000-qwen3.6-27b", "Qwen/Qwen3.6-27B"),
];

/// The playbook's limit and the noise band within which a measurement may fall either side of it.
const LIMIT: f64 = 50.0;
const BAND: f64 = 0.05;

fn inventory(dir: &Path) -> String {
    let mut text = String::from("hosts:\n");
    for (host, profile, model) in HOSTS {
        text += &format!(
            "  {host}:\n    connection: local\n    workdir: {}\n    vars: {{profile: {profile}, \
             model: {model}, port: {}}}\n",
            dir.join(host).display(),
            free_port()
        );
    }
    text
}

/// The sim's predicted mean TPOT of `profile` at each concurrency from 1 to 160 (index c − 1).
fn predicted_tpot(profile: &str) -> Vec<f64> {
    let levels: Vec<String> = (1..=160).map(|c| c.to_string()).collect();
    let out = rigrun()
        .args(["sim", "--profile", profile, "--predict", &levels.join(",")])
        .args(["--input-len", "1000", "--output-len", "32"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", text(&out));
    text(&out)
        .0
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["mean_tpot_ms"]
                .as_f64()
                .unwrap()
        })
        .collect()
}

fn search_details(run_dir: &Path, host: &str) -> Value {
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "step_finished" && e["host"] == host && e["details"]["search"].is_array())
        .unwrap_or_else(|| panic!("{host}: no search in the sweep's details"))["details"]["search"][0]
        .clone()
}

#[test]
fn a_search_finds_each_hosts_capacity_where_the_sim_predicts_it_in_few_probes() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("hosts.yaml"), inventory(tmp.path())).unwrap();
    let playbook = Path::new(env!("CARGO_MANIFEST_DIR")).join("playbooks/capacity.yaml");
    let runs = tmp.path().join("runs");
    let (playbook, runs_dir) = (playbook.to_str().unwrap(), runs.to_str().unwrap());
    let run = ["run", playbook, "-i", "hosts.yaml", "--runs-dir", runs_dir, "-q"];
    let out = run_rigrun(tmp.path(), &run);
    assert!(out.status.success(), "{:?}", text(&out));
    let run_dir = only_run_dir(&runs);
    let before = records(&run_dir);
    let records = &before;
    for (host, profile, _) in HOSTS {
        let found = search_details(&run_dir, host);
        let predicted = predicted_tpot(profile);
        let (met, missed) = (found["met"].as_u64().unwrap() as usize, found["missed"].as_u64());
        assert_eq!(found["exact"], true, "{host}: {found}");
        assert_eq!(missed, Some(met as u64 + 1), "{host}: {found}");
        // Where the model crosses the limit, within the measurement's noise either side.
        assert!(
            predicted[met - 1] <= LIMIT * (1.0 + BAND),
            "{host}: {met}: {}",
            predicted[met - 1]
        );
        assert!(
            predicted[met] >= LIMIT * (1.0 - BAND),
            "{host}: {}: {}",
            met + 1,
            predicted[met]
        );
        let probes = found["probes"].as_u64().unwrap();
        assert!(
            probes <= 14,
            "{host}: {probes} probes, the worst case of 160 candidates is 14"
        );
        // Each probe is a point measured once; its verdict is its record's TPOT against the limit.
        let of_host: Vec<&Value> = records.iter().filter(|r| r["host"] == host).collect();
        let measured: Vec<&&Value> = of_host.iter().filter(|r| r["status"] == "ok").collect();
        assert_eq!(measured.len() as u64, probes, "{host}");
        for probe in found["probed"].as_array().unwrap() {
            let record = measured
                .iter()
                .find(|r| format!("concurrency={}", r["point"]["concurrency"]) == probe["point"])
                .unwrap_or_else(|| panic!("{host}: no record of {probe}"));
            let tpot = record["metrics"]["mean_tpot_ms"].as_f64().unwrap();
            assert_eq!(
                probe["met"],
                tpot <= LIMIT && record["metrics"]["valid"] == true,
                "{host}: {probe} {tpot}"
            );
        }
        // The others: recorded as not probed, so a resume and the tables know them.
        let not_probed = of_host
            .iter()
            .filter(|r| r["status"] == "skipped" && r["reason"].as_str().unwrap().starts_with("not probed: "))
            .count();
        assert_eq!(not_probed as u64 + probes, 160, "{host}");
    }
    // The table has a row per point some host probed, none for the rest, and the capacity heads it.
    let shown = text(&run_rigrun(
        tmp.path(),
        &["show", run_dir.to_str().unwrap(), "--format", "json"],
    ))
    .0;
    let json: Value = serde_json::from_str(&shown).unwrap();
    let table = &json["tables"][0];
    let probed: std::collections::BTreeSet<String> = records
        .iter()
        .filter(|r| r["status"] == "ok")
        .map(|r| format!("concurrency={}", r["point"]["concurrency"]))
        .collect();
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), probed.len(), "{table}");
    for (host, _, _) in HOSTS {
        let found = search_details(&run_dir, host);
        let series = table["slo"]["series"].as_array().unwrap();
        let capacity = series.iter().find(|s| s["host"] == host).unwrap();
        assert_eq!(
            capacity["within"]["concurrency"].as_f64(),
            found["met"].as_f64(),
            "{capacity}"
        );
    }
    let table = text(&run_rigrun(tmp.path(), &["show", run_dir.to_str().unwrap()])).0;
    assert!(
        table.contains("found by a search: blackwell: concurrency="),
        "{table}"
    );
    // Resumed, the finished search measures nothing again.
    let resumed = run_rigrun(tmp.path(), &["run", "--resume", run_dir.to_str().unwrap(), "-q"]);
    assert!(resumed.status.success(), "{:?}", text(&resumed));
    assert_eq!(
        crate::common::records(&run_dir).len(),
        before.len(),
        "{:?}",
        text(&resumed)
    );
}
