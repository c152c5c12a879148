//! Plain float element types F32, F16, BF16 (`spec/gguf-gemma4.md` §3.2).
//!
//! One element per "block"; widening to f32/f64 is exact (subnormals and NaN payloads kept).
//! Upstream: `ggml_fp16_to_fp32_row`, `ggml_bf16_to_fp32_row` (`ggml/src/ggml.c`); gguf-py
//! `gguf.quants` (`view` + `astype`) and its BF16 quantizer (round to nearest even).

use half::{bf16, f16};

use super::Elem;

/// F32: 4 bytes per element, IEEE binary32 little-endian. `bytes.len() == 4 · out.len()`.
pub(super) fn dequant_f32<O: Elem>(bytes: &[u8], out: &mut [O]) {
    for (b, o) in bytes.chunks_exact(4).zip(out.iter_mut()) {
        *o = O::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    }
}

/// F16: 2 bytes per element, IEEE binary16 little-endian; f16 → f32 is exact.
pub(super) fn dequant_f16<O: Elem>(bytes: &[u8], out: &mut [O]) {
    for (b, o) in bytes.chunks_exact(2).zip(out.iter_mut()) {
        *o = O::from_f32(f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32());
    }
}

/// BF16: 2 bytes per element, the upper half of a binary32: value = bits `u16 << 16` as f32.
pub(super) fn dequant_bf16<O: Elem>(bytes: &[u8], out: &mut [O]) {
    for (b, o) in bytes.chunks_exact(2).zip(out.iter_mut()) {
        *o = O::from_f32(f32::from_bits(
            (u16::from_le_bytes([b[0], b[1]]) as u32) << 16,
        ));
    }
}

/// F32 bytes of `values` (little-endian, bit-exact).
pub(super) fn quant_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// F16 bytes of `values`: round to nearest even (`half::f16::from_f32`, what numpy's
/// `astype(float16)` does); |x| ≥ 65520 gives ±Inf, NaN stays NaN.
pub(super) fn quant_f16(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| f16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

/// BF16 bytes of `values`: round to nearest even (`half::bf16::from_f32`, as gguf-py's BF16
/// quantizer); NaN stays NaN.
pub(super) fn quant_bf16(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| bf16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}
