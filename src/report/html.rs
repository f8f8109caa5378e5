//! `rigrun report`: one self-contained HTML file that works offline — inline CSS, inline SVG
//! charts, no script, and a Content-Security-Policy that forbids loading anything, so a page
//! that tried would say so in the browser's console. It holds the hosts' facts, then per step
//! the charts, the hosts side by side (and across runs), the scaling story, and the references.

use std::fmt::Write as _;

use super::cell::Cell;
use super::header::{Header, HostFacts};
use super::model::{Grid, Report, RunSummary, Section, Topic};
use super::scaling;
use super::svg::escape;
use super::Verdict;
use crate::point::value_text;

const STYLE: &str = r#"
:root { color-scheme: light; --muted: #5b6270; --line: #d9dde3; --bad: #b3261e; --good: #1e7b34; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
  margin: 0 auto; max-width: 1180px; padding: 24px; color: #1b1f24; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 36px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 6px; }
.muted, .note { color: var(--muted); } .note { font-size: 13px; margin: 2px 0; }
.hosts { display: grid; grid-template-columns: repeat(auto-fill, minmax(340px, 1fr)); gap: 12px; }
.host { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.host h4 { margin: 0 0 4px; font-size: 15px; } .host dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin: 6px 0; }
.host dt { color: var(--muted); } .host dd { margin: 0; }
pre { font-size: 12px; overflow-x: auto; background: #f6f8fa; padding: 8px; border-radius: 6px; }
table { border-collapse: collapse; margin: 6px 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 3px 9px; } th { background: #f6f8fa; }
td.num { text-align: right; } td.skipped, td.missing { color: var(--muted); }
td.failed, td.invalid, td.missed, td.regression { color: var(--bad); font-weight: 600; }
td.improvement, td.met { color: var(--good); }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
svg.chart { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 8px; background: #fff; }
svg .title { font-size: 15px; font-weight: 600; fill: #1b1f24; }
svg .tick, svg .legend, svg .point { font-size: 11px; fill: #3d434c; } svg .label { font-size: 12px; fill: #3d434c; }
svg .grid { stroke: #eceef1; } svg .axis { stroke: #8a919c; }
ul.scaling { margin: 4px 0; padding-left: 20px; }
"#;

/// The report as one HTML document.
pub fn render(report: &Report) -> String {
    let mut html = String::new();
    let ids: Vec<&str> = report.runs.iter().map(|r| r.run_id.as_str()).collect();
    let title = format!("rigrun report: {}", ids.join(", "));
    let _ = write!(
        html,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'"><title>{}</title><style>{STYLE}</style></head><body>"#,
        escape(&title)
    );
    intro(&mut html, &report.runs);
    hosts(&mut html, &report.header);
    for section in &report.sections {
        self::section(&mut html, section);
    }
    html.push_str("</body></html>\n");
    html
}

fn intro(html: &mut String, runs: &[RunSummary]) {
    html.push_str("<header><h1>rigrun report</h1>");
    for run in runs {
        let _ = write!(
            html,
            r#"<p class="muted">run <b>{}</b> · playbook {} ({}) · started {} · status {}</p>"#,
            escape(&run.run_id),
            escape(&run.playbook_name),
            escape(&run.playbook_path),
            run.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
            escape(&format!("{:?}", run.status).to_lowercase())
        );
    }
    let _ = write!(
        html,
        r#"<p class="muted">written by rigrun {} — one file, no network needed</p></header>"#,
        env!("CARGO_PKG_VERSION")
    );
}

/// A card per host and run: labels, facts, topology and launch arguments.
fn hosts(html: &mut String, header: &Header) {
    html.push_str(r#"<section id="hosts"><h2>Hosts</h2>"#);
    for run in &header.runs {
        if header.runs.len() > 1 {
            let _ = write!(html, "<h3>run {}</h3>", escape(&run.run_id));
        }
        html.push_str(r#"<div class="hosts">"#);
        for host in &run.hosts {
            host_card(html, host);
        }
        html.push_str("</div>");
    }
    html.push_str("</section>");
}

fn host_card(html: &mut String, host: &HostFacts) {
    let _ = write!(
        html,
        r#"<div class="host" data-host="{0}"><h4>{0}</h4>"#,
        escape(&host.host)
    );
    if !host.labels.is_empty() {
        let _ = write!(html, r#"<div class="muted">{}</div>"#, escape(&host.labels));
    }
    html.push_str("<dl>");
    for (what, summary) in &host.lines {
        let _ = write!(html, "<dt>{}</dt><dd>{}</dd>", escape(what), escape(summary));
    }
    html.push_str("</dl>");
    if let Some(topology) = &host.topology {
        let _ = write!(
            html,
            "<details><summary>GPU topology (nvidia-smi topo -m)</summary><pre>{}</pre></details>",
            escape(topology)
        );
    }
    if let Some(args) = &host.launch_args {
        html.push_str("<details><summary>server launch arguments</summary><table>");
        for (k, v) in args {
            let _ = write!(
                html,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(k),
                escape(&value_text(v))
            );
        }
        html.push_str("</table></details>");
    }
    html.push_str("</div>");
}

/// A step's charts (and why any was left out) and tables, or the references' tables.
fn section(html: &mut String, section: &Section) {
    match &section.topic {
        Topic::Step { index, name } => {
            let _ = write!(
                html,
                r#"<section class="step" id="step-{}"><h2>Step {}: {}</h2>"#,
                index + 1,
                index + 1,
                escape(name)
            );
            html.push_str(r#"<div class="charts">"#);
            for chart in &section.charts {
                html.push_str(&chart.render());
            }
            html.push_str("</div>");
            for why in &section.charts_left_out {
                let _ = write!(html, r#"<p class="note">{}</p>"#, escape(why));
            }
        }
        Topic::References => html.push_str(r#"<section id="references"><h2>References</h2>"#),
    }
    for grid in &section.grids {
        table(html, grid);
    }
    html.push_str("</section>");
}

/// A grid as an HTML table, each cell classed by what it is, with its notes and scaling story.
fn table(html: &mut String, grid: &Grid) {
    let _ = write!(
        html,
        "<h3>{} — <code>{}</code></h3><table><thead><tr>",
        escape(&grid.title),
        escape(&grid.metric)
    );
    for column in &grid.columns {
        let _ = write!(html, "<th>{}</th>", escape(column));
    }
    html.push_str("</tr></thead><tbody>");
    let (rows, notes) = grid.with_notes();
    for (cells, texts) in grid.rows.iter().zip(rows) {
        html.push_str("<tr>");
        for (cell, text) in cells.iter().zip(texts) {
            let _ = write!(html, r#"<td class="{}">{}</td>"#, class(cell), escape(&text));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody></table>");
    let story = scaling::describe(&grid.scaling);
    for note in &notes {
        let _ = write!(html, r#"<p class="note">{}</p>"#, escape(note));
    }
    if let Some((intro, lines)) = story.split_first() {
        let _ = write!(
            html,
            r#"<p class="scaling-title">{}</p><ul class="scaling">"#,
            escape(intro)
        );
        for line in lines {
            let _ = write!(html, "<li>{}</li>", escape(line));
        }
        html.push_str("</ul>");
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
        Cell::Missing => "missing",
        Cell::Check { met: false } => "missed",
        Cell::Check { met: true } => "met",
        Cell::Label { .. } => "label",
    }
}
