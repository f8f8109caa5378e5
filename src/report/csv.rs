//! CSV for spreadsheets and notebooks: the runs' notices, what differs between the hosts or runs
//! compared, the SLO capacities, then one line per cell (long format), numbers unformatted, the
//! rate story (`metric` = `rate`: the rate served at each offered rate, where the host falls
//! behind, where its latency departs, the highest rate within the limits) and the scaling story,
//! one line per step, knee and limit.

use super::capacity::SloCapacity;
use super::facts_diff::FactsDiff;
use super::model::Report;
use super::rate_story::RateStory;
use super::scaling::ScalingStory;
use super::Cell;

const COLUMNS: [&str; 7] = ["table", "metric", "row", "column", "value", "status", "reason"];

type Writer = ::csv::Writer<Vec<u8>>;

pub fn render(report: &Report) -> String {
    let mut writer = ::csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(COLUMNS);
    for (run, notice) in report.notices() {
        let status = format!("{:?}", run.status).to_lowercase();
        let table = format!("run {}", run.run_id);
        let _ = writer.write_record([table.as_str(), "status", "", "", "", &status, notice]);
    }
    write_facts(&mut writer, &report.facts_diff);
    for (grid, slo) in report.capacities() {
        write_slo(&mut writer, &grid.title, slo);
    }
    for grid in report.grids() {
        for row in &grid.rows {
            let label = row.cells.first().map(Cell::text).unwrap_or_default();
            for (column, cell) in grid.columns.iter().zip(&row.cells).skip(1) {
                let (value, status, reason) = fields(cell);
                let _ =
                    writer.write_record([&grid.title, &grid.metric, &label, column, &value, status, &reason]);
                if let Some((hw, about)) = interval(cell) {
                    let _ =
                        writer.write_record([&grid.title, &grid.metric, &label, column, &hw, "ci95", &about]);
                }
            }
        }
        for story in &grid.rates {
            for [column, value, status] in rate_lines(story) {
                let row = [&grid.title, "rate", &story.name, &column, &value, &status, ""];
                let _ = writer.write_record(row);
            }
        }
        for series in &grid.scaling {
            for [column, value, status, reason] in scaling_lines(series) {
                let _ = writer.write_record([
                    &grid.title,
                    &series.metric,
                    &series.name,
                    &column,
                    &value,
                    &status,
                    &reason,
                ]);
            }
        }
    }
    finish(writer)
}

/// `compare --facts`: the column names, then only what differs.
pub fn render_facts(diffs: &[FactsDiff]) -> String {
    let mut writer = ::csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(COLUMNS);
    write_facts(&mut writer, diffs);
    finish(writer)
}

fn finish(writer: Writer) -> String {
    String::from_utf8(writer.into_inner().unwrap_or_default()).unwrap_or_default()
}

/// What differs, in the notices' layout: `table` names the comparison (`facts: hosts of run
/// X`), `metric` is `fact`; a line per differing fact and column (`row` the fact, `column` the
/// host or run, status `differs`, or `not recorded` without a value), then a line per fact that
/// is the same everywhere (status `same`, no column, no value).
fn write_facts(writer: &mut Writer, diffs: &[FactsDiff]) {
    for diff in diffs {
        let table = format!("facts: {}", diff.subject);
        for fact in &diff.differ {
            for (column, value) in diff.columns.iter().zip(&fact.values) {
                let (value, status) = match value {
                    Some(v) => (v.as_str(), "differs"),
                    None => ("", "not recorded"),
                };
                let _ = writer.write_record([&table, "fact", &fact.name, column, value, status, ""]);
            }
        }
        for name in &diff.same {
            let _ = writer.write_record([table.as_str(), "fact", name, "", "", "same", ""]);
        }
    }
}

/// The SLO capacity of a table, before the cells, in the notices' layout: `table` is the
/// table's title, `metric` is `slo`; a line per limit (`row` the limited metric, column
/// `limit`), then per series (`row` its name): column `within slo` (the capacity's concurrency,
/// status `within slo`, or `none within slo` without a value), the table's metric there (status
/// `ok`), the ratio to the baseline (status `x`), and `breach` (the first level above that
/// breaks a limit; status the limit's metric, or `not measured`; reason why). A capacity search
/// adds per column and series (`row`, as `host` or `host (axes)`): `search met` and `search
/// missed` (the highest candidate of its axis that met the limits, the lowest that did not;
/// status `exact` or `bracket`), and `search probes` (reason: of how many candidates).
fn write_slo(writer: &mut Writer, table: &str, slo: &SloCapacity) {
    for (metric, limit) in &slo.limits.limits {
        let _ = writer.write_record([table, "slo", metric, "limit", &limit.to_string(), "limit", ""]);
    }
    for s in &slo.series {
        let mut line = |column: &str, value: String, status: &str, reason: &str| {
            let _ = writer.write_record([table, "slo", &s.name, column, &value, status, reason]);
        };
        match &s.within {
            Some(w) => {
                line("within slo", w.concurrency.to_string(), "within slo", "");
                let value = w.value.map(|v| v.to_string()).unwrap_or_default();
                let status = if w.value.is_some() { "ok" } else { "missing" };
                line(&slo.metric, value, status, "");
            }
            None => line("within slo", String::new(), "none within slo", ""),
        }
        if let (Some(r), Some(base)) = (s.ratio, &slo.baseline) {
            line(&format!("{} / {base}", slo.metric), format!("{r:.4}"), "x", "");
        }
        if let Some(b) = &s.breach {
            let status = b.metric.as_deref().unwrap_or("not measured");
            line("breach", b.concurrency.to_string(), status, &b.reason);
        }
    }
    for f in slo.search.iter().flat_map(|s| &s.found) {
        let name = f.name();
        let status = if f.exact { "exact" } else { "bracket" };
        let text =
            |v: &Option<serde_json::Value>| v.as_ref().map(crate::point::value_text).unwrap_or_default();
        let candidates = format!("of {} candidates", f.candidates);
        for (column, value, status, reason) in [
            ("search met", text(&f.met), status, ""),
            ("search missed", text(&f.missed), status, ""),
            (
                "search probes",
                f.probes.to_string(),
                "probes",
                candidates.as_str(),
            ),
        ] {
            let _ = writer.write_record([table, "slo", &name, column, &value, status, reason]);
        }
    }
}

/// A repeated point's interval, as a line of its own after its value: the half-width of the
/// 95% confidence interval (status `ci95`), and its repetitions and coefficient of variation.
fn interval(cell: &Cell) -> Option<(String, String)> {
    let Cell::Value { spread: Some(s), .. } = cell else {
        return None;
    };
    let hw = s.ci95?;
    let cv = s.cv.map(|cv| format!("; cv {cv:.4}")).unwrap_or_default();
    Some((hw.to_string(), format!("n {}{cv}", s.n)))
}

/// (value, status, reason) of a cell.
fn fields(cell: &Cell) -> (String, &'static str, String) {
    match cell {
        Cell::Value {
            value,
            reference,
            spread,
        } => {
            let mut reasons: Vec<String> = Vec::new();
            if let Some(s) = spread {
                reasons.push(format!("mean of {} repetitions", s.n));
                reasons.extend(s.explain());
            }
            reasons.extend(reference.as_ref().map(|r| match r.met {
                true => format!("reference {}: met", r.expected),
                false => r.explain(*value),
            }));
            (value.to_string(), "ok", reasons.join("; "))
        }
        Cell::Ratio { value, interval } => (
            format!("{value:.4}"),
            "x",
            interval
                .map(|(low, high)| format!("95% interval {low:.4}–{high:.4}"))
                .unwrap_or_default(),
        ),
        Cell::Change {
            percent,
            verdict,
            test,
            workload,
        } => {
            let verdict = verdict.map(|v| v.as_str().to_string());
            let test = test.map(|w| format!("Welch's t-test p = {:.4}", w.p_value));
            let other = workload.as_ref().map(|w| format!("other workload: {w}"));
            let reason: Vec<String> = verdict.into_iter().chain(test).chain(other).collect();
            (format!("{percent:.4}"), "%", reason.join("; "))
        }
        Cell::Invalid { value, reason } => (
            value.map(|v| v.to_string()).unwrap_or_default(),
            "invalid",
            reason.clone(),
        ),
        Cell::Skipped { reason } => (String::new(), "skipped", reason.clone()),
        Cell::Failed { reason } => (String::new(), "failed", reason.clone()),
        Cell::Lost { reason } => (String::new(), "lost", reason.clone()),
        Cell::RecordLost { reason } => (String::new(), "record lost", reason.clone()),
        Cell::NotRun { reason } => (String::new(), "not run", reason.clone()),
        Cell::NoRecord { reason } => (String::new(), "ran, no record", reason.clone()),
        Cell::Unknown { reason } => (String::new(), "unknown", reason.clone()),
        Cell::Missing => (String::new(), "missing", String::new()),
        Cell::Label { .. } | Cell::Check { .. } => (cell.text(), "label", String::new()),
    }
}

/// [column, value, status] lines of one rate story: per offered rate (`offered 8`) the rate
/// served (status `served`), then `falls behind`, `latency departs` and `within slo` with their
/// rate (empty when there is none).
fn rate_lines(story: &RateStory) -> Vec<[String; 3]> {
    let text = |rate: Option<f64>| rate.map(|r| r.to_string()).unwrap_or_default();
    let mut lines: Vec<[String; 3]> = story
        .levels
        .iter()
        .map(|l| [format!("offered {}", l.offered), text(l.served), "served".into()])
        .collect();
    lines.push([
        "falls behind".into(),
        text(story.falls_behind),
        "falls behind".into(),
    ]);
    lines.push([
        "latency departs".into(),
        text(story.latency_departs),
        "latency departs".into(),
    ]);
    if let Some(within) = &story.within_slo {
        lines.push(["within slo".into(), text(within.rate), "within slo".into()]);
    }
    lines
}

/// [column, value, status, reason] lines of one scaling story: the efficiency of each step
/// (`C=1→4`), then `knee` and `limit` with their concurrency.
fn scaling_lines(series: &ScalingStory) -> Vec<[String; 4]> {
    let mut lines: Vec<[String; 4]> = series
        .steps
        .iter()
        .map(|s| {
            [
                format!("C={}→{}", s.from, s.to),
                format!("{:.4}", s.efficiency),
                "efficiency".into(),
                format!(
                    "gain ×{:.4}, {:+.2}% per doubling",
                    s.gain,
                    s.per_doubling * 100.0
                ),
            ]
        })
        .collect();
    if let Some(k) = &series.knee {
        lines.push([
            "knee".into(),
            k.concurrency.to_string(),
            "knee".into(),
            format!(
                "{:+.2}% per doubling beyond, at {}",
                k.per_doubling * 100.0,
                k.throughput
            ),
        ]);
    }
    if let Some(l) = &series.limit {
        lines.push([
            "limit".into(),
            l.concurrency.to_string(),
            l.status.clone(),
            l.reason.clone(),
        ]);
    }
    lines
}
