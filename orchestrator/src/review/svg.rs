//! Static SVG charts, written as text: no script, no fonts or styles from
//! anywhere else, so a report opens the same offline, in a mail attachment or
//! in a CI artifact, as on the machine that made it.

use std::fmt::Write;

pub const PLOT_W: f64 = 760.0;
pub const PLOT_H: f64 = 300.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 34.0;
const BOTTOM: f64 = 48.0;
/// The baseline of the first legend row.
const LEGEND_Y: f64 = TOP + PLOT_H + BOTTOM + 8.0;

/// Escapes text for HTML and SVG content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Marker shapes, so kept, discarded and failed points differ in print and
/// for readers who do not tell the colours apart.
#[derive(Clone, Copy)]
pub enum Marker {
    Dot,
    Ring,
    Cross,
    Square,
}

/// Half the width of an interval's caps: wider than every marker (at most
/// 5.5 px from its centre), so a cap always shows beside one.
const CAP: f64 = 7.0;

/// How [`Chart::estimate`] draws a point and its interval.
#[derive(Clone, Copy)]
pub struct PointStyle<'a> {
    pub color: &'a str,
    pub marker: Marker,
    pub interval: &'a str,
}

/// About five round tick values covering [lo, hi].
pub fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(v);
        v += step;
    }
    out
}

fn tick_label(v: f64) -> String {
    if v.abs() < 1e-9 {
        "0".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}").trim_end_matches(".0").to_string()
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// One chart: data coordinates mapped onto a fixed plot area.
pub struct Chart {
    id: String,
    title: String,
    x_label: String,
    y_label: String,
    x: (f64, f64),
    y: (f64, f64),
    x_ticks: Vec<(f64, String)>,
    body: String,
    legend: Vec<(String, String)>,
}

impl Chart {
    /// `y` is widened by 5% each way so points never sit on the frame.
    pub fn new(id: &str, title: &str, x: (f64, f64), y: (f64, f64)) -> Self {
        let pad = ((y.1 - y.0).abs() * 0.05).max(1e-9);
        Self {
            id: id.into(),
            title: title.into(),
            x_label: String::new(),
            y_label: String::new(),
            x,
            y: (y.0 - pad, y.1 + pad),
            x_ticks: Vec::new(),
            body: String::new(),
            legend: Vec::new(),
        }
    }

    pub fn labels(mut self, x: &str, y: &str) -> Self {
        self.x_label = x.into();
        self.y_label = y.into();
        self
    }

    pub fn x_ticks(mut self, ticks: Vec<(f64, String)>) -> Self {
        self.x_ticks = ticks;
        self
    }

    pub fn px(&self, x: f64) -> f64 {
        let span = (self.x.1 - self.x.0).max(1e-9);
        LEFT + (x - self.x.0) / span * PLOT_W
    }

    pub fn py(&self, y: f64) -> f64 {
        let span = (self.y.1 - self.y.0).max(1e-9);
        TOP + PLOT_H - (y.clamp(self.y.0, self.y.1) - self.y.0) / span * PLOT_H
    }

    pub fn legend(&mut self, color: &str, label: &str) {
        self.legend.push((color.into(), label.into()));
    }

    pub fn marker(&mut self, x: f64, y: f64, color: &str, marker: Marker, tip: &str) {
        let (cx, cy) = (self.px(x), self.py(y));
        let tip = format!("<title>{}</title>", escape(tip));
        let _ = match marker {
            Marker::Dot => write!(
                self.body,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="5" fill="{color}">{tip}</circle>"#
            ),
            Marker::Ring => write!(
                self.body,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="4.5" fill="white" stroke="{color}" stroke-width="2">{tip}</circle>"#
            ),
            Marker::Square => write!(
                self.body,
                r#"<rect x="{:.1}" y="{:.1}" width="9" height="9" fill="{color}">{tip}</rect>"#,
                cx - 4.5,
                cy - 4.5
            ),
            Marker::Cross => write!(
                self.body,
                r#"<path d="M{:.1} {:.1}L{:.1} {:.1}M{:.1} {:.1}L{:.1} {:.1}" stroke="{color}" stroke-width="3">{tip}</path>"#,
                cx - 5.0,
                cy - 5.0,
                cx + 5.0,
                cy + 5.0,
                cx - 5.0,
                cy + 5.0,
                cx + 5.0,
                cy - 5.0
            ),
        };
    }

    /// A line through `points`; with `steps`, horizontal then vertical (a staircase).
    pub fn line(&mut self, points: &[(f64, f64)], color: &str, width: f64, steps: bool) {
        if points.is_empty() {
            return;
        }
        let mut d = format!("M{:.1} {:.1}", self.px(points[0].0), self.py(points[0].1));
        for w in points.windows(2) {
            if steps {
                let _ = write!(d, "H{:.1}", self.px(w[1].0));
            }
            let _ = write!(d, "L{:.1} {:.1}", self.px(w[1].0), self.py(w[1].1));
        }
        let _ = write!(
            self.body,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="{width}"/>"#
        );
    }

    /// A point estimate at (`x`, `y`) with its interval [lo, hi] drawn over
    /// the marker, caps wider than any marker: an interval narrower than the
    /// marker would otherwise vanish behind it and read as no interval.
    pub fn estimate(&mut self, x: f64, y: f64, ci: Option<[f64; 2]>, style: PointStyle, tip: &str) {
        self.marker(x, y, style.color, style.marker, tip);
        if let Some([lo, hi]) = ci {
            let (cx, y0, y1) = (self.px(x), self.py(lo), self.py(hi));
            let _ = write!(
                self.body,
                r#"<path d="M{cx:.1} {y0:.1}V{y1:.1}M{:.1} {y0:.1}H{:.1}M{:.1} {y1:.1}H{:.1}" stroke="{}" stroke-width="2.5" fill="none"/>"#,
                cx - CAP,
                cx + CAP,
                cx - CAP,
                cx + CAP,
                style.interval
            );
        }
    }

    /// A dashed horizontal reference line with a label at its right end,
    /// above the line or, with `below`, under it.
    pub fn reference(&mut self, y: f64, color: &str, label: &str, below: bool) {
        let py = self.py(y);
        let label_y = if below { py + 14.0 } else { py - 4.0 };
        let _ = write!(
            self.body,
            r#"<line x1="{LEFT}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}" stroke="{color}" stroke-dasharray="6 4" stroke-width="1.5"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="{color}">{}</text>"#,
            LEFT + PLOT_W,
            LEFT + PLOT_W - 4.0,
            label_y,
            escape(label)
        );
    }

    /// A bar from y = 0 (or the axis floor) to `value`, `width` in x units.
    pub fn bar(&mut self, x: f64, width: f64, value: f64, color: &str, tip: &str) {
        let x0 = self.px(x - width / 2.0);
        let x1 = self.px(x + width / 2.0);
        let base = self.py(0.0f64.max(self.y.0));
        let top = self.py(value);
        let _ = write!(
            self.body,
            r#"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{}</title></rect>"#,
            top.min(base),
            (x1 - x0).max(1.0),
            (base - top).abs(),
            escape(tip)
        );
    }

    pub fn text(&mut self, x: f64, y: f64, s: &str) {
        let _ = write!(
            self.body,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#333">{}</text>"##,
            self.px(x),
            self.py(y) - 6.0,
            escape(s)
        );
    }

    /// Where each legend entry goes: left to right, wrapping into rows that
    /// fit the plot's width (text width estimated at 7 px a character).
    fn legend_layout(&self) -> Vec<(f64, f64, &str, &str)> {
        let (mut x, mut y) = (LEFT, LEGEND_Y);
        let mut out = Vec::new();
        for (color, label) in &self.legend {
            let w = 30.0 + 7.0 * label.chars().count() as f64;
            if x > LEFT && x + w > LEFT + PLOT_W {
                x = LEFT;
                y += 18.0;
            }
            out.push((x, y, color.as_str(), label.as_str()));
            x += w;
        }
        out
    }

    pub fn render(&self) -> String {
        let w = LEFT + PLOT_W + RIGHT;
        let legend = self.legend_layout();
        let rows = legend
            .last()
            .map_or(0.0, |(_, y, _, _)| (y - LEGEND_Y) / 18.0 + 1.0);
        let h = TOP + PLOT_H + BOTTOM + rows * 18.0 + 4.0;
        let mut s = format!(
            r#"<svg class="chart" data-chart="{}" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif">"#,
            escape(&self.id)
        );
        let _ = write!(
            s,
            r##"<text x="{LEFT}" y="20" font-size="14" font-weight="bold" fill="#222">{}</text>"##,
            escape(&self.title)
        );
        for t in ticks(self.y.0, self.y.1) {
            let py = self.py(t);
            let _ = write!(
                s,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{py:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#555">{}</text>"##,
                LEFT + PLOT_W,
                LEFT - 6.0,
                py + 4.0,
                tick_label(t)
            );
        }
        for (x, label) in &self.x_ticks {
            let px = self.px(*x);
            let _ = write!(
                s,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{:.1}" y2="{:.1}" stroke="#999"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#555">{}</text>"##,
                TOP + PLOT_H,
                TOP + PLOT_H + 5.0,
                TOP + PLOT_H + 18.0,
                escape(label)
            );
        }
        let _ = write!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#999"/>"##
        );
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#333">{}</text><text transform="translate(16 {:.1}) rotate(-90)" font-size="12" text-anchor="middle" fill="#333">{}</text>"##,
            LEFT + PLOT_W / 2.0,
            TOP + PLOT_H + 36.0,
            escape(&self.x_label),
            TOP + PLOT_H / 2.0,
            escape(&self.y_label)
        );
        s += &self.body;
        // Swatches are translucent, so a pixel of a chart's exact ink is
        // always a data mark (the report's rendering check relies on it).
        for (lx, ly, color, label) in legend {
            let _ = write!(
                s,
                r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{color}" fill-opacity="0.8"/><text x="{:.1}" y="{ly:.1}" font-size="12" fill="#333">{}</text>"##,
                ly - 10.0,
                lx + 16.0,
                escape(label)
            );
        }
        s += "</svg>";
        s
    }
}

/// The range of `values` (ignoring non-finite ones), or `fallback` when empty.
pub fn range(values: impl Iterator<Item = f64>, fallback: (f64, f64)) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if lo.is_finite() {
        (lo, hi)
    } else {
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            ticks(0.0, 1.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = ticks(12_300.0, 25_900.0);
        assert!(t.iter().all(|v| v % 2500.0 == 0.0), "{t:?}");
        assert!(t.first().unwrap() >= &12_300.0 && t.last().unwrap() <= &25_900.0);
    }

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("<b a=\"x\">&'"),
            "&lt;b a=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn coordinates_map_ends_to_the_plot_frame() {
        let c = Chart::new("t", "t", (0.0, 10.0), (0.0, 1.0));
        assert_eq!(c.px(0.0), LEFT);
        assert_eq!(c.px(10.0), LEFT + PLOT_W);
        assert!(c.py(1.0) > TOP && c.py(0.0) < TOP + PLOT_H);
        assert!(c.py(100.0) >= TOP, "clamped");
    }

    #[test]
    fn a_chart_renders_its_title_escaped_and_its_marks() {
        let mut c = Chart::new("cost", "a <b>", (0.0, 2.0), (0.0, 5.0));
        c.marker(1.0, 2.0, "#123456", Marker::Dot, "one");
        c.line(&[(0.0, 1.0), (2.0, 3.0)], "#654321", 2.0, true);
        let s = c.render();
        assert!(s.starts_with("<svg class=\"chart\" data-chart=\"cost\""));
        assert!(s.contains("a &lt;b&gt;") && s.contains("#123456") && s.contains("H"));
        assert!(s.ends_with("</svg>"));
    }

    #[test]
    fn an_interval_narrower_than_its_marker_is_drawn_over_it() {
        let mut c = Chart::new("t", "t", (0.0, 2.0), (0.0, 10.0));
        let style = PointStyle {
            color: "#111111",
            marker: Marker::Ring,
            interval: "#222222",
        };
        c.estimate(1.0, 5.0, Some([4.99, 5.01]), style, "tight");
        let s = c.render();
        let (ring, interval) = (s.find("#111111").unwrap(), s.find("#222222").unwrap());
        assert!(ring < interval, "the interval comes after the marker: {s}");
        let cx = c.px(1.0);
        assert!(s.contains(&format!("M{:.1} ", cx - CAP)) && CAP > 5.5);
    }
}
