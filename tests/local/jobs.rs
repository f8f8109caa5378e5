//! Detached jobs on this machine, each scenario with both ways a host starts them: job.sh, and
//! rigrun itself (`rigrun job-run`, where the host has rigrun's copy). The same guarantees, on
//! real processes and files; the transport's side is the library's, the host's side job.sh or
//! this build's binary.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rigrun::config::{HostSpec, KnownHostsPolicy};
use rigrun::testutil::wait_until_gone;
use rigrun::transport::{line_text, Job, JobEnd, Output, Stream, Transport};

use crate::common::wait_for;

const RIGRUN: &str = env!("CARGO_BIN_EXE_rigrun");
const JOB_SH: &str = include_str!("../../src/transport/job.sh");

/// `rigrun job-run`, its arguments still to add.
fn job_runner() -> Command {
    let mut command = Command::new(RIGRUN);
    command.arg("job-run");
    command
}

/// Who starts a job on the host.
#[derive(Debug, Clone, Copy)]
enum Starter {
    JobSh,
    Rigrun,
}

const STARTERS: [Starter; 2] = [Starter::JobSh, Starter::Rigrun];

impl Starter {
    /// What the host runs to start a job, its arguments still to add.
    fn command(self) -> Command {
        match self {
            Starter::JobSh => {
                let mut command = Command::new("/bin/sh");
                command.args(["-c", JOB_SH, "rigrun"]);
                command
            }
            Starter::Rigrun => job_runner(),
        }
    }
}

/// A local transport whose jobs live in `dir/jobs` and are started by `starter`.
async fn local(dir: &Path, starter: Starter) -> Arc<Transport> {
    let spec: HostSpec = serde_json::from_value(serde_json::json!({"connection": "local"})).unwrap();
    let transport = Arc::new(
        Transport::connect("here", &spec, KnownHostsPolicy::Strict, dir)
            .await
            .unwrap(),
    );
    transport.start_jobs(&dir.join("jobs").display().to_string());
    if let Starter::Rigrun = starter {
        transport.use_job_runner(RIGRUN);
    }
    transport
}

/// Runs `command` as job `name`: what it printed per stream, and how it ended.
async fn run(
    transport: &Transport,
    name: &str,
    command: &str,
    timeout: Option<Duration>,
) -> (Vec<String>, Vec<String>, anyhow::Result<JobEnd>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let job = Job {
        name,
        command,
        timeout,
    };
    let mut on_output = |stream: Stream, output: Output<'_>| {
        if let Output::Line(line) = output {
            let line = line_text(line).into_owned();
            match stream {
                Stream::Stdout => out.push(line),
                Stream::Stderr => err.push(line),
            }
        }
    };
    let end = transport.run_job(&job, &mut on_output, &mut |_| {}).await;
    (out, err, end)
}

/// How many watchdogs (`sh -c <watch> rigrun <jobs> ...`) watch `jobs`.
fn watchdogs(jobs: &Path) -> usize {
    let processes = std::fs::read_dir("/proc").unwrap().flatten();
    processes
        .filter(|p| {
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            let args: Vec<_> = cmdline.split(|b| *b == 0).map(String::from_utf8_lossy).collect();
            // job.sh's: `sh -c <watch> rigrun <jobs>`; rigrun job-run's: a process named so,
            // in the jobs folder.
            let of_job_sh = args.len() > 4
                && args[2].contains("watchdog.pid")
                && args[3] == "rigrun"
                && args[4] == jobs.display().to_string();
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            let native = comm.trim() == "rigrun-watchdog"
                && std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd == jobs);
            of_job_sh || native
        })
        .count()
}

fn kept(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join("jobs").join(file)).unwrap_or_default()
}

#[tokio::test]
async fn a_job_hands_on_its_output_and_exit_code_and_keeps_them_on_the_host() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path(), starter).await;
        let command = "echo one; echo two >&2; printf 'no newline'; exit 3";
        let (out, err, end) = run(&transport, "j1", command, None).await;
        assert_eq!(end.unwrap(), JobEnd::Exited(3), "{starter:?}");
        assert_eq!(
            (out, err),
            (vec!["one".into(), "no newline".into()], vec!["two".to_string()])
        );
        assert_eq!(kept(dir.path(), "j1.out"), "one\nno newline");
        assert_eq!(kept(dir.path(), "j1.err"), "two\n");
        assert_eq!(kept(dir.path(), "j1.rc"), "3\n");
        // The job's own session: its pid file names the group the command ran in.
        let pid = kept(dir.path(), "j1.pid");
        assert!(pid.trim().parse::<u32>().is_ok(), "{pid:?}");
        // A command killed by a signal ends as `sh` says it: 128 + the signal.
        let (_, _, end) = run(&transport, "j1b", "sh -c 'kill -KILL $$'", None).await;
        assert_eq!(end.unwrap(), JobEnd::Exited(137), "{starter:?}");
    }
}

#[tokio::test]
async fn the_run_starts_one_watchdog_on_its_lease() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path(), starter).await;
        for name in ["w1", "w2", "w3"] {
            assert_eq!(
                run(&transport, name, "true", None).await.2.unwrap(),
                JobEnd::Exited(0)
            );
        }
        let watchdog = kept(dir.path(), "watchdog.pid");
        assert!(
            !watchdog.trim().is_empty(),
            "{starter:?}: no watchdog was started"
        );
        assert_eq!(
            watchdogs(&dir.path().join("jobs")),
            1,
            "{starter:?}: one watchdog per run, not per job"
        );
        transport.close().await;
        assert!(
            wait_until_gone(watchdog.trim()),
            "{starter:?}: the watchdog outlived close"
        );
    }
}

#[tokio::test]
async fn past_its_timeout_a_job_is_stopped_with_its_children() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path(), starter).await;
        let pid_file = dir.path().join("child");
        let command = format!("sleep 300 & echo $! > {}; echo started; wait", pid_file.display());
        let (out, _, end) = run(&transport, "j2", &command, Some(Duration::from_millis(500))).await;
        assert_eq!(end.unwrap(), JobEnd::TimedOut, "{starter:?}");
        assert_eq!(out, ["started"]);
        let child = std::fs::read_to_string(&pid_file).unwrap();
        assert!(
            wait_until_gone(child.trim()),
            "{starter:?}: the job's child outlived its timeout"
        );
        assert_eq!(kept(dir.path(), "j2.stopped"), "timeout\n");
        assert_eq!(kept(dir.path(), "j2.rc"), "", "a stopped job has no exit status");
    }
}

#[tokio::test]
async fn a_dropped_follower_stops_its_job() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path(), starter).await;
        let pid_file = dir.path().join("child");
        let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let following = run(&transport, "j3", &command, None);
        let appeared = async {
            while !pid_file.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            _ = following => panic!("the job ended by itself"),
            () = appeared => {}
        }
        let child = std::fs::read_to_string(&pid_file).unwrap();
        assert!(
            wait_until_gone(child.trim()),
            "{starter:?}: the job outlived its dropped follower"
        );
        assert_eq!(kept(dir.path(), "j3.stopped"), "interrupted\n");
    }
}

#[tokio::test]
async fn a_job_that_exists_is_attached_to_not_started_again() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let transport = local(dir.path(), starter).await;
        let counter = dir.path().join("starts");
        let command = format!("echo x >> {}; echo done", counter.display());
        let (first, _, _) = run(&transport, "j4", &command, None).await;
        let (again, _, end) = run(&transport, "j4", &command, None).await;
        assert_eq!(end.unwrap(), JobEnd::Exited(0));
        assert_eq!(
            (first, again),
            (vec!["done".to_string()], vec!["done".to_string()])
        );
        assert_eq!(
            std::fs::read_to_string(&counter).unwrap(),
            "x\n",
            "{starter:?}: started twice"
        );
    }
}

/// Over SSH the channel may go while the command runs (`keep`): its follower's stdin ends and
/// its output has no reader. The command goes on, its output lands in the job's files whole and
/// its exit status is kept, for a reconnected rigrun to attach to.
#[test]
fn a_job_outlives_its_channel_and_keeps_its_output_and_status() {
    for starter in STARTERS {
        outlives_its_channel(starter);
    }
}

fn outlives_its_channel(starter: Starter) {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs");
    let go = dir.path().join("go");
    // Waits for `go`, then prints more than a pipe holds: every write after the channel went
    // meets a closed pipe.
    let command = format!(
        "echo before; while [ ! -e {go} ]; do sleep 0.05; done; seq 1 100000; echo after >&2; exit 7",
        go = go.display()
    );
    let jobs_arg = jobs.display().to_string();
    let args = ["run", &jobs_arg, "j5", "M", "keep", "0", "0", &command, "60"];
    let mut runner = starter
        .command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = runner.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("before\n") {
        assert_eq!(stdout.read(&mut byte).unwrap(), 1, "the channel closed early");
        seen.push(byte[0]);
    }
    // The connection goes: stdin ends, nobody reads stdout or stderr any more.
    drop((runner.stdin.take(), stdout, runner.stderr.take()));
    std::fs::write(&go, "").unwrap();
    wait_for(Duration::from_secs(30), "the job's exit status", || {
        jobs.join("j5.rc").exists()
    });
    assert_eq!(kept(dir.path(), "j5.rc"), "7\n", "{starter:?}");
    let expected: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(kept(dir.path(), "j5.out"), format!("before\n{expected}"));
    assert_eq!(kept(dir.path(), "j5.err"), "after\n");
    // It ends too (how matters to no one: job.sh's shell dies of SIGPIPE at its end marker).
    runner.wait().unwrap();
}

/// The runner speaks a protocol that the facts' probe asks for; anything else it is given is
/// refused with what it is for.
#[test]
fn the_runner_says_its_protocol_and_refuses_other_arguments() {
    let out = Command::new(RIGRUN)
        .args(["job-run", "--protocol"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "rigrun-job-run 1\n");
    let out = Command::new(RIGRUN)
        .args(["job-run", "attach", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let watch = Command::new(RIGRUN)
        .args(["job-run", "watch", "x"])
        .output()
        .unwrap();
    assert_eq!(
        watch.status.code(),
        Some(2),
        "the watchdog needs its folder, lease and boot"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rigrun's own, run on a host"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// On a host whose `setsid` is missing (job.sh needs it to start the watchdog, and refuses
/// every action without it, so such a job could not be followed again) the runner says so, as
/// job.sh itself does, and runs nothing.
#[test]
fn without_setsid_for_the_watchdog_no_job_starts_and_the_cause_is_said() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs").display().to_string();
        let ran = dir.path().join("ran");
        let command = format!("touch {}", ran.display());
        let args = ["run", &jobs, "j7", "M", "keep", "0", "0", &command, "60"];
        let out = starter
            .command()
            .args(args)
            .env("PATH", "/nonexistent")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("M:end error setsid (util-linux) is not installed on the host"),
            "{starter:?}: {stderr}"
        );
        assert!(!ran.exists(), "{starter:?}: the command ran without a watchdog");
    }
}

/// Once nobody renews the lease (here: nobody follows the job, and no keeper runs), the run's
/// watchdog stops the job for it: its process group TERMed, `.stopped` saying `lease`, the end
/// marker saying so; and the watchdog is gone afterwards.
#[test]
fn a_lease_not_renewed_has_the_watchdog_stop_the_job() {
    for starter in STARTERS {
        let dir = tempfile::tempdir().unwrap();
        let jobs = dir.path().join("jobs");
        let child = dir.path().join("child");
        // Were the lease not kept, the job would end by itself a minute later, not stopped.
        let command = format!("sleep 60 & echo $! > {}; wait", child.display());
        let jobs_arg = jobs.display().to_string();
        // A lease of 1 s: the stdin at its end means "keep" (over SSH, perhaps a lost link).
        let args = ["run", &jobs_arg, "j8", "M", "keep", "0", "0", &command, "1"];
        let out = starter
            .command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("M:end stopped lease"), "{starter:?}: {stderr}");
        assert_eq!(kept(dir.path(), "j8.stopped"), "lease\n", "{starter:?}");
        let child = std::fs::read_to_string(&child).unwrap();
        assert!(
            wait_until_gone(child.trim()),
            "{starter:?}: the job's child outlived the lease"
        );
        wait_for(Duration::from_secs(10), "the watchdog to end", || {
            watchdogs(&jobs) == 0
        });
        assert!(
            !jobs.join("watchdog.pid").exists(),
            "{starter:?}: the watchdog left its pid file"
        );
    }
}
