//! Error type of the CUDA runtime.

use reference::quant::{GgmlType, NonFiniteError, QuantError};

/// Errors of the CUDA runtime; each names the kernel, tensor or shape involved.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No usable GPU / CUDA driver / NVRTC on this machine; the text says why.
    #[error("CUDA unavailable: {0}")]
    Unavailable(String),
    /// A runtime setting from the environment is not one the runtime knows (e.g.
    /// `GEMMA4_TC_DIGITS`, `GEMMA4_PDL`, `GEMMA4_KERNEL_SRC`:
    /// [`crate::forward::settings_problem`]); the text names it and the accepted values.
    #[error("bad setting: {0}")]
    Setting(String),
    /// A CUDA driver call failed.
    #[error("CUDA driver error in {what}: {source}")]
    Driver {
        /// The operation (kernel name, copy, allocation).
        what: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
    /// A launch's arguments do not match the kernel's parameter list (count or sizes in bytes,
    /// from the PTX this process compiled: `kernels::kernel_param_sizes`; an empty `takes`: no
    /// compiled module holds the kernel); nothing was launched.
    #[error("kernel {kernel}: the launch passes parameters of {passed:?} bytes, the kernel takes {takes:?}")]
    Params {
        /// The kernel's name.
        kernel: String,
        /// Sizes in bytes of the arguments passed, in order.
        passed: Vec<usize>,
        /// Sizes in bytes of the kernel's parameters, in order.
        takes: Vec<usize>,
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
    /// A rollback ([`crate::forward::KvCache::truncate`]) would need positions that a sliding
    /// layer's ring has already overwritten (`spec/gemma4-assistant-mtp.md` §6.2). The slot keeps
    /// its length and contents but refuses forwards ([`RuntimeError::KvRefused`]) until a
    /// truncate succeeds or the slot is reset.
    #[error(
        "KV slot {slot}: cannot roll back from {cached} to {len} positions: layer {layer} \
         (window {window}) needs positions {needed_from}…{last} but its ring of {rows} rows \
         holds only {oldest_held}…{held_last}",
        last = .len.saturating_sub(1),
        held_last = .cached.saturating_sub(1)
    )]
    RollbackPastWindow {
        /// The slot.
        slot: usize,
        /// The (storage-owning) sliding layer that lacks the rows.
        layer: usize,
        /// Requested length.
        len: usize,
        /// Length before the call.
        cached: usize,
        /// Widest window `W` among the layers reading that storage.
        window: usize,
        /// Ring rows per slot (`W + CHUNK_ROWS`).
        rows: usize,
        /// First position the requested length needs (`len + 1 − W`).
        needed_from: usize,
        /// Oldest position the ring still holds.
        oldest_held: usize,
    },
    /// A forward or draft needs KV positions that the storage read by `layer` no longer holds
    /// (overwritten in a sliding ring, e.g. by a forward that failed after writing its rows).
    #[error(
        "KV slot {slot}, layer {layer}: positions {}…{} needed, its storage of {rows} rows \
         holds {}…{}",
        .asked.start, .asked.end.saturating_sub(1), .held.start, .held.end.saturating_sub(1)
    )]
    KvNotHeld {
        /// The slot.
        slot: usize,
        /// The layer whose storage is read (a reuse layer reads its store layer's).
        layer: usize,
        /// Positions needed.
        asked: std::ops::Range<usize>,
        /// Positions held.
        held: std::ops::Range<usize>,
        /// Rows per slot of that storage.
        rows: usize,
    },
    /// A forward or draft on a slot whose last rollback failed
    /// ([`RuntimeError::RollbackPastWindow`]).
    #[error(
        "KV slot {slot} refuses forwards: rolling back from {len} to {asked} positions failed; \
         truncate to a reachable length or reset the slot first"
    )]
    KvRefused {
        /// The slot.
        slot: usize,
        /// The length the failed rollback asked for.
        asked: usize,
        /// The slot's (unchanged) length.
        len: usize,
    },
    /// The engine produced NaN/Inf logits (row named).
    #[error("non-finite logits in row {row}")]
    NonFinite {
        /// Row index of the result.
        row: usize,
    },
    /// A weight of the model file holds NaN or ±Inf: the load-time check
    /// ([`crate::loader::check_weights`], `reference::quant::check_finite`; conformance contract
    /// §9) names tensor, block and field. Skipped with `LoadOptions::allow_nonfinite`.
    #[error(transparent)]
    NonFiniteWeight(#[from] NonFiniteError),
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
