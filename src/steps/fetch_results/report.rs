//! What the step reports, written as it goes so that nothing per file stays in memory: a line
//! per listed match in `files.jsonl` in the step's folder (fetched, with its size and checksum,
//! or skipped or failed, with why), in listing order; in the step's details (run.json) the
//! counts, the list's path and the first skipped and failed matches; failures on the console and
//! in the step's error.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value as Json};

use super::listing::Entry;
use super::names::escape;
use super::receive::Fetched;
use super::records;
use super::verdict::Verdict;
use crate::events::{Event, Stream};
use crate::plan::PlannedStep;
use crate::steps::{HostCtx, StepOutcome};

/// The list of every match, in the step's folder.
pub(super) const LIST_FILE: &str = "files.jsonl";
/// Failures named in the step's error; the rest are in its details and the list.
const FAILURES_SHOWN: usize = 5;
/// Skipped and failed matches named in the step's details; all of them are in the list.
const DETAILS_SHOWN: usize = 100;

/// The step's account of the matches so far.
pub(super) struct Report {
    list: BufWriter<File>,
    /// The list's path in the run directory, as the details name it.
    list_name: String,
    /// The first error writing the list (a full disk): the step fails with it.
    list_error: Option<std::io::Error>,
    fetched: usize,
    bytes: u64,
    records: usize,
    skipped: Named,
    failed: Named,
    /// The first failures as `name (reason)`, for the step's error.
    failures: Vec<String>,
}

/// Matches of one kind (skipped, failed): the first few as the details show them, and how many.
#[derive(Default)]
struct Named {
    shown: Vec<Json>,
    total: usize,
}

impl Named {
    fn add(&mut self, item: Json) {
        if self.shown.len() < DETAILS_SHOWN {
            self.shown.push(item);
        }
        self.total += 1;
    }
}

impl Report {
    /// Starts the list in the step's folder (a step run again starts it afresh).
    pub(super) fn create(ctx: &HostCtx, step: &PlannedStep) -> Result<Report> {
        let path = ctx.step_dir(step)?.join(LIST_FILE);
        let file = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Report {
            list: BufWriter::new(file),
            list_name: path
                .strip_prefix(&ctx.run_dir)
                .unwrap_or(&path)
                .display()
                .to_string(),
            list_error: None,
            fetched: 0,
            bytes: 0,
            records: 0,
            skipped: Named::default(),
            failed: Named::default(),
            failures: Vec::new(),
        })
    }

    /// Says on the live display that a match is not fetched, and why.
    pub(super) fn say(ctx: &HostCtx, step: &PlannedStep, entry: &Entry, verdict: &Verdict) {
        let (word, reason) = match verdict {
            Verdict::Fetch => return,
            Verdict::Skip(reason) => ("skipped", reason),
            Verdict::Fail(reason) => ("not fetched", reason),
        };
        ctx.emit(Event::Output {
            host: ctx.host.clone(),
            label: step.name.clone(),
            stream: Stream::Stderr,
            line: format!("{word}: {}: {reason}", escape(&entry.path)),
        });
    }

    /// Records a match that is not fetched (skipped or failed).
    pub(super) fn note(&mut self, entry: &Entry, verdict: Verdict) {
        let remote = escape(&entry.path);
        let (outcome, reason) = match verdict {
            Verdict::Fetch => return,
            Verdict::Skip(reason) => ("skipped", reason),
            Verdict::Fail(reason) => ("failed", reason),
        };
        self.write(&json!({ "remote": remote, "outcome": outcome, "reason": reason }));
        let item = json!({ "remote": remote, "reason": reason });
        if outcome == "skipped" {
            self.skipped.add(item);
            return;
        }
        if self.failures.len() < FAILURES_SHOWN {
            self.failures.push(format!("{remote} ({reason})"));
        }
        self.failed.add(item);
    }

    /// Records a file fetched to `local` (and reads its records, when asked).
    pub(super) fn fetched(
        &mut self,
        ctx: &HostCtx,
        step: &PlannedStep,
        read_records: bool,
        (entry, rel, local): (&Entry, &Path, &Path),
        file: Fetched,
    ) {
        let count = match read_records {
            true => records::from_fetched(ctx, step, rel, local, file.bytes),
            false => 0,
        };
        let remote = escape(&entry.path);
        let mut item = json!({
            "remote": remote,
            "outcome": "fetched",
            "local": local.strip_prefix(&ctx.run_dir).unwrap_or(local).display().to_string(),
            "bytes": file.bytes,
            "sha256": hex::encode(file.sha256),
            "records": count,
            // What the received bytes were checked against (see HOST_HASH_LIMIT).
            "verified": if entry.sha256.is_some() { "sha256 from the host" } else { "size and modification time" },
        });
        if remote.as_bytes() != entry.path {
            item["escaped"] = json!(true);
        }
        self.write(&item);
        self.fetched += 1;
        self.bytes += file.bytes;
        self.records += count;
    }

    fn write(&mut self, item: &Json) {
        if self.list_error.is_none() {
            if let Err(e) = writeln!(self.list, "{item}") {
                self.list_error = Some(e);
            }
        }
    }

    /// Ok when every file that should have been fetched was; failed (after fetching the rest)
    /// otherwise, naming the files and why.
    pub(super) fn outcome(mut self, ctx: &HostCtx, pattern: &str) -> StepOutcome {
        let flushed = self.list.flush();
        let mut details = json!({
            "src": pattern,
            "fetched": self.fetched,
            "bytes": self.bytes,
            "records": self.records,
            "list": self.list_name,
            "skipped": self.skipped.shown,
            "failed": self.failed.shown,
        });
        let not_shown = |named: &Named| named.total - named.shown.len();
        if not_shown(&self.skipped) + not_shown(&self.failed) > 0 {
            details["more_in_list"] = json!({
                "skipped": not_shown(&self.skipped), "failed": not_shown(&self.failed),
            });
        }
        if let Some(e) = self.list_error.or(flushed.err()) {
            let error = format!("cannot write {}: {e}", self.list_name);
            return StepOutcome::failed(error, details);
        }
        let (fetched, skipped, failed) = (self.fetched, self.skipped.total, self.failed.total);
        if failed == 0 && fetched > 0 {
            return StepOutcome::ok(details);
        }
        let mut error = if failed == 0 {
            format!(
                "nothing fetched from {}: the {skipped} matches of {pattern} were all skipped",
                ctx.host
            )
        } else {
            format!(
                "{failed} of the files matching {pattern} on {} could not be fetched: {}",
                ctx.host,
                self.failures.join("; ")
            )
        };
        if failed > FAILURES_SHOWN {
            let _ = write!(error, "; {} more in {}", failed - FAILURES_SHOWN, self.list_name);
        }
        let _ = write!(
            error,
            " — {fetched} fetched into hosts/{}/fetched/, {skipped} skipped",
            ctx.host
        );
        StepOutcome::failed(error, details)
    }
}
