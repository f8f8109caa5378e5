//! The ControlMaster: the `ssh` process started (and started again) for a host with the
//! inventory's options and rigrun's defaults, its keepalive probes, and its exit.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use openssh::Session;

use super::failure::{explain_ssh_failure, KeyCommands};
use crate::config::inventory::expand_home;
use crate::config::{HostSpec, KnownHostsPolicy};
use crate::transport::cipher;

/// How long a master's control socket may take to answer.
const MUX_DEADLINE: Duration = Duration::from_secs(5);
/// A master idle this long exits by itself, so a crashed rigrun leaves nothing behind for long.
const CONTROL_PERSIST_SECS: u32 = 300;
/// Longest we wait for a master to connect and authenticate.
const CONNECT_DEADLINE: Duration = Duration::from_secs(60);

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

/// A number not given out before in this process, for a socket's name in the control directory.
fn next_id() -> usize {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What it takes to (re)start the ControlMaster.
pub(super) struct MasterSpec {
    /// `-M -f -N` and the rest before the address.
    args: Vec<String>,
    /// The options that configure the connection (no master flags), for `ssh -G`.
    config_args: Vec<String>,
    address: String,
    /// `-o Ciphers=…` when rigrun reorders the cipher list (see [`cipher`]), asked once.
    cipher: tokio::sync::OnceCell<Option<String>>,
    control: PathBuf,
    log: PathBuf,
    dir: PathBuf,
    describe: String,
    /// The commands that remove or add this host's key in the known_hosts file it uses.
    keys: KeyCommands,
    /// How the master notices a dead link.
    keepalive: Keepalive,
}

/// The master's keepalive probes (`ServerAliveInterval`, `ServerAliveCountMax`): the inventory's
/// `ssh_options` when they set them, else derived from the host's `reconnect_for` so that a dead
/// link is noticed within half of it and the host fails at most `reconnect_for` after the link
/// went down (the reconnecting gets the rest; see `SshTransport::reconnect`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Keepalive {
    interval_secs: u64,
    count_max: u64,
}

impl Keepalive {
    /// Probes missed before the master gives up (without the user's own).
    const COUNT_MAX: u64 = 3;

    fn of(spec: &HostSpec) -> Keepalive {
        let option = |name: &str| {
            let value = spec
                .ssh_options
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name));
            value.and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        // An eighth of reconnect_for, from 1 s to OpenSSH-friendly 15 s.
        let derived = (spec.reconnect_for().as_secs() / 8).clamp(1, 15);
        Keepalive {
            interval_secs: option("ServerAliveInterval").unwrap_or(derived),
            count_max: option("ServerAliveCountMax").unwrap_or(Keepalive::COUNT_MAX),
        }
    }

    /// The longest a dead link goes unnoticed: the first probe after at most one interval of
    /// silence, then one interval per probe left unanswered.
    fn window(&self) -> Duration {
        Duration::from_secs(self.interval_secs * (self.count_max + 1))
    }

    /// The `-o` options (placed after the user's, which win).
    fn options(&self) -> [String; 2] {
        [
            format!("ServerAliveInterval={}", self.interval_secs),
            format!("ServerAliveCountMax={}", self.count_max),
        ]
    }
}

impl MasterSpec {
    pub(super) fn new(host: &str, spec: &HostSpec, policy: KnownHostsPolicy, dir: &Path) -> MasterSpec {
        let n = next_id();
        let control = dir.join(format!("m{n}"));
        let log = dir.join(format!("m{n}.log"));
        let checking = match policy {
            KnownHostsPolicy::Strict => "yes",
            KnownHostsPolicy::AcceptNew => "accept-new",
        };
        let master: Vec<String> = vec![
            "-M".into(),
            "-S".into(),
            control.display().to_string(),
            "-f".into(),
            "-N".into(),
            "-E".into(),
            log.display().to_string(),
        ];
        let mut args: Vec<String> = vec!["-o".into(), format!("StrictHostKeyChecking={checking}")];
        // The user's options come before our defaults: for ssh, the first value given wins.
        for (key, value) in &spec.ssh_options {
            args.extend(["-o".into(), format!("{key}={value}")]);
        }
        let keepalive = Keepalive::of(spec);
        let [alive_interval, alive_count] = keepalive.options();
        for default in [
            format!("ControlPersist={CONTROL_PERSIST_SECS}"),
            "BatchMode=yes".into(),
            alive_interval,
            alive_count,
            "ConnectTimeout=15".into(),
        ] {
            args.extend(["-o".into(), default]);
        }
        if let Some(user) = &spec.user {
            args.extend(["-l".into(), user.clone()]);
        }
        if let Some(port) = spec.port {
            args.extend(["-p".into(), port.to_string()]);
        }
        if let Some(key) = &spec.identity_file {
            args.extend(["-i".into(), expand_home(key).display().to_string()]);
        }
        let address = spec.address_or(host).to_string();
        let describe = format!(
            "{}{}{}",
            spec.user.as_ref().map(|u| format!("{u}@")).unwrap_or_default(),
            address,
            spec.port.map(|p| format!(":{p}")).unwrap_or_default()
        );
        let known_hosts = spec
            .ssh_options
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("UserKnownHostsFile"))
            .map(|(_, v)| v.as_str());
        let keys = KeyCommands::new(&address, spec.port, known_hosts);
        let sets_ciphers = spec.ssh_options.keys().any(|k| k.eq_ignore_ascii_case("Ciphers"));
        MasterSpec {
            args: [master, args.clone()].concat(),
            config_args: args,
            address,
            cipher: tokio::sync::OnceCell::new_with(sets_ciphers.then_some(None)),
            control,
            log,
            dir: dir.to_path_buf(),
            describe,
            keys,
            keepalive,
        }
    }

    /// Starts the master and attaches to it, or explains why it could not connect.
    pub(super) async fn start(&self) -> Result<Session> {
        let _ = std::fs::remove_file(&self.control);
        let _ = std::fs::remove_file(&self.log);
        let cipher = self
            .cipher
            .get_or_init(|| cipher::preference(&self.config_args, &self.address))
            .await;
        let status = tokio::time::timeout(
            CONNECT_DEADLINE,
            tokio::process::Command::new("ssh")
                .args(&self.args)
                .args(cipher.iter().flat_map(|c| ["-o", c.as_str()]))
                .arg("--")
                .arg(&self.address)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // A connection attempt given up on (reconnect's deadline) leaves no ssh behind;
                // once connected, the master has forked off (`-f`) and is not this process.
                .kill_on_drop(true)
                .status(),
        )
        .await;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        match status {
            Err(_) => bail!(
                "no answer from {} within {}s",
                self.describe,
                CONNECT_DEADLINE.as_secs()
            ),
            Ok(Err(e)) => bail!("cannot run ssh ({e}); is the OpenSSH client installed?"),
            Ok(Ok(s)) if !s.success() => bail!("{}", explain_ssh_failure(&self.describe, &self.keys, &log)),
            Ok(Ok(_)) => {}
        }
        let session = Session::resume_mux(self.control.clone().into(), Some(self.log.clone().into()));
        session.check().await.map_err(|e| {
            anyhow!(
                "connected to {} but cannot use the connection: {e}",
                self.describe
            )
        })?;
        Ok(session)
    }
    /// A new socket's path in the control directory, for a port forward.
    pub(super) fn forward_socket(&self) -> PathBuf {
        self.dir.join(format!("f{}", next_id()))
    }

    /// How long a dead link may go unnoticed (the keepalive probes' window).
    pub(super) fn unnoticed_for(&self) -> Duration {
        self.keepalive.window()
    }

    /// Who the master connects to, as `user@address:port`, for messages.
    pub(super) fn describe(&self) -> &str {
        &self.describe
    }

    /// Tells the master to exit (what `ssh -O exit` asks), its commands and forwards with it:
    /// over its control socket, else (a master that does not answer so) with `ssh -O exit`.
    pub(super) async fn exit(&self) {
        match tokio::time::timeout(MUX_DEADLINE, super::mux::terminate(&self.control)).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => tracing::debug!("asking {} to exit over its socket: {e}", self.describe),
            Err(_) => tracing::debug!("{} did not answer a request to exit", self.describe),
        }
        let _ = tokio::process::Command::new("ssh")
            .args([
                "-S",
                &self.control.to_string_lossy(),
                "-O",
                "exit",
                "rigrun-master",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalive_notices_a_dead_link_within_half_of_reconnect_for_unless_the_user_says() {
        let spec = |json: serde_json::Value| -> HostSpec { serde_json::from_value(json).unwrap() };
        let of = |json| {
            let k = Keepalive::of(&spec(json));
            (k.options(), k.window())
        };
        let options = |i: u64, c: u64| {
            [
                format!("ServerAliveInterval={i}"),
                format!("ServerAliveCountMax={c}"),
            ]
        };
        assert_eq!(
            of(serde_json::json!({"reconnect_for": "10s"})),
            (options(1, 3), Duration::from_secs(4))
        );
        assert_eq!(
            of(serde_json::json!({"reconnect_for": "80s"})),
            (options(10, 3), Duration::from_secs(40))
        );
        assert_eq!(
            of(serde_json::json!({})),
            (options(15, 3), Duration::from_secs(60))
        );
        let user = serde_json::json!({"reconnect_for": "10s", "ssh_options": {"serveraliveinterval": "2", "ServerAliveCountMax": "5"}});
        assert_eq!(of(user), (options(2, 5), Duration::from_secs(12)));
    }
}
