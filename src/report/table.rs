//! Tables for a terminal.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

use super::{with_notes, Grid};

pub fn render(grids: &[Grid], header: &str) -> String {
    let mut out = String::new();
    if !header.is_empty() {
        out.push_str(header);
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
        for note in notes {
            out.push_str(&format!("  {note}\n"));
        }
        out.push('\n');
    }
    out
}
