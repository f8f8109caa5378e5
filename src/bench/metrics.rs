//! Turning request outcomes into a level's numbers: latencies in HDR histograms, token counts,
//! failures by kind, the concurrency actually reached, and the steady-state window when all C
//! streams were running.
//!
//! Every latency counts from when the request was *due* — its arrival time with
//! `--request-rate`, else the moment its slot freed up — not from when the client got round to
//! sending it, so time queued in the client is not hidden.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::client::{Failure, Outcome};
use super::goodput::{Goodput, Latencies};
use super::latency::Latency;
use super::turns::ByTurn;

/// Width of the timeline's bins that steady-state tokens are counted in.
const BIN_NS: u64 = 1_000_000;
/// Tokens over time in 1 ms bins, for the steady-state window chosen after the level.
#[derive(Debug, Default)]
struct Timeline {
    /// Tokens that arrived in each bin.
    points: Vec<f64>,
    /// Token rate changes (tokens per bin) of responses spread over their duration.
    spread: Vec<f64>,
}

impl Timeline {
    fn grow(bins: &mut Vec<f64>, index: usize) {
        if bins.len() <= index {
            bins.resize(index + 1, 0.0);
        }
    }

    /// `tokens` arrived at `at_ns`.
    fn point(&mut self, at_ns: u64, tokens: f64) {
        let bin = (at_ns / BIN_NS) as usize;
        Self::grow(&mut self.points, bin);
        self.points[bin] += tokens;
    }

    /// `tokens` arrived evenly between `from_ns` and `to_ns` (a whole, non-streamed response).
    fn spread(&mut self, from_ns: u64, to_ns: u64, tokens: f64) {
        let (first, last) = ((from_ns / BIN_NS) as usize, (to_ns / BIN_NS) as usize);
        let per_bin = tokens / (last - first + 1) as f64;
        Self::grow(&mut self.spread, last + 1);
        self.spread[first] += per_bin;
        self.spread[last + 1] -= per_bin;
    }

    /// Tokens that arrived in `[from_ns, to_ns)`, edge bins counted by their overlap.
    fn sum(&self, from_ns: u64, to_ns: u64) -> f64 {
        let bins = self.points.len().max(self.spread.len());
        let mut rate = 0.0;
        let mut total = 0.0;
        for bin in 0..bins {
            rate += self.spread.get(bin).copied().unwrap_or(0.0);
            let tokens = rate + self.points.get(bin).copied().unwrap_or(0.0);
            let (start, end) = (bin as u64 * BIN_NS, (bin as u64 + 1) * BIN_NS);
            let overlap = end.min(to_ns).saturating_sub(start.max(from_ns));
            total += tokens * overlap as f64 / BIN_NS as f64;
        }
        total
    }
}

/// A level's requests and tokens, counted: gathered by the [`Collector`], carried by the summary
/// to the record, the table and the validity checks (one struct, so a new count is added once).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub completed: u64,
    pub failed: u64,
    /// Requests sent again because the server had closed the reused connection (not failures;
    /// see [`crate::http`]).
    pub reconnects: u64,
    /// Failures by kind, and one example sentence per kind.
    pub errors: BTreeMap<String, u64>,
    pub first_errors: BTreeMap<String, String>,
    /// Prompt and output tokens of completed requests.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Completed requests that returned fewer output tokens than asked, and the fewest returned.
    pub short: u64,
    pub fewest_tokens: Option<u64>,
    /// Completed requests whose token counts came from counting events (no usage sent).
    pub counted_without_usage: u64,
    /// Prompt lengths checked against the usage (text prompts): requests checked, those whose
    /// `usage.prompt_tokens` differed (the first as expected and reported), those without it.
    pub prompt_checks: PromptChecks,
}

/// `usage.prompt_tokens` against the count a request's prompt was cut to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptChecks {
    pub checked: u64,
    pub mismatched: u64,
    /// The first mismatch: (expected, reported).
    pub first_mismatch: Option<(u64, u64)>,
    pub unreported: u64,
}

impl PromptChecks {
    /// Checks one completed request's reported prompt tokens against `expected`.
    fn check(&mut self, expected: u64, reported: Option<u64>) {
        self.checked += 1;
        match reported {
            None => self.unreported += 1,
            Some(n) if n != expected => {
                self.mismatched += 1;
                self.first_mismatch.get_or_insert((expected, n));
            }
            Some(_) => {}
        }
    }
}

impl Counts {
    /// Requests measured (completed or failed).
    pub fn measured(&self) -> u64 {
        self.completed + self.failed
    }

    fn fail(&mut self, failure: &Failure) {
        self.failed += 1;
        *self.errors.entry(failure.kind.clone()).or_default() += 1;
        self.first_errors
            .entry(failure.kind.clone())
            .or_insert_with(|| failure.detail.clone());
    }

    /// A completed request with its token counts, `max_tokens` asked.
    fn complete(&mut self, input: u64, output: u64, max_tokens: u32) {
        self.completed += 1;
        self.input_tokens += input;
        self.output_tokens += output;
        if output < u64::from(max_tokens) {
            self.short += 1;
            self.fewest_tokens = Some(self.fewest_tokens.map_or(output, |f| f.min(output)));
        }
    }
}

/// Everything measured in one level, gathered as requests complete.
#[derive(Debug)]
pub struct Collector {
    t0: Instant,
    /// Responses are streamed (token events carry times) or whole (one event at the end).
    stream: bool,
    pub ttft: Latency,
    pub tpot: Latency,
    pub itl: Latency,
    pub e2el: Latency,
    pub queue: Latency,
    /// From when each request could go (due, and a slot free) to when it was sent.
    pub lateness: Latency,
    pub counts: Counts,
    /// TTFT and cached prompt tokens by turn, for multi-turn conversations.
    pub by_turn: ByTurn,
    /// `[sent, end]` of every request (of every conversation: first sent to last end), in ns
    /// after `t0`: what is in flight, and so the concurrency reached.
    intervals: Vec<(u64, u64)>,
    timeline: Timeline,
    /// When the last request ended.
    pub last_end: Option<Instant>,
    /// The per-request limits of `--slo`, and how many completed requests met them.
    goodput: Option<Goodput>,
    good: u64,
}

/// How one request was asked for.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    /// When it was due (see the module doc).
    pub due: Instant,
    /// When it could be sent: due, with a free slot (the client's lateness counts from here).
    pub ready: Instant,
    pub max_tokens: u32,
    /// Prompt tokens if known without the server.
    pub input_tokens: Option<u64>,
    /// The `usage.prompt_tokens` the server must report, when known (text prompts).
    pub expected_prompt_tokens: Option<u64>,
    /// Its turn in its conversation, from 0 (always 0 for single requests).
    pub turn: u32,
    /// When its conversation's first request was sent, if this request ends the conversation
    /// (a single request ends its own).
    pub conversation_from: Option<Instant>,
}

impl Collector {
    /// A collector for a level starting at `t0`, judging each request by `goodput` when given.
    pub fn new(t0: Instant, stream: bool, goodput: Option<Goodput>) -> Self {
        Collector {
            t0,
            stream,
            ttft: Latency::default(),
            tpot: Latency::default(),
            itl: Latency::default(),
            e2el: Latency::default(),
            queue: Latency::default(),
            lateness: Latency::default(),
            counts: Counts::default(),
            by_turn: ByTurn::default(),
            intervals: Vec::new(),
            timeline: Timeline::default(),
            last_end: None,
            goodput,
            good: 0,
        }
    }

    /// `ns` after `t0` as Unix seconds on this machine's clock, so that telemetry sampled on
    /// the same host (nvidia-smi's timestamps) can be clipped to a window of this level.
    pub fn unix_at(&self, ns: u64) -> f64 {
        crate::clock::unix_now() - self.t0.elapsed().as_secs_f64() + ns as f64 / 1e9
    }

    fn since_t0(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.t0).as_nanos() as u64
    }

    /// Adds one request's outcome.
    pub fn add(&mut self, asked: Asked, outcome: &Outcome) {
        if let Some(from) = asked.conversation_from {
            let (from, end) = (self.since_t0(from), self.since_t0(outcome.end));
            self.intervals.push((from, end.max(from)));
        }
        self.last_end = self.last_end.max(Some(outcome.end));
        self.lateness
            .record(outcome.sent.saturating_duration_since(asked.ready));
        self.counts.reconnects += u64::from(outcome.reconnects);
        match &outcome.result {
            Err(failure) => self.counts.fail(failure),
            Ok(done) => {
                let events = outcome.events.len() as u64;
                let usage = done.usage.unwrap_or_default();
                let output = usage.completion_tokens.unwrap_or(events);
                if usage.completion_tokens.is_none() {
                    self.counts.counted_without_usage += 1;
                }
                if let Some(expected) = asked.expected_prompt_tokens {
                    self.counts.prompt_checks.check(expected, usage.prompt_tokens);
                }
                let input = usage.prompt_tokens.or(asked.input_tokens).unwrap_or(0);
                let ttft = self.add_completed(asked, outcome, input, output);
                self.by_turn.add(asked.turn, input, usage.cached_tokens(), ttft);
            }
        }
    }

    /// Counts a completed request and records its latencies; returns its TTFT, if streamed.
    fn add_completed(
        &mut self,
        asked: Asked,
        outcome: &Outcome,
        input: u64,
        output: u64,
    ) -> Option<Duration> {
        self.counts.complete(input, output, asked.max_tokens);
        let due = asked.due.min(outcome.sent);
        self.queue.record(outcome.sent - due);
        let e2el = outcome.end.saturating_duration_since(due);
        self.e2el.record(e2el);
        let (ttft, tpot) = self.add_stream_times(due, outcome, output);
        let request = Latencies { ttft, tpot, e2el };
        if self.goodput.is_some_and(|g| g.met_by(&request)) {
            self.good += 1;
        }
        ttft
    }

    /// TTFT, TPOT, ITL and the timeline, from the token events' arrival times; the request's
    /// TTFT and TPOT, where measured.
    fn add_stream_times(
        &mut self,
        due: Instant,
        outcome: &Outcome,
        output: u64,
    ) -> (Option<Duration>, Option<Duration>) {
        let events = &outcome.events;
        let sent_ns = self.since_t0(outcome.sent);
        let Some(&first) = events.first() else {
            return (None, None);
        };
        let ns = Duration::from_nanos;
        if !self.stream {
            // A whole response: its tokens are spread over its duration.
            self.timeline.spread(sent_ns, sent_ns + first, output as f64);
            return (None, None);
        }
        let ttft = outcome.sent - due + ns(first);
        self.ttft.record(ttft);
        let tpot = (output > 1).then(|| {
            let first_to_end = outcome.end.saturating_duration_since(outcome.sent + ns(first));
            first_to_end / (output - 1) as u32
        });
        if let Some(tpot) = tpot {
            self.tpot.record(tpot);
        }
        for pair in events.windows(2) {
            self.itl.record(ns(pair[1].saturating_sub(pair[0])));
        }
        let per_event = output as f64 / events.len() as f64;
        for &at in events {
            self.timeline.point(sent_ns + at, per_event);
        }
        (Some(ttft), tpot)
    }

    /// How many completed requests met every `--slo` limit; none when goodput was not asked for.
    pub fn good(&self) -> Option<u64> {
        self.goodput.map(|_| self.good)
    }

    /// How many requests were in flight at most, and the window (ns after `t0`) when at least
    /// `target` were.
    pub fn concurrency(&self, target: u64) -> (u64, Option<(u64, u64)>) {
        concurrency(&self.intervals, target)
    }

    /// The window from the first send to the last send (ns after `t0`).
    pub fn send_window(&self) -> Option<(u64, u64)> {
        let first = self.intervals.iter().map(|i| i.0).min()?;
        let last = self.intervals.iter().map(|i| i.0).max()?;
        Some((first, last))
    }

    /// Requests in flight on average over `window` (ns after `t0`).
    pub fn mean_in_flight(&self, window: (u64, u64)) -> Option<f64> {
        let (from, to) = window;
        let busy: u64 = self
            .intervals
            .iter()
            .map(|&(start, end)| end.min(to).saturating_sub(start.max(from)))
            .sum();
        (to > from).then(|| busy as f64 / (to - from) as f64)
    }

    /// Output tokens per second in `window` (ns after `t0`).
    pub fn throughput_in(&self, window: (u64, u64)) -> Option<f64> {
        let (from, to) = window;
        let seconds = to.saturating_sub(from) as f64 / 1e9;
        (seconds >= 0.001).then(|| self.timeline.sum(from, to) / seconds)
    }
}

/// Sweeps `[start, end]` intervals: the peak number open at once, and the window from the first
/// moment `target` were open to the last moment one of `target` closed.
fn concurrency(intervals: &[(u64, u64)], target: u64) -> (u64, Option<(u64, u64)>) {
    let mut changes: Vec<(u64, i64)> = intervals
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // At equal times, ends come first: a slot handed straight on is not an overlap.
    changes.sort_unstable();
    let (mut open, mut peak) = (0i64, 0i64);
    let (mut from, mut to) = (None, None);
    for (at, change) in changes {
        let before = open;
        open += change;
        peak = peak.max(open);
        if open >= target as i64 && before < target as i64 && from.is_none() {
            from = Some(at);
        }
        if before >= target as i64 && open < target as i64 && from.is_some() {
            to = Some(at);
        }
    }
    let window = from.zip(to).filter(|(from, to)| to > from);
    (peak.max(0) as u64, window)
}

#[cfg(test)]
mod tests {
    use super::super::client::Completed;
    use super::super::sse::Usage;
    use super::*;

    #[test]
    fn concurrency_window_excludes_ramp_up_and_drain() {
        // Two slots: requests start at 0 and 5, then refill straight away.
        let intervals = [(0, 10), (5, 20), (10, 30), (20, 25)];
        assert_eq!(concurrency(&intervals, 2), (2, Some((5, 25))));
        assert_eq!(concurrency(&intervals, 3), (2, None));
        assert_eq!(concurrency(&[], 1), (0, None));
        let mut c = Collector::new(Instant::now(), true, None);
        c.intervals = intervals.to_vec();
        assert_eq!(c.mean_in_flight((5, 25)), Some(2.0));
        assert_eq!(c.mean_in_flight((0, 40)), Some(50.0 / 40.0));
    }

    #[test]
    fn timeline_counts_points_and_spreads_with_partial_edges() {
        let mut t = Timeline::default();
        t.point(500_000, 1.0);
        t.point(2_500_000, 3.0);
        t.spread(0, 9_999_999, 10.0);
        assert!((t.sum(0, 10_000_000) - 14.0).abs() < 1e-9);
        // Half of bin 2 (1.5 of its point tokens + 0.5 spread) and all of bin 3 (1 spread).
        assert!((t.sum(2_500_000, 4_000_000) - 3.0).abs() < 1e-9);
    }

    fn outcome(t0: Instant, sent_ms: u64, events_ms: &[u64], end_ms: u64, tokens: u64) -> Outcome {
        let ms = |m: u64| Duration::from_millis(m);
        Outcome {
            sent: t0 + ms(sent_ms),
            end: t0 + ms(end_ms),
            events: events_ms.iter().map(|m| (m - sent_ms) * 1_000_000).collect(),
            result: Ok(Completed {
                usage: Some(Usage {
                    prompt_tokens: Some(8),
                    completion_tokens: Some(tokens),
                    prompt_tokens_details: None,
                }),
                finish_reason: Some("length".into()),
            }),
            reconnects: 0,
            text: String::new(),
        }
    }

    /// A request due at `t0` that asked for 4 tokens.
    fn asked_at(t0: Instant, input_tokens: Option<u64>) -> Asked {
        Asked {
            due: t0,
            ready: t0,
            max_tokens: 4,
            input_tokens,
            expected_prompt_tokens: None,
            turn: 0,
            conversation_from: Some(t0),
        }
    }

    #[test]
    fn prompt_tokens_are_checked_against_the_usage() {
        let t0 = Instant::now();
        let mut c = Collector::new(t0, true, None);
        // The outcome's usage says 8 prompt tokens.
        for expected in [8, 9, 8, 7] {
            let asked = Asked {
                expected_prompt_tokens: Some(expected),
                ..asked_at(t0, None)
            };
            c.add(asked, &outcome(t0, 0, &[1, 2, 3, 4], 5, 4));
        }
        let mut silent = outcome(t0, 0, &[1, 2, 3, 4], 5, 4);
        if let Ok(done) = &mut silent.result {
            done.usage = None;
        }
        let asked = Asked {
            expected_prompt_tokens: Some(8),
            ..asked_at(t0, None)
        };
        c.add(asked, &silent);
        c.add(asked_at(t0, None), &outcome(t0, 0, &[1, 2, 3, 4], 5, 4));
        let checks = &c.counts.prompt_checks;
        assert_eq!((checks.checked, checks.mismatched, checks.unreported), (5, 2, 1));
        assert_eq!(checks.first_mismatch, Some((9, 8)));
    }

    #[test]
    fn failures_are_counted_by_kind_with_their_first_example() {
        let t0 = Instant::now();
        let mut c = Collector::new(t0, true, None);
        let asked = asked_at(t0, None);
        for (kind, detail) in [
            ("http_500", "first"),
            ("connect", "refused"),
            ("http_500", "second"),
        ] {
            let mut failed = outcome(t0, 0, &[], 1, 0);
            failed.result = Err(Failure {
                kind: kind.into(),
                detail: detail.into(),
            });
            failed.reconnects = 1;
            c.add(asked, &failed);
        }
        let n = &c.counts;
        assert_eq!((n.completed, n.failed, n.measured(), n.reconnects), (0, 3, 3, 3));
        assert_eq!(n.errors, [("connect".into(), 1), ("http_500".into(), 2)].into());
        assert_eq!(n.first_errors["http_500"], "first");
        assert!(c.ttft.stats().is_none(), "failures have no latency");
    }

    #[test]
    fn latencies_count_from_when_the_request_was_due() {
        let t0 = Instant::now();
        let mut c = Collector::new(t0, true, None);
        let asked = asked_at(t0, Some(8));
        // Sent 10 ms late (client queueing); tokens at 30, 40, 50, 60; done at 60.
        c.add(asked, &outcome(t0, 10, &[30, 40, 50, 60], 60, 4));
        let ttft = c.ttft.stats().unwrap();
        assert!((ttft.mean - 30.0).abs() < 1e-6, "{ttft:?}");
        assert!((c.queue.stats().unwrap().mean - 10.0).abs() < 1e-6);
        assert!((c.itl.stats().unwrap().mean - 10.0).abs() < 1e-6);
        assert!((c.tpot.stats().unwrap().mean - 10.0).abs() < 1e-6);
        assert!((c.e2el.stats().unwrap().mean - 60.0).abs() < 1e-6);
        assert_eq!(
            (c.counts.input_tokens, c.counts.output_tokens, c.counts.short),
            (8, 4, 0)
        );
        // A short reply is counted as such.
        c.add(asked, &outcome(t0, 0, &[5], 5, 1));
        assert_eq!((c.counts.short, c.counts.fewest_tokens), (1, Some(1)));
        assert_eq!(c.throughput_in((0, 100_000_000)), Some(50.0));
    }

    #[test]
    fn a_conversation_is_in_flight_from_its_first_send_to_its_last_end() {
        let t0 = Instant::now();
        let mut c = Collector::new(t0, true, None);
        // Turn 1 from 0 to 10 ms, a think time, turn 2 from 30 to 40 ms: one in flight 0..40.
        let first = Asked {
            conversation_from: None,
            ..asked_at(t0, Some(8))
        };
        c.add(first, &outcome(t0, 0, &[5], 10, 1));
        let second = Asked {
            turn: 1,
            conversation_from: Some(t0),
            ..first
        };
        c.add(second, &outcome(t0, 30, &[35], 40, 1));
        assert_eq!(c.concurrency(1), (1, Some((0, 40_000_000))));
        let turns = c.by_turn.summaries();
        assert_eq!((turns.len(), turns[1].turn, turns[1].completed), (2, 2, 1));
    }

    #[test]
    fn goodput_counts_the_requests_within_every_limit_each_judged_alone() {
        let t0 = Instant::now();
        let slo = crate::config::slo::Slo::parse("p99_ttft_ms=25,median_tpot_ms=12").unwrap();
        let mut c = Collector::new(t0, true, Some(Goodput::from_slo(&slo).unwrap()));
        let asked = asked_at(t0, Some(8));
        // TTFT 20 ms, TPOT 10 ms: good. TTFT 30 ms: not. TPOT 20 ms: not. One token: no TPOT.
        c.add(asked, &outcome(t0, 0, &[20, 30, 40, 50], 50, 4));
        c.add(asked, &outcome(t0, 0, &[30, 40, 50, 60], 60, 4));
        c.add(asked, &outcome(t0, 0, &[20, 40, 60, 80], 80, 4));
        c.add(asked, &outcome(t0, 0, &[5], 5, 1));
        assert_eq!(c.good(), Some(1));
        assert_eq!(Collector::new(t0, true, None).good(), None, "not asked for");
    }
}
