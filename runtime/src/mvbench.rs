//! `runtime mv-bench`: the tensor-core matvec launches of one 12B decode layer (spec/gemma4-text.md
//! §13.3 shapes, llama.cpp's Q2_K mix as in [`crate::bench::WeightMix::Q2KMix`]) timed alone, at
//! 1, 2, 4 and 8 columns, against `B_read` measured in the same run. It is the quick loop for
//! matvec kernel work: with `GEMMA4_KERNEL_SRC` ([`kernels::SOURCE_DIR_ENV`]) pointing at edited
//! sources, a variant is timed without a rebuild. Each case also reports a hash of its output bits
//! (so variants can be compared for identical sums) and whether column 0 is bitwise the same at
//! every column count (decode/verify row invariance), and names the kernel the launch took (the
//! wide-variant rule, or `GEMMA4_TC_WIDE`: `forward::tc_kernel`).

use cudarc::driver::sys::CUevent_flags;
use reference::quant::GgmlType;
use serde_json::{json, Value};

use crate::bench::{config_12b, synthetic, WeightMix};
use crate::check::{random_blocks, Rng};
use crate::error::{drv, RuntimeError};
use crate::forward::{ptr, Forward};
use crate::loader::Mat;
use crate::ops::{format_suffix, row_bytes};
use crate::Gpu;

/// One timed launch: a matrix, or two of one format and row length sharing a launch, plus
/// optionally a third of another format (`third`: its type and rows; `mvtcx`,
/// [`Forward::tc_matvec3`]).
struct Case {
    name: &'static str,
    ty: GgmlType,
    rows: usize,
    k: usize,
    rows2: usize,
    third: Option<(GgmlType, usize)>,
}

/// The matvec launches of a sliding 12B layer plus the tied head, in forward order.
fn cases() -> Vec<Case> {
    use GgmlType::*;
    let c = |name, ty, rows, k, rows2| Case {
        name,
        ty,
        rows,
        k,
        rows2,
        third: None,
    };
    vec![
        Case {
            third: Some((Q3_K, 2048)),
            ..c("attn_q+attn_k+attn_v", Q2_K, 4096, 3840, 2048)
        },
        c("attn_q+attn_k", Q2_K, 4096, 3840, 2048),
        c("attn_v", Q3_K, 2048, 3840, 0),
        c("attn_output", Q2_K, 3840, 4096, 0),
        c("ffn_gate+ffn_up", Q2_K, 15360, 3840, 15360),
        c("ffn_down", Q3_K, 3840, 15360, 0),
        c("output (tied token_embd)", Q6_K, 262_144, 3840, 0),
    ]
}

/// The names of the cases [`run`] times (what `--case` filters by substring).
pub fn case_names() -> Vec<&'static str> {
    cases().iter().map(|c| c.name).collect()
}

/// SHA-256 (first 16 hex digits) of the output bits, little-endian f32.
fn bits_hash(bits: &[f32]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for v in bits {
        h.update(v.to_bits().to_le_bytes());
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Times every case of [`cases`] whose name contains `only` (all when `None`) at 1, 2, 4, 8 columns (median of 5 batches of `iters`
/// launches, weights rotated over copies totalling ≥ 256 MiB so L2 holds none of them) and
/// returns the JSON table.
///
/// Errors: driver/NVRTC errors, a case format without a tensor-core kernel.
pub fn run(gpu: &Gpu, iters: usize, only: Option<&str>) -> Result<Value, RuntimeError> {
    // A one-layer model only to build a `Forward` (its launch helpers read the GPU only).
    let mut cfg = config_12b();
    cfg.n_layer = 1;
    cfg.n_vocab = 256;
    for v in [&mut cfg.n_ff, &mut cfg.n_head, &mut cfg.n_head_kv] {
        v.truncate(1);
    }
    cfg.is_swa.truncate(1);
    cfg.k_eq_v.truncate(1);
    cfg.kv_source.truncate(1);
    let model = synthetic(gpu, cfg, WeightMix::Q2KMix, 1)?;
    let fw = Forward { gpu, model: &model };
    let b_read = crate::bench::b_read(gpu)?;
    let mut rng = Rng::new(0x6d76_6265_6e63);
    let mut out = Vec::new();
    for case in cases()
        .into_iter()
        .filter(|c| only.is_none_or(|o| c.name.contains(o)))
    {
        let fmt = format_suffix(case.ty, case.name)?;
        let rb = row_bytes(case.ty, case.k, case.name)?;
        let mats = |ty: GgmlType, rows: usize, rng: &mut Rng| -> Result<Vec<Mat>, RuntimeError> {
            if rows == 0 {
                return Ok(Vec::new());
            }
            let (fmt, rb) = (
                format_suffix(ty, case.name)?,
                row_bytes(ty, case.k, case.name)?,
            );
            let host = random_blocks(ty, rows * case.k, rng);
            let copies = (256usize << 20).div_ceil(host.len()).max(2);
            (0..copies)
                .map(|_| {
                    Ok(Mat {
                        name: case.name.into(),
                        ty,
                        fmt,
                        rows,
                        cols: case.k,
                        row_bytes: rb,
                        data: gpu.stream.clone_htod(&host).map_err(drv("mv-bench"))?,
                    })
                })
                .collect()
        };
        let m1 = mats(case.ty, case.rows, &mut rng)?;
        let m2 = mats(case.ty, case.rows2, &mut rng)?;
        let (ty3, rows3) = case.third.unwrap_or((case.ty, 0));
        let m3 = mats(ty3, rows3, &mut rng)?;
        let y3 = gpu
            .stream
            .alloc_zeros::<f32>(8 * rows3.max(1))
            .map_err(drv("mv-bench y3"))?;
        let x: Vec<f32> = (0..8 * case.k)
            .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
            .collect();
        let xd = gpu.stream.clone_htod(&x).map_err(drv("mv-bench x"))?;
        let y1 = gpu
            .stream
            .alloc_zeros::<f32>(8 * case.rows)
            .map_err(drv("mv-bench y"))?;
        let y2 = gpu
            .stream
            .alloc_zeros::<f32>(8 * case.rows2.max(1))
            .map_err(drv("mv-bench y2"))?;
        let bytes = (case.rows + case.rows2) * rb + m3.first().map_or(0, |m| m.rows * m.row_bytes);
        let mut col0: Option<Vec<f32>> = None;
        let mut invariant = true;
        // The three-matrix launch against the same matrices launched as in a forward without it.
        let mut same_as_separate = true;
        for nc in [1usize, 2, 4, 8] {
            // The pieces or digits every matrix of the case reads.
            let kinds = kernels::tc_prep_kinds(m1.iter().chain(&m3).map(|m| m.fmt));
            fw.tc_prep(fmt, ptr(gpu, &xd), nc, case.k, kinds)?;
            let launch = |i: usize| {
                let c = i % m1.len();
                let second = m2.get(c).map(|w2| (w2, ptr(gpu, &y2)));
                match (second, m3.get(c)) {
                    (Some(s2), Some(w3)) => {
                        fw.tc_matvec3(&m1[c], nc, ptr(gpu, &y1), s2, (w3, ptr(gpu, &y3)))
                    }
                    _ => fw.tc_matvec(&m1[c], nc, ptr(gpu, &y1), second),
                }
            };
            launch(0)?;
            let mut times = Vec::new();
            for _ in 0..5 {
                let start = gpu
                    .ctx
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(drv("event"))?;
                let end = gpu
                    .ctx
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(drv("event"))?;
                gpu.spin(1_000_000)?;
                start.record(&gpu.stream).map_err(drv("event"))?;
                for i in 0..iters {
                    launch(i)?;
                }
                end.record(&gpu.stream).map_err(drv("event"))?;
                end.synchronize().map_err(drv("event"))?;
                times.push(
                    start.elapsed_ms(&end).map_err(drv("event"))? as f64 * 1e3 / iters as f64,
                );
            }
            times.sort_by(f64::total_cmp);
            let us = times[times.len() / 2];
            // Output of copy 0 for the invariance check and the hash.
            launch(0)?;
            let y = gpu.stream.clone_dtoh(&y1).map_err(drv("mv-bench y"))?;
            if let (Some(w2), Some(w3)) = (m2.first(), m3.first()) {
                let outs = |gpu: &Gpu| -> Result<Vec<f32>, RuntimeError> {
                    let mut v = gpu.stream.clone_dtoh(&y1).map_err(drv("mv-bench y"))?;
                    v.extend(gpu.stream.clone_dtoh(&y2).map_err(drv("mv-bench y2"))?);
                    v.extend(gpu.stream.clone_dtoh(&y3).map_err(drv("mv-bench y3"))?);
                    Ok(v)
                };
                let mixed = outs(gpu)?;
                fw.tc_matvec(&m1[0], nc, ptr(gpu, &y1), Some((w2, ptr(gpu, &y2))))?;
                fw.tc_matvec(w3, nc, ptr(gpu, &y3), None)?;
                let sep = outs(gpu)?;
                same_as_separate &= mixed
                    .iter()
                    .zip(&sep)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            }
            let c0 = y[..case.rows].to_vec();
            match &col0 {
                None => col0 = Some(c0),
                Some(first) => {
                    invariant &= first
                        .iter()
                        .zip(&c0)
                        .all(|(a, b)| a.to_bits() == b.to_bits())
                }
            }
            let gbs = bytes as f64 / (us * 1e-6) / 1e9;
            let kernel = match m3.first() {
                Some(w3) => crate::forward::tcx_kernel(
                    fmt,
                    w3.fmt,
                    nc,
                    [case.rows, case.rows2, rows3],
                    gpu.sm_count,
                ),
                None => crate::forward::tc_kernel(fmt, nc, case.rows, case.rows2, gpu.sm_count),
            };
            let line = format!(
                "mv-bench {:26} {} n={nc}: {:8.2} µs  {:6.0} GB/s  {:5.1} % of B_read  {kernel}",
                case.name,
                case.ty.name(),
                us,
                gbs,
                100.0 * gbs * 1e9 / b_read
            );
            println!("{line}");
            out.push(json!({
                "case": case.name, "type": case.ty.name(), "rows": case.rows, "rows2": case.rows2,
                "k": case.k, "ncols": nc, "kernel": kernel, "weight_bytes": bytes, "us": us, "gb_per_s": gbs,
                "fraction_of_b_read": gbs * 1e9 / b_read,
                "y_hash": bits_hash(&y[..nc * case.rows]),
            }));
        }
        println!(
            "mv-bench {:26} column 0 bitwise equal at n = 1, 2, 4, 8: {invariant}",
            case.name
        );
        out.push(json!({"case": case.name, "column0_invariant": invariant}));
        if case.third.is_some() {
            println!(
                "mv-bench {:26} outputs bitwise equal to the separate launches (q+k pair, v) at n = 1, 2, 4, 8: {same_as_separate}",
                case.name
            );
            out.push(json!({"case": case.name, "same_as_separate_launches": same_as_separate}));
        }
    }
    Ok(
        json!({"b_read_gb_per_s": b_read / 1e9, "kernel_src": std::env::var(kernels::SOURCE_DIR_ENV).ok(), "cases": out}),
    )
}
