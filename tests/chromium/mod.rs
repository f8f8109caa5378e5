//! A real headless Chromium for the report tests, driven over the DevTools protocol through a
//! pipe (`--remote-debugging-pipe`: requests on the browser's fd 3, answers and events on fd 4,
//! each message a JSON text ended by a NUL byte).
//!
//! Why the pipe: it needs no port, no websocket client and no parsing of Chromium's log lines
//! (whose format changes between versions), and the protocol reports exactly what a page does
//! wrong: uncaught exceptions (`Runtime.exceptionThrown`), `console.error` calls, and the
//! browser's own errors such as a blocked or failed resource load or a Content-Security-Policy
//! violation (`Log.entryAdded`). It is also how Puppeteer talks to Chromium by default.

#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// How long any one protocol answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// The Chromium binary: `chromium` (Debian's package) or `chromium-browser`, from PATH.
pub fn chromium_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "chromium is missing: the HTML report is tested in a real headless Chromium; install it with \
         `apt-get install -y chromium` (.ci/run does)"
    );
}

/// What a page did while loading, and what it looks like.
pub struct PageCheck {
    /// Exceptions, `console.error` calls and browser errors, as text.
    pub errors: Vec<String>,
    /// The value of the expression evaluated after the load.
    pub evaluated: Value,
}

pub struct Browser {
    child: Child,
    to_browser: File,
    from_browser: Receiver<Value>,
    next_id: u64,
    session: Option<String>,
    /// The width of the pages' viewport in CSS pixels, when not the window's (1280).
    viewport_width: Option<u32>,
    /// Events that arrived while waiting for answers.
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    /// Starts headless Chromium with a fresh profile and nothing that reaches the network.
    pub fn launch() -> Browser {
        let binary = chromium_binary();
        let profile = tempfile::tempdir().unwrap();
        let (browser_reads, we_write) = pipe();
        let (we_read, browser_writes) = pipe();
        let (r, w) = (browser_reads.as_raw_fd(), browser_writes.as_raw_fd());
        let mut cmd = Command::new(&binary);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only dup2 and fcntl run between fork and exec; both are async-signal-safe.
        // The pipe ends go to fds 3 and 4 through high numbers first, so that neither
        // overwrites the other when one already sits at 3 or 4.
        unsafe {
            cmd.pre_exec(move || {
                let high_r = libc::fcntl(r, libc::F_DUPFD, 10);
                let high_w = libc::fcntl(w, libc::F_DUPFD, 10);
                if high_r < 0 || high_w < 0 || libc::dup2(high_r, 3) < 0 || libc::dup2(high_w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        drop((browser_reads, browser_writes));
        let (tx, rx) = mpsc::channel();
        let reader = File::from(we_read);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(reader);
            let mut buf = Vec::new();
            while matches!(reader.read_until(0, &mut buf), Ok(n) if n > 0) {
                buf.pop();
                if let Ok(message) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(message).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        Browser {
            child,
            to_browser: File::from(we_write),
            from_browser: rx,
            next_id: 0,
            session: None,
            viewport_width: None,
            events: Vec::new(),
            _profile: profile,
        }
    }

    /// Pages opened from now on are laid out `width` CSS pixels wide (a narrow window).
    pub fn set_viewport_width(&mut self, width: u32) {
        self.viewport_width = Some(width);
    }

    /// Sends one command (to the attached page, once there is one) and waits for its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("chromium went away before {method}: {e}"));
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let message = self.next_message(deadline, method);
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
            self.events.push(message);
        }
    }

    fn next_message(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.from_browser.recv_timeout(left) {
            Ok(message) => message,
            Err(_) => panic!(
                "chromium gave no answer to {waiting_for} within {}s (exited: {:?})",
                ANSWER_WITHIN.as_secs(),
                self.child.try_wait()
            ),
        }
    }

    /// Waits for an event of the attached page.
    fn wait_for(&mut self, method: &str) {
        if self.events.iter().any(|e| e["method"] == method) {
            return;
        }
        let deadline = Instant::now() + ANSWER_WITHIN;
        loop {
            let message = self.next_message(deadline, method);
            let found = message["method"] == method;
            self.events.push(message);
            if found {
                return;
            }
        }
    }

    /// Opens `file` in a new page, waits for it to load, collects every error it caused,
    /// evaluates `expression` (which should return JSON-able data) and saves a full-page
    /// screenshot to `screenshot`.
    pub fn check_page(&mut self, file: &Path, expression: &str, screenshot: &Path) -> PageCheck {
        let target = self.call("Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        self.session = attached["sessionId"].as_str().map(str::to_string);
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            self.call(domain, json!({}));
        }
        if let Some(width) = self.viewport_width {
            self.call(
                "Emulation.setDeviceMetricsOverride",
                json!({ "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": false }),
            );
        }
        self.events.clear();
        let url = format!("file://{}", file.canonicalize().unwrap().display());
        let navigated = self.call("Page.navigate", json!({ "url": url }));
        assert!(
            navigated.get("errorText").is_none(),
            "cannot open {url}: {navigated}"
        );
        self.wait_for("Page.loadEventFired");
        let evaluated = self.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        if let Some(e) = evaluated.get("exceptionDetails") {
            panic!("the check expression threw: {e}");
        }
        self.screenshot(screenshot);
        // Anything logged while the checks ran counts too.
        self.call("Runtime.evaluate", json!({ "expression": "0" }));
        PageCheck {
            errors: self.errors(),
            evaluated: evaluated["result"]["value"].clone(),
        }
    }

    /// A full-page PNG.
    fn screenshot(&mut self, path: &Path) {
        let metrics = self.call("Page.getLayoutMetrics", json!({}));
        let size = &metrics["cssContentSize"];
        let (width, height) = (
            size["width"].as_f64().unwrap_or(1280.0),
            size["height"].as_f64().unwrap_or(900.0),
        );
        let shot = self.call(
            "Page.captureScreenshot",
            json!({
                "format": "png",
                "captureBeyondViewport": true,
                "clip": { "x": 0, "y": 0, "width": width, "height": height, "scale": 1 },
            }),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("the screenshot is base64");
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Every error the page caused: exceptions, console errors, browser log errors.
    fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => Some(format!("exception: {}", p["exceptionDetails"])),
                    "Runtime.consoleAPICalled" if matches!(p["type"].as_str(), Some("error" | "assert")) => {
                        Some(format!("console.{}: {}", p["type"], p["args"]))
                    }
                    "Log.entryAdded" if p["entry"]["level"] == "error" => Some(format!(
                        "{} error: {} {}",
                        p["entry"]["source"], p["entry"]["text"], p["entry"]["url"]
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.session = None;
        let mut bytes = serde_json::to_vec(&json!({ "id": 0, "method": "Browser.close" })).unwrap();
        bytes.push(0);
        let _ = self.to_browser.write_all(&bytes);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where test artifacts go: `target/test-artifacts/`.
pub fn artifact(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-artifacts")
        .join(name)
}
