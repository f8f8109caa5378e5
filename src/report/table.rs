//! Tables for a terminal.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::model::Report;

/// The hosts' facts, then each table with its notes and scaling story under it.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for (_, notice) in report.notices() {
        out.push_str(&format!("note: {notice}\n"));
    }
    if report.notices().next().is_some() {
        out.push('\n');
    }
    let lines = report.header.lines();
    if !lines.is_empty() {
        out.push_str(&lines.join("\n"));
        out.push_str("\n\n");
    }
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
