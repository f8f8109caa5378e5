//! Tables for a terminal, fitted to its width: a table wider than the limit is split into
//! several tables of columns, each repeating the first (the point, or the fact), and a line of
//! prose wider than it is wrapped at spaces. The limit is `COLUMNS` when set, else the
//! terminal's width when stdout is one, else none (a pipe or a file gets every line whole).

use console::measure_text_width;
use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style, Width};

use super::facts_diff::FactsDiff;
use super::model::Report;

/// How wide the output may be: `COLUMNS` when it holds a number (the user's explicit choice,
/// and what tests set), else the width of the terminal stdout is, else no limit.
pub fn width_limit() -> Option<usize> {
    let columns = std::env::var("COLUMNS").ok();
    match columns.and_then(|c| c.trim().parse::<usize>().ok()) {
        Some(n) if n > 0 => Some(n),
        _ => console::Term::stdout()
            .size_checked()
            .map(|(_, cols)| usize::from(cols)),
    }
}

/// The notices, what differs between the hosts or runs compared, the hosts' facts, the SLO
/// capacities, then each table with its notes and scaling story under it; within
/// [`width_limit`].
pub fn render(report: &Report) -> String {
    render_within(report, width_limit())
}

/// [`render`] within `limit` columns (none: as wide as the tables are).
pub fn render_within(report: &Report, limit: Option<usize>) -> String {
    let mut out = String::new();
    for (_, notice) in report.notices() {
        out.push_str(&format!("note: {notice}\n"));
    }
    if report.notices().next().is_some() {
        out.push('\n');
    }
    out.push_str(&facts_diff_tables(&report.facts_diff, limit));
    let lines = report.header.lines();
    if !lines.is_empty() {
        out.push_str(&lines.join("\n"));
        out.push_str("\n\n");
    }
    out.push_str(&capacities(report));
    for grid in report.grids() {
        out.push_str(&format!("{} — {}\n", grid.title, grid.metric));
        let (rows, notes) = grid.with_notes();
        out.push_str(&fitted(&grid.columns, &rows, Align::NumbersRight, limit));
        for note in notes.iter().chain(grid.stories().iter().flatten()) {
            out.push_str(&format!("  {note}\n"));
        }
        out.push('\n');
    }
    wrap_lines(&out, limit)
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
/// Within [`width_limit`].
pub fn facts_diff(diffs: &[FactsDiff]) -> String {
    let limit = width_limit();
    wrap_lines(&facts_diff_tables(diffs, limit), limit)
}

fn facts_diff_tables(diffs: &[FactsDiff], limit: Option<usize>) -> String {
    let mut out = String::new();
    for diff in diffs {
        out.push_str(&format!("what differs: {}\n", diff.subject));
        if !diff.differ.is_empty() {
            let mut header = vec!["fact".to_string()];
            header.extend(diff.columns.iter().cloned());
            let rows: Vec<Vec<String>> = diff
                .differ
                .iter()
                .map(|fact| {
                    std::iter::once(fact.name.clone())
                        .chain(fact.texts().map(str::to_string))
                        .collect()
                })
                .collect();
            out.push_str(&fitted(&header, &rows, Align::Left, limit));
        }
        out.push_str(&format!("  {}\n\n", diff.same_line()));
    }
    out
}

/// How a table's columns after the first are aligned.
#[derive(Clone, Copy)]
enum Align {
    /// Numbers: to the right.
    NumbersRight,
    Left,
}

/// The table of `header` and `rows` (each ended by a newline), as one table when it fits
/// `limit`, else as several, one under the other, each with the first column and as many of
/// the next as fit. A first column and one other that cannot fit are wrapped within the limit.
fn fitted(header: &[String], rows: &[Vec<String>], align: Align, limit: Option<usize>) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            std::iter::once(&header[c])
                .chain(rows.iter().filter_map(|r| r.get(c)))
                .map(|text| text.lines().map(measure_text_width).max().unwrap_or(0))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for group in column_groups(&widths, limit) {
        let pick = |row: &[String]| -> Vec<String> {
            group
                .iter()
                .map(|&c| row.get(c).cloned().unwrap_or_default())
                .collect()
        };
        let mut builder = Builder::default();
        builder.push_record(pick(header));
        for row in rows {
            builder.push_record(pick(row));
        }
        let mut table = builder.build();
        table.with(Style::rounded());
        if let Align::NumbersRight = align {
            table.modify(Columns::new(1..), Alignment::right());
        }
        if let Some(limit) = limit.filter(|&l| table_width(&widths, &group) > l) {
            // A group of the first column and one other: that other is wrapped to the room left,
            // or, with no room, the whole table is.
            match (limit.checked_sub(table_width(&widths, &group[..1]) + 3)).filter(|r| *r >= 8) {
                Some(room) => table.modify(Columns::new(1..), Width::wrap(room).keep_words(true)),
                None => table.with(Width::wrap(limit).keep_words(true)),
            };
        }
        out.push_str(&table.to_string());
        out.push('\n');
    }
    out
}

/// The columns of each table a table of columns `widths` wide is split into to fit `limit`:
/// each starts with column 0 and takes the next columns in order while the table fits.
fn column_groups(widths: &[usize], limit: Option<usize>) -> Vec<Vec<usize>> {
    let Some(limit) = limit else {
        return vec![(0..widths.len()).collect()];
    };
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut current = vec![0];
    for c in 1..widths.len() {
        current.push(c);
        if current.len() > 2 && table_width(widths, &current) > limit {
            current.pop();
            groups.push(std::mem::replace(&mut current, vec![0, c]));
        }
    }
    groups.push(current);
    groups
}

/// The width of a rounded table of the columns `group`: each column's text, a space either
/// side and a border after it, and the border before the first.
fn table_width(widths: &[usize], group: &[usize]) -> usize {
    1 + group.iter().map(|&c| widths[c] + 3).sum::<usize>()
}

/// Every line of `text` wider than `limit` wrapped at spaces, its continuation lines indented
/// two spaces more than it; a word wider than the room left is cut.
fn wrap_lines(text: &str, limit: Option<usize>) -> String {
    let Some(limit) = limit else {
        return text.to_string();
    };
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if measure_text_width(body) <= limit {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start().len();
        let continuation = " ".repeat((indent + 2).min(limit / 2));
        let wrapped = wrap(body.trim_start(), &body[..indent], &continuation, limit);
        out.push_str(&wrapped.join("\n"));
        out.push_str(end);
    }
    out
}

/// `text` in lines of at most `limit` columns, the first starting with `first`, the others
/// with `rest`.
fn wrap(text: &str, first: &str, rest: &str, limit: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let room = limit.saturating_sub(measure_text_width(&line) + usize::from(!empty));
        if measure_text_width(word) <= room {
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
            continue;
        }
        if !empty {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
        }
        let mut chars = word.chars().peekable();
        while chars.peek().is_some() {
            let room = limit.saturating_sub(measure_text_width(&line)).max(1);
            let piece: String = chars.by_ref().take(room).collect();
            line.push_str(&piece);
            if chars.peek().is_some() {
                lines.push(std::mem::replace(&mut line, rest.to_string()));
            }
        }
        empty = false;
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widest(text: &str) -> usize {
        text.lines().map(measure_text_width).max().unwrap_or(0)
    }

    fn strings(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn a_wide_table_splits_into_tables_that_repeat_the_first_column() {
        let header = strings(&[
            "point",
            "a-long-host-name/spec=off",
            "b-long-host-name/spec=on",
            "a / b",
        ]);
        let rows = vec![
            strings(&["concurrency=1", "170.9", "290.9", "×1.70"]),
            strings(&["concurrency=32", "2072.4", "1519.2", "×0.73"]),
        ];
        let whole = fitted(&header, &rows, Align::NumbersRight, None);
        assert_eq!(
            whole
                .lines()
                .next()
                .unwrap()
                .chars()
                .filter(|c| *c == '┬')
                .count(),
            3
        );
        let limit = widest(&whole) - 1;
        let split = fitted(&header, &rows, Align::NumbersRight, Some(limit));
        assert!(widest(&split) <= limit, "{split}");
        let tables: Vec<&str> = split.split_inclusive("╯\n").collect();
        assert_eq!(tables.len(), 2, "{split}");
        for table in &tables {
            assert!(
                table.contains("│ concurrency=32 │"),
                "the point column in each: {table}"
            );
        }
        // Every column once, in order, and no cell wrapped.
        let headers: Vec<&str> = split
            .lines()
            .filter(|l| l.starts_with("│ point"))
            .flat_map(|l| {
                l.split('│')
                    .map(str::trim)
                    .filter(|c| !c.is_empty() && *c != "point")
            })
            .collect();
        assert_eq!(
            headers,
            header[1..].iter().map(String::as_str).collect::<Vec<_>>()
        );
        assert_eq!(split.lines().count(), whole.lines().count() * 2);
    }

    #[test]
    fn a_table_that_fits_is_left_whole_and_no_limit_means_no_split() {
        let header = strings(&["point", "x"]);
        let rows = vec![strings(&["c=1", "1.0"])];
        assert_eq!(
            fitted(&header, &rows, Align::NumbersRight, Some(40)),
            fitted(&header, &rows, Align::NumbersRight, None)
        );
        assert_eq!(column_groups(&[10, 50, 50, 50], None), vec![vec![0, 1, 2, 3]]);
        assert_eq!(
            column_groups(&[10, 50, 50, 50], Some(70)),
            vec![vec![0, 1], vec![0, 2], vec![0, 3]]
        );
        assert_eq!(table_width(&[10, 50], &[0, 1]), 1 + 13 + 53);
    }

    #[test]
    fn a_column_too_wide_for_the_limit_alone_is_wrapped_within_it() {
        let header = strings(&["point", "a header far too long to fit the narrow terminal at all"]);
        let rows = vec![strings(&["c=1", "1.0"])];
        let out = fitted(&header, &rows, Align::Left, Some(30));
        assert!(widest(&out) <= 30, "{out}");
        assert!(out.contains("c=1") && out.contains("narrow"), "{out}");
    }

    #[test]
    fn long_lines_wrap_at_spaces_with_an_indent_and_long_words_are_cut() {
        let text = "  blackwell: 1→4 ×3.14 (79% efficient), 4→16 ×2.94 (73% efficient), 16→64 ×1.55\nshort\n";
        let out = wrap_lines(text, Some(30));
        assert!(widest(&out) <= 30, "{out}");
        assert!(
            out.starts_with("  blackwell: 1→4 ×3.14 (79%\n    efficient),"),
            "{out}"
        );
        assert!(out.ends_with("\nshort\n"), "{out}");
        let joined: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(joined, text.split_whitespace().collect::<Vec<_>>());
        let cut = wrap_lines(&format!("x {}\n", "y".repeat(25)), Some(10));
        assert!(widest(&cut) <= 10, "{cut}");
        assert_eq!(cut.replace(['\n', ' '], ""), format!("x{}", "y".repeat(25)));
        assert_eq!(wrap_lines(text, None), text);
    }
}
