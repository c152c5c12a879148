//! `reference` — the GGUF format layer and the float64 Gemma-4 oracle.
//!
//! Data flows one way (see `ARCHITECTURE.md`): [`gguf`] reads the container (zero-copy over
//! `memmap2`), [`quant`] turns GGUF blocks into exact f64 values, [`config`] derives the Gemma-4
//! configuration and tensor names from metadata, [`tokenizer`] builds the tokenizer and chat
//! template from metadata. The oracle ([`model`], [`decode`], [`spec`], [`score`]) builds on
//! these: one forward pass generic over the float type (f64 oracle, f32 engine).

pub mod config;
pub mod decode;
pub mod gguf;
pub mod model;
pub mod quant;
pub mod score;
pub mod spec;
pub mod tokenizer;

/// The real-toolchain fixtures folder (conformance contract §9), for the tests, the xtask verbs
/// and the `runtime` binary alike: `$GEMMA4_FIXTURES`, or when it is unset or empty (as
/// `.ci/run` passes it) `<workspace>/../shared/fixtures`, beside the workspace. An empty value is
/// never the current folder. Whether the folder holds what a caller needs is the caller's check.
pub fn fixtures_dir() -> std::path::PathBuf {
    std::env::var_os("GEMMA4_FIXTURES")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            // reference/ is one level below the workspace root
            let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            crate_dir
                .parent()
                .unwrap_or(crate_dir)
                .join("../shared/fixtures")
        })
}
