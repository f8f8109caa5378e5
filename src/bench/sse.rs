//! Reading OpenAI responses: server-sent events split into their data, and each event's data
//! (or a whole non-streamed body) reduced to what the metrics need — did it carry a token, the
//! finish reason, the usage counts, an error.

use std::borrow::Cow;

use serde::Deserialize;

use crate::http_client::excerpt;

/// The byte order mark a stream may begin with; the spec skips it.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Reads a server-sent event stream as the SSE spec says (WHATWG HTML, "event stream
/// interpretation") and hands on each event's data, chunk by chunk as the bytes arrive, so the
/// caller times every event by the chunk that completed it.
///
/// Lines end in `\n`, `\r\n` or `\r` (also when a chunk splits the `\r\n`); consecutive `data:`
/// lines join with `\n` into one event, dispatched at the blank line. `event:`, `id:` and `retry:`
/// name an event and steer reconnection, which a benchmark never does: like `:` comments and
/// unknown fields they are read and skipped. OpenAI-compatible streams carry everything in data.
///
/// Our own rather than the `eventsource-stream` crate: that one is a `Stream` of owned `String`
/// events (a copy and a UTF-8 check per token, at up to a million tokens/s), hides which chunk
/// completed an event, and drops an event the stream ended without its blank line, as the spec
/// says, where a server that stopped there still sent it (see [`SseReader::finish`]).
#[derive(Debug, Default)]
pub struct SseReader {
    /// The unfinished last line of what arrived so far.
    partial: Vec<u8>,
    /// The event being read: each `data:` line's value followed by `\n`.
    data: Vec<u8>,
    /// The last chunk ended in `\r`: a `\n` that starts the next one belongs to it.
    after_cr: bool,
    /// A line was read (only the first may start with the byte order mark).
    started: bool,
}

impl SseReader {
    /// Feeds bytes that arrived; calls `each` with the data of every event they complete, in
    /// order. Stops early (keeping nothing) when `each` returns false.
    pub fn push(&mut self, bytes: &[u8], mut each: impl FnMut(&[u8]) -> bool) {
        let mut rest = bytes;
        if std::mem::take(&mut self.after_cr) {
            rest = rest.strip_prefix(b"\n").unwrap_or(rest);
        }
        while let Some(end) = rest.iter().position(|b| matches!(b, b'\n' | b'\r')) {
            let (line, tail) = rest.split_at(end);
            rest = &tail[1..];
            if tail[0] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            if !self.end_line(line, &mut each) {
                *self = SseReader::default();
                return;
            }
        }
        self.partial.extend_from_slice(rest);
    }

    /// The stream ended: a last line without its line end and an event without its blank line
    /// still count. The spec drops such an event, but the server did send it (a `[DONE]` or a
    /// last token), and a benchmark should count what it received.
    pub fn finish(&mut self, each: impl FnMut(&[u8]) -> bool) {
        self.push(b"\n\n", each);
    }

    /// Completes a line whose start may be in `partial`, and interprets it.
    fn end_line(&mut self, line: &[u8], each: &mut impl FnMut(&[u8]) -> bool) -> bool {
        if self.partial.is_empty() {
            return self.interpret(line, each);
        }
        let mut whole = std::mem::take(&mut self.partial);
        whole.extend_from_slice(line);
        let keep_going = self.interpret(&whole, each);
        whole.clear();
        // Kept for the next line a chunk splits, allocation and all.
        self.partial = whole;
        keep_going
    }

    /// One line: a blank one dispatches the event, a `data` field adds to it, others are skipped.
    fn interpret(&mut self, line: &[u8], each: &mut impl FnMut(&[u8]) -> bool) -> bool {
        let line = if std::mem::replace(&mut self.started, true) {
            line
        } else {
            line.strip_prefix(BOM).unwrap_or(line)
        };
        if line.is_empty() {
            return self.dispatch(each);
        }
        if let Some((b"data", value)) = field(line) {
            self.data.extend_from_slice(value);
            self.data.push(b'\n');
        }
        true
    }

    /// Hands on the event read so far (none when it had no `data` line), without its last `\n`.
    fn dispatch(&mut self, each: &mut impl FnMut(&[u8]) -> bool) -> bool {
        if self.data.is_empty() {
            return true;
        }
        self.data.pop();
        let keep_going = each(&self.data);
        self.data.clear();
        keep_going
    }
}

/// A line's field name and value (one space after the colon dropped; a line without a colon is
/// a name with an empty value); None for a comment (a line starting with `:`).
fn field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    match line.iter().position(|b| *b == b':') {
        Some(0) => None,
        Some(colon) => {
            let value = &line[colon + 1..];
            Some((&line[..colon], value.strip_prefix(b" ").unwrap_or(value)))
        }
        None => Some((line, &[])),
    }
}

/// Prompt and output token counts reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the server's prefix cache served (vLLM, SGLang), when it says.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// Prompt tokens served by the prefix cache, when the server reports them.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details.and_then(|d| d.cached_tokens)
    }
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
    read(data, None)
}

/// The same, and appends the generated text (a completion's text, a chat's content; not a
/// reasoning model's thinking, which clients do not send back) to `text`: a multi-turn
/// conversation sends the reply back in its next turn.
pub fn parse_keeping_text(data: &[u8], text: &mut String) -> Result<Event, String> {
    read(data, Some(text))
}

fn read(data: &[u8], mut text: Option<&mut String>) -> Result<Event, String> {
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
        if let Some(text) = text.as_deref_mut() {
            let message = choice.delta.as_ref().or(choice.message.as_ref());
            let content = choice
                .text
                .as_deref()
                .or(message.and_then(|m| m.content.as_deref()));
            text.push_str(content.unwrap_or(""));
        }
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

    /// The data of every event in `chunks`, read as they would arrive, then the stream's end.
    fn events(chunks: &[&str]) -> Vec<String> {
        let mut reader = SseReader::default();
        let mut out = vec![];
        let mut each = |d: &[u8]| {
            out.push(String::from_utf8_lossy(d).into_owned());
            true
        };
        for chunk in chunks {
            reader.push(chunk.as_bytes(), &mut each);
        }
        reader.finish(&mut each);
        out
    }

    #[test]
    fn joins_the_data_lines_of_one_event() {
        assert_eq!(events(&["data: a\ndata: b\n\ndata: c\n\n"]), ["a\nb", "c"]);
        assert_eq!(events(&["data: {\"x\":\ndata: 1}\n\n"]), ["{\"x\":\n1}"]);
    }

    #[test]
    fn reads_lines_and_events_split_across_chunks() {
        assert_eq!(
            events(&["data: {\"a\"", ":1}\n", "\n", "da", "ta:[DONE]\n\n"]),
            ["{\"a\":1}", "[DONE]"]
        );
    }

    #[test]
    fn reads_crlf_and_cr_line_ends() {
        assert_eq!(
            events(&["data: x\r\n\r\ndata: y\r\rdata: z\n\n"]),
            ["x", "y", "z"]
        );
        // A \r\n split between chunks is one line end, not a line end and a blank line.
        assert_eq!(events(&["data: a\r", "\ndata: b\r", "\n\r", "\n"]), ["a\nb"]);
    }

    #[test]
    fn skips_comments_other_fields_and_empty_events() {
        let stream = "\u{feff}: ping\nevent: delta\nid: 7\nretry: 10\nfoo: bar\ndata:tight\n\nevent: x\n\n";
        assert_eq!(events(&[stream]), ["tight"]);
        assert_eq!(
            events(&["data\n\ndata:\n\n"]),
            ["", ""],
            "data without a value is empty"
        );
        assert_eq!(events(&["data:  two spaces\n\n"]), [" two spaces"]);
    }

    #[test]
    fn a_stream_that_ends_without_its_blank_line_keeps_its_last_event() {
        assert_eq!(events(&["data: a\n\n", "data: tail"]), ["a", "tail"]);
        assert_eq!(events(&["data: [DONE]\n"]), ["[DONE]"]);
        assert_eq!(events(&["data: [DONE]\r"]), ["[DONE]"]);
        assert_eq!(events(&["data: a\n\n"]), ["a"], "a finished stream adds nothing");
    }

    #[test]
    fn stops_when_told_and_keeps_nothing() {
        let mut reader = SseReader::default();
        let mut seen = vec![];
        reader.push(b"data: 1\n\ndata: 2\n\ndata: 3", |d| {
            seen.push(d.to_vec());
            false
        });
        reader.finish(|d| {
            seen.push(d.to_vec());
            true
        });
        assert_eq!(seen, [b"1".to_vec()]);
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
                completion_tokens: Some(5),
                prompt_tokens_details: None,
            })
        );
        assert!(parse(b"[DONE]").unwrap().done);
    }

    #[test]
    fn keeps_the_replys_text_and_the_cached_prompt_tokens() {
        let mut text = String::new();
        for data in [
            &br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#[..],
            br#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            br#"{"choices":[{"delta":{"content":" a\"b"}}]}"#,
            br#"{"choices":[{"text":" c","finish_reason":"length"}]}"#,
            br#"{"choices":[{"message":{"role":"assistant","content":" d"}}]}"#,
        ] {
            parse_keeping_text(data, &mut text).unwrap();
        }
        assert_eq!(text, " a\"b c d");
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        assert_eq!(parse(usage).unwrap().usage.unwrap().cached_tokens(), Some(8));
        let no_details = br#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}"#;
        assert_eq!(parse(no_details).unwrap().usage.unwrap().cached_tokens(), None);
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
