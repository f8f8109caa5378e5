//! The server a sweep measures, watched while each of its points runs. A server rigrun started
//! that exits, or any server that stops answering while the host itself answers, ends the point
//! at once with the cause (not after the point's timeout). Then the server is started again
//! (rigrun started it: `restarts:`, with back-off) or waited for (it did not: verify-server's
//! `down_for:`), and the sweep goes on — or its remaining points are not run, with the reason.

use std::sync::Arc;
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
    api_key: Option<String>,
    origin: Origin,
    /// The host's boot id when the server was last (re)started: one gone with a reboot since is
    /// lost with it.
    boot_id: std::sync::Mutex<Option<String>>,
    /// The way to the server, made once and made again only when it refuses (a port forward
    /// costs a round trip to the host; one through a replaced SSH master refuses for good).
    endpoint: std::sync::Mutex<Option<Arc<HttpEndpoint>>>,
}

/// Reads the host's boot id (Linux), to tell a dead server from one that went with a reboot.
const BOOT_ID: &str = "cat /proc/sys/kernel/random/boot_id 2>/dev/null || true";

/// What came of a death: the sweep goes on (`Ok`, said in words), or not (`Err`, why).
pub type Recovery = Result<String, String>;

/// Why the server is taken for dead, and whether the host rebooted under it (then the point it
/// measured is lost with the host, not failed).
pub struct Death {
    pub cause: String,
    pub rebooted: bool,
}

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
        Some(SweepServer {
            url,
            api_key,
            origin,
            boot_id: std::sync::Mutex::new(ctx.transport.boot_id()),
            endpoint: std::sync::Mutex::default(),
        })
    }

    /// Whether the server rigrun started is already gone — exited, or the host rebooted since
    /// it started (a reboot that ended the point's own command first) —: then it is started
    /// again before the next attempt.
    pub fn gone(&self, ctx: &HostCtx) -> Option<Death> {
        let Origin::Started(job) = &self.origin else {
            return None;
        };
        if let Some((cause, rebooted)) = Watch::exited(&job.watch()) {
            return Some(Death { cause, rebooted });
        }
        let rebooted = self.rebooted_since(ctx.transport.boot_id().as_deref());
        rebooted.then(|| Death {
            cause: "the host rebooted (its boot id changed), and the server with it".into(),
            rebooted,
        })
    }

    /// Whether `now` (a boot id the host gave) differs from the one the server started under.
    fn rebooted_since(&self, now: Option<&str>) -> bool {
        let before = self.boot_id.lock().expect("boot id").clone();
        let now = now.map(str::trim).filter(|b| !b.is_empty());
        matches!((before.as_deref(), now), (Some(b), Some(n)) if b != n)
    }

    /// Resolves once the server is taken for dead, with why: its process exited on the host, or
    /// it refused [`REFUSALS`] probes in a row while the host itself answered (a busy server
    /// that is slow to answer is not dead; a lost link is the host's failure, not the server's).
    pub async fn died(&self, ctx: &HostCtx) -> Death {
        let mut refused = 0;
        let mut endpoint = self.endpoint(ctx, false).await;
        for tick in 1u32.. {
            tokio::time::sleep(TICK).await;
            if let Origin::Started(job) = &self.origin {
                if let Some((cause, rebooted)) = Watch::exited(&job.watch()) {
                    return Death { cause, rebooted };
                }
            }
            if tick % PROBE_TICKS != 0 {
                continue;
            }
            let key = self.api_key.as_deref();
            let refused_now = match &endpoint {
                Some(e) => refuses(e, key).await,
                None => Some("no port forward to it".into()),
            };
            let Some(why) = refused_now else {
                refused = 0;
                continue;
            };
            // A forward through an SSH master that has since been replaced refuses too: the
            // server is judged through a fresh one.
            endpoint = self.endpoint(ctx, true).await;
            refused += 1;
            if refused < REFUSALS {
                continue;
            }
            // The host answers, so the link is not what failed; its boot id says if it rebooted.
            if let Ok(boot) = ctx.transport.output(BOOT_ID).await {
                let rebooted = self.rebooted_since(Some(&boot));
                let cause = format!("{} stopped answering: {why}", self.url);
                return Death { cause, rebooted };
            }
        }
        unreachable!("the probes go on until the server dies")
    }

    /// A way to the server from here (for SSH hosts a port forward through the current master).
    /// With `fresh`, a new one in place of the one kept.
    async fn endpoint(&self, ctx: &HostCtx, fresh: bool) -> Option<Arc<HttpEndpoint>> {
        let kept = self.endpoint.lock().expect("endpoint").clone();
        if let (Some(kept), false) = (kept, fresh) {
            return Some(kept);
        }
        let made = Arc::new(ctx.transport.http_endpoint(&self.url).await.ok()?);
        *self.endpoint.lock().expect("endpoint") = Some(made.clone());
        Some(made)
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
        if recovery.is_ok() {
            // The boot the server now runs under, as the host says it (rigrun's own record of it
            // may lag behind a reboot).
            let now = ctx.transport.output(BOOT_ID).await.ok();
            let now = now.map(|b| b.trim().to_string()).filter(|b| !b.is_empty());
            *self.boot_id.lock().expect("boot id") = now.or_else(|| ctx.transport.boot_id());
        }
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
        let Some(endpoint) = self.endpoint(ctx, true).await else {
            return Err(format!("no port forward to {} could be made", self.url));
        };
        match wait_until_up(&endpoint, down_for, key, &|| None).await {
            Ok((_, waited)) => Ok(format!("it answered again after {}", super::human(waited))),
            Err(_) => Err(format!(
                "it did not answer again within {} (verify-server's `down_for:`)",
                super::human(down_for)
            )),
        }
    }
}
