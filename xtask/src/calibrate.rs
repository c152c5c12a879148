//! `cargo xtask calibrate`: measure an engine's rounding error against the f64 oracle on the
//! suites' golden sequences and propose the tie budget τ (`design/conformance.md` §6); writes
//! `goldens/<model>/budgets.toml` for that engine unless `--dry-run`. A measurement of fewer
//! than `suites::calibrate::MIN_PAIRS` pairs (none, when the engine's top-k shares no id with
//! the oracle's top-8) proposes no τ: exit 2, nothing written, the cause on the error line.

use std::ffi::OsString;
use std::path::PathBuf;

use suites::calibrate::calibrate_models;

/// Flags of `calibrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target model GGUF (default: every default model of `conformance`).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Engine to calibrate: reference-f32 (default), reference-f64, cuda (built with the `cuda` feature), or an HTTP
    /// server: `llama-server=URL` or `openai=URL` (options below).
    #[arg(long, default_value = "reference-f32", value_parser = crate::Text)]
    pub engine: String,
    /// Suite name or path whose goldens are scored; repeatable (default: smoke and core).
    #[arg(long = "suite")]
    pub suites: Vec<OsString>,
    /// Safety factor applied to the largest observed error.
    #[arg(long, default_value_t = 2.0)]
    pub safety: f64,
    /// Print only; do not write budgets.toml.
    #[arg(long)]
    pub dry_run: bool,
    /// Load a model with NaN/Inf weights anyway, for forensic use (conformance §9): by
    /// default loading stops at the first one, naming tensor, block and field (exit 2).
    /// Non-finite logits are then reported, never judged, blessed or passed.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// `--safety` against the bounds `budgets.toml` enforces: a finite factor ≥ 1 (the file takes
/// `safety_factor` finite > 0; below 1 τ would be under the measured error) and at most
/// `TAU_MAX` — τ = max error × safety must stay ≤ `TAU_MAX` logits, which a larger factor
/// breaks at any error of 1 logit (1e300 printed a 300-digit τ with `--dry-run`, and without
/// it was refused as if the budgets.toml file were at fault).
fn check_safety(safety: f64) -> Result<(), String> {
    use suites::budgets::TAU_MAX;
    if safety.is_finite() && (1.0..=TAU_MAX).contains(&safety) {
        Ok(())
    } else {
        // 1e300, not its 301 digits
        let shown = if safety.is_finite() && safety.abs() >= 1e6 {
            format!("{safety:e}")
        } else {
            safety.to_string()
        };
        Err(format!(
            "--safety {shown}: must be a finite factor in [1, {TAU_MAX}] (τ = max error × \
             safety, and budgets.toml takes τ <= {TAU_MAX} logits)"
        ))
    }
}

/// Runs the verb; returns the process exit code (0, or 2 when it could not run).
pub fn run(a: &Args) -> i32 {
    if let Err(e) = check_safety(a.safety) {
        crate::print_error(e);
        return 2;
    }
    // the engine spec before any model file (or the fixtures folder) is looked at
    if let Err(e) = suites::conformance::check_engine(&a.engine) {
        crate::print_error(&e);
        return 2;
    }
    let Some(mut o) =
        crate::conformance::verb_options(&a.model, &None, &a.suites, &["smoke", "core"], &None)
    else {
        return 2;
    };
    o.engine.clone_from(&a.engine);
    o.load = crate::conformance::load_options(a.allow_nonfinite);
    let t0 = std::time::Instant::now();
    match calibrate_models(&o, a.safety, !a.dry_run) {
        Ok(list) => {
            for m in list {
                let c = &m.calibration;
                println!(
                    "{} · {} · suites {}: {} sequences, {} positions, {} pairs ({} missing from the engine's top-k)",
                    m.stem, c.engine, m.suites, c.sequences, c.positions, c.pairs, c.missing
                );
                let q: Vec<String> = c
                    .quantiles
                    .iter()
                    .map(|(q, v)| format!("q{q} {v:.3e}"))
                    .collect();
                println!(
                    "  |Δ(e_i − e_j) − Δ(ℓ_i − ℓ_j)|: {}, max {:.3e} (single-logit max {:.3e})",
                    q.join(", "),
                    c.max_error,
                    c.max_logit_error
                );
                if let Some(w) = &c.worst {
                    println!(
                        "  worst: sequence {} position {} ids ({}, {}): oracle diff {}, engine diff {}",
                        w.seq, w.position, w.pair.0, w.pair.1, w.oracle_diff, w.engine_diff
                    );
                }
                // propose_tau: max × safety rounded up to a power of two, at least TAU_FLOOR
                // (the floor is no "max × safety" when the max is 0)
                let how = if c.max_error * c.safety_factor > suites::budgets::TAU_FLOOR {
                    format!("max × {}, rounded up to a power of two", c.safety_factor)
                } else {
                    "the floor: max × safety is at most 2^-40".into()
                };
                println!("  proposed τ = {} = 2^{} ({how})", c.tau, c.tau.log2());
                if let Some(p) = &m.written {
                    println!("  written: {}", p.display());
                }
            }
            println!("calibrated in {:.1} s", t0.elapsed().as_secs_f64());
            0
        }
        Err(e) => {
            crate::print_error(&e);
            2
        }
    }
}

#[cfg(test)]
mod tests {
    /// `--safety` is checked against budgets.toml's bounds, naming the option: 1e300 (a
    /// 300-digit τ under --dry-run), NaN, below 1 and above TAU_MAX refused; 1 and 2 taken.
    #[test]
    fn safety_is_bounded_like_budgets_toml() {
        for ok in [1.0, 2.0, 1e3] {
            assert_eq!(super::check_safety(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            super::check_safety(1e300).unwrap_err(),
            "--safety 1e300: must be a finite factor in [1, 1000] (τ = max error × safety, and \
             budgets.toml takes τ <= 1000 logits)"
        );
        for bad in [f64::NAN, f64::INFINITY, 0.5, 0.0, -2.0, 1000.5] {
            assert!(super::check_safety(bad)
                .unwrap_err()
                .starts_with(&format!("--safety {bad}: ")));
        }
    }
}
