//! Helpers for the `rigrun bench` tests: running the real binary's `bench` with its JSON lines
//! parsed, against a real `rigrun sim` (started by `sim_support`).

#![allow(dead_code)]

use serde_json::Value;

pub use crate::sim_support::Sim;

/// What one `rigrun bench` run printed.
pub struct BenchRun {
    pub code: i32,
    /// The JSON lines of stdout.
    pub records: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `rigrun bench --url URL ARGS...`.
pub fn bench(url: &str, args: &[&str]) -> BenchRun {
    let mut all = vec!["bench", "--url", url];
    all.extend_from_slice(args);
    run(&all)
}

/// Runs `rigrun ARGS...`.
pub fn run(args: &[&str]) -> BenchRun {
    let out = crate::common::rigrun()
        .args(args)
        .output()
        .expect("cannot run rigrun");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let records = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    BenchRun {
        code: out.status.code().unwrap_or(-1),
        records,
        stdout,
        stderr,
    }
}

/// What the client says of itself when this shared machine kept it from loading the server as
/// asked: the level is rightly invalid, but that says nothing of what a test that is not about
/// the client's own capacity checks.
const CLIENT_BUSY: &[&str] = &[
    "requested streams were in flight on average",
    "was never reached: at most",
    "the client's CPU was saturated",
];

/// Asserts that every level was measured with no failed request, that the exit code says
/// whether every level was valid (0) or not (1), and that a level is invalid only for the
/// client's own load (`CLIENT_BUSY`); `context` goes into the failure's message.
pub fn assert_measured(run: &BenchRun, context: &str) {
    assert!(!run.records.is_empty(), "{context}: no record: {}", run.stderr);
    let mut all_valid = true;
    for r in &run.records {
        assert_eq!(r["failed"], 0, "{context}: {r}");
        let problems = r["problems"].as_array().cloned().unwrap_or_default();
        let busy = |p: &Value| CLIENT_BUSY.iter().any(|b| p.as_str().unwrap_or("").contains(b));
        assert!(problems.iter().all(busy), "{context}: {r}");
        all_valid &= r["valid"] == true;
    }
    let expected = if all_valid { 0 } else { 1 };
    assert_eq!(run.code, expected, "{context}: {}", run.stderr);
}

/// A numeric metric of a record.
pub fn num(record: &Value, key: &str) -> f64 {
    record[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {record}"))
}

/// An HTTP server on a thread of its own, stopped when dropped.
pub struct TestServer {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    pub fn start(app: axum::Router) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = serve_on_thread(move |listener| async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        TestServer {
            base: format!("http://{addr}"),
            stop: Some(stop),
        }
    }
}

/// Runs `serve` on a loopback listener of its own, in a runtime on a thread of its own (so that
/// tests which block still get answered); returns the listener's address once it listens.
pub fn serve_on_thread<F, Fut>(serve: F) -> std::net::SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            serve(listener).await;
        });
    });
    addr_rx.recv().unwrap()
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
