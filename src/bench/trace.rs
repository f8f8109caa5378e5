//! `--trace FILE`: replaying a Mooncake-format JSONL trace (kvcache-ai/Mooncake's FAST'25
//! traces): each line `{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [..]}`
//! is sent at its timestamp (from the first line's, divided by `--trace-speed`), asking for M
//! output tokens with a prompt of N tokens whose k-th block of 512 tokens is named by
//! `hash_ids[k]` (the last block partial). Each hash id stands for one block of token ids (or
//! words) drawn from the seed, so requests that share leading hash ids share exactly that prefix,
//! and a server's prefix cache hits as it did in production.
//!
//! The replay also says how late the client sent each request (actual send − scheduled), and a
//! client that could not keep up makes the level invalid (see [`behind`]).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::latency::Latency;
use super::rng::Rng;

/// Tokens per hash id, as in Mooncake's traces (the KV-cache page size of their format).
pub const BLOCK_TOKENS: usize = 512;
/// The p99 lateness above which a replay is not the trace's load: ten times tokio's 1 ms timer
/// resolution (a client that keeps up is late by about 1 ms), and far below the TTFTs measured.
const LATE_LIMIT: Duration = Duration::from_millis(10);
/// Seeds of the hash ids' blocks and of each line's own tokens (past its named blocks).
const BLOCK_SALT: u64 = 0x7_4ACE_B10C;
const LINE_SALT: u64 = 0x7_4ACE_11E5;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceLine {
    /// Its line in the file (1-based), for errors.
    pub line: usize,
    pub timestamp_ms: f64,
    pub input_length: u32,
    pub output_length: u32,
    pub hash_ids: Vec<u64>,
}

/// A trace read and checked, with what identifies it in the records.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The path as given.
    pub path: String,
    pub sha256: String,
    pub lines: Vec<TraceLine>,
}

impl Trace {
    /// Reads and checks a trace file; errors name the file and the line.
    pub fn read(path: &Path) -> Result<Trace, String> {
        let label = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| format!("--trace {label}: cannot read it ({e})"))?;
        let text =
            std::str::from_utf8(&bytes).map_err(|e| format!("--trace {label}: not UTF-8 text ({e})"))?;
        let lines = parse(text).map_err(|e| format!("--trace {label}:{e}"))?;
        Ok(Trace {
            path: label,
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            lines,
        })
    }

    /// When line `index` is due: its timestamp after the first line's, divided by `speed`.
    pub fn due(&self, index: usize, speed: f64, t0: Instant) -> Instant {
        let first = self.lines.first().map_or(0.0, |l| l.timestamp_ms);
        t0 + Duration::from_secs_f64((self.lines[index].timestamp_ms - first) / 1e3 / speed)
    }

    /// Refuses the first line whose prompt and output the server's context cannot hold.
    pub fn check_fits(&self, max_model_len: u64) -> Result<(), String> {
        let too_long = self
            .lines
            .iter()
            .find(|l| u64::from(l.input_length) + u64::from(l.output_length) > max_model_len);
        match too_long {
            Some(l) => Err(format!(
                "--trace {}:{}: input_length {} + output_length {} = {} tokens, more than the \
                 server's max_model_len {max_model_len}; serve a longer context or leave the line out",
                self.path,
                l.line,
                l.input_length,
                l.output_length,
                u64::from(l.input_length) + u64::from(l.output_length)
            )),
            None => Ok(()),
        }
    }

    /// Line `index`'s prompt as `input_length` draws below `span` (token ids or words): block k
    /// drawn from `hash_ids[k]` and the seed alone, the tokens past the named blocks the line's own.
    pub fn draws(&self, index: usize, seed: u64, span: u64) -> Vec<u64> {
        let line = &self.lines[index];
        let len = line.input_length as usize;
        let mut draws = Vec::with_capacity(len);
        for &id in &line.hash_ids {
            let mut rng = Rng::for_item(seed ^ BLOCK_SALT, id);
            let take = (len - draws.len()).min(BLOCK_TOKENS);
            draws.extend((0..take).map(|_| rng.below(span)));
        }
        let mut rng = Rng::for_item(seed ^ LINE_SALT, index as u64);
        draws.extend((draws.len()..len).map(|_| rng.below(span)));
        draws
    }

    /// The mean input and output lengths of the first `count` lines, rounded.
    pub fn mean_lengths(&self, count: usize) -> (u32, u32) {
        let lines = &self.lines[..count.min(self.lines.len())];
        let n = lines.len().max(1) as f64;
        let mean = |f: fn(&TraceLine) -> u32| {
            (lines.iter().map(|l| f64::from(f(l))).sum::<f64>() / n).round() as u32
        };
        (mean(|l| l.input_length), mean(|l| l.output_length))
    }

    /// The p99 lateness a replay of the first `count` lines at `speed` may have: 10 ms, or half
    /// the mean gap between the lines' scheduled times when that is shorter (a client later
    /// than that bunches and reorders the arrivals it replays).
    pub fn late_limit(&self, count: usize, speed: f64) -> Duration {
        let lines = &self.lines[..count.min(self.lines.len())];
        let span_ms = match (lines.first(), lines.last()) {
            (Some(first), Some(last)) => last.timestamp_ms - first.timestamp_ms,
            _ => 0.0,
        };
        if lines.len() < 2 || span_ms <= 0.0 {
            return LATE_LIMIT;
        }
        let half_gap = Duration::from_secs_f64(span_ms / 1e3 / speed / (lines.len() - 1) as f64 / 2.0);
        LATE_LIMIT.min(half_gap)
    }

    /// The replay of this trace's first `num_requests` lines (all when None) at `speed`, under
    /// `--concurrency`'s `cap`; and those lines' mean input and output lengths, the run's
    /// nominal ones.
    pub fn replay(&self, num_requests: Option<u64>, speed: f64, cap: Option<u32>) -> (Replay, (u32, u32)) {
        let lines = num_requests.map_or(self.lines.len(), |n| {
            usize::try_from(n).unwrap_or(usize::MAX).min(self.lines.len())
        });
        let replay = Replay {
            path: self.path.clone(),
            sha256: self.sha256.clone(),
            lines: self.lines.len(),
            speed,
            cap,
            late_limit: self.late_limit(lines, speed),
        };
        (replay, self.mean_lengths(lines))
    }
}

/// Parses a trace's text; errors start with the line number.
fn parse(text: &str) -> Result<Vec<TraceLine>, String> {
    let mut lines: Vec<TraceLine> = Vec::new();
    for (n, raw) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let line = parse_line(raw, n + 1).map_err(|e| format!("{}: {e}", n + 1))?;
        if let Some(previous) = lines.last().filter(|p| p.timestamp_ms > line.timestamp_ms) {
            return Err(format!(
                "{}: timestamp {} is earlier than line {}'s {}; a trace's lines must be in time order",
                n + 1,
                line.timestamp_ms,
                previous.line,
                previous.timestamp_ms
            ));
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err(" the trace has no lines".into());
    }
    Ok(lines)
}

fn parse_line(raw: &str, line: usize) -> Result<TraceLine, String> {
    let value: Value = serde_json::from_str(raw).map_err(|e| format!("not JSON: {e}"))?;
    let object = value.as_object().ok_or("each line must be a JSON object")?;
    let field = |name: &str| {
        object.get(name).ok_or_else(|| {
            format!(
                "missing `{name}`; each line needs timestamp (ms), input_length, output_length \
                 and hash_ids (Mooncake's trace format)"
            )
        })
    };
    let timestamp_ms = field("timestamp")?
        .as_f64()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or("timestamp must be a number of milliseconds, 0 or more")?;
    let length = |name: &str| -> Result<u32, String> {
        field(name)?
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| format!("{name} must be a positive integer"))
    };
    let (input_length, output_length) = (length("input_length")?, length("output_length")?);
    let hash_ids: Vec<u64> = field("hash_ids")?
        .as_array()
        .and_then(|ids| ids.iter().map(Value::as_u64).collect())
        .ok_or("hash_ids must be a list of non-negative integers")?;
    let blocks = (input_length as usize).div_ceil(BLOCK_TOKENS);
    if hash_ids.len() > blocks {
        return Err(format!(
            "{} hash_ids name more blocks of {BLOCK_TOKENS} tokens than input_length {input_length} \
             holds ({blocks})",
            hash_ids.len()
        ));
    }
    Ok(TraceLine {
        line,
        timestamp_ms,
        input_length,
        output_length,
        hash_ids,
    })
}

/// What the records say about a replay, shared by its level.
#[derive(Debug, Clone)]
pub struct Replay {
    pub path: String,
    pub sha256: String,
    /// Lines in the file, and the speed factor.
    pub lines: usize,
    pub speed: f64,
    /// `--concurrency`'s cap, None when the trace alone sets the load.
    pub cap: Option<u32>,
    /// The p99 lateness beyond which the level is invalid.
    pub late_limit: Duration,
}

/// How late the client sent a replay's requests, in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lateness {
    pub mean_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub limit_ms: f64,
}

impl Lateness {
    /// From the level's lateness histogram; None when nothing was sent.
    pub fn of(latency: &Latency, replay: &Replay) -> Option<Lateness> {
        let stats = latency.stats()?;
        Some(Lateness {
            mean_ms: stats.mean,
            p99_ms: stats.p99,
            max_ms: latency.max_ms()?,
            limit_ms: replay.late_limit.as_secs_f64() * 1e3,
        })
    }
}

impl Replay {
    /// The lines it sends at most: the trace's, or its first `num_requests`.
    pub fn replayed_lines(&self, num_requests: Option<u64>) -> u64 {
        let lines = self.lines as u64;
        num_requests.map_or(lines, |n| n.min(lines))
    }
}

/// The validity problem of a client that could not keep up with the trace, if it could not.
pub fn behind(late: &Lateness) -> Option<String> {
    (late.p99_ms > late.limit_ms).then(|| {
        format!(
            "the client could not keep up with the trace: p99 lateness {:.1} ms (mean {:.1}, max \
             {:.1}) from each request's scheduled time to its send, above the {:.1} ms limit, so \
             the server did not see the trace's arrivals; replay slower (--trace-speed) or on a \
             less busy machine",
            late.p99_ms, late.mean_ms, late.max_ms, late.limit_ms
        )
    })
}

/// The replay's fields of a level's record: the trace, lines replayed, speed, lateness; and
/// `max_concurrency` null when no cap held requests back (as `vllm bench serve` writes it).
pub fn record(replay: &Replay, replayed: u64, late: Option<&Lateness>, m: &mut Map<String, Value>) {
    let round =
        |x: f64| serde_json::Number::from_f64((x * 1e4).round() / 1e4).map_or(Value::Null, Value::Number);
    if replay.cap.is_none() {
        m.insert("max_concurrency".into(), Value::Null);
    }
    m.insert("trace_file".into(), replay.path.clone().into());
    m.insert("trace_sha256".into(), replay.sha256.clone().into());
    m.insert("trace_lines".into(), replay.lines.into());
    m.insert("trace_replayed".into(), replayed.into());
    m.insert("trace_speed".into(), round(replay.speed));
    for (key, value) in [
        ("mean_lateness_ms", late.map(|l| l.mean_ms)),
        ("p99_lateness_ms", late.map(|l| l.p99_ms)),
        ("max_lateness_ms", late.map(|l| l.max_ms)),
    ] {
        m.insert(key.into(), value.map_or(Value::Null, round));
    }
    m.insert(
        "lateness_limit_ms".into(),
        round(replay.late_limit.as_secs_f64() * 1e3),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(text: &str) -> Trace {
        Trace {
            path: "t.jsonl".into(),
            sha256: String::new(),
            lines: parse(text).unwrap(),
        }
    }

    #[test]
    fn reads_mooncake_lines() {
        let t = trace(
            "{\"timestamp\": 0, \"input_length\": 6755, \"output_length\": 500, \"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n\n\
             {\"timestamp\": 3052.5, \"input_length\": 2287, \"output_length\": 316, \"hash_ids\": [0, 42, 43, 44, 45]}\n",
        );
        assert_eq!(t.lines.len(), 2);
        assert_eq!(
            t.lines[1],
            TraceLine {
                line: 3,
                timestamp_ms: 3052.5,
                input_length: 2287,
                output_length: 316,
                hash_ids: vec![0, 42, 43, 44, 45],
            }
        );
        let t0 = Instant::now();
        assert_eq!(t.due(1, 2.0, t0) - t0, Duration::from_secs_f64(1.52625));
        assert_eq!(t.mean_lengths(2), (4521, 408));
    }

    #[test]
    fn bad_lines_are_named_with_what_is_wrong() {
        let ok = "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [0]}";
        let cases = [
            ("not json", "1: not JSON"),
            ("[1]", "1: each line must be a JSON object"),
            (
                "{\"timestamp\": 1, \"output_length\": 2, \"hash_ids\": []}",
                "1: missing `input_length`",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 2, \"hash_ids\": []}",
                "1: input_length must be a positive integer",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 513, \"output_length\": 2, \"hash_ids\": [1, 2, 3]}",
                "1: 3 hash_ids name more blocks of 512 tokens than input_length 513 holds (2)",
            ),
            (
                "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 2, \"hash_ids\": [-1]}",
                "1: hash_ids must be a list of non-negative integers",
            ),
        ];
        for (line, want) in cases {
            let err = parse(line).unwrap_err();
            assert!(err.starts_with(want), "{line}: {err}");
        }
        let late = format!("{ok}\n\n{}", ok.replace("\"timestamp\": 5", "\"timestamp\": 4"));
        assert_eq!(
            parse(&late).unwrap_err(),
            "3: timestamp 4 is earlier than line 1's 5; a trace's lines must be in time order"
        );
        assert_eq!(parse("\n").unwrap_err(), " the trace has no lines");
    }

    #[test]
    fn read_names_the_file_and_fits_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let ok = "{\"timestamp\": 0, \"input_length\": 3000, \"output_length\": 1000, \"hash_ids\": []}";
        std::fs::write(&path, format!("{ok}\n{}\n", ok.replace("1000", "1200"))).unwrap();
        let t = Trace::read(&path).unwrap();
        assert_eq!(t.sha256.len(), 64);
        let err = t.check_fits(4096).unwrap_err();
        assert!(
            err.ends_with("t.jsonl:2: input_length 3000 + output_length 1200 = 4200 tokens, more than the server's max_model_len 4096; serve a longer context or leave the line out"),
            "{err}"
        );
        std::fs::write(&path, "{}\n").unwrap();
        let err = Trace::read(&path).unwrap_err();
        assert!(
            err.starts_with("--trace ") && err.contains("t.jsonl:1: missing `timestamp`"),
            "{err}"
        );
    }

    #[test]
    fn shared_hash_ids_share_exactly_their_blocks() {
        let t = trace(
            "{\"timestamp\": 0, \"input_length\": 1500, \"output_length\": 1, \"hash_ids\": [7, 8, 9]}\n\
             {\"timestamp\": 1, \"input_length\": 1400, \"output_length\": 1, \"hash_ids\": [7, 8, 3]}\n\
             {\"timestamp\": 2, \"input_length\": 700, \"output_length\": 1, \"hash_ids\": [7]}\n",
        );
        let (a, b, c) = (
            t.draws(0, 1, 29_000),
            t.draws(1, 1, 29_000),
            t.draws(2, 1, 29_000),
        );
        assert_eq!((a.len(), b.len(), c.len()), (1500, 1400, 700));
        assert_eq!(a[..1024], b[..1024], "two shared blocks");
        assert_ne!(a[1024..1040], b[1024..1040], "the third block differs");
        assert_eq!(a[..512], c[..512]);
        // Past its one named block, a line's tokens are its own.
        assert_ne!(a[512..528], c[512..528]);
        // Another seed, other blocks: a rerun cannot hit the first run's cache.
        assert_ne!(t.draws(0, 2, 29_000)[..16], a[..16]);
        assert_eq!(t.draws(0, 1, 29_000), a, "deterministic");
    }

    #[test]
    fn lateness_beyond_the_limit_invalidates() {
        let t = trace(
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n\
             {\"timestamp\": 100, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n\
             {\"timestamp\": 110, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": []}\n",
        );
        // Gaps of 55 ms on average at speed 1: the 10 ms limit; at speed 10, half of 5.5 ms.
        assert_eq!(t.late_limit(3, 1.0), LATE_LIMIT);
        assert_eq!(t.late_limit(3, 10.0), Duration::from_micros(2750));
        assert_eq!(t.late_limit(1, 10.0), LATE_LIMIT, "one line has no gap");
        let late = Lateness {
            mean_ms: 3.0,
            p99_ms: 12.0,
            max_ms: 20.0,
            limit_ms: 10.0,
        };
        let why = behind(&late).unwrap();
        assert!(
            why.starts_with("the client could not keep up with the trace: p99 lateness 12.0 ms"),
            "{why}"
        );
        assert_eq!(behind(&Lateness { p99_ms: 9.0, ..late }), None);
    }
}
