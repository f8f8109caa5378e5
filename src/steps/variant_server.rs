//! A server variant's server on one host: started as a detached job of the run (as
//! `start-server` starts one), timed from launch to ready and to the first token of a one-token
//! completion, and stopped for good (TERM, KILL after the grace, its processes gone from the
//! host and from the GPUs) before the next variant starts.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::{json, Value as Json};

use super::server_job::{Launch, ServerJob, Watch};
use super::server_probe::{already_answering, server_facts, smoke, wait_until_up};
use super::verify_server::api_key;
use super::HostCtx;
use crate::config::server_block::ServerPlan;

/// How long the server's follower may take to report the end of a stopped server.
const FOLLOWER_END: Duration = Duration::from_secs(10);

/// A variant's server, running as a job of the run (started again by the sweeps that see it
/// crash). Dropped (Ctrl-C) with the last handle to its job, it is stopped on the host.
pub struct RunningServer {
    pub job: ServerJob,
    grace: Duration,
}

/// A variant that did not come up: why, and what it printed last.
pub struct StartFailure {
    pub reason: String,
    pub details: Json,
}

/// Stops every job of the run still on the host — a server, or a point that measured it, left
/// by a rigrun that was killed (a resumed run's) — and makes sure they are gone, before a
/// variant starts: nothing of the run may share the host with the variant's server.
pub async fn stop_leftovers(ctx: &HostCtx, grace: Duration) -> Result<()> {
    ctx.transport.end_jobs("*", grace).await.map(drop)
}

/// Why the variant cannot start, when something already answers at its URL before its server
/// is launched (the host's own server, left running): it, not the variant, would be measured.
pub async fn already_answered(ctx: &HostCtx, plan: &ServerPlan) -> Result<Option<String>> {
    let key = api_key(plan.api_key_env.as_deref())?;
    let endpoint = ctx.transport.http_endpoint(&plan.url).await?;
    Ok(already_answering(&endpoint, key.as_deref()).await)
}

/// Starts the variant's server and waits until it answers, lists the model and (with `smoke`)
/// returns a token. The server comes back either way, so that the caller stops it.
pub async fn start(ctx: &HostCtx, plan: &ServerPlan) -> Result<(RunningServer, Result<Json, StartFailure>)> {
    let log = ctx.variant_dir().join("server.log");
    std::fs::create_dir_all(ctx.variant_dir())?;
    let launch = Launch {
        name: format!(
            "{}server-{}",
            ctx.job_prefix(),
            &crate::transport::wrapper::new_marker()[9..17]
        ),
        label: "server".into(),
        command: plan.command.clone(),
        url: plan.url.clone(),
        api_key: api_key(plan.api_key_env.as_deref())?,
        wait: plan.wait,
        restarts: plan.restarts,
        log: log.clone(),
    };
    let launched = Instant::now();
    let server = RunningServer {
        job: ServerJob::spawn(ctx, launch)?,
        grace: plan.stop_grace,
    };
    let ready = until_ready(ctx, plan, &server, launched).await;
    let ready = ready.map_err(|reason| StartFailure {
        details: json!({
            "command": plan.command,
            "log": log.strip_prefix(&ctx.run_dir).unwrap_or(&log).display().to_string(),
            "log_tail": Watch::tail(&server.job.watch()),
        }),
        reason,
    });
    Ok((server, ready))
}

/// Launch → ready (and → first token): the startup figures, or why the server is not up.
async fn until_ready(
    ctx: &HostCtx,
    plan: &ServerPlan,
    server: &RunningServer,
    launched: Instant,
) -> Result<Json, String> {
    let text = |e: anyhow::Error| format!("{e:#}");
    let key = api_key(plan.api_key_env.as_deref()).map_err(text)?;
    let endpoint = ctx.transport.http_endpoint(&plan.url).await.map_err(text)?;
    let watch = server.job.watch();
    let gone = move || Watch::gone(&watch);
    let (info, _) = wait_until_up(&endpoint, plan.wait, key.as_deref(), &gone)
        .await
        .map_err(text)?;
    let ready = launched.elapsed().as_secs_f64();
    let model = match &plan.model {
        Some(m) if !info.models.contains(m) => {
            return Err(format!(
                "model `{m}` is not served at {}; it serves: {}",
                plan.url,
                info.models.join(", ")
            ))
        }
        Some(m) => m.clone(),
        None => info.models.first().cloned().unwrap_or_default(),
    };
    // What the server says of itself, as verify-server records it: the facts of the variant.
    let facts = server_facts(&endpoint, key.as_deref(), &info.reply).await;
    let mut startup = json!({ "ready_seconds": ready, "models": info.models,
                              "max_model_len": info.max_model_len, "server_facts": facts });
    if plan.smoke {
        smoke(&endpoint, &model, 1, key.as_deref()).await.map_err(text)?;
        startup["first_token_seconds"] = json!(launched.elapsed().as_secs_f64());
    }
    Ok(startup)
}

/// Stops the server for good (and every job it was restarted as): TERM, KILL after its grace,
/// then waits until its process group is gone and no pid of it is on the GPUs (job.sh `end`).
/// What it reports goes in the details.
pub async fn stop(ctx: &HostCtx, server: RunningServer) -> Result<Json> {
    let started = Instant::now();
    let jobs = format!("{}*", server.job.launch().name);
    let groups = ctx.transport.end_jobs(&jobs, server.grace).await?;
    if let Some(task) = server.job.take_task() {
        // The follower ends once the job's group is gone; a follower stuck on a lost link is
        // dropped, which says `stop` once more.
        let aborter = task.abort_handle();
        if tokio::time::timeout(FOLLOWER_END, task).await.is_err() {
            aborter.abort();
        }
    }
    Ok(json!({
        "process_group": groups.first(),
        "stop_seconds": started.elapsed().as_secs_f64(),
    }))
}
