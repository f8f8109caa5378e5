//! `--workload text`: natural English from a public-domain book shipped in the binary (Jane
//! Austen's *Pride and Prejudice*, see `corpus/PROVENANCE.md`), each request a passage of its
//! own cut to exactly its drawn number of tokens of the served model's tokenizer, asked through
//! the server's tokenize endpoint (`tokenizer`). Every prompt is cut and re-counted before the
//! first level (`cut`), so no tokenize call competes with the measurement; each response's
//! `usage.prompt_tokens` is then checked against the count expected (`metrics`, `validity`).
//!
//! What the length means: with `--api completions` the text is sent as the prompt and counts
//! exactly `--input-len` tokens as the server counts a text prompt (a BOS the tokenizer adds is
//! one of them), so `usage.prompt_tokens` is `--input-len`. With `--api chat` the user message's
//! text counts `--input-len` tokens alone, and `usage.prompt_tokens` is that plus the chat
//! template's tokens, which the server's tokenize endpoint counts for each prompt (the records
//! carry them as `chat_template_tokens`).
//!
//! Text, not token ids, is sent: the server then tokenizes it as it does in production (its
//! tokenizer's time is in TTFT, as for every client that sends text), and the prompts the server
//! receives can be read and checked as text.

mod cut;
mod tokenizer;

use std::sync::Arc;

use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};

use self::cut::Cut;
use self::tokenizer::ServerTokenizer;
use super::client::Api;
use super::client::Client;
use super::lengths::Lengths;
use super::rng::Rng;

/// The workload's name on the command line and in the records.
pub const NAME: &str = "text";
/// The corpus: *Pride and Prejudice*, its text alone (see `corpus/PROVENANCE.md`).
const CORPUS: &str = include_str!("../corpus/pride-and-prejudice.txt");
/// The corpus's name in the records.
const CORPUS_NAME: &str = "pride-and-prejudice (Jane Austen, Project Gutenberg eBook #1342)";
/// Prompts cut at once (each waits on the server's tokenize endpoint).
const IN_PARALLEL: usize = 8;
/// Passages tried per prompt before giving up (one fails only when a character adds two tokens
/// exactly at the length asked).
const STARTS_PER_PROMPT: usize = 8;

/// One prompt, cut and counted.
#[derive(Debug, Clone)]
pub struct TextPrompt {
    pub text: String,
    /// The `usage.prompt_tokens` the server should report for it.
    pub expected_prompt_tokens: u64,
}

/// The prompts of a run, request n being prompt n, and where they came from.
#[derive(Debug, Clone, Default)]
pub struct TextPrompts {
    pub prompts: Vec<TextPrompt>,
    pub info: TextInfo,
}

/// What the records say of the text workload.
#[derive(Debug, Clone, Default)]
pub struct TextInfo {
    /// Where token counts came from (`server POST /tokenize (vLLM/SGLang form)`).
    pub tokenizer: &'static str,
    pub corpus: &'static str,
    pub corpus_sha256: String,
    /// The chat template's tokens around the message (least, most), with `--api chat`.
    pub chat_template_tokens: Option<(u64, u64)>,
}

/// The corpus's paragraph and sentence starts, where passages begin.
fn starts(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    let mut starts = vec![0];
    for (i, window) in bytes.windows(3).enumerate() {
        let after = i + 2;
        let paragraph = window[..2] == *b"\n\n" && window[2] != b'\n';
        let sentence = matches!(window[0], b'.' | b'?' | b'!')
            && window[1] == b' '
            && text[after..].starts_with(|c: char| c.is_uppercase() || c == '“');
        if paragraph || sentence {
            starts.push(after);
        }
    }
    starts
}

/// `len` bytes (or a little more, to a character boundary) of the corpus from `start`, going
/// on from its beginning after its end.
fn passage(start: usize, len: usize) -> String {
    let mut out = String::with_capacity(len + 4);
    let mut from = start;
    while out.len() < len {
        let mut to = (from + len - out.len()).min(CORPUS.len());
        while !CORPUS.is_char_boundary(to) {
            to += 1;
        }
        out.push_str(&CORPUS[from..to]);
        if to == CORPUS.len() {
            out.push_str("\n\n");
        }
        from = to % CORPUS.len();
    }
    out
}

/// The order in which a run's requests take the corpus's starts: a seeded shuffle, so every
/// request of a run starts at a passage of its own (until the run has more requests than the
/// corpus has sentences) and another seed gives other passages.
fn start_order(count: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..count).collect();
    let mut rng = Rng::new(seed ^ 0x7e47);
    for i in (1..count).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

/// Builds the first `count` prompts of a run, request n's length drawn by `lengths`, each cut
/// to it with the server's tokenizer; says on stderr what it is doing, as it can take a while.
pub async fn build(
    client: &Client,
    model: &str,
    api: Api,
    lengths: &Lengths,
    count: u64,
) -> Result<Arc<TextPrompts>, String> {
    let tokenizer = ServerTokenizer::find(client, model, api).await?;
    eprintln!(
        "rigrun bench: cutting {count} text prompts to their token counts (tokenizer: {})",
        tokenizer.source()
    );
    let starts = starts(CORPUS);
    let order = start_order(starts.len(), lengths.seed);
    let cutter = Cutter {
        tokenizer: &tokenizer,
        api,
        starts: &starts,
        order: &order,
    };
    let prompts: Vec<TextPrompt> = futures_util::stream::iter(0..count)
        .map(|index| cutter.prompt(index, lengths.of(index).0))
        .buffered(IN_PARALLEL)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let info = TextInfo {
        tokenizer: tokenizer.source(),
        corpus: CORPUS_NAME,
        corpus_sha256: format!("{:x}", Sha256::digest(CORPUS.as_bytes())),
        chat_template_tokens: template_tokens(api, lengths, &prompts),
    };
    Ok(Arc::new(TextPrompts { prompts, info }))
}

/// The chat template's tokens over the prompts (least, most), with `--api chat`.
fn template_tokens(api: Api, lengths: &Lengths, prompts: &[TextPrompt]) -> Option<(u64, u64)> {
    if api != Api::Chat {
        return None;
    }
    let extra = prompts.iter().enumerate().map(|(i, p)| {
        let asked = u64::from(lengths.of(i as u64).0);
        p.expected_prompt_tokens.saturating_sub(asked)
    });
    let (least, most) = extra.fold((u64::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k)));
    (least <= most).then_some((least, most))
}

/// What cutting one prompt needs.
struct Cutter<'a> {
    tokenizer: &'a ServerTokenizer<'a>,
    api: Api,
    starts: &'a [usize],
    order: &'a [usize],
}

impl Cutter<'_> {
    /// Request `index`'s prompt of `len` tokens: its passage cut, or the next ones when a
    /// passage has no exact cut; for chat, the whole chat's count too.
    async fn prompt(&self, index: u64, len: u32) -> Result<TextPrompt, String> {
        let target = u64::from(len);
        let first = self.order[(index % self.order.len() as u64) as usize];
        for attempt in 0..STARTS_PER_PROMPT {
            let start = self.starts[(first + attempt) % self.starts.len()];
            if let Some(text) = self.cut_from(start, target).await? {
                let expected_prompt_tokens = match self.api {
                    Api::Completions => target,
                    Api::Chat => self.tokenizer.count_chat(&text).await?,
                };
                return Ok(TextPrompt {
                    text,
                    expected_prompt_tokens,
                });
            }
        }
        Err(format!(
            "--workload text: no passage of the corpus could be cut to exactly {len} tokens of \
             the server's tokenizer ({STARTS_PER_PROMPT} tried for request {index}); a \
             tokenizer that adds special tokens cannot make a prompt shorter than them"
        ))
    }

    /// The passage from `start` cut to `target` tokens; None when it has no exact cut.
    async fn cut_from(&self, start: usize, target: u64) -> Result<Option<String>, String> {
        // Eight bytes a token is about twice what English takes; a longer passage if not, up to
        // 64 bytes a token (no tokenizer of English needs that many).
        let mut len = (target as usize).saturating_mul(8).saturating_add(256);
        let longest = (target as usize).saturating_mul(64).saturating_add(2048);
        loop {
            let window = passage(start, len);
            let counted = cut::cut(&window, target, |text| async move {
                match self.api {
                    Api::Completions => self.tokenizer.count_prompt(&text).await,
                    Api::Chat => self.tokenizer.count_text(&text).await,
                }
            })
            .await
            .map_err(|why| format!("--workload text: the server's tokenize endpoint: {why}"))?;
            match counted {
                Cut::Exact { text, .. } => return Ok(Some(text)),
                Cut::NoExactLength => return Ok(None),
                Cut::TooShort if len < longest => len = len.saturating_mul(2),
                Cut::TooShort => {
                    return Err(format!(
                        "--workload text: the server's tokenize endpoint counts fewer than \
                         {target} tokens in {len} bytes of English text; it does not count as \
                         the model's tokenizer would"
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_the_novel_alone() {
        assert!(CORPUS.starts_with("It is a truth universally acknowledged"));
        assert!(CORPUS.trim_end().ends_with("had been the means of uniting them."));
        for gone in ["Gutenberg", "[Illustration", "_", "\r"] {
            assert!(!CORPUS.contains(gone), "{gone}");
        }
        assert!(CORPUS.len() < 1 << 20);
    }

    #[test]
    fn passages_start_at_sentences_and_go_round() {
        let s = starts(CORPUS);
        assert!(s.len() > 4000, "{}", s.len());
        for &at in &s[1..] {
            let before = &CORPUS[..at];
            let sentence = [". ", "? ", "! "].iter().any(|end| before.ends_with(end));
            assert!(
                before.ends_with("\n\n") || sentence,
                "{:?}",
                &CORPUS[at - 5..at + 20]
            );
            assert!(!CORPUS[at..].starts_with(char::is_whitespace));
        }
        let tail = passage(CORPUS.len() - 10, 30);
        assert!(tail.ends_with(&CORPUS[..18]), "{tail:?}");
        assert_eq!(passage(0, 9), "It is a t");
    }

    #[test]
    fn the_start_order_is_a_seeded_permutation() {
        let a = start_order(1000, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_eq!(a, start_order(1000, 1));
        assert_ne!(a, start_order(1000, 2));
    }
}
