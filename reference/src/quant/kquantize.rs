//! Simple quantizers for the K super-block formats Q2_K … Q8_K (`spec/gguf-gemma4.md` §3.4),
//! the inverses of the layouts decoded in [`super::kquants`].
//!
//! Round to nearest with per-sub-block scales, no search and no importance weights (ggml's
//! `quantize_row_q*_K_ref` is more careful). Every scale is rounded *up* (f16 ceiling for the
//! super-scales, integer ceiling for the sub-block codes) so a block's values always fit and
//! no code is clamped; the resulting bound is [`super::quantize_error_bound`].
//! Each function writes one block into `b`, which the caller has zero-filled.

use half::f16;

use super::kquants::QK_K;
use super::scale::{amax, ceil_code, f16_ceil, f32_ceil, put_f16, round_code, Overflow};

/// Two-level affine scales (Q2_K, Q4_K, Q5_K) for `N` sub-blocks of `x`:
/// per sub-block `mᵢ = max(0, −min)`, `dmin = f16⌈max mᵢ / scmax⌉`, `mnᵢ = ⌈mᵢ/dmin⌉`;
/// `sᵢ = (max + dmin·mnᵢ)/qmax`, `d = f16⌈max sᵢ / scmax⌉`, `scᵢ = ⌈sᵢ/d⌉`. Then the element
/// code is `round((x + dmin·mnᵢ)/(d·scᵢ)) ∈ [0, qmax]` (see [`affine_codes`]).
struct Affine<const N: usize> {
    d: f16,
    dmin: f16,
    sc: [u8; N],
    mn: [u8; N],
}

fn affine_scales<const N: usize>(x: &[f32], qmax: f64, scmax: u8) -> Result<Affine<N>, Overflow> {
    let sub = QK_K / N;
    let chunk = |i: usize| &x[sub * i..sub * (i + 1)];
    let m: [f64; N] = std::array::from_fn(|i| {
        let min = chunk(i).iter().fold(0.0f64, |a, &v| a.min(v as f64));
        -min
    });
    let dmin = f16_ceil(m.iter().fold(0.0f64, |a, &v| a.max(v)) / scmax as f64)?;
    let mn: [u8; N] = std::array::from_fn(|i| ceil_code(m[i], dmin.to_f64(), scmax));
    let s: [f64; N] = std::array::from_fn(|i| {
        let max = chunk(i)
            .iter()
            .fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
        ((max + dmin.to_f64() * mn[i] as f64) / qmax).max(0.0)
    });
    let d = f16_ceil(s.iter().fold(0.0f64, |a, &v| a.max(v)) / scmax as f64)?;
    let sc: [u8; N] = std::array::from_fn(|i| ceil_code(s[i], d.to_f64(), scmax));
    Ok(Affine { d, dmin, sc, mn })
}

/// Element codes `q(e) ∈ [0, qmax]` for the affine scales `a` (sub-blocks of `256/N`).
fn affine_codes<const N: usize>(x: &[f32], a: &Affine<N>, qmax: i32) -> [u8; QK_K] {
    let sub = QK_K / N;
    std::array::from_fn(|e| {
        let i = e / sub;
        let step = a.d.to_f64() * a.sc[i] as f64;
        let min = a.dmin.to_f64() * a.mn[i] as f64;
        round_code(x[e] as f64 + min, step, 0, qmax) as u8
    })
}

/// Two-level symmetric scales (Q3_K, Q6_K): `sᵢ = amaxᵢ/qmax`, `d = f16⌈max sᵢ/scmax⌉`,
/// `scᵢ = ⌈sᵢ/d⌉ ∈ [0, scmax]`; codes `round(x/(d·scᵢ)) ∈ [−qmax, qmax]`.
fn symmetric<const N: usize>(
    x: &[f32],
    qmax: i32,
    scmax: u8,
) -> Result<(f16, [u8; N], [i32; QK_K]), Overflow> {
    let sub = QK_K / N;
    let s: [f64; N] = std::array::from_fn(|i| amax(&x[sub * i..sub * (i + 1)]) / qmax as f64);
    let d = f16_ceil(s.iter().fold(0.0f64, |a, &v| a.max(v)) / scmax as f64)?;
    let sc: [u8; N] = std::array::from_fn(|i| ceil_code(s[i], d.to_f64(), scmax));
    let q = std::array::from_fn(|e| {
        round_code(x[e] as f64, d.to_f64() * sc[e / sub] as f64, -qmax, qmax)
    });
    Ok((d, sc, q))
}

/// Q2_K quantizer: 16 sub-blocks of 16, 4-bit scale and min codes, 2-bit element codes.
/// Layout as [`super::kquants::dequant_q2_k`].
pub(super) fn quant_q2_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let a = affine_scales::<16>(x, 3.0, 15)?;
    let q = affine_codes(x, &a, 3);
    for ((o, &sc), &mn) in b[..16].iter_mut().zip(&a.sc).zip(&a.mn) {
        *o = sc | (mn << 4);
    }
    for (e, &q) in q.iter().enumerate() {
        let (h, j, r) = (e / 128, (e % 128) / 32, e % 32);
        b[16 + 32 * h + r] |= q << (2 * j);
    }
    put_f16(b, 80, a.d);
    put_f16(b, 82, a.dmin);
    Ok(())
}

/// Q3_K quantizer: 16 sub-blocks of 16, scales `S ∈ [0, 31]` (stored `S + 32` in the packed
/// 6-bit field), codes `q ∈ [−3, 3]` stored as `low2 = q & 3` with hmask bit set iff `q ≥ 0`.
/// Layout as [`super::kquants::dequant_q3_k`].
pub(super) fn quant_q3_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, sc, q) = symmetric::<16>(x, 3, 31)?;
    for (e, &q) in q.iter().enumerate() {
        let (h, j, r) = (e / 128, (e % 128) / 32, e % 32);
        let low2 = (q & 3) as u8; // q ≥ 0: q; q < 0: q + 4
        b[32 + 32 * h + r] |= low2 << (2 * j);
        if q >= 0 {
            b[r] |= 1 << (4 * h + j);
        }
    }
    let scales = &mut b[96..108];
    for (i, &s) in sc.iter().enumerate() {
        let u = s + 32; // 6-bit stored value, S = u − 32
        if i < 8 {
            scales[i] |= u & 0xF;
        } else {
            scales[i - 8] |= (u & 0xF) << 4;
        }
        scales[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    put_f16(b, 108, d);
    Ok(())
}

/// Packs eight 6-bit scales and mins into the 12-byte Q4_K/Q5_K field (inverse of
/// [`super::kquants::scale_min_k4`]).
fn pack_scale_min_k4(sc: &[u8; 8], mn: &[u8; 8], s: &mut [u8]) {
    for i in 0..4 {
        s[i] = sc[i] | ((sc[i + 4] >> 4) << 6);
        s[i + 4] = mn[i] | ((mn[i + 4] >> 4) << 6);
        s[i + 8] = (sc[i + 4] & 0xF) | ((mn[i + 4] & 0xF) << 4);
    }
}

/// Q4_K quantizer: 8 sub-blocks of 32, 6-bit scale and min codes, 4-bit element codes.
/// Layout as [`super::kquants::dequant_q4_k`].
pub(super) fn quant_q4_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let a = affine_scales::<8>(x, 15.0, 63)?;
    let q = affine_codes(x, &a, 15);
    put_f16(b, 0, a.d);
    put_f16(b, 2, a.dmin);
    pack_scale_min_k4(&a.sc, &a.mn, &mut b[4..16]);
    for (e, &q) in q.iter().enumerate() {
        let (sb, r) = (e / 32, e % 32);
        b[16 + 32 * (sb / 2) + r] |= q << (4 * (sb % 2));
    }
    Ok(())
}

/// Q5_K quantizer: as Q4_K with 5-bit element codes (bit 4 of sub-block `b`'s code `r` in
/// bit `b` of `qh[r]`). Layout as [`super::kquants::dequant_q5_k`].
pub(super) fn quant_q5_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let a = affine_scales::<8>(x, 31.0, 63)?;
    let q = affine_codes(x, &a, 31);
    put_f16(b, 0, a.d);
    put_f16(b, 2, a.dmin);
    pack_scale_min_k4(&a.sc, &a.mn, &mut b[4..16]);
    for (e, &q) in q.iter().enumerate() {
        let (sb, r) = (e / 32, e % 32);
        b[48 + 32 * (sb / 2) + r] |= (q & 0xF) << (4 * (sb % 2));
        b[16 + r] |= (q >> 4) << sb;
    }
    Ok(())
}

/// Q6_K quantizer: 16 sub-blocks of 16, int8 scales in `[0, 127]`, codes `q ∈ [−31, 31]`
/// stored as `u = q + 32` split into `ql`/`qh`. Layout as [`super::kquants::dequant_q6_k`].
pub(super) fn quant_q6_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let (d, sc, q) = symmetric::<16>(x, 31, 127)?;
    for (e, &q) in q.iter().enumerate() {
        let (h, j, r) = (e / 128, (e % 128) / 32, e % 32);
        let u = (q + 32) as u8;
        b[64 * h + r + 32 * (j % 2)] |= (u & 0xF) << (4 * (j / 2));
        b[128 + 32 * h + r] |= (u >> 4) << (2 * j);
    }
    b[192..208].copy_from_slice(&sc);
    put_f16(b, 208, d);
    Ok(())
}

/// Q8_K quantizer: `d = f32⌈amax/127⌉`, codes `round(x/d) ∈ [−127, 127]`, `bsums[k]` = sum of
/// codes `16k .. 16k+15` (i16 LE). Layout as [`super::kquants::dequant_q8_k`]. Never overflows.
pub(super) fn quant_q8_k(x: &[f32], b: &mut [u8]) -> Result<(), Overflow> {
    let d = f32_ceil(amax(x) / 127.0);
    b[0..4].copy_from_slice(&d.to_le_bytes());
    let mut bsums = [0i16; 16];
    for (e, &x) in x.iter().enumerate() {
        let q = round_code(x as f64, d as f64, -127, 127);
        b[4 + e] = q as i8 as u8;
        bsums[e / 16] += q as i16;
    }
    for (k, s) in bsums.iter().enumerate() {
        b[260 + 2 * k..262 + 2 * k].copy_from_slice(&s.to_le_bytes());
    }
    Ok(())
}
