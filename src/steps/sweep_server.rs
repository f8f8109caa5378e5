//! The server a sweep measures, watched while each of its points runs. A server rigrun started
//! that exits, or any server that stops answering while the host itself answers, ends the point
//! at once with the cause (not after the point's timeout). Then the server is started again
//! (rigrun started it: `restarts:`, with back-off) or waited for (it did not: verify-server's
//! `down_for:`), and the sweep goes on — or its remaining points are not run, with the reason.

use std::time::Duration;

use super::server_job::{ServerJob, Watch};
use super::server_probe::{refuses, wait_until_up};
use super::HostCtx;
use crate::events::Event;
use crate::transport::HttpEndpoint;

/// How often a started server's exit is looked for while a point runs.
const TICK: Duration = Duration::from_millis(250);

/// How often the server is asked whether it still answers (every this many ticks: 1 s).
const PROBE_TICKS: u32 = 4;

/// Refusals in a row that make a server taken for dead (one may be a connection the server
/// closed at that instant).
const REFUSALS: u32 = 2;

/// The server `verify-server` checked last on the host, as the sweeps after it measure it.
#[derive(Clone, Debug)]
pub struct CheckedServer {
    pub url: String,
    pub api_key: Option<String>,
    /// How long it may take to answer again after it stopped answering.
    pub down_for: Duration,
}

/// Who brought the server up, which decides what happens when it dies.
enum Origin {
    /// rigrun started it (`start-server`, a variant's server): started again.
    Started(ServerJob),
    /// It was there (`verify-server`): waited for, up to `down_for`.
    Found { down_for: Duration },
}

/// The server one sweep measures on one host.
pub struct SweepServer {
    url: String,
    endpoint: HttpEndpoint,
    api_key: Option<String>,
    origin: Origin,
}

/// What came of a death: the sweep goes on (`Ok`, said in words), or not (`Err`, why).
pub type Recovery = Result<String, String>;

impl SweepServer {
    /// The server the sweep measures: the variant's; else one `start-server` started (the one at
    /// the URL verify-server checked, when it checked one); else the one verify-server checked.
    /// None when the host has no server rigrun knows of (a sweep of plain commands).
    pub async fn of(ctx: &HostCtx) -> Option<SweepServer> {
        let checked = ctx.checked_server.as_ref();
        let mut jobs = ctx.servers.iter().rev().map(|s| &s.job);
        let started = match checked {
            Some(c) => jobs.find(|job| job.launch().url == c.url),
            None => jobs.next(),
        };
        let started = ctx.variant_server.clone().or(started.cloned());
        let (url, api_key, origin) = match (started, checked) {
            (Some(job), _) => {
                let launch = job.launch();
                (launch.url.clone(), launch.api_key.clone(), Origin::Started(job))
            }
            (None, Some(c)) => (
                c.url.clone(),
                c.api_key.clone(),
                Origin::Found { down_for: c.down_for },
            ),
            (None, None) => return None,
        };
        let endpoint = ctx.transport.http_endpoint(&url).await.ok()?;
        Some(SweepServer {
            url,
            endpoint,
            api_key,
            origin,
        })
    }

    /// Resolves once the server is taken for dead, with why: its process exited on the host, or
    /// it refused [`REFUSALS`] probes in a row while the host itself answered (a busy server
    /// that is slow to answer is not dead; a lost link is the host's failure, not the server's).
    pub async fn died(&self, ctx: &HostCtx) -> String {
        let mut refused = 0;
        for tick in 1u32.. {
            tokio::time::sleep(TICK).await;
            if let Origin::Started(job) = &self.origin {
                if let Some(why) = Watch::exited(&job.watch()) {
                    return why;
                }
            }
            if tick % PROBE_TICKS != 0 {
                continue;
            }
            match refuses(&self.endpoint, self.api_key.as_deref()).await {
                None => refused = 0,
                Some(why) => {
                    refused += 1;
                    if refused >= REFUSALS && ctx.transport.output("true").await.is_ok() {
                        return format!("{} stopped answering: {why}", self.url);
                    }
                }
            }
        }
        unreachable!("the probes go on until the server dies")
    }

    /// After the server died during `point` of `step`: started again or waited for; said as an
    /// event either way (the crash, the restart and its start-up time).
    pub async fn recover(&self, ctx: &HostCtx, (step, point): (&str, &str), cause: &str) -> Recovery {
        let (recovery, ready_seconds) = match &self.origin {
            Origin::Started(job) => match job.restart(ctx).await {
                Ok(ready) => (
                    Ok(format!(
                        "started again (restart {} of {}), ready in {ready:.1} s",
                        job.restarts(),
                        job.launch().restarts
                    )),
                    Some(ready),
                ),
                Err(why) => (Err(why), None),
            },
            Origin::Found { down_for } => (self.wait_for(ctx, *down_for).await, None),
        };
        let outcome = match &recovery {
            Ok(words) => words.clone(),
            Err(why) => format!("{why}; the sweep's remaining points are not run"),
        };
        ctx.emit(Event::ServerCrashed {
            host: ctx.host.clone(),
            variant: ctx.variant_name().map(String::from),
            step: step.to_string(),
            point: point.to_string(),
            cause: cause.to_string(),
            outcome,
            recovered: recovery.is_ok(),
            ready_seconds,
        });
        recovery
    }

    /// A server rigrun did not start: waited for until it answers again, at most `down_for`.
    async fn wait_for(&self, ctx: &HostCtx, down_for: Duration) -> Recovery {
        ctx.emit(Event::Notice {
            host: ctx.host.clone(),
            message: format!(
                "{} stopped answering; waiting up to {} for it to answer again (verify-server's `down_for:`)",
                self.url,
                super::human(down_for)
            ),
        });
        let key = self.api_key.as_deref();
        match wait_until_up(&self.endpoint, down_for, key, &|| None).await {
            Ok((_, waited)) => Ok(format!("it answered again after {}", super::human(waited))),
            Err(_) => Err(format!(
                "it did not answer again within {} (verify-server's `down_for:`)",
                super::human(down_for)
            )),
        }
    }
}
