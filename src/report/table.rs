//! Tables for a terminal.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::{with_notes, Grid, Header};

pub fn render(grids: &[Grid], header: &Header) -> String {
    let mut out = String::new();
    let lines = header.lines();
    if !lines.is_empty() {
        out.push_str(&lines.join("\n"));
        out.push_str("\n\n");
    }
    for grid in grids {
        out.push_str(&format!("{} — {}\n", grid.title, grid.metric));
        let mut builder = Builder::default();
        builder.push_record(grid.columns.iter().cloned());
        let (rows, notes) = with_notes(grid);
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
