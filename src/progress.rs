//! Live progress on stderr: a line per host on a terminal (indicatif), plain prefixed lines
//! otherwise. Output lines of commands are shown prefixed with host and point.

use std::io::IsTerminal;
use std::time::Duration;

use indexmap::IndexMap;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::events::{Event, RecordStatus, Status};

pub struct Progress {
    /// Bars per host on a terminal; None for plain lines.
    bars: Option<(MultiProgress, IndexMap<String, ProgressBar>)>,
    steps: usize,
    /// Whether command output lines are shown (always kept in the run directory).
    show_output: bool,
}

impl Progress {
    pub fn new(hosts: &[String], steps: usize, show_output: bool) -> Progress {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let width = hosts.iter().map(String::len).max().unwrap_or(0);
            let bars = hosts
                .iter()
                .map(|h| {
                    let bar = multi.add(ProgressBar::new_spinner());
                    bar.set_style(style.clone());
                    bar.set_prefix(format!("{h:width$}"));
                    bar.set_message("waiting");
                    bar.enable_steady_tick(Duration::from_millis(120));
                    (h.clone(), bar)
                })
                .collect();
            (multi, bars)
        });
        Progress {
            bars,
            steps,
            show_output,
        }
    }

    fn line(&self, text: String) {
        match &self.bars {
            Some((multi, _)) => {
                let _ = multi.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    fn status(&self, host: &str, text: String) {
        match &self.bars {
            Some((_, bars)) => {
                if let Some(bar) = bars.get(host) {
                    bar.set_message(text);
                }
            }
            None => eprintln!("[{host}] {text}"),
        }
    }

    pub fn show(&mut self, event: &Event) {
        if let Event::Output { .. } = event {
            crate::events::output_backlog::shown();
        }
        match event {
            Event::HostConnecting { host } => self.status(host, "connecting".into()),
            Event::HostConnected { host, facts } => {
                let arch = facts.arch.as_deref().unwrap_or("?");
                let gpus = facts
                    .gpu_count
                    .map(|n| format!(", {n} GPU(s)"))
                    .unwrap_or_default();
                self.status(host, format!("connected ({arch}{gpus})"));
            }
            Event::StepStarted {
                host, index, name, ..
            } => {
                self.status(host, format!("step {}/{}: {name}", index + 1, self.steps));
            }
            Event::PointStarted {
                host,
                step,
                point,
                attempt,
                ..
            } => self.status(host, format!("{step} {point}{}", attempt_note(*attempt))),
            Event::PointFinished {
                host,
                step,
                point,
                status,
                reason,
                seconds,
                attempt,
                variant,
                ..
            } => {
                let host = crate::point::column(host, variant.as_deref());
                let how = match status {
                    RecordStatus::Ok => format!("ok in {seconds:.1}s"),
                    RecordStatus::Skipped => format!("skipped: {}", reason.as_deref().unwrap_or("")),
                    RecordStatus::Failed => format!("FAILED: {}", reason.as_deref().unwrap_or("")),
                    RecordStatus::Lost => format!("lost: {}", reason.as_deref().unwrap_or("")),
                };
                self.line(format!(
                    "[{host}] {step} {point}{}: {how}",
                    attempt_note(*attempt)
                ));
            }
            Event::Output {
                host, label, line, ..
            } if self.show_output => {
                self.line(format!("[{host} {label}] {}", shorten_record(line)));
            }
            Event::StepFinished {
                host,
                index,
                name,
                status,
                error,
                seconds,
                variant,
                ..
            } => {
                let host = crate::point::column(host, variant.as_deref());
                let how = match (status, error) {
                    (Status::Ok, _) => format!("ok ({seconds:.1}s)"),
                    (_, Some(e)) => format!("FAILED: {e}"),
                    _ => "failed".into(),
                };
                self.line(format!(
                    "[{host}] step {}/{} {name}: {how}",
                    index + 1,
                    self.steps
                ));
            }
            Event::HostFinished {
                host,
                status,
                failed_step,
                ..
            } => {
                let text = match (status, failed_step) {
                    (Status::Ok, _) => "done".to_string(),
                    (_, Some(step)) => format!("FAILED at {step}"),
                    _ => "failed".into(),
                };
                if let Some((_, bars)) = &self.bars {
                    if let Some(bar) = bars.get(host) {
                        bar.finish_with_message(text);
                        return;
                    }
                }
                self.status(host, text);
            }
            Event::Warning { host, message } | Event::Notice { host, message } => {
                self.line(format!("[{host}] warning: {message}"))
            }
            Event::VariantStarted { host, variant, .. } => {
                self.line(format!("[{host}] variant {variant}: starting the server"));
            }
            Event::VariantReady {
                host,
                variant,
                error,
                startup,
                ..
            } => self.line(format!(
                "[{host}] variant {variant}: {}",
                startup_text(error, startup)
            )),
            Event::VariantStopped {
                host,
                variant,
                error: Some(e),
                ..
            } => self.line(format!(
                "[{host}] variant {variant}: the server could not be stopped: {e}"
            )),
            Event::Interrupted => self.line("interrupted: stopping the commands on every host…".into()),
            _ => {}
        }
    }

    pub fn finish(&mut self) {
        if let Some((_, bars)) = &self.bars {
            for bar in bars.values().filter(|b| !b.is_finished()) {
                bar.finish();
            }
        }
        self.say_lines_left_out();
    }

    /// Once the run ends: how many output lines the display left out in all, so that every line
    /// printed was shown or counted (the notes before later lines miss those left out last).
    fn say_lines_left_out(&self) {
        let left_out = crate::events::output_backlog::left_out();
        if self.show_output && left_out > 0 {
            self.line(format!(
                "{left_out} output lines not shown in all: the display fell behind (the logs in \
                 the run directory keep every line)"
            ));
        }
    }
}

/// How a variant's server came up: `ready in 4.2s, first token at 4.3s`, or why it did not.
fn startup_text(error: &Option<String>, startup: &serde_json::Value) -> String {
    if let Some(e) = error {
        return format!("FAILED: {e}");
    }
    let secs = |k: &str| startup.get(k).and_then(serde_json::Value::as_f64);
    let mut text = format!("ready in {:.1}s", secs("ready_seconds").unwrap_or_default());
    if let Some(t) = secs("first_token_seconds") {
        text.push_str(&format!(", first token at {t:.1}s"));
    }
    text
}

/// A JSON result line is shown as its headline numbers; the whole record is in the run directory.
fn shorten_record(line: &str) -> String {
    let Ok(serde_json::Value::Object(record)) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
        return line.to_string();
    };
    let headline: Vec<String> = [
        "output_throughput",
        "completed",
        "failed",
        "median_ttft_ms",
        "median_tpot_ms",
    ]
    .iter()
    .filter_map(|k| record.get(*k).map(|v| format!("{k}={v}")))
    .collect();
    match headline.is_empty() {
        true => format!("record with {} metrics", record.len()),
        false => format!("record: {}", headline.join(" ")),
    }
}

/// ` (attempt 2)` after a point run again; nothing for a first attempt.
fn attempt_note(attempt: u32) -> String {
    match attempt {
        1 => String::new(),
        n => format!(" (attempt {n})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_show_their_headline() {
        let line = r#"{"backend": "x", "output_throughput": 22.5, "completed": 3, "failed": 0}"#;
        assert_eq!(
            shorten_record(line),
            "record: output_throughput=22.5 completed=3 failed=0"
        );
        assert_eq!(shorten_record(r#"{"a": 1}"#), "record with 1 metrics");
        assert_eq!(shorten_record("plain log"), "plain log");
    }
}
