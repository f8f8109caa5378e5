//! The inventory (`hosts.yaml`): which hosts exist, how to reach them, their labels and variables.

use std::collections::BTreeMap;
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use super::duration::Dur;

/// Variables as written in YAML: any JSON-like value.
pub type Vars = IndexMap<String, serde_json::Value>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    #[serde(default)]
    pub vars: Vars,
    pub hosts: IndexMap<String, Spanned<HostSpec>>,
    #[serde(default)]
    pub groups: IndexMap<String, Vec<Spanned<String>>>,
    #[serde(default)]
    pub known_hosts: KnownHostsPolicy,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Host name, IP, or an alias from `~/.ssh/config`; the inventory name when absent.
    pub address: Option<String>,
    pub user: Option<String>,
    pub port: Option<u16>,
    pub identity_file: Option<String>,
    /// Extra `ssh -o Key=Value` options.
    #[serde(default)]
    pub ssh_options: BTreeMap<String, String>,
    #[serde(default)]
    pub connection: Connection,
    /// Where scripts and results live on the host.
    pub workdir: Option<String>,
    /// How long rigrun tries to get a lost connection back (a command detached on the host goes
    /// on meanwhile) before the host fails; [`DEFAULT_RECONNECT_FOR`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnect_for: Option<Dur>,
    /// How long a detached command outlives rigrun's silence (a crash, SIGKILL, a partition)
    /// before the host stops it by itself; [`DEFAULT_LEASE`] when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Dur>,
    /// A DCGM exporter's `/metrics` URL as the host sees it (`http://127.0.0.1:9400/metrics`):
    /// sweeps read the GPUs' telemetry there instead of running nvidia-smi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcgm_exporter: Option<String>,
    /// The rigrun binary (a path here, `~/` for the home folder) that `{{ rigrun }}` sends to
    /// this host, instead of the one for its CPU in the host-binaries folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rigrun_binary: Option<String>,
    /// The host is an allocation on a Slurm cluster, asked for through this entry's machine
    /// (the login node): what to ask for (see `slurm.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<Spanned<super::slurm::SlurmSpec>>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub vars: Vars,
}

/// Default working directory on a host when the inventory names none.
pub const DEFAULT_WORKDIR: &str = "~/.rigrun";
/// How long a lost connection is retried by default: longer than a sshd restart or a short
/// network partition, short enough that a host that is down fails the same hour.
pub const DEFAULT_RECONNECT_FOR: Duration = Duration::from_secs(300);
/// How long a detached command outlives rigrun's silence by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
/// The shortest lease: the host checks it once a second and rigrun renews it every quarter.
pub const MIN_LEASE: Duration = Duration::from_secs(4);

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    #[default]
    Ssh,
    /// Run on this machine, without SSH.
    Local,
}

/// How to treat a host key that is not yet in `known_hosts`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KnownHostsPolicy {
    /// Refuse unknown and changed keys (`StrictHostKeyChecking=yes`).
    #[default]
    Strict,
    /// Record a key seen for the first time; still refuse a changed key.
    AcceptNew,
}

impl HostSpec {
    pub fn address_or<'a>(&'a self, name: &'a str) -> &'a str {
        self.address.as_deref().unwrap_or(name)
    }

    pub fn workdir(&self) -> &str {
        self.workdir.as_deref().unwrap_or(DEFAULT_WORKDIR)
    }

    pub fn reconnect_for(&self) -> Duration {
        self.reconnect_for.map_or(DEFAULT_RECONNECT_FOR, |d| d.0)
    }

    pub fn lease(&self) -> Duration {
        self.lease.map_or(DEFAULT_LEASE, |d| d.0).max(MIN_LEASE)
    }
}

/// A path of this machine as the inventory writes it: `~/` is the home folder.
pub fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}
