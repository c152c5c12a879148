//! `suites` — the conformance library: `Engine` trait, modes, tie-budget rule, golden I/O, reports
//! (`design/conformance.md`).
//!
//! - [`engine`]: the §9 interfaces every engine implements.
//! - [`suite`]: suite TOML files (§9).
//! - [`rule`]: the tie-budget rule (§3) and the cross-mode comparison (§4), pure functions.
//! - [`oracle`]: the oracle and codec interfaces, the scoring cache (§3).
//! - [`golden`]: insta snapshots + full-precision sidecars (§9).
//! - [`budgets`]: `goldens/<model>/budgets.toml` (§6, §9); [`calibrate`]: measuring τ (§6).
//! - [`runner`]: runs an engine on a suite and judges it (§2–§4).
//! - [`invariance`]: row invariance, `--strict-invariance` (§7).
//! - [`acceptance`]: speculative acceptance vs the oracle's own and the suite's floor (§7).
//! - [`report`], [`plot`]: `report.json`, `report.md`, margin SVGs (§8).
//! - [`reference_engine`]: the oracle as engine (`reference-f64`/`-f32`), arbiter and codec.
//! - [`spec_engine`]: `spec:K` of the reference engines with per-row logits (§2, §7).
//! - [`explain`]: the four experiments at the first fork between two modes (§5).
//! - [`mock`]: a toy model, codec and a perturbing wrapper engine for tests.
//! - `http` (feature `http`, default on): external engines over HTTP (llama-server, OpenAI).

pub mod acceptance;
pub mod budgets;
pub mod calibrate;
pub mod conformance;
#[cfg(feature = "cuda")]
pub mod cuda_engine;
pub mod engine;
pub mod explain;
pub mod golden;
#[cfg(feature = "http")]
pub mod http;
pub mod invariance;
pub mod mock;
pub mod oracle;
pub mod plot;
pub mod reference_engine;
pub mod report;
pub mod rule;
pub mod runner;
pub mod spec_engine;
pub mod suite;
mod toml_error;

/// The real-toolchain fixture model `name` (a file of `models/` under `GEMMA4_FIXTURES`, else —
/// also when it is empty — `../shared/fixtures` beside the workspace) for tests that need one,
/// or `None` after printing `skipped: …` when it is not there (a machine without the fixtures).
#[cfg(test)]
pub(crate) fn test_fixture_model(name: &str) -> Option<std::path::PathBuf> {
    let fx = reference::fixtures_dir();
    let model = fx.join("models").join(name);
    if model.exists() {
        Some(model)
    } else {
        println!("skipped: fixture {} not found", model.display());
        None
    }
}

/// A copy of fixture model `name` in `dir` (created) as `stem.gguf`, with `output_norm.weight`
/// element 0 (F32) set to NaN: every logit of the copy is NaN (the `nanw.gguf` case of
/// conformance §9). `None` after printing `skipped: …` without the fixtures.
#[cfg(test)]
pub(crate) fn test_nan_copy(
    name: &str,
    dir: &std::path::Path,
    stem: &str,
) -> Option<std::path::PathBuf> {
    let src = test_fixture_model(name)?;
    let f = reference::gguf::GgufFile::open(&src).expect("open fixture");
    let t = f.tensor("output_norm.weight").expect("output_norm").clone();
    assert_eq!(t.ggml_type, reference::quant::GgmlType::F32);
    let pos = f.tensor_file_offset(&t) as usize;
    drop(f);
    let mut b = std::fs::read(&src).expect("read fixture");
    b[pos..pos + 4].copy_from_slice(&0x7FC0_0000u32.to_le_bytes());
    std::fs::create_dir_all(dir).expect("temp dir");
    let out = dir.join(format!("{stem}.gguf"));
    std::fs::write(&out, b).expect("write copy");
    Some(out)
}

/// A copy of fixture model `name` in `dir` (created) as `stem.gguf`, with row `row` of the
/// Q8_0 tensor `tensor` made NaN: the scale `d` (the f16 at the start of a Q8_0 block, ggml's
/// `block_q8_0`) of the row's first block set to NaN, so that row's first 32 values decode to
/// NaN. The row's file offset comes from the GGUF tensor table (`tensor_file_offset` + `row` ×
/// the row's bytes). `None` after printing `skipped: …` without the fixtures.
#[cfg(test)]
pub(crate) fn test_nan_row_copy(
    name: &str,
    tensor: &str,
    row: usize,
    dir: &std::path::Path,
    stem: &str,
) -> Option<std::path::PathBuf> {
    let src = test_fixture_model(name)?;
    let f = reference::gguf::GgufFile::open(&src).expect("open fixture");
    let t = f.tensor(tensor).expect("tensor").clone();
    assert_eq!(t.ggml_type, reference::quant::GgmlType::Q8_0, "{tensor}");
    assert!(row < t.n_rows(), "{tensor} has {} rows", t.n_rows());
    let pos = f.tensor_file_offset(&t) as usize + row * t.row_bytes();
    drop(f);
    let mut b = std::fs::read(&src).expect("read fixture");
    // f16 quiet NaN, little-endian
    b[pos..pos + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
    std::fs::create_dir_all(dir).expect("temp dir");
    let out = dir.join(format!("{stem}.gguf"));
    std::fs::write(&out, b).expect("write copy");
    Some(out)
}

pub use engine::{
    Engine, EngineError, Mode, Request, Scores, SpecStats, Step, StepKind, TopKRows, Trajectory,
};
