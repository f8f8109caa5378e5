//! `fetch-results`: download the files matching a glob on the host into `hosts/<host>/fetched/`,
//! and nowhere else. One command lists every match (type, size, sha256) in one round trip
//! (`listing.rs`); the files then stream to disk (small ones in batches through one `tar`, see
//! `receive.rs`), hashed as they stream, each under a temporary name renamed once it matches the
//! listing. A file that cannot be fetched is listed with why and the others are still fetched;
//! links are followed only when asked, and only inside the glob's directory (`verdict.rs`); names
//! are escaped (`names.rs`). JSON result files become records (`records.rs`; a `vllm bench serve
//! --save-result` file works unchanged). What became of each match goes to a list file as it is
//! known (`report.rs`), so that what stays in memory per file is the listing alone.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::json;

mod listing;
mod names;
mod receive;
mod records;
mod report;
mod verdict;

use super::{HostCtx, StepOutcome};
use crate::config::steps::fetch_results::FetchResultsPlan;
use crate::plan::PlannedStep;
use listing::{list, Entry, Listing};
use names::{anchored, local_name, static_prefix};
use report::Report;
use verdict::{verdict, Verdict};

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
            json!({ "src": pattern, "fetched": 0 }),
        ));
    }
    // hosts/<host>/fetched/, or hosts/<host>/<variant>/fetched/ for a server variant.
    let dest_root = ctx.variant_dir().join("fetched");
    let mut report = Report::create(ctx, step)?;
    let (verdicts, wanted) = classify(
        ctx,
        step,
        &listing,
        &static_prefix(&pattern),
        plan.follow_symlinks,
    );
    let results = receive::fetch_all(&ctx.transport, &wanted, &dest_root, tar.ok()).await;
    // Every match in listing order: the fetched ones with their results, in the order asked.
    let mut fetched = wanted.iter().zip(results);
    for (entry, verdict) in listing.entries.iter().zip(verdicts) {
        if verdict != Verdict::Fetch {
            report.note(entry, verdict);
            continue;
        }
        let Some(((entry, rel), result)) = fetched.next() else {
            break;
        };
        match result {
            Ok(file) => {
                let local = dest_root.join(rel);
                report.fetched(ctx, step, plan.records, (entry, rel, &local), file);
            }
            Err(e) => {
                let failed = Verdict::Fail(format!("{e:#}"));
                Report::say(ctx, step, entry, &failed);
                report.note(entry, failed);
            }
        }
    }
    Ok(report.outcome(ctx, &pattern))
}

/// Each entry's verdict, in listing order (said on the live display when it is not fetched),
/// and the entries to fetch with their local names.
fn classify<'a>(
    ctx: &HostCtx,
    step: &PlannedStep,
    listing: &'a Listing,
    base: &Path,
    follow: bool,
) -> (Vec<Verdict>, Vec<(&'a Entry, PathBuf)>) {
    let mut wanted = Vec::new();
    let verdicts = (listing.entries.iter())
        .map(|entry| {
            let verdict = match verdict(entry, listing, follow) {
                Verdict::Fetch => local_name(&entry.path, base).map_or_else(Verdict::Fail, |rel| {
                    wanted.push((entry, rel));
                    Verdict::Fetch
                }),
                other => other,
            };
            Report::say(ctx, step, entry, &verdict);
            verdict
        })
        .collect();
    (verdicts, wanted)
}
