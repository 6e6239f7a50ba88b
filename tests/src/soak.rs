//! The soak run's measurements: resource samples over time, the test that says whether one
//! grows without bound, and the report (a table and a chart per resource).
//!
//! "Grows without bound" is judged by the slope, not by a fixed limit: after a warm-up (the
//! first quarter of the run, where tables, caches and allocator arenas fill), a resource whose
//! least-squares line rises over the rest of the run by more than its allowance, and whose last
//! quarter sits that much above its second, is growing. A resource that rises and then levels
//! off (a table filling to its bound) passes; one that creeps up all along fails, however low.
use std::fmt::Write as _;

/// One resource measured over the run: (seconds since the start, value).
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub unit: String,
    pub points: Vec<(f64, f64)>,
    /// Growth over the run past the warm-up that still counts as bounded: at least this much,
    /// and at least `relative` of the resource's median.
    pub floor: f64,
    pub relative: f64,
}

impl Series {
    pub fn new(name: &str, unit: &str, floor: f64, relative: f64) -> Series {
        Series { name: name.into(), unit: unit.into(), points: Vec::new(), floor, relative }
    }

    pub fn push(&mut self, t: f64, value: f64) {
        self.points.push((t, value));
    }

    /// The points past the warm-up (the first quarter of the run's time).
    fn steady(&self) -> &[(f64, f64)] {
        let (Some(first), Some(last)) = (self.points.first(), self.points.last()) else { return &[] };
        let from = first.0 + (last.0 - first.0) / 4.0;
        let start = self.points.iter().position(|p| p.0 >= from).unwrap_or(self.points.len());
        &self.points[start..]
    }

    /// Why this resource grows without bound, or None if it stays bounded.
    pub fn unbounded(&self) -> Option<String> {
        let steady = self.steady();
        if steady.len() < 8 {
            return None;
        }
        let span = steady.last().unwrap().0 - steady[0].0;
        let rise = slope(steady) * span;
        let mut values: Vec<f64> = steady.iter().map(|p| p.1).collect();
        values.sort_by(f64::total_cmp);
        let median = values[values.len() / 2];
        let allowance = self.floor.max(self.relative * median.abs());
        let quarter = steady.len() / 3;
        let mean = |s: &[(f64, f64)]| s.iter().map(|p| p.1).sum::<f64>() / s.len().max(1) as f64;
        let (early, late) = (mean(&steady[..quarter]), mean(&steady[steady.len() - quarter..]));
        (rise > allowance && late - early > allowance).then(|| {
            format!(
                "{} rose {rise:.1} {} over {span:.0} s past the warm-up (allowed {allowance:.1}; mean {early:.1} -> {late:.1})",
                self.name, self.unit
            )
        })
    }

    /// A one-line chart of the series (eight levels between its minimum and maximum).
    pub fn chart(&self, width: usize) -> String {
        const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        if self.points.is_empty() {
            return String::new();
        }
        let (min, max) = self.range();
        let per = self.points.len().div_ceil(width.max(1));
        self.points
            .chunks(per)
            .map(|c| {
                let v = c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64;
                let level = if max > min { ((v - min) / (max - min) * 7.0).round() as usize } else { 0 };
                LEVELS[level.min(7)]
            })
            .collect()
    }

    /// A line chart of the series as SVG: minutes since the start across, the value up.
    pub fn svg_chart(&self) -> anyhow::Result<String> {
        use plotters::prelude::*;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (640, 240)).into_drawing_area();
            root.fill(&WHITE)?;
            let (min, max) = self.range();
            let pad = ((max - min) * 0.1).max(max.abs() * 0.01).max(1.0);
            let (low, high) = ((min - pad).max(0.0), max + pad);
            let end = self.points.last().map_or(1.0, |p| p.0 / 60.0).max(1.0);
            let mut chart = ChartBuilder::on(&root)
                .caption(format!("{} ({})", self.name, self.unit), ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(64)
                .build_cartesian_2d(0.0..end, low..high)?;
            chart.configure_mesh().x_desc("minutes").light_line_style(WHITE.mix(0.0)).draw()?;
            chart.draw_series(LineSeries::new(self.points.iter().map(|p| (p.0 / 60.0, p.1)), &BLUE))?;
            root.present()?;
        }
        Ok(svg)
    }

    /// A file name for the series' chart: its name in lower case, words joined by dashes.
    pub fn slug(&self) -> String {
        let words: Vec<String> = self
            .name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        words.join("-")
    }

    fn range(&self) -> (f64, f64) {
        let values = self.points.iter().map(|p| p.1);
        (values.clone().fold(f64::INFINITY, f64::min), values.fold(f64::NEG_INFINITY, f64::max))
    }
}

/// Least-squares slope of `points` (value per second).
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mt, mv) = (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let num: f64 = points.iter().map(|p| (p.0 - mt) * (p.1 - mv)).sum();
    let den: f64 = points.iter().map(|p| (p.0 - mt).powi(2)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}

/// The report: the run's settings, broken connections by cause, a row and a chart per
/// resource, and the counters at the end.
pub fn report(settings: &str, broken: &[(String, u64)], series: &[Series], counters: &[(String, u64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## Soak run\n\n{settings}\n");
    let _ = writeln!(out, "### Connections\n\n| what | count |\n|---|---|");
    for (cause, n) in broken {
        let _ = writeln!(out, "| {cause} | {n} |");
    }
    let _ = writeln!(
        out,
        "\n### Resources (sampled; the chart runs left to right over the run, min to max)\n\n\
         | resource | first | last | min | max | slope past warm-up (/min) | bounded | chart |\n|---|---|---|---|---|---|---|---|"
    );
    for s in series {
        let (min, max) = s.range();
        let first = s.points.first().map_or(0.0, |p| p.1);
        let last = s.points.last().map_or(0.0, |p| p.1);
        let verdict = match s.unbounded() {
            None => "yes".to_string(),
            Some(why) => format!("**no**: {why}"),
        };
        let _ = writeln!(
            out,
            "| {} ({}) | {first:.0} | {last:.0} | {min:.0} | {max:.0} | {:.2} | {verdict} | `{}` |",
            s.name,
            s.unit,
            slope(s.steady()) * 60.0,
            s.chart(48)
        );
    }
    let _ = writeln!(out, "\n### Counters at the end\n\n| counter | value |\n|---|---|");
    for (name, value) in counters {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(f: impl Fn(f64) -> f64) -> Series {
        let mut s = Series::new("r", "KiB", 64.0, 0.05);
        for i in 0..120 {
            let t = i as f64 * 2.0;
            s.push(t, f(t));
        }
        s
    }

    #[test]
    fn a_chart_is_an_svg_with_the_series_name() {
        let s = Series { name: "daemon RSS".into(), unit: "KiB".into(), ..series(|t| 100.0 + t) };
        let svg = s.svg_chart().unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("daemon RSS (KiB)") && svg.contains("<polyline"), "{svg}");
        assert_eq!(s.slug(), "daemon-rss");
    }

    #[test]
    fn a_steady_creep_is_unbounded_however_low() {
        // 1 MiB a minute on top of 20 MiB: small, but it never stops.
        let s = series(|t| 20_480.0 + t / 60.0 * 1024.0);
        assert!(s.unbounded().is_some(), "a creep of 1 MiB/min passed");
    }

    #[test]
    fn a_resource_that_fills_and_levels_off_is_bounded() {
        // Fills to its bound in the first 30 s, then holds with noise.
        let s = series(|t| if t < 30.0 { t * 100.0 } else { 3000.0 + (t * 7.0).sin() * 40.0 });
        assert_eq!(s.unbounded(), None);
    }

    #[test]
    fn noise_around_a_level_is_bounded() {
        let s = series(|t| 500.0 + if (t as u64 / 2).is_multiple_of(2) { 30.0 } else { -30.0 });
        assert_eq!(s.unbounded(), None);
    }

    #[test]
    fn the_slope_of_a_line_is_its_rate() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0 * i as f64 + 1.0)).collect();
        assert!((slope(&points) - 3.0).abs() < 1e-9);
    }
}
