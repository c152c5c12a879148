//! `runtime` binary — the CUDA engine's thin CLI for the GPU machine (which has no cargo).
//!
//! `runtime gpu-check [--out DIR] [--quick] [--seed N]`: every kernel against the CPU
//! reference plus bandwidth probes (see `runtime::check`). Exit status: 0 all passed, 1 a
//! check failed, 2 no usable GPU (the reason is printed).

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
        #[arg(long, default_value_t = 0x6765_6d6d_6134)]
        seed: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::GpuCheck { out, quick, seed } => {
            let out_dir = out
                .or_else(|| std::env::var_os("OUT").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from("target/gpu-check"));
            if let Some(why) = runtime::device::unavailable_reason() {
                eprintln!("skipped: {why}");
                return ExitCode::from(2);
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
