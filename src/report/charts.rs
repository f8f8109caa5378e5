//! The report's charts, from the records of one step across runs: output throughput against
//! concurrency (log2, one line per host), TTFT p50/p99 against concurrency, per-request tok/s
//! against total tok/s (the trade-off view), and prefill time (TTFT) against input length for
//! long-context sweeps; the TTFT chart draws a line at each SLO limit on TTFT. A sweep over
//! offered request rates (`request_rate`) gets what each host served against what was offered,
//! and TTFT p50/p99 against the offered rate, the rates where it falls behind and where its
//! latency departs labelled. Only valid
//! measurements are drawn; a repeated point is drawn at the mean of its valid repetitions, with an
//! error bar of its 95% interval on the throughput and TTFT charts. A point not measured
//! (skipped, failed, not run, ran without a record, invalid, or without the metric) is marked
//! where it would be.
//! A series' colour is its host's and its dash pattern its variant's or run's, in every chart of
//! a report. A chart the step is meant for (a concurrency sweep, a sweep over input lengths)
//! but the data cannot support is left out with a sentence saying why; other steps get none.

use indexmap::IndexMap;
use serde_json::Value as Json;

use super::cell::{format_number, invalid_reason, Cell};
use super::planned::Planned;
use super::scaling::{concurrency_of, series_name, series_of};
use super::stats::Estimate;
use super::svg::{tooltip, Chart, ChartPoint, ChartSeries, Gap, Limit, Look, Scale, Tag};
use super::Run;
use crate::events::{Record, RecordStatus};
use crate::point::{self, StepPoint, Values};

/// One valid measurement of the step, or the valid repetitions of a repeated point together.
struct Measured<'a> {
    /// Host (and other axes, and run when there are several).
    series: String,
    /// The host (and run) alone, for charts whose x axis is one of the other axes.
    host: String,
    /// The colour (host) and dash pattern (variant, run) of its series.
    look: (Tag, Tag),
    concurrency: Option<f64>,
    /// The point's records, one per repetition measured (the last of each).
    records: Vec<&'a Record>,
}

impl Measured<'_> {
    /// The metric, the mean of the repetitions that report it.
    fn metric(&self, name: &str) -> Option<f64> {
        self.summary(name).map(|s| s.mean)
    }

    /// What the repetitions' values of `name` say together.
    fn summary(&self, name: &str) -> Option<Estimate> {
        let values: Vec<f64> = self
            .records
            .iter()
            .filter_map(|r| r.metrics.get(name).and_then(Json::as_f64))
            .collect();
        Estimate::of(&values)
    }

    /// The request rate offered: the point's `request_rate` axis.
    fn offered_rate(&self) -> Option<f64> {
        self.records[0].point.get("request_rate").and_then(Json::as_f64)
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

/// A planned or recorded point of a host with no valid measurement, and why.
struct Unmeasured {
    series: String,
    host: String,
    look: (Tag, Tag),
    point: Values,
    /// `skipped`, `failed`, `invalid`, `not run`, `ran, no record`, …
    status: &'static str,
    why: String,
}

impl Unmeasured {
    fn concurrency(&self) -> Option<f64> {
        self.point.get("concurrency").and_then(Json::as_f64)
    }

    fn input_len(&self) -> Option<f64> {
        self.point.get("input_len").and_then(Json::as_f64)
    }

    fn offered_rate(&self) -> Option<f64> {
        self.point.get("request_rate").and_then(Json::as_f64)
    }
}

/// A step's measurements and the points it did not measure, across runs.
struct StepData<'a> {
    samples: Vec<Measured<'a>>,
    unmeasured: Vec<Unmeasured>,
    slo: Vec<(&'a str, f64)>,
}

impl StepData<'_> {
    /// How many distinct values of an axis the step has, measured or not.
    fn levels(
        &self,
        sample: impl Fn(&Measured) -> Option<f64>,
        other: impl Fn(&Unmeasured) -> Option<f64>,
    ) -> usize {
        let mut values: Vec<f64> = self
            .samples
            .iter()
            .filter_map(sample)
            .chain(self.unmeasured.iter().filter_map(other))
            .collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        values.len()
    }

    /// The × of the points not measured, at their concurrency.
    fn gaps_by_concurrency(&self) -> Vec<Gap> {
        self.gaps(|u| {
            let c = u.concurrency();
            let point = c.map_or_else(|| point::label(&u.point), |c| format!("C={}", format_number(c)));
            (u.series.clone(), c, point)
        })
    }

    /// The points not measured, each in the series, at the x (none: in the legend) and named
    /// as `at` says.
    fn gaps(&self, at: impl Fn(&Unmeasured) -> (String, Option<f64>, String)) -> Vec<Gap> {
        self.unmeasured
            .iter()
            .map(|u| {
                let (series, x, point) = at(u);
                Gap {
                    series,
                    look: look(&u.look, ""),
                    x,
                    point,
                    status: u.status.to_string(),
                    why: format!("{}: {}", u.status, u.why),
                }
            })
            .collect()
    }
}

/// The charts of one step, and a sentence for each chart left out that the step was meant for.
pub fn for_step(runs: &[Run], step_index: usize, step: &str) -> (Vec<Chart>, Vec<String>) {
    let looks = Looks::of(runs);
    let data = StepData {
        samples: samples(runs, step_index, step, &looks),
        unmeasured: unmeasured(runs, step_index, step, &looks),
        slo: slo_limits(runs),
    };
    let mut attempts = Vec::new();
    // A concurrency sweep is meant for the charts against concurrency, a sweep over input
    // lengths for the prefill chart; a step of one level (a server's startup, a single point)
    // is not, and gets no sentence about them.
    let by_concurrency = data.levels(|s| s.concurrency, Unmeasured::concurrency) >= 2;
    if by_concurrency {
        attempts.extend([throughput(&data), ttft(&data), tradeoff(&data)]);
    }
    if data.levels(|s| s.input_len(), Unmeasured::input_len) >= 2 {
        attempts.push(prefill(&data));
    }
    if data.levels(|s| s.offered_rate(), Unmeasured::offered_rate) >= 2 {
        attempts.extend([served(&data), ttft_by_rate(&data)]);
    }
    // Telemetry's charts appear where a run has telemetry; runs without it show as before.
    for chart in TELEMETRY.into_iter().filter(|_| by_concurrency) {
        if data.samples.iter().any(|s| s.metric(chart.2).is_some()) {
            attempts.push(telemetry(&data, chart));
        }
    }
    let mut charts = Vec::new();
    let mut left_out = Vec::new();
    for attempt in attempts {
        match attempt {
            Ok(chart) => charts.push(chart),
            Err(why) => left_out.push(why),
        }
    }
    (charts, left_out)
}

/// The telemetry charts against concurrency: kind, title, metric, unit.
const TELEMETRY: [(&str, &str, &str, &str); 3] = [
    (
        "power",
        "GPU power by concurrency (mean over the window, all GPUs)",
        "gpu_power_mean_w",
        "W",
    ),
    (
        "utilisation",
        "GPU utilisation by concurrency (mean over the window)",
        "gpu_util_mean_pct",
        "%",
    ),
    (
        "energy",
        "Energy per output token by concurrency",
        "joules_per_output_token",
        "J/token",
    ),
];

fn telemetry(
    data: &StepData,
    (kind, title, metric, unit): (&'static str, &str, &str, &str),
) -> Result<Chart, String> {
    let (series, gaps) = by_concurrency(data, metric, unit, "");
    needs_two_levels(&series, &format!("{kind} chart"))?;
    Ok(chart(
        kind,
        title,
        ("concurrency (log2 scale)", &format!("{metric} ({unit})")),
        Scale::Log2,
        (series, gaps),
    ))
}

/// A chart of non-negative y (every quantity the report charts) with no limits.
fn chart(
    kind: &'static str,
    title: &str,
    (x_label, y_label): (&str, &str),
    x_scale: Scale,
    (series, gaps): (Vec<ChartSeries>, Vec<Gap>),
) -> Chart {
    Chart {
        kind,
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        x_scale,
        series: with_markers(series),
        limits: Vec::new(),
        gaps,
        y_floor: Some(0.0),
    }
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

/// How series are drawn, the same in every chart of a report: a colour per host (in the
/// inventory's order, across the runs), a dash pattern per server variant or run (or both).
struct Looks {
    hosts: Vec<String>,
    dashes: Vec<String>,
}

impl Looks {
    fn of(runs: &[Run]) -> Looks {
        let mut looks = Looks {
            hosts: Vec::new(),
            dashes: Vec::new(),
        };
        for run in runs {
            for column in run.hosts() {
                let (host, dash) = names(runs, run, &column);
                for (list, name) in [(&mut looks.hosts, host), (&mut looks.dashes, dash)] {
                    if !list.contains(&name) {
                        list.push(name);
                    }
                }
            }
        }
        looks
    }

    /// The colour and dash pattern of a column of `run`.
    fn of_column(&self, runs: &[Run], run: &Run, column: &str) -> (Tag, Tag) {
        let (host, dash) = names(runs, run, column);
        let tag = |list: &[String], name: String| Tag {
            index: list.iter().position(|n| *n == name).unwrap_or(list.len()),
            name,
        };
        (tag(&self.hosts, host), tag(&self.dashes, dash))
    }
}

/// A column's host and what its dash pattern stands for: its variant, ` @<run>` when
/// several runs are charted, both, or nothing.
fn names(runs: &[Run], run: &Run, column: &str) -> (String, String) {
    let host = run
        .manifest
        .hosts
        .keys()
        .find(|h| {
            column
                .strip_prefix(h.as_str())
                .is_some_and(|v| v.is_empty() || v.starts_with('/'))
        })
        .map_or(column, String::as_str);
    let variant = column[host.len()..].trim_start_matches('/');
    let dash = format!("{variant}{}", run_suffix(runs, run));
    (host.to_string(), dash.trim().to_string())
}

/// A series' look: its colour and dash, and a marker standing for `marker` (numbered later).
fn look((color, dash): &(Tag, Tag), marker: &str) -> Look {
    Look {
        color: color.clone(),
        dash: dash.clone(),
        marker: Tag {
            index: 0,
            name: marker.to_string(),
        },
    }
}

/// The series with their marker shapes numbered in the order the names first appear.
fn with_markers(mut series: Vec<ChartSeries>) -> Vec<ChartSeries> {
    let mut names: Vec<String> = Vec::new();
    for s in &mut series {
        let name = &s.look.marker.name;
        s.look.marker.index = match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                names.push(name.clone());
                names.len() - 1
            }
        };
    }
    series.sort_by_key(|s| (s.look.color.index, s.look.dash.index, s.look.marker.index));
    series
}

fn samples<'a>(runs: &'a [Run], step_index: usize, step: &str, looks: &Looks) -> Vec<Measured<'a>> {
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
        let mut points: IndexMap<(String, StepPoint), IndexMap<u32, &Record>> = IndexMap::new();
        for record in valid {
            let key = record.key();
            let at = points.entry((record.column(), key.point)).or_default();
            at.insert(key.repetition, record);
        }
        samples.extend(points.into_iter().map(|((column, _), reps)| {
            let records: Vec<&Record> = reps.into_values().collect();
            Measured {
                series: format!("{}{suffix}", series_name(records[0])),
                host: format!("{column}{suffix}"),
                look: looks.of_column(runs, run, &column),
                concurrency: concurrency_of(records[0]),
                records,
            }
        }));
    }
    samples
}

/// Every point of the step (planned, or recorded) that a host of a run has no valid
/// measurement of, with why: skipped, failed, invalid, or not run.
fn unmeasured(runs: &[Run], step_index: usize, step: &str, looks: &Looks) -> Vec<Unmeasured> {
    let mut unmeasured = Vec::new();
    for run in runs {
        let suffix = run_suffix(runs, run);
        let planned = Planned::of(&run.manifest);
        let records: Vec<&Record> = run
            .records
            .iter()
            .filter(|r| r.step_index == step_index && r.step == step)
            .collect();
        let mut points: IndexMap<StepPoint, &Values> = planned
            .points(step_index, step)
            .map(|p| (StepPoint::of(step_index, p), p))
            .collect();
        for record in &records {
            points.entry(record.key().point).or_insert(&record.point);
        }
        for column in run.hosts() {
            for (point, values) in &points {
                let of_point: Vec<&Record> = records
                    .iter()
                    .copied()
                    .filter(|r| r.column() == column && r.key().point == *point)
                    .collect();
                let Some((status, why)) = why_unmeasured(&of_point, || {
                    let planned_point = planned.has(step_index, step, &point.label);
                    planned_point.then(|| planned.absent(run, &column, step_index, &point.label))
                }) else {
                    continue;
                };
                unmeasured.push(Unmeasured {
                    series: format!("{}{suffix}", series_of(&column, values)),
                    host: format!("{column}{suffix}"),
                    look: looks.of_column(runs, run, &column),
                    point: (*values).clone(),
                    status,
                    why,
                });
            }
        }
    }
    unmeasured
}

/// Why a point's records (every repetition) hold no valid measurement: the first skipped,
/// failed or invalid one's reason, or, with no record, what the table's cell says of it
/// (`absent`: not run, ran without a record, …); none when one is valid.
fn why_unmeasured(
    records: &[&Record],
    absent: impl FnOnce() -> Option<Cell>,
) -> Option<(&'static str, String)> {
    if records
        .iter()
        .any(|r| r.status == RecordStatus::Ok && invalid_reason(r).is_none())
    {
        return None;
    }
    let reason = |r: &Record| r.reason.clone().unwrap_or_default();
    let with = |status| records.iter().find(|r| r.status == status);
    if let Some(r) = with(RecordStatus::Skipped) {
        return Some(("skipped", reason(r)));
    }
    if let Some(r) = with(RecordStatus::Failed) {
        return Some(("failed", reason(r)));
    }
    if let Some(why) = records.iter().find_map(|r| invalid_reason(r)) {
        return Some(("invalid", why));
    }
    match records.is_empty() {
        true => absent().and_then(|cell| absent_status(&cell)),
        false => None,
    }
}

/// A chart's word and reason for a planned point without a record, as its table cell says it.
fn absent_status(cell: &Cell) -> Option<(&'static str, String)> {
    let (status, reason) = match cell {
        Cell::NotRun { reason } => ("not run", reason),
        Cell::NoRecord { reason } => ("ran, no record", reason),
        Cell::Skipped { reason } => ("skipped", reason),
        Cell::Failed { reason } => ("failed", reason),
        Cell::Lost { reason } => ("lost", reason),
        Cell::RecordLost { reason } => ("record lost", reason),
        _ => return None,
    };
    Some((status, reason.clone()))
}

/// What tells the runs apart in series names: nothing for one run, ` @<time>` for several.
fn run_suffix(runs: &[Run], run: &Run) -> String {
    match runs.len() {
        1 => String::new(),
        _ => format!(" @{}", run.label(runs)),
    }
}

/// Points of `y` against `x` per series; a later sample at the same x replaces an earlier one.
/// `name` gives a sample's series name and what its marker stands for. Also the samples that
/// gave no point, with their series name.
fn lines<'s>(
    samples: &'s [Measured],
    name: impl Fn(&Measured) -> (String, String),
    xy: impl Fn(&Measured) -> Option<ChartPoint>,
) -> (Vec<ChartSeries>, Vec<(&'s Measured<'s>, String)>) {
    let mut by_name: IndexMap<String, (Look, IndexMap<String, ChartPoint>)> = IndexMap::new();
    let mut without = Vec::new();
    for sample in samples {
        let (series, marker) = name(sample);
        let Some(point) = xy(sample) else {
            without.push((sample, series));
            continue;
        };
        let entry = by_name
            .entry(series)
            .or_insert_with(|| (look(&sample.look, &marker), IndexMap::new()));
        entry.1.insert(point.x.to_string(), point);
    }
    let series = by_name
        .into_iter()
        .map(|(name, (look, points))| ChartSeries {
            name,
            look,
            points: points.into_values().collect(),
        })
        .collect();
    (series, without)
}

/// The × of samples measured without `metric`, at the x `at` gives them when their series has
/// points on the chart; once in the legend for a series that has none.
fn without_metric(
    series: &[ChartSeries],
    without: &[(&Measured, String)],
    metric: &str,
    at: impl Fn(&Measured) -> Option<(f64, String)>,
) -> Vec<Gap> {
    let mut gaps: Vec<Gap> = Vec::new();
    for (sample, name) in without {
        let drawn = series.iter().any(|s| s.name == *name);
        let (x, point) = match at(sample).filter(|_| drawn) {
            Some((x, point)) => (Some(x), point),
            None if gaps.iter().any(|g| g.series == *name && g.x.is_none()) => continue,
            None => (None, String::new()),
        };
        gaps.push(Gap {
            series: name.clone(),
            look: look(&sample.look, ""),
            x,
            point,
            status: format!("no {metric}"),
            why: format!("its record has no {metric}"),
        });
    }
    gaps
}

/// A point, when both coordinates are numbers.
fn point(x: f64, y: f64, tooltip: String, label: Option<String>) -> Option<ChartPoint> {
    (x.is_finite() && y.is_finite()).then_some(ChartPoint {
        x,
        y,
        tooltip,
        label,
        error: None,
    })
}

/// Concurrency on x, `metric` on y, per series (`marker` tells them apart on a chart of several
/// metrics); a repeated point's error bar is its 95% interval. Also the × of the points not
/// measured, and of those measured without the metric.
fn by_concurrency(data: &StepData, metric: &str, unit: &str, marker: &str) -> (Vec<ChartSeries>, Vec<Gap>) {
    let suffix = match marker {
        "" => String::new(),
        m => format!(" {m}"),
    };
    let (series, without) = lines(
        &data.samples,
        |s| (format!("{}{suffix}", s.series), marker.to_string()),
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
    );
    let at = |s: &Measured| s.concurrency.map(|c| (c, format!("C={}", format_number(c))));
    let mut gaps = data.gaps_by_concurrency();
    gaps.extend(without_metric(&series, &without, metric, at));
    (series, gaps)
}

fn needs_two_levels(series: &[ChartSeries], what: &str) -> Result<(), String> {
    needs_two(series, what, "concurrency levels")
}

fn needs_two(series: &[ChartSeries], what: &str, levels: &str) -> Result<(), String> {
    match series.iter().any(|s| s.points.len() >= 2) {
        true => Ok(()),
        false => Err(format!(
            "{what}: no host has two {levels} measured, so there is no line to draw"
        )),
    }
}

fn throughput(data: &StepData) -> Result<Chart, String> {
    let lines = by_concurrency(data, "output_throughput", "output tok/s", "");
    needs_two_levels(&lines.0, "throughput chart")?;
    Ok(chart(
        "throughput",
        "Output throughput by concurrency",
        ("concurrency (log2 scale)", "output tok/s"),
        Scale::Log2,
        lines,
    ))
}

/// The TTFT chart, p50 and p99 told apart by their markers, with a line at each SLO limit on
/// the TTFT it draws (p50 or p99).
fn ttft(data: &StepData) -> Result<Chart, String> {
    let (mut series, mut gaps) = by_concurrency(data, "median_ttft_ms", "ms TTFT p50", "p50");
    let (mut p99, p99_gaps) = by_concurrency(data, "p99_ttft_ms", "ms TTFT p99", "p99");
    series.append(&mut p99);
    // The points not measured are marked once, by the p50's.
    gaps.extend(p99_gaps.into_iter().filter(|g| g.status.starts_with("no ")));
    if series.is_empty() {
        return Err("TTFT chart: the records have no median_ttft_ms or p99_ttft_ms (bench_throughput.py reports them with --stream)".into());
    }
    needs_two_levels(&series, "TTFT chart")?;
    let mut chart = chart(
        "ttft",
        "Time to first token by concurrency (p50 and p99)",
        ("concurrency (log2 scale)", "TTFT (ms)"),
        Scale::Log2,
        (series, gaps),
    );
    chart.limits = ttft_limits(data);
    Ok(chart)
}

/// A line at each SLO limit on TTFT (p50 or p99).
fn ttft_limits(data: &StepData) -> Vec<Limit> {
    data.slo
        .iter()
        .filter(|(metric, _)| ["median_ttft_ms", "p99_ttft_ms"].contains(metric))
        .map(|&(metric, y)| Limit {
            y,
            label: format!("SLO {metric} ≤ {}", format_number(y)),
        })
        .collect()
}

/// Per-request decode speed: 1000 / median TPOT when every sample has it, else output
/// throughput shared among the concurrent requests.
fn tradeoff(data: &StepData) -> Result<Chart, String> {
    let samples = &data.samples;
    let measured: Vec<&Measured> = samples
        .iter()
        .filter(|s| s.metric("output_throughput").is_some() && s.concurrency.is_some())
        .collect();
    let by_tpot = !measured.is_empty()
        && measured
            .iter()
            .all(|s| s.metric("median_tpot_ms").is_some_and(|t| t > 0.0));
    let (series, without) = lines(
        samples,
        |s| (s.series.clone(), String::new()),
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
    // Its x is a measurement: what was not measured has no place on it, only in the legend.
    let mut gaps = data.gaps_by_concurrency();
    for gap in &mut gaps {
        gap.x = None;
    }
    let metric = match by_tpot {
        true => "median_tpot_ms",
        false => "output_throughput",
    };
    gaps.extend(without_metric(&series, &without, metric, |_| None));
    let y_label = match by_tpot {
        true => "tok/s per request (1000 / median TPOT)",
        false => "tok/s per request (total ÷ concurrency)",
    };
    Ok(chart(
        "tradeoff",
        "Per-request speed against total throughput (the trade-off)",
        ("total output tok/s", y_label),
        Scale::Linear,
        (series, gaps),
    ))
}

/// TTFT against input length, per host (and concurrency, told apart by markers, when it
/// varies).
fn prefill(data: &StepData) -> Result<Chart, String> {
    let samples = &data.samples;
    let per_level = data.levels(|s| s.concurrency, Unmeasured::concurrency) > 1;
    let (series, without) = lines(
        samples,
        |s| host_series(&s.host, s.concurrency, per_level),
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
    let named = |len: f64| format!("input_len={}", format_number(len));
    let mut gaps = data.gaps(|u| {
        let (series, _) = host_series(&u.host, u.concurrency(), per_level);
        let len = u.input_len();
        (series, len, len.map_or_else(|| point::label(&u.point), named))
    });
    let at = |s: &Measured| s.input_len().map(|len| (len, named(len)));
    gaps.extend(without_metric(&series, &without, "median_ttft_ms", at));
    Ok(chart(
        "prefill",
        "Prefill time (median TTFT) by input length",
        ("input tokens", "TTFT (ms)"),
        Scale::Linear,
        (series, gaps),
    ))
}

/// A series per host, and per concurrency when it varies (the marker tells those apart): for
/// the charts whose x is an axis other than concurrency.
fn host_series(host: &str, concurrency: Option<f64>, per_level: bool) -> (String, String) {
    match (per_level, concurrency) {
        (true, Some(c)) => {
            let level = format!("C={}", format_number(c));
            (format!("{host} {level}"), level)
        }
        _ => (host.to_string(), String::new()),
    }
}

use super::rate_story::{DEPARTS, KEEPS_UP};

/// The offered request rate on x and what `y` says of each sample on y (the value and its
/// tooltip), a line per host (and concurrency, when it varies) named with `marker`, points in
/// rate order; also the × of the points not measured, and of those without `metric`.
fn by_rate(
    data: &StepData,
    (marker, metric): (&str, &str),
    y: impl Fn(&Measured, f64) -> Option<(f64, String)>,
) -> (Vec<ChartSeries>, Vec<Gap>) {
    let per_level = data.levels(|s| s.concurrency, Unmeasured::concurrency) > 1;
    let named = |(series, level): (String, String)| match marker {
        "" => (series, level),
        m => (format!("{series} {m}"), m.to_string()),
    };
    let (mut series, without) = lines(
        &data.samples,
        |s| named(host_series(&s.host, s.concurrency, per_level)),
        |s| {
            let rate = s.offered_rate()?;
            let (value, tip) = y(s, rate)?;
            point(rate, value, tip, None)
        },
    );
    for s in &mut series {
        s.points.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    let label = |rate: f64| format!("request_rate={}", format_number(rate));
    let mut gaps = data.gaps(|u| {
        let (name, _) = named(host_series(&u.host, u.concurrency(), per_level));
        let rate = u.offered_rate();
        (name, rate, rate.map_or_else(|| point::label(&u.point), label))
    });
    let at = |s: &Measured| s.offered_rate().map(|rate| (rate, label(rate)));
    gaps.extend(without_metric(&series, &without, metric, at));
    (series, gaps)
}

/// Requests served per second against the rate offered; on each line the first rate served
/// below [`KEEPS_UP`] of it is labelled: where the host falls behind.
fn served(data: &StepData) -> Result<Chart, String> {
    let (mut series, gaps) = by_rate(data, ("", "request_throughput"), |s, offered| {
        let served = s.metric("request_throughput")?;
        let share = 100.0 * served / offered;
        let tip = format!(
            "offered {} req/s: {} req/s served ({share:.0}%)",
            format_number(offered),
            format_number(served)
        );
        Some((served, tip))
    });
    needs_two(&series, "served-load chart", "request rates")?;
    for s in &mut series {
        if let Some(p) = s.points.iter_mut().find(|p| p.y < KEEPS_UP * p.x) {
            p.label = Some("falls behind".into());
            p.tooltip
                .push_str(" — falls behind: less than 95% of the offered rate served");
        }
    }
    Ok(chart(
        "served",
        "Requests served against requests offered per second",
        ("offered request rate (req/s)", "served (req/s)"),
        Scale::Linear,
        (series, gaps),
    ))
}

/// TTFT p50 and p99 against the rate offered, with the SLO's TTFT limits; on each p99 line the
/// first rate above [`DEPARTS`] times its value at the lowest rate is labelled: where latency
/// departs.
fn ttft_by_rate(data: &StepData) -> Result<Chart, String> {
    let ttft = |metric: &'static str, unit: &'static str| {
        move |s: &Measured, rate: f64| {
            let value = s.metric(metric)?;
            Some((value, tooltip("request_rate", rate, value, unit)))
        }
    };
    let p50 = ttft("median_ttft_ms", "ms TTFT p50");
    let (mut series, mut gaps) = by_rate(data, ("p50", "median_ttft_ms"), p50);
    let p99 = ttft("p99_ttft_ms", "ms TTFT p99");
    let (mut p99, p99_gaps) = by_rate(data, ("p99", "p99_ttft_ms"), p99);
    for s in &mut p99 {
        mark_departure(&mut s.points);
    }
    series.append(&mut p99);
    // The points not measured are marked once, by the p50's.
    gaps.extend(p99_gaps.into_iter().filter(|g| g.status.starts_with("no ")));
    needs_two(&series, "TTFT-by-rate chart", "request rates")?;
    let mut chart = chart(
        "ttft-rate",
        "Time to first token by offered request rate (p50 and p99)",
        ("offered request rate (req/s)", "TTFT (ms)"),
        Scale::Linear,
        (series, gaps),
    );
    chart.limits = ttft_limits(data);
    Ok(chart)
}

/// Labels the first point, in rate order, above [`DEPARTS`] times the first point's value.
fn mark_departure(points: &mut [ChartPoint]) {
    let Some(base) = points.first().map(|p| p.y).filter(|y| *y > 0.0) else {
        return;
    };
    if let Some(p) = points.iter_mut().find(|p| p.y > DEPARTS * base) {
        p.label = Some("latency departs".into());
        p.tooltip
            .push_str(" — latency departs: over twice its value at the lowest rate");
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    /// A demo run kept as a fixture: a6000 skips C=256 (its KV cache cannot hold it).
    fn fixture(name: &str) -> Run {
        let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs");
        Run::open(&runs.join(name)).unwrap()
    }

    const FIRST: &str = "20261201T102538Z-demo";
    const SECOND: &str = "20261201T102606Z-demo";

    #[test]
    fn a_skipped_point_is_marked_where_its_series_would_be() {
        let runs = [fixture(FIRST)];
        let (charts, left_out) = for_step(&runs, 3, "run-sweep");
        assert_eq!(
            left_out,
            Vec::<String>::new(),
            "one input length: no prefill sentence"
        );
        let kinds: Vec<&str> = charts.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, ["throughput", "ttft", "tradeoff"]);
        for chart in &charts {
            let gaps: Vec<(&str, &str, &str)> = chart
                .gaps
                .iter()
                .map(|g| (g.series.as_str(), g.point.as_str(), g.status.as_str()))
                .collect();
            assert_eq!(gaps, [("a6000", "C=256", "skipped")], "{}", chart.kind);
            let gap = &chart.gaps[0];
            assert!(
                gap.why
                    .starts_with("skipped: concurrency * (input_len + output_len)"),
                "{}",
                gap.why
            );
            // Against concurrency at 256; the trade-off's x is a measurement: the legend says it.
            let x = match chart.kind {
                "tradeoff" => None,
                _ => Some(256.0),
            };
            assert_eq!(gap.x, x, "{}", chart.kind);
            assert!(chart.y_floor == Some(0.0), "{}", chart.kind);
        }
    }

    #[test]
    fn colours_follow_the_hosts_and_dash_patterns_the_runs_in_every_chart() {
        let runs = [fixture(FIRST), fixture(SECOND)];
        let (charts, _) = for_step(&runs, 3, "run-sweep");
        assert_eq!(charts.len(), 3);
        for chart in &charts {
            assert_eq!(chart.series.len(), if chart.kind == "ttft" { 8 } else { 4 });
            for series in &chart.series {
                let host = series.name.split(' ').next().unwrap();
                let color = ["blackwell", "a6000"].iter().position(|h| *h == host).unwrap();
                let dash = match series.name.contains("@20261201T102538Z") {
                    true => (0, "@20261201T102538Z"),
                    false => (1, "@20261201T102606Z"),
                };
                let look = &series.look;
                assert_eq!(
                    (look.color.index, look.color.name.as_str()),
                    (color, host),
                    "{}",
                    series.name
                );
                assert_eq!(
                    (look.dash.index, look.dash.name.as_str()),
                    dash,
                    "{}",
                    series.name
                );
            }
        }
        let ttft = &charts[1];
        let markers: Vec<(usize, &str)> = ttft
            .series
            .iter()
            .map(|s| (s.look.marker.index, s.look.marker.name.as_str()))
            .collect();
        assert_eq!(markers[..2], [(0, "p50"), (1, "p99")], "{markers:?}");
        // Skipped in both runs: marked once per run.
        let gaps: Vec<&str> = charts[0].gaps.iter().map(|g| g.series.as_str()).collect();
        assert_eq!(gaps, ["a6000 @20261201T102538Z", "a6000 @20261201T102606Z"]);
    }

    #[test]
    fn a_step_not_meant_for_a_chart_gets_no_sentence_about_charts() {
        // A server variant's startup: a record per column, no axis, as `server:` writes them.
        let mut run = fixture(FIRST);
        run.records = ["blackwell", "a6000"]
            .map(|host| Record {
                step: "server startup".into(),
                step_index: 2,
                ..crate::testutil::record(host, &[], json!({"ready_seconds": 0.25}), RecordStatus::Ok)
            })
            .into();
        let (charts, left_out) = for_step(&[run], 2, "server startup");
        assert!(charts.is_empty());
        assert_eq!(left_out, Vec::<String>::new());
    }

    #[test]
    fn a_sweep_with_one_level_measured_says_why_it_has_no_chart() {
        let mut run = fixture(FIRST);
        for record in run.records.iter_mut() {
            if record.step_index == 3 && record.point["concurrency"] != json!(1) {
                record.status = RecordStatus::Failed;
                record.reason = Some("exit code 1".into());
            }
        }
        let (charts, left_out) = for_step(&[run], 3, "run-sweep");
        assert!(charts.is_empty());
        assert!(
            left_out.contains(
                &"throughput chart: no host has two concurrency levels measured, so there is no line to draw"
                    .to_string()
            ),
            "{left_out:?}"
        );
    }
}
