//! `start-server`: start a long-running server on the host (`{{ rigrun }} sim ...`,
//! `python -m sglang.launch_server ...`), wait until its `url` answers, keep its log, and stop it
//! when the playbook ends on that host unless `keep: true`.
//!
//! A server that is not kept runs as a detached job of the run, as a sweep point does: a lost
//! connection does not stop it (rigrun reconnects and follows its log again); the end of the
//! host's playbook, Ctrl-C or rigrun's lease running out does. A kept server is started in its
//! own session, logging on the host, and left running.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use serde_json::json;
use tokio::task::JoinHandle;

use super::server_probe::{already_answering, wait_until_up};
use super::{HostCtx, StepOutcome};
use crate::config::steps::start_server::StartServerPlan;
use crate::config::template::shell_quote;
use crate::events::Event;
use crate::plan::PlannedStep;
use crate::transport::wrapper::new_marker;
use crate::transport::{line_text, Job, JobEnd, Output};

const TAIL_LINES: usize = 20;

/// Lines of its log quoted when a server exits before answering.
const GONE_LINES: usize = 5;

/// A server rigrun keeps running for the rest of the host's playbook.
pub struct BackgroundServer {
    pub name: String,
    task: JoinHandle<()>,
}

impl BackgroundServer {
    /// Drops the server's follower, which tells the host to stop it (see `transport/job.rs`).
    pub fn stop(self) {
        self.task.abort();
    }
}

/// The last lines the server printed, and how it ended if it did.
#[derive(Default)]
pub(super) struct Watch {
    tail: VecDeque<String>,
    ended: Option<String>,
}

impl Watch {
    /// Why the server is gone, with its last lines; None while it runs.
    pub(super) fn gone(watch: &Mutex<Watch>) -> Option<String> {
        let w = watch.lock().ok()?;
        let ended = w.ended.clone()?;
        // Its last words, where a bad flag or an out-of-memory error is said.
        let said: Vec<&String> = w.tail.iter().filter(|l| !l.trim().is_empty()).collect();
        let tail: Vec<&str> = said[said.len().saturating_sub(GONE_LINES)..]
            .iter()
            .map(|l| l.as_str())
            .collect();
        Some(format!(
            "the server exited ({ended}); its last lines: {}",
            tail.join(" | ")
        ))
    }

    /// The last lines the server printed (at most [`TAIL_LINES`]).
    pub(super) fn tail(watch: &Mutex<Watch>) -> Vec<String> {
        watch
            .lock()
            .map(|w| w.tail.iter().cloned().collect())
            .unwrap_or_default()
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
    let watch = Arc::new(Mutex::new(Watch::default()));
    let (task, detached) = if plan.keep {
        (None, Some(start_detached(ctx, step, command).await?))
    } else {
        (
            // Never attached to by a resumed run: a server is started anew.
            Some(spawn_job(
                ctx,
                &format!("s{:02}-server-{}", step.index + 1, &new_marker()[9..17]),
                (&step.name, command),
                &log_path,
                watch.clone(),
            )?),
            None,
        )
    };
    let gone = {
        let watch = watch.clone();
        move || Watch::gone(&watch)
    };
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

/// Runs the server as the run's detached job `name` (see `transport/job.rs`: it outlives a
/// lost connection and is followed again); its output goes to `log_path` here, its warnings
/// are said under `label`. Aborting the task stops it on the host.
pub(super) fn spawn_job(
    ctx: &HostCtx,
    name: &str,
    (label, command): (&str, &str),
    log_path: &std::path::Path,
    watch: Arc<Mutex<Watch>>,
) -> Result<JoinHandle<()>> {
    let mut log = std::fs::File::create(log_path)?;
    let transport = ctx.transport.clone();
    let (name, command) = (name.to_string(), command.to_string());
    let (events, host, label) = (ctx.events.clone(), ctx.host.clone(), label.to_string());
    Ok(tokio::spawn(async move {
        let tail_watch = watch.clone();
        let mut on_output = move |_stream, output: Output| {
            let Output::Line(line) = output else { return };
            let line = line_text(line);
            let _ = writeln!(log, "{line}");
            if let Ok(mut w) = tail_watch.lock() {
                if w.tail.len() == TAIL_LINES {
                    w.tail.pop_front();
                }
                w.tail.push_back(line.into_owned());
            }
        };
        // The connection lost and got back: said once.
        let mut on_warning = |message: String| {
            let _ = events.send(Event::Notice {
                host: host.clone(),
                message: format!("{label}: {message}"),
            });
        };
        let job = Job {
            name: &name,
            command: &command,
            timeout: None,
        };
        let ended = match transport.run_job(&job, &mut on_output, &mut on_warning).await {
            Ok(JobEnd::Exited(code)) => format!("exit code {code}"),
            Ok(JobEnd::TimedOut) => "stopped".to_string(),
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
