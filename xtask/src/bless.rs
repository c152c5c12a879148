//! `cargo xtask bless`: write the goldens (insta snapshot + full-precision sidecar per prompt)
//! from the f64 oracle (`design/conformance.md` §9, style R11). Without `--accept`, changed
//! snapshots become `.snap.new` for `cargo insta review`; under `INSTA_UPDATE=no` (CI) a change
//! fails the run (exit 1). A golden pinned to another model SHA-256 stops the run (exit 2).

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
    pub suites: Vec<String>,
    /// Only these prompt ids (comma-separated).
    #[arg(long)]
    pub prompts: Option<String>,
    /// Write `.snap` directly (INSTA_UPDATE=always) instead of `.snap.new` for review.
    #[arg(long)]
    pub accept: bool,
    /// Overwrite goldens pinned to another model SHA-256.
    #[arg(long)]
    pub force: bool,
}

/// Drops the panic message of a failed insta snapshot assertion, keeping every other panic's:
/// insta prints its diff and then panics, `write_golden` catches the panic and bless reports
/// the `.snap.new` it left, but the default hook's `thread 'main' panicked at …insta…` line (and
/// a backtrace under `RUST_BACKTRACE`) read as a crash.
fn quiet_insta_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !from_insta(info.location().map(|l| l.file())) {
            previous(info);
        }
    }));
}

/// Whether a panic at source file `file` is insta's (a file of the `insta-X.Y.Z` crate).
fn from_insta(file: Option<&str>) -> bool {
    file.is_some_and(|f| {
        std::path::Path::new(f)
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with("insta-"))
    })
}

/// Runs the verb; returns the process exit code.
pub fn run(a: &Args) -> i32 {
    if a.accept {
        // SAFETY-free: single-threaded at this point; insta reads it on first assertion.
        std::env::set_var("INSTA_UPDATE", "always");
    }
    std::env::set_var("INSTA_FORCE_PASS", "0");
    let Some(o) = crate::conformance::verb_options(
        &a.model,
        &None,
        &a.suites,
        &["smoke", "core"],
        &a.prompts,
    ) else {
        return 2;
    };
    quiet_insta_panics();
    let t0 = std::time::Instant::now();
    match bless(&o, a.force) {
        Ok(s) => {
            for d in &s.dirs {
                println!("goldens: {}", d.display());
            }
            println!(
                "{} unchanged, {} written, {} mismatched in {:.1} s",
                s.unchanged,
                s.written,
                s.mismatched.len(),
                t0.elapsed().as_secs_f64()
            );
            if s.written > 0 && !a.accept {
                println!("review with `cargo insta review` (pending .snap.new files)");
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

#[cfg(test)]
mod tests {
    use super::from_insta;

    /// Only insta's own panics are silenced.
    #[test]
    fn only_insta_panics_are_recognised() {
        assert!(from_insta(Some(
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/insta-1.49.0/src/runtime.rs"
        )));
        assert!(!from_insta(Some("suites/src/golden.rs")));
        assert!(!from_insta(Some("/src/installer/x.rs")));
        assert!(!from_insta(None));
    }
}
