//! Which output lines are records, and what becomes of those that only look like one.
//!
//! A line that is a JSON object is a record. Python's `json.dumps` writes `NaN`, `Infinity` and
//! `-Infinity` by default, and a number like `1e400` overflows: such a line is still a record,
//! those fields kept as null, the record marked `valid: false` with a `problems` entry per field,
//! so that a table shows it rather than drop it. A line that starts like a JSON object (`{"`) and
//! cannot be read at all is [`Line::Unreadable`]: the caller warns and marks the point.

use serde_json::{Map, Value as Json};

use crate::events::mark_invalid;

/// What one output line is.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A record (repaired and marked invalid when it held numbers JSON cannot).
    Record(Map<String, Json>),
    /// Looks like a record but is not JSON; why, in a sentence.
    Unreadable(String),
    /// Anything else: log.
    Log,
}

/// Reads one line of a command's stdout (or of a fetched results file).
pub fn read(line: &str) -> Line {
    let trimmed = line.trim();
    if !trimmed.starts_with('{') {
        return Line::Log;
    }
    let error = match serde_json::from_str::<Json>(trimmed) {
        Ok(Json::Object(map)) => return Line::Record(map),
        Ok(_) => return Line::Log,
        Err(e) => e,
    };
    if let Some(record) = repaired(trimmed) {
        return Line::Record(record);
    }
    if trimmed.starts_with("{\"") {
        Line::Unreadable(format!("it looks like a record but is not JSON ({error})"))
    } else {
        Line::Log
    }
}

/// The record, if replacing its non-finite numbers with null is all it takes to read it.
fn repaired(text: &str) -> Option<Map<String, Json>> {
    let (text, replaced) = replace_non_finite(text);
    if replaced == 0 {
        return None;
    }
    let Ok(Json::Object(mut map)) = serde_json::from_str::<Json>(&text) else {
        return None;
    };
    let mut problems = Vec::new();
    for (key, value) in map.iter_mut() {
        restore(key.clone(), value, &mut problems);
    }
    mark_invalid(&mut map, problems);
    Some(map)
}

/// Stands in for a non-finite number while the line is parsed; no real output holds it.
const SENTINEL: &str = "\u{1}rigrun-non-finite:";

/// Replaces `NaN`, `Infinity`, `-Infinity` and numbers beyond f64 outside strings by a sentinel
/// string carrying the original token; returns the text and how many were replaced.
fn replace_non_finite(text: &str) -> (String, usize) {
    let bytes = text.as_bytes();
    let (mut out, mut replaced, mut i) = (Vec::with_capacity(text.len() + 16), 0, 0);
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            let end = if c == b'\\' { i + 2 } else { i + 1 }.min(bytes.len());
            in_string = c != b'"';
            out.extend_from_slice(&bytes[i..end]);
            i = end;
            continue;
        }
        let token_end = token_end(bytes, i);
        if token_end > i {
            let token = &text[i..token_end];
            if is_non_finite(token) {
                let stand_in = serde_json::to_string(&format!("{SENTINEL}{token}")).unwrap_or_default();
                out.extend_from_slice(stand_in.as_bytes());
                replaced += 1;
            } else {
                out.extend_from_slice(token.as_bytes());
            }
            i = token_end;
            continue;
        }
        in_string = c == b'"';
        out.push(c);
        i += 1;
    }
    // Only whole ASCII tokens were replaced, so the bytes are still UTF-8.
    (String::from_utf8_lossy(&out).into_owned(), replaced)
}

/// The end of a bare token (a number or a word such as `NaN`) starting at `i`, or `i`.
fn token_end(bytes: &[u8], i: usize) -> usize {
    let starts = |c: u8| c == b'-' || c.is_ascii_alphanumeric();
    if !starts(bytes[i]) {
        return i;
    }
    let mut end = i + 1;
    while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || b"+-.".contains(&bytes[end])) {
        end += 1;
    }
    end
}

fn is_non_finite(token: &str) -> bool {
    matches!(token, "NaN" | "-NaN" | "Infinity" | "-Infinity")
        || (token.starts_with(|c: char| c == '-' || c.is_ascii_digit())
            && token.parse::<f64>().is_ok_and(|v| !v.is_finite()))
}

/// Turns sentinels under `value` back into null, naming each in `problems` by its path.
fn restore(path: String, value: &mut Json, problems: &mut Vec<String>) {
    match value {
        Json::String(s) if s.starts_with(SENTINEL) => {
            problems.push(format!(
                "`{path}` was {}, which JSON has no number for; kept as null",
                &s[SENTINEL.len()..]
            ));
            *value = Json::Null;
        }
        Json::Object(map) => {
            for (key, inner) in map.iter_mut() {
                restore(format!("{path}.{key}"), inner, problems);
            }
        }
        Json::Array(items) => {
            for (n, inner) in items.iter_mut().enumerate() {
                restore(format!("{path}[{n}]"), inner, problems);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(line: &str) -> Json {
        match read(line) {
            Line::Record(map) => Json::Object(map),
            other => panic!("not a record: {other:?}"),
        }
    }

    #[test]
    fn json_objects_are_records_and_other_lines_log() {
        assert_eq!(
            record(r#"  {"output_throughput": 172.4, "completed": 5}"#)["completed"],
            5
        );
        assert_eq!(read("[1, 2]"), Line::Log);
        assert_eq!(read("warming up..."), Line::Log);
        assert_eq!(read("42"), Line::Log);
        assert_eq!(read("{progress: 50%}"), Line::Log);
    }

    #[test]
    fn non_finite_numbers_are_kept_as_null_and_named() {
        let r = record(r#"{"a": NaN, "b": {"c": [1, -Infinity]}, "d": 1e400, "e": "NaN", "f": -2.5e3}"#);
        assert_eq!(r["a"], Json::Null);
        assert_eq!(r["b"]["c"], json!([1, null]));
        assert_eq!(r["d"], Json::Null);
        assert_eq!(r["e"], "NaN", "strings are left alone");
        assert_eq!(r["f"], -2500.0);
        assert_eq!(r["valid"], false);
        let problems = r["problems"].as_array().unwrap();
        assert_eq!(problems.len(), 3);
        assert_eq!(
            problems[0],
            "`a` was NaN, which JSON has no number for; kept as null"
        );
        assert!(problems[1]
            .as_str()
            .unwrap()
            .starts_with("`b.c[1]` was -Infinity"));
        assert!(problems[2].as_str().unwrap().starts_with("`d` was 1e400"));
    }

    #[test]
    fn existing_problems_are_kept() {
        let r = record(r#"{"valid": true, "problems": ["short outputs"], "x": Infinity}"#);
        assert_eq!(r["valid"], false);
        assert_eq!(r["problems"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn strings_with_quotes_and_escapes_do_not_confuse_the_scan() {
        let r = record(r#"{"note": "say \"NaN\" \\ é", "v": NaN}"#);
        assert_eq!(r["note"], "say \"NaN\" \\ é");
        assert_eq!(r["v"], Json::Null);
    }

    #[test]
    fn a_cut_short_record_is_unreadable() {
        match read(r#"{"output_throughput": 17"#) {
            Line::Unreadable(why) => assert!(why.contains("not JSON"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
