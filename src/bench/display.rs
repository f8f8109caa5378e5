//! What a person sees on stderr: a progress bar on a terminal (a plain line every 10 s
//! otherwise), and a table with one row per level, each invalid level's problems below its row.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::latency::LatencyStats;
use super::level::Progress;
use super::record::Summary;

/// How often a plain progress line is printed when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// Progress of one level, as a bar or plain lines.
pub struct LevelProgress {
    label: String,
    bar: Option<ProgressBar>,
    warmup: u64,
    measured: Option<u64>,
    warmed: u64,
    started: Instant,
    last_line: Instant,
}

impl LevelProgress {
    /// Progress of level `concurrency`: `warmup` unmeasured requests, then `measured` (None for
    /// a level that runs for a duration).
    pub fn new(concurrency: u32, warmup: u64, measured: Option<u64>) -> Self {
        let label = format!("C={concurrency}");
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar =
                ProgressBar::with_draw_target(measured.map(|n| n + warmup), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{prefix:>7} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(label.clone());
            bar.set_message("warming up");
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let now = Instant::now();
        LevelProgress {
            label,
            bar,
            warmup,
            measured,
            warmed: 0,
            started: now,
            last_line: now,
        }
    }

    /// Prints a plain line (no terminal) at most every 10 s.
    fn plain(&mut self, text: impl FnOnce(&Self) -> String) {
        if self.bar.is_some() || self.last_line.elapsed() < PLAIN_EVERY {
            return;
        }
        self.last_line = Instant::now();
        eprintln!(
            "{}: {}, {:.0} s",
            self.label,
            text(self),
            self.started.elapsed().as_secs_f64()
        );
    }
}

impl Progress for LevelProgress {
    fn warmed(&mut self) {
        self.warmed += 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        self.plain(|p| format!("warming up, {}/{} done", p.warmed, p.warmup));
    }

    fn measuring(&mut self) {
        if let Some(bar) = &self.bar {
            bar.set_message("measuring");
        }
    }

    fn measured(&mut self, done: u64, failed: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.warmup + done);
            if failed > 0 {
                bar.set_message(format!("measuring, {failed} failed"));
            }
        }
        self.plain(|p| {
            let of = p.measured.map_or(String::new(), |n| format!("/{n}"));
            let failed = if failed > 0 {
                format!(" ({failed} failed)")
            } else {
                String::new()
            };
            format!("{done}{of} measured requests done{failed}")
        });
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// The table's column titles; with `goodput` (`--slo`), the requests per second within the
/// limits and their share of those completed.
pub fn header(goodput: bool) -> String {
    let good = match goodput {
        true => format!(" {:>9} {:>6}", "goodput/s", "good %"),
        false => String::new(),
    };
    format!(
        "{:>6} {:>6} {:>5} {:>11} {:>12} {:>8} {:>9} {:>8} {:>8} {:>8} {:>5} {:>5}{good}",
        "C",
        "done",
        "fail",
        "out tok/s",
        "steady tok/s",
        "req/s",
        "TTFT p50",
        "p99 ms",
        "ITL p50",
        "p99 ms",
        "peak",
        "valid"
    )
}

/// What Ctrl-C leaves: the level cut short named, and the table of the levels measured before
/// it (their JSON lines were already printed).
pub fn interrupted(concurrency: u32, header: &str, measured: &[Summary]) -> String {
    let cut = format!(
        "rigrun bench: interrupted during C={concurrency}: that level is not measured (no JSON line)"
    );
    if measured.is_empty() {
        return format!("{cut}; no level was measured before it");
    }
    let rows = measured.iter().flat_map(row);
    let lines: Vec<String> = std::iter::once(header.to_string()).chain(rows).collect();
    format!("{cut}; measured before it:\n{}", lines.join("\n"))
}

/// A level's goodput cells, when it was measured.
fn goodput_cells(s: &Summary) -> String {
    s.goodput()
        .map(|(per_second, share)| format!(" {per_second:>9.2} {share:>6.1}"))
        .unwrap_or_default()
}

/// One level's row, then its problems and example errors, one per line.
pub fn row(s: &Summary) -> Vec<String> {
    let ms = |stats: Option<LatencyStats>, f: fn(&LatencyStats) -> f64| {
        stats.map_or("-".to_string(), |s| format!("{:.1}", f(&s)))
    };
    let steady = s.steady.map_or("-".to_string(), |(tps, _)| format!("{tps:.1}"));
    let mut lines = vec![format!(
        "{:>6} {:>6} {:>5} {:>11.1} {:>12} {:>8.2} {:>9} {:>8} {:>8} {:>8} {:>5} {:>5}{}",
        s.concurrency,
        s.counts.completed,
        s.counts.failed,
        s.output_throughput(),
        steady,
        s.request_throughput(),
        ms(s.ttft, |s| s.median),
        ms(s.ttft, |s| s.p99),
        ms(s.itl, |s| s.median),
        ms(s.itl, |s| s.p99),
        s.peak,
        if s.valid() { "yes" } else { "NO" },
        goodput_cells(s)
    )];
    lines.extend(s.per_turn.iter().map(|t| {
        let cached = t
            .mean_cached_tokens
            .map_or(String::new(), |c| format!(", {c:.0} cached"));
        format!(
            "{:>6}   turn {}: {} done, {:.0} prompt tokens{cached}, TTFT median {} p99 {} ms",
            "",
            t.turn,
            t.completed,
            t.mean_input_tokens,
            ms(t.ttft, |s| s.median),
            ms(t.ttft, |s| s.p99)
        )
    }));
    lines.extend(s.problems.iter().map(|p| format!("{:>6} ! {p}", "")));
    lines.extend(
        s.counts
            .first_errors
            .iter()
            .map(|(kind, detail)| format!("{:>6}   {kind}, e.g.: {detail}", "")),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::super::metrics::Counts;
    use super::super::turns::TurnSummary;
    use super::*;

    #[test]
    fn an_invalid_row_is_followed_by_its_problems_and_example_errors() {
        let stats = LatencyStats {
            mean: 1.0,
            median: 2.0,
            p90: 3.0,
            p99: 4.0,
        };
        let summary = Summary {
            concurrency: 4,
            rate: None,
            num_prompts: Some(20),
            warmup: 4,
            warmup_failed: 0,
            counts: Counts {
                completed: 19,
                failed: 1,
                output_tokens: 190,
                first_errors: [("http_500".into(), "HTTP 500: boom".into())].into(),
                ..Counts::default()
            },
            duration: 2.0,
            peak: 4,
            mean_in_flight: Some(3.9),
            steady: Some((100.0, 1.5)),
            steady_at: None,
            measured_at: (0.0, 2.0),
            ttft: Some(stats),
            tpot: None,
            itl: None,
            e2el: None,
            queue: None,
            cpu_percent: 5.0,
            cores: 2,
            max_rss_mb: 10.0,
            problems: vec!["1 of 20 requests failed (http_500: 1)".into()],
            good: None,
            per_turn: Vec::new(),
            cache: "warm",
            lateness: None,
        };
        let lines = row(&summary);
        let cells: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            cells,
            ["4", "19", "1", "95.0", "100.0", "9.50", "2.0", "4.0", "-", "-", "4", "NO"]
        );
        assert_eq!(lines[1], "       ! 1 of 20 requests failed (http_500: 1)");
        assert_eq!(lines[2], "         http_500, e.g.: HTTP 500: boom");
        assert_eq!(header(false).split_whitespace().next(), Some("C"));
        let turn = TurnSummary {
            turn: 2,
            completed: 9,
            mean_input_tokens: 100.4,
            mean_cached_tokens: Some(32.0),
            ttft: Some(stats),
        };
        let with_turns = Summary {
            per_turn: vec![turn],
            ..summary.clone()
        };
        assert_eq!(
            row(&with_turns)[1],
            "         turn 2: 9 done, 100 prompt tokens, 32 cached, TTFT median 2.0 p99 4.0 ms"
        );
        let with_slo = Summary {
            good: Some(10),
            ..summary
        };
        let cells: Vec<String> = row(&with_slo)[0].split_whitespace().map(String::from).collect();
        assert_eq!(cells[12..], ["5.00", "52.6"], "10 of 19 in 2 s");
        assert_eq!(
            header(true).split_whitespace().rev().take(2).collect::<Vec<_>>(),
            ["%", "good"]
        );
    }
}
