//! Error type of the CUDA runtime.

use reference::quant::{GgmlType, QuantError};

/// Errors of the CUDA runtime; each names the kernel, tensor or shape involved.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No usable GPU / CUDA driver / NVRTC on this machine; the text says why.
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {what}: {source}")]
    Driver {
        /// The operation (kernel name, copy, allocation).
        what: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// Compiling or loading a kernel failed.
    #[error(transparent)]
    Kernel(#[from] kernels::KernelError),
    /// The block format has no GPU kernel (outside `spec/gguf-gemma4.md` §3.1).
    #[error("no GPU kernel for tensor type {ty} (in {what})")]
    UnsupportedType {
        /// The type.
        ty: GgmlType,
        /// The operation or tensor.
        what: String,
    },
    /// Arguments whose shapes or lengths do not fit the kernel's contract.
    #[error("bad shape for {what}: {detail}")]
    Shape {
        /// The operation or tensor.
        what: String,
        /// What does not fit.
        detail: String,
    },
    /// The model file cannot be used (GGUF, metadata, missing tensor); names the path or tensor.
    #[error("model {what}: {detail}")]
    Model {
        /// The file or tensor.
        what: String,
        /// What is wrong.
        detail: String,
    },
    /// A token id is not below the vocabulary size.
    #[error("token id {token} at row {row} is out of range (vocabulary {vocab})")]
    TokenOutOfRange {
        /// Row of the forward call.
        row: usize,
        /// The id.
        token: u32,
        /// `V`.
        vocab: usize,
    },
    /// A request does not fit the engine's KV cache (slots or context length).
    #[error("KV cache capacity: {0}")]
    Capacity(String),
    /// The engine produced NaN/Inf logits (row named).
    #[error("non-finite logits in row {row}")]
    NonFinite {
        /// Row index of the result.
        row: usize,
    },
    /// A CPU-side quantization error (reference dequantizer).
    #[error("tensor {name}: {source}")]
    Quant {
        /// The tensor.
        name: String,
        /// The error.
        #[source]
        source: QuantError,
    },
}

/// Shorthand: wraps a driver error with the operation's name.
pub(crate) fn drv(
    what: impl Into<String>,
) -> impl FnOnce(cudarc::driver::DriverError) -> RuntimeError {
    let what = what.into();
    move |source| RuntimeError::Driver { what, source }
}
