//! The report's charts, from the records of one step across runs: output throughput against
//! concurrency (log2, one line per host), TTFT p50/p99 against concurrency, per-request tok/s
//! against total tok/s (the trade-off view), and prefill time (TTFT) against input length for
//! long-context sweeps; the TTFT chart draws a line at each SLO limit on TTFT. Only valid
//! measurements are drawn; a repeated point is drawn at the mean of its valid repetitions, with an
//! error bar of its 95% interval on the throughput and TTFT charts. A chart the data cannot
//! support is left out with a sentence saying why.

use indexmap::IndexMap;
use serde_json::Value as Json;

use super::cell::format_number;
use super::cell::invalid_reason;
use super::compare::run_label;
use super::scaling::{concurrency_of, series_name};
use super::stats::Summary;
use super::svg::{tooltip, Chart, Limit, Point, Scale, Series};
use super::Run;
use crate::events::{Record, RecordStatus};

/// One valid measurement of the step, or the valid repetitions of a repeated point together.
struct Sample<'a> {
    /// Host (and other axes, and run when there are several).
    series: String,
    /// The host (and run) alone, for charts whose x axis is one of the other axes.
    host: String,
    concurrency: Option<f64>,
    /// The point's records, one per repetition measured (the last of each).
    records: Vec<&'a Record>,
}

impl Sample<'_> {
    /// The metric, the mean of the repetitions that report it.
    fn metric(&self, name: &str) -> Option<f64> {
        self.summary(name).map(|s| s.mean)
    }

    /// What the repetitions' values of `name` say together.
    fn summary(&self, name: &str) -> Option<Summary> {
        let values: Vec<f64> = self
            .records
            .iter()
            .filter_map(|r| r.metrics.get(name).and_then(Json::as_f64))
            .collect();
        Summary::of(&values)
    }

    /// The input length: the point's `input_len`, else the one the benchmark reported.
    fn input_len(&self) -> Option<f64> {
        self.records[0]
            .point
            .get("input_len")
            .and_then(Json::as_f64)
            .or_else(|| self.metric("input_len"))
    }
}

/// The charts of one step, and a sentence for each chart left out.
pub fn for_step(runs: &[Run], step_index: usize, step: &str) -> (Vec<Chart>, Vec<String>) {
    let samples = samples(runs, step_index, step);
    let mut colors = Colors::default();
    // Hosts keep the colour of their place in the inventory, whichever finished first.
    for (host, run) in runs
        .iter()
        .flat_map(|r| r.hosts().into_iter().map(move |h| (h, r)))
    {
        colors.of(&format!("{host}{}", run_suffix(runs, run)));
    }
    let mut charts = Vec::new();
    let mut left_out = Vec::new();
    let attempts = [
        throughput(&samples, &mut colors),
        ttft(&samples, &mut colors, &slo_limits(runs)),
        tradeoff(&samples, &mut colors),
        prefill(&samples, &mut colors),
    ];
    for attempt in attempts {
        match attempt {
            Ok(chart) => charts.push(chart),
            Err(why) => left_out.push(why),
        }
    }
    (charts, left_out)
}

/// Every limit of the runs' SLOs, once (runs judged by different limits show each).
fn slo_limits(runs: &[Run]) -> Vec<(&str, f64)> {
    let mut limits: Vec<(&str, f64)> = Vec::new();
    for (metric, &limit) in runs.iter().flat_map(|r| &r.manifest.slo.limits) {
        if !limits.contains(&(metric.as_str(), limit)) {
            limits.push((metric.as_str(), limit));
        }
    }
    limits
}

fn samples<'a>(runs: &'a [Run], step_index: usize, step: &str) -> Vec<Sample<'a>> {
    let mut samples = Vec::new();
    for run in runs {
        let suffix = run_suffix(runs, run);
        let valid = run.records.iter().filter(|r| {
            r.step_index == step_index
                && r.step == step
                && r.status == RecordStatus::Ok
                && invalid_reason(r).is_none()
        });
        // Per point, per repetition, the last record; a point's repetitions make one sample.
        let mut points: IndexMap<(String, String), IndexMap<u32, &Record>> = IndexMap::new();
        for record in valid {
            let key = (record.host.clone(), crate::point::label(&record.point));
            points.entry(key).or_default().insert(record.repetition, record);
        }
        samples.extend(points.into_values().map(|reps| {
            let records: Vec<&Record> = reps.into_values().collect();
            Sample {
                series: format!("{}{suffix}", series_name(records[0])),
                host: format!("{}{suffix}", records[0].host),
                concurrency: concurrency_of(records[0]),
                records,
            }
        }));
    }
    samples
}

/// What tells the runs apart in series names: nothing for one run, ` @<time>` for several.
fn run_suffix(runs: &[Run], run: &Run) -> String {
    match runs.len() {
        1 => String::new(),
        _ => format!(" @{}", run_label(runs, run)),
    }
}

/// One colour per series name, shared by all charts of a step.
#[derive(Default)]
struct Colors(Vec<String>);

impl Colors {
    fn of(&mut self, name: &str) -> usize {
        match self.0.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                self.0.push(name.to_string());
                self.0.len() - 1
            }
        }
    }
}

/// Points of `y` against `x` per series; a later sample at the same x replaces an earlier one.
/// `name` gives a sample's series name and the name its colour goes by.
fn lines(
    samples: &[Sample],
    colors: &mut Colors,
    name: impl Fn(&Sample) -> (String, String),
    xy: impl Fn(&Sample) -> Option<Point>,
) -> Vec<Series> {
    let mut by_name: IndexMap<String, (usize, IndexMap<String, Point>)> = IndexMap::new();
    for sample in samples {
        let Some(point) = xy(sample) else { continue };
        let (series, color_key) = name(sample);
        let color = colors.of(&color_key);
        let entry = by_name.entry(series).or_insert_with(|| (color, IndexMap::new()));
        entry.1.insert(point.x.to_string(), point);
    }
    let mut series: Vec<Series> = by_name
        .into_iter()
        .map(|(name, (color, points))| Series {
            name,
            color,
            dashed: false,
            points: points.into_values().collect(),
        })
        .collect();
    series.sort_by_key(|s| s.color);
    series
}

/// A point, when both coordinates are numbers.
fn point(x: f64, y: f64, tooltip: String, label: Option<String>) -> Option<Point> {
    (x.is_finite() && y.is_finite()).then_some(Point {
        x,
        y,
        tooltip,
        label,
        error: None,
    })
}

/// Concurrency on x, `metric` on y, per series; a repeated point's error bar is its 95% interval.
fn by_concurrency(
    samples: &[Sample],
    colors: &mut Colors,
    metric: &str,
    unit: &str,
    suffix: &str,
) -> Vec<Series> {
    lines(
        samples,
        colors,
        |s| (format!("{}{suffix}", s.series), s.series.clone()),
        |s| {
            let c = s.concurrency?;
            let y = s.summary(metric)?;
            let mut tip = tooltip("C", c, y.mean, unit);
            if let Some(hw) = y.ci95 {
                tip.push_str(&format!(
                    " ± {} (mean of {} repetitions, 95% interval)",
                    format_number(hw),
                    y.n
                ));
            }
            let mut p = point(c, y.mean, tip, None)?;
            p.error = y.ci95;
            Some(p)
        },
    )
}

fn needs_two_levels(series: &[Series], what: &str) -> Result<(), String> {
    match series.iter().any(|s| s.points.len() >= 2) {
        true => Ok(()),
        false => Err(format!(
            "{what}: no host has two concurrency levels measured, so there is no line to draw"
        )),
    }
}

fn throughput(samples: &[Sample], colors: &mut Colors) -> Result<Chart, String> {
    let series = by_concurrency(samples, colors, "output_throughput", "output tok/s", "");
    needs_two_levels(&series, "throughput chart")?;
    Ok(Chart {
        kind: "throughput",
        title: "Output throughput by concurrency".into(),
        x_label: "concurrency (log2 scale)".into(),
        y_label: "output tok/s".into(),
        x_scale: Scale::Log2,
        series,
        limits: Vec::new(),
    })
}

/// The TTFT chart, with a line at each SLO limit on the TTFT it draws (p50 or p99).
fn ttft(samples: &[Sample], colors: &mut Colors, slo: &[(&str, f64)]) -> Result<Chart, String> {
    let mut series = by_concurrency(samples, colors, "median_ttft_ms", "ms TTFT p50", " p50");
    let mut p99 = by_concurrency(samples, colors, "p99_ttft_ms", "ms TTFT p99", " p99");
    for s in &mut p99 {
        s.dashed = true;
    }
    series.append(&mut p99);
    series.sort_by_key(|s| s.color);
    if series.is_empty() {
        return Err("TTFT chart: the records have no median_ttft_ms or p99_ttft_ms (bench_throughput.py reports them with --stream)".into());
    }
    needs_two_levels(&series, "TTFT chart")?;
    Ok(Chart {
        kind: "ttft",
        title: "Time to first token by concurrency (solid p50, dashed p99)".into(),
        x_label: "concurrency (log2 scale)".into(),
        y_label: "TTFT (ms)".into(),
        x_scale: Scale::Log2,
        series,
        limits: slo
            .iter()
            .filter(|(metric, _)| ["median_ttft_ms", "p99_ttft_ms"].contains(metric))
            .map(|&(metric, y)| Limit {
                y,
                label: format!("SLO {metric} ≤ {}", format_number(y)),
            })
            .collect(),
    })
}

/// Per-request decode speed: 1000 / median TPOT when every sample has it, else output
/// throughput shared among the concurrent requests.
fn tradeoff(samples: &[Sample], colors: &mut Colors) -> Result<Chart, String> {
    let measured: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.metric("output_throughput").is_some() && s.concurrency.is_some())
        .collect();
    let by_tpot = !measured.is_empty()
        && measured
            .iter()
            .all(|s| s.metric("median_tpot_ms").is_some_and(|t| t > 0.0));
    let series = lines(
        samples,
        colors,
        |s| (s.series.clone(), s.series.clone()),
        |s| {
            let total = s.metric("output_throughput")?;
            let c = s.concurrency?;
            let per_request = match by_tpot {
                true => 1000.0 / s.metric("median_tpot_ms")?,
                false => total / c,
            };
            let tip = format!("C={c}: {total:.1} output tok/s in all, {per_request:.1} tok/s per request");
            point(total, per_request, tip, Some(format!("C={c}")))
        },
    );
    needs_two_levels(&series, "trade-off chart")?;
    Ok(Chart {
        kind: "tradeoff",
        title: "Per-request speed against total throughput (the trade-off)".into(),
        x_label: "total output tok/s".into(),
        y_label: match by_tpot {
            true => "tok/s per request (1000 / median TPOT)".into(),
            false => "tok/s per request (total ÷ concurrency)".into(),
        },
        x_scale: Scale::Linear,
        series,
        limits: Vec::new(),
    })
}

/// TTFT against input length, per host (and concurrency, when it varies).
fn prefill(samples: &[Sample], colors: &mut Colors) -> Result<Chart, String> {
    let mut lengths: Vec<f64> = samples.iter().filter_map(Sample::input_len).collect();
    lengths.sort_by(f64::total_cmp);
    lengths.dedup();
    if lengths.len() < 2 {
        return Err(
            "prefill chart: the step has one input length only (long-context sweeps vary input_len)".into(),
        );
    }
    let mut levels: Vec<f64> = samples.iter().filter_map(|s| s.concurrency).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    let per_level = levels.len() > 1;
    let series = lines(
        samples,
        colors,
        |s| match (per_level, s.concurrency) {
            (true, Some(c)) => (format!("{} C={c}", s.host), s.host.clone()),
            _ => (s.host.clone(), s.host.clone()),
        },
        |s| {
            let len = s.input_len()?;
            let ttft = s.metric("median_ttft_ms").or_else(|| s.metric("mean_ttft_ms"))?;
            point(len, ttft, tooltip("input_len", len, ttft, "ms TTFT"), None)
        },
    );
    if series.iter().all(|s| s.points.len() < 2) {
        return Err(
            "prefill chart: no TTFT at two input lengths (bench_throughput.py reports TTFT with --stream)"
                .into(),
        );
    }
    Ok(Chart {
        kind: "prefill",
        title: "Prefill time (median TTFT) by input length".into(),
        x_label: "input tokens".into(),
        y_label: "TTFT (ms)".into(),
        x_scale: Scale::Linear,
        series,
        limits: Vec::new(),
    })
}
