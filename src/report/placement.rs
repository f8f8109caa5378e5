//! Where a chart's texts go so that none covers another or a data point: text widths from the
//! font's advances (an upper bound, so a box holds its text in any common UI font), boxes,
//! the first free place among candidates, and items flowed into rows. Pure geometry, no SVG.

/// An axis-aligned box in the chart's pixels (y grows downwards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

impl Rect {
    /// The box of half-sizes `hx`, `hy` around (`x`, `y`).
    pub fn around(x: f64, y: f64, hx: f64, hy: f64) -> Rect {
        Rect {
            x0: x - hx,
            y0: y - hy,
            x1: x + hx,
            y1: y + hy,
        }
    }

    /// Whether the two boxes share any area (touching edges do not).
    pub fn overlaps(&self, other: &Rect) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }

    /// Whether the box lies inside `outer`.
    pub fn within(&self, outer: &Rect) -> bool {
        self.x0 >= outer.x0 && self.x1 <= outer.x1 && self.y0 >= outer.y0 && self.y1 <= outer.y1
    }
}

/// Which point of a text its x is: as SVG's `text-anchor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    pub fn svg(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

/// The width of `text` at `size` pixels, at least as wide as the common sans-serif UI fonts
/// draw it: DejaVu Sans's advances (the widest of them, Chromium's default on Linux), rounded
/// up per class of character.
pub fn text_width(text: &str, size: f64) -> f64 {
    let ems: f64 = text
        .chars()
        .map(|c| match c {
            'i' | 'l' | 'j' | '\'' | '.' | ',' | ':' | ';' | '|' | '!' | ' ' => 0.34,
            'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '/' | '\\' | '-' | '{' | '}' => 0.45,
            'm' | 'w' | 'M' | 'W' | '@' | '%' | '—' | '…' => 1.0,
            '=' | '+' | '<' | '>' | '×' | '≤' | '≥' | '±' | '~' | '÷' | '→' | 'Δ' => 0.86,
            'A'..='Z' => 0.8,
            _ if c.is_ascii() => 0.66,
            _ => 1.0,
        })
        .sum();
    ems * size
}

/// The box a text at (`x`, `baseline`) takes: from its ascenders to its descenders.
pub fn text_box(x: f64, baseline: f64, anchor: Anchor, text: &str, size: f64) -> Rect {
    let width = text_width(text, size);
    let x0 = match anchor {
        Anchor::Start => x,
        Anchor::Middle => x - width / 2.0,
        Anchor::End => x - width,
    };
    Rect {
        x0,
        y0: baseline - 0.95 * size,
        x1: x0 + width,
        y1: baseline + 0.3 * size,
    }
}

/// The first candidate that lies inside `within` and overlaps nothing in `taken`.
pub fn first_free<T>(
    candidates: impl IntoIterator<Item = (T, Rect)>,
    within: &Rect,
    taken: &[Rect],
) -> Option<(T, Rect)> {
    candidates
        .into_iter()
        .find(|(_, r)| r.within(within) && !taken.iter().any(|t| t.overlaps(r)))
}

/// Items of known widths laid out left to right in rows between `left` and `right`, a row
/// `row_height` below the one before; an item that does not fit what is left of a row starts
/// the next.
pub struct Flow {
    left: f64,
    right: f64,
    row_height: f64,
    gap: f64,
    x: f64,
    /// The top of the current row.
    y: f64,
    empty_row: bool,
}

impl Flow {
    pub fn new(left: f64, right: f64, top: f64, row_height: f64, gap: f64) -> Flow {
        Flow {
            left,
            right,
            row_height,
            gap,
            x: left,
            y: top,
            empty_row: true,
        }
    }

    /// The widest an item may be.
    pub fn width(&self) -> f64 {
        self.right - self.left
    }

    /// Where an item `width` wide goes: its left and the top of its row.
    pub fn place(&mut self, width: f64) -> (f64, f64) {
        if !self.empty_row && self.x + width > self.right {
            self.new_row();
        }
        let at = (self.x, self.y);
        self.x += width + self.gap;
        self.empty_row = false;
        at
    }

    /// Ends the current row, unless it is empty.
    pub fn new_row(&mut self) {
        if !self.empty_row {
            self.x = self.left;
            self.y += self.row_height;
            self.empty_row = true;
        }
    }

    /// The bottom of the last row that holds an item.
    pub fn bottom(&self) -> f64 {
        match self.empty_row {
            true => self.y,
            false => self.y + self.row_height,
        }
    }
}

/// `text` cut to fit `width` at `size`, with `…` where it was cut.
pub fn fit_text(text: &str, width: f64, size: f64) -> String {
    if text_width(text, size) <= width {
        return text.to_string();
    }
    let mut cut: String = text.to_string();
    while !cut.is_empty() && text_width(&format!("{cut}…"), size) > width {
        cut.pop();
    }
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_overlap_only_when_they_share_area() {
        let a = Rect::around(10.0, 10.0, 5.0, 5.0);
        assert!(a.overlaps(&Rect::around(14.0, 14.0, 5.0, 5.0)));
        assert!(!a.overlaps(&Rect::around(20.0, 10.0, 5.0, 5.0)), "touching");
        assert!(!a.overlaps(&Rect::around(10.0, 30.0, 5.0, 5.0)));
        assert!(a.within(&Rect::around(10.0, 10.0, 5.0, 5.0)));
        assert!(!a.within(&Rect::around(11.0, 10.0, 5.0, 5.0)));
    }

    #[test]
    fn text_boxes_grow_with_the_text_and_follow_the_anchor() {
        assert!(text_width("mmmm", 11.0) > text_width("iiii", 11.0));
        assert_eq!(text_width("", 11.0), 0.0);
        let w = text_width("C=16", 11.0);
        assert_eq!(text_box(100.0, 50.0, Anchor::End, "C=16", 11.0).x1, 100.0);
        assert_eq!(text_box(100.0, 50.0, Anchor::Start, "C=16", 11.0).x1, 100.0 + w);
        let mid = text_box(100.0, 50.0, Anchor::Middle, "C=16", 11.0);
        assert!((mid.x0 + mid.x1) / 2.0 - 100.0 < 1e-9 && mid.y0 < 50.0 && mid.y1 > 50.0);
    }

    #[test]
    fn the_first_free_candidate_inside_is_taken() {
        let within = Rect::around(50.0, 50.0, 50.0, 50.0);
        let taken = [Rect::around(20.0, 20.0, 10.0, 10.0)];
        let candidates = [
            ("outside", Rect::around(-5.0, 20.0, 8.0, 8.0)),
            ("covered", Rect::around(25.0, 25.0, 8.0, 8.0)),
            ("free", Rect::around(60.0, 60.0, 8.0, 8.0)),
            ("later", Rect::around(80.0, 80.0, 8.0, 8.0)),
        ];
        assert_eq!(first_free(candidates, &within, &taken).unwrap().0, "free");
        assert!(first_free(candidates[..2].to_vec(), &within, &taken).is_none());
    }

    #[test]
    fn a_flow_wraps_items_into_rows() {
        let mut flow = Flow::new(10.0, 110.0, 0.0, 20.0, 5.0);
        assert_eq!(flow.place(60.0), (10.0, 0.0));
        assert_eq!(flow.place(40.0), (10.0, 20.0), "75 + 40 > 110: next row");
        assert_eq!(flow.place(30.0), (55.0, 20.0));
        flow.new_row();
        flow.new_row();
        assert_eq!(flow.place(500.0), (10.0, 40.0), "one row, however wide");
        assert_eq!(flow.bottom(), 60.0);
    }

    #[test]
    fn a_text_too_wide_is_cut_with_an_ellipsis() {
        let long = "blackwell/spec=nextn3 @20261202T010031Z p99 and a good deal more";
        let cut = fit_text(long, 120.0, 11.0);
        assert!(cut.ends_with('…') && text_width(&cut, 11.0) <= 120.0, "{cut}");
        assert_eq!(fit_text("short", 120.0, 11.0), "short");
    }
}
