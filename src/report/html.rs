//! `rigrun report`: one self-contained HTML file that works offline — inline CSS, inline SVG
//! charts, no script, and a Content-Security-Policy that forbids loading anything, so a page
//! that tried would say so in the browser's console. It holds what differs between the hosts
//! (and runs) compared, the capacity of each host under the SLO, the hosts' facts, then per step
//! the charts, the hosts side by side (and across runs), the scaling story, and the references.
//! The page is the template `report.html.jinja`, filled from the report model; every value it
//! shows is escaped unless the template marks it safe (the CSS, the SVG charts).

use anyhow::Result;
use minijinja::value::Serde;
use minijinja::{Environment, Error, Output, State, Value};
use serde::Serialize;

use super::cell::Cell;
use super::facts_diff::FactsDiff;
use super::header::{Header, HostHeader, RunFacts};
use super::model::{Grid, Report, RunSummary, Section, Topic};
use super::svg::escape;
use super::Verdict;
use crate::point::value_text;

/// The page, written on many lines for reading; see [`one_line`].
const TEMPLATE: &str = include_str!("report.html.jinja");

const STYLE: &str = r#"
:root { color-scheme: light; --muted: #5b6270; --line: #d9dde3; --bad: #b3261e; --good: #1e7b34; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
  margin: 0 auto; max-width: 1180px; padding: 24px; color: #1b1f24; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 6px; }
.muted, .note { color: var(--muted); } .note { font-size: 13px; margin: 2px 0; }
.hosts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(340px, 100%), 1fr)); gap: 12px; }
.host { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.host h4 { margin: 0 0 4px; font-size: 15px; } .host dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 6px 0; }
.host dt { color: var(--muted); } .host dd { margin: 0; overflow-wrap: anywhere; }
pre { font-size: 12px; overflow-x: auto; background: #f6f8fa; padding: 8px; border-radius: 6px; }
/* A table wider than the page scrolls sideways in its own box rather than past the page's edge. */
.table-box { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 3px 9px; } th { background: #f6f8fa; }
td.num { text-align: right; } td.skipped, td.missing, td.unknown { color: var(--muted); }
td.failed, td.invalid, td.missed, td.regression { color: var(--bad); font-weight: 600; }
p.unfinished { color: var(--bad); font-weight: 600; }
td.improvement, td.met { color: var(--good); }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(520px, 100%), 1fr)); gap: 16px; }
svg.chart { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 8px; background: #fff; }
svg .title { font-size: 15px; font-weight: 600; fill: #1b1f24; }
svg .tick, svg .legend, svg .point { font-size: 11px; fill: #3d434c; } svg .label { font-size: 12px; fill: #3d434c; }
svg .grid { stroke: #eceef1; } svg .axis { stroke: #8a919c; }
ul.scaling { margin: 4px 0; padding-left: 20px; }
"#;

/// The report as one HTML document.
pub fn render(report: &Report) -> Result<String> {
    let mut env = Environment::new();
    env.set_formatter(escaping);
    let mut html = env.render_str(&one_line(TEMPLATE), Value::from(Serde(Page::of(report))))?;
    html.push('\n');
    Ok(html)
}

/// The template's lines, trimmed and joined: the page is written as one line, so no text of the
/// template's layout (indentation, line breaks) reaches it.
fn one_line(template: &str) -> String {
    template.lines().map(str::trim).collect()
}

/// Writes every value the template shows escaped for HTML (`&`, `<`, `>`, `"`), unless marked
/// safe.
fn escaping(out: &mut Output, _: &mut State, value: &Value) -> Result<(), Error> {
    let text = match value.is_safe() {
        true => value.to_string(),
        false => escape(&value.to_string()),
    };
    out.write_str(&text).map_err(Error::from)
}

/// What the template shows, as text.
#[derive(Serialize)]
struct Page<'a> {
    title: String,
    style: &'static str,
    version: &'static str,
    runs: Vec<RunLine<'a>>,
    facts_diff: Vec<DiffView<'a>>,
    /// Per sweep table with latency limits: its title, the headline and the breaches.
    slo: Vec<(&'a str, String, Vec<String>)>,
    hosts: Vec<HostsOfRun<'a>>,
    sections: Vec<SectionView<'a>>,
}

impl Page<'_> {
    fn of(report: &Report) -> Page<'_> {
        let ids: Vec<&str> = report.runs.iter().map(|r| r.run_id.as_str()).collect();
        Page {
            title: format!("rigrun report: {}", ids.join(", ")),
            style: STYLE,
            version: env!("CARGO_PKG_VERSION"),
            runs: report.runs.iter().map(RunLine::of).collect(),
            facts_diff: report.facts_diff.iter().map(DiffView::of).collect(),
            slo: report
                .capacities()
                .map(|(grid, slo)| (grid.title.as_str(), slo.headline(), slo.breaches()))
                .collect(),
            hosts: hosts(&report.header),
            sections: report.sections.iter().map(SectionView::of).collect(),
        }
    }
}

/// A run in the page's introduction.
#[derive(Serialize)]
struct RunLine<'a> {
    id: &'a str,
    playbook: &'a str,
    path: &'a str,
    label: Option<&'a str>,
    started: String,
    status: String,
    notice: Option<&'a str>,
    attempts: Option<&'a str>,
}

impl RunLine<'_> {
    fn of(run: &RunSummary) -> RunLine<'_> {
        RunLine {
            id: &run.run_id,
            playbook: &run.playbook_name,
            path: &run.playbook_path,
            label: run.label.as_deref(),
            started: run.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            status: format!("{:?}", run.status).to_lowercase(),
            notice: run.notice.as_deref(),
            attempts: run.attempts.as_deref(),
        }
    }
}

/// One comparison's differing facts as a table (a row per fact, a column per host or run) and
/// the line naming the facts that are the same.
#[derive(Serialize)]
struct DiffView<'a> {
    subject: &'a str,
    columns: &'a [String],
    rows: Vec<(&'a str, Vec<&'a str>)>,
    same: String,
}

impl DiffView<'_> {
    fn of(diff: &FactsDiff) -> DiffView<'_> {
        DiffView {
            subject: &diff.subject,
            columns: &diff.columns,
            rows: diff
                .differ
                .iter()
                .map(|f| (f.name.as_str(), f.texts().collect()))
                .collect(),
            same: diff.same_line(),
        }
    }
}

/// A card per host and run: labels, facts, topology and launch arguments.
#[derive(Serialize)]
struct HostsOfRun<'a> {
    run_id: &'a str,
    hosts: Vec<Card<'a>>,
}

#[derive(Serialize)]
struct Card<'a> {
    host: &'a str,
    labels: &'a str,
    lines: &'a [(String, String)],
    topology: Option<&'a str>,
    launch_args: Option<Vec<(&'a str, String)>>,
}

fn hosts(header: &Header) -> Vec<HostsOfRun<'_>> {
    header.runs.iter().map(HostsOfRun::of).collect()
}

impl HostsOfRun<'_> {
    fn of(run: &RunFacts) -> HostsOfRun<'_> {
        HostsOfRun {
            run_id: &run.run_id,
            hosts: run.hosts.iter().map(card).collect(),
        }
    }
}

fn card(host: &HostHeader) -> Card<'_> {
    Card {
        host: &host.host,
        labels: &host.labels,
        lines: &host.lines,
        topology: host.topology.as_deref(),
        launch_args: host
            .launch_args
            .as_ref()
            .map(|args| args.iter().map(|(k, v)| (k.as_str(), value_text(v))).collect()),
    }
}

/// A step's charts (and why any was left out) and tables, or the references' tables.
#[derive(Serialize)]
struct SectionView<'a> {
    /// The step's number (from 1); none for the references.
    step: Option<usize>,
    name: &'a str,
    charts: Vec<String>,
    charts_left_out: &'a [String],
    tables: Vec<TableView<'a>>,
}

impl SectionView<'_> {
    fn of(section: &Section) -> SectionView<'_> {
        let (step, name) = match &section.topic {
            Topic::Step { index, name } => (Some(index + 1), name.as_str()),
            Topic::References => (None, "References"),
        };
        SectionView {
            step,
            name,
            charts: section.charts.iter().map(|c| c.render()).collect(),
            charts_left_out: &section.charts_left_out,
            tables: section.grids.iter().map(TableView::of).collect(),
        }
    }
}

/// A grid as an HTML table: each cell with its CSS class and text, its notes and scaling story.
#[derive(Serialize)]
struct TableView<'a> {
    title: &'a str,
    metric: &'a str,
    columns: &'a [String],
    rows: Vec<Vec<(&'static str, String)>>,
    notes: Vec<String>,
    /// The story's heading, then a line per series.
    /// What the sweep tells (scaling, rates): per story a heading and its lines.
    stories: Vec<Vec<String>>,
}

impl TableView<'_> {
    fn of(grid: &Grid) -> TableView<'_> {
        let (texts, notes) = grid.with_notes();
        let rows = grid
            .rows
            .iter()
            .zip(texts)
            .map(|(row, texts)| row.cells.iter().map(class).zip(texts).collect())
            .collect();
        TableView {
            title: &grid.title,
            metric: &grid.metric,
            columns: &grid.columns,
            rows,
            notes,
            stories: grid.stories(),
        }
    }
}

/// The CSS class of a cell: what it is and, for judged cells, the verdict.
fn class(cell: &Cell) -> &'static str {
    match cell {
        Cell::Value {
            reference: Some(r), ..
        } if !r.met => "num missed",
        Cell::Value {
            reference: Some(_), ..
        } => "num met",
        Cell::Value { .. } => "num",
        Cell::Change {
            verdict: Some(Verdict::Regression),
            ..
        } => "num regression",
        Cell::Change {
            verdict: Some(Verdict::Improvement),
            ..
        } => "num improvement",
        Cell::Ratio { .. } | Cell::Change { .. } => "num",
        Cell::Invalid { .. } => "invalid",
        Cell::Skipped { .. } => "skipped",
        Cell::Failed { .. } => "failed",
        Cell::Lost { .. } => "lost",
        Cell::RecordLost { .. } => "missing",
        Cell::NotRun { .. } => "notrun",
        Cell::NoRecord { .. } => "norecord",
        Cell::Unknown { .. } => "unknown",
        Cell::Missing => "missing",
        Cell::Check { met: false } => "missed",
        Cell::Check { met: true } => "met",
        Cell::Label { .. } => "label",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{Row, Section};

    #[test]
    fn the_page_is_one_line_and_escapes_what_it_shows() {
        let grid = Grid {
            title: "a <b> & \"c\" / d's".into(),
            metric: "m".into(),
            columns: vec!["point".into(), "verdict".into()],
            rows: vec![Row {
                point: Default::default(),
                cells: vec![Cell::Label { text: "x".into() }, Cell::Check { met: false }],
            }],
            scaling: Vec::new(),
            rates: Vec::new(),
            slo: None,
        };
        let report = Report {
            runs: Vec::new(),
            facts_diff: vec![FactsDiff::new(
                "hosts of run <r>".into(),
                vec![
                    ("a".into(), vec![("GPU".into(), "<A6000>".into())]),
                    ("b".into(), vec![]),
                ],
            )],
            header: Header { runs: Vec::new() },
            sections: vec![Section::tables(Topic::References, vec![grid])],
        };
        let html = render(&report).unwrap();
        assert!(
            html.contains("<h3>a &lt;b&gt; &amp; &quot;c&quot; / d's — <code>m</code></h3>"),
            "{html}"
        );
        assert!(
            html.contains(r#"<td class="label">x</td><td class="missed">MISSED</td>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<section id="references"><h2>References</h2><h3>"#),
            "{html}"
        );
        assert!(
            html.contains(concat!(
                r#"<section id="what-differs"><h2>What differs</h2><h3>hosts of run &lt;r&gt;</h3>"#,
                r#"<div class="table-box"><table><thead><tr><th>fact</th><th>a</th><th>b</th></tr></thead><tbody>"#,
                r#"<tr><th>GPU</th><td>&lt;A6000&gt;</td><td>—</td></tr></tbody></table></div>"#,
                r#"<p class="note">no fact the same</p></section>"#,
            )),
            "{html}"
        );
        let (head, rest) = html.split_once(STYLE).unwrap();
        assert!(
            !head.contains('\n') && rest.find('\n') == Some(rest.len() - 1),
            "one line but the CSS"
        );
    }
}
