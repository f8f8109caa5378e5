//! `fetch-results`: download the files matching a glob on the host into `hosts/<host>/fetched/`,
//! and nowhere else. One command lists every match (type, size, sha256) in one round trip
//! (`listing.rs`); the files then stream to disk (small ones in batches through one `tar`, see
//! `receive.rs`), hashed as they stream, each under a temporary name renamed once it matches the
//! listing. A file that cannot be fetched is listed with why and the others are still fetched;
//! links are followed only when asked, and only inside the glob's directory (`verdict.rs`); names
//! are escaped (`names.rs`). JSON result files become records (`records.rs`; a `vllm bench serve
//! --save-result` file works unchanged).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value as Json};

mod listing;
mod names;
mod receive;
mod records;
mod verdict;

use super::{HostCtx, StepOutcome};
use crate::config::steps::fetch_results::FetchResultsPlan;
use crate::events::{Event, Stream};
use crate::plan::PlannedStep;
use listing::{list, Entry, Listing};
use names::{anchored, escape, local_name, static_prefix};
use verdict::{verdict, Verdict};

/// Failures named in the step's error; the rest are in its details.
const FAILURES_SHOWN: usize = 5;

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &FetchResultsPlan) -> Result<StepOutcome> {
    let pattern = anchored(&ctx.resolve(&plan.src));
    // The tar for small files starts with the listing: its shell's start-up overlaps it.
    let (listing, tar) = tokio::join!(
        list(ctx, &pattern, plan.follow_symlinks),
        ctx.transport.start_tar()
    );
    let listing = listing?;
    if listing.entries.is_empty() {
        return Ok(StepOutcome::failed(
            format!(
                "no file on {} matches {pattern} (did the command write its results there?)",
                ctx.host
            ),
            json!({ "src": pattern, "files": [] }),
        ));
    }
    // hosts/<host>/fetched/, or hosts/<host>/<variant>/fetched/ for a server variant.
    let dest_root = ctx.variant_dir().join("fetched");
    let mut report = Report::default();
    let wanted = classify(
        ctx,
        step,
        &listing,
        &static_prefix(&pattern),
        plan.follow_symlinks,
        &mut report,
    );
    let results = receive::fetch_all(&ctx.transport, &wanted, &dest_root, tar.ok()).await;
    for ((entry, rel), result) in wanted.iter().zip(results) {
        match result {
            Ok(fetched) => report.fetched(ctx, step, plan.records, entry, rel, fetched),
            Err(e) => report.note(ctx, step, entry, Verdict::Fail(format!("{e:#}"))),
        }
    }
    Ok(report.outcome(ctx, &pattern))
}

/// The entries to fetch with their local names; the others go to the report with why.
fn classify<'a>(
    ctx: &HostCtx,
    step: &PlannedStep,
    listing: &'a Listing,
    base: &Path,
    follow: bool,
    report: &mut Report,
) -> Vec<(&'a Entry, PathBuf)> {
    let mut wanted = Vec::new();
    for entry in &listing.entries {
        let verdict = match verdict(entry, listing, follow) {
            Verdict::Fetch => local_name(&entry.path, base).map_or_else(Verdict::Fail, |rel| {
                wanted.push((entry, rel));
                Verdict::Fetch
            }),
            other => other,
        };
        report.note(ctx, step, entry, verdict);
    }
    wanted
}

/// What the step reports: files fetched, skipped and failed, in listing order.
#[derive(Default)]
struct Report {
    files: Vec<Json>,
    skipped: Vec<Json>,
    failed: Vec<Json>,
    /// Failures as `name (reason)`, for the step's error.
    failures: Vec<String>,
}

impl Report {
    /// Records a file that is not fetched (skipped or failed) and says so on the live display.
    fn note(&mut self, ctx: &HostCtx, step: &PlannedStep, entry: &Entry, verdict: Verdict) {
        let remote = escape(&entry.path);
        let (list, word, reason) = match verdict {
            Verdict::Fetch => return,
            Verdict::Skip(reason) => (&mut self.skipped, "skipped", reason),
            Verdict::Fail(reason) => {
                self.failures.push(format!("{remote} ({reason})"));
                (&mut self.failed, "not fetched", reason)
            }
        };
        list.push(json!({ "remote": remote, "reason": reason }));
        ctx.emit(Event::Output {
            host: ctx.host.clone(),
            label: step.name.clone(),
            stream: Stream::Stderr,
            line: format!("{word}: {remote}: {reason}"),
        });
    }

    fn fetched(
        &mut self,
        ctx: &HostCtx,
        step: &PlannedStep,
        records: bool,
        entry: &Entry,
        rel: &Path,
        file: receive::Fetched,
    ) {
        let count = if records {
            records::from_fetched(ctx, step, rel, &file.local, file.bytes)
        } else {
            0
        };
        let remote = escape(&entry.path);
        let mut item = json!({
            "remote": remote,
            "local": file.local.strip_prefix(&ctx.run_dir).unwrap_or(&file.local).display().to_string(),
            "bytes": file.bytes,
            "sha256": file.sha256,
            "records": count,
            // What the received bytes were checked against (see HOST_HASH_LIMIT).
            "verified": if entry.sha256.is_some() { "sha256 from the host" } else { "size and modification time" },
        });
        if remote.as_bytes() != entry.path {
            item["escaped"] = json!(true);
        }
        self.files.push(item);
    }

    /// Ok when every file that should have been fetched was; failed (after fetching the rest)
    /// otherwise, naming the files and why.
    fn outcome(self, ctx: &HostCtx, pattern: &str) -> StepOutcome {
        let details = json!({
            "src": pattern, "files": self.files, "skipped": self.skipped, "failed": self.failed,
        });
        let (fetched, skipped) = (self.files.len(), self.skipped.len());
        if self.failures.is_empty() && fetched > 0 {
            return StepOutcome::ok(details);
        }
        let mut error = if self.failures.is_empty() {
            format!(
                "nothing fetched from {}: the {skipped} matches of {pattern} were all skipped",
                ctx.host
            )
        } else {
            format!(
                "{} of the files matching {pattern} on {} could not be fetched: {}",
                self.failures.len(),
                ctx.host,
                self.failures[..self.failures.len().min(FAILURES_SHOWN)].join("; ")
            )
        };
        if self.failures.len() > FAILURES_SHOWN {
            let _ = write!(
                error,
                "; {} more in run.json",
                self.failures.len() - FAILURES_SHOWN
            );
        }
        let _ = write!(
            error,
            " — {fetched} fetched into hosts/{}/fetched/, {skipped} skipped",
            ctx.host
        );
        StepOutcome::failed(error, details)
    }
}
