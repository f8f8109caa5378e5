//! The host's SFTP session, opened on first use: through the `sftp` subsystem, or through
//! sftp-server started over a command behind a marker when a login shell prints on stdout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use openssh::Session;
use openssh_sftp_client::{Sftp, SftpOptions};

use super::{read_text, SshTransport};
use crate::transport::login_noise::{self, LoginNoise, SkipThrough};

/// Longest an SFTP handshake may take; a stream corrupted by a login shell's output can make
/// the client wait for a packet that never comes.
const SFTP_HANDSHAKE: Duration = Duration::from_secs(30);

impl SshTransport {
    /// The open SFTP session without checking the master again: fetching 10,000 files must not
    /// cost a control-socket round trip each (a master lost meanwhile fails them with the reason).
    pub(super) async fn sftp_open(&self) -> Result<Arc<Sftp>> {
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
    pub(super) async fn sftp(&self) -> Result<Arc<Sftp>> {
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

/// SFTP resolves relative paths against the login directory, which is what `~/` means.
pub(super) fn sftp_path(path: &str) -> PathBuf {
    PathBuf::from(path.strip_prefix("~/").unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn sftp_paths_drop_the_home_prefix() {
        assert_eq!(sftp_path("~/.rigrun/x.py"), PathBuf::from(".rigrun/x.py"));
        assert_eq!(sftp_path("/abs/x"), PathBuf::from("/abs/x"));
    }
}
