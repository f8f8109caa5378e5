//! Crashing on purpose (`--crash-at-concurrency`, `--crash-on-kv-overflow`,
//! `--crash-after-requests`): the sim dies the way a real engine does when the GPU runs out of
//! memory, so that what notices a dead server can be tested end to end. The scheduler decides
//! when ([`CrashRule`], checked in virtual time); the engine's clock thread says why on stderr
//! in the engine's words ([`Crash::log_lines`]) and ends the process at once with
//! [`CRASH_EXIT_CODE`], serving nothing more.

/// The exit status of a sim that crashed on purpose: 1, as a Python server (vLLM, SGLang)
/// dying of an uncaught exception exits.
pub const CRASH_EXIT_CODE: i32 = 1;

/// When the sim crashes; nothing by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashRule {
    /// Crash once this many requests run in the engine at once (the scheduler's running batch).
    pub at_running: Option<usize>,
    /// Crash instead of preempting when the KV cache cannot hold a step's tokens.
    pub on_kv_overflow: bool,
    /// Crash when the N-th request (counted from 1) reaches the engine.
    pub after_requests: Option<u64>,
}

/// Why the sim crashed, with the figures its log line gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// CUDA out of memory with `running` requests in the batch.
    OutOfMemory { running: usize },
    /// The KV cache could not hold the step's `needed` tokens; `free` were left.
    KvOverflow { needed: u64, free: u64 },
    /// The `n`-th request arrived.
    AfterRequests { n: u64 },
}

/// An 80 GB GPU's total as PyTorch reports it (GiB): the figures of the OOM line are
/// illustrative, not modelled.
const GPU_TOTAL_GIB: f64 = 79.19;

impl Crash {
    /// What the engine's log says as it dies: a traceback's last lines and the exception.
    /// Out of memory is PyTorch's `torch.OutOfMemoryError` (as vLLM's engine core dies of it);
    /// the KV cache is SGLang's `RuntimeError` from its token allocator.
    pub fn log_lines(&self) -> Vec<String> {
        match *self {
            Crash::OutOfMemory { running } => oom_lines(&format!("{running} requests running")),
            Crash::AfterRequests { n } => oom_lines(&format!("request {n} arrived")),
            Crash::KvOverflow { needed, free } => vec![
                "[rigrun sim] Scheduler hit an exception: Traceback (most recent call last):".into(),
                "  File \"sglang/srt/mem_cache/allocator.py\", line 112, in alloc_token_slots".into(),
                format!(
                    "RuntimeError: Decode out of memory. Try to lower your batch size. Try to \
                     allocate {needed} tokens. Available tokens: {free} (KV cache full; rigrun sim \
                     --crash-on-kv-overflow)"
                ),
            ],
        }
    }
}

/// PyTorch's CUDA out-of-memory error as vLLM's engine core logs it when it dies; `when` says
/// what triggered it.
fn oom_lines(when: &str) -> Vec<String> {
    let tried = 2.0;
    let free_mib = 6.31;
    vec![
        "ERROR [core.py:710] EngineCore encountered a fatal error.".into(),
        "Traceback (most recent call last):".into(),
        "  File \"vllm/v1/worker/gpu_model_runner.py\", line 1390, in execute_model".into(),
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried:.2} GiB. GPU 0 \
             has a total capacity of {GPU_TOTAL_GIB:.2} GiB of which {free_mib:.2} MiB is free. \
             Including non-PyTorch memory, this process has {:.2} GiB memory in use. (rigrun sim: \
             {when})",
            GPU_TOTAL_GIB - free_mib / 1024.0
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oom_line_reads_like_pytorchs() {
        let lines = Crash::OutOfMemory { running: 4 }.log_lines();
        let last = lines.last().unwrap();
        assert!(last.starts_with(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a \
             total capacity of 79.19 GiB of which 6.31 MiB is free."
        ));
        assert!(last.contains("4 requests running"), "{last}");
        assert!(lines.iter().any(|l| l.starts_with("Traceback")));
    }

    #[test]
    fn the_kv_line_names_the_tokens() {
        let lines = Crash::KvOverflow { needed: 3, free: 1 }.log_lines();
        assert!(lines[2].starts_with("RuntimeError: Decode out of memory."));
        assert!(lines[2].contains("Try to allocate 3 tokens. Available tokens: 1"));
    }
}
