//! `cargo xtask bless`: write the goldens (insta snapshot + full-precision sidecar per prompt)
//! from the f64 oracle (`design/conformance.md` §9, style R11). Without `--accept`, changed
//! snapshots become `.snap.new` for `cargo insta review`; under `INSTA_UPDATE=no` (CI) a change
//! fails the run (exit 1). A golden pinned to another model SHA-256 stops the run (exit 2).

use std::ffi::OsString;
use std::path::PathBuf;

use suites::conformance::bless;

/// Flags of `bless`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target model GGUF (default: the fixture models).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Suite name or path; repeatable (default: smoke and core).
    #[arg(long = "suite")]
    pub suites: Vec<OsString>,
    /// Only these prompt ids (comma-separated).
    #[arg(long, value_parser = crate::Text)]
    pub prompts: Option<String>,
    /// Write `.snap` directly (INSTA_UPDATE=always) instead of `.snap.new` for review.
    #[arg(long)]
    pub accept: bool,
    /// Overwrite goldens pinned to another model SHA-256.
    #[arg(long)]
    pub force: bool,
    /// Load a model with NaN/Inf weights anyway, for forensic use (conformance §9): by
    /// default loading stops at the first one, naming tensor, block and field (exit 2).
    /// Non-finite logits are then reported, never judged, blessed or passed.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// Runs the verb; returns the process exit code.
pub fn run(a: &Args) -> i32 {
    // single-threaded at this point; insta reads these at its first assertion
    for (key, value) in suites::golden::bless_insta_env(a.accept) {
        std::env::set_var(key, value);
    }
    let Some(mut o) = crate::conformance::verb_options(
        &a.model,
        &None,
        &a.suites,
        &["smoke", "core"],
        &a.prompts,
    ) else {
        return 2;
    };
    o.load = crate::conformance::load_options(a.allow_nonfinite);
    let t0 = std::time::Instant::now();
    match bless(&o, a.force) {
        Ok(s) => {
            for d in &s.dirs {
                println!("goldens: {}", d.display());
            }
            println!(
                "{} unchanged, {} written, {} pending review, {} mismatched in {:.1} s",
                s.unchanged,
                s.written,
                s.pending,
                s.mismatched.len(),
                t0.elapsed().as_secs_f64()
            );
            if s.pending > 0 {
                println!(
                    "review the pending .snap.new files with `cargo insta review`, or accept \
                     them all with `cargo xtask bless --accept`"
                );
            }
            for m in &s.mismatched {
                eprintln!("golden changed: {m}");
            }
            i32::from(!s.mismatched.is_empty())
        }
        Err(e) => {
            crate::print_error(&e);
            2
        }
    }
}
