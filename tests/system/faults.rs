//! Faults real GPU hosts have, made with real processes on a host in its own network namespace:
//! the ControlMaster killed mid-point, sshd and its sessions killed and started again, the link
//! down for 90 s, a partition longer than the lease. Each test waits for what the run journals
//! (events.jsonl) or for what the host's process table shows, never for a fixed time, except
//! where the fault itself lasts a stated time (sshd down 15 s, the link down 90 s).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A sweep of four points whose command prints eight numbered lines half a second apart, then
/// its record. `TOKEN` names the test, so that each finds its own processes on the host.
const PLAYBOOK: &str = r#"
name: faults
steps:
  - run-sweep:
      name: sweep
      matrix: {n: [1, 2, 3, 4]}
      command: >-
        i=0; while [ $i -lt LINES ]; do i=$((i+1)); echo "TOKEN p{{ n }} line $i"; echo "err $i" >&2;
        sleep PAUSE; done; echo '{"n": {{ n }}, "lines": LINES}'
"#;

/// One host in a namespace of its own, with its sshd, and the run that rigrun makes on it.
struct Faulty {
    tmp: tempfile::TempDir,
    netns: Netns,
    sshd: Sshd,
    token: String,
}

impl Faulty {
    /// `host_extra` is added to the host's inventory entry (YAML, indented four spaces).
    fn new(token: &str, lines: u32, pause: &str, host_extra: &str) -> Faulty {
        // Quick to notice a dead link: ServerAlive every 2 s, 3 missed (the user's options win).
        let keepalive = "ServerAliveInterval: \"2\", ServerAliveCountMax: \"3\", ";
        Faulty::with_ssh_options(token, lines, pause, host_extra, keepalive)
    }

    /// As [`Faulty::new`], with `ssh_extra` (`Key: value, ` pairs) among the host's `ssh_options`.
    fn with_ssh_options(token: &str, lines: u32, pause: &str, host_extra: &str, ssh_extra: &str) -> Faulty {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let key = ClientKey::new(dir);
        let netns = Netns::new();
        let sshd = Sshd::start_in(dir, "gpu", &key, &netns);
        let known_hosts = dir.join("known_hosts");
        std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
        let extra = format!(
            "    ssh_options: {{UserKnownHostsFile: {}, GlobalKnownHostsFile: /dev/null, IdentitiesOnly: \"yes\", \
             {ssh_extra}ConnectTimeout: \"5\"}}\n{host_extra}",
            known_hosts.display()
        );
        let entry = sshd
            .inventory_entry("gpu", &key, &known_hosts, &dir.join("work"), "")
            .lines()
            .filter(|l| !l.contains("ssh_options"))
            .map(|l| format!("{l}\n"))
            .collect::<String>();
        std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{entry}{extra}")).unwrap();
        let playbook = PLAYBOOK
            .replace("TOKEN", token)
            .replace("LINES", &lines.to_string())
            .replace("PAUSE", pause);
        std::fs::write(dir.join("faults.yaml"), playbook).unwrap();
        Faulty {
            tmp,
            netns,
            sshd,
            token: token.to_string(),
        }
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// Starts `rigrun run` in the background; its output goes to files beside the run.
    fn start(&self) -> Child {
        self.spawn(&["run", "faults.yaml", "--runs-dir", "runs"])
    }

    /// Starts rigrun with `args` in the background, as [`Faulty::start`] does.
    fn spawn(&self, args: &[&str]) -> Child {
        let out = std::fs::File::create(self.dir().join("rigrun.out")).unwrap();
        let err = std::fs::File::create(self.dir().join("rigrun.err")).unwrap();
        // As a user would run it: stderr is a file, and colours are rigrun's to decide.
        rigrun()
            .env_remove("NO_COLOR")
            .current_dir(self.dir())
            .args(args)
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("cannot start rigrun")
    }

    /// Waits for rigrun to end; its exit code and what it printed on stderr.
    fn finish(&self, mut child: Child, within: Duration) -> (i32, String) {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let err = std::fs::read_to_string(self.dir().join("rigrun.err")).unwrap();
                return (status.code().unwrap_or(-1), err);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let err = std::fs::read_to_string(self.dir().join("rigrun.err")).unwrap_or_default();
                panic!("rigrun did not finish within {within:?}:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run_dir(&self) -> PathBuf {
        only_run_dir(&self.dir().join("runs"))
    }

    /// Waits until point `n`'s stdout log shows `line`: the point is running, output flowing.
    fn wait_for_line(&self, n: u32, line: u32, within: Duration) {
        let needle = format!("{} p{n} line {line}\n", self.token);
        wait_for(within, &format!("point {n} to print line {line}"), || {
            let runs = self.dir().join("runs");
            runs.exists() && point_log(&self.run_dir(), n, "stdout").is_some_and(|t| t.contains(&needle))
        });
    }

    /// Waits until the journal holds a notice (a connection lost or got back) containing `text`.
    fn wait_for_notice(&self, text: &str, within: Duration) {
        wait_for(within, &format!("a notice saying `{text}`"), || {
            events(&self.run_dir())
                .iter()
                .any(|e| e["event"] == "notice" && e["message"].as_str().unwrap_or("").contains(text))
        });
    }

    /// The ControlMaster rigrun started for the host (its command line names the address).
    fn master_pid(&self) -> String {
        let address = format!("-- {}", self.netns.ns_ip);
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let raw = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmd.starts_with("ssh ") && cmd.contains(" -M ") && cmd.trim_end().ends_with(&address) {
                found.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        assert_eq!(found.len(), 1, "expected one master for {address}: {found:?}");
        found.remove(0)
    }

    /// Waits until rigrun says it lost the connection while point 2 ran.
    fn wait_for_the_loss_of_point_2(&self, within: Duration) {
        self.wait_for_notice("sweep n=2: lost the connection while the command ran", within);
    }

    /// The host's processes that run this test's commands.
    fn commands_on_host(&self) -> Vec<(String, String)> {
        self.netns.processes(&format!("{} p", self.token))
    }

    /// Every point has exactly one ok record with its eight lines, and each point's log holds
    /// each of its lines exactly once, in order.
    fn assert_every_point_complete(&self, lines: u32) {
        let run_dir = self.run_dir();
        let recs = records(&run_dir);
        for n in 1..=4u32 {
            let mine: Vec<&Value> = recs.iter().filter(|r| r["point"]["n"] == n).collect();
            assert_eq!(mine.len(), 1, "point {n}: {mine:?}");
            assert_eq!(mine[0]["status"], "ok", "point {n}: {:?}", mine[0]);
            assert_eq!(mine[0]["metrics"]["lines"], lines);
            let log = point_log(&run_dir, n, "stdout").unwrap();
            let mut expected: String = (1..=lines)
                .map(|i| format!("{} p{n} line {i}\n", self.token))
                .collect();
            expected.push_str(&format!("{{\"n\": {n}, \"lines\": {lines}}}\n"));
            assert_eq!(log, expected, "point {n}'s stdout, line for line");
            let err: String = (1..=lines).map(|i| format!("err {i}\n")).collect();
            assert_eq!(
                point_log(&run_dir, n, "stderr").unwrap(),
                err,
                "point {n}'s stderr"
            );
        }
    }
}

impl Faulty {
    /// Point `n` has two records: its first attempt lost with a reason containing `why`, its
    /// second ok with its `lines`; returned for more checks.
    fn assert_lost_then_ok(&self, n: u32, why: &str, lines: u32) -> [Value; 2] {
        let recs = records(&self.run_dir());
        let mine: Vec<Value> = recs.into_iter().filter(|r| r["point"]["n"] == n).collect();
        let [lost, ok]: [Value; 2] = mine.try_into().expect("two attempts at the point");
        assert_eq!(
            (lost["attempt"].as_u64(), lost["status"].as_str()),
            (Some(1), Some("lost"))
        );
        let reason = lost["reason"].as_str().unwrap_or("");
        assert!(reason.contains(why), "{reason}");
        assert_eq!(
            (ok["attempt"].as_u64(), ok["status"].as_str()),
            (Some(2), Some("ok"))
        );
        assert_eq!(ok["metrics"]["lines"], lines);
        [lost, ok]
    }

    /// Each of `points` has one record: ok, at its first attempt.
    fn assert_ok_once(&self, points: &[u32]) {
        let recs = records(&self.run_dir());
        for n in points {
            let mine: Vec<&Value> = recs.iter().filter(|r| r["point"]["n"] == *n).collect();
            assert_eq!(mine.len(), 1, "point {n}: {mine:?}");
            let at = (mine[0]["status"].as_str(), mine[0]["attempt"].as_u64());
            assert_eq!(at, (Some("ok"), Some(1)), "point {n}");
        }
    }
}

/// The log of sweep point `n` (`001-n=1.stdout.log` under the host's step folder).
fn point_log(run_dir: &Path, n: u32, stream: &str) -> Option<String> {
    let name = format!("{n:03}-n={n}.{stream}.log");
    let hosts = run_dir.join("hosts").join("gpu");
    for step in std::fs::read_dir(hosts).ok()?.flatten() {
        if let Ok(text) = std::fs::read_to_string(step.path().join(&name)) {
            return Some(text);
        }
    }
    None
}

fn events(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn a_killed_control_master_is_replaced_and_the_point_goes_on_from_where_it_was() {
    let host = Faulty::new("fault-master", 8, "0.3", "");
    let run = host.start();
    host.wait_for_line(2, 3, Duration::from_secs(60));
    let master = host.master_pid();
    sh("kill", &["-9", &master]);
    let (code, err) = host.finish(run, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    host.wait_for_notice(
        "sweep n=2: lost the connection while the command ran",
        Duration::ZERO,
    );
    host.wait_for_notice("reconnected after", Duration::ZERO);
    // Said once, in words; no terminal colour codes in the file stderr went to.
    let said = |text: &str| err.lines().filter(|l| l.contains(text)).count();
    assert_eq!(said("lost the connection"), 1, "{err}");
    assert_eq!(said("reconnected after"), 1, "{err}");
    assert!(!err.contains('\u{1b}'), "ANSI codes in a file: {err:?}");
    host.assert_every_point_complete(8);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

#[test]
fn sshd_killed_with_its_sessions_and_back_15_s_later_loses_nothing() {
    let mut host = Faulty::new("fault-daemon", 8, "0.5", "");
    let run = host.start();
    host.wait_for_line(2, 2, Duration::from_secs(60));
    host.sshd.kill_with_sessions(&host.netns);
    host.wait_for_the_loss_of_point_2(Duration::from_secs(30));
    // The point's command lives on without its session.
    assert!(!host.commands_on_host().is_empty(), "the command died with sshd");
    // The fault itself: sshd stays down 15 s, as a restart after a crash would.
    std::thread::sleep(Duration::from_secs(15));
    host.sshd.start_again(&host.netns);
    let (code, err) = host.finish(run, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    host.assert_every_point_complete(8);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

#[test]
fn a_90_s_partition_is_waited_out_and_the_output_picked_up() {
    let host = Faulty::new("fault-link", 8, "0.5", "");
    let run = host.start();
    host.wait_for_line(2, 2, Duration::from_secs(60));
    host.netns.link(false);
    host.wait_for_the_loss_of_point_2(Duration::from_secs(60));
    // The fault itself: the link stays down 90 s; the point finishes on the host meanwhile.
    std::thread::sleep(Duration::from_secs(90));
    host.netns.link(true);
    let (code, err) = host.finish(run, Duration::from_secs(180));
    assert_eq!(code, 0, "{err}");
    host.assert_every_point_complete(8);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

#[test]
fn past_its_lease_a_partitioned_host_stops_the_command_by_itself() {
    let host = Faulty::new("fault-lease", 40, "0.5", "    lease: 10s\n");
    let run = host.start();
    host.wait_for_line(1, 2, Duration::from_secs(60));
    let cut = Instant::now();
    host.netns.link(false);
    wait_for(Duration::from_secs(60), "the host to stop the command", || {
        host.commands_on_host().is_empty()
    });
    // The lease runs from rigrun's last renewal, which came at most a quarter of it (2.5 s)
    // before the cut.
    let gone_after = cut.elapsed();
    assert!(
        gone_after >= Duration::from_millis(7500),
        "stopped {gone_after:?} after the cut, before the lease of 10 s ran out"
    );
    host.netns.link(true);
    let (code, err) = host.finish(run, Duration::from_secs(300));
    // The point the host stopped is lost, not failed: it runs once more, as attempt 2.
    assert_eq!(code, 0, "{err}");
    host.assert_lost_then_ok(1, "out of touch for longer than the lease (10s)", 40);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

/// The link down for good, the host with `reconnect_for: 10s` and rigrun's own keepalive (none
/// in its ssh_options): the host fails with the reason within reconnect_for of the cut, as the
/// journal times it (the bound is what is tested: a dead link noticed after a fixed 60 s, as
/// before, failed such a host 104 s after the cut); the lease then cleans up on the host.
#[test]
fn a_host_gone_longer_than_reconnect_for_fails_within_it_with_the_reason_and_its_lease_cleans_up() {
    let host = Faulty::with_ssh_options(
        "fault-gone",
        200,
        "0.5",
        "    reconnect_for: 10s\n    lease: 10s\n",
        "",
    );
    let run = host.start();
    host.wait_for_line(1, 2, Duration::from_secs(60));
    let cut = chrono::Utc::now();
    host.netns.link(false);
    let (code, err) = host.finish(run, Duration::from_secs(120));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("could not get it back"), "{err}");
    assert!(err.contains("rigrun run --resume"), "the way on is named: {err}");
    let failed_at = events(&host.run_dir())
        .iter()
        .find(|e| e["event"] == "host_finished")
        .and_then(|e| e["at"].as_str().map(String::from))
        .expect("the host's end is journaled");
    let failed_at: chrono::DateTime<chrono::Utc> = failed_at.parse().unwrap();
    let after = (failed_at - cut).to_std().unwrap();
    // 10 s, and a second for the timers of a loaded machine.
    assert!(
        after <= Duration::from_secs(11),
        "the host failed {after:?} after the cut, past reconnect_for (10s): {err}"
    );
    let manifest = manifest(&host.run_dir());
    assert_eq!(manifest["hosts"]["gpu"]["status"], "failed", "{manifest}");
    let recs = records(&host.run_dir());
    let lost: Vec<&Value> = recs.iter().filter(|r| r["status"] == "lost").collect();
    assert_eq!(lost.len(), 1, "the point cut short is lost, not failed: {recs:?}");
    assert!(recs.iter().all(|r| r["status"] != "failed"), "{recs:?}");
    // rigrun is gone and the link still down: the host stops the command once the lease is out.
    wait_for(Duration::from_secs(60), "the host to stop the command", || {
        host.commands_on_host().is_empty()
    });
    host.netns.link(true);
}

/// The jobs folder of the run on the host (`<workdir>/.rigrun/jobs/<run>-<key>/gpu`).
fn jobs_on_host(dir: &Path) -> PathBuf {
    let jobs = dir.join("work/.rigrun/jobs");
    let run = std::fs::read_dir(&jobs)
        .unwrap()
        .flatten()
        .next()
        .expect("a run's jobs folder");
    run.path().join("gpu")
}

/// The host loses power mid-point and boots again (a new boot id) within reconnect_for: the
/// point that ran is lost with the reboot as its reason and runs again at once; the reboot is
/// said once; what the dead job left in the workdir is not taken for its result.
#[test]
fn a_host_that_reboots_mid_point_loses_that_point_and_runs_it_again_at_once() {
    let mut host = Faulty::new("fault-reboot", 8, "0.5", "");
    let boot_before = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let boot_after = "0b5e55ed-1e55-4d1e-8a11-5ca1ab1e0001".to_string();
    let run = host.start();
    host.wait_for_line(2, 2, Duration::from_secs(60));
    host.sshd.power_off(&host.netns);
    host.wait_for_the_loss_of_point_2(Duration::from_secs(30));
    assert_eq!(
        host.commands_on_host(),
        [],
        "the point's command died with the host"
    );
    host.sshd.boot(&host.netns, &boot_after);
    let (code, err) = host.finish(run, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");

    // Every point ok exactly once; point 2's first attempt lost with the reboot, then ok.
    let run_dir = host.run_dir();
    host.assert_ok_once(&[1, 3, 4]);
    let why = "the host rebooted (boot id changed) while the command ran; runs again as attempt 2";
    let [lost, _] = host.assert_lost_then_ok(2, why, 8);
    assert_eq!(
        lost["metrics"],
        serde_json::json!({}),
        "the dead job's files read as a result"
    );
    // The lost attempt's log holds what it printed before the power went, and no record.
    let lost_log = point_log(&run_dir, 2, "stdout").unwrap();
    assert!(lost_log.contains("fault-reboot p2 line 2\n"), "{lost_log}");
    assert!(!lost_log.contains("\"lines\""), "{lost_log}");
    // Its files stay on the host, without an exit status: rigrun did not take it as ended.
    let jobs = jobs_on_host(host.dir());
    assert!(jobs.join("s01-p002-a1.out").exists());
    assert!(!jobs.join("s01-p002-a1.rc").exists());
    assert_eq!(
        std::fs::read_to_string(jobs.join("s01-p002-a1.boot")).unwrap(),
        boot_before
    );

    // The reboot, said once in words, with both boot ids; the facts keep the new one.
    let reboots: Vec<Value> = events(&run_dir)
        .into_iter()
        .filter(|e| e["event"] == "host_rebooted")
        .collect();
    assert_eq!(reboots.len(), 1, "{reboots:?}");
    assert_eq!(reboots[0]["boot_id_before"], boot_before.trim());
    assert_eq!(reboots[0]["boot_id"], boot_after);
    let said = "gpu rebooted (its boot id changed): the commands rigrun ran there died with it";
    assert!(
        reboots[0]["message"].as_str().unwrap().starts_with(said),
        "{reboots:?}"
    );
    assert_eq!(err.lines().filter(|l| l.contains(said)).count(), 1, "{err}");
    assert_eq!(manifest(&run_dir)["hosts"]["gpu"]["facts"]["boot_id"], boot_after);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

/// rigrun killed mid-point (SIGKILL: nothing journaled of the point's end), then the host loses
/// power and boots again; `--resume` says the reboot, finds the point's job gone with it (its
/// files still there) and runs the point again as its next attempt.
#[test]
fn a_resume_after_a_reboot_says_so_and_runs_the_points_that_were_running_again() {
    let mut host = Faulty::new("fault-reboot-resume", 8, "0.5", "");
    let boot_after = "0b5e55ed-1e55-4d1e-8a11-5ca1ab1e0002";
    let mut first = host.start();
    host.wait_for_line(2, 2, Duration::from_secs(60));
    first.kill().unwrap();
    first.wait().unwrap();
    host.sshd.power_off(&host.netns);
    host.sshd.boot(&host.netns, boot_after);
    let run_dir = host.run_dir();
    let resumed = host.spawn(&["run", "--resume", run_dir.to_str().unwrap()]);
    let (code, err) = host.finish(resumed, Duration::from_secs(120));
    assert_eq!(code, 0, "{err}");
    let said = "gpu rebooted since the run was last connected to it (its boot id changed)";
    assert_eq!(err.lines().filter(|l| l.contains(said)).count(), 1, "{err}");
    let reboots = events(&run_dir)
        .into_iter()
        .filter(|e| e["event"] == "host_rebooted")
        .count();
    assert_eq!(
        reboots, 1,
        "said once: the point's job found gone says it no more"
    );
    host.assert_ok_once(&[1, 3, 4]);
    host.assert_lost_then_ok(2, "the host rebooted (boot id changed) while the command ran", 8);
    assert_eq!(host.commands_on_host(), [], "commands left on the host");
}

/// As above, with a server rigrun started on the host (`start-server`, the sim): the reboot
/// takes the server with it; the point that ran is lost, not failed, the server is started
/// again once the host is back, and the sweep goes on to its end in the same run.
#[test]
fn a_reboot_takes_the_started_server_along_and_the_sweep_starts_it_again() {
    let mut host = Faulty::new("fault-reboot-server", 8, "0.5", "");
    let with_server = std::fs::read_to_string(host.dir().join("faults.yaml"))
        .unwrap()
        .replace(
        "steps:\n",
        "steps:\n  - start-server:\n      command: \"{{ rigrun }} sim --profile tiny --port 30000\"\n      \
         url: http://127.0.0.1:30000\n",
    );
    std::fs::write(host.dir().join("faults.yaml"), with_server).unwrap();
    let run = host.start();
    host.wait_for_line(2, 2, Duration::from_secs(60));
    host.sshd.power_off(&host.netns);
    host.wait_for_the_loss_of_point_2(Duration::from_secs(30));
    host.sshd
        .boot(&host.netns, "0b5e55ed-1e55-4d1e-8a11-5ca1ab1e0003");
    let (code, err) = host.finish(run, Duration::from_secs(180));
    assert_eq!(code, 0, "{err}");
    host.assert_ok_once(&[1, 3, 4]);
    host.assert_lost_then_ok(2, "the host rebooted", 8);
    let crashes = &manifest(&host.run_dir())["hosts"]["gpu"]["server_crashes"];
    assert_eq!(crashes.as_array().map(Vec::len), Some(1), "{crashes:#}");
    assert_eq!(crashes[0]["recovered"], true, "{crashes:#}");
    assert!(
        crashes[0]["cause"].as_str().unwrap().contains("rebooted"),
        "{crashes:#}"
    );
    assert_eq!(
        host.netns.processes("rigrun sim"),
        [],
        "the restarted server stopped with the host"
    );
}
