//! GGUF block formats: exact dequantization to f64 and simple quantizers.
//!
//! Spec: `spec/gguf-gemma4.md` §3 (§3.1 supported set, §3.2–§3.5 layouts, §3.6 exactness).
//! One file per block-format family: [`float`] (F32, F16, BF16), [`legacy`] (Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0), [`kquants`] (Q2_K … Q8_K decoders) with [`kquantize`] (their quantizers),
//! [`iq4`] (IQ4_NL, IQ4_XS). Each block decoder is a plain byte-offset function over one block
//! with its bit layout in the doc comment and the upstream `ggml-quants.c` function it follows.
//!
//! Exactness (§3.6): every dequantized value is exactly representable in f64, so
//! [`dequantize`] is exact whatever the evaluation order; [`dequantize_f32`] rounds that exact
//! value once to f32, which is bit-identical to gguf-py and ggml's reference C dequantizers.
//! NaN/Inf scale fields propagate IEEE-style (e.g. `Inf·0 = NaN`), they are never flushed;
//! [`finite`] finds them without decoding: [`check_finite`] (every tensor of a file, what the
//! model loaders run, conformance contract §9) and [`check_tensor_finite`] report the first as
//! a [`NonFiniteError`] naming tensor, block and field.

mod error;
pub mod finite;
mod float;
mod iq4;
mod kquantize;
mod kquants;
mod legacy;
mod mix;
mod scale;
mod types;

pub use error::QuantError;
pub use finite::{
    check_finite, check_tensor_finite, first_nonfinite, scale_fields, NonFiniteError,
    NonFiniteField,
};
pub use iq4::KVALUES_IQ4NL;
pub use mix::WeightMix;
pub use scale::quantize_error_bound;
pub use types::{GgmlType, SUPPORTED_TYPES};

/// An output element type of the decoders: f64 (exact) or f32 (rounded once, to nearest even).
pub(crate) trait Elem: Copy {
    /// The element for an exact value (f64 holds every value of §3 exactly).
    fn from_exact(v: f64) -> Self;
    /// The element for an f32 value (keeps NaN payloads bit-for-bit in the f32 case).
    fn from_f32(v: f32) -> Self;
}

impl Elem for f64 {
    #[inline(always)]
    fn from_exact(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}

impl Elem for f32 {
    #[inline(always)]
    fn from_exact(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}

/// Dequantizes `out.len()` elements of type `ty` from `bytes` to their exact values (§3.6).
///
/// Layout: `bytes` is `out.len() / ty.block_size()` consecutive blocks (§3.1), `out` the
/// elements in the same order (one GGUF row or several whole rows, ne0 fastest).
/// Errors: [`QuantError::Unsupported`] for a type outside §3.1,
/// [`QuantError::NotBlockMultiple`] when `out.len()` is not a multiple of the block size,
/// [`QuantError::Length`] when `bytes.len() != ty.bytes_for(out.len())`. Non-finite scale
/// fields are not errors: they give NaN/±Inf elements (see [`first_nonfinite_block`]).
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f64]) -> Result<(), QuantError> {
    dequantize_into(ty, bytes, out)
}

/// As [`dequantize`], but each element is the exact value rounded once to f32 (nearest even),
/// which is what gguf-py's `gguf.quants.dequantize` and ggml's `dequantize_row_*` give (§3.6).
/// Plain F32/F16/BF16 elements are widened directly (NaN payloads kept).
pub fn dequantize_f32(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    dequantize_into(ty, bytes, out)
}

fn check_len(ty: GgmlType, n_bytes: usize, n_elements: usize) -> Result<(), QuantError> {
    if !ty.is_supported() {
        return Err(QuantError::Unsupported { ty });
    }
    let Some(expected) = ty.bytes_for(n_elements as u64) else {
        return Err(QuantError::NotBlockMultiple {
            ty,
            n_elements,
            block_size: ty.block_size(),
        });
    };
    if expected != n_bytes as u64 {
        return Err(QuantError::Length {
            ty,
            n_elements,
            expected,
            got: n_bytes,
        });
    }
    Ok(())
}

/// Runs the one-block decoder `f` over every (block bytes, block elements) pair.
#[inline(always)]
fn for_blocks<O: Elem>(ty: GgmlType, bytes: &[u8], out: &mut [O], f: impl Fn(&[u8], &mut [O])) {
    for (b, o) in bytes
        .chunks_exact(ty.type_size())
        .zip(out.chunks_exact_mut(ty.block_size()))
    {
        f(b, o)
    }
}

fn dequantize_into<O: Elem>(ty: GgmlType, bytes: &[u8], out: &mut [O]) -> Result<(), QuantError> {
    use GgmlType::*;
    check_len(ty, bytes.len(), out.len())?;
    match ty {
        F32 => float::dequant_f32(bytes, out),
        F16 => float::dequant_f16(bytes, out),
        BF16 => float::dequant_bf16(bytes, out),
        Q4_0 => for_blocks(ty, bytes, out, legacy::dequant_q4_0),
        Q4_1 => for_blocks(ty, bytes, out, legacy::dequant_q4_1),
        Q5_0 => for_blocks(ty, bytes, out, legacy::dequant_q5_0),
        Q5_1 => for_blocks(ty, bytes, out, legacy::dequant_q5_1),
        Q8_0 => for_blocks(ty, bytes, out, legacy::dequant_q8_0),
        Q2_K => for_blocks(ty, bytes, out, kquants::dequant_q2_k),
        Q3_K => for_blocks(ty, bytes, out, kquants::dequant_q3_k),
        Q4_K => for_blocks(ty, bytes, out, kquants::dequant_q4_k),
        Q5_K => for_blocks(ty, bytes, out, kquants::dequant_q5_k),
        Q6_K => for_blocks(ty, bytes, out, kquants::dequant_q6_k),
        Q8_K => for_blocks(ty, bytes, out, kquants::dequant_q8_k),
        IQ4_NL => for_blocks(ty, bytes, out, iq4::dequant_iq4_nl),
        IQ4_XS => for_blocks(ty, bytes, out, iq4::dequant_iq4_xs),
        _ => return Err(QuantError::Unsupported { ty }),
    }
    Ok(())
}

/// Index of the first block of `bytes` (whole blocks of `ty`, a trailing partial block is
/// ignored) whose floating fields are NaN or ±Inf, or `None` when all are finite: the block of
/// [`first_nonfinite`], whose [`scale_fields`] table lists the fields per format (`d` for Q4_0,
/// Q5_0, Q8_0, IQ4_NL, Q3_K, Q6_K, IQ4_XS; `d` and `m` for Q4_1, Q5_1; `d` and `dmin` for Q2_K,
/// Q4_K, Q5_K; the f32 `d` for Q8_K; …). For the plain types F32/F16/BF16/F64 every element is
/// its own block, so the result is the first non-finite element. `None` for a format without
/// floating fields (integer types, MXFP4, NVFP4).
pub fn first_nonfinite_block(ty: GgmlType, bytes: &[u8]) -> Option<usize> {
    first_nonfinite(ty, bytes).map(|f| f.block)
}

/// Quantizes `values` to type `ty` with the simple round-to-nearest quantizers of this module
/// (per-block scales rounded *up* to the f16 grid so no code is clamped; no importance
/// weighting, no scale search — much cruder than ggml's `quantize_row_*_ref`).
///
/// Returns `values.len() / ty.block_size()` blocks (`ty.bytes_for(values.len())` bytes) that
/// [`dequantize`] decodes to within [`quantize_error_bound`]`(ty, block max |x|)` of each input.
/// F32/F16/BF16 are plain IEEE conversions (round to nearest even; overflow gives ±Inf, NaN
/// stays NaN). Errors: [`QuantError::Unsupported`], [`QuantError::NotBlockMultiple`];
/// for block formats also [`QuantError::NonFinite`] (a NaN/Inf input) and
/// [`QuantError::ScaleOverflow`] (a block whose scale exceeds the f16 range).
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    use GgmlType::*;
    let n = values.len();
    let nbytes = if ty.is_supported() {
        ty.bytes_for(n as u64)
    } else {
        return Err(QuantError::Unsupported { ty });
    };
    let Some(nbytes) = nbytes else {
        return Err(QuantError::NotBlockMultiple {
            ty,
            n_elements: n,
            block_size: ty.block_size(),
        });
    };
    match ty {
        F32 => return Ok(float::quant_f32(values)),
        F16 => return Ok(float::quant_f16(values)),
        BF16 => return Ok(float::quant_bf16(values)),
        _ => {}
    }
    if let Some(index) = values.iter().position(|v| !v.is_finite()) {
        return Err(QuantError::NonFinite {
            ty,
            index,
            value: values[index],
        });
    }
    let f: fn(&[f32], &mut [u8]) -> Result<(), scale::Overflow> = match ty {
        Q4_0 => legacy::quant_q4_0,
        Q4_1 => legacy::quant_q4_1,
        Q5_0 => legacy::quant_q5_0,
        Q5_1 => legacy::quant_q5_1,
        Q8_0 => legacy::quant_q8_0,
        Q2_K => kquantize::quant_q2_k,
        Q3_K => kquantize::quant_q3_k,
        Q4_K => kquantize::quant_q4_k,
        Q5_K => kquantize::quant_q5_k,
        Q6_K => kquantize::quant_q6_k,
        Q8_K => kquantize::quant_q8_k,
        IQ4_NL => iq4::quant_iq4_nl,
        IQ4_XS => iq4::quant_iq4_xs,
        _ => return Err(QuantError::Unsupported { ty }),
    };
    let mut out = vec![0u8; nbytes as usize];
    for (block, (x, b)) in values
        .chunks_exact(ty.block_size())
        .zip(out.chunks_exact_mut(ty.type_size()))
        .enumerate()
    {
        f(x, b).map_err(|scale::Overflow| QuantError::ScaleOverflow {
            ty,
            block,
            amax: scale::amax(x) as f32,
        })?;
    }
    Ok(out)
}
