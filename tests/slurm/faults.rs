//! What happens to the allocation when the run does not end well: an interrupt gives it back
//! (a resume asks for a new one and says so); a SIGKILLed rigrun leaves it only until its lease
//! runs out, and a resume before then re-attaches to it; a node drained mid-point finishes what
//! runs; a node that fails mid-point, or the allocation's time limit reached mid-point, loses
//! the point, which a resume runs again.

use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::common::{sh, text, wait_for};
use crate::resume_support::{event_within, latest_records, spawn, waiting_sweep};
use crate::{allocation_of, login_node, notices, Cluster};

/// Starts the waiting sweep (points 2 to 4 wait for `go`) on both hosts into `runs`, and returns
/// rigrun and its run directory once point n=2 runs on the Slurm host; when it does not within
/// 120 s (sbatch, the queue and the node's facts included), fails with what rigrun and Slurm said.
fn start_waiting(dir: &Path, cluster: &Cluster, runs: &str) -> (Child, std::path::PathBuf) {
    let go = dir.join("go");
    let _ = std::fs::remove_file(&go);
    std::fs::write(dir.join("waits.yaml"), waiting_sweep(&go)).unwrap();
    let mut child = spawn(
        dir,
        &["run", "waits.yaml", "-i", "hosts.yaml", "--runs-dir", runs, "-q"],
    );
    let started = event_within(&dir.join(runs), Duration::from_secs(120), |e| {
        e["event"] == "point_started" && e["point"] == "n=2" && e["host"] == "cluster"
    });
    let Some(run_dir) = started else {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "point n=2 did not start on the Slurm host within 120 s\nrigrun said:\n{}\n{}",
            text(&out).1,
            cluster.diagnosis()
        );
    };
    (child, run_dir)
}

/// `rigrun run --resume run_dir` to its end: every point of both hosts ok in its latest attempt.
fn resume_to_the_end(dir: &Path, run_dir: &Path) {
    std::fs::write(dir.join("go"), "").unwrap();
    let out = crate::common::run_rigrun(dir, &["run", "--resume", run_dir.to_str().unwrap(), "-q"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let latest = latest_records(run_dir);
    let ran: Vec<_> = latest.iter().filter(|r| r["point"]["n"] != 5).collect();
    assert_eq!(ran.len(), 8, "{latest:#?}");
    assert!(ran.iter().all(|r| r["status"] == "ok"), "{latest:#?}");
}

/// Waits (up to `within`) for point n=2 on the Slurm host to end, lets the SSH host finish, and
/// returns why the point was lost, once rigrun has said the run failed and the point is lost.
fn lost_point(dir: &Path, child: Child, run_dir: &Path, within: Duration) -> String {
    wait_for(within, "point n=2 to end on the Slurm host", || {
        crate::common::events(run_dir)
            .iter()
            .any(|e| e["event"] == "point_finished" && e["point"] == "n=2" && e["host"] == "cluster")
    });
    std::fs::write(dir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    let lost = latest_records(run_dir)
        .into_iter()
        .find(|r| r["host"] == "cluster" && r["point"]["n"] == 2)
        .unwrap();
    assert_eq!(lost["status"], "lost", "{lost}");
    lost["reason"].as_str().unwrap().to_string()
}

fn job_of(run_dir: &Path) -> String {
    allocation_of(run_dir)["job_id"].as_str().unwrap().to_string()
}

#[test]
fn an_interrupt_gives_the_allocation_back_and_a_resume_asks_for_a_new_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["", ""]);
    let (child, run_dir) = start_waiting(dir, &cluster, "runs");
    let job = job_of(&run_dir);
    assert_eq!(cluster.live_jobs(), vec![job.clone()]);
    sh("kill", &["-INT", &child.id().to_string()]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out).1);
    // Given back before rigrun exited: nothing to wait for.
    assert_eq!(
        cluster.live_jobs(),
        Vec::<String>::new(),
        "job {job} is {}",
        cluster.state_of(&job)
    );

    resume_to_the_end(dir, &run_dir);
    let again = job_of(&run_dir);
    assert_ne!(again, job);
    let said = notices(&run_dir, "cluster");
    let new_one = format!("the run's earlier Slurm job {job} is gone; Slurm job {again} runs on node");
    assert!(said.iter().any(|n| n.starts_with(&new_one)), "{said:?}");
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}

/// SIGKILL leaves rigrun no chance to cancel: the guard on the login node does, once the lease
/// (5 s here) runs out. Killed again with a longer lease and resumed at once, the run finds its
/// allocation still there and re-attaches to it and to the point that was running.
#[test]
fn a_killed_rigrun_leaves_no_allocation_past_its_lease_and_a_resume_reattaches() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["    lease: 5s\n", ""]);
    let (mut child, run_dir) = start_waiting(dir, &cluster, "runs-lease");
    let job = job_of(&run_dir);
    sh("kill", &["-KILL", &child.id().to_string()]);
    child.wait().unwrap();
    assert_eq!(
        cluster.live_jobs(),
        vec![job.clone()],
        "the kill itself cancels nothing"
    );
    cluster.wait_no_live_jobs(Duration::from_secs(60), "the guard to cancel the allocation");
    // Its node cleaned up too, so that the next request does not wait behind it.
    wait_for(Duration::from_secs(60), "the cancelled job to complete", || {
        cluster.state_of(&job) != "COMPLETING"
    });

    let inventory = std::fs::read_to_string(dir.join("hosts.yaml")).unwrap();
    std::fs::write(
        dir.join("hosts.yaml"),
        inventory.replace("lease: 5s", "lease: 60s"),
    )
    .unwrap();
    let (mut child, run_dir) = start_waiting(dir, &cluster, "runs-reattach");
    let job = job_of(&run_dir);
    sh("kill", &["-KILL", &child.id().to_string()]);
    child.wait().unwrap();
    resume_to_the_end(dir, &run_dir);
    assert_eq!(job_of(&run_dir), job, "the same allocation");
    let said = notices(&run_dir, "cluster");
    let again = format!(
        "re-attached to the run's Slurm job {job} on node {}",
        cluster.node
    );
    assert!(said.iter().any(|n| n.starts_with(&again)), "{said:?}");
    let twice = latest_records(&run_dir)
        .into_iter()
        .filter(|r| r["attempt"] != 1)
        .count();
    assert_eq!(twice, 0, "the running point was re-attached, not run again");
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}

/// Drained, the node takes no new job but keeps the allocation it has: the run goes on to its
/// end. Down (failed), it takes the allocation with it: `srun` says 0, and rigrun says the
/// point is lost, in Slurm's words; Slurm's requeued holder is cancelled; a resume once the node
/// is back runs the point again in a new allocation.
#[test]
fn a_node_drained_mid_point_finishes_and_a_failed_one_loses_the_point_until_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let _sshd = login_node(dir, &cluster, "{time: 10m}", ["", ""]);

    let (child, run_dir) = start_waiting(dir, &cluster, "runs-drain");
    cluster.set_node("drain");
    std::fs::write(dir.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    let latest = latest_records(&run_dir);
    assert!(
        latest.iter().all(|r| r["status"] == "ok" || r["point"]["n"] == 5),
        "{latest:#?}"
    );
    cluster.set_node("resume");

    let (child, run_dir) = start_waiting(dir, &cluster, "runs-down");
    let job = job_of(&run_dir);
    cluster.set_node("down");
    let reason = lost_point(dir, child, &run_dir, Duration::from_secs(60));
    assert!(
        reason.contains(&format!("Slurm job {job}"))
            && (reason.contains(&format!("node {} failed", cluster.node))
                || reason.contains("its node failed")),
        "{reason}"
    );
    assert_eq!(
        cluster.live_jobs(),
        Vec::<String>::new(),
        "the requeued holder is cancelled"
    );

    cluster.set_node("resume");
    wait_for(Duration::from_secs(30), "the node to be idle again", || {
        cluster.node_state() == "idle"
    });
    resume_to_the_end(dir, &run_dir);
    assert_ne!(job_of(&run_dir), job);
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}

/// Slurm's shortest limit is a minute: point n=2 waits past it, Slurm ends the allocation, and
/// the point is lost (not failed) with the cause in words; a resume asks for a new allocation
/// and runs it again.
#[test]
fn the_time_limit_reached_mid_point_loses_the_point_until_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let cluster = Cluster::start(dir);
    let _sshd = login_node(dir, &cluster, "{time: 1m}", ["", ""]);
    let (child, run_dir) = start_waiting(dir, &cluster, "runs");
    let job = job_of(&run_dir);
    let reason = lost_point(dir, child, &run_dir, Duration::from_secs(300));
    assert!(
        reason.contains(&format!("Slurm job {job}")) && reason.contains("its time limit was reached"),
        "{reason}"
    );
    assert_eq!(cluster.state_of(&job), "TIMEOUT");

    resume_to_the_end(dir, &run_dir);
    assert_ne!(job_of(&run_dir), job);
    assert_eq!(cluster.live_jobs(), Vec::<String>::new());
}
