//! Markdown, fit for pasting into an issue or a README.

use super::{with_notes, Grid};

pub fn render(grids: &[Grid], header: &str) -> String {
    let mut out = String::new();
    if !header.is_empty() {
        for line in header.lines() {
            out.push_str(&format!("- {}\n", escape(line)));
        }
        out.push('\n');
    }
    for grid in grids {
        out.push_str(&format!("### {} — `{}`\n\n", escape(&grid.title), grid.metric));
        out.push_str(&row(grid.columns.iter().map(String::as_str)));
        let align = (0..grid.columns.len()).map(|i| if i == 0 { "---" } else { "---:" });
        out.push_str(&row(align));
        let (rows, notes) = with_notes(grid);
        for cells in &rows {
            out.push_str(&row(cells.iter().map(String::as_str)));
        }
        out.push('\n');
        for note in notes {
            out.push_str(&format!("{}  \n", escape(&note)));
        }
        out.push('\n');
    }
    out
}

fn row<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    format!("| {} |\n", cells.map(escape).collect::<Vec<_>>().join(" | "))
}

/// Pipes would split a cell.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}
