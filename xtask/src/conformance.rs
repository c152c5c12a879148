//! `cargo xtask conformance`: run an engine on the conformance suites and judge it against the
//! f64 oracle (`design/conformance.md` §3, §8). Exit code 0 all pass, 1 some fail, 2 the run
//! could not be judged.

use std::path::{Path, PathBuf};

use suites::conformance::{conformance, ModelSpec, Options};
use suites::Mode;

/// Flags of `conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target model GGUF (default: the fixture models in $GEMMA4_FIXTURES/models).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// MTP drafter GGUF (declares spec:K modes).
    #[arg(long)]
    pub draft: Option<PathBuf>,
    /// Suite name (suites/<NAME>.toml) or path; repeatable (default: smoke and core).
    #[arg(long = "suite")]
    pub suites: Vec<String>,
    /// Engine: reference-f32 (default) or reference-f64.
    #[arg(long, default_value = "reference-f32")]
    pub engine: String,
    /// Comma-separated modes (default: the suite's), e.g. `plain,batch:4,spec:4`.
    #[arg(long)]
    pub modes: Option<String>,
    /// Only these prompt ids (comma-separated).
    #[arg(long)]
    pub prompts: Option<String>,
    /// Output folder (default target/conformance).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Name this run: the report goes to target/conformance/runs/LABEL (for `cargo xtask compare`).
    #[arg(long)]
    pub label: Option<String>,
    /// Allow an HTTP engine on a non-loopback address.
    #[arg(long)]
    pub allow_remote: bool,
}

/// The workspace root (the folder above `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `$GEMMA4_FIXTURES` or `../shared/fixtures` relative to the workspace root.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("GEMMA4_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared/fixtures"))
}

/// The default models: the real-toolchain dense fixture (Q4_K_M target + F32 assistant).
pub fn default_models() -> Vec<ModelSpec> {
    let m = fixtures_dir().join("models");
    vec![ModelSpec {
        path: m.join("dense-target.Q4_K_M.gguf"),
        draft: Some(m.join("dense-assistant.F32.gguf")),
    }]
}

/// Resolves a suite name to `suites/<name>.toml` (a path with `/` or `.toml` is taken as is).
pub fn suite_path(name: &str) -> PathBuf {
    if name.contains('/') || name.ends_with(".toml") {
        PathBuf::from(name)
    } else {
        workspace_root().join("suites").join(format!("{name}.toml"))
    }
}

/// Builds the library options from common flags.
pub fn options(
    model: &Option<PathBuf>,
    draft: &Option<PathBuf>,
    suites: &[String],
    default_suites: &[&str],
    prompts: &Option<String>,
) -> Options {
    let models = match model {
        Some(p) => vec![ModelSpec {
            path: p.clone(),
            draft: draft.clone(),
        }],
        None => default_models(),
    };
    let names: Vec<String> = if suites.is_empty() {
        default_suites.iter().map(|s| s.to_string()).collect()
    } else {
        suites.to_vec()
    };
    Options {
        models,
        suites: names.iter().map(|n| suite_path(n)).collect(),
        engine: "reference-f32".into(),
        modes: None,
        prompts: prompts
            .as_deref()
            .map(|p| {
                p.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        goldens_root: workspace_root().join("goldens"),
        out_dir: workspace_root().join("target/conformance"),
        progress: true,
    }
}

/// Runs the verb; returns the process exit code.
pub fn run(a: &Args) -> i32 {
    let mut o = options(
        &a.model,
        &a.draft,
        &a.suites,
        &["smoke", "core"],
        &a.prompts,
    );
    o.engine.clone_from(&a.engine);
    o.progress = !a.quiet;
    if let Some(out) = &a.out {
        o.out_dir.clone_from(out);
    }
    if let Some(label) = &a.label {
        o.out_dir = workspace_root().join("target/conformance/runs").join(label);
    }
    if a.allow_remote && o.engine.contains('=') {
        o.engine.push_str(",allow-remote");
    }
    if let Some(m) = &a.modes {
        match Mode::parse_list(m) {
            Ok(m) => o.modes = Some(m),
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        }
    }
    let t0 = std::time::Instant::now();
    match conformance(&o) {
        Ok(r) => {
            for run in &r.runs {
                let fails: Vec<String> = run
                    .entries
                    .iter()
                    .filter(|e| !e.passes)
                    .map(|e| format!("{}/{}: {}", e.prompt, e.mode, e.verdict.as_str()))
                    .collect();
                println!(
                    "{} · {} · {} · τ = {} ({}) — {} entries, {} fail{}",
                    run.model.stem,
                    run.suite,
                    run.engine,
                    run.tau,
                    run.tau_source,
                    run.entries.len(),
                    fails.len(),
                    if fails.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", fails.join(", "))
                    }
                );
                for (m, why) in &run.skipped_modes {
                    println!("  skipped {m}: {why}");
                }
                println!(
                    "  engine {:.1} s, oracle {:.1} s (cache {} hits, {} scored)",
                    run.engine_s, run.oracle_s, run.cache.0, run.cache.1
                );
            }
            println!(
                "{} pass, {} fail in {:.1} s. Report: {}",
                r.summary.passed,
                r.summary.failed,
                t0.elapsed().as_secs_f64(),
                o.out_dir.join("report.md").display()
            );
            r.summary.exit_code
        }
        Err(e) => {
            eprintln!("error: {e}");
            2
        }
    }
}
