//! When a level's numbers cannot be trusted, and why, in plain sentences.
//!
//! Each check guards against a way benchmark clients have been seen to mislead: servers that
//! ignore `ignore_eos` (short outputs make throughput look higher per request asked), clients
//! that never reach the concurrency they claim, failed requests left out of the averages, too
//! few requests to reach steady state, a client too busy to time what it receives, a trace
//! replay sent later than its timestamps, and text prompts the server counted otherwise than
//! they were cut (`usage.prompt_tokens` not the length asked).

use super::metrics::Counts;
use super::trace::{self, Lateness};

/// A level's CPU use at or above this share of the client's cores counts as saturated.
const CPU_SATURATED: f64 = 0.9;
/// A closed loop that keeps fewer than this share of C in flight on average did not load the
/// server as asked.
const MEAN_IN_FLIGHT: f64 = 0.9;
/// catid's method measures at least this many requests per slot.
const REQUESTS_PER_SLOT: u64 = 5;

/// What the checks look at.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub concurrency: u64,
    /// Closed loop (no `--request-rate`): C must be reached.
    pub closed_loop: bool,
    pub peak: u64,
    /// Requests in flight on average while all C could be (the steady-state window).
    pub mean_in_flight: Option<f64>,
    /// Mean time from due to sent, ms.
    pub mean_queue_ms: Option<f64>,
    /// Completed and failed requests, errors by kind, short outputs.
    pub counts: Counts,
    /// The output length asked, when every request asked the same.
    pub output_len: Option<u32>,
    /// CPU cores the client used on average, and the cores it may use.
    pub cores_used: f64,
    pub cores: usize,
    /// A trace replay's lateness (None when not a replay: the trace, not C, sets its count).
    pub replay: Option<Lateness>,
}

/// The reasons a level is not valid; empty when it is.
pub fn problems(e: &Evidence) -> Vec<String> {
    [
        nothing_completed(e),
        short_outputs(e),
        concurrency_not_reached(e),
        concurrency_not_held(e),
        failures(e),
        too_few_requests(e),
        cpu_saturated(e),
        prompt_tokens_differ(e),
        prompt_tokens_unreported(e),
        e.replay.as_ref().and_then(trace::behind),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn nothing_completed(e: &Evidence) -> Option<String> {
    (e.counts.completed == 0).then(|| "no request completed, so nothing was measured".to_string())
}

fn short_outputs(e: &Evidence) -> Option<String> {
    let n = &e.counts;
    if n.short == 0 {
        return None;
    }
    let asked = e
        .output_len
        .map_or("their max_tokens".to_string(), |n| n.to_string());
    let mut text = format!(
        "{} of {} completed requests returned fewer output tokens than asked (fewest {}, asked \
         {asked}): the server did not honour ignore_eos, so each request did less work than \
         this level claims",
        n.short,
        n.completed,
        n.fewest_tokens.unwrap_or(0)
    );
    if n.counted_without_usage > 0 {
        text.push_str(
            " (the server sent no usage, so tokens were counted as stream events, and a server \
             that sends several tokens per event looks short too)",
        );
    }
    Some(text)
}

fn concurrency_not_reached(e: &Evidence) -> Option<String> {
    (e.closed_loop && e.peak < e.concurrency).then(|| {
        format!(
            "the requested concurrency {} was never reached: at most {} requests were in flight",
            e.concurrency, e.peak
        )
    })
}

/// C was reached, but the client was too slow handing freed slots on to keep it.
fn concurrency_not_held(e: &Evidence) -> Option<String> {
    let mean = e.mean_in_flight?;
    let target = e.concurrency as f64;
    (e.closed_loop && e.peak >= e.concurrency && mean < MEAN_IN_FLIGHT * target).then(|| {
        format!(
            "only {mean:.1} of the {} requested streams were in flight on average in steady \
             state: the client was slow to send (mean {:.1} ms from due to sent), so the server \
             saw less load than asked",
            e.concurrency,
            e.mean_queue_ms.unwrap_or(0.0)
        )
    })
}

fn failures(e: &Evidence) -> Option<String> {
    let n = &e.counts;
    if n.failed == 0 {
        return None;
    }
    let kinds = n
        .errors
        .iter()
        .map(|(kind, count)| format!("{kind}: {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "{} of {} requests failed ({kinds})",
        n.failed,
        n.measured()
    ))
}

fn too_few_requests(e: &Evidence) -> Option<String> {
    let needed = REQUESTS_PER_SLOT * e.concurrency;
    let measured = e.counts.measured();
    (e.replay.is_none() && measured < needed).then(|| {
        format!(
            "only {measured} requests were measured, fewer than 5 × C = {needed}, too few to hold \
             C streams in steady state"
        )
    })
}

/// A text prompt cut to N tokens of the server's tokenizer that the server counted otherwise:
/// the level did not send the lengths it claims.
fn prompt_tokens_differ(e: &Evidence) -> Option<String> {
    let p = &e.counts.prompt_checks;
    let (expected, reported) = p.first_mismatch?;
    Some(format!(
        "{} of {} completed requests reported other prompt tokens than their prompts were cut \
         to with the server's tokenizer (first: expected {expected}, usage.prompt_tokens \
         {reported}): the server's tokenize endpoint and its completions count differently, so \
         the prompt lengths of this level are not what it claims",
        p.mismatched, p.checked
    ))
}

/// Text prompts whose usage said nothing of the prompt: their length was not checked.
fn prompt_tokens_unreported(e: &Evidence) -> Option<String> {
    let p = &e.counts.prompt_checks;
    (p.unreported > 0).then(|| {
        format!(
            "{} of {} completed requests sent no usage.prompt_tokens, so their prompt lengths \
             could not be checked against the lengths they were cut to",
            p.unreported, p.checked
        )
    })
}

fn cpu_saturated(e: &Evidence) -> Option<String> {
    let cores = e.cores.max(1) as f64;
    (e.cores_used >= CPU_SATURATED * cores).then(|| {
        format!(
            "the client's CPU was saturated ({:.0}% of {} cores): its timings and throughput may \
             measure the client, not the server",
            e.cores_used * 100.0,
            e.cores
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::metrics::PromptChecks;
    use super::*;

    fn good() -> Evidence {
        Evidence {
            concurrency: 4,
            closed_loop: true,
            peak: 4,
            mean_in_flight: Some(3.9),
            counts: Counts {
                completed: 20,
                ..Counts::default()
            },
            output_len: Some(100),
            cores_used: 0.1,
            cores: 2,
            ..Evidence::default()
        }
    }

    #[test]
    fn a_clean_level_has_no_problems() {
        assert!(problems(&good()).is_empty());
    }

    #[test]
    fn each_check_says_what_went_wrong() {
        let e = Evidence {
            peak: 3,
            counts: Counts {
                completed: 16,
                failed: 2,
                errors: [("http_500".to_string(), 2)].into(),
                short: 3,
                fewest_tokens: Some(12),
                ..Counts::default()
            },
            cores_used: 1.9,
            ..good()
        };
        let p = problems(&e);
        assert_eq!(p.len(), 5, "{p:#?}");
        assert!(p[0].starts_with(
            "3 of 16 completed requests returned fewer output tokens than asked (fewest 12, asked 100)"
        ));
        assert!(p[0].contains("ignore_eos"));
        assert!(p[1].contains("concurrency 4 was never reached: at most 3"));
        assert_eq!(p[2], "2 of 18 requests failed (http_500: 2)");
        assert!(p[3].starts_with("only 18 requests were measured, fewer than 5 × C = 20"));
        assert!(p[4].contains("CPU was saturated (190% of 2 cores)"));
    }

    #[test]
    fn prompt_tokens_other_than_cut_are_reported() {
        let mut e = good();
        e.counts.prompt_checks = PromptChecks {
            checked: 20,
            mismatched: 3,
            first_mismatch: Some((1000, 1001)),
            unreported: 0,
        };
        let p = problems(&e);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(
            p[0].starts_with(
                "3 of 20 completed requests reported other prompt tokens than their prompts were \
                 cut to with the server's tokenizer (first: expected 1000, usage.prompt_tokens 1001)"
            ),
            "{}",
            p[0]
        );
        e.counts.prompt_checks = PromptChecks {
            checked: 20,
            unreported: 20,
            ..PromptChecks::default()
        };
        assert_eq!(
            problems(&e),
            [
                "20 of 20 completed requests sent no usage.prompt_tokens, so their prompt lengths \
              could not be checked against the lengths they were cut to"
            ]
        );
    }

    #[test]
    fn a_client_too_slow_to_hold_c_is_reported() {
        let e = Evidence {
            mean_in_flight: Some(3.2),
            mean_queue_ms: Some(12.5),
            ..good()
        };
        assert_eq!(
            problems(&e),
            [
                "only 3.2 of the 4 requested streams were in flight on average in steady state: the \
              client was slow to send (mean 12.5 ms from due to sent), so the server saw less load \
              than asked"
            ]
        );
    }

    #[test]
    fn open_loop_levels_need_not_reach_c() {
        let e = Evidence {
            closed_loop: false,
            peak: 1,
            ..good()
        };
        assert!(problems(&e).is_empty());
        let none = Evidence {
            counts: Counts {
                failed: 20,
                ..Counts::default()
            },
            ..good()
        };
        assert_eq!(
            problems(&none)[0],
            "no request completed, so nothing was measured"
        );
    }
}
