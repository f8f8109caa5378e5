//! The playbook's `server:` block: the server rigrun starts on each host itself, how it tells
//! that the server is ready, and the variants of its configuration to measure one after another.
//! Every step of the playbook runs once per variant, against that variant's server.
//!
//! ```yaml
//! server:
//!   command: "{{ rigrun }} sim --profile a6000-qwen27b --port 30000"
//!   url: http://127.0.0.1:30000
//!   wait: 2m
//!   variants: {spec: [off, nextn3]}
//!   args: {spec=nextn3: [--speculative-tokens, "3"]}
//! ```
//!
//! A top-level block rather than a step kind: a variant wraps the steps (stop, start, measure,
//! stop again), which no single step in the list can express.

use std::fmt::Write as _;
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use super::duration::Dur;
use super::render::{HostVars, RenderError, Renderer};
use super::steps::{StepKind, DEFAULT_SERVER_WAIT};
use super::template::{shell_quote, Quoting, Text};
use crate::point::{self, Values};

/// The most variants one server block may name (each is a server start).
pub const MAX_VARIANTS: usize = 64;

/// As written in the playbook.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Starts the server; each variant's `args` are appended, shell-quoted.
    pub command: Text,
    /// Where the server answers, as seen from the host.
    pub url: Text,
    /// Must be listed by `/v1/models` when given.
    pub model: Option<Text>,
    /// How long a variant may take from launch to ready.
    pub wait: Option<Dur>,
    /// Send one short completion once ready (its first token is timed); on by default.
    #[serde(default = "yes")]
    pub smoke: bool,
    /// Name of a local environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// How long a stopped server may take to exit after SIGTERM before it gets SIGKILL.
    pub stop_grace: Option<Dur>,
    /// How many times a variant's server is started again when it crashes during a sweep.
    pub restarts: Option<Spanned<u32>>,
    /// Axis → values; every combination is one variant, measured in the order written. Read as
    /// words (`off` stays `off`, where YAML would read a boolean); see `value_of`.
    #[serde(default)]
    pub variants: IndexMap<String, Spanned<Vec<String>>>,
    /// `axis=value` → words appended to `command` for the variants with that value.
    #[serde(default)]
    pub args: IndexMap<String, Spanned<Vec<Text>>>,
}

fn yes() -> bool {
    true
}

/// One variant: its position, its values and their one-word label (`spec=off,tp=4`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    pub index: usize,
    pub values: Values,
    pub label: String,
}

impl Variant {
    /// The name that follows the host in a column; none for a server without variants.
    pub fn name(&self) -> Option<&str> {
        (!self.values.is_empty()).then_some(self.label.as_str())
    }

    /// The host's variables with this variant's: each axis by name, and `variant` (its label).
    pub fn vars(&self, host: &HostVars) -> HostVars {
        let mut vars = host.clone();
        vars.extend(self.values.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars.insert("variant".into(), self.label.clone().into());
        vars
    }
}

/// A variant's server, planned for one host.
#[derive(Debug, Clone, Serialize)]
pub struct ServerPlan {
    pub variant: Variant,
    pub command: String,
    pub url: String,
    pub model: Option<String>,
    pub wait: Duration,
    pub smoke: bool,
    pub api_key_env: Option<String>,
    pub stop_grace: Duration,
    pub restarts: u32,
}

/// How long a server may take to exit after SIGTERM when the playbook does not say.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

impl ServerSpec {
    /// Every variant, in the order written (one unnamed variant when the block names none).
    pub fn variants(&self) -> Vec<Variant> {
        let as_json = |values: &Spanned<Vec<String>>| Spanned {
            value: values.value.iter().map(|v| value_of(v)).collect(),
            referenced: values.referenced,
            defined: values.defined,
        };
        let matrix: IndexMap<String, Spanned<Vec<serde_json::Value>>> = self
            .variants
            .iter()
            .map(|(k, v)| (k.clone(), as_json(v)))
            .collect();
        point::cartesian(&matrix)
            .into_iter()
            .enumerate()
            .map(|(index, values)| Variant {
                index,
                label: point::variant_label(&values),
                values,
            })
            .collect()
    }

    /// The variants checked: axes with values, not too many, every `args` key naming one.
    pub fn check(&self, r: &Renderer) -> Result<(), RenderError> {
        for (axis, values) in &self.variants {
            if values.value.is_empty() {
                return Err(r.error(values, format!("variants `{axis}` has no values")));
            }
            if axis == "variant" || super::BUILTIN_NAMES.contains(&axis.as_str()) {
                return Err(r.error(
                    values,
                    format!("`{axis}` is a built-in variable (as is `variant`, the variant's label); name the axis otherwise"),
                ));
            }
        }
        let count = self.variants.values().map(|v| v.value.len()).product::<usize>();
        if let (true, Some(first)) = (count > MAX_VARIANTS, self.variants.values().next()) {
            return Err(r.error(
                first,
                format!(
                    "{count} variants: a server block runs at most {MAX_VARIANTS} (each is a server start)"
                ),
            ));
        }
        for (key, words) in &self.args {
            if let Err(message) = self.args_key(key) {
                return Err(r.error(words, format!("args `{key}`: {message}")));
            }
        }
        Ok(())
    }

    /// The (axis, value) an `args` key names, or why it names none.
    fn args_key(&self, key: &str) -> Result<(String, String), String> {
        let axes = || {
            let each = self
                .variants
                .iter()
                .map(|(axis, values)| format!("{axis}: {}", values.value.join(", ")));
            each.collect::<Vec<_>>().join("; ")
        };
        let Some((axis, value)) = key.split_once('=') else {
            return Err(format!("write it as axis=value (the variants are {})", axes()));
        };
        let known = self
            .variants
            .get(axis)
            .is_some_and(|values| values.value.iter().any(|v| v == value));
        if !known {
            return Err(format!(
                "no variant has {axis}={value} (the variants are {})",
                axes()
            ));
        }
        Ok((axis.to_string(), value.to_string()))
    }

    /// The server of `variant` for one host; `r` holds the host's variables with the variant's.
    /// (`check` first, once: it holds for every variant.)
    pub fn plan(&self, r: &Renderer, variant: &Variant) -> Result<ServerPlan, RenderError> {
        let mut command = r.render(&self.command, Quoting::Shell)?;
        for (key, words) in &self.args {
            let Ok((axis, value)) = self.args_key(key) else {
                continue;
            };
            if variant.values.get(&axis).map(point::value_text) != Some(value) {
                continue;
            }
            for word in &words.value {
                let _ = write!(command, " {}", shell_quote(&r.render(word, Quoting::Plain)?));
            }
        }
        Ok(ServerPlan {
            variant: variant.clone(),
            command,
            url: r.render(&self.url, Quoting::Plain)?,
            model: r.render_optional(&self.model, Quoting::Plain)?,
            wait: self.wait.map_or(DEFAULT_SERVER_WAIT, |d| d.0),
            smoke: self.smoke,
            api_key_env: self.api_key_env.clone(),
            stop_grace: self.stop_grace.map_or(DEFAULT_STOP_GRACE, |d| d.0),
            restarts: super::steps::restarts(r, &self.restarts)?,
        })
    }
}

/// A variant's value for templates: a number when the word is one exactly as written (`tp: 8`
/// is 8, so `{{ tp * 2 }}` and `skip_if: tp > 4` work), else the word itself (`off` stays
/// `off`, where YAML would read a boolean; `0.50` and `007` stay as written).
fn value_of(word: &str) -> Json {
    let number = serde_json::from_str::<Json>(word).ok().filter(Json::is_number);
    match number {
        Some(n) if serde_json::to_string(&n).ok().as_deref() == Some(word) => n,
        _ => Json::String(word.to_string()),
    }
}

impl StepKind for ServerSpec {
    fn templates(&self) -> Vec<(&Text, Quoting)> {
        let mut t = vec![(&self.command, Quoting::Shell), (&self.url, Quoting::Plain)];
        t.extend(self.model.iter().map(|m| (m, Quoting::Plain)));
        t.extend(
            self.args
                .values()
                .flat_map(|w| w.value.iter())
                .map(|w| (w, Quoting::Plain)),
        );
        t
    }

    fn own_variables(&self) -> Vec<&str> {
        let mut vars: Vec<&str> = self.variants.keys().map(String::as_str).collect();
        vars.push("variant");
        vars
    }
}

impl ServerPlan {
    /// The variant's lines for `rigrun plan`.
    pub fn describe(&self, out: &mut String) {
        let name = self.variant.name().unwrap_or("(the only one)");
        let _ = writeln!(
            out,
            "  variant {}: {name}: start `{}`, wait up to {} for {}{}{}",
            self.variant.index + 1,
            self.command,
            humantime::format_duration(self.wait),
            self.url,
            self.model
                .as_ref()
                .map(|m| format!(" to list {m}"))
                .unwrap_or_default(),
            if self.smoke { ", one short completion" } else { "" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_values_are_numbers_only_when_written_as_one() {
        let spec: ServerSpec = serde_saphyr::from_str(
            "command: serve\nurl: http://127.0.0.1:1\nvariants: {spec: [off, on], tp: [4, 8], frac: [0.50, 0.9]}\n",
        )
        .unwrap();
        let variants = spec.variants();
        assert_eq!(variants.len(), 8);
        let first = &variants[0];
        assert_eq!(first.label, "spec=off,tp=4,frac=0.50");
        assert_eq!(first.values["spec"], Json::String("off".into()));
        assert_eq!(first.values["tp"], Json::from(4));
        assert_eq!(first.values["frac"], Json::String("0.50".into()));
        assert_eq!(variants[1].values["frac"], Json::from(0.9));
        assert_eq!(first.vars(&HostVars::new())["variant"], "spec=off,tp=4,frac=0.50");
    }
}
