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

/// Reads one YAML file as text: at most [`MAX_FILE_BYTES`], and UTF-8 (else the error names the
/// line and column of the first bad byte).
pub fn read_file(path: &Path) -> Result<String, ConfigError> {
    let size = std::fs::metadata(path)
        .map_err(|e| ConfigError::io(path, &e))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(ConfigError::plain(
            path,
            format!("the file is {size} bytes; rigrun reads YAML files of at most {MAX_FILE_BYTES} bytes"),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| ConfigError::io(path, &e))?;
    String::from_utf8(bytes).map_err(|e| not_utf8(path, e.as_bytes(), e.utf8_error().valid_up_to()))
}

/// The error for a file whose byte at `bad` is not UTF-8: its line and column (in characters).
fn not_utf8(path: &Path, bytes: &[u8], bad: usize) -> ConfigError {
    // Everything before the first bad byte is valid UTF-8.
    let before = std::str::from_utf8(&bytes[..bad]).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() as u64 + 1;
    let column = before[line_start..].chars().count() as u64 + 1;
    let text = String::from_utf8_lossy(bytes);
    ConfigError {
        file: path.display().to_string(),
        line,
        column,
        message: format!(
            "the byte 0x{:02x} is not UTF-8 text; save the file as UTF-8",
            bytes[bad]
        ),
        snippet: Some(super::snippet(&text, line, column)),
    }
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
    fn invalid_utf8_is_placed_at_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, b"name: t\nvars: {x: \"\xc3\xa9\xff\"}\n").unwrap();
        let err = read_file(&path).unwrap_err();
        assert_eq!((err.line, err.column), (2, 13), "{err}");
        assert!(err.message.contains("0xff is not UTF-8"), "{err}");
    }

    #[test]
    fn strips_only_a_trailing_location() {
        assert_eq!(strip_location_suffix("bad value at line 3 column 5"), "bad value");
        assert_eq!(
            strip_location_suffix("x at line 3, column 12 (used"),
            "x at line 3, column 12 (used"
        );
    }
}
