//! 256-element "K" super-block decoders Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K
//! (`spec/gguf-gemma4.md` §3.4).
//!
//! Upstream: `ggml/src/ggml-common.h` (`block_q2_K` …) and `ggml/src/ggml-quants.c`
//! (`dequantize_row_q2_K` …). Index shorthands for element `e ∈ [0, 256)`: `h = e / 128`,
//! `j = (e % 128) / 32`, `r = e % 32`, `sb16 = e / 16`, `sb32 = e / 32`. Products are formed
//! in gguf-py's grouping (`(d·sc)·q − dmin·mn`); in f64 every grouping is exact (§3.6), the
//! grouping only fixes which non-finite class (NaN vs Inf) a non-finite scale gives.
//! Quantizers are in [`super::kquantize`].

use super::scale::f16_at;
use super::Elem;

/// Elements per super-block.
pub(super) const QK_K: usize = 256;

/// Q2_K, 84 bytes: `scales` u8[16] @0 (low nibble = scale, high nibble = min, one byte per 16
/// elements), `qs` u8[64] @16 (2-bit codes), `d` f16 @80, `dmin` f16 @82.
/// `q(e) = (qs[32h + r] >> 2j) & 3`, `s = scales[sb16]`, `x[e] = d·(s & 0xF)·q(e) − dmin·(s >> 4)`.
/// Follows `dequantize_row_q2_K`.
pub(super) fn dequant_q2_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..84], &mut out[..QK_K]);
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (sb, o) in out.chunks_exact_mut(16).enumerate() {
        let (h, j) = (sb / 8, (sb % 8) / 2);
        let s = scales[sb];
        let dl = d * (s & 0xF) as f64;
        let ml = dmin * (s >> 4) as f64;
        let q = &qs[32 * h + 16 * (sb % 2)..][..16];
        for (o, &q) in o.iter_mut().zip(q) {
            *o = O::from_exact(dl * ((q >> (2 * j)) & 3) as f64 - ml);
        }
    }
}

/// Sixteen signed 6-bit Q3_K scales `S(i) ∈ [−32, 31]` from the 12-byte `scales` field:
/// `low4(i) = i < 8 ? s[i] & 0xF : s[i−8] >> 4`, `high2(i) = (s[8 + i%4] >> 2·(i/4)) & 3`,
/// `S(i) = (low4 | high2 << 4) − 32`.
#[inline(always)]
pub(super) fn q3_k_scales(s: &[u8]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low4 = if i < 8 { s[i] & 0xF } else { s[i - 8] >> 4 };
        let high2 = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        *o = (low4 | (high2 << 4)) as i32 - 32;
    }
    out
}

/// Q3_K, 110 bytes: `hmask` u8[32] @0 (high bit of each code), `qs` u8[64] @32 (low 2 bits),
/// `scales` u8[12] @96 (see [`q3_k_scales`]), `d` f16 @108.
/// `low2 = (qs[32h + r] >> 2j) & 3`, `hbit = (hmask[r] >> (4h + j)) & 1`,
/// `q = low2 − (hbit ? 0 : 4) ∈ [−4, 3]`, `x[e] = (d·S(sb16))·q`.
/// Follows `dequantize_row_q3_K`.
pub(super) fn dequant_q3_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..110], &mut out[..QK_K]);
    let (hmask, qs) = (&b[0..32], &b[32..96]);
    let sc = q3_k_scales(&b[96..108]);
    let d = f16_at(b, 108);
    for (sb, o) in out.chunks_exact_mut(16).enumerate() {
        let (h, j) = (sb / 8, (sb % 8) / 2);
        let dl = d * sc[sb] as f64;
        let r0 = 16 * (sb % 2);
        let q = &qs[32 * h + r0..][..16];
        let hm = &hmask[r0..r0 + 16];
        for ((o, &q), &hm) in o.iter_mut().zip(q).zip(hm) {
            let low2 = ((q >> (2 * j)) & 3) as i32;
            let hbit = (hm >> (4 * h + j)) & 1;
            let q = low2 - if hbit == 1 { 0 } else { 4 };
            *o = O::from_exact(dl * q as f64);
        }
    }
}

/// The 6-bit scale and min of sub-block `b ∈ [0, 8)` from the 12-byte Q4_K/Q5_K `scales`
/// field `s` (upstream `get_scale_min_k4`): for `b < 4` `sc = s[b] & 63`, `mn = s[b+4] & 63`;
/// for `b ≥ 4` `sc = (s[b+4] & 0xF) | ((s[b−4] >> 6) << 4)`, `mn = (s[b+4] >> 4) | ((s[b] >> 6) << 4)`.
#[inline(always)]
pub(super) fn scale_min_k4(b: usize, s: &[u8]) -> (u8, u8) {
    if b < 4 {
        (s[b] & 63, s[b + 4] & 63)
    } else {
        (
            (s[b + 4] & 0xF) | ((s[b - 4] >> 6) << 4),
            (s[b + 4] >> 4) | ((s[b] >> 6) << 4),
        )
    }
}

/// Q4_K, 144 bytes: `d` f16 @0, `dmin` f16 @2, `scales` u8[12] @4 (see [`scale_min_k4`]),
/// `qs` u8[128] @16. Sub-block `b = sb32`: `q(e) = (qs[32·(b/2) + r] >> 4·(b%2)) & 0xF`,
/// `x[e] = (d·sc(b))·q(e) − dmin·mn(b)`. Follows `dequantize_row_q4_K`.
pub(super) fn dequant_q4_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..144], &mut out[..QK_K]);
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for (sb, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, mn) = scale_min_k4(sb, scales);
        let (d1, m1) = (d * sc as f64, dmin * mn as f64);
        let shift = 4 * (sb % 2);
        for (o, &q) in o.iter_mut().zip(&qs[32 * (sb / 2)..][..32]) {
            *o = O::from_exact(d1 * ((q >> shift) & 0xF) as f64 - m1);
        }
    }
}

/// Q5_K, 176 bytes: `d` f16 @0, `dmin` f16 @2, `scales` u8[12] @4 (as Q4_K), `qh` u8[32] @16
/// (5th bits), `qs` u8[128] @48 (low 4 bits as Q4_K). Sub-block `b = sb32`:
/// `q(e) = low4 | (((qh[r] >> b) & 1) << 4)`, `x[e] = (d·sc(b))·q(e) − dmin·mn(b)`.
/// Follows `dequantize_row_q5_K`.
pub(super) fn dequant_q5_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..176], &mut out[..QK_K]);
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for (sb, o) in out.chunks_exact_mut(32).enumerate() {
        let (sc, mn) = scale_min_k4(sb, scales);
        let (d1, m1) = (d * sc as f64, dmin * mn as f64);
        let shift = 4 * (sb % 2);
        for ((o, &q), &h) in o.iter_mut().zip(&qs[32 * (sb / 2)..][..32]).zip(qh) {
            let q = ((q >> shift) & 0xF) | (((h >> sb) & 1) << 4);
            *o = O::from_exact(d1 * q as f64 - m1);
        }
    }
}

/// Q6_K, 210 bytes: `ql` u8[128] @0 (low 4 bits), `qh` u8[64] @128 (high 2 bits), `scales`
/// i8[16] @192, `d` f16 @208. `low4 = (ql[64h + r + 32·(j%2)] >> 4·(j/2)) & 0xF`,
/// `high2 = (qh[32h + r] >> 2j) & 3`, `q = (low4 | high2 << 4) − 32`,
/// `x[e] = (d·scales[sb16])·q`. Follows `dequantize_row_q6_K`.
pub(super) fn dequant_q6_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..210], &mut out[..QK_K]);
    let (ql, qh, scales) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    for (sb, o) in out.chunks_exact_mut(16).enumerate() {
        let (h, j) = (sb / 8, (sb % 8) / 2);
        let dl = d * (scales[sb] as i8) as f64;
        let r0 = 16 * (sb % 2);
        let lo = &ql[64 * h + 32 * (j % 2) + r0..][..16];
        let hi = &qh[32 * h + r0..][..16];
        let (lshift, hshift) = (4 * (j / 2), 2 * j);
        for ((o, &l), &hb) in o.iter_mut().zip(lo).zip(hi) {
            let q = (((l >> lshift) & 0xF) | (((hb >> hshift) & 3) << 4)) as i32 - 32;
            *o = O::from_exact(dl * q as f64);
        }
    }
}

/// Q8_K, 292 bytes: `d` **f32** @0, `qs` i8[256] @4, `bsums` i16[16] @260 (sums of 16 codes,
/// not used here). `x[e] = d·qs[e]` (exact in f64; one rounding in f32).
/// Follows `dequantize_row_q8_K`.
pub(super) fn dequant_q8_k<O: Elem>(b: &[u8], out: &mut [O]) {
    let (b, out) = (&b[..292], &mut out[..QK_K]);
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
    for (o, &q) in out.iter_mut().zip(&b[4..260]) {
        *o = O::from_exact(d * (q as i8) as f64);
    }
}
