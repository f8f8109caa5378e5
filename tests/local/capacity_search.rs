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

/// `hosts.yaml` in `dir`: one host, `sim`, on this machine.
fn one_local_host(dir: &Path) {
    std::fs::write(dir.join("hosts.yaml"), "hosts:\n  sim: {connection: local}\n").unwrap();
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

/// A search over request rates whose measurement is known in advance: the command prints a p99
/// TTFT of 100 ms per req/s offered, so under `p99_ttft_ms ≤ 420` the capacity is 4 req/s; the
/// probe at 8 req/s waits for `go`, so that the run can be interrupted there (SIGINT, once that
/// probe started) and resumed.
fn rate_search(go: &Path) -> String {
    format!(
        "name: rates\nslo: {{p99_ttft_ms: 420}}\nsteps:\n  - run-sweep:\n      \
         search: {{axis: request_rate, from: 0.5, to: 10, step: 0.5}}\n      \
         command: \"{{% if request_rate == 8 %}}i=0; while [ ! -e {} ] && [ $i -lt 3000 ]; do \
         sleep 0.1; i=$((i+1)); done; {{% endif %}}echo '{{\\\"p99_ttft_ms\\\": {{{{ request_rate * 100 \
         }}}}}}'\"\n",
        go.display()
    )
}

#[test]
fn an_interrupted_search_resumes_from_the_probes_it_kept_and_finds_the_same_capacity() {
    use crate::resume_support::{point_started, spawn, wait_for_event};
    let dir = tempfile::tempdir().unwrap();
    one_local_host(dir.path());
    let go = dir.path().join("go");
    std::fs::write(dir.path().join("rates.yaml"), rate_search(&go)).unwrap();
    let runs = dir.path().join("runs");
    let runs_arg = runs.display().to_string();
    let args = ["run", "rates.yaml", "--runs-dir", &runs_arg, "-q"];
    let child = spawn(dir.path(), &args);
    let run_dir = wait_for_event(&runs, |e| point_started(e, "request_rate=8"));
    sh("kill", &["-INT", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    // Probed before the interrupt: 0.5, 1, 2 and 4 req/s (the candidates 1, 2, 4, 8 up).
    let before: Vec<String> = records(&run_dir)
        .iter()
        .filter(|r| r["status"] == "ok")
        .map(|r| r["point"]["request_rate"].to_string())
        .collect();
    assert_eq!(before, ["0.5", "1", "2", "4"], "{:?}", text(&out));

    std::fs::write(&go, "").unwrap();
    let resume = ["run", "--resume", run_dir.to_str().unwrap(), "-q"];
    let out = run_rigrun(dir.path(), &resume);
    assert!(out.status.success(), "{:?}", text(&out));
    let all = records(&run_dir);
    let measured: Vec<&Value> = all.iter().filter(|r| r["status"] == "ok").collect();
    let mut rates: Vec<String> = measured
        .iter()
        .map(|r| r["point"]["request_rate"].to_string())
        .collect();
    let probes = rates.len();
    rates.sort();
    rates.dedup();
    assert_eq!(rates.len(), probes, "no probe measured twice: {measured:?}");
    for kept in ["0.5", "1", "2", "4"] {
        assert!(rates.contains(&kept.to_string()), "{rates:?}");
    }
    let found = search_details(&run_dir, "sim");
    assert_eq!(
        (found["met"].as_f64(), found["missed"].as_f64()),
        (Some(4.0), Some(4.5)),
        "{found}"
    );
    assert_eq!(found["probes"].as_u64(), Some(probes as u64), "{found}");
    // Every probe's verdict is its own printed TTFT against the limit.
    for probe in found["probed"].as_array().unwrap() {
        let rate: f64 = probe["point"].as_str().unwrap()["request_rate=".len()..]
            .parse()
            .unwrap();
        assert_eq!(probe["met"], rate * 100.0 <= 420.0, "{probe}");
    }
    // The headline is the search's, in the searched axis; no capacity by concurrency.
    let shown = text(&run_rigrun(dir.path(), &["show", run_dir.to_str().unwrap()])).0;
    assert!(
        shown.contains(
            "within SLO (p99_ttft_ms ≤ 420), by a search of request_rate: sim: request_rate=4 (4.5 did not;"
        ),
        "{shown}"
    );
    assert!(!shown.contains("concurrency="), "{shown}");
}

#[test]
fn a_failed_probe_ends_a_search_that_stops_on_failure_and_is_a_miss_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    one_local_host(dir.path());
    // Candidates 0.5 to 10 by 0.5; from 4 req/s on the command fails.
    let playbook = |stop: bool| {
        format!(
            "name: fails\nslo: {{p99_ttft_ms: 420}}\nsteps:\n  - run-sweep:\n      \
             stop_on_failure: {stop}\n      \
             search: {{axis: request_rate, from: 0.5, to: 10, step: 0.5}}\n      \
             command: \"{{% if request_rate >= 4 %}}exit 3; {{% endif %}}echo '{{\\\"p99_ttft_ms\\\": 1}}'\"\n"
        )
    };
    for stop in [true, false] {
        std::fs::write(dir.path().join("fails.yaml"), playbook(stop)).unwrap();
        let runs = dir.path().join(format!("runs-{stop}"));
        let runs_arg = runs.display().to_string();
        let out = run_rigrun(dir.path(), &["run", "fails.yaml", "--runs-dir", &runs_arg, "-q"]);
        assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
        let run_dir = std::fs::read_dir(&runs).unwrap().next().unwrap().unwrap().path();
        let with = |status: &str| -> Vec<String> {
            let all = records(&run_dir);
            let of = all.iter().filter(|r| r["status"] == status);
            of.map(|r| r["point"]["request_rate"].to_string()).collect()
        };
        if stop {
            // Galloping 0.5, 1, 2, 4: the failure at 4 ends the search, nothing else recorded.
            assert_eq!(with("ok"), ["0.5", "1", "2"], "{:?}", text(&out));
            assert_eq!(with("failed"), ["4"], "{:?}", text(&out));
            assert!(with("skipped").is_empty(), "{:?}", with("skipped"));
        } else {
            // The failure is a miss: the search bisects between 2 and 4 and ends at 3.5.
            assert_eq!(with("ok"), ["0.5", "1", "2", "3", "3.5"], "{:?}", text(&out));
            assert_eq!(with("failed"), ["4"], "{:?}", text(&out));
            assert_eq!(with("skipped").len(), 20 - 6, "{:?}", with("skipped"));
            let found = search_details(&run_dir, "sim");
            assert_eq!(
                (found["met"].as_f64(), found["missed"].as_f64()),
                (Some(3.5), Some(4.0))
            );
        }
    }
}

#[test]
fn each_server_variant_gets_a_search_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    one_local_host(dir.path());
    // The tiny sim serves each variant; the measurement is known: a p99 TTFT of 100 ms per
    // req/s offered under k=1 and 200 ms under k=2, so under 420 ms: 4 req/s and 2 req/s.
    let playbook = format!(
        "name: variants\nslo: {{p99_ttft_ms: 420}}\nserver:\n  \
         command: \"{{{{ rigrun }}}} sim --profile tiny --port {port}\"\n  \
         url: \"http://127.0.0.1:{port}\"\n  variants: {{k: [1, 2, broken]}}\n  \
         args: {{k=broken: [--no-such-flag]}}\nsteps:\n  - run-sweep:\n      \
         search: {{axis: request_rate, from: 0.5, to: 10, step: 0.5}}\n      \
         command: \"echo '{{\\\"p99_ttft_ms\\\": {{{{ request_rate * 100 * (2 if k == 2 else 1) }}}}}}'\"\n",
        port = free_port()
    );
    std::fs::write(dir.path().join("variants.yaml"), playbook).unwrap();
    let out = run_rigrun(dir.path(), &["run", "variants.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the broken variant fails: {:?}",
        text(&out)
    );
    let run_dir = only_run_dir(&dir.path().join("runs"));
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let found = |variant: &str| -> Value {
        let finished = events
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| {
                e["event"] == "step_finished" && e["variant"] == variant && e["details"]["search"].is_array()
            });
        finished.unwrap_or_else(|| panic!("{variant}: no search"))["details"]["search"][0].clone()
    };
    let all = records(&run_dir);
    for (variant, k, slope, met, missed) in [("k=1", 1, 100.0, 4.0, 4.5), ("k=2", 2, 200.0, 2.0, 2.5)] {
        let found = found(variant);
        assert_eq!(
            (found["met"].as_f64(), found["missed"].as_f64()),
            (Some(met), Some(missed)),
            "{found}"
        );
        for probe in found["probed"].as_array().unwrap() {
            let rate: f64 = probe["point"].as_str().unwrap()["request_rate=".len()..]
                .parse()
                .unwrap();
            assert_eq!(probe["met"], rate * slope <= 420.0, "{variant}: {probe}");
        }
        // Each variant's own probes measured once, the rest of its candidates not probed.
        let of_variant: Vec<&Value> = all
            .iter()
            .filter(|r| r["variant"]["k"] == k && r["step"] == "run-sweep")
            .collect();
        let measured = of_variant.iter().filter(|r| r["status"] == "ok").count();
        assert_eq!(
            measured as u64,
            found["probes"].as_u64().unwrap(),
            "{of_variant:?}"
        );
        assert_eq!(
            of_variant.len(),
            20,
            "every candidate recorded once: {of_variant:?}"
        );
    }
    // A variant whose server did not start: its search's first probe failed, and the rest of
    // its candidates are not probed (not 20 failed points).
    let broken: Vec<&Value> = all
        .iter()
        .filter(|r| r["variant"]["k"] == "broken" && r["step"] == "run-sweep")
        .collect();
    let with = |status: &str| broken.iter().filter(|r| r["status"] == status).count();
    assert_eq!(
        (with("failed"), with("skipped"), broken.len()),
        (1, 19, 20),
        "{broken:?}"
    );
    assert_eq!(broken[0]["point"]["request_rate"], 0.5, "{broken:?}");
    for skipped in broken.iter().filter(|r| r["status"] == "skipped") {
        assert!(
            skipped["reason"].as_str().unwrap().starts_with("not probed: "),
            "{skipped}"
        );
    }
    let shown = text(&run_rigrun(dir.path(), &["show", run_dir.to_str().unwrap()])).0;
    let headline = shown
        .lines()
        .find(|l| l.contains("by a search of request_rate"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        headline.contains("sim/k=1: request_rate=4 (4.5 did not;"),
        "{headline}"
    );
    assert!(
        headline.contains("sim/k=2: request_rate=2 (2.5 did not;"),
        "{headline}"
    );
}

#[test]
fn a_probe_redone_after_a_failure_leads_the_search_on_and_measures_what_it_had_not_probed() {
    let dir = tempfile::tempdir().unwrap();
    one_local_host(dir.path());
    // p99 TTFT of 100 ms per req/s offered: under 420 ms the capacity is 4 req/s. The probe at
    // 2 req/s fails until `fixed` exists.
    let fixed = dir.path().join("fixed");
    let playbook = format!(
        "name: flaky\nslo: {{p99_ttft_ms: 420}}\nsteps:\n  - run-sweep:\n      \
         search: {{axis: request_rate, from: 0.5, to: 10, step: 0.5}}\n      \
         command: \"{{% if request_rate == 2 %}}[ -e {} ] || exit 3; {{% endif %}}echo \
         '{{\\\"p99_ttft_ms\\\": {{{{ request_rate * 100 }}}}}}'\"\n",
        fixed.display()
    );
    std::fs::write(dir.path().join("flaky.yaml"), playbook).unwrap();
    let out = run_rigrun(dir.path(), &["run", "flaky.yaml", "--runs-dir", "runs", "-q"]);
    assert_eq!(out.status.code(), Some(1), "{:?}", text(&out));
    let run_dir = only_run_dir(&dir.path().join("runs"));
    let found = search_details(&run_dir, "sim");
    // The failure at 2 was a miss: 1.5 met the limits, 2 did not.
    assert_eq!(
        (found["met"].as_f64(), found["missed"].as_f64()),
        (Some(1.5), Some(2.0)),
        "{found}"
    );

    std::fs::write(&fixed, "").unwrap();
    let resume = [
        "run",
        "--resume",
        run_dir.to_str().unwrap(),
        "--redo-failed",
        "-q",
    ];
    let out = run_rigrun(dir.path(), &resume);
    assert!(out.status.success(), "{:?}", text(&out));
    // The search now goes past 2, measuring the candidates it had not probed before.
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let found = events
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "step_finished" && e["details"]["search"].is_array())
        .unwrap()["details"]["search"][0]
        .clone();
    assert_eq!(
        (found["met"].as_f64(), found["missed"].as_f64()),
        (Some(4.0), Some(4.5)),
        "{found}"
    );
    for probe in found["probed"].as_array().unwrap() {
        let rate: f64 = probe["point"].as_str().unwrap()["request_rate=".len()..]
            .parse()
            .unwrap();
        assert_eq!(probe["met"], rate * 100.0 <= 420.0, "{probe}");
    }
    // Every candidate's latest record: a measurement, or skipped with the search's new words.
    let mut latest: std::collections::BTreeMap<String, Value> = Default::default();
    for record in records(&run_dir) {
        latest.insert(record["point"]["request_rate"].to_string(), record);
    }
    assert_eq!(latest.len(), 20, "{latest:?}");
    for (rate, record) in &latest {
        match record["status"].as_str() {
            Some("ok") => {}
            Some("skipped") => assert!(
                record["reason"]
                    .as_str()
                    .unwrap()
                    .contains("request_rate=4 met the limits, request_rate=4.5 did not"),
                "{rate}: {record}"
            ),
            _ => panic!("{rate}: {record}"),
        }
    }
    let shown = text(&run_rigrun(dir.path(), &["show", run_dir.to_str().unwrap()])).0;
    assert!(shown.contains("sim: request_rate=4 (4.5 did not;"), "{shown}");
}
