//! The server a sweep measures dies during a point (killed by its pid once the point has
//! started, as the kernel's OOM killer or a crash would): the point ends at once, failed with
//! the cause, and the sweep goes on against a server started again (rigrun started it) or one
//! that answers again (it did not) — or its remaining points are not run, with the reason.

use std::path::Path;

use crate::common::*;
use crate::resume_support::wait_for_event;
use crate::server_support::{kill_sim, latest, run_and_kill, sims_at, started_server_playbook, sweep};
use crate::sim_support::Sim;

#[test]
fn a_server_rigrun_started_that_dies_mid_point_fails_that_point_and_is_started_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = free_port();
    one_local_host(dir, "", "");
    let playbook = started_server_playbook(dir, port, 1, 0);
    let (out, run_dir) = run_and_kill(dir, &playbook, || kill_sim(port));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "n=2 failed\n{stdout}\n{stderr}");
    let records = records(&run_dir);
    let died = latest(&records, 2);
    let reason = died["reason"].as_str().unwrap_or_default();
    assert_eq!(died["status"], "failed", "{died:#}");
    assert!(
        reason.contains("the server died during the point: the server exited (killed by signal 9"),
        "the cause, not the point's timeout: {reason}"
    );
    assert!(
        reason.contains("started again (restart 1 of 1), ready in"),
        "{reason}"
    );
    for n in [1, 3] {
        assert_eq!(
            latest(&records, n)["status"],
            "ok",
            "n={n} against the server started again"
        );
    }
    let crash = &manifest(&run_dir)["hosts"]["h"]["server_crashes"][0];
    assert_eq!(crash["recovered"], true, "{crash:#}");
    assert!(crash["ready_seconds"].as_f64().unwrap() > 0.0, "{crash:#}");
    assert!(
        stderr.contains("run-sweep n=2: the server died (the server exited (killed by signal 9"),
        "{stderr}"
    );
    // The restarted server answers, and was stopped with the host: nothing listens any more.
    assert_eq!(sims_at(port), Vec::<String>::new());
    let shown = run_rigrun(dir, &["show", run_dir.to_str().unwrap()]);
    let (shown, _) = text(&shown);
    assert!(
        shown.contains("on h the server died during run-sweep n=2"),
        "{shown}"
    );
}

#[test]
fn a_crashed_point_is_retried_against_the_restarted_server_when_the_sweep_says_retries() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = free_port();
    one_local_host(dir, "", "");
    let playbook = started_server_playbook(dir, port, 2, 1);
    let (out, run_dir) = run_and_kill(dir, &playbook, || kill_sim(port));
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "every point ok in one run\n{stdout}\n{stderr}"
    );
    let records = records(&run_dir);
    let first = records
        .iter()
        .find(|r| r["point"]["n"] == 2 && r["attempt"] == 1)
        .unwrap();
    assert_eq!(first["status"], "failed", "{first:#}");
    assert!(
        first["reason"].as_str().unwrap().contains("retry 1 of 1"),
        "{first:#}"
    );
    assert_eq!(latest(&records, 2)["attempt"], 2);
    for n in [1, 2, 3] {
        assert_eq!(latest(&records, n)["status"], "ok", "n={n}");
    }
}

/// verify-server's playbook against a sim the test started, waiting `down_for` when it dies.
fn found_server_playbook(dir: &Path, url: &str, down_for: &str) -> String {
    format!(
        "name: found\nsteps:\n  - verify-server: {{url: \"{url}\", down_for: {down_for}}}\n{}",
        sweep(dir, 0)
    )
}

#[test]
fn a_server_rigrun_did_not_start_is_waited_for_then_the_rest_of_the_sweep_is_not_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_local_host(dir, "", "");
    let mut sim = Some(Sim::start("tiny", &[]));
    let url = sim.as_ref().unwrap().base.clone();
    let playbook = found_server_playbook(dir, &url, "2s");
    let (out, run_dir) = run_and_kill(dir, &playbook, || drop(sim.take()));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let records = records(&run_dir);
    let died = latest(&records, 2);
    let reason = died["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!(
            "the server died during the point: {url} stopped answering"
        )),
        "{reason}"
    );
    assert!(reason.contains("it did not answer again within 2s"), "{reason}");
    assert!(
        records.iter().all(|r| r["point"]["n"] != 3),
        "n=3 never ran: {records:#?}"
    );
    assert!(
        stderr.contains("waiting up to 2s for it to answer again"),
        "{stderr}"
    );
    let shown = run_rigrun(dir, &["show", run_dir.to_str().unwrap()]);
    let (shown, _) = text(&shown);
    let why =
        "] not run: the server died during n=2 and did not come back: it did not answer again within 2s";
    assert!(shown.contains(why), "the cell's note, said once: {shown}");
}

#[test]
fn a_server_rigrun_did_not_start_that_answers_again_within_down_for_lets_the_sweep_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    one_local_host(dir, "", "");
    let port = free_port();
    let port_text = port.to_string();
    let mut sim = Some(Sim::start_at("tiny", port));
    let url = sim.as_ref().unwrap().base.clone();
    let playbook = found_server_playbook(dir, &url, "2m");
    let mut again = None;
    let (out, run_dir) = run_and_kill(dir, &playbook, || {
        drop(sim.take());
        // Back on the same port once rigrun has seen it gone (it says it waits).
        wait_for_event(&dir.join("runs"), |e| {
            e["event"] == "notice"
                && e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("waiting up to 2m")
        });
        again = Some(Sim::start_at("tiny", port_text.parse().unwrap()));
    });
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "n=2 failed, the rest ok\n{stdout}\n{stderr}"
    );
    let records = records(&run_dir);
    let reason = latest(&records, 2)["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("stopped answering") && reason.contains("it answered again after"),
        "{reason}"
    );
    assert_eq!(latest(&records, 3)["status"], "ok", "{records:#?}");
    drop(again);
}

#[test]
fn a_variants_server_that_dies_is_started_again_and_stopped_with_its_variant() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = free_port();
    one_local_host(dir, "", "");
    let playbook = format!(
        "name: dies\nserver:\n  command: \"{{{{ rigrun }}}} sim --profile tiny --port {port}\"\n  \
         url: \"http://127.0.0.1:{port}\"\n  smoke: false\n  variants: {{v: [a, b]}}\nsteps:\n{}",
        sweep(dir, 0)
    );
    let (out, run_dir) = run_and_kill(dir, &playbook, || kill_sim(port));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let records = records(&run_dir);
    let of_variant = |v: &str| -> Vec<serde_json::Value> {
        let of = records.iter().filter(|r| r["variant"]["v"] == v);
        of.cloned().collect()
    };
    let died = latest(&of_variant("a"), 2);
    let reason = died["reason"].as_str().unwrap();
    assert!(
        reason.contains("the server exited (killed by signal 9"),
        "{reason}"
    );
    assert!(reason.contains("started again (restart 1 of 2)"), "{reason}");
    assert_eq!(latest(&of_variant("a"), 3)["status"], "ok");
    // Variant b's server started only once a's (restarted) server was stopped and gone.
    for n in [1, 2, 3] {
        assert_eq!(latest(&of_variant("b"), n)["status"], "ok", "b n={n}");
    }
    let crash = &manifest(&run_dir)["hosts"]["h"]["server_crashes"][0];
    assert_eq!(crash["variant"], "v=a", "{crash:#}");
    assert_eq!(sims_at(port), Vec::<String>::new());
}
