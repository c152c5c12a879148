//! Per-layer embeddings, PLE (`spec/gemma4-text.md` §7). Upstream: transformers
//! `Gemma4TextModel.get_per_layer_inputs` / `project_per_layer_inputs` and the PLE branch of
//! `Gemma4TextDecoderLayer.forward`; llama.cpp `src/models/gemma4.cpp` (`inp_per_layer`).

use super::embed::embed;
use super::linear::{linear, Mat};
use super::mlp::gelu;
use super::norm::rms_norm;
use super::{Float, ModelError};
use crate::gguf::GgufFile;

/// Model-level PLE tensors.
#[derive(Debug, Clone)]
pub struct PleInput<F> {
    /// `per_layer_token_embd.weight`: `[V, L·P]`.
    pub per_layer_token_embd: Mat,
    /// `per_layer_model_proj.weight`: `[L·P, H]`.
    pub per_layer_model_proj: Mat,
    /// `per_layer_proj_norm.weight`: `[P]`.
    pub per_layer_proj_norm: Vec<F>,
}

impl<F: Float> PleInput<F> {
    /// The per-layer inputs (§7), computed once before layer 0:
    /// `tok = E_ple[ids] · sqrt(P)`, `ctx = RMSNorm_{proj_norm}((x0 · W_projᵀ) · H^(-1/2))` per
    /// layer slice, `ple = (ctx + tok) · 2^(-1/2)`.
    /// `ids` `[T]`, `x0` `[T, H]` (scaled embeddings); returns `[T, L, P]` (layer-major inside a
    /// token: layer `l` = columns `l·P … (l+1)·P − 1`).
    pub fn forward(
        &self,
        file: &GgufFile,
        ids: &[u32],
        x0: &[F],
        p: usize,
        h: usize,
        eps: F,
    ) -> Result<Vec<F>, ModelError> {
        let t = ids.len();
        let tok = embed(
            self.per_layer_token_embd.view(file),
            ids,
            F::from_usize(p).sqrt(),
        )?;
        let mut ctx = linear(x0, t, self.per_layer_model_proj.view(file))?;
        let proj_scale = F::from_f64((h as f64).powf(-0.5));
        for v in ctx.iter_mut() {
            *v *= proj_scale;
        }
        rms_norm(&mut ctx, p, Some(&self.per_layer_proj_norm), eps);
        let combine = F::from_f64(0.5f64.sqrt());
        for (c, &e) in ctx.iter_mut().zip(&tok) {
            *c = (*c + e) * combine;
        }
        Ok(ctx)
    }
}

/// Per-layer PLE tensors of one decoder layer.
#[derive(Debug, Clone)]
pub struct PleLayer<F> {
    /// `blk.N.inp_gate.weight`: `[P, H]`.
    pub inp_gate: Mat,
    /// `blk.N.proj.weight`: `[H, P]`.
    pub proj: Mat,
    /// `blk.N.post_norm.weight`: `[H]`.
    pub post_norm: Vec<F>,
}

impl<F: Float> PleLayer<F> {
    /// §8 step 7, in place on the residual stream `x` `[T, H]`:
    /// `x ← x + RMSNorm_{post_norm}((gelu(x·W_gateᵀ) ⊙ ple_l) · W_projᵀ)`.
    /// `ple` `[T, L, P]` from [`PleInput::forward`]; `layer` selects the slice `ple[:, layer, :]`.
    pub fn forward(
        &self,
        file: &GgufFile,
        x: &mut [F],
        ple: &[F],
        layer: usize,
        n_layer: usize,
        eps: F,
    ) -> Result<(), ModelError> {
        let p = self.inp_gate.rows;
        let h = self.proj.rows;
        let t = x.len() / h;
        let mut g = linear(x, t, self.inp_gate.view(file))?;
        for (ti, row) in g.chunks_exact_mut(p).enumerate() {
            let base = (ti * n_layer + layer) * p;
            for (j, v) in row.iter_mut().enumerate() {
                *v = gelu(*v) * ple[base + j];
            }
        }
        let mut y = linear(&g, t, self.proj.view(file))?;
        rms_norm(&mut y, h, Some(&self.post_norm), eps);
        for (a, b) in x.iter_mut().zip(&y) {
            *a += *b;
        }
        Ok(())
    }
}
