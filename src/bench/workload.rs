//! What each request asks for: its prompt (catid's repeated token, random token ids, natural
//! text cut to exact lengths (see `text`), or prompts from a JSONL file), its output length
//! (nominal or drawn, see `lengths`), and its JSON body for the chosen API; in a multi-turn
//! conversation, each turn's prompt with the history so far.
//!
//! Token-id prompts (`/v1/completions`) have an exact input length whatever the tokenizer.
//! Chat messages are text, so there the prompt is built from words that are one token in common
//! BPE vocabularies (and in `rigrun sim`'s count), and the server's `usage` gives the true count.

use std::path::Path;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Value};

use super::client::Api;
use super::lengths::{Dist, Lengths};
use super::rng::Rng;
use super::text::{self, TextPrompts};
use super::trace::Trace;

/// The token id catid's method repeats (the seeds' scripts use it).
pub const DEFAULT_TOKEN_ID: u32 = 23066;
/// Random and prefix token ids are drawn from here: inside every common vocabulary (Llama-2 has
/// 32,000 ids), above the special and byte tokens at the start.
const ID_RANGE: std::ops::Range<u32> = 1000..30_000;
/// The word catid's method repeats when the API takes text (chat): one token almost everywhere.
const CHAT_WORD: &str = " the";
/// Words of the random chat workload: four bytes with the leading space, one token each in common
/// BPE vocabularies and in `rigrun sim`'s four-bytes-per-token count.
const CHAT_WORDS: [&str; 32] = [
    " and", " for", " are", " but", " not", " you", " all", " any", " can", " had", " her", " was", " one",
    " our", " out", " day", " get", " has", " him", " his", " how", " man", " new", " now", " old", " see",
    " two", " way", " who", " boy", " did", " its",
];

/// Where prompts come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// `--input-len` copies of `--token-id`: every request shares its prefix.
    Catid,
    /// `--input-len` random token ids per request.
    Random,
    /// Passages of a public-domain book, each cut to its request's length with the server's
    /// tokenizer before the first level (see `text`; empty until built).
    Text(std::sync::Arc<TextPrompts>),
    /// Prompts read from a JSONL file, used in turn.
    File { path: String, prompts: Vec<FilePrompt> },
    /// A trace's lines, request n being line n (see `trace`).
    Trace(std::sync::Arc<Trace>),
}

/// One line of a prompts file.
#[derive(Debug, Clone)]
pub struct FilePrompt {
    content: Content,
    /// The line's `max_tokens` (or `output_len`), else `--output-len`.
    max_tokens: Option<u32>,
}

#[derive(Debug, Clone)]
enum Content {
    Ids(Vec<u32>),
    Text(String),
    Messages(Value),
}

/// The settings a workload is built from.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    pub source: Source,
    pub api: Api,
    pub model: String,
    /// Each request's prompt and output lengths (nominal, or drawn per request).
    pub lengths: Lengths,
    pub token_id: u32,
    pub unique_prefix: bool,
    pub stream: bool,
    /// Turns per conversation (1: single requests).
    pub turns: u32,
    /// Seed of random prompts.
    pub seed: u64,
    /// A per-run random value in every unique prefix, so a second run cannot hit the first's
    /// prefix cache.
    pub nonce: u64,
}

/// One request, ready to send.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    pub body: Bytes,
    /// Output tokens asked for (`max_tokens`, sent with `ignore_eos`).
    pub max_tokens: u32,
    /// Prompt tokens when known without the server's tokenizer (token-id prompts).
    pub input_tokens: Option<u64>,
    /// The `usage.prompt_tokens` the server must report (text prompts, counted by its own
    /// tokenizer before sending): a different count is flagged, never accepted.
    pub expected_prompt_tokens: Option<u64>,
}

/// Builds the requests of a run.
#[derive(Debug)]
pub struct Workload {
    spec: WorkloadSpec,
    /// The body every request shares, when they all share one (catid without a unique prefix).
    shared: Option<RequestSpec>,
}

impl Workload {
    /// A workload; reads nothing (files are read by [`Source::parse`]).
    pub fn new(spec: WorkloadSpec) -> Result<Self, String> {
        check(&spec)?;
        let mut workload = Workload { spec, shared: None };
        let fixed = workload.spec.lengths.input_dist == Dist::Fixed
            && workload.spec.lengths.output_dist == Dist::Fixed;
        if matches!(workload.spec.source, Source::Catid) && !workload.spec.unique_prefix && fixed {
            workload.shared = Some(workload.build(0));
        }
        Ok(workload)
    }

    /// Request number `index` of the run (numbered across warm-up and all levels).
    pub fn request(&self, index: u64) -> RequestSpec {
        match &self.shared {
            Some(shared) => shared.clone(),
            None => self.build(index),
        }
    }

    /// The workload's name in the results: `catid`, `random` or `file:PATH`.
    pub fn name(&self) -> String {
        match &self.spec.source {
            Source::Catid => "catid".into(),
            Source::Random => "random".into(),
            Source::Text(_) => text::NAME.into(),
            Source::File { path, .. } => format!("file:{path}"),
            Source::Trace(trace) => format!("trace:{}", trace.path),
        }
    }

    /// What the numbers mean, when a reader could mistake them.
    pub fn note(&self) -> Option<&'static str> {
        match (&self.spec.source, self.spec.unique_prefix) {
            (Source::Catid, false) => Some(
                "decode-throughput test: every request sends the same prompt, so a prefix cache \
                 serves it after the first request and prefill is mostly not measured",
            ),
            (Source::Catid, true) => Some(
                "decode-throughput test with a distinct leading token per request: prefix caches \
                 cannot serve the prompt, but its repeated body still makes the output easy to \
                 predict for speculative decoding",
            ),
            _ => None,
        }
    }

    /// The trace a replay sends, if this workload is one.
    pub fn trace(&self) -> Option<&Trace> {
        match &self.spec.source {
            Source::Trace(trace) => Some(trace),
            _ => None,
        }
    }

    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    fn build(&self, index: u64) -> RequestSpec {
        let spec = &self.spec;
        let (input_len, output_len) = spec.lengths.of(index);
        let mut expected_prompt_tokens = None;
        let (content, max_tokens) = match &spec.source {
            Source::Catid => (self.catid_prompt(index, input_len), output_len),
            Source::Text(text) => {
                // Built for every request of the run; the modulo only guards the arithmetic.
                let prompt = &text.prompts[(index % text.prompts.len().max(1) as u64) as usize];
                expected_prompt_tokens = Some(prompt.expected_prompt_tokens);
                (Content::Text(prompt.text.clone()), output_len)
            }
            Source::Random => (self.random_prompt(index, input_len), output_len),
            Source::File { prompts, .. } => {
                let prompt = &prompts[(index % prompts.len() as u64) as usize];
                (
                    self.prefixed(prompt.content.clone(), index),
                    prompt.max_tokens.unwrap_or(output_len),
                )
            }
            Source::Trace(trace) => self.trace_prompt(trace, index),
        };
        let input_tokens = match &content {
            Content::Ids(ids) => Some(ids.len() as u64),
            _ => None,
        };
        RequestSpec {
            body: body(spec, &content, max_tokens),
            max_tokens,
            input_tokens,
            expected_prompt_tokens,
        }
    }

    /// Turn `turn` (from 0) of conversation `number`: the conversation so far (each earlier user
    /// message and the server's reply, in `history`), then a new user message of the drawn
    /// length in catid's or random's words. Chat sends them as messages, completions as one text
    /// (token ids could not hold the replies, which come back as text). Returns the request and
    /// its new message.
    pub fn turn(&self, number: u64, turn: u32, history: &[(String, String)]) -> (RequestSpec, String) {
        let spec = &self.spec;
        let index = number * u64::from(spec.turns) + u64::from(turn);
        let (input_len, max_tokens) = spec.lengths.of(index);
        let mut message = self.words(index, input_len);
        if turn == 0 {
            message = self.unique_text(message, index);
        }
        let content = match spec.api {
            Api::Chat => {
                let said = history.iter().flat_map(|(user, reply)| {
                    [
                        json!({"role": "user", "content": user}),
                        json!({"role": "assistant", "content": reply}),
                    ]
                });
                let new = json!({"role": "user", "content": message});
                Content::Messages(Value::Array(said.chain([new]).collect()))
            }
            Api::Completions => Content::Text(
                history
                    .iter()
                    .flat_map(|(user, reply)| [user.as_str(), reply.as_str()])
                    .chain([message.as_str()])
                    .collect(),
            ),
        };
        let request = RequestSpec {
            body: body(spec, &content, max_tokens),
            max_tokens,
            input_tokens: None,
            expected_prompt_tokens: None,
        };
        (request, message)
    }

    fn catid_prompt(&self, index: u64, len: u32) -> Content {
        let spec = &self.spec;
        let content = match spec.api {
            Api::Completions => Content::Ids(vec![spec.token_id; len as usize]),
            Api::Chat => Content::Text(self.words(index, len)),
        };
        self.with_unique_start(content, index)
    }

    fn random_prompt(&self, index: u64, len: u32) -> Content {
        let spec = &self.spec;
        let content = match spec.api {
            Api::Completions => {
                let mut rng = Rng::for_item(spec.seed, index);
                let span = u64::from(ID_RANGE.end - ID_RANGE.start);
                Content::Ids(
                    (0..len)
                        .map(|_| ID_RANGE.start + rng.below(span) as u32)
                        .collect(),
                )
            }
            Api::Chat => Content::Text(self.words(index, len)),
        };
        self.with_unique_start(content, index)
    }

    /// Line `index` of the trace: its prompt from its hash ids' blocks, its output length.
    fn trace_prompt(&self, trace: &Trace, index: u64) -> (Content, u32) {
        let line = (index % trace.lines.len() as u64) as usize;
        let content = match self.spec.api {
            Api::Completions => {
                let span = u64::from(ID_RANGE.end - ID_RANGE.start);
                let ids = trace.draws(line, self.spec.seed, span);
                Content::Ids(ids.into_iter().map(|d| ID_RANGE.start + d as u32).collect())
            }
            Api::Chat => {
                let words = trace.draws(line, self.spec.seed, CHAT_WORDS.len() as u64);
                Content::Text(words.into_iter().map(|d| CHAT_WORDS[d as usize]).collect())
            }
        };
        (content, trace.lines[line].output_length)
    }

    /// `len` one-token words: catid's word repeated, or random ones (request `index`'s draw).
    fn words(&self, index: u64, len: u32) -> String {
        if matches!(self.spec.source, Source::Catid) {
            return CHAT_WORD.repeat(len as usize);
        }
        let mut rng = Rng::for_item(self.spec.seed, index);
        (0..len)
            .map(|_| CHAT_WORDS[rng.below(CHAT_WORDS.len() as u64) as usize])
            .collect()
    }

    /// With `--unique-prefix`, overwrites the prompt's first tokens (the length stays exact):
    /// the request's own token first, then the run's.
    fn with_unique_start(&self, content: Content, index: u64) -> Content {
        if !self.spec.unique_prefix {
            return content;
        }
        match content {
            Content::Ids(mut ids) => {
                let prefix = self.prefix_ids(index);
                let n = prefix.len().min(ids.len());
                ids[..n].copy_from_slice(&prefix[..n]);
                Content::Ids(ids)
            }
            Content::Text(text) => Content::Text(self.unique_text(text, index)),
            messages => messages,
        }
    }

    /// With `--unique-prefix`, a text of words that starts with request `index`'s prefix instead
    /// of its first words (the length stays that of the text).
    fn unique_text(&self, text: String, index: u64) -> String {
        if !self.spec.unique_prefix {
            return text;
        }
        let prefix = self.prefix_text(index);
        // Drop as many leading words as the prefix is long (words are four bytes).
        let skip = prefix.len().div_ceil(CHAT_WORD.len()) * CHAT_WORD.len();
        format!("{prefix}{}", text.get(skip..).unwrap_or(""))
    }

    /// With `--unique-prefix`, puts the prefix before a file's prompt.
    fn prefixed(&self, content: Content, index: u64) -> Content {
        if !self.spec.unique_prefix {
            return content;
        }
        match content {
            Content::Ids(ids) => Content::Ids([self.prefix_ids(index).to_vec(), ids].concat()),
            Content::Text(text) => Content::Text(format!("{} {text}", self.prefix_text(index))),
            Content::Messages(mut messages) => {
                let first = messages.get_mut(0).and_then(|m| m.get_mut("content"));
                if let Some(Value::String(text)) = first {
                    *text = format!("{} {text}", self.prefix_text(index));
                }
                Content::Messages(messages)
            }
        }
    }

    fn prefix_ids(&self, index: u64) -> [u32; 2] {
        let span = u64::from(ID_RANGE.end - ID_RANGE.start);
        let id = |n: u64| ID_RANGE.start + (n % span) as u32;
        [id(index), id(self.spec.nonce)]
    }

    fn prefix_text(&self, index: u64) -> String {
        format!("{index}-{:x}:", self.spec.nonce & 0xffff_ffff)
    }
}

/// Checks the combinations a workload cannot serve.
fn check(spec: &WorkloadSpec) -> Result<(), String> {
    if let Source::Text(text) = &spec.source {
        if text.prompts.is_empty() {
            return Err("--workload text: no prompt was cut (see text::build)".into());
        }
        return check_text(spec.turns, spec.unique_prefix);
    }
    let Source::File { path, prompts } = &spec.source else {
        return Ok(());
    };
    if prompts.is_empty() {
        return Err(format!("--workload {path}: the file has no prompts"));
    }
    if spec.turns > 1 {
        return Err(format!(
            "--workload {path}: --turns builds each conversation from catid's or random's words; \
             a prompts file's `messages` already are a conversation (send them without --turns)"
        ));
    }
    if let Some(dist) = spec.lengths.input_dist.label() {
        return Err(format!(
            "--workload {path}: the prompts come from the file, so their lengths cannot be drawn \
             from {dist}; leave out --input-dist (and use --output-dist instead of --range-ratio)"
        ));
    }
    let kind = |c: &Content| match c {
        Content::Ids(_) => "token ids",
        Content::Text(_) => "text",
        Content::Messages(_) => "messages",
    };
    let misfit = prompts.iter().position(|p| {
        matches!(
            (&p.content, spec.api),
            (Content::Ids(_), Api::Chat) | (Content::Messages(_), Api::Completions)
        )
    });
    match misfit {
        Some(i) => Err(format!(
            "--workload {path}: prompt {} has {}, which --api {} cannot send",
            i + 1,
            kind(&prompts[i].content),
            match spec.api {
                Api::Chat => "chat",
                Api::Completions => "completions",
            }
        )),
        None => Ok(()),
    }
}

/// The text workload sends each request a passage of its own, cut to an exact length: checked
/// before any prompt is cut.
pub fn check_text(turns: u32, unique_prefix: bool) -> Result<(), String> {
    if turns > 1 {
        return Err(
            "--workload text: --turns builds conversations from catid's or random's words; \
             text prompts are single requests (leave out --turns)"
                .into(),
        );
    }
    if unique_prefix {
        return Err(
            "--workload text: every request already starts at a passage of its own, so no \
             prefix cache serves it; leave out --unique-prefix (it would break the text and its \
             exact length)"
                .into(),
        );
    }
    Ok(())
}

impl Source {
    /// `catid`, `random`, `text` (its prompts built later, see `text::build`), or the path of a JSONL prompts file (read now).
    pub fn parse(text: &str) -> Result<Source, String> {
        match text {
            "catid" => Ok(Source::Catid),
            "random" => Ok(Source::Random),
            text::NAME => Ok(Source::Text(std::sync::Arc::default())),
            path => read_prompts(Path::new(path)).map(|prompts| Source::File {
                path: path.to_string(),
                prompts,
            }),
        }
    }
}

/// Reads a JSONL prompts file: one object per line with `prompt` (text or token ids) or
/// `messages` (a chat), and optionally `max_tokens` (or `output_len`). Blank lines are skipped.
fn read_prompts(path: &Path) -> Result<Vec<FilePrompt>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "--workload {}: cannot read the prompts file ({e}); the workload is catid, random, \
             text, or a JSONL file",
            path.display()
        )
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            parse_prompt(line).map_err(|e| format!("--workload {}:{}: {e}", path.display(), n + 1))
        })
        .collect()
}

fn parse_prompt(line: &str) -> Result<FilePrompt, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let max_tokens = match value.get("max_tokens").or_else(|| value.get("output_len")) {
        None => None,
        Some(n) => Some(
            n.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n >= 1)
                .ok_or("max_tokens must be a positive integer")?,
        ),
    };
    let content = match (value.get("prompt"), value.get("messages")) {
        (Some(Value::String(text)), None) => Content::Text(text.clone()),
        (Some(Value::Array(ids)), None) if !ids.is_empty() => Content::Ids(
            ids.iter()
                .map(|id| id.as_u64().and_then(|n| u32::try_from(n).ok()))
                .collect::<Option<_>>()
                .ok_or("prompt token ids must be integers from 0 to 4294967295")?,
        ),
        (None, Some(Value::Array(messages))) if !messages.is_empty() => {
            Content::Messages(Value::Array(messages.clone()))
        }
        _ => {
            return Err(
                "each line needs `prompt` (text or a list of token ids) or `messages` (a list)".into(),
            )
        }
    };
    Ok(FilePrompt { content, max_tokens })
}

/// The JSON body of a request: `ignore_eos` so the server generates exactly `max_tokens`, and
/// the usage chunk asked for when streaming, so token counts come from the server.
fn body(spec: &WorkloadSpec, content: &Content, max_tokens: u32) -> Bytes {
    #[derive(Serialize)]
    struct UserMessage<'a> {
        role: &'static str,
        content: &'a str,
    }
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Input<'a> {
        Ids(&'a [u32]),
        Text(&'a str),
        User([UserMessage<'a>; 1]),
        Messages(&'a Value),
    }
    #[derive(Serialize)]
    struct StreamOptions {
        include_usage: bool,
    }
    #[derive(Serialize)]
    struct Body<'a> {
        model: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        prompt: Option<Input<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        messages: Option<Input<'a>>,
        max_tokens: u32,
        ignore_eos: bool,
        temperature: f64,
        stream: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        stream_options: Option<StreamOptions>,
    }
    let input = match content {
        Content::Ids(ids) => Input::Ids(ids),
        Content::Text(text) if spec.api == Api::Chat => Input::User([UserMessage {
            role: "user",
            content: text,
        }]),
        Content::Text(text) => Input::Text(text),
        Content::Messages(messages) => Input::Messages(messages),
    };
    let (prompt, messages) = match spec.api {
        Api::Completions => (Some(input), None),
        Api::Chat => (None, Some(input)),
    };
    let body = Body {
        model: &spec.model,
        prompt,
        messages,
        max_tokens,
        ignore_eos: true,
        temperature: 0.0,
        stream: spec.stream,
        stream_options: spec.stream.then_some(StreamOptions { include_usage: true }),
    };
    // Serialising these plain structs into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: Source, api: Api, unique_prefix: bool) -> WorkloadSpec {
        WorkloadSpec {
            source,
            api,
            model: "m".into(),
            lengths: Lengths {
                input_len: 8,
                input_dist: Dist::Fixed,
                output_len: 4,
                output_dist: Dist::Fixed,
                seed: 1,
            },
            token_id: DEFAULT_TOKEN_ID,
            unique_prefix,
            stream: true,
            turns: 1,
            seed: 1,
            nonce: 12345,
        }
    }

    fn json(request: &RequestSpec) -> Value {
        serde_json::from_slice(&request.body).unwrap()
    }

    #[test]
    fn catid_repeats_one_token_and_asks_for_exact_output() {
        let w = Workload::new(spec(Source::Catid, Api::Completions, false)).unwrap();
        let body = json(&w.request(3));
        assert_eq!(body["prompt"], serde_json::json!(vec![23066; 8]));
        assert_eq!(body["max_tokens"], 4);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(w.request(3).input_tokens, Some(8));
        assert!(w.note().unwrap().contains("decode-throughput"));
    }

    #[test]
    fn unique_prefix_changes_the_leading_token_and_keeps_the_length() {
        let w = Workload::new(spec(Source::Catid, Api::Completions, true)).unwrap();
        let (a, b) = (json(&w.request(0)), json(&w.request(1)));
        let (a, b) = (a["prompt"].as_array().unwrap(), b["prompt"].as_array().unwrap());
        assert_eq!((a.len(), b.len()), (8, 8));
        assert_ne!(a[0], b[0]);
        assert_eq!(a[1], b[1], "the second token is the run's");
        assert_eq!(a[2..], b[2..]);
        let chat = Workload::new(spec(Source::Catid, Api::Chat, true)).unwrap();
        let text = |i| {
            json(&chat.request(i))["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_ne!(text(0)[..4], text(1)[..4]);
        assert!(text(0).ends_with(" the the"), "{}", text(0));
    }

    #[test]
    fn random_prompts_are_exact_seeded_and_distinct() {
        let w = Workload::new(spec(Source::Random, Api::Completions, false)).unwrap();
        let a = json(&w.request(0))["prompt"].clone();
        assert_eq!(a.as_array().unwrap().len(), 8);
        assert_eq!(a, json(&w.request(0))["prompt"]);
        assert_ne!(a, json(&w.request(1))["prompt"]);
        // Seed 1's first prompt, the same on every host and in every version (see rng.rs).
        assert_eq!(
            a,
            serde_json::json!([25819, 28846, 8764, 12801, 24520, 13464, 25802, 7794])
        );
        let chat = Workload::new(spec(Source::Random, Api::Chat, false)).unwrap();
        let text = json(&chat.request(0))["messages"][0]["content"].clone();
        assert_eq!(text.as_str().unwrap().len(), 8 * 4);
    }

    #[test]
    fn a_turn_sends_the_history_then_a_new_message() {
        let chat = Workload::new(WorkloadSpec {
            turns: 3,
            ..spec(Source::Random, Api::Chat, true)
        })
        .unwrap();
        let (first, said) = chat.turn(2, 0, &[]);
        assert_eq!(
            json(&first)["messages"],
            json!([{"role": "user", "content": said}])
        );
        // Request 2 × 3 + 0 = 6's unique prefix starts the conversation, and only its first turn.
        assert!(said.starts_with(&chat.prefix_text(6)), "{said}");
        let history = [(said.clone(), " reply".to_string())];
        let (second, new) = chat.turn(2, 1, &history);
        assert_eq!(
            json(&second)["messages"],
            json!([
                {"role": "user", "content": said},
                {"role": "assistant", "content": " reply"},
                {"role": "user", "content": new}
            ])
        );
        assert_eq!(new.len(), 8 * 4, "{new}");
        assert!(!new.contains(':'), "no prefix after the first turn: {new}");
        let completions = Workload::new(WorkloadSpec {
            turns: 2,
            ..spec(Source::Catid, Api::Completions, false)
        })
        .unwrap();
        let (request, new) = completions.turn(0, 1, &[(" the the".into(), " ok".into())]);
        assert_eq!(new, " the".repeat(8));
        assert_eq!(json(&request)["prompt"], format!(" the the ok{new}"));
        assert_eq!((request.max_tokens, request.input_tokens), (4, None));
    }

    #[test]
    fn text_prompts_are_sent_as_text_with_the_usage_they_must_get() {
        let prompts = TextPrompts {
            prompts: vec![
                text::TextPrompt {
                    text: "It is a truth".into(),
                    expected_prompt_tokens: 4,
                },
                text::TextPrompt {
                    text: "universally acknowledged".into(),
                    expected_prompt_tokens: 11,
                },
            ],
            info: text::TextInfo::default(),
        };
        let source = Source::Text(std::sync::Arc::new(prompts));
        let w = Workload::new(spec(source.clone(), Api::Completions, false)).unwrap();
        assert_eq!(w.name(), "text");
        assert_eq!(json(&w.request(1))["prompt"], "universally acknowledged");
        let first = w.request(0);
        assert_eq!(
            (first.expected_prompt_tokens, first.input_tokens),
            (Some(4), None)
        );
        let chat = Workload::new(spec(source, Api::Chat, false)).unwrap();
        assert_eq!(
            json(&chat.request(0))["messages"],
            json!([{"role": "user", "content": "It is a truth"}])
        );
        let empty = Source::parse("text").unwrap();
        let err = Workload::new(spec(empty, Api::Chat, false)).unwrap_err();
        assert!(err.contains("no prompt was cut"), "{err}");
        assert!(check_text(2, false).unwrap_err().contains("leave out --turns"));
        assert!(check_text(1, true)
            .unwrap_err()
            .contains("leave out --unique-prefix"));
    }

    #[test]
    fn reads_prompt_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        std::fs::write(
            &path,
            "{\"prompt\": \"hello\", \"max_tokens\": 9}\n\n{\"prompt\": [1, 2, 3]}\n",
        )
        .unwrap();
        let source = Source::parse(path.to_str().unwrap()).unwrap();
        let w = Workload::new(spec(source.clone(), Api::Completions, false)).unwrap();
        assert_eq!(json(&w.request(0))["prompt"], "hello");
        assert_eq!(w.request(0).max_tokens, 9);
        assert_eq!(json(&w.request(1))["prompt"], serde_json::json!([1, 2, 3]));
        assert_eq!(w.request(1).max_tokens, 4);
        assert_eq!(json(&w.request(2))["prompt"], "hello");
        let err = Workload::new(spec(source, Api::Chat, false)).unwrap_err();
        assert!(err.contains("prompt 2 has token ids"), "{err}");
    }

    #[test]
    fn bad_prompt_files_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        std::fs::write(&path, "{\"prompt\": \"a\"}\n{\"text\": 1}\n").unwrap();
        let err = Source::parse(path.to_str().unwrap()).unwrap_err();
        assert!(
            err.ends_with(
                "p.jsonl:2: each line needs `prompt` (text or a list of token ids) or `messages` (a list)"
            ),
            "{err}"
        );
        let err = Source::parse("/nonexistent/x.jsonl").unwrap_err();
        assert!(err.contains("cannot read the prompts file"), "{err}");
    }
}
