//! `cargo xtask calibrate`: measure an engine's rounding error against the f64 oracle on the
//! suites' golden sequences and propose the tie budget τ (`design/conformance.md` §6); writes
//! `goldens/<model>/budgets.toml` for that engine unless `--dry-run`.

use std::path::PathBuf;

use suites::calibrate::calibrate_models;

/// Flags of `calibrate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target model GGUF (default: every default model of `conformance`).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Engine to calibrate: reference-f32 (default), reference-f64, cuda (built with the `cuda` feature), or an HTTP
    /// server: `llama-server=URL` or `openai=URL` (see README).
    #[arg(long, default_value = "reference-f32")]
    pub engine: String,
    /// Suite name or path whose goldens are scored; repeatable (default: smoke and core).
    #[arg(long = "suite")]
    pub suites: Vec<String>,
    /// Safety factor applied to the largest observed error.
    #[arg(long, default_value_t = 2.0)]
    pub safety: f64,
    /// Print only; do not write budgets.toml.
    #[arg(long)]
    pub dry_run: bool,
}

/// Runs the verb; returns the process exit code (0, or 2 when it could not run).
pub fn run(a: &Args) -> i32 {
    if !(a.safety.is_finite() && a.safety >= 1.0) {
        eprintln!("error: --safety must be >= 1 (got {})", a.safety);
        return 2;
    }
    let Some(mut o) =
        crate::conformance::verb_options(&a.model, &None, &a.suites, &["smoke", "core"], &None)
    else {
        return 2;
    };
    o.engine.clone_from(&a.engine);
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
                println!(
                    "  proposed τ = {} = 2^{} (max × {})",
                    c.tau,
                    c.tau.log2(),
                    c.safety_factor
                );
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
