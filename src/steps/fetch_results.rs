//! `fetch-results`: download the files matching a glob on the host into `hosts/<host>/fetched/`,
//! and nowhere else. Sizes and checksums are verified; JSON result files become records (so a
//! `vllm bench serve --save-result` file works unchanged).

use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use indexmap::IndexMap;
use serde_json::{json, Value as Json};

use super::copy_script::sha256_hex;
use super::run_sweep::parse_record;
use super::{HostCtx, StepOutcome};
use crate::config::steps::fetch_results::FetchResultsPlan;
use crate::config::template::shell_quote;
use crate::events::RecordStatus;
use crate::plan::PlannedStep;
use crate::store::RunDir;

/// One file the host listed: size, checksum (empty when the host has no sha256 tool), path.
struct Listed {
    size: u64,
    sha256: String,
    path: String,
}

pub async fn run(ctx: &mut HostCtx, step: &PlannedStep, plan: &FetchResultsPlan) -> Result<StepOutcome> {
    let pattern = ctx.resolve(&plan.src);
    let listed = list(ctx, &pattern).await?;
    if listed.is_empty() {
        return Ok(StepOutcome::failed(
            format!(
                "no file on {} matches {pattern} (did the command write its results there?)",
                ctx.host
            ),
            json!({ "src": pattern, "files": [] }),
        ));
    }
    let base = static_prefix(&pattern);
    let dest_root = RunDir::host_dir(&ctx.run_dir, &ctx.host).join("fetched");
    let mut files = Vec::new();
    for item in &listed {
        let rel = safe_relative(&item.path, &base)?;
        let local = dest_root.join(&rel);
        let data = ctx.transport.read_file(&item.path).await?;
        verify(item, &data)?;
        if let Some(parent) = local.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&local, &data).with_context(|| format!("cannot write {}", local.display()))?;
        let count = if plan.records {
            record_file(ctx, step, &rel, &data)
        } else {
            0
        };
        files.push(json!({
            "remote": item.path,
            "local": local.strip_prefix(&ctx.run_dir).unwrap_or(&local).display().to_string(),
            "bytes": data.len(),
            "sha256": sha256_hex(&data),
            "records": count,
        }));
    }
    Ok(StepOutcome::ok(json!({ "src": pattern, "files": files })))
}

async fn list(ctx: &HostCtx, pattern: &str) -> Result<Vec<Listed>> {
    let command = format!(
        "for f in {}; do [ -f \"$f\" ] || continue; \
         s=$(wc -c < \"$f\"); h=$( (sha256sum < \"$f\" || shasum -a 256 < \"$f\") 2>/dev/null | cut -c1-64); \
         printf '%s\\t%s\\t%s\\n' $s \"$h\" \"$f\"; done",
        quote_glob(pattern)
    );
    let out = ctx.transport.output(&command).await?;
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_by_cached_key(|l| natural_key(l.rsplit('\t').next().unwrap_or(l)));
    lines
        .into_iter()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.splitn(3, '\t');
            let (size, sha256, path) = (parts.next(), parts.next(), parts.next());
            match (size.and_then(|s| s.trim().parse().ok()), sha256, path) {
                (Some(size), Some(sha), Some(path)) => Ok(Listed {
                    size,
                    sha256: sha.to_string(),
                    path: path.to_string(),
                }),
                _ => bail!("cannot read the file list from {}: `{line}`", ctx.host),
            }
        })
        .collect()
}

/// Orders `c4.json` before `c16.json`: digit runs compare as numbers.
fn natural_key(text: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 {
            key.push((rest[..digits].parse().unwrap_or(u64::MAX), String::new()));
            rest = &rest[digits..];
        } else {
            let word = rest.len() - rest.trim_start_matches(|c: char| !c.is_ascii_digit()).len();
            key.push((0, rest[..word].to_string()));
            rest = &rest[word..];
        }
    }
    key
}

fn verify(item: &Listed, data: &[u8]) -> Result<()> {
    if data.len() as u64 != item.size {
        bail!(
            "{}: received {} bytes, the host listed {} (was it still being written?)",
            item.path,
            data.len(),
            item.size
        );
    }
    if !item.sha256.is_empty() && sha256_hex(data) != item.sha256 {
        bail!(
            "{}: the checksum of the received file differs from the host's",
            item.path
        );
    }
    Ok(())
}

/// Turns a fetched file into records: one JSON object, or JSON lines of objects.
fn record_file(ctx: &HostCtx, step: &PlannedStep, rel: &Path, data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    let mut point = IndexMap::new();
    point.insert("file".to_string(), Json::from(rel.display().to_string()));
    let objects: Vec<_> = match serde_json::from_str::<Json>(text) {
        Ok(Json::Object(map)) => vec![map],
        Ok(_) => Vec::new(),
        Err(_) => {
            let lines: Vec<_> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let parsed: Vec<_> = lines.iter().filter_map(|l| parse_record(l)).collect();
            // JSON lines only when every line is an object; anything else is not a result file.
            if parsed.len() == lines.len() {
                parsed
            } else {
                Vec::new()
            }
        }
    };
    for metrics in &objects {
        ctx.record(step, &point, metrics.clone(), RecordStatus::Ok, None);
    }
    objects.len()
}

fn is_glob_char(c: char) -> bool {
    matches!(c, '*' | '?' | '[')
}

/// Quotes everything in a glob except its wildcards, so the host's shell expands only those.
pub fn quote_glob(pattern: &str) -> String {
    let mut out = String::new();
    let mut literal = String::new();
    let mut chars = pattern.chars().peekable();
    let flush = |literal: &mut String, out: &mut String| {
        if !literal.is_empty() {
            out.push_str(&shell_quote(literal));
            literal.clear();
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '*' | '?' => {
                flush(&mut literal, &mut out);
                out.push(c);
            }
            '[' => {
                let class: String = chars.clone().take_while(|&c| c != ']').collect();
                let closed = chars.clone().nth(class.len()) == Some(']');
                let simple = !class.is_empty()
                    && class
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-!^".contains(c));
                if closed && simple {
                    flush(&mut literal, &mut out);
                    out.push('[');
                    out.push_str(&class);
                    out.push(']');
                    chars.nth(class.len());
                } else {
                    literal.push('[');
                }
            }
            _ => literal.push(c),
        }
    }
    flush(&mut literal, &mut out);
    out
}

/// The folder part of a glob before its first wildcard: fetched names are relative to it.
fn static_prefix(pattern: &str) -> PathBuf {
    let mut base = PathBuf::new();
    for part in Path::new(pattern).parent().into_iter().flat_map(Path::components) {
        if part.as_os_str().to_string_lossy().contains(is_glob_char) {
            break;
        }
        base.push(part);
    }
    base
}

/// The name a fetched file gets under `fetched/`; refuses anything that would land outside.
fn safe_relative(remote: &str, base: &Path) -> Result<PathBuf> {
    let path = Path::new(remote);
    let rel = path.strip_prefix(base).unwrap_or(path);
    let mut clean = PathBuf::new();
    for part in rel.components() {
        match part {
            Component::Normal(p) => clean.push(p),
            Component::CurDir => {}
            _ => bail!("refusing to fetch `{remote}`: its name would place it outside the run directory"),
        }
    }
    if clean.as_os_str().is_empty() {
        bail!("refusing to fetch `{remote}`: it has no file name");
    }
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_keep_wildcards_and_quote_the_rest() {
        assert_eq!(
            quote_glob("/root/.rigrun/results/*.json"),
            "/root/.rigrun/results/*.json"
        );
        assert_eq!(quote_glob("/my dir/r?.json"), "'/my dir/r'?.json");
        assert_eq!(quote_glob("/x/$(reboot)/*.json"), "'/x/$(reboot)/'*.json");
        assert_eq!(quote_glob("/x/c[0-9].json"), "/x/c[0-9].json");
        assert_eq!(quote_glob("/x/[$(id)].json"), "'/x/[$(id)].json'");
    }

    #[test]
    fn files_are_listed_in_natural_order() {
        let mut names = vec!["r/c16.json", "r/c1.json", "r/c256.json", "r/c4.json"];
        names.sort_by_cached_key(|n| natural_key(n));
        assert_eq!(names, ["r/c1.json", "r/c4.json", "r/c16.json", "r/c256.json"]);
    }

    #[test]
    fn fetched_names_stay_inside() {
        let base = static_prefix("/w/results/*.json");
        assert_eq!(base, PathBuf::from("/w/results"));
        assert_eq!(
            safe_relative("/w/results/a.json", &base).unwrap(),
            PathBuf::from("a.json")
        );
        assert_eq!(
            safe_relative("/w/results/sub/a.json", &base).unwrap(),
            PathBuf::from("sub/a.json")
        );
        assert!(safe_relative("/w/results/../../etc/passwd", &base).is_err());
        assert!(safe_relative("/etc/passwd", &base).is_err());
        assert!(safe_relative("/w/results/x/../../../y", &base).is_err());
    }
}
