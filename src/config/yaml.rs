//! YAML loading with limits and errors that point at `file:line:col`.
//!
//! serde-saphyr gives every error a location and a source snippet and refuses hostile input (alias
//! bombs, deep nesting) within its budget, so a bad file costs milliseconds, not minutes.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_saphyr::Options;

use super::{yaml_errors, ConfigError};

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

/// Parses YAML text that came from `path` (used in error messages only). An error reads
/// `file:line:col: message` with the line shown and a caret under the place, once.
pub fn parse_str<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, ConfigError> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|err| {
        let message = yaml_errors::explain(&err, text);
        match err.location() {
            Some(loc) => ConfigError::at(path, text, &loc, message),
            None => ConfigError::plain(path, message),
        }
    })
}

/// What a YAML file is, judged by its top-level keys: a playbook has `steps:`, an inventory a
/// `hosts:` mapping of host names (a playbook's `hosts:` is a list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Playbook,
    Inventory,
}

/// The shape of `text`, when it parses and has one.
pub fn shape(text: &str) -> Option<Shape> {
    let value: serde_json::Value = serde_saphyr::from_str_with_options(text, options()).ok()?;
    let top = value.as_object()?;
    if top.contains_key("steps") {
        Some(Shape::Playbook)
    } else if top.get("hosts").is_some_and(serde_json::Value::is_object) {
        Some(Shape::Inventory)
    } else {
        None
    }
}

fn options() -> Options {
    let budget = serde_saphyr::budget! {
        max_events: yaml_errors::MAX_EVENTS,
        max_nodes: yaml_errors::MAX_NODES,
        max_aliases: yaml_errors::MAX_ALIASES,
        max_anchors: yaml_errors::MAX_ANCHORS,
        max_depth: yaml_errors::MAX_DEPTH,
        max_documents: 1,
    };
    serde_saphyr::options! { budget: budget }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn playbooks_and_inventories_are_told_apart() {
        assert_eq!(shape("name: t\nhosts: [a]\nsteps: []\n"), Some(Shape::Playbook));
        assert_eq!(
            shape("hosts:\n  a: {connection: local}\n"),
            Some(Shape::Inventory)
        );
        assert_eq!(shape("name: t\nhosts: [a]\n"), None);
        assert_eq!(shape("- a\n"), None);
    }

    #[test]
    fn invalid_utf8_is_placed_at_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.yaml");
        std::fs::write(&path, b"name: t\nvars: {x: \"\xc3\xa9\xff\"}\n").unwrap();
        let err = read_file(&path).unwrap_err();
        assert_eq!((err.line, err.column), (2, 13), "{err}");
        assert!(err.message.contains("0xff is not UTF-8"), "{err}");
    }
}
