//! JSON for programs: the tables with typed cells.

use super::Grid;

pub fn render(grids: &[Grid]) -> String {
    let mut out = serde_json::to_string_pretty(grids).unwrap_or_else(|_| "[]".into());
    out.push('\n');
    out
}
