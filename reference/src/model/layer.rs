//! One decoder layer: loading its tensors by their GGUF names and the block diagram of
//! `spec/gemma4-text.md` §8. Upstream: transformers `Gemma4TextDecoderLayer.forward`.

use super::attention::{Attention, KvProj};
use super::linear::Mat;
use super::mlp::Mlp;
use super::moe::{ExpertGateUp, Moe};
use super::norm::{rms_norm, rms_normed};
use super::ple::PleLayer;
use super::rope::{inv_freq, Pairing};
use super::{Faults, Float, ModelError, Segment};
use crate::config::{blk, Config};
use crate::decode::KvCache;
use crate::gguf::GgufFile;

/// Loads a small tensor (a norm weight, a scale) as a vector of `F`.
pub(crate) fn load_vec<F: Float>(file: &GgufFile, name: &str) -> Result<Vec<F>, ModelError> {
    Mat::load(file, name)?.view(file).to_vec()
}

/// Loads a norm weight; with the `norm_one_plus_w` fault it becomes `1 + w` (the Gemma-2/3 rule).
pub(crate) fn load_norm<F: Float>(
    file: &GgufFile,
    name: &str,
    faults: &Faults,
) -> Result<Vec<F>, ModelError> {
    let mut w = load_vec::<F>(file, name)?;
    if faults.norm_one_plus_w {
        for v in w.iter_mut() {
            *v += F::ONE;
        }
    }
    Ok(w)
}

/// The MoE branch of a layer with its two extra output norms (§6).
#[derive(Debug, Clone)]
pub struct MoeBranch<F> {
    /// Router and experts.
    pub moe: Moe<F>,
    /// `blk.N.post_ffw_norm_1.weight` `[H]`: on the dense-MLP output.
    pub post_ffw_norm_1: Vec<F>,
    /// `blk.N.post_ffw_norm_2.weight` `[H]`: on the expert mixture.
    pub post_ffw_norm_2: Vec<F>,
}

/// One decoder layer; field names are the GGUF tensor suffixes (`design/style.md` R4).
#[derive(Debug, Clone)]
pub struct Layer<F> {
    /// `blk.N.attn_norm.weight` `[H]` (`input_layernorm`).
    pub attn_norm: Vec<F>,
    /// Attention (§4).
    pub attn: Attention<F>,
    /// `blk.N.post_attention_norm.weight` `[H]`.
    pub post_attention_norm: Vec<F>,
    /// `blk.N.ffn_norm.weight` `[H]` (`pre_feedforward_layernorm`).
    pub ffn_norm: Vec<F>,
    /// Dense MLP (§5).
    pub mlp: Mlp,
    /// `blk.N.post_ffw_norm.weight` `[H]`.
    pub post_ffw_norm: Vec<F>,
    /// MoE branch (§6), when the model has one.
    pub moe: Option<MoeBranch<F>>,
    /// PLE branch (§7), when `P > 0`.
    pub ple: Option<PleLayer<F>>,
    /// `blk.N.layer_output_scale.weight` (`layer_scalar`), 1 when absent (§1.2).
    pub layer_output_scale: F,
}

impl<F: Float> Layer<F> {
    /// Loads layer `l` by its tensor names (§6); `kv_source` is the slot it attends to (the
    /// store layer for reuse layers, itself otherwise, or itself under the
    /// `reuse_layers_own_kv` fault, which then projects K/V with the store layer's weights).
    pub fn load(
        cfg: &Config,
        file: &GgufFile,
        l: usize,
        faults: &Faults,
    ) -> Result<Layer<F>, ModelError> {
        let norm = |s: &str| load_norm::<F>(file, &blk(l, s), faults);
        let mat = |s: &str| Mat::load(file, &blk(l, s));
        let d = cfg.head_dim(l);
        let sliding = cfg.is_swa[l];
        let own_kv = cfg.has_kv(l) || faults.reuse_layers_own_kv;
        let kv = if own_kv {
            // The store layer's weights: `l` itself unless this is a reuse layer under the fault.
            let s = cfg.kv_source[l];
            Some(KvProj {
                attn_k: Mat::load(file, &blk(s, "attn_k.weight"))?,
                attn_k_norm: load_norm(file, &blk(s, "attn_k_norm.weight"), faults)?,
                attn_v: if cfg.k_eq_v[s] {
                    None
                } else {
                    Some(Mat::load(file, &blk(s, "attn_v.weight"))?)
                },
            })
        } else {
            None
        };
        let (theta, pairs) = if sliding {
            (cfg.rope_base_swa, d / 2)
        } else {
            (cfg.rope_base_full, cfg.rope_pairs_full)
        };
        let pairing = if faults.rope_interleaved {
            Pairing::Interleaved
        } else if faults.proportional_rope_wrong_lanes && !sliding {
            Pairing::LeadingBlock(pairs)
        } else {
            Pairing::HalfSplit
        };
        let window = sliding.then_some(
            cfg.sliding_window
                .saturating_add(usize::from(faults.sliding_window_off_by_one)),
        );
        let attn = Attention {
            layer: l,
            n_head: cfg.n_head[l],
            n_kv: cfg.n_head_kv[l],
            head_dim: d,
            attn_q: mat("attn_q.weight")?,
            attn_q_norm: norm("attn_q_norm.weight")?,
            kv,
            attn_output: mat("attn_output.weight")?,
            kv_source: if faults.reuse_layers_own_kv {
                l
            } else {
                cfg.kv_source[l]
            },
            inv_freq: inv_freq(theta, d, pairs),
            pairing,
            window,
        };
        let moe = if cfg.moe {
            let (e_n, fx, h) = (cfg.n_expert, cfg.n_ff_exp, cfg.n_embd);
            let gate_up = if cfg.moe_fused_gate_up {
                let m = mat("ffn_gate_up_exps.weight")?;
                (0..e_n)
                    .map(|e| ExpertGateUp::Fused(m.sub_rows(e * 2 * fx, 2 * fx)))
                    .collect()
            } else {
                let (g, u) = (mat("ffn_gate_exps.weight")?, mat("ffn_up_exps.weight")?);
                (0..e_n)
                    .map(|e| ExpertGateUp::Split(g.sub_rows(e * fx, fx), u.sub_rows(e * fx, fx)))
                    .collect()
            };
            let down = mat("ffn_down_exps.weight")?;
            Some(MoeBranch {
                moe: Moe {
                    ffn_gate_inp: mat("ffn_gate_inp.weight")?,
                    ffn_gate_inp_scale: load_vec(file, &blk(l, "ffn_gate_inp.scale"))?,
                    ffn_down_exps_scale: load_vec(file, &blk(l, "ffn_down_exps.scale"))?,
                    pre_ffw_norm_2: norm("pre_ffw_norm_2.weight")?,
                    gate_up,
                    down: (0..e_n).map(|e| down.sub_rows(e * h, h)).collect(),
                    top_k: cfg.n_expert_used,
                },
                post_ffw_norm_1: norm("post_ffw_norm_1.weight")?,
                post_ffw_norm_2: norm("post_ffw_norm_2.weight")?,
            })
        } else {
            None
        };
        let ple = if cfg.n_embd_per_layer > 0 {
            Some(PleLayer {
                inp_gate: mat("inp_gate.weight")?,
                proj: mat("proj.weight")?,
                post_norm: norm("post_norm.weight")?,
            })
        } else {
            None
        };
        let scale_name = blk(l, "layer_output_scale.weight");
        let layer_output_scale = if file.tensor(&scale_name).is_ok() {
            load_vec::<F>(file, &scale_name)?
                .first()
                .copied()
                .unwrap_or(F::ONE)
        } else {
            F::ONE
        };
        Ok(Layer {
            attn_norm: norm("attn_norm.weight")?,
            attn,
            post_attention_norm: norm("post_attention_norm.weight")?,
            ffn_norm: norm("ffn_norm.weight")?,
            mlp: Mlp {
                ffn_gate: mat("ffn_gate.weight")?,
                ffn_up: mat("ffn_up.weight")?,
                ffn_down: mat("ffn_down.weight")?,
            },
            post_ffw_norm: norm("post_ffw_norm.weight")?,
            moe,
            ple,
            layer_output_scale,
        })
    }

    /// The layer on the residual stream `x` (`[T, H]`, in place), §8:
    /// 1–2. `x ← x + RMSNorm_{post_attention_norm}(attention(RMSNorm_{attn_norm}(x)))`;
    /// 3–6. `r = x`; `f = mlp(RMSNorm_{ffn_norm}(r))`; with MoE
    ///      `f = RMSNorm_{post_ffw_norm_1}(f) + RMSNorm_{post_ffw_norm_2}(moe(r))`;
    ///      `x ← r + RMSNorm_{post_ffw_norm}(f)`;
    /// 7. with PLE `x ← x + RMSNorm_{post_norm}((gelu(x·W_gateᵀ) ⊙ ple_l)·W_projᵀ)`;
    /// 8. `x ← x · layer_scalar`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        file: &GgufFile,
        x: &mut [F],
        segs: &[Segment],
        caches: &mut [&mut KvCache<F>],
        ple: Option<&[F]>,
        n_layer: usize,
        eps: F,
    ) -> Result<(), ModelError> {
        let h_n = self.attn_norm.len();
        let t = x.len() / h_n;
        let h = rms_normed(x, h_n, Some(&self.attn_norm), eps);
        let mut a = self.attn.forward(file, &h, segs, caches, eps)?;
        rms_norm(&mut a, h_n, Some(&self.post_attention_norm), eps);
        add_into(x, &a);

        let hf = rms_normed(x, h_n, Some(&self.ffn_norm), eps);
        let mut f = self.mlp.forward(file, &hf, t)?;
        if let Some(b) = &self.moe {
            rms_norm(&mut f, h_n, Some(&b.post_ffw_norm_1), eps);
            let mut m = b.moe.forward(file, x, t, eps)?;
            rms_norm(&mut m, h_n, Some(&b.post_ffw_norm_2), eps);
            add_into(&mut f, &m);
        }
        rms_norm(&mut f, h_n, Some(&self.post_ffw_norm), eps);
        add_into(x, &f);

        if let (Some(p), Some(ple)) = (&self.ple, ple) {
            p.forward(file, x, ple, self.attn.layer, n_layer, eps)?;
        }
        for v in x.iter_mut() {
            *v *= self.layer_output_scale;
        }
        Ok(())
    }
}

/// `x ← x + y` elementwise.
fn add_into<F: Float>(x: &mut [F], y: &[F]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
