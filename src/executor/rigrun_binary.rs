//! What `{{ rigrun }}` stands for on a host: this binary on a local host; on an SSH host, a copy
//! uploaded to its workdir (only when a step uses it; skipped when unchanged, sha256-checked),
//! after checking that the host can run it, with the cause named when it cannot.

use anyhow::{Context, Result};

use crate::config::steps::StepKind;
use crate::config::{template, Config, Connection};
use crate::steps::{self, HostCtx};

/// Where the rigrun binary lives on an SSH host once uploaded.
const REMOTE_RIGRUN: &str = "bin/rigrun";

/// The path `{{ rigrun }}` stands for on this host: this binary for a local host; for an SSH
/// host, a copy uploaded to its workdir (only when a step uses it; skipped when unchanged).
pub async fn path_on_host(
    config: &Config,
    host: &str,
    ctx: &HostCtx,
    facts: &crate::facts::HostFacts,
) -> Result<String> {
    let exe = std::env::current_exe().context("cannot find the running rigrun binary")?;
    if config.host(host).connection == Connection::Local {
        return Ok(exe.display().to_string());
    }
    let dest = format!("{}/{REMOTE_RIGRUN}", ctx.workdir);
    if !playbook_uses(config, "rigrun") {
        return Ok(dest);
    }
    let host_arch = facts.arch.as_deref().unwrap_or("unknown");
    if host_arch != std::env::consts::ARCH {
        anyhow::bail!(
            "the playbook runs {{{{ rigrun }}}} on {}, but that host is {host_arch} and this \
             rigrun is built for {}; build rigrun for {host_arch}, or use the Python script \
             there (playbooks/throughput-sweep.yaml)",
            host,
            std::env::consts::ARCH
        );
    }
    let data = std::fs::read(&exe).with_context(|| format!("cannot read {}", exe.display()))?;
    steps::upload_if_changed(ctx, &data, &dest, 0o755, None).await?;
    let check = format!("{} --version", template::shell_quote(&dest));
    if let Err(e) = ctx.transport.output(&check).await {
        let said = format!("{e:#}");
        anyhow::bail!("{}; the host said: {said}", rigrun_does_not_run(host, &said));
    }
    Ok(dest)
}

/// Whether any step's template, or the server block's, names `var`.
fn playbook_uses(config: &Config, var: &str) -> bool {
    let server = config.playbook.server.as_ref().map(|s| s as &dyn StepKind);
    let steps = config.playbook.steps.iter().map(|step| step.as_kind());
    server.into_iter().chain(steps).any(|kind| {
        kind.templates()
            .iter()
            .any(|(text, _)| template::variables(&text.value).is_ok_and(|vars| vars.contains(var)))
    })
}

/// Why an uploaded rigrun does not run on `host`, named from what the host said when it was
/// started, with the way out.
fn rigrun_does_not_run(host: &str, said: &str) -> String {
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
        "the uploaded rigrun does not run on {host}: {cause}; build rigrun on a system no newer \
         than that host's, or use the Python script there (playbooks/throughput-sweep.yaml)"
    )
}

#[cfg(test)]
mod tests {
    use super::rigrun_does_not_run;

    #[test]
    fn names_why_rigrun_does_not_run_on_a_host() {
        let glibc = "`'/w/bin/rigrun' --version` exited with 1: /w/bin/rigrun: \
                     /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.39' not found \
                     (required by /w/bin/rigrun)";
        let text = rigrun_does_not_run("old", glibc);
        assert!(
            text.starts_with(
                "the uploaded rigrun does not run on old: its glibc is older than \
                              this rigrun needs (GLIBC_2.39 not found); build rigrun on a system"
            ),
            "{text}"
        );
        assert!(text.ends_with("use the Python script there (playbooks/throughput-sweep.yaml)"));
        let arch = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Exec format error");
        assert!(arch.contains("another CPU architecture"), "{arch}");
        let noexec = rigrun_does_not_run("h", "sh: 1: /w/bin/rigrun: Permission denied");
        assert!(noexec.contains("noexec"), "{noexec}");
    }
}
