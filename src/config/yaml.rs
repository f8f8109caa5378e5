//! YAML loading with limits and errors that point at `file:line:col`.
//!
//! serde-saphyr gives every error a location and a source snippet and refuses hostile input (alias
//! bombs, deep nesting) within its budget, so a bad file costs milliseconds, not minutes.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_saphyr::{Location, Options};

use super::ConfigError;

/// Largest YAML file we read; a playbook or inventory is a few kilobytes.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Reads and parses one YAML file into `T`.
pub fn load_file<T: DeserializeOwned>(path: &Path) -> Result<(T, String), ConfigError> {
    let size = std::fs::metadata(path)
        .map_err(|e| ConfigError::io(path, &e))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(ConfigError::plain(
            path,
            format!("the file is {size} bytes; rigrun reads YAML files of at most {MAX_FILE_BYTES} bytes"),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::io(path, &e))?;
    let value = parse_str(path, &text)?;
    Ok((value, text))
}

/// Parses YAML text that came from `path` (used in error messages only).
pub fn parse_str<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|err| {
        let location = err.location();
        let message = explain_budget(suggest_step_kind(&strip_location_suffix(
            &err.without_snippet().to_string(),
        )));
        let name = path.display().to_string();
        let rendered =
            err.render_with_options(serde_saphyr::render_options! { source_name: Some(name.as_str()) });
        // The first line repeats the message; we print our own `file:line:col: message` first.
        let snippet = rendered
            .split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default();
        ConfigError {
            file: path.display().to_string(),
            line: location.as_ref().map(Location::line).unwrap_or(0),
            column: location.as_ref().map(Location::column).unwrap_or(0),
            message,
            snippet: Some(snippet),
        }
    })
}

fn options() -> Options {
    let budget = serde_saphyr::budget! {
        max_events: 200_000,
        max_nodes: 100_000,
        max_aliases: 1_000,
        max_anchors: 1_000,
        max_depth: 48,
        max_documents: 1,
    };
    serde_saphyr::options! { budget: budget }
}

/// serde lists the valid variants of an unknown step kind; we add the closest one.
fn suggest_step_kind(message: &str) -> String {
    let Some(rest) = message.split("unknown variant `").nth(1) else {
        return message.to_string();
    };
    let Some((given, _)) = rest.split_once('`') else {
        return message.to_string();
    };
    match crate::config::closest(given, crate::config::steps::STEP_KINDS) {
        Some(best) => format!("{message}; did you mean `{best}`?"),
        None => message.to_string(),
    }
}

/// serde-saphyr appends " at line X column Y"; we print the location ourselves, first.
fn strip_location_suffix(message: &str) -> String {
    if let Some(i) = message.rfind(" at line ") {
        let tail = &message[i + " at line ".len()..];
        let mut words = tail.split_whitespace();
        let shape = (words.next(), words.next(), words.next(), words.next());
        if let (Some(line), Some("column"), Some(col), None) = shape {
            if line.parse::<u64>().is_ok() && col.parse::<u64>().is_ok() {
                return message[..i].to_string();
            }
        }
    }
    message.to_string()
}

/// Budget breaches get a sentence saying what they mean for a playbook.
fn explain_budget(message: String) -> String {
    if message.starts_with("budget breached") {
        format!("{message}: the YAML expands beyond what a playbook or inventory needs (aliases, nesting or size), so rigrun refuses it")
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_a_trailing_location() {
        assert_eq!(strip_location_suffix("bad value at line 3 column 5"), "bad value");
        assert_eq!(
            strip_location_suffix("x at line 3, column 12 (used"),
            "x at line 3, column 12 (used"
        );
    }
}
