//! Margin plots (`design/conformance.md` §8): one SVG per (model, prompt) at
//! `target/conformance/plots/<model>/<prompt>.svg` — the oracle's top-2 margin per output
//! position on a log scale, the budget line τ, tie-flips (orange) and divergences (red) of every
//! mode marked.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Entry;
use crate::rule::PositionVerdict;

/// Smallest margin drawn (exact oracle ties are drawn at this floor).
const FLOOR: f64 = 1e-9;
/// Largest margin drawn (logits): larger values (and τ) are drawn at this height, so a huge or
/// infinite value cannot make the log axis span thousands of decades (plotters' key-point
/// search then never ends).
const CEIL: f64 = 1e6;

/// The height a margin or τ is drawn at: clamped to [FLOOR, CEIL], NaN at FLOOR.
fn drawn(v: f64) -> f64 {
    if v.is_nan() {
        FLOOR
    } else {
        v.clamp(FLOOR, CEIL)
    }
}

/// Draws the margin plot of one prompt from its entries (all modes of one run). The margin line
/// is taken from the `plain` entry if present, else the first entry; events come from all.
///
/// Errors: a message naming the file if drawing fails.
pub fn margin_plot(path: &Path, prompt: &str, entries: &[&Entry], tau: f64) -> Result<(), String> {
    let base = entries
        .iter()
        .find(|e| e.mode == "plain")
        .or_else(|| entries.first())
        .ok_or_else(|| format!("{}: no entries", path.display()))?;
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let pts: Vec<(usize, f64)> = base
        .margins
        .iter()
        .enumerate()
        .map(|(i, m)| (i, drawn(m.unwrap_or(1e3))))
        .collect();
    let n = entries
        .iter()
        .map(|e| e.margins.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let tau_y = drawn(tau);
    let ymax = pts.iter().map(|p| p.1).fold(tau_y.max(1.0), f64::max) * 2.0;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 360)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{prompt}: oracle top-2 margin ({} modes)", entries.len()),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0usize..n, (FLOOR..ymax).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("output index")
        .y_desc("top-2 margin (logits)")
        .y_label_formatter(&|v: &f64| format!("{v:.0e}"))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), &BLUE))
        .map_err(|e| err(&e))?
        .label(format!("oracle top-2 margin ({})", base.mode));
    chart
        .draw_series(LineSeries::new(
            vec![(0, tau_y), (n, tau_y)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| err(&e))?
        .label(format!("τ = {tau}"));
    for e in entries {
        for ev in &e.events {
            let y = ev.margin.unwrap_or(ymax / 2.0).clamp(FLOOR, ymax);
            let color = match ev.kind {
                PositionVerdict::Divergence => RED,
                PositionVerdict::TieFlip => RGBColor(255, 140, 0),
                _ => RGBColor(128, 128, 128),
            };
            chart
                .draw_series(std::iter::once(Circle::new(
                    (ev.index, y),
                    4,
                    color.filled(),
                )))
                .map_err(|er| err(&er))?;
        }
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
