//! Test harness: real OpenSSH servers on loopback (own host key, own authorized key, known_hosts
//! in a temp dir), network namespaces for hosts that need their own loopback, and helpers to run
//! the real rigrun binary. A test that needs sshd fails loudly when it is missing.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const SSHD: &str = "/usr/sbin/sshd";

/// Runs a command and panics with its output when it fails.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rigrun binary under test. `{{ rigrun }}` sends this very binary to SSH hosts: the
/// host-binaries folder (which tests/run.sh fills for the host_binary tier) is one with nothing
/// in it, unless a test names another.
pub fn rigrun() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rigrun"));
    cmd.env("NO_COLOR", "1")
        .env("RIGRUN_HOST_BINARIES", "/nonexistent/rigrun-tests-host-binaries")
        .stdin(Stdio::null());
    cmd
}

/// Runs rigrun with `args` in `dir`.
pub fn run_rigrun(dir: &Path, args: &[&str]) -> Output {
    rigrun()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("cannot run rigrun")
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A client key pair for the tests' logins.
pub struct ClientKey {
    pub private: PathBuf,
    pub public: String,
}

impl ClientKey {
    pub fn new(dir: &Path) -> ClientKey {
        let private = dir.join("client_key");
        sh(
            "ssh-keygen",
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "rigrun-test",
                "-f",
                private.to_str().unwrap(),
            ],
        );
        let public = std::fs::read_to_string(private.with_extension("pub")).unwrap();
        ClientKey { private, public }
    }
}

/// A real sshd, on 127.0.0.1 or inside a network namespace.
pub struct Sshd {
    pub address: String,
    pub port: u16,
    pub dir: PathBuf,
    pub host_key_public: String,
    child: Child,
}

/// A port nothing listens on right now, on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    /// Starts sshd on a free loopback port, accepting `key`.
    pub fn start(dir: &Path, name: &str, key: &ClientKey) -> Sshd {
        Sshd::start_at(dir, name, key, "127.0.0.1", free_port(), None, &|c| c)
    }

    /// Starts sshd on a free loopback port with its sshd_config passed through `edit` first
    /// (e.g. the sftp subsystem of a stock Debian host, run through the login shell).
    pub fn start_with(dir: &Path, name: &str, key: &ClientKey, edit: &dyn Fn(String) -> String) -> Sshd {
        Sshd::start_at(dir, name, key, "127.0.0.1", free_port(), None, edit)
    }

    /// Starts sshd inside `netns`, listening on its address.
    pub fn start_in(dir: &Path, name: &str, key: &ClientKey, netns: &Netns) -> Sshd {
        Sshd::start_at(dir, name, key, &netns.ns_ip, 22, Some(&netns.name), &|c| c)
    }

    /// Starts sshd inside `netns` with its sshd_config passed through `edit` first (e.g. a
    /// `SetEnv PATH=...` that puts a stand-in tool on the host's PATH).
    pub fn start_in_with(
        dir: &Path,
        name: &str,
        key: &ClientKey,
        netns: &Netns,
        edit: &dyn Fn(String) -> String,
    ) -> Sshd {
        Sshd::start_at(dir, name, key, &netns.ns_ip, 22, Some(&netns.name), edit)
    }

    fn start_at(
        dir: &Path,
        name: &str,
        key: &ClientKey,
        address: &str,
        port: u16,
        netns: Option<&str>,
        edit: &dyn Fn(String) -> String,
    ) -> Sshd {
        assert!(
            Path::new(SSHD).exists(),
            "{SSHD} is missing: install openssh-server (apt-get install -y openssh-server); .ci/run does"
        );
        let dir = dir.join(format!("sshd-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let host_key = dir.join("host_key");
        sh(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", host_key.to_str().unwrap()],
        );
        let authorized = dir.join("authorized_keys");
        std::fs::write(&authorized, &key.public).unwrap();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            edit(format!(
                "Port {port}\nListenAddress {address}\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\n\
                 StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n\
                 AllowTcpForwarding yes\nLogLevel ERROR\nMaxStartups 100\n",
                host_key.display(),
                dir.join("sshd.pid").display(),
                authorized.display()
            )),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
        let child = spawn_sshd(&config, netns, log);
        let host_key_public = std::fs::read_to_string(host_key.with_extension("pub")).unwrap();
        let mut sshd = Sshd {
            address: address.to_string(),
            port,
            dir,
            host_key_public,
            child,
        };
        sshd.wait_listening();
        sshd
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default();
                panic!("sshd exited ({status}) before listening: {log}");
            }
            if TcpStream::connect((self.address.as_str(), self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "sshd did not listen on {}:{} within 15 s",
            self.address, self.port
        );
    }

    /// The known_hosts line for this server.
    pub fn known_hosts_line(&self) -> String {
        let key: Vec<&str> = self.host_key_public.split_whitespace().take(2).collect();
        // ssh writes the bare address for port 22 and `[address]:port` otherwise.
        let host = if self.port == 22 {
            self.address.clone()
        } else {
            format!("[{}]:{}", self.address, self.port)
        };
        format!("{host} {}\n", key.join(" "))
    }

    /// An inventory entry (YAML, indented for `hosts:`) that reaches this server.
    pub fn inventory_entry(
        &self,
        name: &str,
        key: &ClientKey,
        known_hosts: &Path,
        workdir: &Path,
        extra: &str,
    ) -> String {
        format!(
            "  {name}:\n    address: {}\n    port: {}\n    user: {}\n    identity_file: {}\n    workdir: {}\n\
             \x20   ssh_options: {{UserKnownHostsFile: {}, GlobalKnownHostsFile: /dev/null, IdentitiesOnly: \"yes\"}}\n{extra}",
            self.address,
            self.port,
            whoami(),
            key.private.display(),
            workdir.display(),
            known_hosts.display()
        )
    }

    /// Stops the server (for tests of a host going down).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

static NEXT_USER: AtomicUsize = AtomicUsize::new(0);

/// A login user of its own for a test (the tests run as root; root's own home and rc files are
/// never touched): home in `dir`, login shell `shell`, removed again when dropped. `dir` is
/// made traversable, since sshd reads the authorized keys under it as that user.
pub struct TestUser {
    pub name: String,
    pub home: PathBuf,
}

impl TestUser {
    pub fn new(dir: &Path, shell: &Path) -> TestUser {
        assert!(
            whoami() == "root",
            "tests with a login user of their own create it with useradd: run them as root"
        );
        let n = NEXT_USER.fetch_add(1, Ordering::SeqCst);
        let name = format!("rrt{}u{n}", std::process::id());
        let home = dir.join(format!("home-{name}"));
        std::fs::create_dir_all(&home).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // `-p '*'`: no password, yet not locked (sshd refuses locked accounts without PAM).
        sh(
            "useradd",
            &[
                "-M",
                "-d",
                home.to_str().unwrap(),
                "-s",
                shell.to_str().unwrap(),
                "-p",
                "*",
                &name,
            ],
        );
        let user = TestUser { name, home };
        user.own(&user.home);
        user
    }

    /// Writes a file in the user's home, owned by the user.
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.home.join(name);
        std::fs::write(&path, content).unwrap();
        self.own(&path);
        path
    }

    fn own(&self, path: &Path) {
        sh(
            "chown",
            &["-R", &format!("{0}:{0}", self.name), path.to_str().unwrap()],
        );
    }
}

impl TestUser {
    /// Whether a process runs as this user.
    pub fn has_processes(&self) -> bool {
        let found = Command::new("pgrep").args(["-u", &self.name]).output();
        found.is_ok_and(|o| o.status.success())
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // Its sessions and the run's watchdog end within a second or so of the run's end.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.has_processes() {
            std::thread::sleep(Duration::from_millis(50));
        }
        // `-f`: removed even while a session of its own is still ending.
        let _ = Command::new("userdel").args(["-f", &self.name]).status();
    }
}

pub fn whoami() -> String {
    sh("id", &["-un"]).trim().to_string()
}

static NEXT_NS: AtomicUsize = AtomicUsize::new(0);

/// A network namespace with its own loopback, reachable from here through a veth pair.
pub struct Netns {
    pub name: String,
    pub host_ip: String,
    pub ns_ip: String,
    /// This side of the veth pair: taking it down partitions the namespace.
    pub outer: String,
}

impl Netns {
    pub fn new() -> Netns {
        let n = NEXT_NS.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id() % 10000;
        let name = format!("rr{pid}n{n}");
        let (outer, inner) = (format!("rr{pid}h{n}"), format!("rr{pid}p{n}"));
        let subnet = format!("10.{}.{}", 200 + (pid % 50), n * 4);
        let (host_ip, ns_ip) = (format!("{subnet}.1"), format!("{subnet}.2"));
        sh("ip", &["netns", "add", &name]);
        let netns = Netns {
            name: name.clone(),
            host_ip: host_ip.clone(),
            ns_ip: ns_ip.clone(),
            outer: outer.clone(),
        };
        sh(
            "ip",
            &["link", "add", &outer, "type", "veth", "peer", "name", &inner],
        );
        sh("ip", &["link", "set", &inner, "netns", &name]);
        sh("ip", &["addr", "add", &format!("{host_ip}/30"), "dev", &outer]);
        sh("ip", &["link", "set", &outer, "up"]);
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name];
            all.extend_from_slice(args);
            sh("ip", &all);
        };
        in_ns(&["ip", "addr", "add", &format!("{ns_ip}/30"), "dev", &inner]);
        in_ns(&["ip", "link", "set", &inner, "up"]);
        in_ns(&["ip", "link", "set", "lo", "up"]);
        netns
    }
}

impl Netns {
    /// Cuts the link to the namespace (a network partition) or brings it back.
    pub fn link(&self, up: bool) {
        sh(
            "ip",
            &["link", "set", &self.outer, if up { "up" } else { "down" }],
        );
        if up {
            // The address goes with the link; the route back to the namespace with it.
            let _ = Command::new("ip")
                .args(["addr", "add", &format!("{}/30", self.host_ip), "dev", &self.outer])
                .output();
        }
    }

    /// The namespace's processes that are not zombies.
    pub fn live_pids(&self) -> Vec<String> {
        let out = sh("ip", &["netns", "pids", &self.name]);
        out.split_whitespace()
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // The state follows the command name's closing parenthesis.
                let state = stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next());
                matches!(state, Some(s) if s != 'Z' && s != 'X')
            })
            .map(String::from)
            .collect()
    }

    /// The processes in the namespace whose command line contains `needle`, as (pid, command).
    pub fn processes(&self, needle: &str) -> Vec<(String, String)> {
        let out = sh("ip", &["netns", "pids", &self.name]);
        out.split_whitespace()
            .filter_map(|pid| {
                let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
                cmd.contains(needle).then(|| (pid.to_string(), cmd))
            })
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(out) = Command::new("ip").args(["netns", "pids", &self.name]).output() {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
        clear_stale_pyenv_lock();
    }
}

/// The namespaced hosts log in as this machine's root, whose `.bashrc` may run `pyenv init`:
/// it takes a lock file for a `pyenv rehash` in every login shell, and a shell SIGKILLed inside
/// it (a power-off, a namespace torn down) leaves the lock behind, so that every later login on
/// the machine waits on it. When no rehash runs, a lock there is such a leftover: removed, as
/// a host's boot would clear its own.
pub fn clear_stale_pyenv_lock() {
    let Ok(home) = std::env::var("HOME") else { return };
    let root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| format!("{home}/.pyenv"));
    let lock = Path::new(&root).join("shims/.pyenv-shim");
    if lock.exists() && processes_with("pyenv-rehash").is_empty() {
        let _ = std::fs::remove_file(lock);
    }
}

/// Two hosts, `h1` and `h2`, each in a network namespace of its own with its own sshd (their
/// keys in `known_hosts`), for an inventory that puts both in the group `gpu`.
pub struct NetnsHosts {
    pub sshd: [Sshd; 2],
    pub ns: [Netns; 2],
    pub key: ClientKey,
    pub known_hosts: PathBuf,
}

impl NetnsHosts {
    pub fn start(dir: &Path) -> NetnsHosts {
        let key = ClientKey::new(dir);
        let ns = [Netns::new(), Netns::new()];
        let sshd = [
            Sshd::start_in(dir, "h1", &key, &ns[0]),
            Sshd::start_in(dir, "h2", &key, &ns[1]),
        ];
        let known_hosts = dir.join("known_hosts");
        let lines = format!("{}{}", sshd[0].known_hosts_line(), sshd[1].known_hosts_line());
        std::fs::write(&known_hosts, lines).unwrap();
        NetnsHosts {
            sshd,
            ns,
            key,
            known_hosts,
        }
    }

    /// The inventory: `h1` and `h2` with workdirs `dir/w1` and `dir/w2` and their `extra`
    /// lines (indented as a host's fields), in the group `gpu`.
    pub fn inventory(&self, dir: &Path, extra: [&str; 2]) -> String {
        let entry = |i: usize| {
            let name = format!("h{}", i + 1);
            let workdir = dir.join(format!("w{}", i + 1));
            self.sshd[i].inventory_entry(&name, &self.key, &self.known_hosts, &workdir, extra[i])
        };
        format!("hosts:\n{}{}groups:\n  gpu: [h1, h2]\n", entry(0), entry(1))
    }
}

/// Polls `ready` until it holds; fails naming `what` after `within`.
pub fn wait_for(within: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that no process of `what` (its command line contains `what`) is left, `when` said in
/// the failure. A detached job's own processes name it in their arguments too (job.sh's wrapper,
/// or `rigrun job-run`'s runner); they report its end and exit a moment after it, once rigrun has
/// stopped waiting, so they are waited for (up to 10 s) rather than counted at once.
pub fn assert_none_left(what: &str, when: &str) {
    let left: Vec<String> = processes_with(what)
        .into_iter()
        .filter(|p| !is_job_process(p))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "{when}: left running");
    wait_for(
        Duration::from_secs(10),
        &format!("{when}: the job processes of `{what}` to end"),
        || processes_with(what).is_empty(),
    );
}

/// Whether a command line is one of a detached job's own processes (not its command): job.sh,
/// run as `sh -c` here or through a login shell's `-c` over SSH (its quote then escaped), or
/// `rigrun job-run`'s runner.
fn is_job_process(command_line: &str) -> bool {
    command_line.contains("s detached jobs on a host; the protocol is described in job.rs")
        || command_line.contains(" job-run run ")
}

/// This machine's processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(needle).then_some(cmd)
        })
        .collect()
}

/// Asserts that `records` are the points of a server variant started with `--no-such-flag`:
/// failed to start, the server's own error quoted.
pub fn assert_failed_on_a_bad_flag(records: &[&serde_json::Value]) {
    assert!(!records.is_empty(), "no record of the variant with the bad flag");
    for r in records {
        let reason = r["reason"].as_str().unwrap_or_default();
        assert_eq!(r["status"], "failed", "{r}");
        assert!(
            reason.starts_with("failed to start: the server exited"),
            "{reason}"
        );
        assert!(
            reason.contains("unexpected argument '--no-such-flag'"),
            "{reason}"
        );
    }
}

#[allow(unused_imports)]
pub use rigrun::testutil::wait_until_gone;

/// The run directories under `runs` (not its `latest` link), in no order; none when it is missing.
pub fn run_dirs(runs: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(runs).into_iter().flatten().map(|e| e.unwrap());
    let runs =
        entries.filter(|e| e.file_name() != "latest" && !e.file_name().to_string_lossy().starts_with('.'));
    runs.map(|e| e.path()).collect()
}

/// The single run directory under `runs`.
pub fn only_run_dir(runs: &Path) -> PathBuf {
    let dirs = run_dirs(runs);
    assert_eq!(dirs.len(), 1, "expected one run directory, found {dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// The most recent run directory under `runs` (run ids start with their UTC time).
pub fn newest_run_dir(runs: &Path) -> PathBuf {
    run_dirs(runs).into_iter().max().expect("no run directory")
}

/// The records of a run directory as JSON values.
pub fn records(run_dir: &Path) -> Vec<serde_json::Value> {
    json_lines(&run_dir.join("records.jsonl"))
}

/// The journal (events.jsonl) of a run directory as JSON values.
pub fn events(run_dir: &Path) -> Vec<serde_json::Value> {
    json_lines(&run_dir.join("events.jsonl"))
}

fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn manifest(run_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).unwrap()).unwrap()
}

impl Sshd {
    /// Restarts this server with `LogLevel VERBOSE`, so that `sshd.log` names every session it
    /// starts: tests count the commands a step sends (see [`Sshd::commands_started`]) and the
    /// SFTP sessions it opens.
    pub fn restart_verbose(&mut self) {
        self.stop();
        let config = self.dir.join("sshd_config");
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text.replace("LogLevel ERROR", "LogLevel VERBOSE")).unwrap();
        assert!(
            self.address == "127.0.0.1",
            "restart_verbose is for loopback servers"
        );
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("sshd.log"))
            .unwrap();
        self.child = spawn_sshd(&config, None, log);
        self.wait_listening();
    }

    /// Kills this server and every session it serves (as a crash or `systemctl kill` would);
    /// the commands those sessions started in their own process groups live on.
    pub fn kill_with_sessions(&mut self, netns: &Netns) {
        self.stop();
        let servers = netns.processes("sshd");
        let sshd = servers
            .iter()
            .filter(|(_, cmd)| cmd.starts_with(SSHD) || cmd.starts_with("sshd:"));
        for (pid, _) in sshd {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
        clear_stale_pyenv_lock();
    }

    /// The host in `netns` loses power: every process there is killed (SIGKILL: nothing is
    /// told, nothing cleans up). Files stay, as on a disk.
    /// A process may fork between a listing and the kill of its parent, so the kill goes round
    /// until the namespace holds nothing alive (zombies awaiting their reaper do not count).
    pub fn power_off(&mut self, netns: &Netns) {
        self.stop();
        wait_for(
            Duration::from_secs(30),
            "every process on the host to die",
            || {
                let alive = netns.live_pids();
                for pid in &alive {
                    let kill = Command::new("kill")
                        .args(["-9", pid])
                        .stderr(Stdio::null())
                        .status();
                    let _ = kill;
                }
                alive.is_empty()
            },
        );
        clear_stale_pyenv_lock();
    }

    /// The host in `netns` boots again: sshd starts as configured, where the kernel's boot id
    /// reads `boot_id` (see [`spawn_sshd_booted`]).
    pub fn boot(&mut self, netns: &Netns, boot_id: &str) {
        let file = self.dir.join(format!("boot_id-{boot_id}"));
        std::fs::write(&file, format!("{boot_id}\n")).unwrap();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("sshd.log"))
            .unwrap();
        let config = self.dir.join("sshd_config");
        self.child = spawn_sshd_booted(&config, Some(&netns.name), Some(&file), log);
        self.wait_listening();
    }

    /// Starts this server again, as configured, in `netns`.
    pub fn start_again(&mut self, netns: &Netns) {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("sshd.log"))
            .unwrap();
        self.child = spawn_sshd(&self.dir.join("sshd_config"), Some(&netns.name), log);
        self.wait_listening();
    }

    /// How many exec sessions (commands, not SFTP) sshd has started since `restart_verbose`.
    /// How many SFTP sessions clients opened (after [`Sshd::restart_verbose`]).
    pub fn sftp_sessions(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("Starting session: subsystem 'sftp'"))
            .count()
    }

    pub fn commands_started(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("sshd.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("Starting session: command"))
            .count()
    }
}

/// sshd in the foreground with `config`, in `netns` if given, logging to `log`.
fn spawn_sshd(config: &Path, netns: Option<&str>, log: std::fs::File) -> Child {
    spawn_sshd_booted(config, netns, None, log)
}

/// As [`spawn_sshd`]; with `boot_id`, in a mount namespace of its own where
/// `/proc/sys/kernel/random/boot_id` reads that file (bind-mounted over it), for sshd and every
/// process its sessions start, as on a host that booted again.
fn spawn_sshd_booted(
    config: &Path,
    netns: Option<&str>,
    boot_id: Option<&Path>,
    log: std::fs::File,
) -> Child {
    let mut argv: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        argv.extend(["ip", "netns", "exec", ns]);
    }
    let mount = r#"mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@""#;
    if let Some(file) = boot_id {
        argv.extend(["unshare", "-m", "sh", "-c", mount, file.to_str().unwrap()]);
    }
    argv.push(SSHD);
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .args(["-D", "-e", "-f", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start sshd")
}

/// Runs rigrun with `args` in `dir` and returns its output with its peak resident memory in KiB,
/// as the kernel counted it (`wait4`'s `ru_maxrss`: the process and the children it reaped).
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's Child cannot do
pub fn run_rigrun_peak_rss(dir: &Path, args: &[&str]) -> (Output, u64) {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = rigrun()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run rigrun");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            pipe.read_to_end(&mut buf).unwrap();
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let mut status = 0;
    // SAFETY: rusage is plain data, filled by the kernel; the pid is our unreaped child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4 failed");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (output, usage.ru_maxrss as u64)
}

/// Writes `dir/hosts.yaml` with one local host `h` working in `dir/w`: `extra` inventory keys
/// (indented lines, each ending in a newline) and its `vars` (a YAML flow mapping's inside).
pub fn one_local_host(dir: &Path, extra: &str, vars: &str) {
    let inventory = format!(
        "hosts:\n  h:\n    connection: local\n    workdir: {}\n{extra}    vars: {{{vars}}}\n",
        dir.join("w").display()
    );
    std::fs::write(dir.join("hosts.yaml"), inventory).unwrap();
}
