//! `runtime gpu-check`: every kernel against the CPU reference on fresh random inputs, plus
//! bandwidth probes. Writes `gpu-check.log` and `gpu-check.json` into the output folder.
//!
//! Pass rules (any NaN in a GPU output fails, because every comparison is written
//! `err <= tol`, which is false for NaN; outputs are poisoned with a NaN pattern before each
//! launch so an element the kernel never wrote fails too):
//! - dequant: bit-identical to `reference::quant::dequantize_f32` (spec §3.6), every format.
//! - matvec: `|y − y64| ≤ (⌈K/1024⌉ + 16) · 2⁻²⁴ · Σ_k |w_k x_k|` where `y64` is the f64 dot
//!   product of the exact f64 weights (`reference::quant::dequantize`) and the same f32 `x`;
//!   `⌈K/1024⌉ + 16` bounds the number of f32 roundings any product passes through in
//!   `matvec.cu` (`⌈K/1024⌉ + 13`, +1 for the f32 weight itself, +2 slack), i.e. Higham's γₙ.
//! - rmsnorm: `|y − y64| ≤ (⌈n/256⌉ + 24) · 2⁻²⁴ · |y64|`.
//! - rope: `|y − y64| ≤ 2⁻²⁴·|y64| + 1e−14·(|x₁| + |x₂|)` (f64 math rounded once to f32).
//! - geglu: `|y − y64| ≤ 16 · 2⁻²⁴ · |g·u|`; softcap: `|y − y64| ≤ 8 · 2⁻²⁴ · |y64|`.
//! - argmax: index equal to the CPU's (ties → lower index), value bit-identical.
//! - topk: the k best ids and value bits equal to `reference::model::logits::top_k` (masked ids,
//!   ties across blocks), non-finite values counted.
//!
//! Bandwidth: `B_read` = bytes/s of `sum_f32x4` over a 4 GiB buffer (median of timed runs, best
//! grid); matvec GB/s = weight bytes / kernel time, with enough copies of the matrix rotated
//! that the 60 MB L2 cannot hold them. Matvec launches are queued behind a `spin_ns` kernel
//! and timed as a batch (GPU events), so host launch cost is excluded; the host cost per
//! launch is reported separately.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaSlice;
use reference::quant::{dequantize, dequantize_f32, GgmlType, SUPPORTED_TYPES};
use serde_json::{json, Value};

use crate::ops::{format_suffix, rope_inv_freq_default, rope_inv_freq_proportional, row_bytes};
use crate::Gpu;

const U: f64 = 1.0 / (1u64 << 24) as f64;
const POISON: u32 = 0x7FC0_0000;

/// Options of one check run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Folder for `gpu-check.log` and `gpu-check.json` (created).
    pub out_dir: PathBuf,
    /// Small sizes and no bandwidth probes (for compute-sanitizer runs).
    pub quick: bool,
    /// Seed of the input generator.
    pub seed: u64,
}

/// SplitMix64: a small, fast, seedable generator for test inputs.
pub struct Rng(u64);

impl Rng {
    /// A generator with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// A finite f16 bit pattern: random sign and mantissa, exponent 2⁻¹⁴…2¹¹, and 1 in 64 a
    /// subnormal (so scale fields span the range the spec's exactness claim covers).
    fn f16_scale(&mut self) -> u16 {
        let r = self.next_u64();
        let sign = ((r & 1) as u16) << 15;
        let mant = ((r >> 1) & 0x3FF) as u16;
        let exp = if (r >> 16).is_multiple_of(64) {
            0
        } else {
            1 + ((r >> 24) % 26) as u16
        };
        sign | (exp << 10) | mant
    }
    /// A finite f32 bit pattern with exponent 2^(lo..=hi), random sign and mantissa; 1 in 64
    /// is a zero or subnormal.
    fn f32_bits(&mut self, lo: i32, hi: i32) -> u32 {
        let r = self.next_u64();
        let sign = ((r & 1) as u32) << 31;
        let mant = ((r >> 1) & 0x7F_FFFF) as u32;
        if (r >> 32).is_multiple_of(64) {
            return sign | (mant >> ((r >> 40) % 24));
        }
        let e = lo + ((r >> 40) % (hi - lo + 1) as u64) as i32;
        sign | (((127 + e) as u32) << 23) | mant
    }
}

/// Offsets of the f16 scale fields inside one block of `ty` (`spec/gguf-gemma4.md` §3.3–§3.4).
fn f16_scale_offsets(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[0],
        Q4_1 | Q5_1 | Q4_K | Q5_K => &[0, 2],
        Q2_K => &[80, 82],
        Q3_K => &[108],
        Q6_K => &[208],
        _ => &[],
    }
}

/// Random, valid, finite blocks of `ty` for `n` elements: random payload bytes with finite
/// scale fields; plain float types get finite values (no NaN/Inf anywhere, so any NaN in a GPU
/// output is the kernel's fault).
pub fn random_blocks(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    let bytes = ty.bytes_for(n as u64).expect("whole blocks") as usize;
    let mut v = vec![0u8; bytes];
    match ty {
        GgmlType::F32 => {
            for c in v.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.f32_bits(-12, 4).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for c in v.chunks_exact_mut(2) {
                let r = rng.next_u64();
                let h = ((r & 0x83FF) as u16) | ((((r >> 16) % 31) as u16) << 10);
                c.copy_from_slice(&h.to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for c in v.chunks_exact_mut(2) {
                let h = (rng.f32_bits(-12, 4) >> 16) as u16;
                c.copy_from_slice(&h.to_le_bytes());
            }
        }
        _ => {
            for c in v.chunks_mut(8) {
                let r = rng.next_u64().to_le_bytes();
                c.copy_from_slice(&r[..c.len()]);
            }
            let ts = ty.type_size();
            for blk in v.chunks_exact_mut(ts) {
                for &o in f16_scale_offsets(ty) {
                    blk[o..o + 2].copy_from_slice(&rng.f16_scale().to_le_bytes());
                }
                if ty == GgmlType::Q8_K {
                    blk[0..4].copy_from_slice(&rng.f32_bits(-20, 2).to_le_bytes());
                }
            }
        }
    }
    v
}

/// Log to stdout and a file.
struct Log {
    file: std::fs::File,
}

impl Log {
    fn line(&mut self, s: &str) {
        println!("{s}");
        let _ = writeln!(self.file, "{s}");
    }
}

/// `err ≤ tol`, false for NaN (so NaN never passes).
fn within(err: f64, tol: f64) -> bool {
    matches!(
        err.partial_cmp(&tol),
        Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
    )
}

/// `err` in f32 units of `|want|` (`err / (U·|want|)`), for the logs' "max err" figures;
/// infinite for a NaN `err` (`f64::max` would drop a NaN) and when `want` is 0 and `err` is not.
fn units_rel(err: f64, want: f64) -> f64 {
    if err.is_nan() || (want == 0.0 && err != 0.0) {
        f64::INFINITY
    } else if want == 0.0 {
        0.0
    } else {
        err / (U * want.abs())
    }
}

/// RMSNorm of f32 rows `[T, n]` in f64 by the oracle's own `reference::model::norm::rms_normed`
/// (`spec/gemma4-text.md` §3): the kernels' reference.
fn rmsnorm_f64(x: &[f32], n: usize, w: Option<&[f32]>, eps: f32) -> Vec<f64> {
    let to64 = |v: &[f32]| v.iter().map(|&a| f64::from(a)).collect::<Vec<f64>>();
    let w64 = w.map(to64);
    reference::model::norm::rms_normed(&to64(x), n, w64.as_deref(), f64::from(eps))
}

fn median(v: &mut [f32]) -> f32 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Kernel times in ms (GPU events around each launch), one per iteration.
fn time_kernel(
    gpu: &Gpu,
    iters: usize,
    mut f: impl FnMut(usize) -> Result<()>,
) -> Result<Vec<f32>> {
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut out = Vec::with_capacity(iters);
    for i in 0..iters {
        start.record(&gpu.stream)?;
        f(i)?;
        end.record(&gpu.stream)?;
        end.synchronize()?;
        out.push(start.elapsed_ms(&end)?);
    }
    Ok(out)
}

fn poisoned(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>> {
    let mut y = gpu.stream.alloc_zeros::<f32>(n)?;
    gpu.fill_f32_bits(&mut y.as_view_mut(), POISON)?;
    Ok(y)
}

fn rand_f32(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(lo, hi) as f32).collect()
}

/// Runs the whole check; returns `Ok(true)` when everything passed. Errors: GPU unavailable,
/// driver failures, I/O on the output folder.
pub fn run(opts: &CheckOptions) -> Result<bool> {
    std::fs::create_dir_all(&opts.out_dir)
        .with_context(|| format!("creating {}", opts.out_dir.display()))?;
    let mut log = Log {
        file: std::fs::File::create(opts.out_dir.join("gpu-check.log"))?,
    };
    let t0 = std::time::Instant::now();
    let gpu = Gpu::new(0)?;
    log.line(&format!(
        "device: {} cc {}.{} SMs {} memory {:.1} GiB; nvrtc {}",
        gpu.name,
        gpu.cc.0,
        gpu.cc.1,
        gpu.sm_count,
        gpu.total_mem as f64 / (1u64 << 30) as f64,
        kernels::nvrtc_available().unwrap_or_default()
    ));
    let tc = std::time::Instant::now();
    gpu.modules.load_all()?;
    let compile_s = tc.elapsed().as_secs_f64();
    log.line(&format!(
        "compiled + loaded all kernel families in {compile_s:.2} s"
    ));

    let mut rng = Rng::new(opts.seed);
    let mut all_ok = true;
    let mut report = json!({
        "device": gpu.name, "compute_capability": [gpu.cc.0, gpu.cc.1], "sm_count": gpu.sm_count,
        "seed": opts.seed, "quick": opts.quick, "compile_s": compile_s,
    });

    let dq = check_dequant(&gpu, &mut rng, opts, &mut log, &mut all_ok)?;
    report["dequant"] = dq;
    let mv = check_matvec(&gpu, &mut rng, opts, &mut log, &mut all_ok)?;
    report["matvec"] = mv;
    report["rmsnorm"] = check_rmsnorm(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["rope"] = check_rope(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["qkv_post"] = check_qkv_post(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["attention"] = check_attention(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["geglu_softcap"] = check_activation(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["prep_producers"] = check_prep_producers(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["argmax"] = check_argmax(&gpu, &mut rng, &mut log, &mut all_ok)?;
    report["topk"] = check_topk(&gpu, &mut rng, &mut log, &mut all_ok)?;
    if !opts.quick {
        let b_read = bandwidth_read(&gpu, &mut log, &mut report)?;
        bandwidth_matvec(&gpu, &mut rng, b_read, &mut log, &mut report)?;
    }
    report["all_passed"] = json!(all_ok);
    report["elapsed_s"] = json!(t0.elapsed().as_secs_f64());
    log.line(&format!(
        "RESULT: {} ({:.1} s)",
        if all_ok { "ALL PASSED" } else { "FAILURES" },
        t0.elapsed().as_secs_f64()
    ));
    write_json(&opts.out_dir.join("gpu-check.json"), &report)?;
    Ok(all_ok)
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(v)?)?;
    Ok(())
}

fn check_dequant(
    gpu: &Gpu,
    rng: &mut Rng,
    opts: &CheckOptions,
    log: &mut Log,
    ok: &mut bool,
) -> Result<Value> {
    let n = if opts.quick { 1 << 14 } else { 1 << 20 };
    let mut res = serde_json::Map::new();
    for ty in SUPPORTED_TYPES {
        let bytes = random_blocks(ty, n, rng);
        let mut cpu = vec![0f32; n];
        dequantize_f32(ty, &bytes, &mut cpu)?;
        let src = gpu.stream.clone_htod(&bytes)?;
        let mut out = poisoned(gpu, n)?;
        gpu.dequant(ty, &src.as_view(), n, &mut out.as_view_mut())?;
        let got = gpu.stream.clone_dtoh(&out)?;
        let mut mism = 0usize;
        let mut zero_sign = 0usize;
        let mut nan = 0usize;
        let mut first = String::new();
        for (i, (&g, &c)) in got.iter().zip(&cpu).enumerate() {
            if g.is_nan() {
                nan += 1;
            }
            if g.to_bits() != c.to_bits() {
                mism += 1;
                if g == 0.0 && c == 0.0 {
                    zero_sign += 1;
                }
                if first.is_empty() {
                    let _ = write!(
                        first,
                        "elem {i}: gpu {g:e} ({:#010x}) cpu {c:e} ({:#010x})",
                        g.to_bits(),
                        c.to_bits()
                    );
                }
            }
        }
        let pass = mism == 0 && nan == 0;
        *ok &= pass;
        log.line(&format!(
            "dequant {:7} n={n}: {} mismatches {mism} (signed-zero {zero_sign}) NaN {nan} {first}",
            ty.name(),
            if pass { "EXACT" } else { "FAIL " }
        ));
        res.insert(
            ty.name().into(),
            json!({"n": n, "bit_exact": pass, "mismatches": mism, "signed_zero_mismatches": zero_sign, "nan": nan, "first_mismatch": first}),
        );
    }
    Ok(Value::Object(res))
}

/// One matvec correctness case; returns (pass, max err in units of 2⁻²⁴·Σ|wx|, max |err|/|y|).
fn matvec_case(
    gpu: &Gpu,
    rng: &mut Rng,
    ty: GgmlType,
    rows: usize,
    k: usize,
    nc: usize,
    tc: bool,
) -> Result<(bool, f64, f64, usize)> {
    let wbytes = random_blocks(ty, rows * k, rng);
    let mut w64 = vec![0f64; rows * k];
    dequantize(ty, &wbytes, &mut w64)?;
    let x = rand_f32(rng, nc * k, -1.0, 1.0);
    let wd = gpu.stream.clone_htod(&wbytes)?;
    let xd = gpu.stream.clone_htod(&x)?;
    let mut yd = poisoned(gpu, nc * rows)?;
    let mv = if tc { Gpu::matvec_tc } else { Gpu::matvec };
    mv(
        gpu,
        ty,
        &wd.as_view(),
        rows,
        k,
        &xd.as_view(),
        nc,
        &mut yd.as_view_mut(),
    )?;
    let y = gpu.stream.clone_dtoh(&yd)?;
    let depth = matvec_tol_units(k, tc);
    let digits = tc && format_suffix(ty, "check").is_ok_and(kernels::tc_int8_digits);
    let bits = kernels::tc_digit_bits(kernels::tc_digits());
    // Per-element offsets b_G of Q2_K's groups (its quants zeroed, the rest of each block kept:
    // scales[16], qs[64], d, dmin; spec/gguf-gemma4.md §3 Q2_K): the digits' rounding meets
    // the scaled quants w − b_G (the offsets take the group sums apart), and at two digits the
    // sums themselves are not exact.
    let offsets = if digits && ty == GgmlType::Q2_K {
        Some(q2_k_offsets(&wbytes)?)
    } else {
        None
    };
    let two_piece_sums = kernels::tc_digits() < 3;
    let (mut pass, mut worst_units, mut worst_rel, mut bad) = (true, 0f64, 0f64, 0usize);
    for c in 0..nc {
        let xc = &x[c * k..(c + 1) * k];
        // Integer-mma formats read x rounded to the int8 digits' grid: per 256-element block
        // (one super-block, `kernels::TC_SUPER_BLOCK`) with largest |x| in [2^e, 2^(e+1)),
        // x = N·2^(e + 1 − B) + δ with |δ| ≤ 2^(e−B), B = kernels::tc_digit_bits (22 at the
        // default three digits, 14 at two; `common.cuh`, TC_XD_OFFSET), so the product may differ
        // from Σ w·x by up to Σ_blocks 2^(e−B)·Σ|w − b| on top of the f32 roundings (b: the
        // group's offset for Q2_K, whose offsets are summed apart, 0 for Q3_K and Q6_K).
        let grid: Vec<f64> = if digits {
            xc.chunks(kernels::TC_SUPER_BLOCK)
                .map(|b| {
                    let m = b.iter().fold(0f32, |m, v| m.max(v.abs()));
                    if m > 0.0 {
                        2f64.powi(m.log2().floor() as i32 - bits)
                    } else {
                        0.0
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        // Q2_K's offsets −dmin·m_G·S_G take the group sums S_G as their bf16 pieces; at two
        // digits (GEMMA4_TC_DIGITS=2) the pieces hi and mid only (`common.cuh` tc_prep_sum), S_G to within
        // 2⁻¹⁶·|S_G| (hi keeps 8 significant bits, mid rounds the rest to 8 more: tc_split3).
        // The bound adds Σ_G |b_G|·2⁻¹⁶·|S_G| with b_G the group's offset, which is the weight
        // of a zero quant: the dequantized blocks with their quants zeroed (`offsets`).
        let sums_err: Vec<f64> = if let (Some(b), true) = (offsets.as_deref(), two_piece_sums) {
            // |S_G|·2⁻¹⁶ once per column, then Σ_G |b_G| times it per row
            let sg: Vec<f64> = xc
                .chunks(16)
                .map(|xg| xg.iter().map(|&v| v as f64).sum::<f64>().abs() * 2f64.powi(-16))
                .collect();
            (0..rows)
                .map(|r| {
                    b[r * k..(r + 1) * k]
                        .chunks(16)
                        .zip(&sg)
                        .map(|(bg, s)| bg[0].abs() * s)
                        .sum()
                })
                .collect()
        } else {
            vec![0.0; rows]
        };
        for r in 0..rows {
            let wr = &w64[r * k..(r + 1) * k];
            let br = offsets.as_deref().map(|b| &b[r * k..(r + 1) * k]);
            let (mut s, mut a, mut q) = (0f64, 0f64, 0f64);
            for (e, (w, &xv)) in wr.iter().zip(xc).enumerate() {
                let p = w * xv as f64;
                s += p;
                a += p.abs();
                if digits {
                    let scaled = w - br.map_or(0.0, |b| b[e]);
                    q += grid[e / kernels::TC_SUPER_BLOCK] * scaled.abs();
                }
            }
            let g = y[c * rows + r] as f64;
            let err = (g - s).abs();
            let tol = 1.01 * (depth * U * a + q + sums_err[r]);
            if !within(err, tol) {
                pass = false;
                bad += 1;
            }
            let units = if a > 0.0 {
                err / (U * a)
            } else if err == 0.0 {
                0.0
            } else {
                f64::INFINITY
            };
            worst_units = worst_units.max(if units.is_nan() { f64::INFINITY } else { units });
            if s != 0.0 {
                worst_rel = worst_rel.max(err / s.abs());
            }
        }
    }
    Ok((pass, worst_units, worst_rel, bad))
}

/// The offset b_G = −dmin·m_G of every element's group in Q2_K blocks (`spec/gguf-gemma4.md` §3
/// Q2_K: `x = d·(s & 0xF)·q − dmin·(s >> 4)`), one f64 per element: the blocks dequantized with
/// their quants (bytes 16..80 of each 84-byte block) zeroed. Errors: not whole blocks.
fn q2_k_offsets(blocks: &[u8]) -> Result<Vec<f64>> {
    let ty = GgmlType::Q2_K;
    let mut z = blocks.to_vec();
    for blk in z.chunks_exact_mut(ty.type_size()) {
        blk[16..80].fill(0);
    }
    let mut b = vec![0f64; z.len() / ty.type_size() * ty.block_size()];
    dequantize(ty, &z, &mut b)?;
    Ok(b)
}

/// Tolerance of [`matvec_case`] in units of `2⁻²⁴ · Σ|w·x|`: CUDA-core `⌈K/1024⌉ + 16`
/// (`matvec.cu`); tensor-core `K/16 + 64`: one f32 rounding per 16-group scale step and per
/// offset term plus the tensor cores' f32 sums, and the offset form `a·Σq·x + b·Σx` can cancel
/// (an error relative to `Σ|a·q·x| + Σ|b·x|`, not to `Σ|w·x|`). The integer-mma formats
/// ([`kernels::tc_int8_digits`]) add the activations' rounding to their digit grid (in
/// [`matvec_case`]).
fn matvec_tol_units(k: usize, tc: bool) -> f64 {
    if tc {
        (k / 16) as f64 + 64.0
    } else {
        k.div_ceil(1024) as f64 + 16.0
    }
}

fn check_matvec(
    gpu: &Gpu,
    rng: &mut Rng,
    opts: &CheckOptions,
    log: &mut Log,
    ok: &mut bool,
) -> Result<Value> {
    let cases: Vec<(usize, usize, Vec<usize>)> = if opts.quick {
        vec![(13, 512, vec![1, 3, 8])]
    } else {
        vec![(67, 2560, (1..=8).collect()), (37, 15360, vec![1, 8])]
    };
    let mut res = serde_json::Map::new();
    for ty in SUPPORTED_TYPES {
        let mut entries = Vec::new();
        let mut line = format!("matvec  {:7}", ty.name());
        let mut ty_ok = true;
        let fmt = crate::ops::format_suffix(ty, "check")?;
        for (rows, k, ncs) in &cases {
            for &nc in ncs {
                for tc in [false, true] {
                    if tc && !kernels::tc_supported(fmt, *k, gpu.cc) {
                        continue;
                    }
                    let (pass, units, rel, bad) = matvec_case(gpu, rng, ty, *rows, *k, nc, tc)?;
                    ty_ok &= pass;
                    let _ = write!(
                        line,
                        " [{}{rows}x{k} n{nc}: {}{units:.2}u]",
                        if tc { "tc " } else { "" },
                        if pass { "" } else { "FAIL " }
                    );
                    entries.push(json!({"path": if tc { "tensor-core" } else { "cuda-core" }, "rows": rows, "k": k, "ncols": nc, "pass": pass, "max_err_units_of_2^-24_sum_abs": units, "max_rel_err": rel, "failing_outputs": bad, "tol_units": matvec_tol_units(*k, tc)}));
                }
            }
        }
        *ok &= ty_ok;
        log.line(&format!("{} {}", if ty_ok { "PASS" } else { "FAIL" }, line));
        res.insert(ty.name().into(), Value::Array(entries));
    }
    Ok(Value::Object(res))
}

fn check_rmsnorm(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let eps = 1e-6f32;
    let mut out = Vec::new();
    for (rows, n, weighted) in [
        (4usize, 3840usize, true),
        (64, 256, false),
        (3, 15360, true),
    ] {
        let x = rand_f32(rng, rows * n, -3.0, 3.0);
        let w = rand_f32(rng, n, -2.0, 2.0);
        let xd = gpu.stream.clone_htod(&x)?;
        let wd = gpu.stream.clone_htod(&w)?;
        let mut yd = poisoned(gpu, rows * n)?;
        let wv = wd.as_view();
        gpu.rmsnorm(
            &xd.as_view(),
            weighted.then_some(&wv),
            &mut yd.as_view_mut(),
            rows,
            n,
            eps,
        )?;
        let y = gpu.stream.clone_dtoh(&yd)?;
        let tol_units = n.div_ceil(256) as f64 + 24.0;
        let (mut pass, mut worst) = (true, 0f64);
        let want = rmsnorm_f64(&x, n, weighted.then_some(&w[..]), eps);
        for (&got, &y64) in y.iter().zip(&want) {
            let err = (got as f64 - y64).abs();
            pass &= within(err, tol_units * U * y64.abs());
            worst = worst.max(units_rel(err, y64));
        }
        *ok &= pass;
        log.line(&format!(
            "{} rmsnorm rows={rows} n={n} weighted={weighted}: max err {worst:.2} u·|y| (tol {tol_units})",
            if pass { "PASS" } else { "FAIL" }
        ));
        out.push(json!({"rows": rows, "n": n, "weighted": weighted, "pass": pass, "max_err_units_rel": worst, "tol_units": tol_units}));
    }
    Ok(Value::Array(out))
}

/// The fused `qkv_post_f32` (q/k/v norms, RoPE, KV store) against the separate `rmsnorm_f32` and
/// `rope_neox_f32` kernels (themselves checked against f64 above): q, the written K and V cache
/// rows bitwise equal, every other cache row still poisoned. Two 12B layer shapes: sliding
/// (d 256, 16 q / 8 KV heads, own V) and full (d 512, 1 KV head, V = raw K, proportional RoPE),
/// 3 tokens of 2 slots at distinct rows, one position past the ring size (1001 → row 41 of 48).
fn check_qkv_post(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let slots: Vec<i32> = vec![0, 1, 1];
    let pos: Vec<i32> = vec![5, 40, 1001];
    let (t, n_slots, rows, eps) = (slots.len(), 2usize, 48usize, 1e-6f32);
    let mut out = Vec::new();
    for (kind, d, nh, nkv, k_eq_v, inv) in [
        (
            "sliding d=256",
            256usize,
            16usize,
            8usize,
            false,
            rope_inv_freq_default(256, 1e4),
        ),
        (
            "full d=512 k_eq_v",
            512,
            16,
            1,
            true,
            rope_inv_freq_proportional(512, 1e6, 0.25, 1.0),
        ),
    ] {
        let q = rand_f32(rng, t * nh * d, -3.0, 3.0);
        let k = rand_f32(rng, t * nkv * d, -3.0, 3.0);
        let v = rand_f32(rng, t * nkv * d, -3.0, 3.0);
        let (qw, kw) = (rand_f32(rng, d, -2.0, 2.0), rand_f32(rng, d, -2.0, 2.0));
        let mut qd = gpu.stream.clone_htod(&q)?;
        let (kd, vd) = (gpu.stream.clone_htod(&k)?, gpu.stream.clone_htod(&v)?);
        let (qwd, kwd) = (gpu.stream.clone_htod(&qw)?, gpu.stream.clone_htod(&kw)?);
        let (sd, pd) = (gpu.stream.clone_htod(&slots)?, gpu.stream.clone_htod(&pos)?);
        let fd = gpu.stream.clone_htod(&inv)?;
        let cache_n = n_slots * rows * nkv * d;
        let (mut kc, mut vc) = (poisoned(gpu, cache_n)?, poisoned(gpu, cache_n)?);
        gpu.qkv_post(
            &mut qd.as_view_mut(),
            &kd.as_view(),
            &vd.as_view(),
            Some((&mut kc.as_view_mut(), &mut vc.as_view_mut(), rows, k_eq_v)),
            (&qwd.as_view(), &kwd.as_view()),
            (&sd.as_view(), &pd.as_view()),
            &fd.as_view(),
            (t, nh, nkv, d),
            eps,
        )?;
        // The separate kernels.
        let sep = |x: &[f32], w: Option<&[f32]>, heads: usize, rope: bool| -> Result<Vec<f32>> {
            let xd = gpu.stream.clone_htod(x)?;
            let wd = gpu.stream.clone_htod(w.unwrap_or(&[0.0]))?;
            let mut nd = poisoned(gpu, t * heads * d)?;
            let wv = wd.as_view();
            gpu.rmsnorm(
                &xd.as_view(),
                w.map(|_| &wv),
                &mut nd.as_view_mut(),
                t * heads,
                d,
                eps,
            )?;
            if !rope {
                return Ok(gpu.stream.clone_dtoh(&nd)?);
            }
            let mut rd = poisoned(gpu, t * heads * d)?;
            gpu.rope_neox(
                &nd.as_view(),
                &mut rd.as_view_mut(),
                &pd.as_view(),
                &fd.as_view(),
                t,
                heads,
                d,
            )?;
            Ok(gpu.stream.clone_dtoh(&rd)?)
        };
        let q_ref = sep(&q, Some(&qw), nh, true)?;
        let k_ref = sep(&k, Some(&kw), nkv, true)?;
        let v_ref = sep(if k_eq_v { &k } else { &v }, None, nkv, false)?;
        let (q_got, kc_got, vc_got) = (
            gpu.stream.clone_dtoh(&qd)?,
            gpu.stream.clone_dtoh(&kc)?,
            gpu.stream.clone_dtoh(&vc)?,
        );
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        let q_ok = same(&q_got, &q_ref);
        let w = nkv * d;
        let (mut kv_ok, mut written) = (true, vec![false; n_slots * rows]);
        for ti in 0..t {
            let row = slots[ti] as usize * rows + pos[ti] as usize % rows;
            written[row] = true;
            kv_ok &= same(
                &kc_got[row * w..(row + 1) * w],
                &k_ref[ti * w..(ti + 1) * w],
            );
            kv_ok &= same(
                &vc_got[row * w..(row + 1) * w],
                &v_ref[ti * w..(ti + 1) * w],
            );
        }
        let untouched = (0..n_slots * rows).filter(|&r| !written[r]).all(|r| {
            kc_got[r * w..(r + 1) * w]
                .iter()
                .chain(&vc_got[r * w..(r + 1) * w])
                .all(|x| x.to_bits() == POISON)
        });
        let pass = q_ok && kv_ok && untouched;
        *ok &= pass;
        log.line(&format!(
            "{} qkv_post {kind}: q bitwise {q_ok}, K/V cache rows bitwise {kv_ok}, other rows untouched {untouched}",
            if pass { "PASS" } else { "FAIL" }
        ));
        out.push(json!({"kind": kind, "pass": pass, "q_bitwise": q_ok, "kv_bitwise": kv_ok, "untouched": untouched}));
    }
    Ok(Value::Array(out))
}

/// One query head's attention in f64 over `keys` and `vals` (each a head-dim row; at least one
/// key): o = Σ_u softmax(q·k)_u · v_u, scaling 1.0 (spec/gemma4-text.md §4.5), and
/// [`check_attention`]'s tolerance for the f32 kernel's output, V·U·(4(d/32 + 5)·S₁ + 4R + 2n +
/// 100) (derived there). Returns (o, tolerance).
fn attention_f64(q: &[f32], keys: &[Vec<f64>], vals: &[Vec<f64>]) -> (Vec<f64>, f64) {
    let d = q.len();
    let (mut sc, mut s1) = (Vec::with_capacity(keys.len()), 0.0f64);
    for kr in keys {
        let dot: f64 = q.iter().zip(kr).map(|(&a, b)| f64::from(a) * b).sum();
        let abs: f64 = q
            .iter()
            .zip(kr)
            .map(|(&a, b)| (f64::from(a) * b).abs())
            .sum();
        sc.push(dot);
        s1 = s1.max(abs);
    }
    let m = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
    let l: f64 = e.iter().sum();
    let range = sc.iter().map(|s| m - s).fold(0.0f64, f64::max);
    let (mut o, mut vmax) = (vec![0.0f64; d], 0.0f64);
    for (vr, ei) in vals.iter().zip(&e) {
        for (oj, vj) in o.iter_mut().zip(vr) {
            *oj += ei / l * vj;
            vmax = vmax.max(vj.abs());
        }
    }
    let n = keys.len() as f64;
    let tol = vmax * U * (4.0 * ((d / 32) as f64 + 5.0) * s1 + 4.0 * range + 2.0 * n + 100.0);
    (o, tol)
}

/// One `check_attention` case.
struct AttCase {
    kind: &'static str,
    /// Head dim, query heads, KV heads.
    d: usize,
    nh: usize,
    nkv: usize,
    /// Cache rows per slot, window (0 = full causal), cache slots.
    rows: usize,
    window: usize,
    n_slots: usize,
    /// Each query row's slot and position.
    slots: Vec<i32>,
    pos: Vec<i32>,
}

/// The attention kernel the forward pass launches ([`crate::forward::attention_kernel`]: the d = 256 /
/// 512 entry points, `attention_f32` for other head dims) against an f64 reference on random q,
/// K and V (spec/gemma4-text.md §4.5–§4.6):
/// head dims 64 and 128 (the fixture models') and 256 and 512 (Gemma-4's, which no fixture model
/// has), GQA, a sliding window over a ring that wraps, one split, many splits with an empty last
/// one, and chunks of more than 32 keys. Every cache row no query row may see is a NaN, so a key
/// read outside its row's window fails the check; outputs and partials are poisoned before each
/// launch.
///
/// Tolerance per output (first-order bound, U = 2⁻²⁴): each score is d/32 fmas + a 5-level
/// butterfly, |Δs| ≤ (d/32 + 5)·U·S₁ with S₁ = max over keys of Σ|q_j·k_j|; e = exp(s − m)
/// then carries 2|Δs| + (R + 4)·U relative error (R = max |s − m|, expf ≤ 2 ulp); the sums l
/// and Σ e·v over n keys (n + 5)·U each, the split combine's weights (R + 4)·U and its sums
/// ≤ 34·U, the division U. With |o| ≤ Σ p·|v| ≤ V = max |v| over the row's keys:
/// |o − o_ref| ≤ V·U·(4(d/32 + 5)·S₁ + 4R + 2n + 100).
/// Also: each row launched alone gives the batched launch's bits (a row's splits depend on its
/// own key count only), the split counters are zero after every launch, and at d = 256 / 512 the
/// generic `attention_f32` gives the entry point's bits (the same sums by construction).
fn check_attention(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let case = |kind, (d, nh, nkv), (rows, window, n_slots), slots, pos| AttCase {
        kind,
        d,
        nh,
        nkv,
        rows,
        window,
        n_slots,
        slots,
        pos,
    };
    let cases = [
        // pos 63 and 1019: the 40-key window wraps the 48-row ring
        case(
            "sliding d=256 ring",
            (256, 16, 8),
            (48, 40, 2),
            vec![0, 1, 1, 0],
            vec![5, 63, 1019, 30],
        ),
        // 1 key (one split), 524 keys (32 splits of 17, the last empty), 1100 (chunks of 35)
        case(
            "full d=512 nkv=1",
            (512, 16, 1),
            (1200, 0, 2),
            vec![0, 1, 0],
            vec![0, 523, 1099],
        ),
        case(
            "full d=128 GQA",
            (128, 4, 2),
            (64, 0, 2),
            vec![0, 0, 1],
            vec![16, 17, 40],
        ),
        case(
            "sliding d=64 ring",
            (64, 2, 1),
            (24, 16, 1),
            vec![0, 0, 0],
            vec![3, 30, 100],
        ),
    ];
    let mut out = Vec::new();
    for c in cases {
        let AttCase {
            kind,
            d,
            nh,
            nkv,
            rows,
            window,
            n_slots,
            slots,
            pos,
        } = c;
        let t = slots.len();
        let lo_of = |p: i32| -> usize {
            let p = p as usize;
            if window > 0 {
                (p + 1).saturating_sub(window)
            } else {
                0
            }
        };
        let w = nkv * d;
        let mut visible = vec![false; n_slots * rows];
        for (&s, &p) in slots.iter().zip(&pos) {
            for u in lo_of(p)..=p as usize {
                visible[s as usize * rows + u % rows] = true;
            }
        }
        let mut cache = |lo: f64, hi: f64| -> Vec<f32> {
            let mut c = rand_f32(rng, n_slots * rows * w, lo, hi);
            for (r, vis) in visible.iter().enumerate() {
                if !vis {
                    c[r * w..(r + 1) * w].fill(f32::from_bits(POISON));
                }
            }
            c
        };
        let (k, v) = (cache(-1.0, 1.0), cache(-3.0, 3.0));
        let q = rand_f32(rng, t * nh * d, -1.0, 1.0);
        let (qd, kd, vd) = (
            gpu.stream.clone_htod(&q)?,
            gpu.stream.clone_htod(&k)?,
            gpu.stream.clone_htod(&v)?,
        );
        let split = kernels::ATT_SPLIT_MAX * (d + 2);
        let mut cnt = gpu.stream.alloc_zeros::<u32>(t * nh)?;
        // Launches rows r0..r1 into a fresh poisoned output; returns it and whether the
        // counters came back zero.
        let kernel = crate::forward::attention_kernel(d);
        let mut run = |kernel: &str, r0: usize, r1: usize| -> Result<(Vec<f32>, bool)> {
            let n = r1 - r0;
            let qv = qd.slice(r0 * nh * d..r1 * nh * d);
            let mut o = poisoned(gpu, n * nh * d)?;
            let mut part = poisoned(gpu, n * nh * split)?;
            gpu.attention(
                kernel,
                &qv,
                (&kd.as_view(), &vd.as_view()),
                (&slots[r0..r1], &pos[r0..r1]),
                &mut o.as_view_mut(),
                (&mut part.as_view_mut(), &mut cnt.as_view_mut()),
                (n, nh, nkv, d),
                (rows, window),
            )?;
            let cz = gpu.stream.clone_dtoh(&cnt)?.iter().all(|&c| c == 0);
            Ok((gpu.stream.clone_dtoh(&o)?, cz))
        };
        let (got, mut counts_zero) = run(kernel, 0, t)?;
        let same_bits =
            |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        // At d = 256 / 512: the generic kernel's bits (None where the forward uses it).
        let generic_same = if kernel == "attention_f32" {
            None
        } else {
            let (generic, cz) = run("attention_f32", 0, t)?;
            counts_zero &= cz;
            Some(same_bits(&generic, &got))
        };
        // The two-head kernel where the shapes allow it: the same bits as the forward's kernel.
        let heads_same = match kernels::attention_heads_kernel(d) {
            Some(k) if (nh / nkv).is_multiple_of(kernels::ATT_HEADS_PER_BLOCK) => {
                let (two, cz) = run(k, 0, t)?;
                counts_zero &= cz;
                Some(same_bits(&two, &got))
            }
            _ => None,
        };
        let mut alone_same = true;
        for r in 0..t {
            let (one, cz) = run(kernel, r, r + 1)?;
            counts_zero &= cz;
            alone_same &= same_bits(&one, &got[r * nh * d..(r + 1) * nh * d]);
        }
        // f64 reference and the bound, per (row, head).
        let (mut worst_ratio, mut max_err, mut all_in) = (0.0f64, 0.0f64, true);
        for r in 0..t {
            let (s0, p) = (slots[r] as usize, pos[r] as usize);
            let keys: Vec<usize> = (lo_of(pos[r])..=p).map(|u| s0 * rows + u % rows).collect();
            for h in 0..nh {
                let g = h / (nh / nkv);
                let qh = &q[(r * nh + h) * d..(r * nh + h + 1) * d];
                let kv_row = |c: &[f32], row: usize| -> Vec<f64> {
                    c[row * w + g * d..row * w + (g + 1) * d]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect()
                };
                let ks: Vec<Vec<f64>> = keys.iter().map(|&row| kv_row(&k, row)).collect();
                let vs: Vec<Vec<f64>> = keys.iter().map(|&row| kv_row(&v, row)).collect();
                let (want, tol) = attention_f64(qh, &ks, &vs);
                let gh = &got[(r * nh + h) * d..(r * nh + h + 1) * d];
                for (gj, wj) in gh.iter().zip(&want) {
                    let err = (f64::from(*gj) - wj).abs();
                    let err = if err.is_nan() { f64::INFINITY } else { err };
                    all_in &= within(err, tol);
                    max_err = max_err.max(err);
                    worst_ratio = worst_ratio.max(err / tol);
                }
            }
        }
        let pass = all_in
            && alone_same
            && counts_zero
            && generic_same != Some(false)
            && heads_same != Some(false);
        *ok &= pass;
        log.line(&format!(
            "{} attention {kind} ({kernel}, T {t}, keys {}): max |err| {max_err:.3e}, worst err/tol {worst_ratio:.3}, each row alone bitwise {alone_same}, counters zero {counts_zero}{}{}",
            if pass { "PASS" } else { "FAIL" },
            pos.iter().map(|&p| (p as usize + 1 - lo_of(p)).to_string()).collect::<Vec<_>>().join("/"),
            generic_same.map_or(String::new(), |g| format!(", attention_f32 bitwise {g}")),
            heads_same.map_or(String::new(), |g| format!(", two heads per block bitwise {g}")),
        ));
        out.push(json!({"kind": kind, "kernel": kernel, "pass": pass, "max_err": max_err, "worst_err_over_tol": worst_ratio,
            "alone_bitwise": alone_same, "counters_zero": counts_zero, "generic_bitwise": generic_same,
            "heads_bitwise": heads_same}));
    }
    Ok(Value::Array(out))
}

fn check_rope(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let pos: Vec<i32> = vec![0, 1, 17, 1000, 4095, 65535, 131071];
    let t = pos.len();
    let mut out = Vec::new();
    for (kind, d, inv) in [
        (
            "default θ=1e4 d=256",
            256usize,
            rope_inv_freq_default(256, 10_000.0),
        ),
        (
            "proportional θ=1e6 d=512 p=0.25",
            512,
            rope_inv_freq_proportional(512, 1_000_000.0, 0.25, 1.0),
        ),
    ] {
        let h = 8;
        let x = rand_f32(rng, t * h * d, -4.0, 4.0);
        let xd = gpu.stream.clone_htod(&x)?;
        let pd = gpu.stream.clone_htod(&pos)?;
        let fd = gpu.stream.clone_htod(&inv)?;
        let mut yd = poisoned(gpu, t * h * d)?;
        gpu.rope_neox(
            &xd.as_view(),
            &mut yd.as_view_mut(),
            &pd.as_view(),
            &fd.as_view(),
            t,
            h,
            d,
        )?;
        let y = gpu.stream.clone_dtoh(&yd)?;
        let (mut pass, mut worst, mut passthrough_exact) = (true, 0f64, true);
        let half = d / 2;
        for (ti, &p) in pos.iter().enumerate() {
            for hi in 0..h {
                let o = (ti * h + hi) * d;
                for i in 0..half {
                    let ang = p as f64 * inv[i];
                    let (s, c) = ang.sin_cos();
                    let (x1, x2) = (x[o + i] as f64, x[o + i + half] as f64);
                    for (gv, r) in [
                        (y[o + i], x1 * c - x2 * s),
                        (y[o + i + half], x2 * c + x1 * s),
                    ] {
                        let err = (gv as f64 - r).abs();
                        let tol = U * r.abs() + 1e-14 * (x1.abs() + x2.abs());
                        if !within(err, tol) {
                            pass = false;
                        }
                        worst = worst.max(err / tol);
                    }
                    if inv[i] == 0.0 && (y[o + i] != x[o + i] || y[o + i + half] != x[o + i + half])
                    {
                        passthrough_exact = false;
                    }
                }
            }
        }
        pass &= passthrough_exact;
        *ok &= pass;
        log.line(&format!(
            "{} rope {kind}: max err/tol {worst:.3}; unrotated pairs exact: {passthrough_exact}",
            if pass { "PASS" } else { "FAIL" }
        ));
        out.push(json!({"kind": kind, "pass": pass, "max_err_over_tol": worst, "unrotated_exact": passthrough_exact}));
    }
    Ok(Value::Array(out))
}

fn check_activation(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let n = 2 * 15360;
    let g = rand_f32(rng, n, -8.0, 8.0);
    let u = rand_f32(rng, n, -2.0, 2.0);
    let gd = gpu.stream.clone_htod(&g)?;
    let ud = gpu.stream.clone_htod(&u)?;
    let mut od = poisoned(gpu, n)?;
    gpu.geglu(&gd.as_view(), &ud.as_view(), &mut od.as_view_mut(), n)?;
    let o = gpu.stream.clone_dtoh(&od)?;
    let (mut gpass, mut gworst) = (true, 0f64);
    let k = (2.0 / std::f64::consts::PI).sqrt();
    for i in 0..n {
        let (gv, uv) = (g[i] as f64, u[i] as f64);
        let r = 0.5 * gv * (1.0 + (k * (gv + 0.044715 * gv * gv * gv)).tanh()) * uv;
        let err = (o[i] as f64 - r).abs();
        let scale = U * (gv * uv).abs();
        if !within(err, 16.0 * scale) {
            gpass = false;
        }
        if scale > 0.0 {
            gworst = gworst.max(err / scale);
        }
    }
    // softcap
    let cap = 30.0f32;
    let x = rand_f32(rng, n, -200.0, 200.0);
    let xd = gpu.stream.clone_htod(&x)?;
    let mut yd = poisoned(gpu, n)?;
    gpu.softcap(&xd.as_view(), &mut yd.as_view_mut(), n, cap)?;
    let y = gpu.stream.clone_dtoh(&yd)?;
    let (mut spass, mut sworst) = (true, 0f64);
    for i in 0..n {
        let r = cap as f64 * (x[i] as f64 / cap as f64).tanh();
        let err = (y[i] as f64 - r).abs();
        if !within(err, 8.0 * U * r.abs()) {
            spass = false;
        }
        if r != 0.0 {
            sworst = sworst.max(err / (U * r.abs()));
        }
    }
    *ok &= gpass && spass;
    log.line(&format!(
        "{} geglu n={n}: max err {gworst:.2} u·|g·u| (tol 16); {} softcap cap=30: max err {sworst:.2} u·|y| (tol 8)",
        if gpass { "PASS" } else { "FAIL" },
        if spass { "PASS" } else { "FAIL" }
    ));
    Ok(
        json!({"geglu": {"n": n, "pass": gpass, "max_err_units": gworst}, "softcap": {"n": n, "pass": spass, "max_err_units": sworst}}),
    )
}

/// The fused prep producers (`add_norm_prep_f32`, `geglu_prep_f32`, layer.cu) against
/// `mvtc_prep` of their own outputs: each writes the tensor-core scratch over the same poisoned
/// contents (the bf16 pieces with their group sums and sums' fragments, and/or the int8 digits
/// with their per-256-element exponents), and every word must be bitwise equal — except the group
/// sums of the columns past the prep rows, which only `mvtc_prep` writes (as zeros). The norm
/// weights (add_norm_prep) and up values (geglu_prep) are scaled by 2^k per 128-element half,
/// k uniform in −30 … 30, so a 256-element block's largest |x| falls in either warp of the pair
/// that shares its exponent (`tc_warp_pair_max`) and the exponents differ between blocks.
/// Shapes: add_norm_prep at n = 3840 (12B), 5376 (a thread's second quad, k = 1, which no
/// fixture model reaches), 16384 (its largest n, k = 0…3) and 2816; geglu_prep at 15360 and
/// 21504; 3, 8 (three column groups) or 9 rows (the first 8 prepped), with and without the
/// residual step (layer scalar 0.5), each prep kind alone and both. Alongside: add_norm_prep's
/// `h` against RMSNorm_w of the kernel's own `x` in f64 (rmsnorm's tolerance), its `x` against
/// (x + RMSNorm_wy(y))·s in f64 (the same plus 2 units) or unchanged, geglu_prep's output bitwise
/// against `geglu_f32`.
fn check_prep_producers(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let eps = 1e-6f32;
    let both = kernels::TC_PREP_PIECES | kernels::TC_PREP_DIGITS;
    let scratch = || -> Result<(Vec<u32>, Vec<f32>)> {
        Ok((
            gpu.stream.clone_dtoh(&gpu.tc_xp)?,
            gpu.stream.clone_dtoh(&gpu.tc_xs)?,
        ))
    };
    // The scratch a prep writer leaves over the poison (`produce` launches it).
    let written_over_poison = |produce: &mut dyn FnMut() -> Result<()>| {
        gpu.fill_tc_scratch(POISON)?;
        produce()?;
        scratch()
    };
    // (words differing, words the producer wrote) between a producer's scratch and mvtc_prep's
    // of `nc` columns of n.
    let compare = |n: usize, nc: usize, a: &(Vec<u32>, Vec<f32>), b: &(Vec<u32>, Vec<f32>)| {
        let mut diff = 0usize;
        let mut written = 0usize;
        for (x, y) in a.0.iter().zip(&b.0) {
            diff += usize::from(x != y);
            written += usize::from(*x != POISON);
        }
        for (i, (x, y)) in a.1.iter().zip(&b.1).enumerate() {
            let (x, y) = (x.to_bits(), y.to_bits());
            // mvtc_prep's zero sums of the columns past the prepped ones (xs[8G + c], c ≥ nc).
            let zero_sum = i < 8 * (n / 16) && i % 8 >= nc && x == POISON && y == 0;
            diff += usize::from(x != y && !zero_sum);
            written += usize::from(x != POISON);
        }
        (diff, written)
    };
    // Each 128-element half of v times 2^k, k uniform in −30 … 30 (exact).
    let halves_scaled = |rng: &mut Rng, v: &mut [f32]| {
        for half in v.chunks_mut(128) {
            let k = rng.uniform(-30.0, 31.0).floor() as i32;
            half.iter_mut().for_each(|a| *a *= 2f32.powi(k));
        }
    };
    let kinds_name = |k: i32| match k {
        kernels::TC_PREP_PIECES => "pieces",
        kernels::TC_PREP_DIGITS => "digits",
        _ => "pieces+digits",
    };
    let mut out = Vec::new();
    for (n, rows, residual, kinds) in [
        (3840usize, 3usize, true, both),
        (5376, 3, true, both),
        (5376, 8, true, kernels::TC_PREP_DIGITS),
        (5376, 9, false, kernels::TC_PREP_PIECES),
        (16384, 3, true, both),
        (2816, 8, false, both),
    ] {
        let nc = rows.min(kernels::MATVEC_MAX_COLS);
        let x0 = rand_f32(rng, rows * n, -3.0, 3.0);
        let y = rand_f32(rng, rows * n, -3.0, 3.0);
        let (mut w, wy) = (rand_f32(rng, n, -2.0, 2.0), rand_f32(rng, n, -2.0, 2.0));
        halves_scaled(rng, &mut w);
        let s = 0.5f32;
        let mut xd = gpu.stream.clone_htod(&x0)?;
        let (yd, wd, wyd) = (
            gpu.stream.clone_htod(&y)?,
            gpu.stream.clone_htod(&w)?,
            gpu.stream.clone_htod(&wy)?,
        );
        let mut hd = poisoned(gpu, rows * n)?;
        let (yv, wyv) = (yd.as_view(), wyd.as_view());
        let fused = written_over_poison(&mut || {
            Ok(gpu.add_norm_prep(
                residual.then_some((&yv, &wyv, s)),
                &mut xd.as_view_mut(),
                &wd.as_view(),
                &mut hd.as_view_mut(),
                rows,
                n,
                eps,
                kinds,
            )?)
        })?;
        let prep = written_over_poison(&mut || Ok(gpu.tc_prep(&hd.as_view(), nc, n, kinds)?))?;
        let (diff, written) = compare(n, nc, &fused, &prep);
        let (x, h) = (gpu.stream.clone_dtoh(&xd)?, gpu.stream.clone_dtoh(&hd)?);
        let tol_units = n.div_ceil(256) as f64 + 24.0;
        let (mut norm_ok, mut worst) = (true, 0f64);
        // h against RMSNorm_w of the kernel's own x
        for (&got, &want) in h.iter().zip(&rmsnorm_f64(&x, n, Some(&w), eps)) {
            let err = (got as f64 - want).abs();
            norm_ok &= within(err, tol_units * U * want.abs());
            worst = worst.max(units_rel(err, want));
        }
        if residual {
            // x against (x0 + RMSNorm_wy(y))·s, relative to the larger of the two addends (the
            // sum may cancel)
            let ny = rmsnorm_f64(&y, n, Some(&wy), eps);
            for ((&got, &a), &b) in x.iter().zip(&x0).zip(&ny) {
                let want = (a as f64 + b) * s as f64;
                let scale = (a as f64).abs().max(b.abs()) * s as f64;
                norm_ok &= within((got as f64 - want).abs(), (tol_units + 2.0) * U * scale);
            }
        }
        if !residual {
            norm_ok &= x.iter().zip(&x0).all(|(a, b)| a.to_bits() == b.to_bits());
        }
        let pass = diff == 0 && written > 0 && norm_ok;
        *ok &= pass;
        log.line(&format!(
            "{} add_norm_prep n={n} rows={rows} residual={residual} {}: scratch vs mvtc_prep of h {diff} of {written} written words differ; h, x within {tol_units} u: {norm_ok} (max {worst:.2} u·|h|)",
            if pass { "PASS" } else { "FAIL" },
            kinds_name(kinds)
        ));
        out.push(json!({"kernel": "add_norm_prep_f32", "n": n, "rows": rows, "residual": residual, "kinds": kinds_name(kinds), "pass": pass, "scratch_words_differing": diff, "scratch_words_written": written, "norm_within_tol": norm_ok, "max_err_units_rel": worst, "tol_units": tol_units}));
    }
    for (n, rows, kinds) in [
        (15360usize, 3usize, both),
        (21504, 8, kernels::TC_PREP_DIGITS),
        (21504, 9, kernels::TC_PREP_PIECES),
    ] {
        let nc = rows.min(kernels::MATVEC_MAX_COLS);
        let g = rand_f32(rng, rows * n, -8.0, 8.0);
        let mut u = rand_f32(rng, rows * n, -2.0, 2.0);
        halves_scaled(rng, &mut u);
        let (gd, ud) = (gpu.stream.clone_htod(&g)?, gpu.stream.clone_htod(&u)?);
        let mut od = poisoned(gpu, rows * n)?;
        let fused = written_over_poison(&mut || {
            Ok(gpu.geglu_prep(
                &gd.as_view(),
                &ud.as_view(),
                &mut od.as_view_mut(),
                rows,
                n,
                kinds,
            )?)
        })?;
        let prep = written_over_poison(&mut || Ok(gpu.tc_prep(&od.as_view(), nc, n, kinds)?))?;
        let (diff, written) = compare(n, nc, &fused, &prep);
        let mut rd = poisoned(gpu, rows * n)?;
        gpu.geglu(
            &gd.as_view(),
            &ud.as_view(),
            &mut rd.as_view_mut(),
            rows * n,
        )?;
        let (o, r) = (gpu.stream.clone_dtoh(&od)?, gpu.stream.clone_dtoh(&rd)?);
        let same = o.iter().zip(&r).all(|(a, b)| a.to_bits() == b.to_bits());
        let pass = diff == 0 && written > 0 && same;
        *ok &= pass;
        log.line(&format!(
            "{} geglu_prep n={n} rows={rows} {}: scratch vs mvtc_prep of out {diff} of {written} written words differ; out bitwise geglu_f32 {same}",
            if pass { "PASS" } else { "FAIL" },
            kinds_name(kinds)
        ));
        out.push(json!({"kernel": "geglu_prep_f32", "n": n, "rows": rows, "kinds": kinds_name(kinds), "pass": pass, "scratch_words_differing": diff, "scratch_words_written": written, "out_bitwise_geglu": same}));
    }
    Ok(Value::Array(out))
}

fn check_argmax(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    let (rows, n) = (4usize, 262_144usize);
    let mut x = rand_f32(rng, rows * n, -10.0, 10.0);
    // Row 1: a tie at 1000 and 200000 (expect 1000). Row 2: maximum at the last index.
    x[n + 1000] = 20.0;
    x[n + 200_000] = 20.0;
    x[2 * n + n - 1] = 30.0;
    let xd = gpu.stream.clone_htod(&x)?;
    let mut idx = gpu.stream.alloc_zeros::<i32>(rows)?;
    let mut val = poisoned(gpu, rows)?;
    gpu.argmax(
        &xd.as_view(),
        rows,
        n,
        &mut idx.as_view_mut(),
        &mut val.as_view_mut(),
    )?;
    let gi = gpu.stream.clone_dtoh(&idx)?;
    let gv = gpu.stream.clone_dtoh(&val)?;
    let mut pass = true;
    let mut rowsj = Vec::new();
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let mut bi = 0usize;
        for (i, &v) in row.iter().enumerate() {
            if v > row[bi] {
                bi = i;
            }
        }
        let p = gi[r] as usize == bi && gv[r].to_bits() == row[bi].to_bits();
        pass &= p;
        rowsj.push(json!({"gpu": gi[r], "cpu": bi, "pass": p}));
    }
    *ok &= pass;
    log.line(&format!(
        "{} argmax {rows}×{n} (tie → lower index, max at last index): gpu {gi:?}",
        if pass { "PASS" } else { "FAIL" }
    ));
    Ok(json!({"pass": pass, "rows": rowsj}))
}

/// `topk_f32` and `topk1_f32` (k = 1) against `reference::model::logits::top_k` (ids and value bits), on a vocab-sized
/// launch (128 blocks per row) and a short one (3 blocks, the last slice partial): ties across
/// blocks (the lower id first), a suppressed id holding the row's maximum, k = 16 and k = 1; and
/// the non-finite count of a row with NaN and ±inf (which the list leaves out).
fn check_topk(gpu: &Gpu, rng: &mut Rng, log: &mut Log, ok: &mut bool) -> Result<Value> {
    // The GPU list equals the reference's: same ids, value bits of the f32 logits.
    let same = |list: &[(u32, f32)], want: &[(u32, f64)]| {
        list.len() == want.len()
            && list
                .iter()
                .zip(want)
                .all(|(g, w)| g.0 == w.0 && g.1.to_bits() == (w.1 as f32).to_bits())
    };
    let mut pass = true;
    let mut cases = Vec::new();
    for (rows, n) in [(3usize, 262_144usize), (2, 5000)] {
        let mut x = rand_f32(rng, rows * n, -10.0, 10.0);
        // Row 0: a tie between ids in different blocks (n/2 + 1 and 7: expect 7 first) and a
        // suppressed maximum at id 3; row 1: five equal values spread over the row.
        x[7] = 50.0;
        x[n / 2 + 1] = 50.0;
        x[3] = 99.0;
        for j in 0..5 {
            x[n + j * (n / 5) + 11] = 42.0;
        }
        let mut mask = vec![0u8; n];
        mask[3] = 1;
        mask[n - 1] = 1;
        let masked: Vec<u32> = vec![3, (n - 1) as u32];
        let xd = gpu.stream.clone_htod(&x)?;
        let md = gpu.stream.clone_htod(&mask)?;
        for k in [16usize, 1] {
            let got = gpu.topk(&xd.as_view(), rows, n, Some(&md.as_view()), k)?;
            for (r, (list, bad)) in got.iter().enumerate() {
                let want = reference::model::logits::top_k(&x[r * n..(r + 1) * n], k, &masked);
                let p = *bad == 0 && same(list, &want);
                pass &= p;
                cases.push(json!({"rows": rows, "n": n, "k": k, "row": r, "pass": p,
                    "gpu_first": list.first().map(|e| e.0), "cpu_first": want.first().map(|e| e.0)}));
            }
        }
    }
    // Non-finite values: counted, never listed.
    let n = 5000usize;
    let mut x = rand_f32(rng, n, -1.0, 1.0);
    x[10] = f32::NAN;
    x[2500] = f32::INFINITY;
    x[4999] = f32::NEG_INFINITY;
    let xd = gpu.stream.clone_htod(&x)?;
    let finite: Vec<f32> = x
        .iter()
        .map(|&v| if v.is_finite() { v } else { f32::NAN })
        .collect();
    let mut bads = Vec::new();
    // k = 4 takes topk_f32, k = 1 topk1_f32 (kernels::topk_kernel)
    for k in [4usize, 1] {
        let got = gpu.topk(&xd.as_view(), 1, n, None, k)?;
        let want = reference::model::logits::top_k(&finite, k, &[]);
        let (list, bad) = &got[0];
        let p = *bad == 3 && list.len() == k && same(list, &want);
        pass &= p;
        bads.push(*bad);
        cases.push(json!({"n": n, "k": k, "non_finite": bad, "pass": p}));
    }
    *ok &= pass;
    log.line(&format!(
        "{} topk 3×262144 and 2×5000 (k 16 and 1; ties across blocks, a masked maximum), non-finite counts {bads:?} of 3 (k 4 and 1)",
        if pass { "PASS" } else { "FAIL" },
    ));
    Ok(json!({"pass": pass, "cases": cases}))
}

fn bandwidth_read(gpu: &Gpu, log: &mut Log, report: &mut Value) -> Result<f64> {
    let n: usize = 1 << 30; // 4 GiB of f32
    let mut buf = gpu.stream.alloc_zeros::<f32>(n)?;
    gpu.fill_f32_bits(&mut buf.as_view_mut(), 1.0f32.to_bits())?;
    let mut best = 0f64;
    let mut rows = Vec::new();
    for per_sm in [4u32, 8, 16] {
        let blocks = (gpu.sm_count * per_sm) as usize;
        let mut partial = gpu.stream.alloc_zeros::<f32>(blocks)?;
        let mut t = time_kernel(gpu, 10, |_| {
            Ok(gpu.sum_probe(&buf.as_view(), &mut partial.as_view_mut())?)
        })?;
        let sum: f64 = gpu
            .stream
            .clone_dtoh(&partial)?
            .iter()
            .map(|&v| v as f64)
            .sum();
        let med = median(&mut t[2..]) as f64;
        let gbs = (n * 4) as f64 / (med * 1e-3) / 1e9;
        best = best.max(gbs);
        log.line(&format!(
            "B_read probe: sum over 4 GiB, {blocks} blocks × 256: median {med:.3} ms = {gbs:.0} GB/s (sum {sum}, expect {n})"
        ));
        rows.push(
            json!({"blocks": blocks, "median_ms": med, "gb_per_s": gbs, "sum_ok": sum == n as f64}),
        );
    }
    log.line(&format!("B_read = {best:.0} GB/s"));
    report["b_read_gb_per_s"] = json!(best);
    report["b_read_runs"] = Value::Array(rows);
    Ok(best)
}

fn bandwidth_matvec(
    gpu: &Gpu,
    rng: &mut Rng,
    b_read: f64,
    log: &mut Log,
    report: &mut Value,
) -> Result<()> {
    let mut cases: Vec<(GgmlType, usize, usize, usize, bool)> = SUPPORTED_TYPES
        .iter()
        .map(|&t| (t, 15360, 3840, 1, false))
        .collect();
    for nc in [2, 4, 8] {
        cases.push((GgmlType::Q4_K, 15360, 3840, nc, false));
    }
    for t in [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
    ] {
        cases.push((t, 3840, 15360, 1, false));
    }
    // Tensor-core path: every TC format, 1 and 8 columns, both 12B shapes.
    for t in [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
    ] {
        for (rows, k) in [(15360, 3840), (3840, 15360)] {
            for nc in [1, 8] {
                cases.push((t, rows, k, nc, true));
            }
        }
    }
    let mut out = Vec::new();
    let mut cache: Option<(GgmlType, usize, usize, CudaSlice<u8>, usize, usize)> = None;
    for (ty, rows, k, nc, tc) in cases {
        let rb = row_bytes(ty, k, "bandwidth")?;
        let mv = if tc { Gpu::matvec_tc } else { Gpu::matvec };
        let bytes = rows * rb;
        let same = matches!(&cache, Some((t, r, kk, ..)) if *t == ty && *r == rows && *kk == k);
        if !same {
            drop(cache.take()); // free the previous copies first
            let stride = bytes.div_ceil(256) * 256;
            let copies = (256usize << 20).div_ceil(bytes).max(2);
            let host = random_blocks(ty, rows * k, rng);
            let mut buf = gpu.stream.alloc_zeros::<u8>(stride * copies)?;
            for c in 0..copies {
                gpu.stream
                    .memcpy_htod(&host, &mut buf.slice_mut(c * stride..c * stride + bytes))?;
            }
            cache = Some((ty, rows, k, buf, stride, copies));
        }
        let (_, _, _, buf, stride, copies) = cache.as_ref().expect("set above");
        let x = rand_f32(rng, nc * k, -1.0, 1.0);
        let xd = gpu.stream.clone_htod(&x)?;
        let mut yd = poisoned(gpu, nc * rows)?;
        let iters = 40usize;
        let mut batches = Vec::new();
        let mut host_us = 0f64;
        for _ in 0..3 {
            let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
            gpu.spin(2_000_000)?;
            start.record(&gpu.stream)?;
            let th = std::time::Instant::now();
            for i in 0..iters {
                let c = i % copies;
                let w = buf.slice(c * stride..c * stride + bytes);
                mv(
                    gpu,
                    ty,
                    &w,
                    rows,
                    k,
                    &xd.as_view(),
                    nc,
                    &mut yd.as_view_mut(),
                )?;
            }
            host_us = th.elapsed().as_secs_f64() * 1e6 / iters as f64;
            end.record(&gpu.stream)?;
            end.synchronize()?;
            batches.push(start.elapsed_ms(&end)? / iters as f32);
        }
        let y = gpu.stream.clone_dtoh(&yd)?;
        let finite = y.iter().all(|v| v.is_finite());
        let med = median(&mut batches) as f64;
        let gbs = bytes as f64 / (med * 1e-3) / 1e9;
        log.line(&format!(
            "matvec BW {:7}{} {rows}×{k} n={nc}: {:.1} MB in {:.2} µs = {gbs:.0} GB/s = {:.1}% of B_read ({copies} copies; host {host_us:.1} µs/launch; outputs finite: {finite})",
            ty.name(),
            if tc { " tc" } else { "" },
            bytes as f64 / 1e6,
            med * 1e3,
            100.0 * gbs / b_read
        ));
        out.push(json!({"type": ty.name(), "path": if tc { "tensor-core" } else { "cuda-core" }, "rows": rows, "k": k, "ncols": nc, "weight_bytes": bytes, "us_per_launch": med * 1e3, "gb_per_s": gbs, "fraction_of_b_read": gbs / b_read, "host_us_per_launch": host_us, "outputs_finite": finite}));
    }
    report["matvec_bandwidth"] = Value::Array(out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::quant::first_nonfinite_block;

    #[test]
    fn q2_k_offsets_are_minus_dmin_times_min() {
        // One hand-built block: group 0's scale byte 0x35 (scale 5, min 3), the other 15 groups'
        // 0x10 (scale 0, min 1), quants all 3, d = 1.0 (f16 0x3C00), dmin = 0.5 (0x3800). By the
        // spec's x = d·(s & 0xF)·q − dmin·(s >> 4) at q = 0: −1.5 in group 0, −0.5 elsewhere.
        let mut blk = vec![0x10u8; 16];
        blk[0] = 0x35;
        blk.extend([0xFFu8; 64]);
        blk.extend(0x3C00u16.to_le_bytes());
        blk.extend(0x3800u16.to_le_bytes());
        let b = super::q2_k_offsets(&blk).unwrap();
        assert_eq!(b.len(), 256);
        assert!(b[..16].iter().all(|&v| v == -1.5), "{:?}", &b[..16]);
        assert!(b[16..].iter().all(|&v| v == -0.5));
        assert!(super::q2_k_offsets(&blk[..83]).is_err());
    }

    /// The generator's blocks have finite scale fields for every format, judged by the
    /// reference's independent scanner, so a NaN in a GPU output is always the kernel's fault.
    #[test]
    fn random_blocks_are_finite() {
        let mut rng = Rng::new(7);
        for ty in SUPPORTED_TYPES {
            let b = random_blocks(ty, 4096, &mut rng);
            assert_eq!(b.len() as u64, ty.bytes_for(4096).unwrap(), "{ty}");
            assert_eq!(first_nonfinite_block(ty, &b), None, "{ty}");
        }
    }

    /// The checks' f64 RMSNorm by hand (spec/gemma4-text.md §3): rows [3, 4] and [0, 5], eps 0,
    /// w = [2, 1] → mean squares 12.5 and 12.5, r = 12.5^(−1/2), y = [6r, 4r] and [0, 5r]; each
    /// row normalised alone. And `units_rel`: U·2 off a value of 2 is one unit; NaN and an error
    /// off 0 are infinite.
    #[test]
    fn attention_reference_by_hand() {
        // d = 32, q = (1, 0, …), keys with q·k = ln 3 and 0 (first dims ln 3 and 0): softmax
        // weights 3/4 and 1/4; values 8·e_1 and 4·e_1 + 2·e_2 → o = (6 + 1, 0.5) in dims 0, 1.
        let mut q = vec![0.0f32; 32];
        q[0] = 1.0;
        let key = |x: f64| {
            let mut k = vec![0.0f64; 32];
            k[0] = x;
            k
        };
        let (mut v1, mut v2) = (vec![0.0f64; 32], vec![0.0f64; 32]);
        v1[0] = 8.0;
        v2[0] = 4.0;
        v2[1] = 2.0;
        let (o, tol) = attention_f64(&q, &[key(3f64.ln()), key(0.0)], &[v1, v2]);
        assert!(
            (o[0] - 7.0).abs() < 1e-12 && (o[1] - 0.5).abs() < 1e-12,
            "{o:?}"
        );
        assert!(o[2..].iter().all(|&x| x == 0.0));
        // V = 8, S₁ = ln 3, R = ln 3, n = 2: 8·U·(4·6·ln 3 + 4 ln 3 + 4 + 100)
        let want = 8.0 * U * (28.0 * 3f64.ln() + 104.0);
        assert!((tol - want).abs() < 1e-18, "{tol} vs {want}");
    }

    #[test]
    fn rmsnorm_reference_and_units_by_hand() {
        let y = rmsnorm_f64(&[3.0, 4.0, 0.0, 5.0], 2, Some(&[2.0, 1.0]), 0.0);
        let r = 12.5f64.powf(-0.5);
        let want = [6.0 * r, 4.0 * r, 0.0, 5.0 * r];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() <= 1e-15, "{y:?}");
        }
        let unweighted = rmsnorm_f64(&[3.0, 4.0], 2, None, 0.0);
        assert!((unweighted[1] - 4.0 * r).abs() <= 1e-15);
        assert_eq!(units_rel(2.0 * U, 2.0), 1.0);
        assert_eq!(units_rel(0.0, 0.0), 0.0);
        assert_eq!(units_rel(1e-30, 0.0), f64::INFINITY);
        assert_eq!(units_rel(f64::NAN, 1.0), f64::INFINITY);
    }

    /// Without a GPU (CI), the device probe reports a reason instead of panicking.
    #[test]
    fn gpu_probe_never_panics() {
        match crate::device::unavailable_reason() {
            Some(why) => println!("skipped: {why}"),
            None => println!("GPU present"),
        }
    }
}
