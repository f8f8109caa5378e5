//! What `{{ rigrun }}` stands for on a host: this binary on a local host; on an SSH host, a
//! rigrun for the host's CPU and C library (see [`choice`]), checked against the host's facts,
//! and sent to its workdir only when the host does not have it yet (the host says its copy's
//! sha256 in the facts' round trip; this side's is computed once per binary), compressed and
//! streamed (see [`upload`]).

mod choice;
mod elf;
mod local_cache;
mod upload;

use anyhow::{Context, Result};

use crate::config::{template, Config, Connection};
use crate::facts::HostFacts;
use crate::steps::HostCtx;
use crate::transport::job_runner;
use local_cache::Known;

pub use choice::host_binaries_dir;

/// Where the rigrun binary lives on an SSH host once uploaded.
const REMOTE_RIGRUN: &str = "bin/rigrun";

/// The lines that, added to the facts' command, tell what an SSH host has of the rigrun copy:
/// whether it runs this rigrun's detached jobs (see `transport::job_runner`) and, when the
/// playbook uses `{{ rigrun }}`, its sha256 and whether gzip is there. None for a local host.
pub fn probe(config: &Config, host: &str) -> Option<String> {
    let spec = config.host(host);
    if spec.connection == Connection::Local {
        return None;
    }
    let path = shell_path(&format!("{}/{REMOTE_RIGRUN}", spec.workdir()));
    let runner = format!(
        "printf 'rigrun_runner\\t%s\\n' \"$(\"$f\" {} --protocol 2>/dev/null)\"",
        job_runner::SUBCOMMAND
    );
    if !config.playbook_uses("rigrun") {
        return Some(format!("f={path}; if [ -x \"$f\" ]; then {runner}; fi\n"));
    }
    let sha256 = template::sha256_command("\"$f\"");
    Some(format!(
        "f={path}; if [ -f \"$f\" ]; then {runner}; \
         printf 'rigrun_sha256\\t%s\\n' \"$( ({sha256}) | cut -d' ' -f1)\"; fi\n\
         command -v gzip >/dev/null 2>&1 && printf 'rigrun_gzip\\tyes\\n'\n"
    ))
}

/// What the host said to [`probe`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HostCopy {
    /// The sha256 of the host's copy; None when it has none.
    pub sha256: Option<String>,
    pub gzip: bool,
    /// Whether the copy runs this rigrun's detached jobs (it speaks the same protocol).
    pub runs_jobs: bool,
}

impl HostCopy {
    /// Read from the facts' output (the lines [`probe`] added).
    pub fn parse(out: &str) -> HostCopy {
        let mut copy = HostCopy::default();
        for line in out.lines() {
            match line.split_once('\t') {
                Some(("rigrun_sha256", sum)) if !sum.trim().is_empty() => {
                    copy.sha256 = Some(sum.trim().to_string())
                }
                Some(("rigrun_gzip", "yes")) => copy.gzip = true,
                Some(("rigrun_runner", said)) => copy.runs_jobs = said.trim() == job_runner::PROTOCOL,
                _ => {}
            }
        }
        copy
    }
}

/// A workdir path as the shell should see it: `~/` becomes `"$HOME"/`, the rest quoted.
fn shell_path(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("\"$HOME\"/{}", template::shell_quote(rest)),
        None if path == "~" => "\"$HOME\"".into(),
        None => template::shell_quote(path),
    }
}

/// The rigrun a host has: where `{{ rigrun }}` points, and what runs the host's detached jobs.
pub struct OnHost {
    pub path: String,
    /// A rigrun that runs this rigrun's jobs (`transport::job_runner`); None: job.sh does.
    pub job_runner: Option<String>,
}

/// The rigrun on this host: this binary for a local host; for an SSH host, the copy in its
/// workdir, sent first when the host lacks it (only when a step uses it). The copy runs the
/// host's jobs when the facts' round trip found it speaks this rigrun's job protocol, or when
/// it is this very binary, sent now.
pub async fn on_host(
    config: &Config,
    host: &str,
    ctx: &HostCtx,
    facts: &HostFacts,
    copy: &HostCopy,
) -> Result<OnHost> {
    let exe = std::env::current_exe().context("cannot find the running rigrun binary")?;
    if config.host(host).connection == Connection::Local {
        return Ok(OnHost {
            path: exe.display().to_string(),
            job_runner: job_runner::this_binary().map(String::from),
        });
    }
    let dest = format!("{}/{REMOTE_RIGRUN}", ctx.workdir);
    let kept = |path: String| OnHost {
        job_runner: copy.runs_jobs.then(|| path.clone()),
        path,
    };
    if !config.playbook_uses("rigrun") {
        return Ok(kept(dest));
    }
    let arch = facts.arch.as_deref().unwrap_or("unknown");
    let named = config.host(host).rigrun_binary.as_deref();
    let (chosen, known) = fitting(host, named, arch, facts.libc.as_deref())
        .await
        .map_err(|why| anyhow::anyhow!("the playbook runs {{{{ rigrun }}}} on {host} ({arch}): {why:#}"))?;
    if copy.sha256.as_deref() == Some(known.sha256.as_str()) {
        return Ok(kept(dest));
    }
    let sent = upload::send(ctx, &chosen.path, &known, copy.gzip, &dest).await?;
    tracing::info!(
        host,
        "sent {} to {dest}: {} bytes{}",
        chosen.path.display(),
        sent.bytes,
        if sent.compressed { " gzip-compressed" } else { "" }
    );
    Ok(OnHost {
        job_runner: (chosen.from == choice::From::ThisRigrun).then(|| dest.clone()),
        path: dest,
    })
}

/// The first candidate binary (see [`choice::candidates`]) that a host of `arch` and `libc`
/// can run, with what is known of it; Err says why each was refused.
async fn fitting(
    host: &str,
    named: Option<&str>,
    arch: &str,
    libc: Option<&str>,
) -> Result<(choice::Choice, Known)> {
    let triple = choice::triple(arch, libc).context(
        "rigrun is not built for this CPU; use the Python script there (playbooks/throughput-sweep.yaml)",
    )?;
    let folder = host_binaries_dir();
    let mut refused = Vec::new();
    for candidate in choice::candidates(named, &triple, folder.as_deref()).map_err(anyhow::Error::msg)? {
        let path = candidate.path.clone();
        let known = tokio::task::spawn_blocking(move || {
            local_cache::known(&path, local_cache::cache_dir().as_deref())
        })
        .await??;
        let fits = choice::check_fits(
            host,
            &candidate,
            &known.binary,
            arch,
            libc,
            &triple,
            folder.as_deref(),
        );
        match fits {
            Ok(()) => return Ok((candidate, known)),
            Err(why) => refused.push(why),
        }
    }
    anyhow::bail!("{}", refused.join("; and "))
}

/// Why an uploaded rigrun does not run on `host`, named from what the host said when it was
/// started, with the way out.
pub(super) fn rigrun_does_not_run(host: &str, said: &str) -> String {
    let glibc = said.split(['`', '\'']).find(|part| part.starts_with("GLIBC_"));
    let cause = if let Some(version) = glibc {
        format!("its glibc is older than this rigrun needs ({version} not found)")
    } else if said.contains("Exec format error") || said.contains("cannot execute binary") {
        "it cannot execute this rigrun's binary format (another CPU architecture or OS)".to_string()
    } else if said.contains("Permission denied") {
        "it may not execute files in the workdir (a noexec mount?)".to_string()
    } else if said.contains("No such file or directory") {
        "the dynamic loader this rigrun needs is missing (a musl system such as Alpine?)".to_string()
    } else {
        "it fails to start".to_string()
    };
    format!(
        "the uploaded rigrun does not run on {host}: {cause}; {}, or use the Python script there \
         (playbooks/throughput-sweep.yaml)",
        choice::build_hint(choice::this_triple(), host_binaries_dir().as_deref())
    )
}

#[cfg(test)]
mod tests {
    use super::{job_runner, rigrun_does_not_run, shell_path, HostCopy};

    #[test]
    fn names_why_rigrun_does_not_run_on_a_host() {
        let glibc = "`'/w/bin/rigrun' --version` exited with 1: /w/bin/rigrun: \
                     /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.39' not found \
                     (required by /w/bin/rigrun)";
        let text = rigrun_does_not_run("old", glibc);
        assert!(
            text.starts_with(
                "the uploaded rigrun does not run on old: its glibc is older than \
                              this rigrun needs (GLIBC_2.39 not found); build one from rigrun's"
            ),
            "{text}"
        );
        assert!(text.ends_with("use the Python script there (playbooks/throughput-sweep.yaml)"));
        let arch = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Exec format error");
        assert!(arch.contains("another CPU architecture"), "{arch}");
        let noexec = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Permission denied");
        assert!(noexec.contains("noexec"), "{noexec}");
    }

    #[test]
    fn reads_what_the_host_has_of_its_copy() {
        let out = "__rigrun_facts__\nhome\t/h\nrigrun_sha256\tab12\nrigrun_gzip\tyes\n";
        let copy = HostCopy::parse(out);
        assert_eq!(copy.sha256.as_deref(), Some("ab12"));
        assert!(copy.gzip);
        assert!(!copy.runs_jobs, "no runner line: job.sh");
        assert_eq!(HostCopy::parse("rigrun_sha256\t\n"), HostCopy::default());
        let runner = |said: &str| HostCopy::parse(&format!("rigrun_runner\t{said}\n")).runs_jobs;
        assert!(runner(job_runner::PROTOCOL));
        assert!(!runner(""), "a copy that does not know job-run");
        assert!(!runner("rigrun-job-run 2"), "another protocol");
        assert_eq!(shell_path("~/w d/bin/rigrun"), "\"$HOME\"/'w d/bin/rigrun'");
        assert_eq!(shell_path("/srv/w"), "/srv/w");
    }
}
