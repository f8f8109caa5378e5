//! Watching one host while a sweep runs: nvidia-smi's sampler as one detached job for the whole
//! sweep (stopped when the watch is dropped), the server's `/metrics` scraped once a second and
//! before and at each record; each record gets the telemetry of its window, and each point's
//! samples are written beside its logs (`<point log>.telemetry.jsonl`).
//!
//! GPU health (`gpu_health.rs`) is taken before the sweep, at each record (which is invalid when
//! the GPUs erred since the last snapshot), at the end of a point that made no record, and after
//! the sweep; each change is said as a notice.
//!
//! Clocks: nvidia-smi stamps samples on the host's clock, points are timed on this machine's.
//! The offset between them is the smallest (arrival − stamp) seen, which is the true offset plus
//! the shortest delivery time (milliseconds over SSH).

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value as Json};
use tokio::task::JoinHandle;

use super::server_metrics::{self, Scrape};
use super::summary::{self, Window, WindowKind};
use super::{dcgm, gpu, gpu_health, problems, prometheus};
use crate::clock::unix_now;
use crate::events::{mark_invalid, Event, EventSender};
use crate::transport::{line_text, HttpEndpoint, Job, JobEnd, Output, Stream, Transport};

/// How often the server is scraped while a point runs.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);
/// The longest a scrape may take before it counts as failed.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a host's GPU telemetry comes from: the inventory's `dcgm_exporter` when it names one,
/// else nvidia-smi when the host's facts found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSource {
    NvidiaSmi,
    Dcgm(String),
    Absent,
}

/// What a sweep can watch on its host.
pub struct Sources {
    pub gpu: GpuSource,
    /// The server's URL as the host sees it (verify-server's `url`).
    pub server_url: Option<String>,
}

/// Who watches: the host's name and where warnings go.
#[derive(Clone)]
struct Teller {
    host: String,
    step: String,
    events: EventSender,
}

impl Teller {
    fn warn(&self, message: String) {
        let _ = self.events.send(Event::Warning {
            host: self.host.clone(),
            message: self.placed(&message),
        });
    }

    /// Something that passed while the sweep went on (the sampler's connection lost and got
    /// back): said once, not kept among the host's warnings.
    fn notice(&self, message: String) {
        let _ = self.events.send(Event::Notice {
            host: self.host.clone(),
            message: self.placed(&message),
        });
    }

    fn placed(&self, message: &str) -> String {
        format!("{} on {}: {message}", self.step, self.host)
    }
}

/// The telemetry of one host during one sweep step.
pub struct Watch {
    teller: Teller,
    gpu: Result<Gpu, String>,
    server: Result<Server, String>,
    health: Result<gpu_health::Tracker, String>,
}

/// nvidia-smi's samples so far, and what went wrong with them.
#[derive(Default)]
struct GpuLog {
    samples: Vec<gpu::GpuSample>,
    /// This machine's clock minus the host's, as far as the samples show.
    offset: Option<f64>,
    unreadable: u64,
    stderr: Option<String>,
    ended: Option<String>,
}

struct Gpu {
    /// `nvidia-smi`, or the exporter's URL.
    source: String,
    log: Arc<Mutex<GpuLog>>,
    task: JoinHandle<()>,
}

struct Server {
    name: &'static str,
    url: String,
    endpoint: Arc<HttpEndpoint>,
    scrapes: Arc<Mutex<Vec<Scrape>>>,
    log: Arc<ScrapeLog>,
    health: Arc<Health>,
    task: JoinHandle<()>,
}

/// How the server's `/metrics` has been answering: failed scrapes counted, and whether the last
/// one (in the background or for a record) was answered. While it is not, a record does not
/// wait for a scrape of its own: a server that hangs costs one timeout, not one per record; the
/// background scrapes keep trying and tell when it answers again.
#[derive(Default)]
struct Health {
    failures: std::sync::atomic::AtomicU64,
    silent: std::sync::atomic::AtomicBool,
}

impl Health {
    fn record(&self, answered: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.silent.store(!answered, Relaxed);
        if !answered {
            self.failures.fetch_add(1, Relaxed);
        }
    }

    fn answering(&self) -> bool {
        !self.silent.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Where a point stands: when it started, when its last record came (this machine's clock) and
/// the scrape that record ended with.
pub struct Mark {
    start: f64,
    since: f64,
    baseline: Option<Scrape>,
    /// The point's label, for what is said of it.
    label: String,
    /// Whether a record of the point had the GPUs' health checked.
    health_checked: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Dropping the job's follower stops nvidia-smi on the host (see transport/job.rs).
        if let Ok(gpu) = &self.gpu {
            gpu.task.abort();
        }
        if let Ok(server) = &self.server {
            server.task.abort();
        }
    }
}

impl Watch {
    /// Starts what `sources` offers: the GPU sampler as job `job` (its raw output in the step's
    /// folder `dir`, `gpu-samples.log`) and the server's scraper once its `/metrics` answered
    /// with names rigrun knows (every scrape in `server-scrapes.jsonl` there). What is not
    /// watched, and why, is in [`Watch::details`].
    pub async fn start(
        transport: Arc<Transport>,
        (host, step, events): (&str, &str, EventSender),
        job: String,
        dir: &Path,
        sources: Sources,
    ) -> Watch {
        let samples_log = &dir.join("gpu-samples.log");
        let teller = Teller {
            host: host.to_string(),
            step: step.to_string(),
            events,
        };
        let health = match sources.gpu {
            GpuSource::Absent => Err("absent: the host has no GPU telemetry".to_string()),
            _ => start_health(&transport, &teller).await,
        };
        let gpu = match sources.gpu {
            GpuSource::NvidiaSmi => start_gpu(transport.clone(), teller.clone(), job, samples_log),
            GpuSource::Dcgm(url) => start_dcgm(&transport, &teller, url).await,
            GpuSource::Absent => Err("absent: the host has no nvidia-smi (and no dcgm_exporter)".to_string()),
        };
        let server = match sources.server_url {
            Some(url) => start_server(&transport, &teller, url, dir)
                .await
                .inspect_err(|why| {
                    teller.warn(format!(
                        "no server telemetry ({}); the records carry no server metrics (rigrun reads \
                     vLLM's, SGLang's and llama.cpp's /metrics; llama-server needs --metrics)",
                        why.trim_start_matches("none: ")
                    ))
                }),
            None => Err("none: no verify-server step before the sweep gave a server URL".into()),
        };
        Watch {
            teller,
            gpu,
            server,
            health,
        }
    }

    /// What was watched, for the step's details in the manifest.
    pub fn details(&self) -> Json {
        let gpu = match &self.gpu {
            Ok(g) => {
                let log = g
                    .log
                    .lock()
                    .map(|l| (l.unreadable, l.ended.clone(), l.stderr.clone()));
                let (unreadable, ended, stderr) = log.unwrap_or_default();
                json!({"source": g.source, "interval_ms": gpu::INTERVAL_MS,
                       "unreadable_lines": unreadable, "ended": ended, "stderr": stderr})
            }
            Err(why) => json!(why),
        };
        let server = match &self.server {
            Ok(s) => json!({"server": s.name, "url": s.url,
                            "failed_scrapes": s.health.failures()}),
            Err(why) => json!(why),
        };
        let health = match &self.health {
            Ok(tracker) => tracker.details(),
            Err(why) => json!(why),
        };
        json!({ "gpu": gpu, "server": server, "gpu_health": health })
    }

    /// Marks the start of point `label`, with the server's counters before it.
    pub async fn point_started(&self, label: &str) -> Mark {
        let now = unix_now();
        let baseline = match &self.server {
            Ok(s) => s.scrape_now(&self.teller).await,
            Err(_) => None,
        };
        Mark {
            start: now,
            since: now,
            baseline,
            label: label.to_string(),
            health_checked: false,
        }
    }

    /// Adds the telemetry of a record's window to its metrics (the benchmark's steady-state
    /// window when it reports one, else since the point started or its previous record), and
    /// the problems it shows; metrics the command reported itself are left as they are.
    pub async fn annotate(&self, mark: &mut Mark, metrics: &mut Map<String, Json>, claims: problems::Claims) {
        let now = unix_now();
        let mut found = Map::new();
        if let Ok(gpu) = &self.gpu {
            if let Ok(log) = gpu.log.lock() {
                let offset = log.offset.unwrap_or(0.0);
                let window = benchmark_window(metrics).unwrap_or(Window {
                    start: mark.since - offset,
                    end: now - offset,
                    kind: WindowKind::Point,
                });
                let tokens = output_tokens(metrics, window.kind);
                found.extend(summary::gpu_metrics(&log.samples, window, tokens));
            }
        }
        if let Ok(server) = &self.server {
            let last = server.scrape_now(&self.teller).await;
            let mut scrapes: Vec<Scrape> = mark.baseline.iter().cloned().collect();
            if let Ok(during) = server.scrapes.lock() {
                scrapes.extend(during.iter().filter(|s| s.t > mark.since && s.t < now).cloned());
            }
            scrapes.extend(last.clone());
            found.extend(server_metrics::summarize(&scrapes));
            mark.baseline = last.or(mark.baseline.take());
        }
        mark.since = now;
        for (name, value) in found {
            metrics.entry(name).or_insert(value);
        }
        let problems = problems::problems(metrics, claims);
        if !problems.is_empty() {
            mark_invalid(metrics, problems);
        }
        self.check_health(&mark.label, Some(metrics)).await;
        mark.health_checked = true;
    }

    /// Takes the GPUs' health: what got worse since the last snapshot marks the record of
    /// `metrics` invalid (when there is one) and is said as a notice.
    async fn check_health(&self, label: &str, metrics: Option<&mut Map<String, Json>>) {
        let Ok(health) = &self.health else { return };
        let said = match health.check().await {
            Ok(said) if said.is_empty() => return,
            Ok(said) => said,
            Err(why) => {
                return self
                    .teller
                    .notice(format!("{label}: GPU health not checked: {why}"))
            }
        };
        let what = said.join("; ");
        let Some(metrics) = metrics else {
            return self
                .teller
                .notice(format!("{label}: the GPUs erred while it ran ({what})"));
        };
        mark_invalid(
            metrics,
            said.iter()
                .map(|c| format!("the GPUs erred while it ran: {c}"))
                .collect(),
        );
        self.teller.notice(format!(
            "{label}: the GPUs erred while it ran ({what}); its record is invalid"
        ));
    }

    /// Takes the GPUs' health after the sweep (kept in [`Watch::details`]); what got worse
    /// since the last record is said.
    pub async fn sweep_finished(&self) {
        let Ok(health) = &self.health else { return };
        match health.finish().await {
            Ok(said) if said.is_empty() => {}
            Ok(said) => self.teller.notice(format!(
                "the GPUs erred after the sweep's last record ({})",
                said.join("; ")
            )),
            Err(why) => self
                .teller
                .notice(format!("GPU health after the sweep not checked: {why}")),
        }
    }

    /// Writes the point's samples (GPU and server, from its start to now) to `path`, one JSON
    /// line each, and forgets those no later point needs. A file that cannot be written is said.
    /// A point that made no record has the GPUs' health checked now.
    pub async fn point_finished(&self, mark: &Mark, path: &Path) {
        if !mark.health_checked {
            self.check_health(&mark.label, None).await;
        }
        let now = unix_now();
        let mut lines = Vec::new();
        if let Ok(gpu) = &self.gpu {
            if let Ok(mut log) = gpu.log.lock() {
                let offset = log.offset.unwrap_or(0.0);
                let (start, end) = (mark.start - offset, now - offset);
                for s in log.samples.iter().filter(|s| s.t >= start && s.t <= end) {
                    lines.push(json!({"source": "gpu", "sample": s}));
                }
                log.samples.retain(|s| s.t > end);
            }
        }
        if let Ok(server) = &self.server {
            if let Ok(mut scrapes) = server.scrapes.lock() {
                for s in scrapes.iter().filter(|s| s.t >= mark.start && s.t <= now) {
                    lines.push(json!({"source": "server", "sample": s}));
                }
                scrapes.retain(|s| s.t > now);
            }
        }
        if lines.is_empty() {
            return;
        }
        if let Err(e) = write_lines(path, &lines) {
            self.teller.warn(format!(
                "cannot write the point's telemetry to {}: {e} (the sweep's samples log keeps the GPU \
                 samples)",
                path.display()
            ));
        }
    }
}

fn write_lines(path: &Path, lines: &[Json]) -> std::io::Result<()> {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    for line in lines {
        serde_json::to_writer(&mut file, line)?;
        file.write_all(b"\n")?;
    }
    file.flush()
}

/// The benchmark's own window on the host's clock, when its record gives one: the steady state
/// (`rigrun bench`'s `steady_state_start_unix` and `steady_state_end_unix`), else the measured
/// phase (`measure_start_unix` and `measure_end_unix`, as `bench_throughput.py` and `rigrun
/// bench` print them).
fn benchmark_window(m: &Map<String, Json>) -> Option<Window> {
    let window = |start: &str, end: &str, kind| {
        let (start, end) = (m.get(start)?.as_f64()?, m.get(end)?.as_f64()?);
        (end > start).then_some(Window { start, end, kind })
    };
    window(
        "steady_state_start_unix",
        "steady_state_end_unix",
        WindowKind::Steady,
    )
    .or_else(|| window("measure_start_unix", "measure_end_unix", WindowKind::Measured))
}

/// Output tokens made in the window: over the steady state, its throughput times its length;
/// over the measured phase, the record's total; over the whole point, none can be said.
fn output_tokens(m: &Map<String, Json>, kind: WindowKind) -> Option<f64> {
    let get = |name: &str| m.get(name).and_then(Json::as_f64);
    match kind {
        WindowKind::Steady => Some(get("steady_state_output_throughput")? * get("steady_state_duration")?),
        WindowKind::Measured => get("total_output_tokens"),
        WindowKind::Point => None,
    }
}

/// Runs nvidia-smi's query loop as a detached job, its lines parsed into the log as they come.
fn start_gpu(
    transport: Arc<Transport>,
    teller: Teller,
    job: String,
    samples_log: &Path,
) -> Result<Gpu, String> {
    let mut raw = std::fs::File::create(samples_log)
        .map_err(|e| format!("not sampled: cannot create {}: {e}", samples_log.display()))?;
    let log = Arc::new(Mutex::new(GpuLog::default()));
    let shared = log.clone();
    let task = tokio::spawn(async move {
        let command = gpu::command(gpu::INTERVAL_MS);
        let mut write_failed = false;
        let mut on_output = |stream: Stream, output: Output| {
            let Output::Line(bytes) = output else { return };
            if stream == Stream::Stdout && !write_failed {
                write_failed = raw.write_all(bytes).and_then(|()| raw.write_all(b"\n")).is_err();
            }
            let line = line_text(bytes);
            gpu_line(&shared, &teller, stream, &line);
        };
        let mut on_warning = |message: String| teller.notice(format!("GPU sampler: {message}"));
        let spec = Job {
            name: &job,
            command: &command,
            timeout: None,
        };
        let ended = match transport.run_job(&spec, &mut on_output, &mut on_warning).await {
            Ok(JobEnd::Exited(code)) => format!("exit code {code}"),
            Ok(JobEnd::TimedOut) => "stopped".into(),
            Err(e) => format!("{e:#}"),
        };
        let stderr = shared.lock().ok().and_then(|mut l| {
            l.ended = Some(ended.clone());
            l.stderr.clone()
        });
        teller.warn(format!(
            "nvidia-smi stopped sampling ({ended}{}); the points after this have no GPU telemetry",
            stderr.map(|s| format!(": {s}")).unwrap_or_default()
        ));
    });
    Ok(Gpu {
        source: "nvidia-smi".into(),
        log,
        task,
    })
}

/// Takes the GPUs' health before the sweep; a host without nvidia-smi is left alone, one whose
/// nvidia-smi fails or whose kernel log cannot be read is said once.
async fn start_health(transport: &Arc<Transport>, teller: &Teller) -> Result<gpu_health::Tracker, String> {
    let tracker = gpu_health::Tracker::start(transport.clone()).await;
    match &tracker {
        Err(why) if why.starts_with("absent") => {}
        Err(why) => teller.notice(format!("GPU health is not checked during the sweep: {why}")),
        Ok(t) if t.before().xid.is_none() => teller.notice(format!(
            "Xid events are {} (ECC, retired pages and remapped rows are checked)",
            t.before().xid_source
        )),
        Ok(_) => {}
    }
    tracker
}

/// Reads the DCGM exporter at `url` once, then as often as nvidia-smi would sample; a URL that
/// does not answer with DCGM fields is said (the inventory names it, so it was wanted).
async fn start_dcgm(transport: &Arc<Transport>, teller: &Teller, url: String) -> Result<Gpu, String> {
    let first = async {
        let endpoint = transport
            .http_endpoint(&url)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let (scrape, _) = fetch_url(&endpoint, &url).await?;
        match dcgm::samples(unix_now(), &scrape).is_empty() {
            true => Err("its reply has no DCGM_FI_DEV_* fields".to_string()),
            false => Ok((endpoint, dcgm::gpus(&scrape))),
        }
    };
    let endpoint = first.await.map_err(|why| {
        teller.warn(format!(
            "the inventory's dcgm_exporter {url} cannot be read ({why}); the sweep has no GPU \
             telemetry (fix the URL, as the host sees it, or remove the key to use nvidia-smi)"
        ));
        format!("none: dcgm_exporter {url}: {why}")
    })?;
    let (endpoint, gpus) = endpoint;
    // The GPUs it describes are facts of the host, as nvidia-smi's would be.
    let _ = teller.events.send(Event::GpusFound {
        host: teller.host.clone(),
        gpus,
        source: format!("DCGM exporter {url}"),
    });
    let log = Arc::new(Mutex::new(GpuLog::default()));
    let task = tokio::spawn(dcgm_loop(endpoint, url.clone(), log.clone()));
    Ok(Gpu {
        source: url,
        log,
        task,
    })
}

/// Scrapes the exporter for as long as the sweep runs (a failed scrape counted as unreadable).
async fn dcgm_loop(endpoint: HttpEndpoint, url: String, log: Arc<Mutex<GpuLog>>) {
    let mut tick = tokio::time::interval(Duration::from_millis(u64::from(gpu::INTERVAL_MS)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let scraped = fetch_url(&endpoint, &url).await;
        let Ok(mut log) = log.lock() else { return };
        match scraped {
            // Stamped here: the host's clock is taken to agree with this machine's (NTP).
            Ok((scrape, _)) => log.samples.extend(dcgm::samples(unix_now(), &scrape)),
            Err(why) => {
                log.unreadable += 1;
                log.stderr = Some(why);
            }
        }
    }
}

/// One line from the sampler: a sample, or said (the first unreadable one; the rest counted).
fn gpu_line(log: &Mutex<GpuLog>, teller: &Teller, stream: Stream, line: &str) {
    let Ok(mut log) = log.lock() else { return };
    if stream == Stream::Stderr {
        log.stderr = Some(line.trim().to_string());
        return;
    }
    match gpu::parse(line) {
        Ok(sample) => {
            let offset = unix_now() - sample.t;
            log.offset = Some(log.offset.map_or(offset, |o| o.min(offset)));
            log.samples.push(sample);
        }
        Err(why) => {
            log.unreadable += 1;
            if log.unreadable == 1 {
                teller.warn(format!(
                    "nvidia-smi printed a line that is not a sample ({why}): {}; such lines are \
                     left out and counted in the step's details (the samples log keeps them)",
                    crate::http_client::excerpt(line.as_bytes())
                ));
            }
        }
    }
}

/// Reads the server's `/metrics` once; watches it when the names are a known server's.
async fn start_server(
    transport: &Arc<Transport>,
    teller: &Teller,
    url: String,
    dir: &Path,
) -> Result<Server, String> {
    let endpoint = Arc::new(
        transport
            .http_endpoint(&url)
            .await
            .map_err(|e| format!("none: {url} cannot be reached: {e:#}"))?,
    );
    let samples = fetch(&endpoint).await.map_err(|why| format!("none: {why}"))?;
    let Some(name) = server_metrics::server_of(&samples.0) else {
        return Err(format!(
            "none: {}/metrics has no vLLM, SGLang or llama.cpp metrics",
            base(&endpoint)
        ));
    };
    report_unreadable(teller, &endpoint, &samples.1);
    let log = Arc::new(ScrapeLog::create(
        &dir.join("server-scrapes.jsonl"),
        teller.clone(),
    ));
    let scrapes = Arc::new(Mutex::new(Vec::new()));
    let health = Arc::new(Health::default());
    let task = tokio::spawn(scrape_loop(
        endpoint.clone(),
        (scrapes.clone(), log.clone()),
        health.clone(),
    ));
    Ok(Server {
        name,
        url,
        endpoint,
        scrapes,
        log,
        health,
        task,
    })
}

/// Once a second for as long as the sweep runs: a scrape kept (a failed one counted).
async fn scrape_loop(
    endpoint: Arc<HttpEndpoint>,
    (scrapes, log): (Arc<Mutex<Vec<Scrape>>>, Arc<ScrapeLog>),
    health: Arc<Health>,
) {
    let mut tick = tokio::time::interval(SCRAPE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match fetch(&endpoint).await {
            Ok((samples, _)) => {
                let scrape = server_metrics::read(unix_now(), &samples);
                log.keep(&scrape);
                if let Ok(mut s) = scrapes.lock() {
                    s.push(scrape);
                }
                health.record(true);
            }
            Err(_) => health.record(false),
        }
    }
}

impl Server {
    /// One scrape now, unless the last one went unanswered; a failure is counted (the point's
    /// metrics then rest on the others).
    async fn scrape_now(&self, teller: &Teller) -> Option<Scrape> {
        if !self.health.answering() {
            return None;
        }
        let fetched = fetch(&self.endpoint).await;
        self.health.record(fetched.is_ok());
        let (samples, unreadable) = fetched.ok()?;
        report_unreadable(teller, &self.endpoint, &unreadable);
        let scrape = server_metrics::read(unix_now(), &samples);
        self.log.keep(&scrape);
        Some(scrape)
    }
}

/// Every scrape of the sweep, one JSON line each (`server-scrapes.jsonl`), whichever point it
/// falls in: the points' files keep theirs, this keeps them all. A file that cannot be
/// written is said once and given up.
struct ScrapeLog {
    file: Mutex<Option<std::io::BufWriter<std::fs::File>>>,
    path: std::path::PathBuf,
    teller: Teller,
}

impl ScrapeLog {
    fn create(path: &Path, teller: Teller) -> ScrapeLog {
        let file = std::fs::File::create(path).map(std::io::BufWriter::new);
        if let Err(e) = &file {
            teller.warn(format!(
                "cannot create {}: {e}; scrapes are kept per point only",
                path.display()
            ));
        }
        ScrapeLog {
            file: Mutex::new(file.ok()),
            path: path.to_path_buf(),
            teller,
        }
    }

    fn keep(&self, scrape: &Scrape) {
        let Ok(mut file) = self.file.lock() else { return };
        let Some(w) = file.as_mut() else { return };
        let written = serde_json::to_writer(&mut *w, scrape)
            .map_err(std::io::Error::from)
            .and_then(|()| w.write_all(b"\n"))
            .and_then(|()| w.flush());
        if let Err(e) = written {
            *file = None;
            self.teller.warn(format!(
                "cannot write {}: {e}; scrapes are kept per point only from here",
                self.path.display()
            ));
        }
    }
}

/// Lines of a `/metrics` reply that could not be read: said, the first of them named.
fn report_unreadable(teller: &Teller, endpoint: &HttpEndpoint, unreadable: &[String]) {
    if let Some(first) = unreadable.first() {
        teller.warn(format!(
            "{}/metrics: {} lines are not Prometheus samples and were left out (first: {first})",
            base(endpoint),
            unreadable.len()
        ));
    }
}

fn base(endpoint: &HttpEndpoint) -> &str {
    endpoint.base_url.trim_end_matches('/').trim_end_matches("/v1")
}

/// `GET /metrics`: its samples and unreadable lines, or why there were none.
async fn fetch(endpoint: &HttpEndpoint) -> Result<(Vec<prometheus::MetricSample>, Vec<String>), String> {
    fetch_url(endpoint, &format!("{}/metrics", base(endpoint))).await
}

/// `GET url` on `endpoint`, read as Prometheus text.
async fn fetch_url(
    endpoint: &HttpEndpoint,
    url: &str,
) -> Result<(Vec<prometheus::MetricSample>, Vec<String>), String> {
    let sent = endpoint.client.send(|c| c.get(url).timeout(SCRAPE_TIMEOUT)).await;
    let reply = sent
        .result
        .map_err(|e| format!("{url}: {}", endpoint.explain(&e)))?;
    let status = reply.status();
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {status}"));
    }
    let text = reply
        .text()
        .await
        .map_err(|e| format!("{url}: {}", endpoint.explain(&e)))?;
    Ok(prometheus::parse(&text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A `/metrics` that stops answering costs one scrape timeout, not one per record.
    #[tokio::test]
    async fn records_do_not_each_wait_for_a_server_that_stopped_answering() {
        // A real listener that accepts connections and never answers, counting them.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for connection in listener.incoming() {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(connection);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let (events, _received) = tokio::sync::mpsc::unbounded_channel();
        let teller = Teller {
            host: "h".into(),
            step: "sweep".into(),
            events,
        };
        let server = Server {
            name: "vllm",
            url: format!("http://{address}"),
            endpoint: Arc::new(HttpEndpoint {
                client: crate::http_client::Client::new(|builder| builder).unwrap(),
                base_url: format!("http://{address}"),
                bridge: None,
            }),
            scrapes: Arc::default(),
            log: Arc::new(ScrapeLog::create(
                &dir.path().join("scrapes.jsonl"),
                teller.clone(),
            )),
            health: Arc::default(),
            task: tokio::spawn(async {}),
        };
        // The first record waits out the timeout; the next ones do not ask again.
        for _ in 0..4 {
            assert!(server.scrape_now(&teller).await.is_none());
        }
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one scrape reached the server"
        );
        assert_eq!(server.health.failures(), 1);
        // Once a background scrape is answered, records scrape again.
        server.health.record(true);
        assert!(server.health.answering());
    }
}
