//! Shared helpers of the `rigrun sim` integration tests: start the real binary on port 0,
//! wait for its "serving" line, and talk HTTP/SSE to it.
#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;

/// The sim's stderr lines, as read.
pub type StderrLines = std::io::Lines<BufReader<std::process::ChildStderr>>;

/// A running `rigrun sim`, killed on drop.
pub struct Sim {
    child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

/// Runs `rigrun` with `args` to completion.
pub fn rigrun(args: &[&str]) -> Output {
    crate::common::rigrun().args(args).output().expect("run rigrun")
}

impl Sim {
    /// Starts `rigrun sim --profile <profile> --port 0 <extra>` and waits until it serves.
    pub fn start(profile: &str, extra: &[&str]) -> Self {
        // Keep draining stderr so the server never blocks on a full pipe.
        Self::spawn(profile, 0, extra, Box::new(|lines| lines.for_each(drop)))
    }

    /// Starts `rigrun sim --profile <profile> --port <port>` and waits until it serves.
    pub fn start_at(profile: &str, port: u16) -> Self {
        Self::spawn(profile, port, &[], Box::new(|lines| lines.for_each(drop)))
    }

    /// [`Sim::start`], handing the stderr lines after the "serving" one to `rest` (on a thread
    /// of its own, which must read them all).
    pub fn start_with_stderr(
        profile: &str,
        extra: &[&str],
        rest: Box<dyn FnOnce(StderrLines) + Send>,
    ) -> Self {
        Self::spawn(profile, 0, extra, rest)
    }

    fn spawn(profile: &str, port: u16, extra: &[&str], rest: Box<dyn FnOnce(StderrLines) + Send>) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rigrun"))
            .args(["sim", "--profile", profile, "--port", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rigrun sim");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let line = lines
            .next()
            .expect("rigrun sim exited before serving")
            .expect("read stderr");
        assert!(
            line.starts_with("rigrun sim: serving "),
            "unexpected first line: {line}"
        );
        let url = line
            .split(" on ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .expect("url in line");
        std::thread::spawn(move || rest(lines));
        Self {
            child,
            base: url.to_string(),
            client: client(),
        }
    }

    /// The process's exit status once it ended by itself, within `deadline`.
    pub fn exit_within(&mut self, deadline: std::time::Duration) -> std::process::ExitStatus {
        let until = Instant::now() + deadline;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < until, "the sim still runs after {deadline:?}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Starts a sim serving the profile YAML `source`, written to a temp file.
    pub fn with_profile(source: &str) -> (Self, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("test-profile.yaml");
        std::fs::write(&path, source).expect("write profile");
        (Self::start(path_str(&path), &[]), dir)
    }

    /// POSTs JSON text to `path`; returns status and parsed body.
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("send");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// GETs `path`; returns status and body text.
    pub async fn get(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("send");
        (resp.status().as_u16(), resp.text().await.expect("body"))
    }

    /// Starts a streamed POST; returns its event reader once the response headers arrived.
    pub async fn stream(&self, path: &str, body: &str) -> Events {
        let sent = Instant::now();
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .body(body.to_string())
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status().as_u16(), 200);
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap_or("").to_string());
        assert_eq!(content_type.as_deref(), Some("text/event-stream"));
        Events {
            resp,
            buf: Vec::new(),
            sent,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A gauge or counter from `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics").await;
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing in:\n{text}"))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A path as UTF-8 text.
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// An HTTP client for plain http (a TLS provider must exist before building one).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().expect("client")
}

/// The SSE events of a streamed response, each with its arrival time.
pub struct Events {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// When the request was sent.
    pub sent: Instant,
}

/// One `data:` event: its payload and when it arrived.
#[derive(Debug, Clone)]
pub struct Event {
    pub data: String,
    pub at: Instant,
}

impl Event {
    /// The payload as JSON (panics on `[DONE]`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("bad chunk {:?}: {e}", self.data))
    }
}

impl Events {
    /// The next event, or `None` at the end of the body. Panics on a malformed frame.
    pub async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let frame: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8(frame).expect("utf-8 event");
                let data = text
                    .strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not a data event: {text:?}"));
                return Some(Event {
                    data: data.trim_end_matches('\n').to_string(),
                    at: Instant::now(),
                });
            }
            match self.resp.chunk().await.expect("read body") {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => {
                    assert!(
                        self.buf.is_empty(),
                        "trailing bytes: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                    return None;
                }
            }
        }
    }

    /// Every remaining event.
    pub async fn all(mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// A catid-style prompt: `n` copies of token 23066.
pub fn catid_prompt(n: usize) -> String {
    serde_json::to_string(&vec![23066; n]).expect("json")
}

/// A profile YAML with the given fields replaced, based on a small fixed server.
pub fn profile_yaml(
    kv_capacity: u64,
    max_model_len: u32,
    batch_ms: f64,
    prefill_per_s: u32,
    chunk: u32,
) -> String {
    format!(
        "model: test/model\n\
         description: test profile\n\
         max_model_len: {max_model_len}\n\
         max_running_requests: 16\n\
         kv_capacity_tokens: {kv_capacity}\n\
         prefill: {{tokens_per_second: {prefill_per_s}, chunk_tokens: {chunk}}}\n\
         decode:\n  batch_ms: [[1, {batch_ms}]]\n  attention_ms: [[0, 0]]\n\
         prefix_cache: {{enabled: true, block_tokens: 16}}\n\
         natural_length: {{min: 8, max: 64}}\n"
    )
}
