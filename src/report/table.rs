//! Tables for a terminal.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::facts_diff::FactsDiff;
use super::model::Report;

/// The notices, what differs between the hosts or runs compared, the hosts' facts, the SLO
/// capacities, then each table with its notes and scaling story under it.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for (_, notice) in report.notices() {
        out.push_str(&format!("note: {notice}\n"));
    }
    if report.notices().next().is_some() {
        out.push('\n');
    }
    out.push_str(&facts_diff(&report.facts_diff));
    let lines = report.header.lines();
    if !lines.is_empty() {
        out.push_str(&lines.join("\n"));
        out.push_str("\n\n");
    }
    out.push_str(&capacities(report));
    for grid in report.grids() {
        out.push_str(&format!("{} — {}\n", grid.title, grid.metric));
        let mut builder = Builder::default();
        builder.push_record(grid.columns.iter().cloned());
        let (rows, notes) = grid.with_notes();
        for row in rows {
            builder.push_record(row);
        }
        let mut table = builder.build();
        table.with(Style::rounded());
        table.modify(Columns::new(1..), Alignment::right());
        out.push_str(&table.to_string());
        out.push('\n');
        for note in notes.iter().chain(&super::scaling::describe(&grid.scaling)) {
            out.push_str(&format!("  {note}\n"));
        }
        out.push('\n');
    }
    out
}

/// The SLO headline: per sweep table with limits, `<title> — within SLO (…): …` and, indented,
/// the first level above each host's capacity that breaks a limit.
fn capacities(report: &Report) -> String {
    let mut out = String::new();
    for (grid, slo) in report.capacities() {
        out.push_str(&format!("{} — {}\n", grid.title, slo.headline()));
        for line in slo.breaches() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    if report.capacities().next().is_some() {
        out.push('\n');
    }
    out
}

/// Per comparison, `what differs: <subject>`, a table of the facts that differ (a column per
/// host or run) and the line naming the facts that are the same; empty when nothing is compared.
pub fn facts_diff(diffs: &[FactsDiff]) -> String {
    let mut out = String::new();
    for diff in diffs {
        out.push_str(&format!("what differs: {}\n", diff.subject));
        if !diff.differ.is_empty() {
            let mut builder = Builder::default();
            builder.push_record(std::iter::once("fact").chain(diff.columns.iter().map(String::as_str)));
            for fact in &diff.differ {
                builder.push_record(std::iter::once(fact.name.as_str()).chain(fact.texts()));
            }
            let mut table = builder.build();
            table.with(Style::rounded());
            out.push_str(&table.to_string());
            out.push('\n');
        }
        out.push_str(&format!("  {}\n\n", diff.same_line()));
    }
    out
}
