//! 32-element legacy formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (`spec/gguf-gemma4.md` §3.3).
//!
//! Upstream: `ggml/src/ggml-common.h` (`block_q4_0` …) and `ggml/src/ggml-quants.c`
//! (`dequantize_row_q4_0` …). Nibble convention `nib(e)`: element `e < 16` is the low nibble
//! of `qs[e]`, element `e ≥ 16` the high nibble of `qs[e − 16]`.
//!
//! Quantizers: one f16 scale per block rounded *up* from the ideal so no code is clamped
//! (symmetric `d = f16⌈amax/qmax⌉` for Q4_0/Q5_0/Q8_0; for Q4_1/Q5_1 `m = f16⌊min⌋` and
//! `d = f16⌈(max − m)/qmax⌉`), codes round to nearest. Error bound: [`super::quantize_error_bound`].

use half::f16;

use super::scale::{amax, f16_at, f16_ceil, f16_floor, put_f16, round_code, Overflow};
use super::Elem;

/// Elements per block.
const QK: usize = 32;

/// The 32 4-bit values of a 16-byte `qs` field in element order (§3.3 `nib`).
#[inline(always)]
fn nibbles(qs: &[u8]) -> [u8; QK] {
    let mut q = [0u8; QK];
    for i in 0..16 {
        q[i] = qs[i] & 0xF;
        q[i + 16] = qs[i] >> 4;
    }
    q
}

/// Packs 32 codes in `[0, 15]` into the 16-byte `qs` field (inverse of [`nibbles`]).
#[inline]
fn pack_nibbles(q: &[u8; QK], qs: &mut [u8]) {
    for i in 0..16 {
        qs[i] = (q[i] & 0xF) | ((q[i + 16] & 0xF) << 4);
    }
}

/// Q4_0, 18 bytes: `d` f16 @0, `qs` u8[16] @2. `x[e] = d · (nib(e) − 8)`.
/// Follows `dequantize_row_q4_0`.
pub(super) fn dequant_q4_0<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..18], &mut out[..QK]);
    let d = f16_at(b, 0);
    for (o, q) in out.iter_mut().zip(nibbles(&b[2..18])) {
        *o = O::from_exact(d * (q as i32 - 8) as f64);
    }
}

/// Q4_1, 20 bytes: `d` f16 @0, `m` f16 @2, `qs` u8[16] @4. `x[e] = d · nib(e) + m`.
/// Follows `dequantize_row_q4_1`.
pub(super) fn dequant_q4_1<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..20], &mut out[..QK]);
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (o, q) in out.iter_mut().zip(nibbles(&b[4..20])) {
        *o = O::from_exact(d * q as f64 + m);
    }
}

/// The 5-bit codes of Q5_0/Q5_1: `q(e) = nib(e) | (((qh >> e) & 1) << 4)`, `qh` u32 LE.
#[inline(always)]
fn codes5(qh: &[u8], qs: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = nibbles(qs);
    for (e, q) in q.iter_mut().enumerate() {
        *q |= (((qh >> e) & 1) as u8) << 4;
    }
    q
}

/// Q5_0, 22 bytes: `d` f16 @0, `qh` u8[4] @2 (u32 LE, bit e = 5th bit of element e),
/// `qs` u8[16] @6. `x[e] = d · (q(e) − 16)`. Follows `dequantize_row_q5_0`.
pub(super) fn dequant_q5_0<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..22], &mut out[..QK]);
    let d = f16_at(b, 0);
    for (o, q) in out.iter_mut().zip(codes5(&b[2..6], &b[6..22])) {
        *o = O::from_exact(d * (q as i32 - 16) as f64);
    }
}

/// Q5_1, 24 bytes: `d` f16 @0, `m` f16 @2, `qh` u8[4] @4, `qs` u8[16] @8.
/// `x[e] = d · q(e) + m`. Follows `dequantize_row_q5_1`.
pub(super) fn dequant_q5_1<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..24], &mut out[..QK]);
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (o, q) in out.iter_mut().zip(codes5(&b[4..8], &b[8..24])) {
        *o = O::from_exact(d * q as f64 + m);
    }
}

/// Q8_0, 34 bytes: `d` f16 @0, `qs` i8[32] @2. `x[e] = d · qs[e]`.
/// Follows `dequantize_row_q8_0`.
pub(super) fn dequant_q8_0<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..34], &mut out[..QK]);
    let d = f16_at(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = O::from_exact(d * (q as i8) as f64);
    }
}

/// Symmetric one-scale block: `d = f16⌈amax/qmax⌉`, codes `round(x/d) ∈ [−qmax, qmax]`.
fn symmetric(x: &[f32], qmax: i32) -> Result<(f16, [i32; QK]), Overflow> {
    let d = f16_ceil(amax(x) / qmax as f64)?;
    let step = d.to_f64();
    let mut q = [0i32; QK];
    for (q, &x) in q.iter_mut().zip(x) {
        *q = round_code(x as f64, step, -qmax, qmax);
    }
    Ok((d, q))
}

/// Affine one-scale block: `m = f16⌊min⌋`, `d = f16⌈(max − m)/qmax⌉`, codes in `[0, qmax]`.
fn affine(x: &[f32], qmax: i32) -> Result<(f16, f16, [u8; QK]), Overflow> {
    let min = x.iter().fold(f64::INFINITY, |a, &v| a.min(v as f64));
    let max = x.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
    let m = f16_floor(min)?;
    let mv = m.to_f64();
    let d = f16_ceil((max - mv) / qmax as f64)?;
    let step = d.to_f64();
    let mut q = [0u8; QK];
    for (q, &x) in q.iter_mut().zip(x) {
        *q = round_code(x as f64 - mv, step, 0, qmax) as u8;
    }
    Ok((d, m, q))
}

/// Q4_0 quantizer (symmetric, codes `−7..=7` stored as `nib = q + 8`).
pub(super) fn quant_q4_0(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, q) = symmetric(x, 7)?;
    put_f16(b, 0, d);
    pack_nibbles(&q.map(|q| (q + 8) as u8), &mut b[2..18]);
    Ok(())
}

/// Q4_1 quantizer (affine, codes `0..=15`).
pub(super) fn quant_q4_1(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, m, q) = affine(x, 15)?;
    put_f16(b, 0, d);
    put_f16(b, 2, m);
    pack_nibbles(&q, &mut b[4..20]);
    Ok(())
}

/// Packs 5-bit codes: low nibbles into `qs`, bit 4 of code e into bit e of `qh` (u32 LE).
fn pack5(q: &[u8; QK], qh: &mut [u8], qs: &mut [u8]) {
    let mut h = 0u32;
    for (e, &q) in q.iter().enumerate() {
        h |= ((q >> 4) as u32 & 1) << e;
    }
    qh.copy_from_slice(&h.to_le_bytes());
    pack_nibbles(&q.map(|q| q & 0xF), qs);
}

/// Q5_0 quantizer (symmetric, codes `−15..=15` stored as `q + 16`).
pub(super) fn quant_q5_0(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, q) = symmetric(x, 15)?;
    put_f16(b, 0, d);
    let (qh, qs) = b[2..22].split_at_mut(4);
    pack5(&q.map(|q| (q + 16) as u8), qh, qs);
    Ok(())
}

/// Q5_1 quantizer (affine, codes `0..=31`).
pub(super) fn quant_q5_1(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, m, q) = affine(x, 31)?;
    put_f16(b, 0, d);
    put_f16(b, 2, m);
    let (qh, qs) = b[4..24].split_at_mut(4);
    pack5(&q, qh, qs);
    Ok(())
}

/// Q8_0 quantizer (symmetric, codes `−127..=127`).
pub(super) fn quant_q8_0(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, q) = symmetric(x, 127)?;
    put_f16(b, 0, d);
    for (o, q) in b[2..34].iter_mut().zip(q) {
        *o = q as i8 as u8;
    }
    Ok(())
}
