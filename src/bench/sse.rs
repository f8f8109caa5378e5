//! Reading OpenAI responses: server-sent events split into `data:` payloads, and each payload
//! (or a whole non-streamed body) reduced to what the metrics need — did it carry a token, the
//! finish reason, the usage counts, an error.

use std::borrow::Cow;

use serde::Deserialize;

use crate::http::excerpt;

/// Splits a byte stream into lines and hands on the payload of each `data:` line.
#[derive(Debug, Default)]
pub struct DataLines {
    /// The unfinished last line of what arrived so far.
    partial: Vec<u8>,
}

impl DataLines {
    /// Feeds bytes that arrived; calls `each` with every complete `data:` payload, in order.
    /// Stops early (keeping nothing) when `each` returns false.
    pub fn push(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8]) -> bool) {
        let mut rest = bytes;
        while let Some(newline) = rest.iter().position(|b| *b == b'\n') {
            let (line, tail) = rest.split_at(newline);
            rest = &tail[1..];
            let keep_going = if self.partial.is_empty() {
                payload(line).is_none_or(&mut each)
            } else {
                self.partial.extend_from_slice(line);
                let line = std::mem::take(&mut self.partial);
                payload(&line).is_none_or(&mut each)
            };
            if !keep_going {
                return;
            }
        }
        self.partial.extend_from_slice(rest);
    }
}

/// The payload of a `data:` line (CR and one leading space trimmed); None for other lines
/// (blank separators, `: comments`, `event:` names).
fn payload(line: &[u8]) -> Option<&[u8]> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let data = line.strip_prefix(b"data:")?;
    Some(data.strip_prefix(b" ").unwrap_or(data))
}

/// Prompt and output token counts reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
}

/// What one stream event (or a whole response) says.
#[derive(Debug, Default, PartialEq)]
pub struct Event {
    /// It carries generated text (one or more tokens).
    pub token: bool,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The server reported an error in the body.
    pub error: Option<String>,
    /// `data: [DONE]`.
    pub done: bool,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(default, borrow)]
    choices: Vec<Choice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    /// `/v1/completions`.
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    /// Chat, streamed.
    #[serde(default, borrow)]
    delta: Option<Message<'a>>,
    /// Chat, whole.
    #[serde(default, borrow)]
    message: Option<Message<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    /// Reasoning models stream their thinking here (vLLM, SGLang).
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    role: Option<Cow<'a, str>>,
}

/// Reads one `data:` payload or a whole JSON response body.
pub fn parse(data: &[u8]) -> Result<Event, String> {
    if data.trim_ascii() == b"[DONE]" {
        return Ok(Event {
            done: true,
            ..Event::default()
        });
    }
    let wire: Wire = serde_json::from_slice(data)
        .map_err(|e| format!("not an OpenAI response ({e}): {}", excerpt(data)))?;
    if wire.error.is_some() || wire.object.as_deref() == Some("error") {
        return Ok(Event {
            error: Some(excerpt(data)),
            ..Event::default()
        });
    }
    let mut event = Event {
        usage: wire.usage,
        ..Event::default()
    };
    for choice in &wire.choices {
        event.token |= carries_token(choice);
        if choice.finish_reason.is_some() {
            event.finish_reason.clone_from(&choice.finish_reason);
        }
    }
    Ok(event)
}

/// Whether a choice carries generated tokens: any text does; an empty text in mid-stream does too
/// (a detokenizer may hold back part of a character), but not the chat role announcement nor an
/// empty chunk that only reports the finish reason.
fn carries_token(choice: &Choice) -> bool {
    if choice.finish_reason.is_some() && !has_text(choice) {
        return false;
    }
    if let Some(text) = &choice.text {
        return !text.is_empty() || choice.finish_reason.is_none();
    }
    match choice.delta.as_ref().or(choice.message.as_ref()) {
        Some(m) if m.role.is_some() => has_text(choice),
        Some(m) => m.content.is_some() || m.reasoning_content.is_some(),
        None => false,
    }
}

fn has_text(choice: &Choice) -> bool {
    let nonempty = |s: &Option<Cow<str>>| s.as_deref().is_some_and(|s| !s.is_empty());
    nonempty(&choice.text)
        || choice
            .delta
            .as_ref()
            .or(choice.message.as_ref())
            .is_some_and(|m| nonempty(&m.content) || nonempty(&m.reasoning_content))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(chunks: &[&str]) -> Vec<String> {
        let mut reader = DataLines::default();
        let mut out = vec![];
        for chunk in chunks {
            reader.push(chunk.as_bytes(), |d| {
                out.push(String::from_utf8_lossy(d).into_owned());
                true
            });
        }
        out
    }

    #[test]
    fn splits_data_lines_across_chunks() {
        assert_eq!(
            lines(&[
                "data: {\"a\"",
                ":1}\n\n: ping\nevent: x\r\ndata:[DONE]\r\n",
                "data: tail"
            ]),
            ["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn reads_completion_and_chat_chunks() {
        let ev = parse(br#"{"choices":[{"index":0,"text":" hi","finish_reason":null}]}"#).unwrap();
        assert!(ev.token && ev.finish_reason.is_none());
        let ev = parse(br#"{"choices":[{"text":" end","finish_reason":"length"}]}"#).unwrap();
        assert!(ev.token);
        assert_eq!(ev.finish_reason.as_deref(), Some("length"));
        let ev = parse(br#"{"choices":[{"text":"","finish_reason":"length"}]}"#).unwrap();
        assert!(!ev.token, "an empty chunk that only ends the stream");
        let ev = parse(br#"{"choices":[{"text":"","finish_reason":null}]}"#).unwrap();
        assert!(ev.token, "a held-back partial character is still a token");
        let role = parse(br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#).unwrap();
        assert!(!role.token);
        let ev = parse(br#"{"choices":[{"delta":{"content":"x\"y"}}]}"#).unwrap();
        assert!(ev.token);
        let ev = parse(br#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).unwrap();
        assert!(ev.token);
        let ev = parse(br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}"#).unwrap();
        assert_eq!(
            ev.usage,
            Some(Usage {
                prompt_tokens: Some(3),
                completion_tokens: Some(5)
            })
        );
        assert!(parse(b"[DONE]").unwrap().done);
    }

    #[test]
    fn reads_whole_responses_and_errors() {
        let ev = parse(
            br#"{"choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}"#,
        )
        .unwrap();
        assert!(ev.token);
        assert_eq!(ev.usage.unwrap().completion_tokens, Some(2));
        let ev = parse(br#"{"error":{"message":"boom","code":500}}"#).unwrap();
        assert!(ev.error.unwrap().contains("boom"));
        let err = parse(b"<html>").unwrap_err();
        assert!(err.contains("<html>"), "{err}");
    }
}
