//! Deterministic tokens: how prompts are counted and which tokens the sim "generates".
//!
//! Counting rule (a documented contract, there is no real tokenizer):
//! - a text is one token per 4 bytes of UTF-8, rounded up, and a completion prompt is at least
//!   1 token (`""` counts as 1). Each 4-byte chunk maps to a token id, so equal texts give equal
//!   ids, which is what prefix caching keys on;
//! - a chat adds 5 tokens per message (`<|im_start|>`, role, newline, `<|im_end|>`, newline)
//!   plus 3 for the assistant reply header, as ChatML templates do.
//!
//! Output is a fixed sequence of 4-byte pieces per request seed (the seed hashes the prompt's
//! token ids and the request's `seed` field), so the same request always gets the same text, and
//! a client that counts the text by the rule gets the usage's `completion_tokens` (less the EOS
//! token, which has no text, and the tokens a stop string cut off).

/// Vocabulary size token ids are reduced to (Qwen's).
const VOCAB_SIZE: u64 = 151_936;
/// ChatML `<|im_start|>`.
const IM_START: u32 = 151_644;
/// ChatML `<|im_end|>`.
const IM_END: u32 = 151_645;
/// A newline token.
const NEWLINE: u32 = 198;
/// Bytes of text per counted token.
const BYTES_PER_TOKEN: usize = 4;

/// The pieces generated tokens are drawn from: plain ASCII (no JSON escaping), each exactly
/// [`BYTES_PER_TOKEN`] bytes, so that a reply's text counts, by the rule above, exactly as many
/// tokens as it has pieces.
const WORDS: [&str; 64] = [
    " the", " GPU", " and", " for", " all", " its", " one", " per", " new", " run", " can", " has", " low",
    " may", " set", " big", " end", " few", " key", " use", " now", " how", " not", " are", " was", " our",
    " out", " two", " way", " see", " own", " get", " the", " far", " yet", " off", " top", " add", " job",
    " fit", " the", " cut", " put", " due", " sum", " bit", " map", " row", " log", " mix", ". It", ", so",
    ". We", ", as", " the", " and", ". In", " bus", " box", " sky", " day", " the", " KV,", " end",
];

/// SplitMix64 finaliser: a fast, well-mixed, platform-independent 64-bit hash step.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Token ids of a text by the 4-bytes rule; empty for an empty text.
fn content_ids(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.as_bytes().chunks(BYTES_PER_TOKEN).map(|chunk| {
        let word = chunk.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        // The remainder is below VOCAB_SIZE, so it fits in u32.
        (mix(word) % VOCAB_SIZE) as u32
    })
}

/// Tokens a text counts by the rule (one per 4 bytes, rounded up; 0 for an empty text): what a
/// client that follows the documented rule computes for a prompt's text or a reply's.
#[cfg(test)]
pub fn count_text(text: &str) -> usize {
    text.len().div_ceil(BYTES_PER_TOKEN)
}

/// Token ids of a text by the rule, empty for an empty text (llama.cpp's `/tokenize`).
pub fn text_ids(text: &str) -> Vec<u32> {
    content_ids(text).collect()
}

/// Token ids of a completion prompt given as text: at least one token.
pub fn prompt_ids(text: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = content_ids(text).collect();
    if ids.is_empty() {
        ids.push(0);
    }
    ids
}

/// Token ids of a chat: each `(role, content)` message in a ChatML frame, then the reply header.
pub fn chat_ids<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> Vec<u32> {
    let mut ids = Vec::new();
    for (role, content) in messages {
        ids.extend([IM_START, role_id(role), NEWLINE]);
        ids.extend(content_ids(content));
        ids.extend([IM_END, NEWLINE]);
    }
    ids.extend([IM_START, role_id("assistant"), NEWLINE]);
    ids
}

/// One token id standing for a role name.
fn role_id(role: &str) -> u32 {
    let hash = role.bytes().fold(0u64, |acc, b| mix(acc ^ u64::from(b)));
    (hash % VOCAB_SIZE) as u32
}

/// The seed of a request's output: a hash of its prompt ids and of the client's `seed`.
pub fn request_seed(prompt: &[u32], client_seed: Option<u64>) -> u64 {
    let start = mix(client_seed.unwrap_or(0));
    prompt.iter().fold(start, |acc, &t| mix(acc ^ u64::from(t)))
}

/// Where a request would stop on its own (EOS), drawn log-uniformly in `[min, max]` from its seed.
pub fn natural_length(seed: u64, min: u32, max: u32) -> u32 {
    let unit = (mix(seed ^ 0x5eed) >> 11) as f64 / (1u64 << 53) as f64;
    let (lo, hi) = (f64::from(min.max(1)).ln(), f64::from(max.max(min).max(1)).ln());
    let len = (lo + unit * (hi - lo)).exp().round();
    // `len` lies in [min, max] up to rounding; the clamp keeps it there.
    (len as u32).clamp(min.max(1), max.max(min).max(1))
}

/// The text of output token `index` of the request with `seed`.
fn word(seed: u64, index: u32) -> &'static str {
    let pick = mix(seed ^ mix(u64::from(index))) % WORDS.len() as u64;
    WORDS[pick as usize]
}

/// Why a completion ended, as the OpenAI API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` reached.
    Length,
    /// EOS or a stop string.
    Stop,
}

impl FinishReason {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::Stop => "stop",
        }
    }
}

/// A request's whole output, decided up front: the scheduler only paces its tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The output text (stop strings removed).
    text: String,
    /// Byte offset in `text` where each token's text ends.
    ends: Vec<usize>,
    /// Why it ends.
    pub finish: FinishReason,
}

impl Completion {
    /// Plans the output: words from `seed` until `max_tokens`, the natural EOS at `eos_at`
    /// (a token with empty text, as real servers count it), or the first `stop` string.
    /// As in vLLM, the first `min_tokens` tokens are never EOS and never complete a stop
    /// string (EOS moves to token `min_tokens + 1` at the earliest).
    pub fn plan(seed: u64, max_tokens: u32, min_tokens: u32, eos_at: Option<u32>, stop: &[String]) -> Self {
        let eos = eos_at
            .map(|n| n.max(min_tokens.saturating_add(1)))
            .filter(|&n| n >= 1 && n <= max_tokens);
        let limit = eos.unwrap_or(max_tokens);
        let mut out = Self {
            text: String::new(),
            ends: Vec::with_capacity(limit as usize),
            finish: if eos.is_some() {
                FinishReason::Stop
            } else {
                FinishReason::Length
            },
        };
        for index in 0..limit {
            let before = out.text.len();
            if eos != Some(index + 1) {
                out.text.push_str(word(seed, index));
            }
            out.ends.push(out.text.len());
            if index < min_tokens {
                continue;
            }
            if let Some(cut) = find_stop(&out.text, before, stop) {
                out.truncate(cut);
                break;
            }
        }
        out
    }

    /// Ends the output at byte `cut` because a stop string starts there.
    fn truncate(&mut self, cut: usize) {
        self.text.truncate(cut);
        for end in &mut self.ends {
            *end = (*end).min(cut);
        }
        self.finish = FinishReason::Stop;
    }

    /// Number of generated tokens (the usage's `completion_tokens`).
    pub fn tokens(&self) -> u32 {
        // `ends` has at most `max_tokens: u32` entries.
        self.ends.len() as u32
    }

    /// The whole output text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text of tokens `from..to` (what a stream chunk carries).
    pub fn piece(&self, from: u32, to: u32) -> &str {
        let end_of = |n: u32| match n {
            0 => 0,
            n => self.ends.get(n as usize - 1).copied().unwrap_or(self.text.len()),
        };
        &self.text[end_of(from)..end_of(to)]
    }
}

/// The earliest start of a non-empty stop string that ends after byte `old` (the text before
/// the newest token, already searched), as vLLM's incremental check does.
fn find_stop(text: &str, old: usize, stop: &[String]) -> Option<usize> {
    stop.iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let from = ceil_char_boundary(text, (old + 1).saturating_sub(s.len()));
            text[from..].find(s.as_str()).map(|at| from + at)
        })
        .min()
}

/// The smallest char boundary of `text` at or above `at` (a match can only start on one).
fn ceil_char_boundary(text: &str, mut at: usize) -> usize {
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at.min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_one_token_per_four_bytes_at_least_one() {
        assert_eq!(prompt_ids("").len(), 1);
        assert_eq!(prompt_ids("abc").len(), 1);
        assert_eq!(prompt_ids("abcd").len(), 1);
        assert_eq!(prompt_ids("abcde").len(), 2);
        assert_eq!(prompt_ids(&"x".repeat(4000)).len(), 1000);
        assert_eq!(prompt_ids("hello world"), prompt_ids("hello world"));
    }

    #[test]
    fn chat_adds_five_per_message_and_three_for_the_reply() {
        let ids = chat_ids([("system", "abcd"), ("user", "abcdefgh")]);
        assert_eq!(ids.len(), (5 + 1) + (5 + 2) + 3);
        assert_eq!(chat_ids([("user", "")]).len(), 5 + 3);
    }

    #[test]
    fn same_seed_same_text_and_seed_depends_on_prompt() {
        let a = Completion::plan(request_seed(&[1, 2, 3], None), 50, 0, None, &[]);
        let b = Completion::plan(request_seed(&[1, 2, 3], None), 50, 0, None, &[]);
        let c = Completion::plan(request_seed(&[1, 2, 4], None), 50, 0, None, &[]);
        assert_eq!(a, b);
        assert_ne!(a.text(), c.text());
        assert_eq!(a.tokens(), 50);
        assert_eq!(a.finish, FinishReason::Length);
    }

    #[test]
    fn pieces_concatenate_to_the_text() {
        let c = Completion::plan(7, 20, 0, None, &[]);
        let joined: String = (0..20).map(|i| c.piece(i, i + 1)).collect();
        assert_eq!(joined, c.text());
        assert_eq!(c.piece(0, 20), c.text());
    }

    #[test]
    fn eos_ends_early_with_an_empty_last_token() {
        let c = Completion::plan(7, 20, 0, Some(5), &[]);
        assert_eq!(c.tokens(), 5);
        assert_eq!(c.finish, FinishReason::Stop);
        assert_eq!(c.piece(4, 5), "");
        let long = Completion::plan(7, 20, 0, Some(50), &[]);
        assert_eq!((long.tokens(), long.finish), (20, FinishReason::Length));
    }

    #[test]
    fn stop_string_cuts_the_text_before_it() {
        let full = Completion::plan(11, 200, 0, None, &[]);
        let stop = full.piece(10, 11).to_string();
        let at = full
            .text()
            .find(&stop)
            .expect("the 11th token's text is in the text");
        let c = Completion::plan(11, 200, 0, None, std::slice::from_ref(&stop));
        assert_eq!(c.text(), &full.text()[..at]);
        assert_eq!(c.finish, FinishReason::Stop);
        assert!(c.tokens() < 200);
        assert_eq!(c.piece(0, c.tokens()), c.text());
    }

    #[test]
    fn min_tokens_moves_eos_after_them_and_clamps_to_max_tokens() {
        let c = Completion::plan(7, 20, 10, Some(5), &[]);
        assert_eq!((c.tokens(), c.finish), (11, FinishReason::Stop));
        assert_eq!(c.piece(10, 11), "");
        let later = Completion::plan(7, 20, 10, Some(15), &[]);
        assert_eq!((later.tokens(), later.finish), (15, FinishReason::Stop));
        let fixed = Completion::plan(7, 20, 20, Some(5), &[]);
        assert_eq!((fixed.tokens(), fixed.finish), (20, FinishReason::Length));
        assert_eq!(fixed.text(), Completion::plan(7, 20, 0, None, &[]).text());
    }

    #[test]
    fn stop_strings_complete_only_after_min_tokens() {
        let full = Completion::plan(11, 200, 0, None, &[]);
        let stop = " the".to_string();
        let first = full.text().find(&stop).expect("the vocabulary has ' the'");
        // The token count whose text covers the first stop string.
        let covering = (1..=200).find(|&n| full.piece(0, n).len() >= first + stop.len());
        let min = covering.expect("found within 200 tokens");
        let c = Completion::plan(11, 200, min, None, std::slice::from_ref(&stop));
        let after = full.piece(0, min).len() + 1 - stop.len();
        let next = full.text()[after..].find(&stop).map(|at| after + at);
        assert_eq!(c.text(), &full.text()[..next.expect("a later ' the'")]);
        assert!(c.tokens() > min);
        assert_eq!(c.finish, FinishReason::Stop);
    }

    #[test]
    fn natural_length_stays_in_range_and_is_deterministic() {
        for seed in 0..1000 {
            let n = natural_length(seed, 8, 64);
            assert!((8..=64).contains(&n), "{n}");
            assert_eq!(n, natural_length(seed, 8, 64));
        }
        assert_eq!(natural_length(3, 10, 10), 10);
    }

    /// A client counting the reply's text by the rule gets the usage's count: every piece is
    /// one token's worth of bytes (without EOS or stop strings, which the docs set apart).
    #[test]
    fn a_reply_counts_its_tokens_under_the_rule() {
        for seed in 0..200 {
            for n in [1, 2, 7, 100, 1000] {
                let c = Completion::plan(seed, n, 0, None, &[]);
                assert_eq!(
                    count_text(c.text()),
                    c.tokens() as usize,
                    "seed {seed}, {n} tokens"
                );
                assert_eq!(prompt_ids(c.text()).len(), c.tokens() as usize);
            }
        }
        let with_eos = Completion::plan(3, 50, 0, Some(20), &[]);
        assert_eq!(count_text(with_eos.text()), 19, "the EOS token has no text");
        for w in WORDS {
            assert_eq!(w.len(), BYTES_PER_TOKEN, "{w:?}");
        }
    }

    #[test]
    fn words_need_no_json_escaping() {
        for w in WORDS {
            assert_eq!(serde_json::to_string(w).unwrap(), format!("\"{w}\""));
        }
    }
}
