//! Cutting a passage to exactly N tokens of a tokenizer that can only be asked for counts (the
//! server's tokenize endpoint): a search over the passage's cut point, each candidate counted as
//! it will be sent, so the text returned has been re-tokenized and counts exactly N.
//!
//! A decoded slice of token ids can re-tokenize to another count at its edges (a word split
//! across the cut merges differently), so this never trusts an estimate: it estimates where the
//! cut lies from the bytes per token seen so far, counts the text cut there, and narrows the
//! bracket [too few, too many] until a cut counts N. Cuts prefer word ends, then any character
//! boundary (an exact cut inside a word is moved to a word end that counts the same, where one
//! does). When one more character adds two tokens right at N, this start has no exact cut
//! and the caller moves to another passage.

use std::future::Future;

/// At most this many counts per passage (a typical cut takes 2 to 8).
const MAX_COUNTS: u32 = 40;
/// The first guess of bytes per token (English in common BPE vocabularies: about 4 to 4.5).
const FIRST_BYTES_PER_TOKEN: f64 = 4.0;

/// What cutting one passage came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// The passage's first bytes, counting exactly the target, and the counts it took.
    Exact { text: String, counts: u32 },
    /// The whole passage counts fewer tokens than the target: give a longer one.
    TooShort,
    /// No cut of this passage counts exactly the target (or the search gave up): try another.
    NoExactLength,
}

/// A cut point and its count.
#[derive(Debug, Clone, Copy)]
struct Point {
    at: usize,
    count: u64,
}

/// Cuts `passage` to its longest-possible prefix (a word end where one fits) that `count`
/// counts as exactly `target` tokens. `count` is asked for each candidate text.
pub async fn cut<F, Fut>(passage: &str, target: u64, mut count: F) -> Result<Cut, String>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    if passage.is_empty() {
        return Ok(Cut::TooShort);
    }
    // Below: the longest cut known to count fewer; above: the shortest known to count more.
    let mut below: Option<Point> = None;
    let mut above: Option<Point> = None;
    let guess = (target as f64 * FIRST_BYTES_PER_TOKEN) as usize;
    let mut at = snap(passage, guess.clamp(1, passage.len()), 0, passage.len() + 1);
    for counts in 1..=MAX_COUNTS {
        let Some(cut_at) = at else {
            return Ok(Cut::NoExactLength);
        };
        let n = count(passage[..cut_at].to_string()).await?;
        if n == target {
            let low = below.map_or(0, |p| p.at);
            let high = above.map_or(passage.len() + 1, |p| p.at);
            let (at, more) = at_word_end(passage, target, (low, cut_at, high), &mut count).await?;
            return Ok(Cut::Exact {
                text: passage[..at].to_string(),
                counts: counts + more,
            });
        }
        let point = Point { at: cut_at, count: n };
        if n < target {
            if cut_at == passage.len() {
                return Ok(Cut::TooShort);
            }
            below = Some(point);
        } else {
            above = Some(point);
        }
        at = next(passage, target, below, above);
    }
    Ok(Cut::NoExactLength)
}

/// An exact cut `at` inside a word moved to the word end before or after it, where one inside
/// the bracket `low..high` counts the same (at most two more counts); the cut and the counts.
async fn at_word_end<F, Fut>(
    passage: &str,
    target: u64,
    (low, at, high): (usize, usize, usize),
    count: &mut F,
) -> Result<(usize, u32), String>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    if is_word_end(passage, at) {
        return Ok((at, 0));
    }
    let before = (low + 1..at).rev().find(|&w| is_word_end(passage, w));
    let after = (at + 1..high.min(passage.len() + 1)).find(|&w| is_word_end(passage, w));
    let mut counts = 0;
    for word_end in [after, before].into_iter().flatten() {
        counts += 1;
        if count(passage[..word_end].to_string()).await? == target {
            return Ok((word_end, counts));
        }
    }
    Ok((at, counts))
}

/// The next cut to count: interpolated between the bracket's ends (or extrapolated from the one
/// known), strictly inside the bracket; None when the bracket holds no character boundary.
fn next(passage: &str, target: u64, below: Option<Point>, above: Option<Point>) -> Option<usize> {
    let low = below.map_or(0, |p| p.at);
    let high = above.map_or(passage.len() + 1, |p| p.at);
    let estimate = match (below, above) {
        (Some(b), Some(a)) => {
            let per_token = (a.at - b.at) as f64 / (a.count - b.count).max(1) as f64;
            b.at as f64 + (target - b.count) as f64 * per_token
        }
        (Some(b), None) => {
            let per_token = b.at as f64 / b.count.max(1) as f64;
            b.at as f64 + (target - b.count) as f64 * per_token.max(1.0)
        }
        (None, Some(a)) => {
            let per_token = a.at as f64 / a.count.max(1) as f64;
            a.at as f64 - (a.count - target) as f64 * per_token.max(1.0)
        }
        (None, None) => return None,
    };
    let wanted = (estimate.round().max(0.0) as usize).min(passage.len());
    snap(passage, wanted, low, high)
}

/// A cut near `wanted` strictly between `low` and `high`: the last word end at or before it
/// if there is one in the bracket, else the nearest character boundary; None if the bracket
/// holds no boundary (or only the empty cut).
fn snap(passage: &str, wanted: usize, low: usize, high: usize) -> Option<usize> {
    let inside = |at: usize| at > low && at < high && at >= 1 && at <= passage.len();
    let wanted = wanted
        .clamp(low + 1, high.saturating_sub(1).max(low + 1))
        .min(passage.len());
    let word_end = (low + 1..=wanted).rev().find(|&at| is_word_end(passage, at));
    if let Some(at) = word_end.filter(|&at| inside(at)) {
        return Some(at);
    }
    let up = (wanted..high.min(passage.len() + 1)).find(|&at| passage.is_char_boundary(at));
    let down = (low + 1..=wanted).rev().find(|&at| passage.is_char_boundary(at));
    [down, up]
        .into_iter()
        .flatten()
        .filter(|&at| inside(at))
        .min_by_key(|&at| at.abs_diff(wanted))
}

/// A cut at `at` ends a word: the next character is whitespace (or the passage ends) and the
/// last one is not.
fn is_word_end(passage: &str, at: usize) -> bool {
    if at == 0 || !passage.is_char_boundary(at) {
        return false;
    }
    let next_is_space = passage[at..].chars().next().is_none_or(char::is_whitespace);
    let last_is_space = passage[..at].chars().next_back().is_some_and(char::is_whitespace);
    next_is_space && !last_is_space
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy tokenizer with real tokenizers' awkward edges: a word of up to 4 letters is one
    /// token, a longer one two (so one more letter can add a token mid-word), a space joins
    /// the word after it, and every other character is a token of its own; plus `bos` tokens.
    fn toy(text: &str, bos: u64) -> u64 {
        let mut n = bos;
        let mut word = 0usize;
        let end_word = |word: &mut usize, n: &mut u64| {
            if *word > 0 {
                *n += if *word <= 4 { 1 } else { 2 };
            }
            *word = 0;
        };
        for c in text.chars() {
            if c.is_alphanumeric() {
                word += 1;
            } else {
                end_word(&mut word, &mut n);
                if c != ' ' {
                    n += 1;
                }
            }
        }
        end_word(&mut word, &mut n);
        n
    }

    fn run_cut(passage: &str, target: u64, bos: u64) -> Cut {
        let count = |text: String| std::future::ready(Ok::<u64, String>(toy(&text, bos)));
        futures_util::FutureExt::now_or_never(cut(passage, target, count))
            .expect("the toy counter never waits")
            .unwrap()
    }

    const PASSAGE: &str = "It is a truth universally acknowledged, that a single man in \
        possession of a good fortune must be in want of a wife. However little known the \
        feelings or views of such a man may be on his first entering a neighbourhood, this \
        truth is so well fixed in the minds of the surrounding families.";

    #[test]
    fn every_length_is_cut_exactly_and_rechecked() {
        let whole = toy(PASSAGE, 0);
        // The targets some word end counts exactly, and how many of those were cut there.
        let (mut at_words, mut cut_at_words) = (0, 0);
        for target in 1..=whole {
            match run_cut(PASSAGE, target, 0) {
                Cut::Exact { text, counts } => {
                    assert_eq!(toy(&text, 0), target, "{text:?}");
                    assert!(PASSAGE.starts_with(&text));
                    assert!(counts <= 12, "{target}: {counts} counts");
                    let fits = (1..=PASSAGE.len())
                        .any(|at| is_word_end(PASSAGE, at) && toy(&PASSAGE[..at], 0) == target);
                    at_words += u32::from(fits);
                    cut_at_words += u32::from(fits && is_word_end(PASSAGE, text.len()));
                }
                other => panic!("{target}: {other:?}"),
            }
        }
        assert!(
            cut_at_words == at_words,
            "cuts prefer word ends: {cut_at_words} of the {at_words} lengths a word end has"
        );
    }

    #[test]
    fn a_bos_token_counts_and_a_short_passage_says_so() {
        match run_cut(PASSAGE, 10, 1) {
            Cut::Exact { text, .. } => assert_eq!(toy(&text, 0), 9, "{text:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(run_cut("A short one.", 50, 0), Cut::TooShort);
        assert_eq!(run_cut("", 5, 0), Cut::TooShort);
        // One token more than the BOS alone needs at least one character, which adds one.
        assert_eq!(run_cut(PASSAGE, 1, 1), Cut::NoExactLength);
    }

    #[test]
    fn a_count_that_jumps_over_the_target_has_no_exact_cut() {
        // One long word counts 2 tokens at most: 3 needs a longer passage.
        assert_eq!(run_cut("abcdefghij", 3, 0), Cut::TooShort);
        // A count that goes from 1 to 3 between two characters never counts 2.
        let jumps = |text: String| std::future::ready(Ok::<u64, String>(if text.len() < 6 { 1 } else { 3 }));
        let cut = futures_util::FutureExt::now_or_never(cut("abcdefghij", 2, jumps));
        assert_eq!(cut.unwrap().unwrap(), Cut::NoExactLength);
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let passage = "“Oh, single, my dear, to be sure!” — ça va, naïve café";
        for target in 1..=toy(passage, 0) {
            if let Cut::Exact { text, .. } = run_cut(passage, target, 0) {
                assert_eq!(toy(&text, 0), target);
            }
        }
        assert_eq!(snap("“x", 1, 0, 4), Some(3), "inside the quote's three bytes");
    }

    #[test]
    fn counting_errors_are_passed_on() {
        let failing = |_: String| std::future::ready(Err::<u64, String>("HTTP 500".into()));
        let result = futures_util::FutureExt::now_or_never(cut(PASSAGE, 5, failing)).unwrap();
        assert_eq!(result, Err("HTTP 500".to_string()));
    }
}
