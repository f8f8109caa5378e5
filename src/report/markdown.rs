//! Markdown, fit for pasting into an issue or a README: what differs between the hosts or runs
//! compared as a table, the hosts' facts as a list, the SLO capacities, each table with its notes and scaling story
//! under it.

use super::facts_diff::FactsDiff;
use super::model::Report;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for (_, notice) in report.notices() {
        out.push_str(&format!("> **note:** {}\n\n", escape(notice)));
    }
    out.push_str(&facts_diff(&report.facts_diff));
    let lines = report.header.lines();
    for line in &lines {
        // Indented lines are facts of the host above: nested list items.
        match line.strip_prefix("  ") {
            Some(fact) => out.push_str(&format!("  - {}\n", escape(fact))),
            None => out.push_str(&format!("- **{}**\n", escape(line))),
        }
    }
    if !lines.is_empty() {
        out.push('\n');
    }
    for (grid, slo) in report.capacities() {
        out.push_str(&format!(
            "**{}** — {}\n\n",
            escape(&grid.title),
            escape(&slo.headline())
        ));
        for line in slo.breaches() {
            out.push_str(&format!("- {}\n", escape(&line)));
        }
        if !slo.breaches().is_empty() {
            out.push('\n');
        }
    }
    for grid in report.grids() {
        out.push_str(&format!("### {} — `{}`\n\n", escape(&grid.title), grid.metric));
        out.push_str(&row(grid.columns.iter().map(String::as_str)));
        let align = (0..grid.columns.len()).map(|i| if i == 0 { "---" } else { "---:" });
        out.push_str(&row(align));
        let (rows, notes) = grid.with_notes();
        for cells in &rows {
            out.push_str(&row(cells.iter().map(String::as_str)));
        }
        out.push('\n');
        for note in notes {
            out.push_str(&format!("{}  \n", escape(&note)));
        }
        for story in grid.stories() {
            let Some((intro, lines)) = story.split_first() else {
                continue;
            };
            out.push_str(&format!("\n**{}**\n\n", escape(intro)));
            for line in lines {
                out.push_str(&format!("- {}\n", escape(line)));
            }
        }
        out.push('\n');
    }
    out
}

/// Per comparison, a heading, a table of the facts that differ (a column per host or run) and
/// the line naming the facts that are the same.
pub fn facts_diff(diffs: &[FactsDiff]) -> String {
    let mut out = String::new();
    for diff in diffs {
        out.push_str(&format!("### What differs: {}\n\n", escape(&diff.subject)));
        if !diff.differ.is_empty() {
            let header = std::iter::once("fact").chain(diff.columns.iter().map(String::as_str));
            out.push_str(&row(header));
            out.push_str(&row((0..=diff.columns.len()).map(|_| "---")));
            for fact in &diff.differ {
                out.push_str(&row(std::iter::once(fact.name.as_str()).chain(fact.texts())));
            }
            out.push('\n');
        }
        out.push_str(&format!("{}\n\n", escape(&diff.same_line())));
    }
    out
}

fn row<'a>(cells: impl Iterator<Item = &'a str>) -> String {
    format!("| {} |\n", cells.map(escape).collect::<Vec<_>>().join(" | "))
}

/// Pipes would split a cell; `*`, `` ` `` and `<` could turn text into emphasis, code or HTML.
/// (Underscores inside words, as in metric names, stay: GitHub reads them literally.)
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '|' | '*' | '<' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_markdown_would_read_as_markup() {
        assert_eq!(escape("a|b"), "a\\|b");
        assert_eq!(
            escape("output_throughput * 2 <x>"),
            "output_throughput \\* 2 \\<x>"
        );
    }
}
