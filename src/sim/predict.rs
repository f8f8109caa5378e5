//! What a profile predicts for catid's method, computed in virtual time (no server, no
//! waiting): C clients send prompts of `input_len` copies of token 23066 with `ignore_eos` and
//! `max_tokens = output_len`, back to back; C warm-up requests, then 5×C measured ones;
//! `output_throughput` = measured completion tokens / wall time of the measured phase.

use serde::Serialize;

use super::perf::repetitiveness;
use super::prefix_cache::block_hashes;
use super::profile::Profile;
use super::scheduler::{JobSpec, Scheduler};

/// catid's prompt token.
const CATID_TOKEN: u32 = 23066;
/// Measured requests per client.
const MEASURED_PER_CLIENT: usize = 5;

/// The predicted figures of one concurrency level, named as `vllm bench serve` names them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Prediction {
    pub max_concurrency: usize,
    pub completed: usize,
    pub total_output_tokens: u64,
    pub duration: f64,
    pub output_throughput: f64,
    pub mean_ttft_ms: f64,
    pub mean_tpot_ms: f64,
}

/// One finished request: time to first token and end-to-end latency, in ns.
struct Finished {
    ttft: u64,
    e2e: u64,
}

/// Predicts catid's method at `concurrency` (at least 1) for `profile`.
pub fn predict(profile: &Profile, concurrency: usize, input_len: u32, output_len: u32) -> Prediction {
    let concurrency = concurrency.max(1);
    let prompt = vec![CATID_TOKEN; input_len.max(1) as usize];
    let spec = JobSpec {
        prompt_tokens: input_len.max(1),
        block_hashes: profile
            .prefix_block_tokens
            .map(|b| block_hashes(&prompt, b))
            .unwrap_or_default(),
        output_tokens: output_len.max(1),
        max_tokens: output_len.max(1),
        repetitiveness: repetitiveness(&prompt),
    };
    let mut scheduler = profile.scheduler();
    let mut now = 0;
    run_phase(&mut scheduler, &spec, concurrency, concurrency, &mut now);
    let start = now;
    let done = run_phase(
        &mut scheduler,
        &spec,
        concurrency,
        MEASURED_PER_CLIENT * concurrency,
        &mut now,
    );
    let duration = (now - start) as f64 / 1e9;
    let total_output_tokens = done.len() as u64 * u64::from(spec.output_tokens);
    let decode_steps = f64::from(spec.output_tokens.saturating_sub(1).max(1));
    let mean = |f: &dyn Fn(&Finished) -> f64| done.iter().map(f).sum::<f64>() / done.len().max(1) as f64;
    Prediction {
        max_concurrency: concurrency,
        completed: done.len(),
        total_output_tokens,
        duration,
        output_throughput: total_output_tokens as f64 / duration,
        mean_ttft_ms: mean(&|f| f.ttft as f64 / 1e6),
        mean_tpot_ms: mean(&|f| (f.e2e - f.ttft) as f64 / 1e6 / decode_steps),
    }
}

/// Runs `total` requests through `clients` closed-loop clients, advancing `now` (ns).
fn run_phase(
    s: &mut Scheduler<usize>,
    spec: &JobSpec,
    clients: usize,
    total: usize,
    now: &mut u64,
) -> Vec<Finished> {
    let clients = clients.min(total);
    let mut started = vec![*now; clients];
    let mut first_token = vec![0; clients];
    let mut finished = Vec::with_capacity(total);
    for client in 0..clients {
        submit(s, spec, client);
    }
    let mut issued = clients;
    let mut events = Vec::new();
    while let Some(step) = s.plan_step() {
        *now += step;
        s.finish_step(|&client, progress| events.push((client, progress)));
        for (client, progress) in events.drain(..) {
            if progress.generated == 1 {
                first_token[client] = *now;
            }
            if !progress.done {
                continue;
            }
            finished.push(Finished {
                ttft: first_token[client] - started[client],
                e2e: *now - started[client],
            });
            if issued < total {
                started[client] = *now;
                submit(s, spec, client);
                issued += 1;
            }
        }
    }
    finished
}

/// Queues one request for `client`; the spec fits by construction of the caller's profile.
fn submit(s: &mut Scheduler<usize>, spec: &JobSpec, client: usize) {
    if let Err(err) = s.submit(spec.clone(), client) {
        tracing::warn!("rigrun sim: cannot predict: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_client_throughput_follows_the_step_time() {
        let tiny = Profile::resolve("tiny").unwrap();
        let p = predict(&tiny, 1, 16, 64);
        assert_eq!((p.completed, p.total_output_tokens), (5, 320));
        let step_ms = tiny.perf.step_ns(1, 16 + 32, 0) as f64 / 1e6;
        let expected = 1000.0 / step_ms;
        assert!(
            (p.output_throughput / expected - 1.0).abs() < 0.05,
            "{p:?} vs {expected}"
        );
    }

    #[test]
    fn more_clients_more_throughput() {
        let tiny = Profile::resolve("tiny").unwrap();
        let one = predict(&tiny, 1, 16, 64).output_throughput;
        let eight = predict(&tiny, 8, 16, 64).output_throughput;
        assert!(eight > 4.0 * one, "{one} {eight}");
    }
}
