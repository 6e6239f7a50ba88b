//! The report's charts, drawn with plotters as SVG text (inlined in the HTML page).
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// One category of a bar chart: a bar, an optional spread (min..max) drawn as an error bar,
/// and an optional reference marker (a figure measured elsewhere, or a second percentile).
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub spread: Option<(f64, f64)>,
    pub marker: Option<f64>,
}

/// A vertical bar chart; `marker_name` says what the markers are (legend).
pub fn bars(title: &str, unit: &str, bars: &[Bar], marker_name: Option<&str>) -> String {
    let mut svg = String::new();
    {
        let width = 140 + 190 * bars.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (width.max(480), 360)).into_drawing_area();
        let _ = draw(&root, title, unit, bars, marker_name);
        let _ = root.present();
    }
    svg
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    unit: &str,
    bars: &[Bar],
    marker_name: Option<&str>,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let top = bars
        .iter()
        .flat_map(|b| [b.value, b.spread.map_or(0.0, |s| s.1), b.marker.unwrap_or(0.0)])
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE)
        * 1.15;
    // A segmented range 0..k has k + 1 segments: one per bar is 0..len-1.
    let last = (bars.len() as u32).saturating_sub(1);
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0u32..last).into_segmented(), 0f64..top)?;
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(unit)
        .x_label_style(("sans-serif", 11))
        .x_labels(bars.len())
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(
        Histogram::vertical(&chart)
            .style(RGBColor(70, 110, 170).filled())
            .margin(18)
            .data(bars.iter().enumerate().map(|(i, b)| (i as u32, b.value))),
    )?;
    chart.draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
        let (lo, hi) = b.spread?;
        Some(ErrorBar::new_vertical(SegmentValue::CenterOf(i as u32), lo, b.value, hi, BLACK.stroke_width(2), 12))
    }))?;
    let markers = chart.draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
        Some(Cross::new((SegmentValue::CenterOf(i as u32), b.marker?), 8, RGBColor(200, 60, 40).stroke_width(3)))
    }))?;
    if let Some(name) = marker_name {
        markers.label(name).legend(|(x, y)| Cross::new((x, y), 6, RGBColor(200, 60, 40).stroke_width(3)));
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.9)).draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_names_every_category() {
        let data = [("a", 1.0, Some(3.0)), ("b", 2.0, None)].map(|(label, value, marker)| Bar {
            label: label.into(),
            value,
            spread: Some((value / 2.0, value * 2.0)),
            marker,
        });
        let svg = bars("title", "unit", &data, Some("reference"));
        assert!(svg.starts_with("<svg") && svg.contains("title") && svg.contains("reference"), "{svg}");
        assert!(svg.contains("\na\n") && svg.contains("\nb\n"), "{svg}");
    }
}
