//! GGUF block formats: exact dequantization to f64 and simple quantizers.
//!
//! Spec: `spec/gguf-gemma4.md` §3. One file per block-format family.

mod types;

pub use types::{GgmlType, SUPPORTED_TYPES};
