//! Markdown, fit for pasting into an issue or a README.

use super::Grid;

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
        out.push_str(&format!("| {} |\n", grid.columns.iter().map(|c| escape(c)).collect::<Vec<_>>().join(" | ")));
        let align: Vec<&str> = (0..grid.columns.len()).map(|i| if i == 0 { "---" } else { "---:" }).collect();
        out.push_str(&format!("| {} |\n", align.join(" | ")));
        for row in &grid.rows {
            out.push_str(&format!("| {} |\n", row.iter().map(|c| escape(&c.text())).collect::<Vec<_>>().join(" | ")));
        }
        out.push('\n');
    }
    out
}

/// Pipes would split a cell.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}
