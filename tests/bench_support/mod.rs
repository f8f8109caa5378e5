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
