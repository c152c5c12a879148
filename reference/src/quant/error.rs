//! Typed errors of the block-format layer (`spec/gguf-gemma4.md` §3).

use super::GgmlType;

/// What went wrong in [`super::dequantize`], [`super::dequantize_f32`] or [`super::quantize`].
///
/// Callers that know the tensor wrap this with its name (e.g. `ModelError::Tensor { name, source }`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantError {
    /// The type is outside the supported set of §3.1 (named as in §3.7).
    #[error("unsupported tensor type {ty} (ggml type id {id})", id = ty.id())]
    Unsupported {
        /// The type that cannot be decoded or encoded.
        ty: GgmlType,
    },
    /// The element count is not a multiple of the type's block size.
    #[error("{ty}: {n_elements} elements is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        /// The block format.
        ty: GgmlType,
        /// Elements requested (output length or input length).
        n_elements: usize,
        /// Elements per block of `ty`.
        block_size: usize,
    },
    /// The byte buffer does not hold exactly the blocks for the requested element count.
    #[error("{ty}: {n_elements} elements need {expected} bytes, got {got}")]
    Length {
        /// The block format.
        ty: GgmlType,
        /// Elements requested (the output length).
        n_elements: usize,
        /// `ty.bytes_for(n_elements)`.
        expected: u64,
        /// Bytes given.
        got: usize,
    },
    /// A block-format quantizer was given a NaN or infinite input value.
    #[error("{ty}: cannot quantize non-finite value {value} at element {index}")]
    NonFinite {
        /// The target block format.
        ty: GgmlType,
        /// Element index in the input slice.
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// A block's values are too large for the format's f16 (or f32) scale fields.
    #[error("{ty}: block {block} (max |x| = {amax}) overflows the format's scale range")]
    ScaleOverflow {
        /// The target block format.
        ty: GgmlType,
        /// Block index in the input.
        block: usize,
        /// The block's largest magnitude.
        amax: f32,
    },
}
