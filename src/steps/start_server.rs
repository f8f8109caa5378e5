//! `start-server`: start a long-running server on the host (`{{ rigrun }} sim ...`,
//! `python -m sglang.launch_server ...`), wait until its `url` answers, keep its log, and stop it
//! when the playbook ends on that host unless `keep: true`.
//!
//! A server that is not kept runs as an ordinary command whose channel rigrun holds open: when
//! rigrun lets go (end of the host's playbook, Ctrl-C, a lost connection), the wrapper on the
//! host kills its process group. A kept server is started detached, logging on the host.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde_json::json;
use tokio::task::JoinHandle;

use super::http::wait_until_up;
use super::{HostCtx, StepOutcome};
use crate::config::steps::start_server::StartServerPlan;
use crate::config::template::shell_quote;
use crate::plan::PlannedStep;

const TAIL_LINES: usize = 20;

/// A server rigrun keeps running for the rest of the host's playbook.
pub struct BackgroundServer {
    pub name: String,
    task: JoinHandle<()>,
}

impl BackgroundServer {
    /// Lets go of the server's channel, which stops it on the host.
    pub fn stop(self) {
        self.task.abort();
    }
}

/// The last lines the server printed, and how it ended if it did.
#[derive(Default)]
struct Watch {
    tail: VecDeque<String>,
    ended: Option<String>,
}

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &StartServerPlan) -> Result<StepOutcome> {
    let (command, url) = (plan.command.as_str(), plan.url.as_str());
    let log_path = ctx.step_dir(step)?.join("server.log");
    let watch = Arc::new(Mutex::new(Watch::default()));
    let (task, detached) = if plan.keep {
        (None, Some(start_detached(ctx, step, command).await?))
    } else {
        (
            Some(spawn_attached(ctx, command, &log_path, watch.clone())?),
            None,
        )
    };
    let endpoint = ctx.transport.http_endpoint(url).await?;
    let gone = {
        let watch = watch.clone();
        move || {
            let w = watch.lock().ok()?;
            let ended = w.ended.clone()?;
            let tail: Vec<_> = w.tail.iter().rev().take(3).rev().cloned().collect();
            Some(format!(
                "the server exited ({ended}) before answering; its last lines: {}",
                tail.join(" | ")
            ))
        }
    };
    let details = json!({
        "command": command,
        "url": url,
        "log": log_path.strip_prefix(&ctx.run_dir).unwrap_or(&log_path).display().to_string(),
        "remote_log": detached.as_ref().map(|d| &d.log),
        "remote_process_group": detached.as_ref().map(|d| d.pid),
        "keep": plan.keep,
    });
    match wait_until_up(&endpoint, plan.wait, None, &gone).await {
        Ok((info, waited)) => {
            if let Some(task) = task {
                ctx.servers.push(BackgroundServer {
                    name: step.name.clone(),
                    task,
                });
            }
            let mut details = details;
            details["models"] = json!(info.models);
            details["waited_seconds"] = json!(waited.as_secs_f64());
            Ok(StepOutcome::ok(details))
        }
        Err(e) => {
            if let Some(task) = task {
                task.abort();
            }
            Ok(StepOutcome::failed(format!("{e:#}"), details))
        }
    }
}

/// Runs the server as a held command; its output goes to `log_path` here.
fn spawn_attached(
    ctx: &HostCtx,
    command: &str,
    log_path: &std::path::Path,
    watch: Arc<Mutex<Watch>>,
) -> Result<JoinHandle<()>> {
    let mut log = std::fs::File::create(log_path)?;
    let transport = ctx.transport.clone();
    let command = command.to_string();
    Ok(tokio::spawn(async move {
        let tail_watch = watch.clone();
        let mut on_line = move |_stream, line: &str| {
            let _ = writeln!(log, "{line}");
            if let Ok(mut w) = tail_watch.lock() {
                if w.tail.len() == TAIL_LINES {
                    w.tail.pop_front();
                }
                w.tail.push_back(line.to_string());
            }
        };
        let ended = match transport.exec(&command, &mut on_line).await {
            Ok(code) => format!("exit code {code}"),
            Err(e) => format!("{e:#}"),
        };
        if let Ok(mut w) = watch.lock() {
            w.ended = Some(ended);
        }
    }))
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
