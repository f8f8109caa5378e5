//! The server a sweep measures dies during a point on an SSH host (the sim rigrun started
//! there, killed by its pid): the point fails with the cause at once; with `restarts: 0` the
//! server is not started again and the rest of the sweep is not run, with the reason; a resume
//! starts the server anew and runs what is left.

use crate::common::{manifest, records, run_rigrun, text};
use crate::resume::loopback_host;
use crate::server_support::{kill_sim, latest, run_and_kill, sims_at, started_server_playbook};

#[test]
fn a_server_that_dies_and_may_not_restart_leaves_the_rest_not_run_until_a_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let _sshd = loopback_host(dir);
    let port = crate::common::free_port();
    let playbook = started_server_playbook(dir, port, 0, 0);
    let (out, run_dir) = run_and_kill(dir, &playbook, || kill_sim(port));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let died = latest(&records(&run_dir), 2);
    let reason = died["reason"].as_str().unwrap();
    assert!(
        reason.contains("the server exited (killed by signal 9"),
        "{reason}"
    );
    assert!(reason.contains("it may be restarted 0 time(s)"), "{reason}");
    assert!(records(&run_dir).iter().all(|r| r["point"]["n"] != 3));
    let crash = &manifest(&run_dir)["hosts"]["a"]["server_crashes"][0];
    assert_eq!(crash["recovered"], false, "{crash:#}");
    let shown = run_rigrun(dir, &["show", run_dir.to_str().unwrap()]);
    let (shown, _) = text(&shown);
    assert!(
        shown.contains("] not run: the server died during n=2 and did not come back"),
        "{shown}"
    );

    let run_arg = run_dir.to_str().unwrap();
    let resumed = run_rigrun(dir, &["run", "--resume", run_arg, "--redo-failed", "-q"]);
    let (stdout, stderr) = text(&resumed);
    assert_eq!(resumed.status.code(), Some(0), "{stdout}\n{stderr}");
    let records = records(&run_dir);
    for n in [1, 2, 3] {
        assert_eq!(latest(&records, n)["status"], "ok", "n={n}: {records:#?}");
    }
    assert_eq!(
        sims_at(port),
        Vec::<String>::new(),
        "the server stopped with the host"
    );
}
