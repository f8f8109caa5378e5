//! CSV for spreadsheets and notebooks: one line per cell (long format), numbers unformatted.

use super::{Cell, Grid};

pub fn render(grids: &[Grid]) -> String {
    let mut writer = ::csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(["table", "metric", "row", "column", "value", "status", "reason"]);
    for grid in grids {
        for row in &grid.rows {
            let label = row.first().map(Cell::text).unwrap_or_default();
            for (column, cell) in grid.columns.iter().zip(row).skip(1) {
                let (value, status, reason) = match cell {
                    Cell::Value { value } => (value.to_string(), "ok", String::new()),
                    Cell::Derived { value, unit } => (format!("{value:.4}"), *unit, String::new()),
                    Cell::Skipped { reason } => (String::new(), "skipped", reason.clone()),
                    Cell::Failed { reason } => (String::new(), "failed", reason.clone()),
                    Cell::Missing => (String::new(), "missing", String::new()),
                    Cell::Label { text } => (text.clone(), "label", String::new()),
                };
                let _ =
                    writer.write_record([&grid.title, &grid.metric, &label, column, &value, status, &reason]);
            }
        }
    }
    String::from_utf8(writer.into_inner().unwrap_or_default()).unwrap_or_default()
}
