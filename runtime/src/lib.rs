//! `runtime` — the CUDA engine for Gemma-4 GGUF models.
//!
//! Phase 1 (this state): device setup with a panic-safe probe ([`device`]), weight upload as
//! raw GGUF block bytes ([`weights`]), typed launch wrappers for every kernel of the `kernels`
//! crate ([`ops`]) and the GPU self-check run by `runtime gpu-check` ([`check`]), which compares
//! every kernel with the CPU reference (`reference::quant`, f64 math) and measures bandwidth.
//!
//! Spec: `spec/gguf-gemma4.md` §3 (block formats), `spec/gemma4-text.md` §3–§5, §9 (math).

pub mod args;
pub mod bench;
pub mod check;
pub mod device;
pub mod draft;
pub mod engine;
pub mod error;
pub mod forward;
pub mod loader;
pub mod modelcheck;
pub mod mvbench;
pub mod ops;
pub mod speccheck;
#[cfg(test)]
mod testing;
pub mod weights;

pub use device::Gpu;
pub use engine::{
    CudaEngine, EngineOptions, GenRequest, GenStep, SpecKind, SpecRoundLog, SpecRun, SpecStep,
};
pub use error::RuntimeError;
/// The kernel crate (its process-wide settings such as [`kernels::tc_digits`] name the engine's mode).
pub use kernels;
pub use weights::DeviceTensor;
