//! `runtime` binary — the CUDA engine's thin CLI for the GPU machine (which has no cargo).
//!
//! `runtime gpu-check [--out DIR] [--quick] [--seed N]`: every kernel against the CPU
//! reference plus bandwidth probes (see `runtime::check`); `bench`, `mv-bench`, `model-check`,
//! `spec-check` (see `runtime --help`). Exit status of every verb: 0 done (all checks passed),
//! 1 a check or run failed, 2 bad arguments, no usable GPU or a result file that could not be
//! written (one `error: …` line). Arguments — options, model files, their configs and weights,
//! a drafter's pairing, the output folder (created and written to then) — are checked first
//! (`runtime::args`), so a typo is reported on any machine, not only where CUDA works.
//! (`skipped: …` is what a *test* prints when it cannot run here and passes; this binary never
//! skips: without a GPU it cannot do what it was asked.)

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "runtime", about = "CUDA engine for Gemma-4 GGUF models")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Check every kernel against the CPU reference and measure bandwidth.
    GpuCheck {
        /// Output folder for gpu-check.log / gpu-check.json (default: $OUT, else target/gpu-check).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Small sizes, no bandwidth probes (for compute-sanitizer).
        #[arg(long)]
        quick: bool,
        /// Seed of the random inputs.
        #[arg(
            long,
            allow_negative_numbers = true,
            default_value_t = 0x6765_6d6d_6134
        )]
        seed: u64,
    },
    /// Decode tokens/s on a 12B-shaped model of random blocks vs the B_read roofline.
    Bench {
        /// Block format of every weight, a ggml type with a GPU kernel (F32, F16, BF16, Q4_0,
        /// Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS), or
        /// Q2_K_MIX (llama.cpp's Q2_K mix: attn_v/ffn_down Q3_K, token_embd Q6_K, the rest Q2_K).
        #[arg(long, default_value = "Q2_K_MIX")]
        format: String,
        /// Prompt tokens prefilled first.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 32)]
        prompt: usize,
        /// Decode steps timed.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 32)]
        decode: usize,
        /// Format of the synthetic MTP drafter's weights (as --format), or `none` to skip the
        /// drafter step cost and speed-up model.
        #[arg(long, default_value = "BF16")]
        draft_format: String,
        /// Drafter width H_A (a guess: the 12B drafter's shape is unknown; at most the
        /// target's 3840).
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 1024)]
        draft_width: usize,
        /// Drafter layers (all sliding but the last, full; at most the target's 48).
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 4)]
        draft_layers: usize,
        /// Output folder for bench-FORMAT.json, FORMAT as --format in its canonical spelling
        /// (e.g. bench-Q4_K.json for q4_k; default: $OUT, else target/bench).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The tensor-core matvec launches of one 12B decode layer, timed alone at 1/2/4/8 columns
    /// (kernel sources from $GEMMA4_KERNEL_SRC when set).
    MvBench {
        /// Launches per timed batch.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 50)]
        iters: usize,
        /// Only the cases whose name contains this (e.g. `ffn_gate`).
        #[arg(long)]
        case: Option<String>,
        /// Output file for the JSON table (default: $OUT/mv-bench.json, else target/mv-bench.json).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// CUDA forward vs the f64 oracle (max |logit diff|) and self-consistency, per model.
    ModelCheck {
        /// Model GGUF files.
        #[arg(required = true)]
        models: Vec<PathBuf>,
        /// Output folder for model-check.json (default: $OUT, else target/model-check).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Oracle greedy tokens appended to each prompt.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 16)]
        gen: usize,
    },
    /// spec:K (MTP speculative decoding) vs plain decoding and vs the f64 oracle's acceptance.
    SpecCheck {
        /// Pairs `TARGET.gguf=DRAFT.gguf`, or `TARGET.gguf` alone (scripted-rollback check only).
        #[arg(required = true)]
        pairs: Vec<String>,
        /// Draft lengths K.
        #[arg(
            long,
            value_parser = count,
            allow_hyphen_values = true,
            value_delimiter = ',',
            default_value = "1,2,4,8"
        )]
        ks: Vec<usize>,
        /// Tokens generated per prompt.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 64)]
        max_tokens: usize,
        /// Number of built-in prompts (1..=3).
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 3)]
        prompts: usize,
        /// Skip the f64 oracle's spec:K (and the teacher-forced drafter check, which needs it).
        #[arg(long)]
        no_oracle: bool,
        /// Tokens per scripted-rollback run (drafts wrong at each step j ≤ K in every round, and
        /// all right; ids, acceptance and rows vs plain decoding); 0 skips the check.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 96)]
        rollback_tokens: usize,
        /// Draft steps per position of the teacher-forced drafter check vs the f64 oracle's
        /// assistant; 0 skips it.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 4)]
        drafter_steps: usize,
        /// Tolerance on |CUDA − oracle| drafter logits in that check.
        #[arg(long, allow_hyphen_values = true, default_value_t = runtime::speccheck::drafter::DEFAULT_TOL)]
        drafter_tol: f64,
        /// Sequences speculating at once in the batched spec:K check (spec_batch over the
        /// prompts plus two short-budget requests vs each alone: ids, rounds and logits rows
        /// equal); 0 or 1 skips it.
        #[arg(long, value_parser = count, allow_negative_numbers = true, default_value_t = 2)]
        batch: usize,
        /// Output folder for spec-check.json (default: $OUT, else target/spec-check).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// The parser of a count option (`--prompt`, `--ks`, …): a whole number ≥ 0, or why not. The
/// options take a leading minus as a value (`allow_negative_numbers`) so that `--prompt -1` is
/// refused naming the option (`invalid value '-1' for '--prompt <PROMPT>': not a count …`), not
/// as an unknown argument `-1`.
fn count(s: &str) -> Result<usize, String> {
    s.parse::<usize>().map_err(|e| {
        if s.starts_with('-') {
            "not a count: must be a whole number ≥ 0".to_string()
        } else {
            format!("not a count: {e}")
        }
    })
}

/// Prints `error: MESSAGE` (how every verb reports what stops it) and returns exit status 2.
fn refuse(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(2)
}

/// A verb's output folder: `--out`, else `$OUT` (an empty value counts as unset), else
/// `default`, created and probed for writing now (before CUDA is probed and a long run starts,
/// `runtime::args::out_dir`); `Err(exit status 2)` with the `error: …` line printed when it
/// cannot be.
fn out_folder(out: Option<PathBuf>, default: &str) -> Result<PathBuf, ExitCode> {
    let env = std::env::var_os("OUT").filter(|d| !d.is_empty());
    let (dir, source) = match (out, env) {
        (Some(d), _) => (d, "--out"),
        (None, Some(d)) => (PathBuf::from(d), "$OUT"),
        (None, None) => (PathBuf::from(default), "--out (default)"),
    };
    runtime::args::out_dir(source, &dir).map_err(refuse)?;
    Ok(dir)
}

/// Writes a verb's result file; `Err(exit status 2)` with `error: writing PATH: …` printed when
/// it cannot (the results are on stdout too).
fn write_out(path: &std::path::Path, text: &str) -> Result<(), ExitCode> {
    std::fs::write(path, text).map_err(|e| refuse(format!("writing {}: {e}", path.display())))
}

/// `code`, or the exit status of a failed [`write_out`].
fn with_written(code: ExitCode, written: Result<(), ExitCode>) -> ExitCode {
    written.err().unwrap_or(code)
}

/// `Err(exit status 2)` with `error: bad setting: …` printed for a runtime setting in the
/// environment the runtime refuses (`GEMMA4_TC_DIGITS`, `GEMMA4_PDL`, `GEMMA4_KERNEL_SRC`, …:
/// `runtime::forward::settings_problem`), or `error: CUDA unavailable: …` when no GPU can be
/// used here. Called after a verb's arguments are checked, so a typo is reported on any machine.
fn require_gpu() -> Result<(), ExitCode> {
    if let Some(why) = runtime::forward::settings_problem() {
        return Err(refuse(runtime::RuntimeError::Setting(why).to_string()));
    }
    match runtime::device::unavailable_reason() {
        Some(why) => Err(refuse(why)),
        None => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Bench {
            format,
            prompt,
            decode,
            draft_format,
            draft_width,
            draft_layers,
            out,
        } => {
            let ty = match runtime::args::weight_mix("--format", &format) {
                Ok(t) => t,
                Err(e) => return refuse(e),
            };
            let draft_mix = if draft_format.eq_ignore_ascii_case("none") {
                None
            } else {
                match runtime::args::weight_mix("--draft-format", &draft_format) {
                    Ok(m) => Some(m),
                    Err(e) => return refuse(e),
                }
            };
            if let Err(e) = runtime::args::bench(ty, prompt, decode) {
                return refuse(e);
            }
            let draft = match draft_mix
                .map(|mix| runtime::args::bench_drafter(mix, draft_width, draft_layers))
                .transpose()
            {
                Ok(d) => d,
                Err(e) => return refuse(e),
            };
            let out_dir = match out_folder(out, "target/bench") {
                Ok(d) => d,
                Err(code) => return code,
            };
            if let Err(code) = require_gpu() {
                return code;
            }
            match runtime::bench::run(ty, prompt, decode, draft.as_ref()) {
                Ok(v) => {
                    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
                    println!("{text}");
                    let path = out_dir.join(runtime::bench::json_file_name(ty));
                    with_written(ExitCode::SUCCESS, write_out(&path, &text))
                }
                Err(e) => {
                    eprintln!("bench: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::MvBench { iters, case, out } => {
            if let Err(e) = runtime::args::mv_bench(iters, case.as_deref()) {
                return refuse(e);
            }
            let path = match out {
                Some(file) => {
                    // a file: not a folder, its folder created and written now
                    if let Err(e) = runtime::args::out_file("--out", &file) {
                        return refuse(e);
                    }
                    file
                }
                None => match out_folder(None, "target") {
                    Ok(d) => d.join("mv-bench.json"),
                    Err(code) => return code,
                },
            };
            if let Err(code) = require_gpu() {
                return code;
            }
            match runtime::Gpu::new(0)
                .and_then(|gpu| runtime::mvbench::run(&gpu, iters, case.as_deref()))
            {
                Ok(v) => {
                    let text = serde_json::to_string_pretty(&v).unwrap_or_default();
                    with_written(ExitCode::SUCCESS, write_out(&path, &text))
                }
                Err(e) => {
                    eprintln!("mv-bench: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::ModelCheck { models, out, gen } => {
            let checked = match runtime::args::model_check(&models, gen) {
                Ok(c) => c,
                Err(e) => return refuse(e),
            };
            let out_dir = match out_folder(out, "target/model-check") {
                Ok(d) => d,
                Err(code) => return code,
            };
            if let Err(code) = require_gpu() {
                return code;
            }
            let mut all = Vec::new();
            let mut ok = true;
            for m in checked {
                let name = m.path.display().to_string();
                match runtime::modelcheck::check_model(m, gen) {
                    Ok(v) => {
                        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                        all.push(v);
                    }
                    Err(e) => {
                        ok = false;
                        eprintln!("model-check {name}: {e}");
                        all.push(serde_json::json!({"model": name, "error": e.to_string()}));
                    }
                }
            }
            let written = write_out(
                &out_dir.join("model-check.json"),
                &serde_json::to_string_pretty(&all).unwrap_or_default(),
            );
            with_written(ExitCode::from(if ok { 0 } else { 1 }), written)
        }
        Cmd::SpecCheck {
            pairs,
            ks,
            max_tokens,
            prompts,
            no_oracle,
            rollback_tokens,
            drafter_steps,
            drafter_tol,
            batch,
            out,
        } => {
            let opts = runtime::speccheck::SpecCheckOptions {
                ks,
                max_tokens,
                prompts,
                oracle: !no_oracle,
                rollback_tokens,
                drafter_steps,
                drafter_tol,
                batch,
            };
            let checked = match runtime::args::spec_check(&pairs, &opts) {
                Ok(c) => c,
                Err(e) => return refuse(e),
            };
            let out_dir = match out_folder(out, "target/spec-check") {
                Ok(d) => d,
                Err(code) => return code,
            };
            if let Err(code) = require_gpu() {
                return code;
            }
            let mut all = Vec::new();
            let mut ok = true;
            for p in checked {
                let pair = p.arg.clone();
                match runtime::speccheck::check_pair(p, &opts) {
                    Ok(v) => {
                        ok &= v["ok"].as_bool().unwrap_or(false);
                        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                        all.push(v);
                    }
                    Err(e) => {
                        ok = false;
                        eprintln!("spec-check {pair}: {e}");
                        all.push(serde_json::json!({"pair": pair, "error": e.to_string()}));
                    }
                }
            }
            let written = write_out(
                &out_dir.join("spec-check.json"),
                &serde_json::to_string_pretty(&all).unwrap_or_default(),
            );
            with_written(ExitCode::from(if ok { 0 } else { 1 }), written)
        }
        Cmd::GpuCheck { out, quick, seed } => {
            let out_dir = match out_folder(out, "target/gpu-check") {
                Ok(d) => d,
                Err(code) => return code,
            };
            if let Err(code) = require_gpu() {
                return code;
            }
            match runtime::check::run(&runtime::check::CheckOptions {
                out_dir,
                quick,
                seed,
            }) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("gpu-check error: {e:#}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error clap gives for `args` (the binary's name first), rendered without styles.
    fn refused(args: &[&str]) -> String {
        match Cli::try_parse_from(args) {
            Ok(_) => panic!("{args:?} parsed"),
            Err(e) => e.render().to_string(),
        }
    }

    /// A negative number given to a numeric option is refused naming the option (it read as an
    /// unknown argument `-1` / `-i`), by clap for a count and by the option's own check for
    /// `--drafter-tol`, which takes `-inf` and `-1e-3` as values.
    #[test]
    fn negative_numbers_name_their_option() {
        let e = refused(&["runtime", "bench", "--prompt", "-1"]);
        assert!(
            e.starts_with(
                "error: invalid value '-1' for '--prompt <PROMPT>': not a count: must be a whole \
                 number ≥ 0"
            ),
            "{e}"
        );
        let e = refused(&["runtime", "spec-check", "x", "--ks", "-1,2"]);
        assert!(
            e.starts_with("error: invalid value '-1' for '--ks <KS>': not a count"),
            "{e}"
        );
        let e = refused(&["runtime", "model-check", "--gen", "x1", "m"]);
        assert!(
            e.starts_with(
                "error: invalid value 'x1' for '--gen <GEN>': not a count: invalid digit found \
                 in string"
            ),
            "{e}"
        );
        for (tol, shown) in [("-inf", "-inf"), ("-1e-3", "-0.001")] {
            let Cmd::SpecCheck { drafter_tol, .. } =
                Cli::try_parse_from(["runtime", "spec-check", "x", "--drafter-tol", tol])
                    .unwrap()
                    .cmd
            else {
                panic!("spec-check")
            };
            let opts = runtime::speccheck::SpecCheckOptions {
                ks: vec![1],
                max_tokens: 1,
                prompts: 1,
                oracle: true,
                rollback_tokens: 1,
                drafter_steps: 1,
                drafter_tol,
                batch: 2,
            };
            assert_eq!(
                runtime::args::spec_check(&["x".to_string()], &opts)
                    .unwrap_err()
                    .to_string(),
                format!("--drafter-tol {shown}: must be a finite tolerance > 0 (logits)")
            );
        }
        let Cmd::Bench { prompt, .. } = Cli::try_parse_from(["runtime", "bench", "--prompt", "7"])
            .unwrap()
            .cmd
        else {
            panic!("bench")
        };
        assert_eq!(prompt, 7);
    }
}
