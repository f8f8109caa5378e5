//! The `ssh` connection: one OpenSSH ControlMaster per host, commands and SFTP multiplexed over it.
//!
//! We start the master with the `ssh` binary ourselves, so that every `ssh_options` entry becomes
//! an `-o` flag and `~/.ssh/config` is still read, then attach to it with openssh's native mux.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::BytesMut;
use futures_util::StreamExt as _;
use openssh::{ForwardType, Session, Socket};
use openssh_sftp_client::{Sftp, SftpOptions};
use tokio::io::AsyncSeek;
use tokio::sync::{Mutex, Semaphore};

use super::channel::Channel;
use super::cipher;
use super::login_noise::{self, LoginNoise, SkipThrough};
use super::wrapper::{self, Output, Stream};
use super::{HttpEndpoint, Lost, Streamed};
use crate::config::{HostSpec, KnownHostsPolicy};

/// A master idle this long exits by itself, so a crashed rigrun leaves nothing behind for long.
const CONTROL_PERSIST_SECS: u32 = 300;
/// Longest we wait for a master to connect and authenticate.
const CONNECT_DEADLINE: Duration = Duration::from_secs(60);

/// SFTP reads in flight per streamed file: enough to hide the round trip, 2 MiB of buffers.
const READ_AHEAD: usize = 16;
/// Bytes asked for per SFTP read (OpenSSH's sftp-server serves up to 255 KiB).
const CHUNK: u32 = 252 * 1024;
/// Files this big stream through `cat` rather than SFTP: one stream, no request per chunk.
const CAT_FROM: u64 = 64 << 20;
/// What one read from `cat`'s stream may take: a whole widened pipe.
const CAT_CHUNK: usize = 1 << 20;
/// Longest an SFTP handshake may take; a stream corrupted by a login shell's output can make
/// the client wait for a packet that never comes.
const SFTP_HANDSHAKE: Duration = Duration::from_secs(30);

static NEXT_ID: AtomicUsize = AtomicUsize::new(0);

pub struct SshTransport {
    host: String,
    master: MasterSpec,
    session: Mutex<Arc<Session>>,
    sftp: Mutex<Option<Arc<Sftp>>>,
    /// Exec channels; SFTP holds one more for the whole run.
    permits: Arc<Semaphore>,
    /// What the login shell printed before a command, once probed (see [`login_noise`]).
    noise: std::sync::OnceLock<Option<LoginNoise>>,
}

/// What it takes to (re)start the ControlMaster.
struct MasterSpec {
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
/// went down (the reconnecting gets the rest; see [`SshTransport::reconnect`]).
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

/// `ssh-keygen -R` and `ssh-keyscan` as they must be typed for this host: `[address]:port` for
/// a port other than 22, `-f FILE` when the inventory names its own known_hosts file.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyCommands {
    pub remove: String,
    pub add: String,
}

impl KeyCommands {
    pub fn new(address: &str, port: Option<u16>, known_hosts: Option<&str>) -> KeyCommands {
        let name = match port.filter(|&p| p != 22) {
            Some(port) => format!("[{address}]:{port}"),
            None => address.to_string(),
        };
        let file = known_hosts.unwrap_or("~/.ssh/known_hosts");
        let quoted = crate::config::template::shell_quote(&name);
        KeyCommands {
            remove: match known_hosts {
                Some(file) => format!(
                    "ssh-keygen -R {quoted} -f {}",
                    crate::config::template::shell_quote(file)
                ),
                None => format!("ssh-keygen -R {quoted}"),
            },
            add: format!(
                "ssh-keyscan -p {} {address} >> {}",
                port.unwrap_or(22),
                crate::config::template::shell_quote(file)
            ),
        }
    }
}

impl SshTransport {
    pub async fn connect(
        host: &str,
        spec: &HostSpec,
        policy: KnownHostsPolicy,
        control_dir: &Path,
    ) -> Result<SshTransport> {
        let master = MasterSpec::new(host, spec, policy, control_dir);
        let session = master.start().await?;
        Ok(SshTransport {
            host: host.to_string(),
            master,
            session: Mutex::new(Arc::new(session)),
            sftp: Mutex::new(None),
            permits: Arc::new(Semaphore::new(super::MAX_CHANNELS_PER_HOST - 1)),
            noise: std::sync::OnceLock::new(),
        })
    }

    /// Sees once what the login shell prints before a command (it decides how SFTP starts),
    /// running the `sh` script `then` in the same round trip; returns what `then` printed.
    pub async fn probe_login(&self, then: &str) -> Result<String> {
        let session = self.session().await?;
        let (noise, said) = login_noise::probe(&session, &self.host, then).await?;
        let _ = self.noise.set(noise);
        Ok(said)
    }

    /// What the login shell printed before a command ran, once probed; None when quiet.
    pub fn login_noise(&self) -> Option<&LoginNoise> {
        self.noise.get().and_then(Option::as_ref)
    }

    /// The live session; a master that died (network blip, idle timeout) is started again.
    async fn session(&self) -> Result<Arc<Session>> {
        let mut guard = self.session.lock().await;
        if guard.check().await.is_err() {
            // Said to the user by whoever lost the connection (see `job.rs`), in words.
            tracing::info!(host = %self.host, "the SSH master is gone; reconnecting");
            *guard = Arc::new(self.master.start().await?);
            *self.sftp.lock().await = None;
        }
        Ok(guard.clone())
    }

    pub async fn exec(
        &self,
        command: &str,
        on_output: &mut (dyn FnMut(Stream, Output) + Send),
    ) -> Result<i32> {
        let marker = wrapper::new_marker();
        let mut channel = self.spawn(wrapper::WRAPPER, &[command, &marker]).await?;
        // stdin is held until the command ends: closing it is what stops the command.
        let code = wrapper::drive(&mut channel.stdout, &mut channel.stderr, &marker, on_output).await?;
        channel.wait().await;
        code.ok_or_else(|| {
            anyhow!(
                "the connection to {} broke before the command finished",
                self.host
            )
        })
    }

    /// Starts `sh -c script rigrun args...` on the host over a new channel.
    pub(crate) async fn spawn(&self, script: &str, args: &[&str]) -> Result<Channel> {
        let permit = self.permits.clone().acquire_owned().await?;
        let session = self.session().await?;
        let child = Session::arc_raw_command(session, super::channel::sh_line(script, args))
            .stdin(openssh::Stdio::piped())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .with_context(|| format!("cannot start a command on {}", self.host))?;
        Channel::ssh(child, permit)
    }

    /// How long a dead link may go unnoticed (the keepalive probes' window).
    pub(crate) fn unnoticed_for(&self) -> Duration {
        self.master.keepalive.window()
    }

    /// Gets a lost connection back: a new master, tried with backoff (1 s doubling to 30 s)
    /// until `until`, no attempt running past it; past it, [`Lost`] with ssh's last words.
    pub(crate) async fn reconnect(&self, until: Instant) -> Result<()> {
        let mut wait = Duration::from_secs(1);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let error = match tokio::time::timeout(left, self.session()).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => e,
                Err(_) => anyhow!("no answer from {}", self.master.describe),
            };
            if Instant::now() + wait > until {
                return Err(Lost {
                    reason: format!(
                        "lost the connection to {} and could not get it back: {error:#}",
                        self.host
                    ),
                }
                .into());
            }
            tracing::info!(host = %self.host, "reconnecting in {wait:?}: {error:#}");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
        }
    }

    /// The open SFTP session without checking the master again: fetching 10,000 files must not
    /// cost a control-socket round trip each (a master lost meanwhile fails them with the reason).
    async fn sftp_open(&self) -> Result<Arc<Sftp>> {
        if let Some(sftp) = self.sftp.lock().await.as_ref() {
            return Ok(sftp.clone());
        }
        self.sftp().await
    }

    /// The SFTP session, opened on first use. Two ways in: the `sftp` subsystem (sshd starts
    /// sftp-server through the login shell, so a shell that prints on stdout corrupts it, unless
    /// the subsystem is `internal-sftp`), and sftp-server started over an exec channel behind a
    /// marker that everything before it is dropped up to (see [`SFTP_SERVER`]). The subsystem goes
    /// first unless the login shell was seen printing on stdout; the other is the fallback.
    async fn sftp(&self) -> Result<Arc<Sftp>> {
        let session = self.session().await?;
        let mut guard = self.sftp.lock().await;
        if let Some(sftp) = guard.as_ref() {
            return Ok(sftp.clone());
        }
        let noisy = self.login_noise().is_some_and(|n| !n.stdout.is_empty());
        let sftp = if noisy {
            match self.sftp_over_exec(&session).await {
                Ok(sftp) => sftp,
                Err(exec) => self
                    .sftp_subsystem(&session)
                    .await
                    .map_err(|subsystem| no_sftp(&self.host, self.login_noise(), &subsystem, &exec))?,
            }
        } else {
            match self.sftp_subsystem(&session).await {
                Ok(sftp) => sftp,
                Err(subsystem) => {
                    tracing::info!(host = %self.host, "the sftp subsystem failed ({subsystem:#}); starting sftp-server over a command");
                    self.sftp_over_exec(&session)
                        .await
                        .map_err(|exec| no_sftp(&self.host, self.login_noise(), &subsystem, &exec))?
                }
            }
        };
        let sftp = Arc::new(sftp);
        *guard = Some(sftp.clone());
        Ok(sftp)
    }

    /// Requests go out at once: the default 0.5 ms batching costs a streamed file throughput.
    fn sftp_options() -> SftpOptions {
        SftpOptions::new().flush_interval(Duration::ZERO)
    }

    /// SFTP through the `sftp` subsystem (the fast path: nothing to find on the host).
    async fn sftp_subsystem(&self, session: &Session) -> Result<Sftp> {
        let resumed = Session::resume_mux(session.control_socket().into(), None);
        let open = Sftp::from_session(resumed, Self::sftp_options());
        match tokio::time::timeout(SFTP_HANDSHAKE, open).await {
            Ok(result) => Ok(result?),
            Err(_) => bail!("no SFTP handshake within {}s", SFTP_HANDSHAKE.as_secs()),
        }
    }

    /// SFTP with sftp-server started by a command of ours, which prints a marker first: the
    /// client reads the server's stream from just after it, whatever the login shell printed.
    async fn sftp_over_exec(&self, session: &Arc<Session>) -> Result<Sftp> {
        use openssh_sftp_client::SftpAuxiliaryData;
        let marker = login_noise::new_marker("sftp");
        let mut child = session
            .clone()
            .arc_raw_command(format!(
                "sh -c {} rigrun {}",
                crate::config::template::shell_quote(SFTP_SERVER),
                crate::config::template::shell_quote(&marker)
            ))
            .stdin(openssh::Stdio::piped())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .context("cannot start a command")?;
        let stdin = child.stdin().take().context("no stdin channel")?;
        let stdout = SkipThrough::new(child.stdout().take().context("no stdout channel")?, &marker);
        let stderr = SkipThrough::new(child.stderr().take().context("no stderr channel")?, &marker);
        let said = tokio::spawn(read_text(stderr));
        // Kept alive as long as the session: the channel is the child's.
        let keep = SftpAuxiliaryData::Boxed(Box::new(std::sync::Mutex::new(child)));
        let open = Sftp::new_with_auxiliary(stdin, stdout, Self::sftp_options(), keep);
        let error = match tokio::time::timeout(SFTP_HANDSHAKE, open).await {
            Ok(Ok(sftp)) => return Ok(sftp),
            Ok(Err(e)) => anyhow!(e),
            Err(_) => anyhow!("no SFTP handshake within {}s", SFTP_HANDSHAKE.as_secs()),
        };
        let said = tokio::time::timeout(Duration::from_secs(5), said)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        Err(match said.trim() {
            "" => error,
            said => anyhow!("{said}"),
        })
    }

    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let sftp = self.sftp().await?;
        let data = sftp
            .fs()
            .read(sftp_path(path))
            .await
            .with_context(|| format!("cannot read {path} on {}", self.host))?;
        Ok(data.to_vec())
    }

    /// Streams a file over SFTP with [`READ_AHEAD`] reads in flight (one at a time would wait a
    /// round trip per chunk), handing the chunks on in order.
    pub async fn read_chunks(
        &self,
        path: &Path,
        size: Option<u64>,
        on_chunk: super::OnChunk<'_>,
    ) -> Result<Streamed> {
        // One stream without requests beats SFTP's reads in flight for a big file; and the SFTP
        // client refuses names that are not UTF-8.
        if path.to_str().is_none() || size.is_some_and(|s| s >= CAT_FROM) {
            return self.cat_chunks(path, on_chunk).await;
        }
        let sftp = self.sftp_open().await?;
        let file = sftp
            .open(path)
            .await
            .with_context(|| format!("cannot open {} on {}", path.display(), self.host))?;
        let len = CHUNK;
        let count = size.map_or(u64::MAX, |n| n.div_ceil(u64::from(len)));
        let mut chunks = futures_util::stream::iter(0..count)
            .map(|i| read_at(file.clone(), i * u64::from(len), len))
            .buffered(READ_AHEAD);
        let mut total = 0;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.with_context(|| format!("cannot read {} on {}", path.display(), self.host))?;
            if chunk.is_empty() {
                break;
            }
            on_chunk(&chunk)?;
            total += chunk.len() as u64;
            if chunk.len() < len as usize {
                break;
            }
        }
        drop(chunks);
        let meta = file.clone().metadata().await.ok();
        Ok(Streamed {
            bytes: total,
            len_after: meta.and_then(|m| m.len()),
            modified_after: meta
                .and_then(|m| m.modified())
                .and_then(|t| super::unix_seconds(t.as_system_time())),
        })
    }

    /// Streams a file through `cat` on an exec channel (a big one, or one whose name is not UTF-8,
    /// which the SFTP client refuses); the shell rebuilds the name from octal escapes, so any
    /// byte passes, and reports the file's length and modification time once read.
    async fn cat_chunks(&self, path: &Path, on_chunk: super::OnChunk<'_>) -> Result<Streamed> {
        use tokio::io::AsyncReadExt as _;
        let _permit = self.permits.acquire().await?;
        let session = self.session().await?;
        // The marker first on both streams: what the login shell printed before it is dropped.
        let marker = login_noise::new_marker("cat");
        let script = format!(
            "printf '%s' \"$1\"; printf '%s\\n' \"$1\" >&2; f=$(printf '{}x'); f=${{f%x}}; \
             cat -- \"$f\" || exit; stat -L -c '%s %Y' -- \"$f\" >&2 || true",
            octal_escapes(path.as_os_str().as_encoded_bytes())
        );
        let mut child = session
            .raw_command(format!(
                "sh -c {} rigrun {}",
                crate::config::template::shell_quote(&script),
                crate::config::template::shell_quote(&marker)
            ))
            .stdin(openssh::Stdio::null())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .with_context(|| format!("cannot start cat on {}", self.host))?;
        let stdout = super::channel::widened(child.stdout().take().context("no stdout channel")?);
        let mut stdout = SkipThrough::new(stdout, &marker);
        let mut buf = vec![0u8; CAT_CHUNK];
        let mut total = 0;
        loop {
            let n = stdout.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            on_chunk(&buf[..n])?;
            total += n as u64;
        }
        let err = match child.stderr().take() {
            Some(stderr) => read_text(SkipThrough::new(stderr, &marker)).await,
            None => String::new(),
        };
        let status = child.wait().await?;
        if !status.success() {
            bail!("cannot read {} on {}: {}", path.display(), self.host, err.trim());
        }
        // stat's line, the last on stderr: the length and modification time after reading
        // (none where stat cannot say: the size is still checked against the listing).
        let after: Vec<u64> = err
            .lines()
            .last()
            .map(|l| l.split_whitespace().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default();
        Ok(Streamed {
            bytes: total,
            len_after: after.first().copied().filter(|_| after.len() == 2),
            modified_after: after.get(1).copied().filter(|_| after.len() == 2),
        })
    }

    pub async fn write_file_atomic(&self, path: &str, data: &[u8], mode: u32) -> Result<()> {
        let sftp = self.sftp().await?;
        let target = sftp_path(path);
        let dir = target.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut fs = sftp.fs();
        create_dirs(&mut fs, &dir)
            .await
            .with_context(|| format!("cannot create {} on {}", dir.display(), self.host))?;
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or("upload");
        let tmp = dir.join(format!(".{name}.rigrun-{}", &wrapper::new_marker()[14..22]));
        let result = async {
            fs.write(&tmp, data).await?;
            fs.set_permissions(
                &tmp,
                openssh_sftp_client::metadata::Permissions::from(mode as u16),
            )
            .await?;
            fs.rename(&tmp, &target).await
        }
        .await;
        let Err(error) = result else { return Ok(()) };
        let _ = fs.remove_file(&tmp).await;
        let why = self
            .why_not_writable(&dir.display().to_string(), data.len())
            .await;
        Err(anyhow!(error).context(match why {
            Some(why) => format!("cannot write {path} on {}: {why}", self.host),
            None => format!("cannot write {path} on {}", self.host),
        }))
    }

    /// Asks the host, in words, why `dir` cannot take `bytes` more: SFTP itself only says
    /// "Failure". None when the host sees no reason (the SFTP error then stands alone).
    async fn why_not_writable(&self, dir: &str, bytes: usize) -> Option<String> {
        let probe = format!(
            "d={}; [ -z \"$d\" ] && d=.; p=$d; while [ ! -e \"$p\" ]; do p=$(dirname \"$p\"); done; \
             [ \"$p\" != \"$d\" ] && echo \"missing $p\"; \
             if err=$( (: > \"$p/.rigrun-probe-$$\") 2>&1 ); then rm -f \"$p/.rigrun-probe-$$\"; \
             df -Pk \"$p\" | awk 'NR==2 {{print \"free\", $4}}'; else echo \"cannot $err\"; fi",
            crate::config::template::shell_quote(dir)
        );
        let said = self.output_of(&probe).await?;
        host_says(dir, bytes, &said)
    }

    /// Stdout of a short command, or None when it could not run.
    async fn output_of(&self, command: &str) -> Option<String> {
        let mut out = String::new();
        let code = self
            .exec(command, &mut |stream, output| {
                if let (Stream::Stdout, Output::Line(line)) = (stream, output) {
                    out.push_str(&wrapper::line_text(line));
                    out.push('\n');
                }
            })
            .await
            .ok()?;
        (code == 0).then_some(out)
    }

    /// Forwards a Unix socket in the control directory to the server's address on the host, and
    /// returns a client bound to that socket (the URL, and so the Host header, stay unchanged).
    pub async fn http_endpoint(&self, url: &str) -> Result<HttpEndpoint> {
        let parsed = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
        let host = parsed.host_str().context("the URL has no host")?.to_string();
        let port = parsed.port_or_known_default().context("the URL has no port")?;
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let socket_path = self.master.dir.join(format!("f{n}"));
        let session = self.session().await?;
        session
            .request_port_forward(
                ForwardType::Local,
                Socket::UnixSocket {
                    path: socket_path.clone().into(),
                },
                Socket::TcpSocket {
                    host: host.clone().into(),
                    port,
                },
            )
            .await
            .with_context(|| format!("cannot forward to {host}:{port} on {} through SSH", self.host))?;
        let client = super::http_client(|builder| builder.unix_socket(socket_path.clone()))?;
        Ok(HttpEndpoint {
            client,
            base_url: url.to_string(),
        })
    }

    pub async fn close(&self) {
        if let Some(sftp) = self.sftp.lock().await.take() {
            if let Ok(sftp) = Arc::try_unwrap(sftp) {
                let _ = sftp.close().await;
            }
        }
        let _ = tokio::process::Command::new("ssh")
            .args([
                "-S",
                &self.master.control.to_string_lossy(),
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

/// The reason in the probe's answer (see `why_not_writable`), in the user's words.
fn host_says(dir: &str, bytes: usize, said: &str) -> Option<String> {
    let missing = said.lines().find_map(|l| l.strip_prefix("missing "));
    let cannot = said.lines().find_map(|l| l.strip_prefix("cannot "));
    let free_kib = said
        .lines()
        .find_map(|l| l.strip_prefix("free "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    let reason = if let Some(err) = cannot {
        let at = missing.unwrap_or(dir);
        if err.contains("Read-only file system") {
            format!("the file system of {at} is read-only there")
        } else if err.contains("No space left") {
            format!("the disk holding {at} is full")
        } else if err.contains("Permission denied") {
            format!("permission denied: the login user may not write in {at}")
        } else {
            format!("{at} is not writable: {}", err.trim())
        }
    } else if free_kib.is_some_and(|kib| kib * 1024 < bytes as u64 + 4096) {
        format!(
            "the disk holding {dir} is full ({} KiB free, {} KiB to write)",
            free_kib.unwrap_or(0),
            bytes.div_ceil(1024)
        )
    } else if let Some(parent) = missing {
        format!("{dir} does not exist and could not be created under {parent}")
    } else {
        return None;
    };
    Some(reason + "; free space or choose another `workdir:` in the inventory")
}

/// Neither way into SFTP worked: both reasons, and what to do.
fn no_sftp(
    host: &str,
    noise: Option<&LoginNoise>,
    subsystem: &anyhow::Error,
    exec: &anyhow::Error,
) -> anyhow::Error {
    let shell = match noise {
        Some(noise) if !noise.stdout.is_empty() => format!(
            "Its login shell prints on stdout (`{}`), which corrupts the sftp subsystem",
            noise.first_line()
        ),
        _ => "A login shell that prints on stdout corrupts the sftp subsystem".to_string(),
    };
    anyhow!(
        "cannot open SFTP on {host}: the sftp subsystem failed ({subsystem:#}) and so did \
         sftp-server started over a command ({exec:#}). {shell}: make ~/.bashrc (or what \
         prints) return early for non-interactive shells, with `[ -z \"$PS1\" ] && return` or \
         `case $- in *i*) ;; *) return;; esac` at its top; or set `Subsystem sftp internal-sftp` \
         in the host's sshd_config, which runs no shell"
    )
}

/// Starts sftp-server on the host after printing the marker (`$1`): the usual places first, then
/// where the host's sshd_config (or `sshd -T`) says the sftp subsystem lives.
const SFTP_SERVER: &str = r#"printf '%s' "$1"; printf '%s\n' "$1" >&2
for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/lib/ssh/sftp-server \
  /usr/libexec/sftp-server /usr/lib/sftp-server; do
  [ -x "$p" ] && exec "$p"
done
p=$(awk 'tolower($1) == "subsystem" && $2 == "sftp" { print $3; exit }' /etc/ssh/sshd_config 2>/dev/null)
case $p in /*) [ -x "$p" ] && exec "$p" ;; esac
p=$({ sshd -T || /usr/sbin/sshd -T; } 2>/dev/null | awk '$1 == "subsystem" && $2 == "sftp" { print $3; exit }')
case $p in /*) [ -x "$p" ] && exec "$p" ;; esac
echo "no sftp-server program on the host (looked in /usr/lib/openssh, /usr/libexec/openssh, /usr/lib/ssh, /usr/libexec, /usr/lib and sshd_config)" >&2
exit 127"#;

/// A stream's text to its end (at most 16 KiB kept), for error messages.
async fn read_text(mut stream: impl tokio::io::AsyncRead + Unpin) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut kept = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = (16 * 1024 - kept.len().min(16 * 1024)).min(n);
        kept.extend_from_slice(&buf[..room]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// Reads up to `len` bytes at `offset`, reading again after a short reply so that only the end
/// of the file yields less than `len` (empty: at or past the end).
async fn read_at(mut file: openssh_sftp_client::file::File, offset: u64, len: u32) -> Result<BytesMut> {
    let mut data = BytesMut::new();
    while data.len() < len as usize {
        Pin::new(&mut file).start_seek(SeekFrom::Start(offset + data.len() as u64))?;
        let want = len - data.len() as u32;
        match file.read(want, BytesMut::with_capacity(want as usize)).await? {
            None => break,
            Some(part) if part.is_empty() => break,
            Some(part) if data.is_empty() => data = part,
            Some(part) => data.extend_from_slice(&part),
        }
    }
    Ok(data)
}

/// Every byte as a `printf` octal escape (`\ooo`), so a name of any bytes survives the shell.
fn octal_escapes(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:03o}")).collect()
}

/// SFTP resolves relative paths against the login directory, which is what `~/` means.
fn sftp_path(path: &str) -> PathBuf {
    PathBuf::from(path.strip_prefix("~/").unwrap_or(path))
}

async fn create_dirs(fs: &mut openssh_sftp_client::fs::Fs, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        if fs.metadata(ancestor).await.is_ok() {
            break;
        }
        missing.push(ancestor.to_path_buf());
    }
    for d in missing.into_iter().rev() {
        fs.create_dir(&d).await?;
    }
    Ok(())
}

impl MasterSpec {
    fn new(host: &str, spec: &HostSpec, policy: KnownHostsPolicy, dir: &Path) -> MasterSpec {
        let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
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
            args.extend(["-i".into(), expand_home(key)]);
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
    async fn start(&self) -> Result<Session> {
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
}

fn expand_home(path: &str) -> String {
    match (path.strip_prefix("~/"), std::env::var("HOME")) {
        (Some(rest), Ok(home)) => format!("{home}/{rest}"),
        _ => path.to_string(),
    }
}

/// Turns ssh's own words into one sentence that says what went wrong and what to do.
pub fn explain_ssh_failure(target: &str, keys: &KeyCommands, log: &str) -> String {
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let has = |s: &str| log.contains(s);
    if has("REMOTE HOST IDENTIFICATION HAS CHANGED") {
        format!(
            "host key verification failed for {target}: its key has CHANGED since it was recorded in known_hosts. \
             If the host was reinstalled, remove the old key ({}) and connect again; otherwise \
             someone may be intercepting the connection",
            keys.remove
        )
    } else if has("Host key verification failed")
        || has("No ED25519 host key is known")
        || has("host key is known")
    {
        format!(
            "host key verification failed for {target}: its key is not in known_hosts. Check the key, then add it \
             ({}), or set `known_hosts: accept-new` in the inventory to record keys seen for the first time",
            keys.add
        )
    } else if has("Permission denied") {
        format!(
            "authentication refused by {target} ({last}): check `user:` and `identity_file:` in the inventory, \
             or load the key into ssh-agent; rigrun never prompts for passwords"
        )
    } else if has("Connection refused") {
        format!("connection refused by {target}: nothing listens on that port; is sshd running?")
    } else if has("Could not resolve hostname") || has("Name or service not known") {
        format!("cannot resolve the address of {target}: check `address:` in the inventory or ~/.ssh/config")
    } else if has("timed out") {
        format!("connection to {target} timed out: the host is down or a firewall drops the traffic")
    } else if last.is_empty() {
        format!("ssh could not connect to {target} (it said nothing)")
    } else {
        format!("ssh could not connect to {target}: {last}")
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

    #[test]
    fn explains_the_common_failures() {
        let t = "root@gpu:22";
        let keys = KeyCommands::new("gpu", None, None);
        let explain = |log: &str| explain_ssh_failure(t, &keys, log);
        assert!(explain("Host key verification failed.\r\n").contains("accept-new"));
        assert!(explain(
            "@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @\nHost key verification failed."
        )
        .contains("CHANGED"));
        assert!(explain("root@gpu: Permission denied (publickey).").contains("identity_file"));
        assert!(explain("ssh: connect to host gpu port 22: Connection refused").contains("sshd"));
        assert!(explain("odd\n").ends_with("odd"));
    }

    #[test]
    fn the_hosts_answer_becomes_a_reason() {
        let full = host_says("/w", 1 << 20, "free 12\n").unwrap();
        assert!(
            full.starts_with("the disk holding /w is full (12 KiB free, 1024 KiB to write)"),
            "{full}"
        );
        let ro = host_says(
            "/w",
            10,
            "cannot sh: 1: cannot create /w/.rigrun-probe-9: Read-only file system\n",
        );
        assert_eq!(
            ro.unwrap(),
            "the file system of /w is read-only there; free space or choose another `workdir:` in the inventory"
        );
        let denied = host_says(
            "/w/x",
            10,
            "missing /w\ncannot sh: 1: cannot create /w/.p: Permission denied\n",
        );
        assert!(denied
            .unwrap()
            .starts_with("permission denied: the login user may not write in /w;"));
        assert_eq!(host_says("/w", 10, "free 999999\n"), None);
    }

    #[test]
    fn key_commands_name_the_port_and_the_file_in_use() {
        let plain = KeyCommands::new("gpu.lab", None, None);
        assert_eq!(plain.remove, "ssh-keygen -R gpu.lab");
        assert_eq!(plain.add, "ssh-keyscan -p 22 gpu.lab >> ~/.ssh/known_hosts");
        let custom = KeyCommands::new("10.0.0.7", Some(2222), Some("/etc/rigrun/known hosts"));
        assert_eq!(
            custom.remove,
            "ssh-keygen -R '[10.0.0.7]:2222' -f '/etc/rigrun/known hosts'"
        );
        assert_eq!(
            custom.add,
            "ssh-keyscan -p 2222 10.0.0.7 >> '/etc/rigrun/known hosts'"
        );
        assert_eq!(KeyCommands::new("h", Some(22), None).remove, "ssh-keygen -R h");
    }

    #[test]
    fn no_sftp_says_both_reasons_and_how_to_quiet_the_shell() {
        let noise = LoginNoise {
            stdout: b"Welcome to gpu\n".to_vec(),
            ..LoginNoise::default()
        };
        let text = no_sftp(
            "gpu",
            Some(&noise),
            &anyhow!("hello message too long"),
            &anyhow!("no sftp-server program on the host"),
        )
        .to_string();
        assert_eq!(
            text,
            "cannot open SFTP on gpu: the sftp subsystem failed (hello message too long) and so \
             did sftp-server started over a command (no sftp-server program on the host). Its \
             login shell prints on stdout (`Welcome to gpu`), which corrupts the sftp subsystem: \
             make ~/.bashrc (or what prints) return early for non-interactive shells, with \
             `[ -z \"$PS1\" ] && return` or `case $- in *i*) ;; *) return;; esac` at its top; or \
             set `Subsystem sftp internal-sftp` in the host's sshd_config, which runs no shell"
        );
    }

    #[test]
    fn any_name_becomes_octal_escapes() {
        assert_eq!(octal_escapes(b"a\n\xff"), "\\141\\012\\377");
    }

    #[test]
    fn sftp_paths_drop_the_home_prefix() {
        assert_eq!(sftp_path("~/.rigrun/x.py"), PathBuf::from(".rigrun/x.py"));
        assert_eq!(sftp_path("/abs/x"), PathBuf::from("/abs/x"));
    }
}
