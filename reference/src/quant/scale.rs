//! Shared helpers: little-endian scale fields, directed f16/f32 rounding of scales for the
//! quantizers, and the quantizers' documented error bound.
//!
//! Spec: `spec/gguf-gemma4.md` §3.3–§3.6 (f16 scale fields, exactness).

use half::f16;

use super::GgmlType;

/// The f16 at byte `off` of `b` (little-endian), widened exactly to f64 (NaN/Inf kept).
#[inline(always)]
pub(super) fn f16_at(b: &[u8], off: usize) -> f64 {
    f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f64()
}

/// Writes `h` little-endian at byte `off` of `b`.
#[inline]
pub(super) fn put_f16(b: &mut [u8], off: usize, h: f16) {
    b[off..off + 2].copy_from_slice(&h.to_bits().to_le_bytes());
}

/// A scale that does not fit the format's scale field (f16 overflow).
#[derive(Debug, Clone, Copy)]
pub(super) struct Overflow;

/// The smallest f16 ≥ `x` (`x` ≥ 0 and finite), or [`Overflow`] when that is beyond 65504.
///
/// Rounding scales *up* guarantees `|x| / d ≤ qmax`, so quantizers never clamp a code.
pub(super) fn f16_ceil(x: f64) -> Result<f16, Overflow> {
    let mut h = f16::from_f64(x);
    if h.to_f64() < x {
        h = f16::from_bits(h.to_bits() + 1); // x ≥ 0: the next f16 up
    }
    if h.is_finite() {
        Ok(h)
    } else {
        Err(Overflow)
    }
}

/// The largest f16 ≤ `x` (`x` finite), or [`Overflow`] when that is below −65504.
pub(super) fn f16_floor(x: f64) -> Result<f16, Overflow> {
    let mut h = f16::from_f64(x);
    if h.to_f64() > x {
        let bits = h.to_bits();
        h = f16::from_bits(if bits & 0x7FFF == 0 {
            0x8001 // ±0 → −(smallest subnormal)
        } else if bits & 0x8000 == 0 {
            bits - 1 // positive: one step toward zero
        } else {
            bits + 1 // negative: one step away from zero
        });
    }
    if h.is_finite() {
        Ok(h)
    } else {
        Err(Overflow)
    }
}

/// The smallest f32 ≥ `x` (`x` ≥ 0, finite, below f32::MAX).
pub(super) fn f32_ceil(x: f64) -> f32 {
    let v = x as f32;
    if (v as f64) < x {
        f32::from_bits(v.to_bits() + 1)
    } else {
        v
    }
}

/// Largest magnitude of a block, in f64.
pub(super) fn amax(xs: &[f32]) -> f64 {
    xs.iter().fold(0.0f64, |m, &x| m.max((x as f64).abs()))
}

/// `ceil(v / step)` clamped to `[0, max]`; 0 when `step == 0`. Used to pick a sub-block scale
/// code whose effective scale covers `v`.
pub(super) fn ceil_code(v: f64, step: f64, max: u8) -> u8 {
    if step == 0.0 {
        0
    } else {
        (v / step).ceil().clamp(0.0, max as f64) as u8
    }
}

/// `round(x / step)` clamped to `[lo, hi]`; 0 when `step == 0`.
pub(super) fn round_code(x: f64, step: f64, lo: i32, hi: i32) -> i32 {
    if step == 0.0 {
        0
    } else {
        ((x / step).round() as i32).clamp(lo, hi)
    }
}

/// Upper bound on `|dequantize(quantize(x))[e] − x[e]|` for every element `e` of one block of
/// [`super::quantize`] output, given the block's largest magnitude `amax` (one element for
/// F32/F16/BF16; 32 or 256 elements otherwise). `None` for an unsupported type.
///
/// Valid for finite inputs whose scales fit the f16 fields (`amax` ≤ 65504 always suffices;
/// larger blocks are reported as [`super::QuantError::ScaleOverflow`]). Derivation, with
/// `c = 1 + 2⁻¹⁰` and `u = 2⁻²⁴` (an f16 rounded *up* from `s ≥ 0` is `≤ s·c + u`, covering
/// subnormals), every scale rounded up so that no code is ever clamped:
/// * F32: 0. F16: `2⁻¹¹·|x| + 2⁻²⁵` (round to nearest even). BF16: `2⁻⁸·|x| + 2⁻¹³⁴`.
/// * Q4_0 / Q5_0 / Q8_0 (symmetric, `qmax` = 7 / 15 / 127): `d ≤ (amax/qmax)·c + u`, error `≤ d/2`.
/// * Q4_1 / Q5_1 (`m` = f16 floor of the minimum, `qmax` = 15 / 31): range
///   `R ≤ 2·amax + 2⁻¹⁰·amax + u`, `d ≤ (R/qmax)·c + u`, error `≤ d/2`.
/// * Q2_K / Q4_K / Q5_K (per-sub-block min `mᵢ = max(0, −min)` and scale, 4- or 6-bit codes up
///   to `scmax` = 15 / 63 / 63, `qmax` = 3 / 15 / 31): `dmin ≤ (amax/scmax)·c + u`,
///   `sᵢ ≤ (2·amax + dmin)/qmax = s`, `d ≤ (s/scmax)·c + u`, effective step `< s + d`, error `≤ (s + d)/2`.
/// * Q3_K / Q6_K (symmetric sub-blocks, `qmax` = 3 / 31, `scmax` = 31 / 127):
///   `s = amax/qmax`, `d ≤ (s/scmax)·c + u`, error `≤ (s + d)/2`.
/// * Q8_K (f32 scale): `d ≤ (amax/127)·(1 + 2⁻²³) + 2⁻¹⁴⁹`, error `≤ d/2`.
/// * IQ4_NL: `d ≤ (amax/113)·c + u`; the largest gap of the codebook on `[−113, 113]` is 24
///   (89 → 113), so error `≤ 12·d`. IQ4_XS: `s = amax/113`, `d ≤ (s/31)·c + u`, error `≤ 12·(s + d)`.
///
/// Every bound gets `amax·2⁻⁴⁰` added for the f64 roundings inside the quantizers. In words:
/// about half a quantization step, e.g. Q8_0 ≈ amax/254, Q4_K ≈ 0.068·amax, Q2_K ≈ 0.37·amax.
pub fn quantize_error_bound(ty: GgmlType, amax: f64) -> Option<f64> {
    use GgmlType::*;
    const C: f64 = 1.0 + 1.0 / 1024.0;
    let u = 2f64.powi(-24);
    let sym = |qmax: f64| (amax / qmax * C + u) / 2.0;
    let affine = |qmax: f64| {
        let r = 2.0 * amax + amax / 1024.0 + u;
        (r / qmax * C + u) / 2.0
    };
    let k_affine = |qmax: f64, scmax: f64| {
        let dmin = amax / scmax * C + u;
        let s = (2.0 * amax + dmin) / qmax;
        (s + s / scmax * C + u) / 2.0
    };
    let k_sym = |qmax: f64, scmax: f64| {
        let s = amax / qmax;
        (s + s / scmax * C + u) / 2.0
    };
    let b = match ty {
        F32 => 0.0,
        F16 => amax * 2f64.powi(-11) + 2f64.powi(-25),
        BF16 => amax * 2f64.powi(-8) + 2f64.powi(-134),
        Q4_0 => sym(7.0),
        Q5_0 => sym(15.0),
        Q8_0 => sym(127.0),
        Q4_1 => affine(15.0),
        Q5_1 => affine(31.0),
        Q2_K => k_affine(3.0, 15.0),
        Q4_K => k_affine(15.0, 63.0),
        Q5_K => k_affine(31.0, 63.0),
        Q3_K => k_sym(3.0, 31.0),
        Q6_K => k_sym(31.0, 127.0),
        Q8_K => (amax / 127.0 * (1.0 + 2f64.powi(-23)) + 2f64.powi(-149)) / 2.0,
        IQ4_NL => 12.0 * (amax / 113.0 * C + u),
        IQ4_XS => {
            let s = amax / 113.0;
            12.0 * (s + s / 31.0 * C + u)
        }
        _ => return None,
    };
    Some(b + amax * 2f64.powi(-40))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-checked directed roundings: 0.1 lies between the f16s 0x2E66 (0.0999755859375)
    /// and 0x2E67 (0.10003662109375); 2⁻²⁶ lies between 0 and the smallest subnormal 2⁻²⁴.
    #[test]
    fn f16_directed_rounding_brackets_the_value() {
        assert_eq!(f16_ceil(0.1).unwrap().to_bits(), 0x2E67);
        assert_eq!(f16_floor(0.1).unwrap().to_bits(), 0x2E66);
        assert_eq!(f16_floor(-0.1).unwrap().to_bits(), 0xAE67);
        assert_eq!(f16_ceil(2f64.powi(-26)).unwrap().to_bits(), 0x0001);
        assert_eq!(f16_floor(-(2f64.powi(-26))).unwrap().to_bits(), 0x8001);
        assert_eq!(f16_ceil(0.5).unwrap().to_bits(), 0x3800);
        assert!(f16_ceil(65505.0).is_err());
        assert!(f16_floor(-65505.0).is_err());
        assert_eq!(f32_ceil(0.1), 0.1f32); // 0.1f32 = 0.100000001490116… > 0.1
        assert_eq!(f32_ceil(0.7), f32::from_bits(0.7f32.to_bits() + 1)); // 0.7f32 = 0.699999988… < 0.7
    }
}
