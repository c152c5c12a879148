//! `reference` — the GGUF format layer and the float64 Gemma-4 oracle.
//!
//! Data flows one way (see `ARCHITECTURE.md`): [`gguf`] reads the container (zero-copy over
//! `memmap2`), [`quant`] turns GGUF blocks into exact f64 values, [`config`] derives the Gemma-4
//! configuration and tensor names from metadata, [`tokenizer`] builds the tokenizer and chat
//! template from metadata. The oracle ([`model`], [`decode`], [`spec`], [`score`]) builds on
//! these: one forward pass generic over the float type (f64 oracle, f32 engine).

pub mod config;
pub mod decode;
pub mod gguf;
pub mod model;
pub mod quant;
pub mod score;
pub mod spec;
pub mod tokenizer;
