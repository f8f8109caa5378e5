//! Line charts as inline SVG, written by hand: axes with round ticks (linear, or log2 for
//! concurrency), one line per series with a marker and a tooltip (`<title>`) per point, a legend,
//! and horizontal lines at limits (an SLO's latency bounds).
//! No script and no external resource, so a report works offline and pastes anywhere.

use std::fmt::Write as _;

use super::cell::format_number;

/// Colours that stay distinct for colour-blind readers (Okabe–Ito), then black.
const PALETTE: &[&str] = &[
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// The colour of limit lines: a red none of the series has.
const LIMIT_COLOR: &str = "#B3261E";

const WIDTH: f64 = 720.0;
const PLOT_HEIGHT: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 40.0;
/// Below the plot: tick labels and the x axis title.
const AXIS_SPACE: f64 = 52.0;
const LEGEND_ROW: f64 = 20.0;
const LEGEND_COLUMNS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Powers of two, for concurrency levels.
    Log2,
}

/// One point: x, y, and the text of its tooltip.
#[derive(Clone, Debug)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub tooltip: String,
    /// A short label drawn beside the marker (e.g. the concurrency on the trade-off view).
    pub label: Option<String>,
    /// Half the height of an error bar around `y` (a repeated point's 95% interval).
    pub error: Option<f64>,
}

#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    /// Index into the palette: series of one host share a colour across charts.
    pub color: usize,
    pub dashed: bool,
    pub points: Vec<Point>,
}

#[derive(Clone, Debug)]
pub struct Chart {
    /// What the chart shows, for the DOM (`data-chart`) and tests.
    pub kind: &'static str,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub series: Vec<Series>,
    /// Horizontal lines across the plot: a limit on the y metric, named.
    pub limits: Vec<Limit>,
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

impl Chart {
    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let x = Axis::new(self.x_scale, self.points().map(|p| p.x));
        let limits = self.limits.iter().map(|l| l.y);
        let bars = self.points().flat_map(|p| {
            let e = p.error.unwrap_or(0.0);
            [p.y - e, p.y + e]
        });
        let y = Axis::new(
            Scale::Linear,
            self.points().map(|p| p.y).chain(limits).chain(bars),
        );
        let legend_rows = self.series.len().div_ceil(LEGEND_COLUMNS);
        let height = TOP + PLOT_HEIGHT + AXIS_SPACE + legend_rows as f64 * LEGEND_ROW + 8.0;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg class="chart" data-chart="{}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{}">"#,
            self.kind,
            escape(&self.title)
        );
        let _ = write!(
            svg,
            r#"<text class="title" x="{LEFT}" y="22">{}</text>"#,
            escape(&self.title)
        );
        self.grid_and_axes(&mut svg, &x, &y);
        for series in &self.series {
            self.line(&mut svg, series, &x, &y);
        }
        for limit in &self.limits {
            let py = Self::py(&y, limit.y);
            let _ = write!(
                svg,
                r#"<g class="limit"><line x1="{LEFT}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="{LIMIT_COLOR}" stroke-width="1.5" stroke-dasharray="2 3"/><text class="legend" x="{}" y="{:.1}" text-anchor="end">{}</text></g>"#,
                WIDTH - RIGHT,
                WIDTH - RIGHT - 4.0,
                py - 4.0,
                escape(&limit.label)
            );
        }
        self.legend(&mut svg, TOP + PLOT_HEIGHT + AXIS_SPACE);
        svg.push_str("</svg>");
        svg
    }

    fn points(&self) -> impl Iterator<Item = &Point> {
        self.series.iter().flat_map(|s| s.points.iter())
    }

    fn px(x: &Axis, v: f64) -> f64 {
        LEFT + x.fraction(v) * (WIDTH - LEFT - RIGHT)
    }

    fn py(y: &Axis, v: f64) -> f64 {
        TOP + PLOT_HEIGHT - y.fraction(v) * PLOT_HEIGHT
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

    fn line(&self, svg: &mut String, series: &Series, x: &Axis, y: &Axis) {
        let color = PALETTE[series.color % PALETTE.len()];
        let mut points: Vec<&Point> = series.points.iter().collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", Self::px(x, p.x), Self::py(y, p.y)))
            .collect();
        let dash = if series.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            svg,
            r#"<g class="series" data-series="{}"><polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            escape(&series.name),
            path.join(" ")
        );
        for p in points {
            let (px, py) = (Self::px(x, p.x), Self::py(y, p.y));
            if let Some(e) = p.error.filter(|e| *e > 0.0) {
                let (top, bottom) = (Self::py(y, p.y + e), Self::py(y, p.y - e));
                let _ = write!(
                    svg,
                    r#"<path class="error" d="M{px:.1},{top:.1}V{bottom:.1}M{:.1},{top:.1}h8M{:.1},{bottom:.1}h8" stroke="{color}" stroke-width="1.2" fill="none"/>"#,
                    px - 4.0,
                    px - 4.0
                );
            }
            let _ = write!(
                svg,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{color}"><title>{}</title></circle>"#,
                escape(&format!("{}: {}", series.name, p.tooltip))
            );
            if let Some(label) = &p.label {
                let _ = write!(
                    svg,
                    r#"<text class="point" x="{:.1}" y="{:.1}">{}</text>"#,
                    px + 5.0,
                    py - 5.0,
                    escape(label)
                );
            }
        }
        svg.push_str("</g>");
    }

    fn legend(&self, svg: &mut String, top: f64) {
        let column_width = (WIDTH - LEFT - RIGHT) / LEGEND_COLUMNS as f64;
        for (i, series) in self.series.iter().enumerate() {
            let color = PALETTE[series.color % PALETTE.len()];
            let lx = LEFT + (i % LEGEND_COLUMNS) as f64 * column_width;
            let ly = top + (i / LEGEND_COLUMNS) as f64 * LEGEND_ROW;
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = write!(
                svg,
                r#"<line x1="{lx:.1}" x2="{:.1}" y1="{ly:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"{dash}/><text class="legend" x="{:.1}" y="{:.1}">{}</text>"#,
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                escape(&series.name)
            );
        }
    }
}

/// A tooltip line: `C=16: 1647.2 output tok/s`.
pub fn tooltip(x_name: &str, x: f64, y: f64, y_unit: &str) -> String {
    format!("{x_name}={}: {} {y_unit}", format_number(x), format_number(y))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(scale: Scale, points: &[(f64, f64)]) -> Chart {
        Chart {
            kind: "test",
            title: "a <title> & more".into(),
            x_label: "concurrency".into(),
            y_label: "tok/s".into(),
            x_scale: scale,
            series: vec![Series {
                name: "host".into(),
                color: 0,
                dashed: true,
                points: points
                    .iter()
                    .map(|&(x, y)| Point {
                        x,
                        y,
                        tooltip: tooltip("C", x, y, "tok/s"),
                        label: None,
                        error: None,
                    })
                    .collect(),
            }],
            limits: Vec::new(),
        }
    }

    #[test]
    fn an_error_bar_is_drawn_around_its_point_and_the_axis_holds_it() {
        let mut c = chart(Scale::Log2, &[(1.0, 100.0), (4.0, 300.0)]);
        c.series[0].points[1].error = Some(50.0);
        let svg = c.render();
        assert_eq!(svg.matches(r#"<path class="error""#).count(), 1, "{svg}");
        // The bar spans 250 to 350: the axis reaches 350 at least.
        let y = Axis::new(Scale::Linear, [100.0, 250.0, 350.0].into_iter());
        let (top, bottom) = (Chart::py(&y, 350.0), Chart::py(&y, 250.0));
        assert!(
            svg.contains(&format!("V{bottom:.1}")) && svg.contains(&format!(",{top:.1}V")),
            "{svg}"
        );
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
        assert_eq!(svg.matches("<circle").count(), 3);
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
        assert!(svg.contains(">SLO p99 ≤ 2000 &lt;ms&gt;</text></g>"), "{svg}");
    }

    #[test]
    fn degenerate_data_still_draws() {
        let svg = chart(Scale::Log2, &[(8.0, 0.0)]).render();
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        let svg = chart(Scale::Linear, &[]).render();
        assert!(!svg.contains("NaN"), "{svg}");
    }
}
