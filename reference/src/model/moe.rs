//! Mixture-of-experts block (`spec/gemma4-text.md` §6). Upstream: transformers
//! `Gemma4TextRouter`, `Gemma4TextExperts` (eager, router softmax in float64 per §10 patch 5);
//! llama.cpp `build_moe_ffn` as called from `src/models/gemma4.cpp`.

use super::linear::{linear, Mat};
use super::mlp::geglu;
use super::norm::rms_normed;
use super::{Float, ModelError};
use crate::gguf::GgufFile;

/// One expert's weights (row ranges of the 3-D expert tensors).
#[derive(Debug, Clone)]
pub enum ExpertGateUp {
    /// Rows `e·2Ie … (e+1)·2Ie − 1` of `ffn_gate_up_exps`: `[2·Ie, H]`, gate rows first.
    Fused(Mat),
    /// `ffn_gate_exps` and `ffn_up_exps` rows of expert `e`: `[Ie, H]` each.
    Split(Mat, Mat),
}

/// The MoE tensors of one layer.
#[derive(Debug, Clone)]
pub struct Moe<F> {
    /// `blk.N.ffn_gate_inp.weight` (router projection): `[E, H]`.
    pub ffn_gate_inp: Mat,
    /// `blk.N.ffn_gate_inp.scale` (router per-channel scale): `[H]`.
    pub ffn_gate_inp_scale: Vec<F>,
    /// `blk.N.ffn_down_exps.scale` (per-expert scale): `[E]`.
    pub ffn_down_exps_scale: Vec<F>,
    /// `blk.N.pre_ffw_norm_2.weight`: `[H]` (expert input norm).
    pub pre_ffw_norm_2: Vec<F>,
    /// Gate/up projection of each expert.
    pub gate_up: Vec<ExpertGateUp>,
    /// Down projection of each expert: rows `e·H … (e+1)·H − 1` of `ffn_down_exps`, `[H, Ie]`.
    pub down: Vec<Mat>,
    /// `K`, experts per token.
    pub top_k: usize,
}

/// Router result for one token: `K` (expert, weight) pairs in top-k order.
pub type Routing<F> = Vec<(usize, F)>;

impl<F: Float> Moe<F> {
    /// Router (§6): `z = rms(r) ⊙ scale · H^(-1/2)`, `prob = softmax(z · W_routerᵀ)` over all `E`,
    /// the `K` largest (ties → lower expert index first), renormalised to sum 1, then multiplied
    /// by `per_expert_scale`. `r` `[T, H]` → `T` routings.
    pub fn route(
        &self,
        file: &GgufFile,
        r: &[F],
        t: usize,
        eps: F,
    ) -> Result<Vec<Routing<F>>, ModelError> {
        let h = self.ffn_gate_inp_scale.len();
        let root = F::from_f64((h as f64).powf(-0.5));
        let mut z = rms_normed(r, h, None, eps);
        for row in z.chunks_exact_mut(h) {
            for (v, &s) in row.iter_mut().zip(&self.ffn_gate_inp_scale) {
                *v = *v * s * root;
            }
        }
        let logits = linear(&z, t, self.ffn_gate_inp.view(file))?;
        let e_n = self.ffn_gate_inp.rows;
        Ok(logits
            .chunks_exact(e_n)
            .map(|row| {
                let prob = softmax(row);
                let mut idx: Vec<usize> = (0..e_n).collect();
                idx.sort_by(|&a, &b| {
                    prob[b]
                        .partial_cmp(&prob[a])
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(a.cmp(&b))
                });
                idx.truncate(self.top_k);
                let sum: F = idx.iter().map(|&e| prob[e]).sum();
                idx.iter()
                    .map(|&e| (e, prob[e] / sum * self.ffn_down_exps_scale[e]))
                    .collect()
            })
            .collect())
    }

    /// Expert mixture (§6): `e_in = RMSNorm_{pre_ffw_norm_2}(r)`; for every token and selected
    /// expert `y_e = (gelu(g) ⊙ u) · W_down[e]ᵀ` with `[g | u] = e_in · W_gate_up[e]ᵀ`;
    /// `moe[t] = Σ_k w[t,k] · y_{e(t,k)}` summed in top-k order. `r` `[T, H]` → `[T, H]`.
    pub fn forward(
        &self,
        file: &GgufFile,
        r: &[F],
        t: usize,
        eps: F,
    ) -> Result<Vec<F>, ModelError> {
        let h = self.pre_ffw_norm_2.len();
        let routing = self.route(file, r, t, eps)?;
        let e_in = rms_normed(r, h, Some(&self.pre_ffw_norm_2), eps);
        // y[t][k]: output of the k-th selected expert of token t.
        let mut y = vec![vec![Vec::new(); self.top_k]; t];
        for e in 0..self.down.len() {
            let picks: Vec<(usize, usize)> = routing
                .iter()
                .enumerate()
                .flat_map(|(ti, rt)| {
                    rt.iter()
                        .enumerate()
                        .filter(|(_, (ex, _))| *ex == e)
                        .map(move |(k, _)| (ti, k))
                })
                .collect();
            if picks.is_empty() {
                continue;
            }
            let n = picks.len();
            let mut x = Vec::with_capacity(n * h);
            for &(ti, _) in &picks {
                x.extend_from_slice(&e_in[ti * h..(ti + 1) * h]);
            }
            let act = match &self.gate_up[e] {
                ExpertGateUp::Fused(m) => {
                    let gu = linear(&x, n, m.view(file))?;
                    let ie = m.rows / 2;
                    let mut g = Vec::with_capacity(n * ie);
                    let mut u = Vec::with_capacity(n * ie);
                    for row in gu.chunks_exact(2 * ie) {
                        g.extend_from_slice(&row[..ie]);
                        u.extend_from_slice(&row[ie..]);
                    }
                    geglu(&mut g, &u);
                    g
                }
                ExpertGateUp::Split(mg, mu) => {
                    let mut g = linear(&x, n, mg.view(file))?;
                    let u = linear(&x, n, mu.view(file))?;
                    geglu(&mut g, &u);
                    g
                }
            };
            let out = linear(&act, n, self.down[e].view(file))?;
            for (i, &(ti, k)) in picks.iter().enumerate() {
                y[ti][k] = out[i * h..(i + 1) * h].to_vec();
            }
        }
        let mut moe = vec![F::ZERO; t * h];
        for (ti, row) in moe.chunks_exact_mut(h).enumerate() {
            for (k, &(_, w)) in routing[ti].iter().enumerate() {
                for (o, &v) in row.iter_mut().zip(&y[ti][k]) {
                    *o += w * v;
                }
            }
        }
        Ok(moe)
    }
}

/// `softmax(x)_i = exp(x_i − max) / Σ_j exp(x_j − max)` (sum in index order).
pub fn softmax<F: Float>(x: &[F]) -> Vec<F> {
    let m = x
        .iter()
        .copied()
        .fold(x[0], |a, b| if b > a { b } else { a });
    let e: Vec<F> = x.iter().map(|&v| (v - m).exp()).collect();
    let mut s = F::ZERO;
    for &v in &e {
        s += v;
    }
    e.into_iter().map(|v| v / s).collect()
}
