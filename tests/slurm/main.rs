//! Slurm hosts against a real Slurm: a one-node cluster on this machine (`cluster.sh`: munged,
//! slurmctld and slurmd, started and stopped by each test) and its login node reached over a real
//! sshd on loopback. The tests take the cluster in turn (it has one node).

#[path = "../common/mod.rs"]
mod common;
#[path = "../resume_support/mod.rs"]
mod resume_support;

mod allocation;
mod faults;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{events, wait_for, ClientKey, Sshd};

/// One test at a time has the cluster.
static CLUSTER: Mutex<()> = Mutex::new(());

/// A running one-node cluster; stopped when dropped.
pub struct Cluster {
    state: PathBuf,
    pub conf: PathBuf,
    /// This machine's short name: the node's name.
    pub node: String,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    pub fn start(dir: &Path) -> Cluster {
        Cluster::start_with(dir, &[])
    }

    /// A cluster whose node does not see `folder` as the login node does (an empty tmpfs
    /// covers it there): a workdir that is not shared.
    pub fn start_hiding(dir: &Path, folder: &Path) -> Cluster {
        Cluster::start_with(dir, &[("NODE_HIDES", folder)])
    }

    fn start_with(dir: &Path, env: &[(&str, &Path)]) -> Cluster {
        let turn = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
        let state = dir.join("cluster");
        let out = Command::new("bash")
            .args([script().to_str().unwrap(), "start", state.to_str().unwrap()])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the test cluster did not start (bash tests/run.sh installs slurmctld, slurmd, slurm-client and munge): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let node = common::sh("hostname", &["-s"]).trim().to_string();
        Cluster {
            conf: state.join("slurm.conf"),
            state,
            node,
            _turn: turn,
        }
    }

    /// A Slurm command's stdout, run against this cluster; panics when it fails.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap();
        assert!(out.status.success(), "{program} {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The ids of the jobs that are pending or running.
    pub fn live_jobs(&self) -> Vec<String> {
        let out = self.run("squeue", &["-h", "-t", "PENDING,RUNNING,CONFIGURING", "-o", "%i"]);
        out.split_whitespace().map(String::from).collect()
    }

    /// Waits until no job is pending or running.
    pub fn wait_no_live_jobs(&self, within: Duration, what: &str) {
        wait_for(within, what, || self.live_jobs().is_empty());
    }

    /// What Slurm knows now, for a failed test's message: every job with its state and reason,
    /// the node, and the end of both daemons' logs.
    pub fn diagnosis(&self) -> String {
        // Whatever each command says, failed or not: this is already a failure's message.
        let said = |program: &str, args: &[&str]| match Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
        {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("{program}: {e}\n"),
        };
        let jobs = said("squeue", &["-t", "all", "-o", "%i %j %T %r %M"]);
        let node = said("sinfo", &["-N", "-o", "%N %T %E"]);
        let tail = |log: &str| {
            let text = std::fs::read_to_string(self.state.join(log)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        format!(
            "squeue:\n{jobs}sinfo:\n{node}slurmctld.log (end):\n{}\nslurmd.log (end):\n{}",
            tail("slurmctld.log"),
            tail("slurmd.log")
        )
    }

    /// The job's state as `squeue -t all` says it (empty once Slurm forgot it).
    pub fn state_of(&self, job: &str) -> String {
        self.run("squeue", &["-h", "-t", "all", "-j", job, "-o", "%T"])
            .trim()
            .to_string()
    }

    /// The node's state as `sinfo` says it (`idle`, `drained`, `down*`...).
    pub fn node_state(&self) -> String {
        self.run("sinfo", &["-h", "-n", &self.node, "-o", "%T"])
            .trim()
            .to_string()
    }

    /// Sets the node's state (`down`, `drain`, `resume`), with a reason where Slurm wants one.
    /// A node that came back by itself (slurmd registering again) needs no `resume`.
    pub fn set_node(&self, state: &str) {
        if state == "resume"
            && !["drain", "down", "fail"]
                .iter()
                .any(|s| self.node_state().contains(s))
        {
            return;
        }
        let node = format!("nodename={}", self.node);
        let state_arg = format!("state={state}");
        let mut args = vec!["update", node.as_str(), state_arg.as_str()];
        if state != "resume" {
            args.push("reason=rigrun-test");
        }
        self.run("scontrol", &args);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([script().to_str().unwrap(), "stop", self.state.to_str().unwrap()])
            .output();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/cluster.sh")
}

/// The login node: a loopback sshd whose sessions know the cluster (`SLURM_CONF`), written to
/// `dir/hosts.yaml` as host `cluster` (a Slurm host, `slurm` its block's YAML) beside host `box`
/// (the same machine as a plain SSH host), each with its extra YAML lines. It runs while the
/// value lives.
pub fn login_node(dir: &Path, cluster: &Cluster, slurm: &str, extra: [&str; 2]) -> Sshd {
    let key = ClientKey::new(dir);
    let conf = cluster.conf.display().to_string();
    let sshd = Sshd::start_with(dir, "login", &key, &|c| format!("{c}SetEnv SLURM_CONF={conf}\n"));
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, sshd.known_hosts_line()).unwrap();
    let on_cluster = format!("    slurm: {slurm}\n{}", extra[0]);
    let entries = [
        sshd.inventory_entry(
            "cluster",
            &key,
            &known_hosts,
            &dir.join("work-cluster"),
            &on_cluster,
        ),
        sshd.inventory_entry("box", &key, &known_hosts, &dir.join("work-box"), extra[1]),
    ];
    std::fs::write(dir.join("hosts.yaml"), format!("hosts:\n{}", entries.concat())).unwrap();
    sshd
}

/// The allocation the run's host `cluster` got, from run.json.
pub fn allocation_of(run_dir: &Path) -> serde_json::Value {
    common::manifest(run_dir)["hosts"]["cluster"]["facts"]["allocation"].clone()
}

/// The notices said for `host`.
pub fn notices(run_dir: &Path, host: &str) -> Vec<String> {
    events(run_dir)
        .into_iter()
        .filter(|e| e["event"] == "notice" && e["host"] == host)
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}
