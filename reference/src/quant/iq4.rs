//! IQ4 codebook formats IQ4_NL and IQ4_XS (`spec/gguf-gemma4.md` §3.3, §3.4, §3.5).
//!
//! Upstream: `kvalues_iq4nl`, `block_iq4_nl`, `block_iq4_xs` (`ggml/src/ggml-common.h`);
//! `dequantize_row_iq4_nl`, `dequantize_row_iq4_xs` (`ggml/src/ggml-quants.c`).
//!
//! Quantizers: scales rounded *up* so that `|x| / step ≤ 113` (the largest positive
//! codebook entry), then the nearest codebook entry. Error bound: [`super::quantize_error_bound`].

use super::kquants::QK_K;
use super::scale::{amax, ceil_code, f16_at, f16_ceil, put_f16, Overflow};
use super::Elem;

/// The IQ4 codebook `K` (§3.5, `kvalues_iq4nl`), indices 0..15.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL, 18 bytes: `d` f16 @0, `qs` u8[16] @2 (nibbles as Q4_0: element `e < 16` low nibble
/// of `qs[e]`, `e ≥ 16` high nibble of `qs[e−16]`). `x[e] = d·K[nib(e)]`.
pub(super) fn dequant_iq4_nl<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..18], &mut out[..32]);
    let d = f16_at(b, 0);
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b[2..18]) {
        *l = O::from_exact(d * KVALUES_IQ4NL[(q & 0xF) as usize] as f64);
        *h = O::from_exact(d * KVALUES_IQ4NL[(q >> 4) as usize] as f64);
    }
}

/// IQ4_XS, 136 bytes: `d` f16 @0, `scales_h` u16 LE @2 (2 high bits per sub-block),
/// `scales_l` u8[4] @4 (one low nibble per sub-block), `qs` u8[128] @8. Sub-block `b = sb32`:
/// `ls(b) = ((scales_l[b/2] >> 4·(b%2)) & 0xF) | (((scales_h >> 2b) & 3) << 4)`;
/// index `= (qs[16b + r%16] >> 4·(r/16)) & 0xF`; `x[e] = (d·(ls(b) − 32))·K[index]`.
pub(super) fn dequant_iq4_xs<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..136], &mut out[..QK_K]);
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let (scales_l, qs) = (&b[4..8], &b[8..136]);
    for (sb, o) in out.chunks_exact_mut(32).enumerate() {
        let ls = ((scales_l[sb / 2] >> (4 * (sb % 2))) & 0xF) as i32
            | ((((scales_h >> (2 * sb)) & 3) as i32) << 4);
        let dl = d * (ls - 32) as f64;
        let (lo, hi) = o.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&qs[16 * sb..][..16]) {
            *l = O::from_exact(dl * KVALUES_IQ4NL[(q & 0xF) as usize] as f64);
            *h = O::from_exact(dl * KVALUES_IQ4NL[(q >> 4) as usize] as f64);
        }
    }
}

/// Index of the codebook entry nearest to `t` (first on a tie).
fn nearest_index(t: f64) -> u8 {
    let mut best = 0;
    for (i, &k) in KVALUES_IQ4NL.iter().enumerate() {
        if (t - k as f64).abs() < (t - KVALUES_IQ4NL[best] as f64).abs() {
            best = i;
        }
    }
    best as u8
}

/// Nearest codebook indices of `x / step` (0 ↦ index of entry 1 when `step == 0`).
fn indices(x: &[f32], step: f64, out: &mut [u8; 32]) {
    for (o, &x) in out.iter_mut().zip(x) {
        *o = nearest_index(if step == 0.0 { 0.0 } else { x as f64 / step });
    }
}

/// Packs 32 indices as nibbles (low nibbles = elements 0–15, high = 16–31) into `qs[16]`.
fn pack(q: &[u8; 32], qs: &mut [u8]) {
    for i in 0..16 {
        qs[i] = q[i] | (q[i + 16] << 4);
    }
}

/// IQ4_NL quantizer: `d = f16⌈amax/113⌉`, nearest `K` entry of `x/d`.
pub(super) fn quant_iq4_nl(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let d = f16_ceil(amax(x) / 113.0)?;
    let mut q = [0u8; 32];
    indices(x, d.to_f64(), &mut q);
    put_f16(b, 0, d);
    pack(&q, &mut b[2..18]);
    Ok(())
}

/// IQ4_XS quantizer: sub-block ideal scale `sᵢ = amaxᵢ/113`, super-scale `d = f16⌈max sᵢ/31⌉`,
/// `lsᵢ − 32 = ⌈sᵢ/d⌉ ∈ [0, 31]`, nearest `K` entry of `x/(d·(lsᵢ − 32))`.
pub(super) fn quant_iq4_xs(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let s: [f64; 8] = std::array::from_fn(|i| amax(&x[32 * i..32 * i + 32]) / 113.0);
    let d = f16_ceil(s.iter().fold(0.0f64, |a, &v| a.max(v)) / 31.0)?;
    put_f16(b, 0, d);
    let mut scales_h = 0u16;
    for (sb, &si) in s.iter().enumerate() {
        let l = ceil_code(si, d.to_f64(), 31);
        let ls = l + 32;
        b[4 + sb / 2] |= (ls & 0xF) << (4 * (sb % 2));
        scales_h |= ((ls >> 4) as u16 & 3) << (2 * sb);
        let mut q = [0u8; 32];
        indices(&x[32 * sb..32 * sb + 32], d.to_f64() * l as f64, &mut q);
        pack(&q, &mut b[8 + 16 * sb..8 + 16 * sb + 16]);
    }
    b[2..4].copy_from_slice(&scales_h.to_le_bytes());
    Ok(())
}
