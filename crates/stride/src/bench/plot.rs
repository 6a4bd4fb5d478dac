//! Hand-written SVG charts for the benchmark reports: line charts (also used
//! for CDFs, as step lines), grouped box plots and bar charts with error
//! bars, each with axes, ticks, labels and a legend. Linear or logarithmic
//! axes.

use std::fmt::Write as _;

/// Distinguishable colours (one per series; cycled).
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

#[derive(Debug, Clone, Copy)]
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub log: bool,
}

impl Axis {
    /// An axis covering `values` (padded a little), logarithmic if asked and
    /// every value is positive.
    pub fn fit(values: impl IntoIterator<Item = f64>, log: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.into_iter().filter(|v| v.is_finite()) {
            if log && v <= 0.0 {
                continue;
            }
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        if log {
            let (l, h) = (lo.log10().floor(), hi.log10().ceil());
            let h = if h <= l { l + 1.0 } else { h };
            Axis {
                min: 10f64.powf(l),
                max: 10f64.powf(h),
                log: true,
            }
        } else {
            if hi <= lo {
                hi = lo + 1.0;
            }
            let pad = (hi - lo) * 0.05;
            let step = nice_step((hi - lo + 2.0 * pad) / 6.0);
            let min = if lo >= 0.0 && lo - pad < 0.0 {
                0.0
            } else {
                ((lo - pad) / step).floor() * step
            };
            Axis {
                min,
                max: ((hi + pad) / step).ceil() * step,
                log: false,
            }
        }
    }

    /// Position in [0, 1] along the axis.
    pub fn frac(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.min * 1e-3);
            (v.log10() - self.min.log10()) / (self.max.log10() - self.min.log10())
        } else {
            (v - self.min) / (self.max - self.min)
        }
    }

    /// Tick values: decades (with 2 and 5 when few) on log axes, nice steps
    /// otherwise.
    pub fn ticks(&self) -> Vec<f64> {
        let mut out = Vec::new();
        if self.log {
            let (l, h) = (
                self.min.log10().round() as i32,
                self.max.log10().round() as i32,
            );
            let mults: &[f64] = if h - l <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
            for e in l..=h {
                for m in mults {
                    let v = m * 10f64.powi(e);
                    if v >= self.min * 0.999 && v <= self.max * 1.001 {
                        out.push(v);
                    }
                }
            }
        } else {
            let step = nice_step((self.max - self.min) / 6.0);
            let mut v = (self.min / step).ceil() * step;
            while v <= self.max + step * 1e-6 {
                out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                v += step;
            }
        }
        out
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw > 0.0 && raw.is_finite()) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw * 0.999)
        .unwrap_or(10.0 * p)
}

/// A tick label: short and without float noise.
pub fn label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 10.0 || (v.fract()).abs() < 1e-9 {
        format!("{}", (v * 1e3).round() / 1e3)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The frame shared by all charts: title, plot area, y axis with grid, and
/// axis labels. Returns the SVG so far.
fn frame(title: &str, x_label: &str, y_label: &str, y: &Axis) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        esc(title)
    );
    let (x0, x1, y0, y1) = area();
    for t in y.ticks() {
        let py = y1 - y.frac(t) * (y1 - y0);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            py + 4.0,
            label(t)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        x1 - x0,
        y1 - y0
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 14.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
    s
}

/// Plot area: (left, right, top, bottom) in pixels.
fn area() -> (f64, f64, f64, f64) {
    (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM)
}

/// One legend entry per (name, colour, dashed).
fn legend(s: &mut String, entries: &[(String, String, bool)]) {
    let x = WIDTH - RIGHT + 14.0;
    for (i, (name, color, dashed)) in entries.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 18.0;
        let dash = if *dashed {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2.5"{dash}/><text x="{}" y="{}">{}</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            esc(name)
        );
    }
}

fn x_ticks(s: &mut String, x: &Axis) {
    let (x0, x1, _, y1) = area();
    for t in x.ticks() {
        let px = x0 + x.frac(t) * (x1 - x0);
        let _ = writeln!(
            s,
            r#"<line x1="{px:.1}" y1="{y1}" x2="{px:.1}" y2="{}" stroke="black"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"#,
            y1 + 5.0,
            y1 + 18.0,
            label(t)
        );
    }
}

/// A named line of points.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: String,
    pub dashed: bool,
    /// Draw a marker on every point.
    pub markers: bool,
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

impl LineChart {
    pub fn svg(&self) -> String {
        let pts = || self.series.iter().flat_map(|s| s.points.iter());
        let x = Axis::fit(pts().map(|p| p.0), self.log_x);
        let y = Axis::fit(pts().map(|p| p.1), self.log_y);
        let mut s = frame(&self.title, &self.x_label, &self.y_label, &y);
        x_ticks(&mut s, &x);
        let (x0, x1, y0, y1) = area();
        let px = |v: f64| x0 + x.frac(v).clamp(0.0, 1.0) * (x1 - x0);
        let py = |v: f64| y1 - y.frac(v).clamp(0.0, 1.0) * (y1 - y0);
        for series in &self.series {
            let valid: Vec<_> = series
                .points
                .iter()
                .filter(|(a, b)| {
                    a.is_finite()
                        && b.is_finite()
                        && (!self.log_x || *a > 0.0)
                        && (!self.log_y || *b > 0.0)
                })
                .collect();
            if valid.is_empty() {
                continue;
            }
            let path: Vec<String> = valid
                .iter()
                .map(|(a, b)| format!("{:.1},{:.1}", px(*a), py(*b)))
                .collect();
            let dash = if series.dashed {
                r#" stroke-dasharray="6 3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                path.join(" "),
                series.color
            );
            if series.markers {
                for (a, b) in &valid {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                        px(*a),
                        py(*b),
                        series.color
                    );
                }
            }
        }
        let entries: Vec<_> = self
            .series
            .iter()
            .map(|s| (s.name.clone(), s.color.clone(), s.dashed))
            .collect();
        legend(&mut s, &entries);
        s.push_str("</svg>\n");
        s
    }
}

/// The empirical CDF of `values` as step points.
pub fn cdf_points(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    let mut out = Vec::with_capacity(v.len() * 2);
    for (i, x) in v.iter().enumerate() {
        out.push((*x, i as f64 / n));
        out.push((*x, (i + 1) as f64 / n));
    }
    out
}

/// Box plots in groups along the x axis: each group (a label) holds one box
/// per series (a colour), showing p5..p95 whiskers, the quartiles, the
/// median line and the mean as a dot.
#[derive(Debug, Clone)]
pub struct BoxChart {
    pub title: String,
    pub y_label: String,
    pub log_y: bool,
    pub groups: Vec<String>,
    /// (name, colour); `values[g][s]` are the samples of series s in group g.
    pub series: Vec<(String, String)>,
    pub values: Vec<Vec<Vec<f64>>>,
}

impl BoxChart {
    pub fn svg(&self) -> String {
        let all = self.values.iter().flatten().flatten().copied();
        let y = Axis::fit(all, self.log_y);
        let mut s = frame(&self.title, "", &self.y_label, &y);
        let (x0, x1, y0, y1) = area();
        let py = |v: f64| y1 - y.frac(v).clamp(0.0, 1.0) * (y1 - y0);
        let gw = (x1 - x0) / self.groups.len().max(1) as f64;
        let bw = (gw * 0.8 / self.series.len().max(1) as f64).min(28.0);
        for (g, name) in self.groups.iter().enumerate() {
            let gx = x0 + gw * g as f64;
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + gw / 2.0,
                y1 + 18.0,
                esc(name)
            );
            let start = gx + (gw - bw * self.series.len() as f64) / 2.0;
            for (k, (_, color)) in self.series.iter().enumerate() {
                let Some(vals) = self.values.get(g).and_then(|v| v.get(k)) else {
                    continue;
                };
                let mut v: Vec<f64> = vals.iter().copied().filter(|x| x.is_finite()).collect();
                if v.is_empty() {
                    continue;
                }
                v.sort_by(f64::total_cmp);
                let q = |p: f64| super::stats::percentile(&v, p);
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let bx = start + bw * k as f64 + 2.0;
                let w = bw - 4.0;
                let mid = bx + w / 2.0;
                let _ = writeln!(
                    s,
                    r#"<line x1="{mid:.1}" y1="{:.1}" x2="{mid:.1}" y2="{:.1}" stroke="{color}"/><rect x="{bx:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}" fill-opacity="0.35" stroke="{color}"/><line x1="{bx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black" stroke-width="1.5"/><circle cx="{mid:.1}" cy="{:.1}" r="2.5" fill="black"/>"#,
                    py(q(0.05)),
                    py(q(0.95)),
                    py(q(0.75)),
                    (py(q(0.25)) - py(q(0.75))).max(1.0),
                    py(q(0.5)),
                    bx + w,
                    py(q(0.5)),
                    py(mean)
                );
            }
        }
        let entries: Vec<_> = self
            .series
            .iter()
            .map(|(n, c)| (n.clone(), c.clone(), false))
            .collect();
        legend(&mut s, &entries);
        s.push_str("</svg>\n");
        s
    }
}

/// Bars with ± error bars, one per label.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    /// (label, value, error, colour)
    pub bars: Vec<(String, f64, f64, String)>,
}

impl BarChart {
    pub fn svg(&self) -> String {
        let y = Axis::fit(
            self.bars
                .iter()
                .flat_map(|b| [0.0, b.1 + b.2])
                .chain(std::iter::once(0.0)),
            false,
        );
        let mut s = frame(&self.title, "", &self.y_label, &y);
        let (x0, x1, y0, y1) = area();
        let py = |v: f64| y1 - y.frac(v).clamp(0.0, 1.0) * (y1 - y0);
        let gw = (x1 - x0) / self.bars.len().max(1) as f64;
        for (i, (name, value, err, color)) in self.bars.iter().enumerate() {
            let bx = x0 + gw * i as f64 + gw * 0.2;
            let w = gw * 0.6;
            let mid = bx + w / 2.0;
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/><line x1="{mid:.1}" y1="{:.1}" x2="{mid:.1}" y2="{:.1}" stroke="black" stroke-width="1.5"/><text x="{mid:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{mid:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                py(*value),
                (py(0.0) - py(*value)).max(0.0),
                py(value - err),
                py(value + err),
                y1 + 18.0,
                esc(name),
                py(value + err) - 6.0,
                label((value * 100.0).round() / 100.0)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice() {
        let a = Axis::fit([0.7, 1.0], false);
        assert!(a.min <= 0.7 && a.max >= 1.0);
        let t = a.ticks();
        assert!(t.len() >= 3 && t.len() <= 12, "{t:?}");
        let l = Axis::fit([3.0, 700.0], true);
        assert_eq!((l.min, l.max), (1.0, 1000.0));
        assert_eq!(l.ticks(), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(label(0.30000000000000004), "0.3");
        assert_eq!(label(1000.0), "1000");
    }

    #[test]
    fn cdf_steps_end_at_one() {
        let c = cdf_points(&[3.0, 1.0, 2.0]);
        assert_eq!(c.first(), Some(&(1.0, 0.0)));
        assert_eq!(c.last(), Some(&(3.0, 1.0)));
    }
}
