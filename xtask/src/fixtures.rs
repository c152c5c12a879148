//! `cargo xtask fixtures` — deterministic synthetic Gemma-4 GGUF models for CI.
//!
//! Writes, into `--out` (default `target/fixtures`), three target/assistant pairs
//! ([`family`]: dense k_eq_v, E2B-style PLE + KV sharing + double-wide MLP, MoE; the E2B-style
//! assistant with the centroid head) in three variants each ([`mix`]: F32, BF16, UD-Q2_K_XL),
//! 18 files, plus `manifest.json` (name, variant, role, file, bytes, SHA-256). The vocabulary is
//! a 1024-token BPE trained on the committed corpus `xtask/data/corpus.txt` ([`vocab`]),
//! written as GGUF tokenizer metadata per `spec/gguf-gemma4.md` §7 with the real chat template.
//! Metadata keys and tensor names/shapes: `spec/gguf-gemma4.md` §5, §6, §8; configuration:
//! `spec/gemma4-text.md` §1, `spec/gemma4-assistant-mtp.md` §1.
//!
//! Weights (seeded, [`rng`]; one stream per tensor; scales in [`models`]):
//! * `token_embd` rows `N(0, 0.3²/H)·r_v`, `r_v ~ U[0.5, 1.5]`, so the scaled input
//!   embedding `E[x]·√H` has RMS ≈ 0.3 ([`models::EMBD_RMS`]: at RMS 1 the tied head makes
//!   random models repeat their input token);
//! * every projection `N(0, 1/fan_in)` (`fan_in` = `ne0`), the router `N(0, 1)` (its input
//!   is scaled by `1/√H`), PLE tables `N(0, 1/P)`;
//! * norm gains `U[0.9, 1.1]`; `attn_q_norm` gains `1.5/√hd · U[0.9, 1.1]` (score std ≈ 1.5,
//!   since the score scale is 1.0); `layer_output_scale` `U[0.7, 1.0]`;
//! * `output_norm` gains `(σ/0.3) · U[0.9, 1.1]`: logits are then ≈ `N(0, σ²)` over V = 1024,
//!   with a per-model logit scale σ = 0.5 (dense), 2 (E2B), 6 (MoE), 1.5 (assistants), so the
//!   top-2 gaps at generated positions spread over four decades. Measured with the f64 oracle
//!   (`Model::<f64>::greedy`, 7 prompts × 32 tokens, per model over its 3 variants, 672
//!   positions each): dense min 6.3e-4, median ≈ 0.4, max 2.2; E2B min 1.6e-4, median ≈ 0.7,
//!   max 4.5; MoE min 4.7e-4, median ≈ 3, max 11.
//!
//! With `--12b`, also writes `OUT/12b/syn-12b-target.UD-Q2_K_XL.gguf` ([`big`]): the real
//! 12B dimensions with random valid K-quant blocks, streamed to disk (≈5 GB; never committed).
//!
//! Reproducibility: no clocks, no hash-map order, no platform math functions in the values;
//! the test `xtask/tests/fixtures_reproducible.rs` rebuilds and compares every SHA-256 with
//! the committed `goldens/fixtures-manifest.json`.

mod big;
mod blocks;
pub mod family;
pub mod mix;
pub mod models;
pub mod rng;
pub mod vocab;
pub mod weights;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use reference::gguf::{sha256_file, GgufWriter};
use serde::{Deserialize, Serialize};

use mix::{storage_type, Variant};
use models::TensorDef;

/// Flags of `cargo xtask fixtures`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Output folder (created if missing) [default: target/fixtures of the workspace, where
    /// `conformance` looks for them, whatever the current folder].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the 12B-shaped target (≈5 GB) into OUT/12b/.
    #[arg(long = "12b")]
    pub twelve_b: bool,
    /// Real-vocabulary GGUF whose tokenizer the 12B target copies [default:
    /// $GEMMA4_FIXTURES/tokenizer/ggml-vocab-gemma-4.gguf, fixtures default ../shared/fixtures].
    #[arg(long, requires = "twelve_b")]
    pub vocab_gguf: Option<PathBuf>,
    /// Copy the new manifest to goldens/fixtures-manifest.json (re-bless after a recipe change).
    #[arg(long)]
    pub update_manifest: bool,
}

/// One row of `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Model name (file stem without variant), e.g. `syn-dense-target`.
    pub name: String,
    /// `F32`, `BF16` or `UD-Q2_K_XL`.
    pub variant: String,
    /// `target` or `assistant`.
    pub role: String,
    /// File name inside the output folder.
    pub file: String,
    /// File size in bytes.
    pub bytes: u64,
    /// Lowercase hex SHA-256 of the file.
    pub sha256: String,
}

/// The manifest: every file written, in build order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// What wrote it.
    pub generator: String,
    /// Vocabulary size of every model.
    pub n_vocab: usize,
    /// The files.
    pub files: Vec<ManifestEntry>,
}

/// Encodes `defs` (values already drawn) for `variant` and writes `path`.
fn write_model(
    mut w: GgufWriter,
    defs: &[TensorDef],
    values: &[weights::Values],
    variant: Variant,
    n_layer: usize,
    path: &Path,
) -> Result<()> {
    for (d, v) in defs.iter().zip(values) {
        let ty = storage_type(d, variant, n_layer);
        let bytes = weights::encode(&d.name, ty, v)?;
        w.add_tensor(&d.name, &d.dims, ty, bytes)
            .with_context(|| format!("adding {}", d.name))?;
    }
    w.write_file(path)
        .with_context(|| format!("writing {}", path.display()))
}

/// Builds the 18 small fixtures and `manifest.json` into `out`; returns the manifest.
///
/// Errors: BPE training, quantization or I/O failures (each names the file or tensor).
pub fn build_small(out: &Path) -> Result<Manifest> {
    // the conformance rule: created if missing, writable, a folder (named as a file when it is one)
    suites::conformance::check_out_dir(out)?;
    let v = vocab::train(vocab::CORPUS)?;
    let mut files = Vec::new();
    for (t, a) in family::pairs(v.tokens.len()) {
        let t_defs = models::target_tensors(&t);
        let t_vals = weights::draw(&t_defs, t.seed)?;
        let a_defs = models::assistant_tensors(&a);
        let a_vals = weights::draw(&a_defs, a.seed)?;
        for variant in Variant::ALL {
            for (role, stem) in [("target", t.stem), ("assistant", a.stem)] {
                let file = format!("{stem}.{}.gguf", variant.name());
                let path = out.join(&file);
                if role == "target" {
                    let mut w = family::target_metadata(&t, &t_defs, variant);
                    vocab::set_tokenizer_keys(&mut w, &v);
                    write_model(w, &t_defs, &t_vals, variant, t.n_layer, &path)?;
                } else {
                    let mut w = family::assistant_metadata(&a, &a_defs, variant);
                    vocab::set_tokenizer_keys(&mut w, &v);
                    write_model(w, &a_defs, &a_vals, variant, a.n_layer, &path)?;
                }
                files.push(ManifestEntry {
                    name: stem.to_string(),
                    variant: variant.name().to_string(),
                    role: role.to_string(),
                    bytes: std::fs::metadata(&path)?.len(),
                    sha256: sha256_file(&path)
                        .with_context(|| format!("hashing {}", path.display()))?,
                    file,
                });
            }
        }
    }
    let manifest = Manifest {
        generator: "cargo xtask fixtures".into(),
        n_vocab: v.tokens.len(),
        files,
    };
    let json = serde_json::to_string_pretty(&manifest)? + "\n";
    std::fs::write(out.join("manifest.json"), json)?;
    Ok(manifest)
}

/// The committed manifest's path: `<workspace>/goldens/fixtures-manifest.json`.
pub fn committed_manifest_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("goldens")
        .join("fixtures-manifest.json")
}

/// The vocabulary GGUF of `--12b`: `--vocab-gguf`, else `tokenizer/ggml-vocab-gemma-4.gguf`
/// of the fixtures folder `fixtures` ([`crate::conformance::fixtures_dir`]). Errors: the
/// default file missing, naming it, `GEMMA4_FIXTURES` and `--vocab-gguf` (it was a bare I/O
/// error, after the 18 small fixtures were written).
fn vocab_path(given: Option<&Path>, fixtures: &Path) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    let p = fixtures.join("tokenizer/ggml-vocab-gemma-4.gguf");
    anyhow::ensure!(
        p.is_file(),
        "the 12B target's vocabulary {} not found: set GEMMA4_FIXTURES to the fixtures folder \
         (the one holding tokenizer/), or pass --vocab-gguf FILE",
        p.display()
    );
    Ok(p)
}

/// Runs the verb: builds, prints one line per file and the timings. With `--12b` the
/// vocabulary GGUF is read and checked first ([`big::read_vocab`]): a bad one wrote all 18
/// small fixtures (101 MiB) before failing.
pub fn run(args: &Args) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| crate::conformance::workspace_root().join("target/fixtures"));
    let vocab = if args.twelve_b {
        let path = vocab_path(
            args.vocab_gguf.as_deref(),
            &crate::conformance::fixtures_dir(),
        )?;
        Some(big::read_vocab(&path)?)
    } else {
        None
    };
    let t0 = Instant::now();
    let m = build_small(&out)?;
    let dt = t0.elapsed().as_secs_f64();
    for f in &m.files {
        println!("{:>10}  {}  {}", f.bytes, &f.sha256[..16], f.file);
    }
    let total: u64 = m.files.iter().map(|f| f.bytes).sum();
    println!(
        "fixtures: {} files, {:.1} MiB, {dt:.2} s -> {}",
        m.files.len(),
        total as f64 / (1 << 20) as f64,
        out.display()
    );
    if args.update_manifest {
        let dst = committed_manifest_path();
        std::fs::copy(out.join("manifest.json"), &dst)
            .with_context(|| format!("copying the manifest to {}", dst.display()))?;
        println!("updated {}", dst.display());
    }
    if let Some(vocab) = &vocab {
        let t1 = Instant::now();
        let (path, bytes) = big::build_12b(&out.join("12b"), vocab)?;
        println!(
            "12b: {} ({:.2} GiB) in {:.1} s",
            path.display(),
            bytes as f64 / (1u64 << 30) as f64,
            t1.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
