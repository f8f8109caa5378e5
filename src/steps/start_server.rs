//! `start-server`: start a long-running server on the host (`{{ rigrun }} sim ...`,
//! `python -m sglang.launch_server ...`), wait until its `url` answers, keep its log, and stop it
//! when the playbook ends on that host unless `keep: true`.
//!
//! A server that is not kept runs as a detached job of the run, as a sweep point does: a lost
//! connection does not stop it (rigrun reconnects and follows its log again); the end of the
//! host's playbook, Ctrl-C or rigrun's lease running out does. A kept server is started in its
//! own session, logging on the host, and left running.

use anyhow::Result;
use serde_json::json;

use super::server_job::{Launch, ServerJob, Watch};
use super::server_probe::{already_answering, wait_until_up};
use super::{HostCtx, StepOutcome};
use crate::config::steps::start_server::StartServerPlan;
use crate::config::template::shell_quote;
use crate::plan::PlannedStep;
use crate::transport::wrapper::new_marker;

/// A server rigrun keeps running for the rest of the host's playbook.
pub struct BackgroundServer {
    pub name: String,
    /// Shared with the sweeps that measure it (they start it again after a crash).
    pub job: ServerJob,
}

impl BackgroundServer {
    /// Stops following the server, which tells the host to stop it (see `transport/job.rs`).
    pub fn stop(self) {
        self.job.abort();
    }
}

/// Starts the server where nothing answers yet, and waits until it answers with its process
/// still running: a server that cannot bind its port (another one holds it) is not taken for
/// the one that does.
pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &StartServerPlan) -> Result<StepOutcome> {
    let (command, url) = (plan.command.as_str(), plan.url.as_str());
    let endpoint = ctx.transport.http_endpoint(url).await?;
    if let Some(taken) = already_answering(&endpoint, None).await {
        return Ok(StepOutcome::failed(
            taken,
            json!({ "command": command, "url": url }),
        ));
    }
    let log_path = ctx.step_dir(step)?.join("server.log");
    let (job, detached) = if plan.keep {
        (None, Some(start_detached(ctx, step, command).await?))
    } else {
        let launch = Launch {
            // Never attached to by a resumed run: a server is started anew.
            name: format!("s{:02}-server-{}", step.index + 1, &new_marker()[9..17]),
            label: step.name.clone(),
            command: command.to_string(),
            url: url.to_string(),
            api_key: None,
            wait: plan.wait,
            restarts: plan.restarts,
            log: log_path.clone(),
        };
        (Some(ServerJob::spawn(ctx, launch)?), None)
    };
    let watch = job.as_ref().map(ServerJob::watch);
    let gone = move || watch.as_deref().and_then(Watch::gone);
    let details = json!({
        "command": command,
        "url": url,
        "log": log_path.strip_prefix(&ctx.run_dir).unwrap_or(&log_path).display().to_string(),
        "remote_log": detached.as_ref().map(|d| &d.log),
        "remote_process_group": detached.as_ref().map(|d| d.pid),
        "keep": plan.keep,
    });
    let answered = match wait_until_up(&endpoint, plan.wait, None, &gone).await {
        // Answering is not enough: the process launched must be the one that answers.
        Ok(_) if gone().is_some() => Err(anyhow::anyhow!(
            "something else answers at {url}: {} (another server holds the port?)",
            gone().unwrap_or_default()
        )),
        answered => answered,
    };
    match answered {
        Ok((info, waited)) => {
            if let Some(job) = job {
                ctx.servers.push(BackgroundServer {
                    name: step.name.clone(),
                    job,
                });
            }
            let mut details = details;
            details["models"] = json!(info.models);
            details["waited_seconds"] = json!(waited.as_secs_f64());
            Ok(StepOutcome::ok(details))
        }
        Err(e) => {
            if let Some(job) = job {
                job.abort();
            }
            Ok(StepOutcome::failed(format!("{e:#}"), details))
        }
    }
}

/// Where a kept server logs on the host, and its process group there (`kill -TERM -PGID` stops it).
struct Detached {
    log: String,
    pid: u32,
}

/// Starts the server in its own session on the host, logging to a file there.
async fn start_detached(ctx: &HostCtx, step: &PlannedStep, command: &str) -> Result<Detached> {
    let log = format!(
        "{}/logs/{}-{:02}-{}.log",
        ctx.workdir,
        ctx.run_id,
        step.index + 1,
        crate::store::slug(&step.name)
    );
    let q = shell_quote(&log);
    let launcher = format!(
        "mkdir -p \"$(dirname {q})\" && if command -v setsid >/dev/null 2>&1; then s=setsid; else s=nohup; fi; \
         $s sh -c {} > {q} 2>&1 < /dev/null & echo $!",
        shell_quote(command)
    );
    let out = ctx.transport.output(&launcher).await?;
    let pid = out.trim().parse().map_err(|_| {
        anyhow::anyhow!(
            "starting the server on {} printed `{}`, not its process id",
            ctx.host,
            out.trim()
        )
    })?;
    Ok(Detached { log, pid })
}
