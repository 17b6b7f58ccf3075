//! Figures of the experiments: a grid of panels of line series, drawn with `plotters` to SVG
//! and PNG. PNG text is rasterised with the DejaVu Sans shipped in `services/cell/assets/`
//! (registered with plotters' `ab_glyph` font registry), so no system font is needed.

use std::path::Path;

use plotters::{
    coord::Shift,
    prelude::*,
    style::{FontStyle, RGBColor},
};

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();

/// Registers the shipped font as "sans-serif" (once).
fn register_font() -> anyhow::Result<()> {
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
                .map_err(|_| "the shipped DejaVuSans.ttf is not a valid font".to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// One line of a panel.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub dashed: bool,
    pub width: u32,
    /// Draw each point as a circle (no line between them).
    pub markers: bool,
}

impl Series {
    pub fn line(label: &str, points: Vec<(f64, f64)>, color: RGBColor) -> Self {
        Series {
            label: label.into(),
            points,
            color,
            dashed: false,
            width: 2,
            markers: false,
        }
    }
    /// Points as circles (e.g. waypoints).
    pub fn points(label: &str, points: Vec<(f64, f64)>, color: RGBColor) -> Self {
        Series {
            markers: true,
            ..Series::line(label, points, color)
        }
    }
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
    pub fn thin(mut self) -> Self {
        self.width = 1;
        self
    }
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// A grid of panels (row-major) under a title.
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    pub rows: usize,
    pub cols: usize,
    pub panels: Vec<Panel>,
}

pub const REFERENCE: RGBColor = RGBColor(0, 0, 0);
pub const MEASURED: RGBColor = RGBColor(31, 119, 180);
pub const RAW: RGBColor = RGBColor(190, 190, 190);
pub const ESTIMATE: RGBColor = RGBColor(255, 127, 14);
pub const THIRD: RGBColor = RGBColor(44, 160, 44);
pub const FOURTH: RGBColor = RGBColor(214, 39, 40);

/// Writes `stem.svg` and `stem.png` (`size` pixels).
pub fn write(fig: &Figure, dir: &Path, stem: &str, size: (u32, u32)) -> anyhow::Result<()> {
    register_font()?;
    let svg = dir.join(format!("{stem}.svg"));
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        draw(fig, &root)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", svg.display()))?;
    }
    let png = dir.join(format!("{stem}.png"));
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        draw(fig, &root)?;
        root.present()
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", png.display()))?;
    }
    Ok(())
}

fn range(panel: &Panel) -> ((f64, f64), (f64, f64)) {
    let pts = panel.series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(*x);
            x1 = x1.max(*x);
            y0 = y0.min(*y);
            y1 = y1.max(*y);
        }
    }
    if !x0.is_finite() {
        return ((0.0, 1.0), (0.0, 1.0));
    }
    if x1 - x0 < 1e-12 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.08).max(1e-9);
    if y1 - y0 < 1e-12 {
        let m = y0.abs().max(1e-3) * 0.1;
        return ((x0, x1), (y0 - m, y1 + m));
    }
    ((x0, x1), (y0 - pad, y1 + pad))
}

fn draw<DB: DrawingBackend>(fig: &Figure, root: &DrawingArea<DB, Shift>) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plot: {e:?}");
    root.fill(&WHITE).map_err(e)?;
    // The title fits the width: 17 px, smaller for a long one (≈ 0.55 em per character).
    let (w, _) = root.dim_in_pixel();
    let chars = fig.title.chars().count().max(1) as f64;
    let size = (f64::from(w) / (0.55 * chars)).clamp(9.0, 17.0);
    let body = root
        .titled(&fig.title, ("sans-serif", size).into_font())
        .map_err(e)?;
    let areas = body.split_evenly((fig.rows.max(1), fig.cols.max(1)));
    for (area, panel) in areas.iter().zip(&fig.panels) {
        let ((x0, x1), (y0, y1)) = range(panel);
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 12).into_font())
            .margin(6)
            .x_label_area_size(30)
            .y_label_area_size(44)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(e)?;
        // Enough decimals that neighbouring tick labels differ.
        let span = (y1 - y0).abs().max(1e-12);
        let decimals = (1.0 - span.log10().floor()).clamp(0.0, 8.0) as usize;
        let y_fmt = move |v: &f64| format!("{v:.decimals$}");
        chart
            .configure_mesh()
            .y_label_formatter(&y_fmt)
            .x_desc(panel.x_label.as_str())
            .y_desc(panel.y_label.as_str())
            .label_style(("sans-serif", 10).into_font())
            .axis_desc_style(("sans-serif", 11).into_font())
            .x_labels(6)
            .y_labels(6)
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(e)?;
        for s in &panel.series {
            let style = ShapeStyle::from(&s.color).stroke_width(s.width);
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            let anno = if s.markers {
                let filled = style.filled();
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, filled)))
                    .map_err(e)?
            } else if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(pts, 6, 4, style))
                    .map_err(e)?
            } else {
                chart.draw_series(LineSeries::new(pts, style)).map_err(e)?
            };
            if !s.label.is_empty() {
                anno.label(s.label.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            }
        }
        if panel.series.iter().any(|s| !s.label.is_empty()) {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(160, 160, 160))
                .label_font(("sans-serif", 9).into_font())
                .position(SeriesLabelPosition::LowerRight)
                .draw()
                .map_err(e)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_and_png_with_the_shipped_font() {
        let dir = std::env::temp_dir().join(format!("cell-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fig = Figure {
            title: "test".into(),
            rows: 1,
            cols: 2,
            panels: vec![
                Panel {
                    title: "force".into(),
                    x_label: "t (s)".into(),
                    y_label: "F (N)".into(),
                    series: vec![
                        Series::line("ref", vec![(0.0, 0.0), (1.0, 10.0)], REFERENCE).dashed(),
                        Series::line("f", vec![(0.0, 1.0), (1.0, 9.0)], MEASURED),
                    ],
                },
                Panel {
                    title: "empty".into(),
                    x_label: "t (s)".into(),
                    y_label: "m".into(),
                    series: vec![],
                },
            ],
        };
        write(&fig, &dir, "f", (300, 200)).expect("write");
        let png = std::fs::read(dir.join("f.png")).expect("png");
        assert_eq!(&png[1..4], b"PNG");
        let svg = std::fs::read_to_string(dir.join("f.svg")).expect("svg");
        assert!(svg.contains("<svg") && svg.contains("force"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
