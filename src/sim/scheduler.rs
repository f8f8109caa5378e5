//! Continuous batching, as a pure state machine over steps (no clock, no I/O).
//!
//! - Admission is strict FIFO: the head of the queue starts when the batch has fewer than
//!   `max_running` sequences and the KV cache has room for its reservation.
//! - KV policy ([`KvPolicy`]): by default a request **reserves prompt + max_tokens** tokens when
//!   admitted and frees them when it ends, so a running request never has to be preempted; with
//!   `on_demand` (as vLLM) it holds its prompt and the tokens made so far, and when a step's new
//!   tokens do not fit, the request admitted last is preempted (counted): its KV is freed and it
//!   goes back to the head of the queue, to recompute prompt and output so far.
//! - Each step computes one token for every decoding request and up to `chunk_tokens` prompt
//!   tokens (chunked prefill, oldest requests first); the step that completes a prompt also
//!   produces the request's first output token.
//! - With prefix caching, the cached leading blocks of a prompt are not computed again (the
//!   last prompt token always is, since it yields the first output token; hits are whole
//!   blocks, so a fully cached prompt of exactly k blocks recomputes its last block, as vLLM). The cache is looked
//!   up when a prompt's prefill starts, so a prompt computed in one step serves the requests
//!   that start prefilling in later steps, as in vLLM.
//! - With a [`CrashRule`] (`rigrun sim --crash-*`), the scheduler stops at the step that breaks
//!   it and says why ([`Scheduler::crashed`]): the engine then ends the process.

use std::collections::VecDeque;

use super::crash::{Crash, CrashRule};
use super::perf::{PerfModel, Speculative};
use super::prefix_cache::PrefixCache;

/// What a request needs from the scheduler.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Prompt length in tokens (at least 1).
    pub prompt_tokens: u32,
    /// Prefix-cache block hashes of the prompt (empty without prefix caching).
    pub block_hashes: Vec<u64>,
    /// Tokens it will generate (at least 1, at most `max_tokens`).
    pub output_tokens: u32,
    /// Output tokens it may generate, reserved in the KV cache.
    pub max_tokens: u32,
    /// How repetitive its prompt is (0 to 1), which speculation's acceptance may follow.
    pub repetitiveness: f64,
}

impl JobSpec {
    /// KV cache tokens it holds while running.
    fn reservation(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.max_tokens)
    }
}

/// How the KV cache is handed out (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvPolicy {
    #[default]
    Reserve,
    OnDemand,
}

/// Batch limits of a server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub kv_policy: KvPolicy,
    /// Most sequences in a batch.
    pub max_running: usize,
    /// KV cache size in tokens.
    pub kv_capacity: u64,
    /// Most prompt tokens computed in one step.
    pub chunk_tokens: u32,
}

/// A request's output progress, reported at the end of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Output tokens generated so far.
    pub generated: u32,
    /// Whether this was its last token.
    pub done: bool,
    /// Prompt tokens the prefix cache served (usage's `prompt_tokens_details.cached_tokens`).
    pub cached: u32,
}

/// Counters and gauges for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_used_tokens: u64,
    pub prompt_tokens_total: u64,
    pub cached_prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub requests_finished_total: u64,
    /// Requests preempted because the KV cache ran out (`on_demand` only).
    pub preemptions_total: u64,
    /// Drafts (one per decoding sequence and step), and the draft tokens proposed and accepted
    /// by speculative decoding (0 without it).
    pub spec_drafts_total: u64,
    pub spec_draft_tokens_total: u64,
    pub spec_accepted_tokens_total: u64,
}

/// A submitted request that can never fit in the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("request needs {needed} KV cache tokens, the cache holds {capacity}")]
pub struct TooLarge {
    pub needed: u64,
    pub capacity: u64,
}

/// A request in the scheduler, with the caller's `sink` that progress goes to.
#[derive(Debug)]
struct Job<S> {
    sink: S,
    spec: JobSpec,
    /// Prompt tokens still to compute.
    prefill_left: u32,
    /// Whether the prefix cache was consulted (when its prefill started).
    looked_up: bool,
    /// Prompt tokens computed in the current step.
    prefill_now: u32,
    /// Prompt tokens served by the prefix cache.
    cached: u32,
    generated: u32,
    /// Accepted draft tokens owed (the expected acceptance, added up each step).
    spec_credit: f64,
}

/// The batch, the queue and the KV cache of one simulated server.
#[derive(Debug)]
pub struct Scheduler<S> {
    perf: PerfModel,
    limits: Limits,
    cache: Option<PrefixCache>,
    waiting: VecDeque<Job<S>>,
    running: Vec<Job<S>>,
    kv_used: u64,
    stats: EngineStats,
    /// When to crash on purpose, and whether it did.
    crash_rule: CrashRule,
    crashed: Option<Crash>,
    /// Requests submitted so far.
    arrivals: u64,
}

impl<S> Scheduler<S> {
    /// An idle server.
    pub fn new(perf: PerfModel, limits: Limits, cache: Option<PrefixCache>) -> Self {
        Self {
            perf,
            limits,
            cache,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv_used: 0,
            stats: EngineStats::default(),
            crash_rule: CrashRule::default(),
            crashed: None,
            arrivals: 0,
        }
    }

    /// Crashes on purpose when `rule` says (see [`CrashRule`]).
    pub fn crash_when(&mut self, rule: CrashRule) {
        self.crash_rule = rule;
    }

    /// Why the scheduler crashed, once it did: it plans no step after that.
    pub fn crashed(&self) -> Option<Crash> {
        self.crashed
    }

    /// Queues a request; it joins the batch at a later step.
    pub fn submit(&mut self, spec: JobSpec, sink: S) -> Result<(), TooLarge> {
        self.arrivals += 1;
        if self.crash_rule.after_requests == Some(self.arrivals) {
            self.crashed
                .get_or_insert(Crash::AfterRequests { n: self.arrivals });
        }
        if spec.reservation() > self.limits.kv_capacity {
            return Err(TooLarge {
                needed: spec.reservation(),
                capacity: self.limits.kv_capacity,
            });
        }
        let prefill_left = spec.prompt_tokens.max(1);
        self.waiting.push_back(Job {
            sink,
            spec,
            prefill_left,
            looked_up: false,
            prefill_now: 0,
            cached: 0,
            generated: 0,
            spec_credit: 0.0,
        });
        Ok(())
    }

    /// Whether no request is running or waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Drops the requests whose sink matches (their client went away), freeing their KV.
    pub fn cancel_where(&mut self, gone: impl Fn(&S) -> bool) {
        self.waiting.retain(|job| !gone(&job.sink));
        let mut freed = 0;
        self.running.retain(|job| {
            let keep = !gone(&job.sink);
            if !keep {
                freed += held(self.limits.kv_policy, job);
            }
            keep
        });
        self.kv_used -= freed;
    }

    /// Starts a step: admits waiting requests, shares out the prefill budget, and returns the
    /// step's duration in nanoseconds, or `None` when there is nothing to run.
    /// Once the scheduler crashed, there is never anything to run.
    pub fn plan_step(&mut self) -> Option<u64> {
        self.admit();
        self.make_room();
        if self.crashed.is_some() {
            return None;
        }
        let mut budget = self.limits.chunk_tokens.max(1);
        let (mut prefilling, mut decoding, mut attended, mut prefill) = (0usize, 0usize, 0u64, 0u64);
        for job in &mut self.running {
            if job.prefill_left > 0 {
                if !job.looked_up && budget > 0 {
                    start_prefill(job, self.cache.as_mut(), &mut self.stats);
                }
                job.prefill_now = job.prefill_left.min(budget);
                budget -= job.prefill_now;
                prefill += u64::from(job.prefill_now);
                prefilling += usize::from(job.prefill_now > 0);
            } else {
                decoding += 1;
                attended += u64::from(job.spec.prompt_tokens + job.generated);
            }
        }
        (prefilling + decoding > 0).then(|| self.perf.batch_step_ns(prefilling, decoding, attended, prefill))
    }

    /// Ends the step begun by [`plan_step`](Self::plan_step): reports each request that got a
    /// token to `deliver` and retires the finished ones.
    pub fn finish_step(&mut self, mut deliver: impl FnMut(&S, Progress)) {
        let (mut freed, mut finished, mut tokens) = (0, 0, 0);
        let (cache, stats) = (&mut self.cache, &mut self.stats);
        let (policy, speculative) = (self.limits.kv_policy, self.perf.speculative);
        self.running.retain_mut(|job| {
            let decoding = job.prefill_now == 0 && job.prefill_left == 0;
            if job.prefill_now > 0 {
                job.prefill_left -= job.prefill_now;
                job.prefill_now = 0;
                if job.prefill_left > 0 {
                    return true;
                }
                if let Some(cache) = cache.as_mut() {
                    cache.insert(&job.spec.block_hashes);
                }
            } else if job.prefill_left > 0 {
                return true;
            }
            let accepted = match speculative.filter(|_| decoding) {
                Some(spec) => accept_drafts(job, spec, stats),
                None => 0,
            };
            job.generated += 1 + accepted;
            tokens += 1 + u64::from(accepted);
            let done = job.generated >= job.spec.output_tokens;
            deliver(
                &job.sink,
                Progress {
                    generated: job.generated,
                    done,
                    cached: job.cached,
                },
            );
            if done {
                freed += held(policy, job);
                finished += 1;
            }
            !done
        });
        if policy == KvPolicy::OnDemand {
            self.kv_used += tokens;
        }
        self.kv_used -= freed;
        self.stats.generation_tokens_total += tokens;
        self.stats.requests_finished_total += finished;
    }

    /// Moves requests from the queue into the batch while their reservations fit.
    fn admit(&mut self) {
        while self.running.len() < self.limits.max_running.max(1) {
            let Some(head) = self.waiting.front() else {
                break;
            };
            let needs = held(self.limits.kv_policy, head);
            if self.kv_used + needs > self.limits.kv_capacity {
                break;
            }
            let Some(job) = self.waiting.pop_front() else {
                break;
            };
            self.kv_used += needs;
            self.running.push(job);
        }
        if self
            .crash_rule
            .at_running
            .is_some_and(|n| self.running.len() >= n)
        {
            let running = self.running.len();
            self.crashed.get_or_insert(Crash::OutOfMemory { running });
        }
    }

    /// `on_demand`: preempts the requests admitted last until every running request's next
    /// tokens fit — one, or with speculative decoding one plus every draft that may be accepted
    /// (the oldest one always runs: its reservation fits the cache alone).
    fn make_room(&mut self) {
        if self.limits.kv_policy != KvPolicy::OnDemand {
            return;
        }
        let per_step = 1 + self.perf.speculative.map_or(0, |s| u64::from(s.tokens));
        while self.running.len() > 1
            && self.kv_used + self.running.len() as u64 * per_step > self.limits.kv_capacity
        {
            if self.crash_rule.on_kv_overflow {
                let needed = self.running.len() as u64 * per_step;
                let free = self.limits.kv_capacity.saturating_sub(self.kv_used);
                self.crashed.get_or_insert(Crash::KvOverflow { needed, free });
                return;
            }
            let Some(mut job) = self.running.pop() else { break };
            self.kv_used -= held(KvPolicy::OnDemand, &job);
            job.prefill_left = job.spec.prompt_tokens.max(1) + job.generated;
            job.prefill_now = 0;
            job.looked_up = true;
            self.stats.preemptions_total += 1;
            self.waiting.push_front(job);
        }
    }

    /// Empties the prefix cache (requests already prefilling keep what they found); says
    /// whether there is one.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.cache.as_mut().map(PrefixCache::clear).is_some()
    }

    /// Current gauges and counters.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            running: self.running.len(),
            waiting: self.waiting.len(),
            kv_used_tokens: self.kv_used,
            ..self.stats
        }
    }
}

/// The KV cache tokens `job` holds under `policy` (or needs to be admitted).
fn held<S>(policy: KvPolicy, job: &Job<S>) -> u64 {
    match policy {
        KvPolicy::Reserve => job.spec.reservation(),
        KvPolicy::OnDemand => u64::from(job.spec.prompt_tokens) + u64::from(job.generated),
    }
}

/// Starts a prompt's prefill: skips its cached leading blocks (never the last token).
fn start_prefill<S>(job: &mut Job<S>, cache: Option<&mut PrefixCache>, stats: &mut EngineStats) {
    let prompt = job.spec.prompt_tokens;
    let cached = cache.map_or(0, |c| c.lookup_prompt(&job.spec.block_hashes, prompt));
    // `cached` < prompt, which is a u32.
    job.cached = cached as u32;
    job.prefill_left = (prompt - job.cached).max(1);
    job.looked_up = true;
    stats.prompt_tokens_total += u64::from(prompt);
    stats.cached_prompt_tokens_total += cached;
}

/// A decoding step's accepted draft tokens for `job` under `spec`: the expected acceptance
/// added to its credit, whole tokens taken from it (never past the job's output), and counted.
fn accept_drafts(job: &mut Job<impl Sized>, spec: Speculative, stats: &mut EngineStats) -> u32 {
    let spec = spec.for_prompt(job.spec.repetitiveness);
    job.spec_credit += spec.expected_accepted();
    let left = job.spec.output_tokens.saturating_sub(job.generated + 1);
    let accepted = (job.spec_credit.floor() as u32).min(spec.tokens).min(left);
    job.spec_credit -= f64::from(accepted);
    stats.spec_drafts_total += 1;
    stats.spec_draft_tokens_total += u64::from(spec.tokens);
    stats.spec_accepted_tokens_total += u64::from(accepted);
    accepted
}

#[cfg(test)]
mod tests {
    use super::super::perf::Table;
    use super::super::prefix_cache::block_hashes;
    use super::*;

    /// Steps of 1 ms + 1 ms per extra sequence; 1 µs per prefill token; no attention cost.
    fn scheduler(max_running: usize, kv_capacity: u64, chunk: u32) -> Scheduler<u32> {
        let perf = PerfModel {
            batch_ms: Table::new(vec![(1.0, 1.0), (2.0, 2.0)]).unwrap(),
            attention_ms: Table::new(vec![(0.0, 0.0)]).unwrap(),
            prefill_tokens_per_second: 1e6,
            speculative: None,
        };
        let limits = Limits {
            kv_policy: KvPolicy::Reserve,
            max_running,
            kv_capacity,
            chunk_tokens: chunk,
        };
        Scheduler::new(perf, limits, None)
    }

    fn spec(prompt: u32, output: u32) -> JobSpec {
        JobSpec {
            prompt_tokens: prompt,
            block_hashes: vec![],
            output_tokens: output,
            max_tokens: output,
            repetitiveness: 0.0,
        }
    }

    /// Runs one step; returns its duration and the (sink, progress) pairs it delivered.
    fn step(s: &mut Scheduler<u32>) -> (Option<u64>, Vec<(u32, Progress)>) {
        let duration = s.plan_step();
        let mut out = vec![];
        if duration.is_some() {
            s.finish_step(|&id, p| out.push((id, p)));
        }
        (duration, out)
    }

    #[test]
    fn prefill_step_yields_the_first_token_then_one_per_step() {
        let mut s = scheduler(8, 1000, 100);
        s.submit(spec(10, 3), 7).unwrap();
        let (d, out) = step(&mut s);
        assert_eq!(d, Some(1_000_000 + 10_000));
        assert_eq!(
            out,
            vec![(
                7,
                Progress {
                    generated: 1,
                    done: false,
                    cached: 0,
                }
            )]
        );
        assert_eq!(
            step(&mut s),
            (
                Some(1_000_000),
                vec![(
                    7,
                    Progress {
                        generated: 2,
                        done: false,
                        cached: 0,
                    }
                )]
            )
        );
        assert_eq!(
            step(&mut s).1,
            vec![(
                7,
                Progress {
                    generated: 3,
                    done: true,
                    cached: 0,
                }
            )]
        );
        assert!(s.is_idle());
        assert_eq!(s.stats().kv_used_tokens, 0);
        assert_eq!(step(&mut s), (None, vec![]));
    }

    #[test]
    fn long_prompts_are_chunked_and_delay_running_decodes() {
        let mut s = scheduler(8, 1000, 4);
        s.submit(spec(1, 10), 1).unwrap();
        step(&mut s);
        s.submit(spec(10, 10), 2).unwrap();
        // Chunks of 4, 4, 2 tokens: 1 decoder + 1 prefiller = 2 sequences = 2 ms each.
        assert_eq!(step(&mut s).0, Some(2_000_000 + 4_000));
        assert_eq!(step(&mut s).0, Some(2_000_000 + 4_000));
        let (d, out) = step(&mut s);
        assert_eq!(d, Some(2_000_000 + 2_000));
        assert_eq!(out.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn queues_when_the_kv_cache_is_full() {
        let mut s = scheduler(8, 100, 100);
        for id in 0..3 {
            s.submit(spec(20, 20), id).unwrap();
        }
        step(&mut s);
        assert_eq!(
            (s.stats().running, s.stats().waiting, s.stats().kv_used_tokens),
            (2, 1, 80)
        );
        for _ in 0..19 {
            step(&mut s);
        }
        // The first two finished; the third is admitted at the next step.
        assert_eq!((s.stats().running, s.stats().waiting), (0, 1));
        step(&mut s);
        assert_eq!((s.stats().running, s.stats().waiting), (1, 0));
        assert_eq!(
            s.submit(spec(90, 20), 9),
            Err(TooLarge {
                needed: 110,
                capacity: 100
            })
        );
    }

    #[test]
    fn caps_the_batch_at_max_running() {
        let mut s = scheduler(2, 10_000, 100);
        for id in 0..5 {
            s.submit(spec(1, 5), id).unwrap();
        }
        step(&mut s);
        assert_eq!((s.stats().running, s.stats().waiting), (2, 3));
    }

    #[test]
    fn attention_cost_counts_the_decoders_context() {
        let mut s = scheduler(8, 10_000, 1000);
        s.perf.attention_ms = Table::new(vec![(0.0, 0.0), (1000.0, 1.0)]).unwrap();
        s.submit(spec(100, 10), 1).unwrap();
        s.submit(spec(300, 10), 2).unwrap();
        step(&mut s);
        // Contexts 101 + 301 tokens → 0.402 ms of attention, on top of 2 ms for two sequences.
        assert_eq!(step(&mut s).0, Some(2_402_000));
    }

    #[test]
    fn prefix_cache_skips_cached_blocks_but_not_the_last_token() {
        let mut s = scheduler(8, 10_000, 10_000);
        s.cache = Some(PrefixCache::new(16, 10_000));
        let prompt = vec![23066u32; 1000];
        let job = || JobSpec {
            block_hashes: block_hashes(&prompt, 16),
            ..spec(1000, 2)
        };
        s.submit(job(), 1).unwrap();
        assert_eq!(step(&mut s).0, Some(1_000_000 + 1_000_000));
        s.submit(job(), 2).unwrap();
        // 62 blocks of 16 cached: 8 tokens left to compute; 2 sequences.
        let (d, out) = step(&mut s);
        assert_eq!(d, Some(2_000_000 + 8_000));
        assert_eq!(s.stats().cached_prompt_tokens_total, 992);
        // Each request's reports carry its own cached count.
        let cached: Vec<(u32, u32)> = out.iter().map(|(id, p)| (*id, p.cached)).collect();
        assert_eq!(cached, vec![(1, 0), (2, 992)]);
        let mut full = scheduler(8, 10_000, 10_000);
        full.cache = Some(PrefixCache::new(10, 10_000));
        let exact = vec![5u32; 20];
        for id in 0..2 {
            full.submit(
                JobSpec {
                    block_hashes: block_hashes(&exact, 10),
                    ..spec(20, 1)
                },
                id,
            )
            .unwrap();
            step(&mut full);
        }
        // A fully cached 2-block prompt recomputes its last block (vLLM's rule).
        assert_eq!(full.stats().cached_prompt_tokens_total, 10);
    }

    #[test]
    fn a_prompt_computed_in_one_step_serves_prompts_starting_later() {
        // Chunks of 1000: the first prompt fills the step, the others start after it.
        let mut s = scheduler(8, 100_000, 1000);
        s.cache = Some(PrefixCache::new(16, 100_000));
        let prompt = vec![23066u32; 1000];
        for id in 0..3 {
            s.submit(
                JobSpec {
                    block_hashes: block_hashes(&prompt, 16),
                    ..spec(1000, 5)
                },
                id,
            )
            .unwrap();
        }
        assert_eq!(step(&mut s).0, Some(1_000_000 + 1_000_000));
        // Both others now hit the cache: 8 tokens each; with the decoder, three sequences.
        assert_eq!(step(&mut s).0, Some(3_000_000 + 16_000));
        assert_eq!(s.stats().cached_prompt_tokens_total, 2 * 992);
    }

    #[test]
    fn cancelling_frees_the_reservation() {
        let mut s = scheduler(8, 100, 100);
        s.submit(spec(20, 20), 1).unwrap();
        s.submit(spec(20, 20), 2).unwrap();
        step(&mut s);
        s.cancel_where(|&id| id == 1);
        assert_eq!((s.stats().running, s.stats().kv_used_tokens), (1, 40));
    }

    #[test]
    fn on_demand_kv_preempts_the_latest_request_and_recomputes_it() {
        let mut s = scheduler(8, 50, 100);
        s.limits.kv_policy = KvPolicy::OnDemand;
        // Both prompts fit (2 x 20), their outputs (2 x 20 more) do not: 90 > 50.
        s.submit(spec(20, 20), 1).unwrap();
        s.submit(spec(20, 20), 2).unwrap();
        let mut delivered = std::collections::HashMap::new();
        while !s.is_idle() {
            let (d, out) = step(&mut s);
            assert!(d.is_some());
            assert!(s.stats().kv_used_tokens <= 50, "{:?}", s.stats());
            for (id, p) in out {
                delivered.insert(id, p.generated);
            }
        }
        assert!(s.stats().preemptions_total >= 1, "{:?}", s.stats());
        assert_eq!(delivered, [(1, 20), (2, 20)].into_iter().collect());
        assert_eq!(s.stats().kv_used_tokens, 0);
    }

    #[test]
    fn speculation_emits_the_accepted_drafts_with_each_decode_step_and_counts_them() {
        let mut s = scheduler(8, 1000, 100);
        // p = 0.5, k = 2: 0.75 accepted per step on average, so the credit yields 0, 1, 1, 1, 0, ...
        s.perf.speculative = Some(Speculative {
            tokens: 2,
            acceptance: 0.5,
            repetitive_acceptance: None,
        });
        s.submit(spec(10, 6), 1).unwrap();
        let generated = |out: Vec<(u32, Progress)>| out[0].1.generated;
        assert_eq!(
            generated(step(&mut s).1),
            1,
            "the prefill step's token is not speculated"
        );
        // One decoder verifies 3 positions (the batch table at 3: 3 ms) and drafts cost 10% more.
        let (d, out) = step(&mut s);
        assert_eq!((d, generated(out)), (Some(3_300_000), 2));
        assert_eq!(generated(step(&mut s).1), 4);
        let last = step(&mut s).1;
        assert_eq!(
            last[0].1,
            Progress {
                generated: 6,
                done: true,
                cached: 0
            }
        );
        let stats = s.stats();
        assert_eq!(stats.generation_tokens_total, 6);
        assert_eq!(
            (stats.spec_draft_tokens_total, stats.spec_accepted_tokens_total),
            (6, 2)
        );
    }

    #[test]
    fn crashes_when_the_running_batch_reaches_the_rule_and_not_before() {
        let mut s = scheduler(8, 10_000, 100);
        s.crash_when(CrashRule {
            at_running: Some(4),
            ..CrashRule::default()
        });
        // Two at once run to the end: the rule is never reached.
        for id in 0..2 {
            s.submit(spec(10, 5), id).unwrap();
        }
        while !s.is_idle() {
            step(&mut s);
        }
        assert_eq!(s.crashed(), None);
        for id in 0..3 {
            s.submit(spec(10, 5), id).unwrap();
        }
        step(&mut s);
        assert_eq!(s.crashed(), None, "three running is below the rule");
        s.submit(spec(10, 5), 3).unwrap();
        // The fourth joins the batch at the next step, which is not run.
        assert_eq!(step(&mut s), (None, vec![]));
        assert_eq!(s.crashed(), Some(Crash::OutOfMemory { running: 4 }));
    }

    #[test]
    fn crashes_instead_of_preempting_on_kv_overflow() {
        let mut s = scheduler(8, 50, 100);
        s.limits.kv_policy = KvPolicy::OnDemand;
        s.crash_when(CrashRule {
            on_kv_overflow: true,
            ..CrashRule::default()
        });
        s.submit(spec(20, 20), 1).unwrap();
        s.submit(spec(20, 20), 2).unwrap();
        let mut steps = 0;
        while step(&mut s).0.is_some() {
            steps += 1;
        }
        // 40 prompt tokens + 2 per step: after 5 steps 50 are held, and the next needs 2 more.
        assert_eq!(steps, 5);
        assert_eq!(s.crashed(), Some(Crash::KvOverflow { needed: 2, free: 0 }));
        assert_eq!(s.stats().preemptions_total, 0);
        assert_eq!(step(&mut s), (None, vec![]));
    }

    #[test]
    fn crashes_when_the_nth_request_arrives() {
        let mut s = scheduler(8, 10_000, 100);
        s.crash_when(CrashRule {
            after_requests: Some(3),
            ..CrashRule::default()
        });
        s.submit(spec(10, 1), 1).unwrap();
        s.submit(spec(10, 1), 2).unwrap();
        assert_eq!(s.crashed(), None);
        s.submit(spec(10, 1), 3).unwrap();
        assert_eq!(s.crashed(), Some(Crash::AfterRequests { n: 3 }));
    }
}
