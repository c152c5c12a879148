//! `cargo xtask explain`: the four experiments of `context.md` for the first fork between two
//! modes of one engine on one prompt, ending with one verdict line (`design/conformance.md` §5).

use std::ffi::OsString;
use std::path::PathBuf;

use suites::explain::{explain, ExplainOptions};

/// Flags of `explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Prompt id (e.g. `count_300`).
    #[arg(long, value_parser = crate::Text)]
    pub prompt: String,
    /// The two modes compared, comma-separated.
    #[arg(long, default_value = "plain,spec:4", value_parser = crate::Text)]
    pub modes: String,
    /// Target model GGUF (default: the dense fixture, with its assistant).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// MTP drafter GGUF of `--model` (without `--model`: the default model and its assistant).
    #[arg(long, requires = "model")]
    pub draft: Option<PathBuf>,
    /// Engine: reference-f32 (default), reference-f64, cuda (built with the `cuda` feature), or an HTTP
    /// server: `llama-server=URL` or `openai=URL` (options below).
    #[arg(long, default_value = "reference-f32", value_parser = crate::Text)]
    pub engine: String,
    /// Suite name or path holding the prompt.
    #[arg(long, default_value = "core")]
    pub suite: OsString,
    /// Tokens generated after the truncated prefix (experiment 2): 1 up to the prompt's
    /// max_tokens [default: 8, at most max_tokens].
    #[arg(long)]
    pub continuation: Option<usize>,
    /// Load a model with NaN/Inf weights anyway, for forensic use (conformance §9): by
    /// default loading stops at the first one, naming tensor, block and field (exit 2).
    /// Non-finite logits are then reported, never judged, blessed or passed.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// The `--modes` example explain's messages give: a list it takes (exactly two modes).
const EXAMPLE: &str = "plain,spec:4";

/// Runs the verb; returns the exit code (0, or 2 when it could not run).
pub fn run(a: &Args) -> i32 {
    let modes = match crate::conformance::modes_flag(&a.modes, EXAMPLE) {
        Ok(m) if m.len() == 2 => (m[0], m[1]),
        Ok(m) => {
            crate::print_error(format!(
                "--modes {:?} names {} mode(s); explain compares exactly two (e.g. {EXAMPLE})",
                a.modes,
                m.len()
            ));
            return 2;
        }
        Err(e) => {
            crate::print_error(&e);
            return 2;
        }
    };
    // the engine spec before any model file (or the fixtures folder) is looked at
    if let Err(e) = suites::conformance::check_engine(&a.engine) {
        crate::print_error(&e);
        return 2;
    }
    let Some(o) =
        crate::conformance::verb_options(&a.model, &a.draft, &[], &[a.suite.as_os_str()], &None)
    else {
        return 2;
    };
    let Some(model) = o.models.into_iter().next() else {
        eprintln!("error: no model");
        return 2;
    };
    let opts = ExplainOptions {
        model,
        suite: o.suites[0].clone(),
        prompt: a.prompt.clone(),
        modes,
        engine: a.engine.clone(),
        goldens_root: o.goldens_root,
        cache_dir: Some(o.cache_dir.clone()),
        continuation: a.continuation,
        load: crate::conformance::load_options(a.allow_nonfinite),
    };
    match explain(&opts) {
        Ok(text) => {
            print!("{text}");
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
    use super::EXAMPLE;
    use crate::conformance::modes_flag;

    /// The example explain gives for an empty `--modes` is a list explain takes (it suggested
    /// `plain,batch:4,spec:4`, three modes, which explain refuses).
    #[test]
    fn the_modes_example_is_one_explain_takes() {
        assert_eq!(
            modes_flag(",", EXAMPLE).unwrap_err(),
            "--modes \",\" names no mode (e.g. plain,spec:4)"
        );
        assert_eq!(modes_flag(EXAMPLE, EXAMPLE).unwrap().len(), 2);
    }
}
