//! Line charts as inline SVG, written by hand: axes with round ticks (linear, or log2 for
//! concurrency), a line per series — its colour the host's, its dash pattern the variant's or
//! run's, its marker shape what else tells series apart (TTFT p50 or p99) — with a tooltip
//! (`<title>`) per point, the points not measured as × on the x axis, horizontal lines at
//! limits (an SLO's latency bounds) and a legend of each colour, pattern and shape in rows.
//! The texts are placed (see `placement.rs`) where they cover no other text and no data point;
//! a quantity that cannot be negative keeps its axis at 0 and its error bars are cut there.
//! No script and no external resource, so a report works offline and pastes anywhere.

use std::fmt::Write as _;

use super::cell::format_number;
use super::placement::{first_free, fit_text, text_box, text_width, Anchor, Flow, Rect};

/// Colours that stay distinct for colour-blind readers (Okabe–Ito), then black.
const PALETTE: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// Dash patterns (`stroke-dasharray`), solid first.
const DASHES: &[&str] = &["", "7 4", "2 3", "10 3 2 3", "1 4", "14 5"];

/// How many marker shapes there are: circle, square, triangle, diamond.
const MARKERS: usize = 4;

/// The colour of limit lines: a red none of the series has.
const LIMIT_COLOR: &str = "#B3261E";

/// The colour of the legend's samples of dash patterns, marker shapes and not measured points.
const KEY_COLOR: &str = "#5b6270";

const WIDTH: f64 = 720.0;
const PLOT_HEIGHT: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
/// Below the plot: tick labels and the x axis title.
const AXIS_SPACE: f64 = 52.0;
const LEGEND_ROW: f64 = 18.0;
/// Between two items of a legend row.
const LEGEND_GAP: f64 = 16.0;
/// A legend item's sample of line, pattern or shape, and the space after it.
const SWATCH: f64 = 22.0;
const SWATCH_SPACE: f64 = 6.0;
/// The size of tick labels, legend texts and point labels (`svg .tick, .legend, .point`).
const FONT: f64 = 11.0;
/// Half the size of a marker, and of a not-measured ×.
const MARKER_HALF: f64 = 4.5;
const GAP_HALF: f64 = 4.0;
/// How far apart the × of several series not measured at one x are stacked.
const GAP_STACK: f64 = 10.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Powers of two, for concurrency levels.
    Log2,
}

/// One point: x, y, and the text of its tooltip.
#[derive(Clone, Debug)]
pub struct ChartPoint {
    pub x: f64,
    pub y: f64,
    pub tooltip: String,
    /// A short label drawn beside the marker (e.g. the concurrency on the trade-off view);
    /// left out where it would cover another label or a point.
    pub label: Option<String>,
    /// Half the height of an error bar around `y` (a repeated point's 95% interval).
    pub error: Option<f64>,
}

/// A colour, dash pattern or marker shape (its index, cycled through the palette) and what it
/// stands for in the legend: a host, a variant or run, a percentile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag {
    pub index: usize,
    pub name: String,
}

/// How a series is drawn: colour by host, dash by variant or run, marker by the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Look {
    pub color: Tag,
    pub dash: Tag,
    pub marker: Tag,
}

#[derive(Clone, Debug)]
pub struct ChartSeries {
    pub name: String,
    pub look: Look,
    pub points: Vec<ChartPoint>,
}

/// A point of a series that was not measured (skipped, failed, not run, invalid, or without
/// the metric): an × on the x axis at `x`, or, where its x is not known (the trade-off's x is
/// a measurement), a line of the legend.
#[derive(Clone, Debug)]
pub struct Gap {
    pub series: String,
    pub look: Look,
    pub x: Option<f64>,
    /// The point, as the chart names it (`C=256`).
    pub point: String,
    /// In a word or two: `skipped`, `failed`, `not run`, `invalid`, `no p99_ttft_ms`.
    pub status: String,
    /// Why, in full: the tooltip.
    pub why: String,
}

#[derive(Clone, Debug)]
pub struct Chart {
    /// What the chart shows, for the DOM (`data-chart`) and tests.
    pub kind: &'static str,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub series: Vec<ChartSeries>,
    /// Horizontal lines across the plot: a limit on the y metric, named.
    pub limits: Vec<Limit>,
    pub gaps: Vec<Gap>,
    /// The least value y can take (0 for throughput, latency, power, energy): the y axis does
    /// not go below it and error bars are cut at it.
    pub y_floor: Option<f64>,
}

/// A horizontal line at `y`, labelled (e.g. `SLO p99_ttft_ms ≤ 2000`).
#[derive(Clone, Debug)]
pub struct Limit {
    pub y: f64,
    pub label: String,
}

/// Maps data values to pixels along one axis.
struct Axis {
    scale: Scale,
    min: f64,
    max: f64,
    ticks: Vec<f64>,
}

impl Axis {
    fn new(scale: Scale, values: impl Iterator<Item = f64>) -> Axis {
        let values: Vec<f64> = values
            .filter(|v| v.is_finite() && (scale == Scale::Linear || *v > 0.0))
            .collect();
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        match scale {
            Scale::Log2 => {
                let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (1.0, 2.0) };
                let (a, b) = (
                    lo.log2().floor() as i32,
                    hi.log2().ceil().max(lo.log2().floor() + 1.0) as i32,
                );
                let every = ((b - a) as usize).div_ceil(10).max(1);
                let ticks = (a..=b).step_by(every).map(|e| 2f64.powi(e)).collect();
                Axis {
                    scale,
                    min: 2f64.powi(a),
                    max: 2f64.powi(b),
                    ticks,
                }
            }
            Scale::Linear => {
                let hi = if hi.is_finite() && hi > 0.0 { hi } else { 1.0 };
                let lo = if lo.is_finite() { lo.min(0.0) } else { 0.0 };
                let step = nice_step((hi - lo) / 5.0);
                let max = (hi / step).ceil() * step;
                let min = (lo / step).floor() * step;
                let n = ((max - min) / step).round() as usize;
                let ticks = (0..=n).map(|i| min + step * i as f64).collect();
                Axis {
                    scale,
                    min,
                    max,
                    ticks,
                }
            }
        }
    }

    /// Position along the axis from 0 to 1.
    fn fraction(&self, v: f64) -> f64 {
        let f = match self.scale {
            Scale::Log2 => (v.log2() - self.min.log2()) / (self.max.log2() - self.min.log2()),
            Scale::Linear => (v - self.min) / (self.max - self.min),
        };
        if f.is_finite() {
            f
        } else {
            0.0
        }
    }
}

/// 1, 2, 2.5 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|n| *n >= m - 1e-9)
        .unwrap_or(10.0);
    nice * power
}

/// Tick labels as people write them: `500`, `1.5k`, `32k`, `1.2M`.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = if scaled.fract().abs() < 1e-9 {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 || suffix.is_empty() && scaled.abs() >= 1.0 {
        format!("{scaled:.1}")
    } else {
        format!("{scaled:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// Text for SVG and HTML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Where everything of a chart goes, in pixels: what [`Chart::render`] writes out, and what
/// the tests check for overlaps.
struct Layout<'c> {
    x: Axis,
    y: Axis,
    height: f64,
    lines: Vec<Line<'c>>,
    gaps: Vec<(&'c Gap, f64, f64)>,
    limits: Vec<(&'c Limit, f64, Option<Text>)>,
    legend: Vec<KeyItem>,
}

/// A series drawn: its points in x order, each with its marker's centre, error bar and label.
struct Line<'c> {
    series: &'c ChartSeries,
    marks: Vec<Mark<'c>>,
}

struct Mark<'c> {
    point: &'c ChartPoint,
    at: (f64, f64),
    bar: Option<Bar>,
    label: Option<Text>,
}

/// An error bar from `top` to `bottom`; `clipped` when the interval reaches below the floor
/// and the bar stops there (without the cap that marks an interval's end).
struct Bar {
    top: f64,
    bottom: f64,
    clipped: bool,
}

/// A text placed: at `x` (by `anchor`) on `baseline`, taking `rect`.
#[derive(Clone, Debug)]
struct Text {
    x: f64,
    baseline: f64,
    anchor: Anchor,
    text: String,
    rect: Rect,
}

impl Text {
    fn new(x: f64, baseline: f64, anchor: Anchor, text: String) -> Text {
        let rect = text_box(x, baseline, anchor, &text, FONT);
        Text {
            x,
            baseline,
            anchor,
            text,
            rect,
        }
    }
}

/// A legend item: a sample at (`x`, `y`) (its left end and middle) and its text.
struct KeyItem {
    swatch: Swatch,
    x: f64,
    y: f64,
    text: Text,
    /// The full text, when the item's is cut or tells less than the whole.
    title: Option<String>,
}

impl KeyItem {
    #[cfg(test)]
    fn swatch_rect(&self) -> Rect {
        Rect {
            x0: self.x,
            y0: self.y - MARKER_HALF,
            x1: self.x + SWATCH,
            y1: self.y + MARKER_HALF,
        }
    }
}

enum Swatch {
    Color(usize),
    Dash(usize),
    Marker(usize),
    /// A point not measured: grey for all of them, or in its series' colour.
    Gap(Option<usize>),
    Limit,
}

impl Chart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let layout = self.layout();
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg class="chart" data-chart="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {}" role="img" aria-label="{}">"#,
            self.kind,
            layout.height,
            escape(&self.title)
        );
        let _ = write!(
            svg,
            r#"<text class="title" x="{LEFT}" y="22">{}</text>"#,
            escape(&self.title)
        );
        self.grid_and_axes(&mut svg, &layout.x, &layout.y);
        for line in &layout.lines {
            draw_line(&mut svg, line);
        }
        for (gap, px, py) in &layout.gaps {
            draw_gap(&mut svg, gap, *px, *py);
        }
        for (limit, py, label) in &layout.limits {
            let _ = write!(
                svg,
                r#"<g class="limit"><line x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="{LIMIT_COLOR}" stroke-width="1.5" stroke-dasharray="2 3"/>"#,
                WIDTH - RIGHT,
            );
            if let Some(label) = label {
                write_text(&mut svg, "legend", label);
            }
            let _ = write!(svg, "<title>{}</title></g>", escape(&limit.label));
        }
        svg.push_str(r#"<g class="key">"#);
        for item in &layout.legend {
            draw_key_item(&mut svg, item);
        }
        svg.push_str("</g></svg>");
        svg
    }

    fn points(&self) -> impl Iterator<Item = &ChartPoint> {
        self.series.iter().flat_map(|s| s.points.iter())
    }

    /// The interval a point's error bar spans, cut at the floor: (low, high, cut).
    fn interval(&self, p: &ChartPoint) -> (f64, f64, bool) {
        let e = p.error.filter(|e| *e > 0.0).unwrap_or(0.0);
        let low = p.y - e;
        match self.y_floor {
            Some(floor) if low < floor => (floor.min(p.y), p.y + e, true),
            _ => (low, p.y + e, false),
        }
    }

    fn px(x: &Axis, v: f64) -> f64 {
        LEFT + x.fraction(v) * (WIDTH - LEFT - RIGHT)
    }

    fn py(y: &Axis, v: f64) -> f64 {
        TOP + PLOT_HEIGHT - y.fraction(v) * PLOT_HEIGHT
    }

    fn plot() -> Rect {
        Rect {
            x0: LEFT,
            y0: TOP,
            x1: WIDTH - RIGHT,
            y1: TOP + PLOT_HEIGHT,
        }
    }

    /// Where everything goes: the marks, then the × of points not measured, then the limits'
    /// labels clear of them, then the point labels clear of all that, then the legend.
    fn layout(&self) -> Layout<'_> {
        let x = Axis::new(
            self.x_scale,
            self.points()
                .map(|p| p.x)
                .chain(self.gaps.iter().filter_map(|g| g.x)),
        );
        let intervals = self.points().flat_map(|p| {
            let (low, high, _) = self.interval(p);
            [p.y, low, high]
        });
        let y = Axis::new(Scale::Linear, intervals.chain(self.limits.iter().map(|l| l.y)));
        let mut lines: Vec<Line> = self.series.iter().map(|s| self.marks(s, &x, &y)).collect();
        let mut taken: Vec<Rect> = lines.iter().flat_map(Line::obstacles).collect();
        let gaps = self.gaps_on_axis(&x);
        taken.extend(
            gaps.iter()
                .map(|(_, px, py)| Rect::around(*px, *py, GAP_HALF, GAP_HALF)),
        );
        let limits = self.limits_placed(&y, &mut taken);
        place_point_labels(&mut lines, &mut taken);
        let (legend, bottom) = self.legend(&limits);
        Layout {
            x,
            y,
            height: bottom + 8.0,
            lines,
            gaps,
            limits,
            legend,
        }
    }

    /// A series' marks in x order.
    fn marks<'c>(&'c self, series: &'c ChartSeries, x: &Axis, y: &Axis) -> Line<'c> {
        let mut points: Vec<&ChartPoint> = series.points.iter().collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        let marks = points
            .into_iter()
            .map(|point| {
                let at = (Self::px(x, point.x), Self::py(y, point.y));
                let (low, high, clipped) = self.interval(point);
                let bar = (point.error.is_some_and(|e| e > 0.0)).then(|| Bar {
                    top: Self::py(y, high),
                    bottom: Self::py(y, low),
                    clipped,
                });
                Mark {
                    point,
                    at,
                    bar,
                    label: None,
                }
            })
            .collect();
        Line { series, marks }
    }

    /// The × of each point not measured whose x is known, on the x axis; several at one x
    /// stacked upwards, in the order given.
    fn gaps_on_axis(&self, x: &Axis) -> Vec<(&Gap, f64, f64)> {
        let bottom = TOP + PLOT_HEIGHT;
        let mut placed: Vec<(&Gap, f64, f64)> = Vec::new();
        for gap in &self.gaps {
            let Some(gx) = gap.x else { continue };
            let px = Self::px(x, gx);
            let below = placed
                .iter()
                .filter(|(_, p, _)| (p - px).abs() < 2.0 * GAP_HALF)
                .count();
            placed.push((gap, px, bottom - below as f64 * GAP_STACK));
        }
        placed
    }

    /// Each limit's line and its label, placed on the plot clear of `taken` (which it joins),
    /// or none: the legend names it then.
    fn limits_placed(&self, y: &Axis, taken: &mut Vec<Rect>) -> Vec<(&Limit, f64, Option<Text>)> {
        let plot = Self::plot();
        self.limits
            .iter()
            .map(|limit| {
                let py = Self::py(y, limit.y);
                let steps = ((plot.x1 - plot.x0) / 40.0) as usize;
                let candidates = (0..=steps).flat_map(|i| {
                    let right = plot.x1 - 4.0 - 40.0 * i as f64;
                    [py - 4.0, py + FONT + 2.0].map(|baseline| {
                        let text = Text::new(right, baseline, Anchor::End, limit.label.clone());
                        let rect = text.rect;
                        (text, rect)
                    })
                });
                let label = first_free(candidates, &plot, taken).map(|(text, rect)| {
                    taken.push(rect);
                    text
                });
                (limit, py, label)
            })
            .collect()
    }

    /// The legend under the axis (see [`Chart::key_groups`]), each group from a new row.
    /// Returns its items and its bottom.
    fn legend(&self, limits: &[(&Limit, f64, Option<Text>)]) -> (Vec<KeyItem>, f64) {
        let top = TOP + PLOT_HEIGHT + AXIS_SPACE;
        let mut flow = Flow::new(LEFT, WIDTH - RIGHT, top, LEGEND_ROW, LEGEND_GAP);
        let room = flow.width() - SWATCH - SWATCH_SPACE;
        let mut items = Vec::new();
        for group in self.key_groups(limits) {
            flow.new_row();
            for (swatch, name, title) in group {
                let text = fit_text(&name, room, FONT);
                let title = match text == name {
                    true => title,
                    false => title.or(Some(name)),
                };
                let (x, row) = flow.place(SWATCH + SWATCH_SPACE + text_width(&text, FONT));
                let y = row + LEGEND_ROW / 2.0;
                let text = Text::new(x + SWATCH + SWATCH_SPACE, y + 0.35 * FONT, Anchor::Start, text);
                items.push(KeyItem {
                    swatch,
                    x,
                    y,
                    text,
                    title,
                });
            }
        }
        (items, flow.bottom())
    }

    /// What the legend says, in groups: the hosts' colours; the variants' or runs' dash
    /// patterns and the markers' shapes, each when it tells series apart; the × of points not
    /// measured, and the limits the plot had no room to label. Each entry: its sample, its
    /// text, and a tooltip.
    fn key_groups(&self, limits: &[(&Limit, f64, Option<Text>)]) -> [Vec<KeyEntry>; 4] {
        let all: Vec<&Look> = (self.series.iter().map(|s| &s.look))
            .chain(self.gaps.iter().map(|g| &g.look))
            .collect();
        let drawn: Vec<&Look> = self.series.iter().map(|s| &s.look).collect();
        let entries = |tags: Vec<Tag>, swatch: fn(usize) -> Swatch| {
            tags.into_iter()
                .map(|t| (swatch(t.index), t.name, None))
                .collect::<Vec<KeyEntry>>()
        };
        let mut missing: Vec<KeyEntry> = Vec::new();
        if self.gaps.iter().any(|g| g.x.is_some()) {
            let why = "× on the x axis: a point not measured (hover over it for why)";
            missing.push((Swatch::Gap(None), "not measured".into(), Some(why.into())));
        }
        for gap in self.gaps.iter().filter(|g| g.x.is_none()) {
            let swatch = Swatch::Gap(Some(gap.look.color.index));
            missing.push((swatch, gap.describe(&gap.status), Some(gap.describe(&gap.why))));
        }
        for (limit, _, _) in limits.iter().filter(|(_, _, label)| label.is_none()) {
            missing.push((Swatch::Limit, limit.label.clone(), None));
        }
        [
            entries(distinct(&all, |l| &l.color), Swatch::Color),
            entries(telling(distinct(&all, |l| &l.dash)), Swatch::Dash),
            entries(telling(distinct(&drawn, |l| &l.marker)), Swatch::Marker),
            missing,
        ]
    }

    fn grid_and_axes(&self, svg: &mut String, x: &Axis, y: &Axis) {
        let bottom = TOP + PLOT_HEIGHT;
        for &t in &y.ticks {
            let py = Self::py(y, t);
            let _ = write!(
                svg,
                r#"<line class="grid" x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}"/><text class="tick" x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                WIDTH - RIGHT,
                LEFT - 6.0,
                py + 4.0,
                compact(t)
            );
        }
        for &t in &x.ticks {
            let px = Self::px(x, t);
            let _ = write!(
                svg,
                r#"<line class="grid" x1="{px:.1}" x2="{px:.1}" y1="{TOP}" y2="{bottom}"/><text class="tick" x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
                bottom + 16.0,
                compact(t)
            );
        }
        let _ = write!(
            svg,
            r#"<line class="axis" x1="{LEFT}" x2="{}" y1="{bottom}" y2="{bottom}"/><line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}"/>"#,
            WIDTH - RIGHT
        );
        let _ = write!(
            svg,
            r#"<text class="label" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            (LEFT + WIDTH - RIGHT) / 2.0,
            bottom + 36.0,
            escape(&self.x_label)
        );
        let _ = write!(
            svg,
            r#"<text class="label" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            TOP + PLOT_HEIGHT / 2.0,
            escape(&self.y_label)
        );
    }
}

/// A legend entry: its sample, its text, and a tooltip.
type KeyEntry = (Swatch, String, Option<String>);

/// The tags `pick` gives the looks, once each, in the order of their index.
fn distinct(looks: &[&Look], pick: fn(&Look) -> &Tag) -> Vec<Tag> {
    let mut tags: Vec<Tag> = Vec::new();
    for tag in looks.iter().map(|l| pick(l)) {
        if !tags.iter().any(|t| t.index == tag.index) {
            tags.push(tag.clone());
        }
    }
    tags.sort_by_key(|t| t.index);
    tags
}

/// The tags, when they tell series apart: several, or one with a name.
fn telling(tags: Vec<Tag>) -> Vec<Tag> {
    match tags.len() > 1 || tags.iter().any(|t| !t.name.is_empty()) {
        true => tags,
        false => Vec::new(),
    }
}

impl Gap {
    /// `<series>: <point> <what>` (without the point when the whole series lacks a metric).
    fn describe(&self, what: &str) -> String {
        match self.point.is_empty() {
            true => format!("{}: {what}", self.series),
            false => format!("{}: {} {what}", self.series, self.point),
        }
    }
}

impl Line<'_> {
    /// What a label must not cover: the markers and error bars.
    fn obstacles(&self) -> impl Iterator<Item = Rect> + '_ {
        self.marks.iter().flat_map(|m| {
            let marker = Rect::around(m.at.0, m.at.1, MARKER_HALF, MARKER_HALF);
            let bar = m.bar.as_ref().map(|b| Rect {
                x0: m.at.0 - 4.0,
                y0: b.top,
                x1: m.at.0 + 4.0,
                y1: b.bottom,
            });
            std::iter::once(marker).chain(bar)
        })
    }
}

/// Each point's label beside its marker (see [`label_beside`]), clear of `taken`, which it
/// joins; a label the same as one placed beside a point at (nearly) the same place is left out,
/// as it would only repeat it (the points of two runs at one level).
fn place_point_labels(lines: &mut [Line], taken: &mut Vec<Rect>) {
    let mut labelled: Vec<(&str, (f64, f64))> = Vec::new();
    for mark in lines.iter_mut().flat_map(|l| l.marks.iter_mut()) {
        let Some(text) = mark.point.label.as_deref() else {
            continue;
        };
        let near = |(x, y): (f64, f64)| (x - mark.at.0).hypot(y - mark.at.1) < 3.0 * MARKER_HALF;
        if labelled.iter().any(|(t, at)| *t == text && near(*at)) {
            continue;
        }
        mark.label = label_beside(mark.at, text, taken);
        if let Some(placed) = &mark.label {
            taken.push(placed.rect);
            labelled.push((text, mark.at));
        }
    }
}

/// A point's label placed beside its marker, on the first side where it covers nothing taken
/// and stays on the plot: above right, below right, above left, below left, right, left,
/// above, below; none when every side is taken.
fn label_beside((px, py): (f64, f64), text: &str, taken: &[Rect]) -> Option<Text> {
    let (d, up, down) = (MARKER_HALF + 1.5, py - MARKER_HALF - 2.0, py + MARKER_HALF + FONT);
    let sides = [
        (px + d, up, Anchor::Start),
        (px + d, down, Anchor::Start),
        (px - d, up, Anchor::End),
        (px - d, down, Anchor::End),
        (px + d + 2.0, py + 0.35 * FONT, Anchor::Start),
        (px - d - 2.0, py + 0.35 * FONT, Anchor::End),
        (px, up - 2.0, Anchor::Middle),
        (px, down + 2.0, Anchor::Middle),
    ];
    let candidates = sides.into_iter().map(|(x, baseline, anchor)| {
        let t = Text::new(x, baseline, anchor, text.to_string());
        let rect = t.rect;
        (t, rect)
    });
    first_free(candidates, &Chart::plot(), taken).map(|(t, _)| t)
}

fn dash_attr(index: usize) -> String {
    match DASHES[index % DASHES.len()] {
        "" => String::new(),
        dash => format!(r#" stroke-dasharray="{dash}""#),
    }
}

fn color(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// A marker of shape `shape` at (`x`, `y`) (class `marker`, or `swatch` in the legend), with its
/// tooltip.
fn write_marker(svg: &mut String, shape: usize, (x, y): (f64, f64), fill: &str, title: Option<&str>) {
    let class = match title {
        Some(_) => "marker",
        None => "swatch",
    };
    let h = MARKER_HALF;
    let body = match shape % MARKERS {
        0 => format!(r#"<circle class="{class}" cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{fill}""#),
        1 => format!(
            r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="7" height="7" fill="{fill}""#,
            x - 3.5,
            y - 3.5
        ),
        2 => format!(
            r#"<path class="{class}" d="M{x:.1},{:.1}L{:.1},{:.1}L{:.1},{:.1}Z" fill="{fill}""#,
            y - h,
            x + h,
            y + h - 1.0,
            x - h,
            y + h - 1.0
        ),
        _ => format!(
            r#"<path class="{class}" d="M{x:.1},{:.1}L{:.1},{y:.1}L{x:.1},{:.1}L{:.1},{y:.1}Z" fill="{fill}""#,
            y - h,
            x + h,
            y + h,
            x - h
        ),
    };
    svg.push_str(&body);
    match title {
        Some(title) => {
            let _ = write!(svg, "><title>{}</title>", escape(title));
            let end = match shape % MARKERS {
                0 => "</circle>",
                1 => "</rect>",
                _ => "</path>",
            };
            svg.push_str(end);
        }
        None => svg.push_str("/>"),
    }
}

fn write_text(svg: &mut String, class: &str, text: &Text) {
    let _ = write!(
        svg,
        r#"<text class="{class}" x="{:.1}" y="{:.1}" text-anchor="{}">{}</text>"#,
        text.x,
        text.baseline,
        text.anchor.svg(),
        escape(&text.text)
    );
}

fn draw_line(svg: &mut String, line: &Line) {
    let series = line.series;
    let stroke = color(series.look.color.index);
    let path: Vec<String> = line
        .marks
        .iter()
        .map(|m| format!("{:.1},{:.1}", m.at.0, m.at.1))
        .collect();
    let _ = write!(
        svg,
        r#"<g class="series" data-series="{}"><polyline fill="none" stroke="{stroke}" stroke-width="2"{} points="{}"/>"#,
        escape(&series.name),
        dash_attr(series.look.dash.index),
        path.join(" ")
    );
    for mark in &line.marks {
        let (px, _) = mark.at;
        if let Some(bar) = &mark.bar {
            // Cut at the floor, the bar ends in an arrowhead instead of a cap: the interval
            // goes on below.
            let low_cap = match bar.clipped {
                true => format!("M{:.1},{:.1}l3,4l3,-4", px - 3.0, bar.bottom - 4.0),
                false => format!("M{:.1},{:.1}h8", px - 4.0, bar.bottom),
            };
            let title = match bar.clipped {
                true => {
                    "<title>the 95% interval reaches below 0, which the quantity cannot: drawn to 0</title>"
                }
                false => "",
            };
            let _ = write!(
                svg,
                r#"<path class="error{}" d="M{px:.1},{:.1}V{:.1}M{:.1},{:.1}h8{low_cap}" stroke="{stroke}" stroke-width="1.2" fill="none">{title}</path>"#,
                if bar.clipped { " clipped" } else { "" },
                bar.top,
                bar.bottom,
                px - 4.0,
                bar.top,
            );
        }
        let title = format!("{}: {}", series.name, mark.point.tooltip);
        write_marker(svg, series.look.marker.index, mark.at, stroke, Some(&title));
        if let Some(label) = &mark.label {
            write_text(svg, "point", label);
        }
    }
    svg.push_str("</g>");
}

/// A point not measured: an × in its series' colour, the reason in its tooltip.
fn draw_gap(svg: &mut String, gap: &Gap, px: f64, py: f64) {
    let h = GAP_HALF;
    let _ = write!(
        svg,
        r#"<path class="gap" data-series="{}" d="M{:.1},{:.1}l{},{}M{:.1},{:.1}l{},-{}" stroke="{}" stroke-width="2" fill="none"><title>{}</title></path>"#,
        escape(&gap.series),
        px - h,
        py - h,
        2.0 * h,
        2.0 * h,
        px - h,
        py + h,
        2.0 * h,
        2.0 * h,
        color(gap.look.color.index),
        escape(&gap.describe(&gap.why))
    );
}

fn draw_key_item(svg: &mut String, item: &KeyItem) {
    let (x, y) = (item.x, item.y);
    let line = |svg: &mut String, stroke: &str, dash: String| {
        let _ = write!(
            svg,
            r#"<line x1="{x:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="{stroke}" stroke-width="2"{dash}/>"#,
            x + SWATCH
        );
    };
    svg.push_str("<g>");
    match item.swatch {
        Swatch::Color(i) => line(svg, color(i), String::new()),
        Swatch::Dash(i) => line(svg, KEY_COLOR, dash_attr(i)),
        Swatch::Marker(i) => write_marker(svg, i, (x + SWATCH / 2.0, y), KEY_COLOR, None),
        Swatch::Limit => line(svg, LIMIT_COLOR, r#" stroke-dasharray="2 3""#.into()),
        Swatch::Gap(of) => {
            let (cx, h) = (x + SWATCH / 2.0, GAP_HALF);
            let stroke = of.map_or(KEY_COLOR, color);
            let _ = write!(
                svg,
                r#"<path d="M{:.1},{:.1}l{},{}M{:.1},{:.1}l{},-{}" stroke="{stroke}" stroke-width="2" fill="none"/>"#,
                cx - h,
                y - h,
                2.0 * h,
                2.0 * h,
                cx - h,
                y + h,
                2.0 * h,
                2.0 * h
            );
        }
    }
    write_text(svg, "legend", &item.text);
    if let Some(title) = &item.title {
        let _ = write!(svg, "<title>{}</title>", escape(title));
    }
    svg.push_str("</g>");
}

/// A tooltip line: `C=16: 1647.2 output tok/s`.
pub fn tooltip(x_name: &str, x: f64, y: f64, y_unit: &str) -> String {
    format!("{x_name}={}: {} {y_unit}", format_number(x), format_number(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(index: usize, name: &str) -> Tag {
        Tag {
            index,
            name: name.into(),
        }
    }

    fn look(color: (usize, &str), dash: (usize, &str), marker: (usize, &str)) -> Look {
        Look {
            color: tag(color.0, color.1),
            dash: tag(dash.0, dash.1),
            marker: tag(marker.0, marker.1),
        }
    }

    fn points(xy: &[(f64, f64)], labels: bool) -> Vec<ChartPoint> {
        xy.iter()
            .map(|&(x, y)| ChartPoint {
                x,
                y,
                tooltip: tooltip("C", x, y, "tok/s"),
                label: labels.then(|| format!("C={x}")),
                error: None,
            })
            .collect()
    }

    fn chart(scale: Scale, xy: &[(f64, f64)]) -> Chart {
        Chart {
            kind: "test",
            title: "a <title> & more".into(),
            x_label: "concurrency".into(),
            y_label: "tok/s".into(),
            x_scale: scale,
            series: vec![ChartSeries {
                name: "host".into(),
                look: look((0, "host"), (1, "@run"), (0, "")),
                points: points(xy, false),
            }],
            limits: Vec::new(),
            gaps: Vec::new(),
            y_floor: Some(0.0),
        }
    }

    /// Every box drawn, by what it is.
    struct Boxes {
        markers: Vec<Rect>,
        gaps: Vec<Rect>,
        point_labels: Vec<Rect>,
        limit_labels: Vec<Rect>,
        legend: Vec<Rect>,
    }

    fn boxes(layout: &Layout) -> Boxes {
        let marks = || layout.lines.iter().flat_map(|l| &l.marks);
        Boxes {
            markers: layout.lines.iter().flat_map(Line::obstacles).collect(),
            gaps: layout
                .gaps
                .iter()
                .map(|(_, x, y)| Rect::around(*x, *y, GAP_HALF, GAP_HALF))
                .collect(),
            point_labels: marks().filter_map(|m| m.label.as_ref().map(|t| t.rect)).collect(),
            limit_labels: layout
                .limits
                .iter()
                .filter_map(|(_, _, t)| t.as_ref().map(|t| t.rect))
                .collect(),
            legend: layout
                .legend
                .iter()
                .flat_map(|i| [i.swatch_rect(), i.text.rect])
                .collect(),
        }
    }

    fn assert_apart(what: &str, a: &[Rect], b: &[Rect]) {
        for (i, r) in a.iter().enumerate() {
            for (j, o) in b.iter().enumerate() {
                let same = std::ptr::eq(a, b) && i == j;
                assert!(same || !r.overlaps(o), "{what}: {r:?} overlaps {o:?}");
            }
        }
    }

    /// Hosts × runs × percentiles with long names, every point labelled, limits through the
    /// data and points not measured: no text covers another, a marker or the plot.
    fn crowded(hosts: usize, runs: usize, markers: usize) -> Chart {
        let mut series = Vec::new();
        for h in 0..hosts {
            for r in 0..runs {
                for m in 0..markers {
                    let host = format!("host-{h}-of-the-lab.example.com/spec=nextn3");
                    let run = format!("@20261202T01{r:02}31Z");
                    let xy: Vec<(f64, f64)> = (0..9)
                        .map(|k| {
                            let c = 2f64.powi(k);
                            (c, (h + 1) as f64 * 40.0 * c.sqrt() + (r + m) as f64 * 3.0)
                        })
                        .collect();
                    series.push(ChartSeries {
                        name: format!("{host} {run} p{m}"),
                        look: look((h, &host), (r, &run), (m, &format!("p{m}9"))),
                        points: points(&xy, true),
                    });
                }
            }
        }
        let gap = |h: usize, x: Option<f64>| Gap {
            series: format!("host-{h}"),
            look: look((h, "host"), (0, ""), (0, "")),
            x,
            point: "C=512".into(),
            status: "skipped".into(),
            why: "skipped: concurrency * (input_len + output_len) > kv_capacity_tokens".into(),
        };
        Chart {
            kind: "test",
            title: "crowded".into(),
            x_label: "concurrency".into(),
            y_label: "TTFT (ms)".into(),
            x_scale: Scale::Log2,
            series,
            limits: vec![
                Limit {
                    y: 200.0,
                    label: "SLO median_ttft_ms ≤ 200".into(),
                },
                Limit {
                    y: 210.0,
                    label: "SLO p99_ttft_ms ≤ 210".into(),
                },
            ],
            gaps: (0..hosts)
                .map(|h| gap(h, Some(512.0)))
                .chain([gap(0, None)])
                .collect(),
            y_floor: Some(0.0),
        }
    }

    #[test]
    fn texts_cover_no_text_and_no_point_however_many_series_and_long_names() {
        for hosts in [1, 2, 3, 7, 9] {
            for runs in [1, 2, 3] {
                for markers in [1, 2] {
                    let chart = crowded(hosts, runs, markers);
                    let layout = chart.layout();
                    let b = boxes(&layout);
                    let case = format!("{hosts} hosts × {runs} runs × {markers} markers");
                    let plot = Chart::plot();
                    // The legend: its items apart, under the axis, inside the chart.
                    assert_apart(&case, &b.legend, &b.legend);
                    let chart_box = Rect {
                        x0: 0.0,
                        y0: TOP + PLOT_HEIGHT + AXIS_SPACE,
                        x1: WIDTH,
                        y1: layout.height,
                    };
                    for r in &b.legend {
                        assert!(
                            r.within(&chart_box),
                            "{case}: legend item {r:?} outside {chart_box:?}"
                        );
                    }
                    // Labels apart from each other and from every marker, bar, × and limit label.
                    let mut labels = b.point_labels.clone();
                    labels.extend(&b.limit_labels);
                    assert_apart(&case, &labels, &labels);
                    assert_apart(&case, &labels, &b.markers);
                    assert_apart(&case, &labels, &b.gaps);
                    for r in &labels {
                        assert!(r.within(&plot), "{case}: label {r:?} off the plot");
                    }
                    // Each limit is named: on the plot, or in the legend.
                    for (limit, _, label) in &layout.limits {
                        assert!(
                            label.is_some() || layout.legend.iter().any(|i| i.text.text == limit.label),
                            "{case}: {} unnamed",
                            limit.label
                        );
                    }
                    assert_eq!(chart.render(), chart.render(), "{case}: the same every time");
                }
            }
        }
        // Not by dropping every label: one series has room for all of them.
        let sparse = crowded(1, 1, 1);
        let layout = sparse.layout();
        let placed = layout.lines[0].marks.iter().filter(|m| m.label.is_some()).count();
        assert_eq!(placed, 9);
        assert_eq!(boxes(&layout).limit_labels.len(), 2);
    }

    #[test]
    fn the_legend_shows_the_hosts_colours_and_the_runs_dashes() {
        let layout_of = |chart: &Chart| {
            chart
                .layout()
                .legend
                .iter()
                .map(|i| {
                    let kind = match i.swatch {
                        Swatch::Color(c) => format!("colour {c}"),
                        Swatch::Dash(d) => format!("dash {d}"),
                        Swatch::Marker(m) => format!("marker {m}"),
                        Swatch::Gap(_) => "gap".into(),
                        Swatch::Limit => "limit".into(),
                    };
                    format!("{kind}: {}", i.text.text)
                })
                .collect::<Vec<_>>()
        };
        let mut c = chart(Scale::Log2, &[(1.0, 1.0), (2.0, 2.0)]);
        let mut other = c.series[0].clone();
        other.name = "b @2".into();
        other.look = look((1, "b"), (2, "@2"), (0, ""));
        c.series.push(other);
        assert_eq!(
            layout_of(&c),
            ["colour 0: host", "colour 1: b", "dash 1: @run", "dash 2: @2"]
        );
        let svg = c.render();
        assert!(
            svg.contains(&format!(
                r#"stroke="{}" stroke-width="2" stroke-dasharray="{}""#,
                PALETTE[1], DASHES[2]
            )),
            "{svg}"
        );
        // One host, one run, no variant: the colour alone.
        c.series.truncate(1);
        c.series[0].look.dash.name.clear();
        assert_eq!(layout_of(&c), ["colour 0: host"]);
    }

    #[test]
    fn an_error_bar_below_zero_is_cut_at_the_axis_which_starts_at_zero() {
        let mut c = chart(Scale::Log2, &[(1.0, 10.0), (4.0, 300.0)]);
        c.series[0].points[0].error = Some(60.0);
        c.series[0].points[1].error = Some(50.0);
        let layout = c.layout();
        assert_eq!(layout.y.ticks[0], 0.0, "{:?}", layout.y.ticks);
        let bars: Vec<&Bar> = layout.lines[0]
            .marks
            .iter()
            .filter_map(|m| m.bar.as_ref())
            .collect();
        let bottom = TOP + PLOT_HEIGHT;
        assert!(
            bars[0].clipped && (bars[0].bottom - bottom).abs() < 1e-9,
            "ends at the axis"
        );
        assert!(!bars[1].clipped && bars[1].bottom < bottom);
        assert_eq!(bars[1].bottom, Chart::py(&layout.y, 250.0));
        assert_eq!(bars[1].top, Chart::py(&layout.y, 350.0));
        let svg = c.render();
        assert_eq!(svg.matches(r#"<path class="error clipped""#).count(), 1, "{svg}");
        assert_eq!(svg.matches(r#"<path class="error""#).count(), 1, "{svg}");
        // The cut bar has its upper cap and an arrowhead at the axis; the whole one two caps.
        let caps = |class: &str| {
            let at = svg.find(&format!(r#"<path class="{class}""#)).unwrap();
            svg[at..].split("</path>").next().unwrap().matches("h8").count()
        };
        assert_eq!((caps("error clipped"), caps("error")), (1, 2));
        assert!(svg.contains("l3,4l3,-4"), "{svg}");
        // Without a floor the axis holds the whole interval.
        c.y_floor = None;
        assert!(c.layout().y.ticks[0] < 0.0);
    }

    #[test]
    fn points_not_measured_are_marked_on_the_axis_or_named_in_the_legend() {
        let mut c = chart(Scale::Log2, &[(1.0, 100.0), (4.0, 400.0)]);
        let gap = |series: &str, x| Gap {
            series: series.into(),
            look: look((0, "host"), (1, "@run"), (0, "")),
            x,
            point: "C=16".into(),
            status: "skipped".into(),
            why: "skipped: too big <for> the cache".into(),
        };
        c.gaps = vec![
            gap("host", Some(16.0)),
            gap("other", Some(16.0)),
            gap("third", None),
        ];
        let layout = c.layout();
        let x = Chart::px(&layout.x, 16.0);
        let at: Vec<(f64, f64)> = layout.gaps.iter().map(|(_, x, y)| (*x, *y)).collect();
        let bottom = TOP + PLOT_HEIGHT;
        assert_eq!(at, [(x, bottom), (x, bottom - GAP_STACK)], "on the axis, stacked");
        assert_eq!(layout.x.max, 16.0, "the x axis reaches them");
        let svg = c.render();
        assert!(
            svg.contains("<title>host: C=16 skipped: too big &lt;for&gt; the cache</title>"),
            "{svg}"
        );
        let legend: Vec<&str> = layout.legend.iter().map(|i| i.text.text.as_str()).collect();
        assert!(legend.contains(&"not measured"), "{legend:?}");
        assert!(legend.contains(&"third: C=16 skipped"), "{legend:?}");
    }

    #[test]
    fn a_limit_label_moves_off_a_point_and_into_the_legend_when_the_plot_has_no_room() {
        // A point right where the label would go: at the right end, just above the line.
        let mut c = chart(Scale::Linear, &[(0.0, 0.0), (100.0, 1000.0), (96.0, 1010.0)]);
        c.limits.push(Limit {
            y: 1000.0,
            label: "SLO p99 ≤ 1000 <ms>".into(),
        });
        let layout = c.layout();
        let b = boxes(&layout);
        assert_eq!(b.limit_labels.len(), 1);
        assert_apart("limit", &b.limit_labels, &b.markers);
        assert!(c.render().contains(">SLO p99 ≤ 1000 &lt;ms&gt;</text>"));
        // A point every few pixels along the line: nowhere on the plot is free.
        let along: Vec<(f64, f64)> = (0..=200).map(|i| (f64::from(i), 1000.0)).collect();
        c.series[0].points = points(&along, false);
        let layout = c.layout();
        assert!(layout.limits[0].2.is_none());
        assert!(layout
            .legend
            .iter()
            .any(|i| matches!(i.swatch, Swatch::Limit) && i.text.text == "SLO p99 ≤ 1000 <ms>"));
    }

    #[test]
    fn a_label_repeating_one_beside_the_same_place_is_left_out() {
        let mut c = chart(Scale::Log2, &[(1.0, 100.0), (4.0, 300.0)]);
        c.series[0].points = points(&[(1.0, 100.0), (4.0, 300.0)], true);
        let mut again = c.series[0].clone();
        again.points = points(&[(1.0, 101.0), (4.0, 600.0)], true);
        c.series.push(again);
        let layout = c.layout();
        let labels: Vec<&str> = layout
            .lines
            .iter()
            .flat_map(|l| &l.marks)
            .filter_map(|m| m.label.as_ref().map(|t| t.text.as_str()))
            .collect();
        assert_eq!(labels, ["C=1", "C=4", "C=4"]);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_step(430.0), 500.0);
        assert_eq!(nice_step(0.18), 0.2);
        assert_eq!(nice_step(2.2), 2.5);
        let y = Axis::new(Scale::Linear, [172.0, 2156.0].into_iter());
        assert_eq!(y.ticks, vec![0.0, 500.0, 1000.0, 1500.0, 2000.0, 2500.0]);
        let x = Axis::new(Scale::Log2, [1.0, 4.0, 16.0, 32.0].into_iter());
        assert_eq!(x.ticks, vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]);
        assert_eq!((x.fraction(1.0), x.fraction(32.0)), (0.0, 1.0));
        let wide = Axis::new(Scale::Log2, [1.0, 1024.0 * 1024.0].into_iter());
        assert!(wide.ticks.len() <= 11, "{:?}", wide.ticks);
    }

    #[test]
    fn compact_numbers() {
        assert_eq!(compact(500.0), "500");
        assert_eq!(compact(1500.0), "1.5k");
        assert_eq!(compact(32768.0), "32.8k");
        assert_eq!(compact(2_000_000.0), "2M");
        assert_eq!(compact(0.25), "0.25");
    }

    #[test]
    fn renders_escaped_svg_with_a_marker_per_point() {
        let svg = chart(Scale::Log2, &[(1.0, 172.0), (4.0, 542.0), (16.0, 1647.0)]).render();
        assert!(
            svg.starts_with("<svg class=\"chart\" data-chart=\"test\""),
            "{svg}"
        );
        assert!(svg.contains("a &lt;title&gt; &amp; more"));
        assert_eq!(svg.matches(r#"class="marker""#).count(), 3);
        assert!(svg.contains("stroke-dasharray"));
        assert!(svg.contains("<title>host: C=16: 1647 tok/s</title>"), "{svg}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn a_limit_is_a_labelled_line_within_the_y_axis() {
        let mut c = chart(Scale::Log2, &[(1.0, 100.0), (4.0, 400.0)]);
        c.limits.push(Limit {
            y: 2000.0,
            label: "SLO p99 ≤ 2000 <ms>".into(),
        });
        let svg = c.render();
        assert!(
            svg.contains(r#"<g class="limit"><line x1="72" x2="696" y1="40.0" y2="40.0""#),
            "the axis grows to the limit, at the top: {svg}"
        );
        assert!(svg.contains(">SLO p99 ≤ 2000 &lt;ms&gt;</text>"), "{svg}");
    }

    #[test]
    fn degenerate_data_still_draws() {
        let svg = chart(Scale::Log2, &[(8.0, 0.0)]).render();
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        let svg = chart(Scale::Linear, &[]).render();
        assert!(!svg.contains("NaN"), "{svg}");
    }
}
