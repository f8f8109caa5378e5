//! Records from fetched files: one JSON object, or JSON lines of objects; files named as results
//! that yield none, or only some, are named in a warning.

use std::path::Path;

use indexmap::IndexMap;
use serde_json::Value as Json;

use crate::events::{Event, RecordStatus};
use crate::plan::PlannedStep;
use crate::steps::{record_line, HostCtx};

/// Fetched files up to this size are read back to become records; larger ones are not results.
const MAX_RECORD_FILE: u64 = 64 << 20;

/// The records of a fetched file of `bytes` at `local` (none when it is too big to be a result).
pub(super) fn from_fetched(ctx: &HostCtx, step: &PlannedStep, rel: &Path, local: &Path, bytes: u64) -> usize {
    if bytes > MAX_RECORD_FILE {
        return 0;
    }
    std::fs::read(local).map_or(0, |data| record_file(ctx, step, rel, &data))
}

/// Turns a fetched file into records: one JSON object, or JSON lines of objects. A file named
/// as a result (`.json`, `.jsonl`, `.ndjson`) that yields none, or JSON lines some of which are
/// not records, gets a warning naming the host, the file and the lines: nothing measured is
/// dropped in silence. Other files (logs, CSV) are kept and not read.
fn record_file(ctx: &HostCtx, step: &PlannedStep, rel: &Path, data: &[u8]) -> usize {
    let claimed = rel
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "json" | "jsonl" | "ndjson"));
    let warn = |why: String| {
        ctx.emit(Event::Warning {
            host: ctx.host.clone(),
            message: format!(
                "{}: fetched {}: {why} (the file is kept)",
                step.name,
                rel.display()
            ),
        })
    };
    let Ok(text) = std::str::from_utf8(data) else {
        if claimed {
            warn("it is not UTF-8 text, so no record was read from it".into());
        }
        return 0;
    };
    let objects = match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(map)) => vec![map],
        Ok(_) if claimed => {
            warn("it holds JSON that is not an object, so it is not a record".into());
            Vec::new()
        }
        Ok(_) => Vec::new(),
        Err(_) => json_lines(text, claimed, &warn),
    };
    for metrics in &objects {
        ctx.record(
            step,
            &point_of(rel),
            crate::events::PointRun::once(step.attempt),
            metrics.clone(),
            RecordStatus::Ok,
            None,
        );
    }
    objects.len()
}

/// The records of a JSON-lines file; lines that are not records are named in one warning when
/// others are (or when the file is named as a result).
fn json_lines(text: &str, claimed: bool, warn: &dyn Fn(String)) -> Vec<serde_json::Map<String, Json>> {
    let (mut records, mut not) = (Vec::new(), Vec::new());
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match record_line::read(line) {
            record_line::Line::Record(map) => records.push(map),
            record_line::Line::Unreadable(why) => not.push(format!("line {}: {why}", number + 1)),
            record_line::Line::Log => not.push(format!("line {} is not a JSON object", number + 1)),
        }
    }
    if records.is_empty() {
        if claimed {
            warn(format!(
                "it is neither a JSON object nor JSON lines of objects ({}), so no record was read from it",
                not.first().map_or("it is empty", String::as_str)
            ));
        }
        return records;
    }
    if !not.is_empty() {
        let shown: Vec<&str> = not.iter().take(3).map(String::as_str).collect();
        let more = not.len().saturating_sub(shown.len());
        warn(format!(
            "{} of its lines are records, {} are not ({}{})",
            records.len(),
            not.len(),
            shown.join("; "),
            if more > 0 {
                format!("; {more} more")
            } else {
                String::new()
            }
        ));
    }
    records
}

/// The point a fetched file's records stand at: its path under the glob's folder.
fn point_of(rel: &Path) -> IndexMap<String, Json> {
    let mut point = IndexMap::new();
    point.insert("file".to_string(), Json::from(rel.display().to_string()));
    point
}
