//! Self-attention of one decoder layer (`spec/gemma4-text.md` §4): q/k/v projections, q/k norms
//! with weight and the weightless v norm, `attention_k_eq_v`, RoPE, scaling 1.0, GQA, causal and
//! sliding masks, KV sharing (store/reuse). Upstream: transformers `Gemma4TextAttention.forward`,
//! `eager_attention_forward` (softmax in float64, §10 patch 4), `masking_utils`
//! `causal_mask_function` / `sliding_window_overlay`; llama.cpp `src/models/gemma4.cpp`.

use rayon::prelude::*;

use super::linear::{dot, linear, Mat};
use super::norm::rms_norm;
use super::rope::{rope, Pairing};
use super::{Float, ModelError, Segment};
use crate::decode::{KvCache, SlotView};
use crate::gguf::GgufFile;

/// The K/V projections of a layer that computes its own K/V (layers `< F`, §4.2).
#[derive(Debug, Clone)]
pub struct KvProj<F> {
    /// `blk.N.attn_k.weight`: `[nkv_l·d_l, H]`.
    pub attn_k: Mat,
    /// `blk.N.attn_k_norm.weight`: `[d_l]`.
    pub attn_k_norm: Vec<F>,
    /// `blk.N.attn_v.weight`: `[nkv_l·d_l, H]`; `None` on `attention_k_eq_v` full layers (V is
    /// then the raw K projection, before `k_norm` and RoPE).
    pub attn_v: Option<Mat>,
}

/// Attention weights and per-layer attributes of one layer (§1.2, §4.1).
#[derive(Debug, Clone)]
pub struct Attention<F> {
    /// Layer index (the cache slot this layer writes when it has [`KvProj`]).
    pub layer: usize,
    /// `nh`, query heads.
    pub n_head: usize,
    /// `nkv_l`, KV heads.
    pub n_kv: usize,
    /// `d_l`, head dim.
    pub head_dim: usize,
    /// `blk.N.attn_q.weight`: `[nh·d_l, H]`.
    pub attn_q: Mat,
    /// `blk.N.attn_q_norm.weight`: `[d_l]`.
    pub attn_q_norm: Vec<F>,
    /// Own K/V projections; `None` on reuse layers (§4.8).
    pub kv: Option<KvProj<F>>,
    /// `blk.N.attn_output.weight`: `[H, nh·d_l]`.
    pub attn_output: Mat,
    /// Cache slot whose K/V this layer attends to (itself, or the store layer of its kind).
    pub kv_source: usize,
    /// RoPE inverse frequencies `[d_l/2]` (default or proportional, §4.4).
    pub inv_freq: Vec<F>,
    /// RoPE pairing (half-split; other values only for fault injection).
    pub pairing: Pairing,
    /// Keys visible to a query, the query included: `Some(W)` on sliding layers (§4.6).
    pub window: Option<usize>,
}

impl<F: Float> Attention<F> {
    /// Attention of layer `self.layer` for the rows of `h` (`[T, H]`, already
    /// `RMSNorm_{input_layernorm}`-ed), returning `attn_out` `[T, H]` (before
    /// `post_attention_norm`).
    ///
    /// `segs[s]` are the rows of sequence `s`, whose cache is `caches[s]`; a row at offset `i` of
    /// its segment has absolute position `segs[s].pos0 + i`. When the layer has own K/V, its
    /// post-norm post-RoPE `k` and post-norm `v` (`[T_s, nkv, d]`) are appended to the pending
    /// rows of slot `self.layer` of each cache (written into the slot, a ring on sliding layers,
    /// only when the whole forward ends: `crate::decode`); every row then attends to slot
    /// `self.kv_source` (§4.8), its cached rows and this forward's rows:
    /// `scores[u] = q·k[u, g(h)]` (no scaling), allowed keys `u ≤ p` and, on sliding layers,
    /// `p − u < W`; `o = Σ_u softmax(scores)_u · v[u, g(h)]`; `attn_out = concat_h(o) · W_oᵀ`.
    pub fn forward(
        &self,
        file: &GgufFile,
        h: &[F],
        segs: &[Segment],
        caches: &mut [&mut KvCache<F>],
        eps: F,
    ) -> Result<Vec<F>, ModelError> {
        let t_n: usize = segs.iter().map(|s| s.len).sum();
        let (nh, nkv, d) = (self.n_head, self.n_kv, self.head_dim);
        let pos: Vec<usize> = segs.iter().flat_map(|s| s.pos0..s.pos0 + s.len).collect();

        let mut q = linear(h, t_n, self.attn_q.view(file))?;
        rms_norm(&mut q, d, Some(&self.attn_q_norm), eps);
        rope(&mut q, nh, d, &pos, &self.inv_freq, self.pairing);

        if let Some(kv) = &self.kv {
            let kp = linear(h, t_n, kv.attn_k.view(file))?;
            let mut v = match &kv.attn_v {
                Some(m) => linear(h, t_n, m.view(file))?,
                None => kp.clone(),
            };
            let mut k = kp;
            rms_norm(&mut k, d, Some(&kv.attn_k_norm), eps);
            rope(&mut k, nkv, d, &pos, &self.inv_freq, self.pairing);
            rms_norm(&mut v, d, None, eps);
            let w = nkv * d;
            for (s, cache) in segs.iter().zip(caches.iter_mut()) {
                let rows = s.start * w..(s.start + s.len) * w;
                cache.append(self.layer, &k[rows.clone()], &v[rows]);
            }
        }

        // Row t of the output is computed by one task, heads and keys in a fixed order.
        let seg_of: Vec<usize> = segs
            .iter()
            .enumerate()
            .flat_map(|(i, s)| std::iter::repeat_n(i, s.len))
            .collect();
        let views: Vec<&KvCache<F>> = caches.iter().map(|c| &**c).collect();
        let mut out = vec![F::ZERO; t_n * nh * d];
        out.par_chunks_mut(nh * d).enumerate().for_each(|(t, row)| {
            let kv = views[seg_of[t]].view(self.kv_source);
            self.attend_row(&q[t * nh * d..(t + 1) * nh * d], &kv, pos[t], row);
        });
        linear(&out, t_n, self.attn_output.view(file))
    }
}

impl<F: Float> Attention<F> {
    /// Attention output of one query row at absolute position `p`: `q` `[nh, d]` (normed,
    /// rotated), `kv` the rows of the layer's slot (every position `lo ..= p` readable as
    /// `[nkv, d]`), `out` `[nh, d]` (zeroed). Visible keys `lo ..= p`, `lo = p + 1 − W` on sliding
    /// layers (clamped at 0); query head `h` reads KV head `h / (nh / nkv)`; `q·k` by [`dot`],
    /// softmax in key order, `o = Σ_u prob_u · v_u` in key order.
    fn attend_row(&self, q: &[F], kv: &SlotView<'_, F>, p: usize, out: &mut [F]) {
        let (nh, nkv, d) = (self.n_head, self.n_kv, self.head_dim);
        let group = nh / nkv;
        let lo = self.window.map_or(0, |w| (p + 1).saturating_sub(w));
        let mut scores = vec![F::ZERO; p + 1 - lo];
        for hh in 0..nh {
            let g = hh / group;
            let qh = &q[hh * d..(hh + 1) * d];
            let head = g * d..(g + 1) * d;
            for (i, u) in (lo..=p).enumerate() {
                scores[i] = dot(qh, &kv.k(u)[head.clone()]);
            }
            softmax_in_place(&mut scores);
            let o = &mut out[hh * d..(hh + 1) * d];
            for (i, u) in (lo..=p).enumerate() {
                for (oj, &vj) in o.iter_mut().zip(&kv.v(u)[head.clone()]) {
                    *oj += scores[i] * vj;
                }
            }
        }
    }
}

/// `x ← softmax(x)`: `exp(x_i − max) / Σ_j exp(x_j − max)`, sum in index order (§4.5).
pub fn softmax_in_place<F: Float>(x: &mut [F]) {
    let m = x
        .iter()
        .copied()
        .fold(x[0], |a, b| if b > a { b } else { a });
    let mut s = F::ZERO;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    for v in x.iter_mut() {
        *v = *v / s;
    }
}
