//! Margin plots (`design/conformance.md` §8): one SVG per (model, suite, prompt) at
//! `target/conformance/plots/<model>/<suite>/<prompt>.svg` — the oracle's top-2 margin per output
//! position on a log scale, the budget line τ, tie-flips (orange) and divergences (red) of every
//! mode marked. A run removes the plots of the previous report in its folder that it does not
//! draw again ([`remove_stale_plots`]), so the folder holds only the current report's plots.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::{Entry, Report};
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

/// The margin plot of `prompt` of the suite `suite` on the model `stem` in a run's output
/// folder `out_dir`: `plots/<stem>/<suite>/<prompt>.svg` (two suites may share a prompt id:
/// `long_context` is in smoke and core).
pub fn plot_path(out_dir: &Path, stem: &str, suite: &str, prompt: &str) -> PathBuf {
    out_dir
        .join("plots")
        .join(stem)
        .join(suite)
        .join(format!("{prompt}.svg"))
}

/// Whether `name` is one plain path component (not empty, `.` or `..`, no separator): a stem,
/// suite or prompt id of a report read back from disk names a file inside `plots/` only then.
fn one_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// The (model stem, suite, prompt) of every entry of `report` whose three names are each one
/// plain path component: a report edited to name `..` names no plot of ours.
fn named_entries(report: &Report) -> impl Iterator<Item = (&str, &str, &str)> {
    report
        .runs
        .iter()
        .filter(|r| one_component(&r.model.stem) && one_component(&r.suite))
        .flat_map(|r| {
            r.entries
                .iter()
                .filter(|e| one_component(&e.prompt))
                .map(|e| (r.model.stem.as_str(), r.suite.as_str(), e.prompt.as_str()))
        })
}

/// The plots `report`'s run drew in `out_dir` ([`plot_path`] of each run's model stem and
/// suite and each entry's prompt; a plot not written, after its warning, is listed too). A
/// stem, suite or prompt that is not one plain path component (a report edited to name `..`)
/// gives none: such a path is not one of ours.
pub fn report_plots(out_dir: &Path, report: &Report) -> BTreeSet<PathBuf> {
    named_entries(report)
        .map(|(stem, suite, prompt)| plot_path(out_dir, stem, suite, prompt))
        .collect()
}

/// Where a run before the per-suite folders (0ca58da) drew the plot of `prompt` on the model
/// `stem`: `plots/<stem>/<prompt>.svg`. No run writes there now (a suite folder has no `.svg`
/// suffix), so such a file named by the previous report is that report's, in the old layout.
fn legacy_plot_path(out_dir: &Path, stem: &str, prompt: &str) -> PathBuf {
    out_dir
        .join("plots")
        .join(stem)
        .join(format!("{prompt}.svg"))
}

/// The plots of the report in `out_dir` before a run (`report.json` there, read as a
/// [`Report`]): what [`remove_stale_plots`] may remove — [`report_plots`] and the same plots
/// at their old-layout paths ([`legacy_plot_path`]), so the first run after the upgrade clears
/// a report's plots of either layout. Empty when there is no report or it cannot be read (no
/// file is then treated as ours).
pub fn previous_plots(out_dir: &Path) -> BTreeSet<PathBuf> {
    let Some(report) = std::fs::read_to_string(out_dir.join("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Report>(&t).ok())
    else {
        return BTreeSet::new();
    };
    named_entries(&report)
        .flat_map(|(stem, suite, prompt)| {
            [
                plot_path(out_dir, stem, suite, prompt),
                legacy_plot_path(out_dir, stem, prompt),
            ]
        })
        .collect()
}

/// Removes the plots `previous` (the previous report's, [`previous_plots`]) lists that
/// `current` (this run's, [`report_plots`]) does not — a prompt, model or suite left out this
/// time — so that none stays beside the new report as if it were current. Only those files, and
/// only regular files in a suite folder and model folder that are not symlinks, are removed (an
/// unknown file in `plots/` stays, and so does a file a symlinked folder leads to), then their
/// suite and model folders when empty. Returns the files removed, and for each one that could
/// not be, the path and the cause.
pub fn remove_stale_plots(
    previous: &BTreeSet<PathBuf>,
    current: &BTreeSet<PathBuf>,
) -> (Vec<PathBuf>, Vec<(PathBuf, std::io::Error)>) {
    let (mut removed, mut failed) = (Vec::new(), Vec::new());
    let is_link = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    for p in previous.difference(current) {
        // a regular file, in a suite and model folder that are not symlinks (one could lead
        // out of the output folder, to files no run wrote)
        let (suite_dir, model_dir) = (p.parent(), p.parent().and_then(Path::parent));
        if !std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
            || suite_dir.is_some_and(is_link)
            || model_dir.is_some_and(is_link)
        {
            continue;
        }
        match std::fs::remove_file(p) {
            Ok(()) => {
                removed.push(p.clone());
                // only when empty: a folder with other files fails and stays
                for dir in [suite_dir, model_dir].into_iter().flatten() {
                    let _ = std::fs::remove_dir(dir);
                }
            }
            Err(e) => failed.push((p.clone(), e)),
        }
    }
    (removed, failed)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the previous report's plots that this run did not draw are removed, and only
    /// regular files; an unknown file beside them stays, and so does a folder that still holds
    /// one. A stem, suite or prompt that is not one plain path component names no plot of ours.
    #[test]
    fn only_the_previous_reports_undrawn_plots_are_removed() {
        let out = std::env::temp_dir().join(format!("plot-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let touch = |p: &Path| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"<svg/>").unwrap();
        };
        let (kept, stale, gone_dir, other_suite) = (
            plot_path(&out, "m", "s", "kept"),
            plot_path(&out, "m", "s", "stale"),
            plot_path(&out, "old-model", "s", "p"),
            plot_path(&out, "m", "gone-suite", "kept"),
        );
        assert_eq!(kept, out.join("plots/m/s/kept.svg"));
        let unknown = out.join("plots/m/s/mine.svg");
        for p in [&kept, &stale, &gone_dir, &unknown, &other_suite] {
            touch(p);
        }
        // listed by the previous report but a folder, not a file: left alone
        let folder = plot_path(&out, "m", "s", "folder");
        std::fs::create_dir_all(&folder).unwrap();
        let previous: BTreeSet<PathBuf> = [&kept, &stale, &gone_dir, &folder, &other_suite]
            .into_iter()
            .cloned()
            .collect();
        let current: BTreeSet<PathBuf> = [kept.clone()].into_iter().collect();
        let (removed, failed) = remove_stale_plots(&previous, &current);
        assert_eq!(
            removed,
            [other_suite.clone(), stale.clone(), gone_dir.clone()]
        );
        assert!(failed.is_empty());
        assert!(kept.exists() && unknown.exists() && folder.is_dir());
        assert!(!stale.exists() && !gone_dir.exists() && !other_suite.exists());
        // emptied suite and model folders go; one that holds a file stays
        assert!(!out.join("plots/old-model").exists() && !out.join("plots/m/gone-suite").exists());
        assert!(out.join("plots/m/s").is_dir());
        // a model or suite folder that is a symlink (to a folder of the user's): nothing
        // removed there
        let users = out.join("users");
        touch(&users.join("s/p.svg"));
        std::os::unix::fs::symlink(&users, out.join("plots/linked")).unwrap();
        std::os::unix::fs::symlink(users.join("s"), out.join("plots/m/linked")).unwrap();
        let through: BTreeSet<PathBuf> = [
            plot_path(&out, "linked", "s", "p"),
            plot_path(&out, "m", "linked", "p"),
        ]
        .into_iter()
        .collect();
        let (removed, failed) = remove_stale_plots(&through, &BTreeSet::new());
        assert!(removed.is_empty() && failed.is_empty());
        assert!(users.join("s/p.svg").exists());
        for bad in ["", ".", "..", "a/b", "a\\b", "a\0b"] {
            assert!(!one_component(bad), "{bad:?}");
        }
        assert!(one_component("dense-target.Q4_K_M") && one_component("count_300"));
        std::fs::remove_dir_all(&out).unwrap();
    }
}
