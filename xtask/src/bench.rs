//! `cargo xtask bench`: the one benchmark entry (issue 5). Runs the criterion benches of the
//! oracle on CPU (`reference/benches/score.rs`: scoring GFLOP/s; `dequant.rs`: GB/s of block
//! bytes per format) and, when built with the `cuda` feature on a machine with a GPU, the
//! 12B-shaped end-to-end decode benchmark (`runtime bench`: tokens/s, batch scaling, verify
//! cost, drafter step) and the per-layer tensor-core matvec table (`runtime mv-bench`). Writes
//! `target/bench/summary.json`, where every figure sits next to its ceiling **measured in the
//! same run** and the ratio between them:
//!
//! - scoring GFLOP/s ÷ (the `madd_peak_1core` bench × the rayon threads);
//! - dequantization GB/s of block bytes ÷ this machine's single-thread read bandwidth over a
//!   4 MiB buffer (the benches' inputs are ≤ 4 MiB — 1 Mi elements — and stay in cache, so
//!   this is what merely reading them could cost; measured here just before the benches;
//!   `dequantize` is single-threaded). The DRAM read bandwidth (512 MiB) is reported too;
//! - GPU decode tokens/s ÷ the read roofline (weight + KV bytes per token ÷ `B_read`), after a
//!   32-token prompt and after a 2048-token one (`decode_long_prompt`), matvec
//!   GB/s ÷ `B_read` (both measured inside the GPU run).
//!
//! No timing is asserted anywhere: these are measurements, not tests.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use crate::conformance::workspace_root;

/// Flags of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only the oracle scoring bench on CPU (skips the per-format dequantization benches).
    #[arg(long)]
    pub quick: bool,
    /// Skip the GPU benches even when a GPU is present.
    #[arg(long)]
    pub no_gpu: bool,
    /// Block formats of the 12B-shaped GPU model: Q2_K_MIX (llama.cpp's Q2_K mix) or a ggml
    /// type name.
    #[arg(long, default_value = "Q2_K_MIX", value_parser = crate::Text)]
    pub format: String,
    /// Output folder (default target/bench).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Single-thread read bandwidth in bytes/s over a buffer of `bytes`: best of 5 rounds, each
/// summing the buffer `reps` times as `u64` (four independent accumulators so the adds do not
/// serialize). A small buffer measures the cache level it fits in, a large one DRAM.
pub fn read_bandwidth_1thread(bytes: usize, reps: usize) -> f64 {
    let n = bytes / 8;
    let buf: Vec<u64> = (0..n as u64).collect();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            let mut acc = [0u64; 4];
            for c in black_box(&buf).chunks_exact(4) {
                for (a, v) in acc.iter_mut().zip(c) {
                    *a = a.wrapping_add(*v);
                }
            }
            black_box(acc);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    (n * 8 * reps) as f64 / best
}

/// One criterion result: `group/function` id, median seconds per iteration, and its throughput
/// unit and amount per iteration (`"bytes"`/`"elements"`).
#[derive(Debug, Clone, PartialEq)]
pub struct CriterionResult {
    /// Criterion's full id (`group/function`).
    pub id: String,
    /// Median time per iteration, seconds.
    pub median_s: f64,
    /// `"bytes"`, `"elements"` or `""` (no throughput declared).
    pub unit: String,
    /// Throughput amount per iteration.
    pub per_iter: f64,
}

/// Reads one criterion benchmark folder's `new/benchmark.json` + `new/estimates.json`.
///
/// Errors: missing or malformed files (named in the error).
pub fn read_criterion(dir: &Path) -> anyhow::Result<CriterionResult> {
    let bj: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("new/benchmark.json"))
            .with_context(|| format!("reading {}/new/benchmark.json", dir.display()))?,
    )?;
    let ej: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("new/estimates.json"))
            .with_context(|| format!("reading {}/new/estimates.json", dir.display()))?,
    )?;
    let median_ns = ej["median"]["point_estimate"]
        .as_f64()
        .with_context(|| format!("{}: no median estimate", dir.display()))?;
    let (unit, per_iter) = match &bj["throughput"] {
        Value::Object(m) => match m.iter().next() {
            Some((k, v)) => (k.to_lowercase(), v.as_f64().unwrap_or(0.0)),
            None => (String::new(), 0.0),
        },
        _ => (String::new(), 0.0),
    };
    Ok(CriterionResult {
        id: bj["full_id"].as_str().unwrap_or_default().to_string(),
        median_s: median_ns * 1e-9,
        unit,
        per_iter,
    })
}

/// Every criterion result under `root` (`target/criterion`) written at or after `since` (all
/// when `None`: results of earlier runs are otherwise left out), sorted by id.
fn criterion_results(root: &Path, since: Option<std::time::SystemTime>) -> Vec<CriterionResult> {
    let fresh = |p: &Path| {
        since.is_none_or(|t0| {
            std::fs::metadata(p.join("new/estimates.json"))
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= t0)
        })
    };
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.join("new/benchmark.json").exists() {
                if !fresh(&p) {
                    continue;
                }
                if let Ok(r) = read_criterion(&p) {
                    out.push(r);
                }
            } else if p.is_dir() && p.file_name().is_some_and(|n| n != "report") {
                stack.push(p);
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The CPU part of the summary from criterion `results`: scoring vs the multiply-add peak ×
/// `threads`, dequantization (bytes groups) vs `read_bps`. Figures a result set lacks are
/// left out.
pub fn cpu_summary(results: &[CriterionResult], threads: usize, read_bps: f64) -> Value {
    let rate = |r: &CriterionResult| r.per_iter / r.median_s;
    let peak = results
        .iter()
        .find(|r| r.id.starts_with("oracle/madd_peak_1core"))
        .map(rate);
    let score = results
        .iter()
        .find(|r| r.id.starts_with("oracle/score_"))
        .map(rate);
    let scoring = match (score, peak) {
        (Some(s), Some(p)) => json!({
            "gflop_per_s": s / 1e9,
            "ceiling": "f64 multiply-add peak of one core × threads (bench oracle/madd_peak_1core)",
            "ceiling_gflop_per_s": p * threads as f64 / 1e9,
            "threads": threads,
            "ratio": s / (p * threads as f64),
        }),
        _ => {
            json!({"skipped": "no oracle/score_ and madd_peak results in this run (see the bench output)"})
        }
    };
    let dequant: Vec<Value> = results
        .iter()
        .filter(|r| r.id.starts_with("dequantize_") && r.unit == "bytes")
        .map(|r| {
            let bps = rate(r);
            json!({
                "bench": r.id,
                "gb_per_s": bps / 1e9,
                "ceiling": "single-thread read bandwidth over 4 MiB (this run)",
                "ceiling_gb_per_s": read_bps / 1e9,
                "ratio": bps / read_bps,
            })
        })
        .collect();
    json!({"scoring": scoring, "dequantization": dequant})
}

/// Where the benches write their criterion results: `root/target/criterion`, given to criterion
/// as an absolute `CRITERION_HOME` (so `CARGO_TARGET_DIR` or a cargo config cannot move them
/// where the summary does not look).
fn criterion_home(root: &Path) -> PathBuf {
    root.join("target/criterion")
}

/// Runs `cargo bench -p reference --bench NAME` (output shown), failing on a non-zero exit.
fn cargo_bench(root: &Path, name: &str) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let st = Command::new(cargo)
        .current_dir(root)
        .env("CRITERION_HOME", criterion_home(root))
        .args(["bench", "-p", "reference", "--bench", name])
        .status()
        .with_context(|| format!("running cargo bench --bench {name}"))?;
    if !st.success() {
        bail!("cargo bench --bench {name} failed ({st})");
    }
    Ok(())
}

/// Prompt tokens of the long-context decode bench (`decode_long_prompt` in the summary).
#[cfg(feature = "cuda")]
const LONG_PROMPT: usize = 2048;

/// The GPU part: `runtime bench` (with the default 12B-shaped drafter) after a 32-token prompt,
/// the same without the drafter after a [`LONG_PROMPT`]-token one, and `runtime mv-bench`, or
/// why it was skipped.
#[cfg(feature = "cuda")]
fn gpu_summary(format: &str) -> Value {
    if let Some(why) = runtime::device::unavailable_reason() {
        return json!({"skipped": why});
    }
    let Some(mix) = reference::quant::WeightMix::parse(format) else {
        return json!({"skipped": format!("unknown format {format}")});
    };
    let draft = runtime::bench::DraftOptions {
        shape: runtime::bench::AssistantShape::plausible_12b(),
        mix: reference::quant::WeightMix::Uniform(reference::quant::GgmlType::BF16),
    };
    let decode = runtime::bench::run(mix, 32, 32, Some(&draft))
        .unwrap_or_else(|e| json!({"error": e.to_string()}));
    // long context: the sliding layers' whole window of 1024 keys, 2048+ on the full layers
    let decode_long = runtime::bench::run(mix, LONG_PROMPT, 32, None)
        .unwrap_or_else(|e| json!({"error": e.to_string()}));
    let mv = runtime::Gpu::new(0)
        .and_then(|gpu| runtime::mvbench::run(&gpu, 50, None))
        .unwrap_or_else(|e| json!({"error": e.to_string()}));
    json!({"decode": decode, "decode_long_prompt": decode_long, "matvec": mv})
}

#[cfg(not(feature = "cuda"))]
fn gpu_summary(_format: &str) -> Value {
    json!({"skipped": "xtask built without the `cuda` feature (on a machine with a GPU: cargo run -p xtask --features cuda -- bench)"})
}

/// Runs the verb: the benches, then `summary.json` (printed and written).
pub fn run(a: &Args) -> anyhow::Result<()> {
    // checked up front (the GPU part that reads it runs last, and only with a GPU)
    if reference::quant::WeightMix::parse(&a.format).is_none() {
        anyhow::bail!(
            "--format {}: not Q2_K_MIX or a ggml type name (e.g. Q4_K, Q8_0, BF16)",
            a.format
        );
    }
    // the scoring bench reads the dense fixture: without it --quick has nothing to measure
    let scored = crate::conformance::fixture_file("models/dense-target.F32.gguf", "");
    if let (true, Err(why)) = (a.quick, &scored) {
        anyhow::bail!("--quick runs only the oracle scoring bench, which needs its fixture: {why}");
    }
    let root = workspace_root();
    let out = a.out.clone().unwrap_or_else(|| root.join("target/bench"));
    // the conformance rule: created if missing, writable, a folder (named as a file when it is one)
    suites::conformance::check_out_dir(&out)?;
    let started = std::time::SystemTime::now();
    eprintln!("bench: single-thread read bandwidth …");
    let read_bps = read_bandwidth_1thread(4 << 20, 64);
    let dram_bps = read_bandwidth_1thread(512 << 20, 1);
    eprintln!(
        "bench: {:.1} GB/s over 4 MiB, {:.1} GB/s over 512 MiB",
        read_bps / 1e9,
        dram_bps / 1e9
    );
    cargo_bench(&root, "score")?;
    if !a.quick {
        cargo_bench(&root, "dequant")?;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let results = criterion_results(&criterion_home(&root), Some(started));
    let gpu = if a.no_gpu {
        json!({"skipped": "--no-gpu"})
    } else {
        gpu_summary(&a.format)
    };
    let mut cpu = cpu_summary(&results, threads, read_bps);
    if let Err(why) = &scored {
        cpu["scoring"] = json!({ "skipped": why });
    }
    cpu["read_gb_per_s_1thread"] = json!({"4MiB": read_bps / 1e9, "512MiB": dram_bps / 1e9});
    let summary = json!({
        "cpu": cpu,
        "gpu": gpu,
    });
    let text = serde_json::to_string_pretty(&summary)?;
    println!("{text}");
    let path = out.join("summary.json");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(id: &str, median_s: f64, unit: &str, per_iter: f64) -> CriterionResult {
        CriterionResult {
            id: id.into(),
            median_s,
            unit: unit.into(),
            per_iter,
        }
    }

    /// Hand-derived: scoring 2e9 FLOP in 1 s = 2 GFLOP/s; the peak bench 64e6 FLOP in 0.004 s =
    /// 16 GFLOP/s per core, × 2 threads = 32 → ratio 0.0625. Dequantization 1e9 bytes in 0.5 s =
    /// 2 GB/s against a 10 GB/s read ceiling → 0.2; element-throughput groups are not listed.
    #[test]
    fn ratios_to_ceilings() {
        let res = [
            r(
                "oracle/madd_peak_1core (elements = FLOP)",
                0.004,
                "elements",
                64e6,
            ),
            r(
                "oracle/score_dense_f32_4x256 (elements = FLOP)",
                1.0,
                "elements",
                2e9,
            ),
            r("dequantize_f32/bytes/Q4_K", 0.5, "bytes", 1e9),
            r("dequantize_f32/elements/Q4_K", 0.5, "elements", 1e6),
        ];
        let v = cpu_summary(&res, 2, 10e9);
        assert!((v["scoring"]["gflop_per_s"].as_f64().unwrap() - 2.0).abs() < 1e-12);
        assert!((v["scoring"]["ceiling_gflop_per_s"].as_f64().unwrap() - 32.0).abs() < 1e-9);
        assert!((v["scoring"]["ratio"].as_f64().unwrap() - 0.0625).abs() < 1e-12);
        let d = v["dequantization"].as_array().unwrap();
        assert_eq!(d.len(), 1);
        assert!((d[0]["ratio"].as_f64().unwrap() - 0.2).abs() < 1e-12);
        // without the scoring results the summary says why, not null
        let v = cpu_summary(&res[2..], 2, 10e9);
        assert!(v["scoring"]["skipped"].is_string(), "{v}");
    }

    /// A criterion folder as criterion 0.5 writes it (benchmark.json + estimates.json, medians in
    /// ns) is read back; a folder without them is an error naming the file.
    #[test]
    fn reads_criterion_folders() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        let new = dir.join("g/f/new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(
            new.join("benchmark.json"),
            r#"{"group_id":"g","function_id":"f","full_id":"g/f","throughput":{"Bytes":4096}}"#,
        )
        .unwrap();
        std::fs::write(
            new.join("estimates.json"),
            r#"{"mean":{"point_estimate":2000.0},"median":{"point_estimate":1000.0}}"#,
        )
        .unwrap();
        let got = read_criterion(&dir.join("g/f")).unwrap();
        assert_eq!(
            (got.id.as_str(), got.unit.as_str(), got.per_iter),
            ("g/f", "bytes", 4096.0)
        );
        assert!((got.median_s - 1e-6).abs() < 1e-18, "{}", got.median_s);
        assert_eq!(criterion_results(&dir, None), vec![got]);
        let err = read_criterion(&dir.join("g")).unwrap_err().to_string();
        assert!(err.contains("benchmark.json"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
