//! Profiles: what a simulated server serves and how fast, read from YAML.
//!
//! Built-in profiles live in `profiles/*.yaml` and are embedded in the binary, so a copy of
//! `rigrun` on a remote host works alone. `--profile` takes a built-in name or a file path.
//! Errors name the file, line and column.

use std::path::Path;

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::perf::{PerfModel, Table};
use super::power::GpuModel;
use super::prefix_cache::PrefixCache;
use super::scheduler::{KvPolicy, Limits, Scheduler};

/// Built-in profiles: name and YAML source.
const BUILTIN: [(&str, &str); 3] = [
    (
        "blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4",
        include_str!("../../profiles/blackwell-8x-rtxpro6000-qwen3.5-397b-nvfp4.yaml"),
    ),
    (
        "a6000-qwen3.6-27b",
        include_str!("../../profiles/a6000-qwen3.6-27b.yaml"),
    ),
    ("tiny", include_str!("../../profiles/tiny.yaml")),
];

/// A profile file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    model: Spanned<String>,
    #[serde(default = "default_owner")]
    owned_by: String,
    description: String,
    max_model_len: Spanned<u32>,
    max_running_requests: Spanned<u32>,
    kv_capacity_tokens: Spanned<u64>,
    /// `reserve` (default) or `on_demand` (as vLLM: may preempt); see `scheduler.rs`.
    #[serde(default)]
    kv_policy: KvPolicy,
    prefill: PrefillFile,
    decode: DecodeFile,
    #[serde(default)]
    prefix_cache: PrefixCacheFile,
    natural_length: Spanned<LengthFile>,
    /// The simulated cards, for DCGM-format telemetry (optional; see `power.rs`).
    #[serde(default)]
    gpu: Option<Spanned<GpuModel>>,
}

/// `prefill:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillFile {
    tokens_per_second: Spanned<f64>,
    chunk_tokens: Spanned<u32>,
}

/// `decode:` section: `[x, y]` point lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeFile {
    batch_ms: Spanned<Vec<(f64, f64)>>,
    attention_ms: Spanned<Vec<(f64, f64)>>,
}

/// `prefix_cache:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefixCacheFile {
    enabled: bool,
    #[serde(default = "default_block_tokens")]
    block_tokens: Spanned<u32>,
}

impl Default for PrefixCacheFile {
    fn default() -> Self {
        Self {
            enabled: false,
            block_tokens: default_block_tokens(),
        }
    }
}

/// `natural_length:` section.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LengthFile {
    min: u32,
    max: u32,
}

fn default_owner() -> String {
    "rigrun".into()
}

fn default_block_tokens() -> Spanned<u32> {
    Spanned::new(
        16,
        serde_saphyr::Location::UNKNOWN,
        serde_saphyr::Location::UNKNOWN,
    )
}

/// A validated profile.
#[derive(Debug, Clone)]
pub struct Profile {
    /// Built-in name, or the file's stem.
    pub name: String,
    /// Model id served.
    pub model: String,
    pub owned_by: String,
    pub description: String,
    pub max_model_len: u32,
    pub limits: Limits,
    pub perf: PerfModel,
    /// Prefix-cache block size, `None` when prefix caching is off.
    pub prefix_block_tokens: Option<u32>,
    /// Where a request ends on its own without `ignore_eos`: `[min, max]` tokens.
    pub natural_length: (u32, u32),
    /// The simulated GPUs, when the profile has a `gpu:` section.
    pub gpu: Option<GpuModel>,
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read profile file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("invalid profile {origin}:{line}:{column}:\n{rendered}")]
    Syntax {
        origin: String,
        line: u64,
        column: u64,
        /// serde-saphyr's message with a source snippet.
        rendered: String,
    },
    #[error("invalid profile {origin}:{line}:{column}: {message}")]
    Invalid {
        origin: String,
        line: u64,
        column: u64,
        message: String,
    },
    #[error("unknown profile '{0}': the built-in profiles are {list}; or give the path of a YAML file", list = builtin_names().join(", "))]
    Unknown(String),
}

impl Profile {
    /// Resolves `--profile`: a built-in name, else a file path.
    pub fn resolve(name_or_path: &str) -> Result<Self, ProfileError> {
        if let Some((name, source)) = BUILTIN.iter().find(|(name, _)| *name == name_or_path) {
            return Self::parse(name, &format!("profiles/{name}.yaml"), source);
        }
        let path = Path::new(name_or_path);
        if !path.exists() && !name_or_path.contains(['/', '.']) {
            return Err(ProfileError::Unknown(name_or_path.into()));
        }
        let source = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: name_or_path.into(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map_or(name_or_path.into(), |s| s.to_string_lossy().into_owned());
        Self::parse(&stem, name_or_path, &source)
    }

    /// All built-in profiles, in listing order.
    pub fn builtins() -> Result<Vec<Self>, ProfileError> {
        BUILTIN.iter().map(|(name, _)| Self::resolve(name)).collect()
    }

    /// Parses and validates `source`; `origin` names it in errors.
    pub fn parse(name: &str, origin: &str, source: &str) -> Result<Self, ProfileError> {
        let file: ProfileFile = serde_saphyr::from_str(source).map_err(|err| {
            let at = err.location().unwrap_or(serde_saphyr::Location::UNKNOWN);
            ProfileError::Syntax {
                origin: origin.into(),
                line: at.line(),
                column: at.column(),
                rendered: err.render_with_options(serde_saphyr::render_options! {
                    source_name: Some(origin),
                }),
            }
        })?;
        file.validate(name)
            .map_err(|(at, message)| ProfileError::Invalid {
                origin: origin.into(),
                line: at.line(),
                column: at.column(),
                message,
            })
    }

    /// A scheduler for this profile's server.
    pub fn scheduler<S>(&self) -> Scheduler<S> {
        let cache = self
            .prefix_block_tokens
            .map(|block| PrefixCache::new(block, self.limits.kv_capacity));
        Scheduler::new(self.perf.clone(), self.limits, cache)
    }
}

/// A validation failure: where, and what.
type Invalid = (serde_saphyr::Location, String);

/// Fails at `at` with `message` unless `ok`.
fn check(ok: bool, at: serde_saphyr::Location, message: impl FnOnce() -> String) -> Result<(), Invalid> {
    if ok {
        Ok(())
    } else {
        Err((at, message()))
    }
}

/// A table from a `[x, y]` list, or the error at the list.
fn table(points: Spanned<Vec<(f64, f64)>>, field: &str) -> Result<Table, Invalid> {
    Table::new(points.value).map_err(|e| (points.referenced, format!("{field}: {e}")))
}

impl ProfileFile {
    /// Checks the values serde cannot and builds the profile.
    fn validate(self, name: &str) -> Result<Profile, Invalid> {
        check(!self.model.value.trim().is_empty(), self.model.referenced, || {
            "model: must not be empty".into()
        })?;
        let max_len = self.max_model_len;
        check(max_len.value >= 2, max_len.referenced, || {
            "max_model_len: must be at least 2".into()
        })?;
        let running = self.max_running_requests;
        check(running.value >= 1, running.referenced, || {
            "max_running_requests: must be at least 1".into()
        })?;
        let kv = self.kv_capacity_tokens;
        check(kv.value >= u64::from(max_len.value), kv.referenced, || {
            format!(
                "kv_capacity_tokens: must hold one request of max_model_len ({}) tokens",
                max_len.value
            )
        })?;
        let rate = self.prefill.tokens_per_second;
        check(
            rate.value.is_finite() && rate.value > 0.0,
            rate.referenced,
            || "prefill.tokens_per_second: must be a positive number".into(),
        )?;
        let chunk = self.prefill.chunk_tokens;
        check(chunk.value >= 1, chunk.referenced, || {
            "prefill.chunk_tokens: must be at least 1".into()
        })?;
        let block = self.prefix_cache.block_tokens;
        check(block.value >= 1, block.referenced, || {
            "prefix_cache.block_tokens: must be at least 1".into()
        })?;
        let natural = self.natural_length;
        let (min, max) = (natural.value.min, natural.value.max);
        check(min >= 1 && min <= max, natural.referenced, || {
            format!("natural_length: needs 1 <= min <= max, got min {min}, max {max}")
        })?;
        if let Some(gpu) = &self.gpu {
            gpu.value.check().map_err(|e| (gpu.referenced, e))?;
        }
        let perf = PerfModel {
            batch_ms: table(self.decode.batch_ms, "decode.batch_ms")?,
            attention_ms: table(self.decode.attention_ms, "decode.attention_ms")?,
            prefill_tokens_per_second: rate.value,
            speculative: None,
        };
        Ok(Profile {
            name: name.into(),
            model: self.model.value,
            owned_by: self.owned_by,
            description: self.description,
            max_model_len: max_len.value,
            limits: Limits {
                kv_policy: self.kv_policy,
                max_running: running.value as usize,
                kv_capacity: kv.value,
                chunk_tokens: chunk.value,
            },
            perf,
            prefix_block_tokens: self.prefix_cache.enabled.then_some(block.value),
            natural_length: (min, max),
            gpu: self.gpu.map(|g| g.value),
        })
    }
}

/// Names of the built-in profiles.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(name, _)| *name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "\
model: test/model
description: a test
max_model_len: 100
max_running_requests: 4
kv_capacity_tokens: 200
prefill: {tokens_per_second: 1000, chunk_tokens: 64}
decode:
  batch_ms: [[1, 2.0], [4, 3.0]]
  attention_ms: [[0, 0]]
prefix_cache: {enabled: true}
natural_length: {min: 4, max: 40}
";

    #[test]
    fn builtins_parse_and_validate() {
        let all = Profile::builtins().unwrap();
        assert_eq!(all.len(), 3);
        assert!(all.iter().all(|p| !p.description.contains('\n')));
    }

    #[test]
    fn parses_a_valid_file() {
        let p = Profile::parse("t", "t.yaml", VALID).unwrap();
        assert_eq!(
            (p.model.as_str(), p.owned_by.as_str(), p.max_model_len),
            ("test/model", "rigrun", 100)
        );
        assert_eq!(p.prefix_block_tokens, Some(16));
        assert_eq!(p.perf.batch_ms.eval(2.5), 2.5);
    }

    #[test]
    fn unknown_field_names_file_line_and_column() {
        let source = VALID.replace("description: a test", "description: a test\nspeed: 3");
        let err = Profile::parse("t", "dir/t.yaml", &source)
            .unwrap_err()
            .to_string();
        assert!(err.contains("dir/t.yaml:3:1"), "{err}");
        assert!(err.contains("speed"), "{err}");
    }

    #[test]
    fn wrong_type_names_line_and_column() {
        let source = VALID.replace("max_model_len: 100", "max_model_len: lots");
        let err = Profile::parse("t", "t.yaml", &source).unwrap_err().to_string();
        assert!(err.contains("t.yaml:3:16"), "{err}");
    }

    #[test]
    fn semantic_errors_name_line_and_column() {
        let source = VALID.replace("kv_capacity_tokens: 200", "kv_capacity_tokens: 50");
        let err = Profile::parse("t", "t.yaml", &source).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid profile t.yaml:5:21: kv_capacity_tokens"),
            "{err}"
        );
        let source = VALID.replace("[[1, 2.0], [4, 3.0]]", "[[4, 2.0], [1, 3.0]]");
        let err = Profile::parse("t", "t.yaml", &source).unwrap_err().to_string();
        assert!(
            err.contains("t.yaml:8:13: decode.batch_ms: x values must strictly increase"),
            "{err}"
        );
    }

    #[test]
    fn unknown_name_lists_the_builtins() {
        let err = Profile::resolve("huge").unwrap_err().to_string();
        assert!(err.contains("tiny") && err.contains("a6000-qwen3.6-27b"), "{err}");
        let err = Profile::resolve("/nonexistent/p.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with("cannot read profile file /nonexistent/p.yaml"),
            "{err}"
        );
    }
}
