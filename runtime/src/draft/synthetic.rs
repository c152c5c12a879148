//! A drafter of chosen shapes with random valid weight blocks, for the 12B-shaped benchmark
//! (`runtime bench`); see [`super::DeviceAssistant`]. Tensors and shapes as
//! `spec/gemma4-assistant-mtp.md` §1.2 (centroid head §3.1), pairing as §1.1 and §8; the
//! weights follow `crate::bench::synthetic` (random blocks of `crate::check::random_blocks`,
//! norm gains 1, `layer_scalar` 1).

use reference::config::Config;
use reference::spec::StoreLayers;

use super::{pairing, CentroidHead, DeviceAssistant, DraftHead, DraftLayer, DraftWeights};
use crate::bench::{ones, AssistantShape, Gen, WeightMix};
use crate::error::{drv, RuntimeError};
use crate::Gpu;

impl DeviceAssistant {
    /// A drafter of `shape` paired with `target` ([`AssistantShape::config`]), every weight
    /// matrix random valid blocks in the format `mix` gives its name (`attn_q`, `attn_output`,
    /// `ffn_gate`, `ffn_up`, `ffn_down`, `token_embd` = `E_A` `[V, H_A]`,
    /// `nextn.pre_projection` `[H_A, 2·H_T]`, `nextn.post_projection` `[H_T, H_A]`,
    /// `masked_embd_centroids` `[C, H_A]`), norm gains 1, `layer_scalar` 1. With a centroid
    /// head the ordering is a random permutation of `0 … V−1` (seeded); the head in use starts
    /// as [`DraftHead::Full`]. Same seed, same weights. The result drafts over any cache of a
    /// model with `target`'s configuration (e.g. `crate::bench::synthetic`).
    ///
    /// Errors: shape errors of [`AssistantShape::config`], pairing mismatch, a dimension that
    /// is not a whole number of blocks of its format, unsupported format, driver errors.
    pub fn synthetic(
        gpu: &Gpu,
        target: &Config,
        shape: &AssistantShape,
        mix: WeightMix,
        seed: u64,
    ) -> Result<DeviceAssistant, RuntimeError> {
        let config = shape.config(target)?;
        config
            .check_pairing(target)
            .map_err(|e| pairing(e.to_string()))?;
        let store = StoreLayers::of(target);
        let mut g = Gen::new(mix, seed);
        let (ht, ha, v) = (config.n_embd_out, config.n_embd, config.n_vocab);
        let mut layers = Vec::with_capacity(config.n_layer);
        for l in 0..config.n_layer {
            let sliding = config.is_swa[l];
            let d = config.head_dim(l);
            let (nh, nkv, ff) = (config.n_head[l], config.n_head_kv[l], config.n_ff[l]);
            let (theta, pairs) = if sliding {
                (config.rope_base_swa, d / 2)
            } else {
                (config.rope_base_full, config.rope_pairs_full)
            };
            let inv: Vec<f64> = reference::model::rope::inv_freq::<f64>(theta, d, pairs);
            layers.push(DraftLayer {
                sliding,
                n_head: nh,
                n_kv: nkv,
                head_dim: d,
                n_ff: ff,
                attn_norm: ones(gpu, ha)?,
                attn_q: g.mat(gpu, "attn_q", nh * d, ha)?,
                attn_q_norm: ones(gpu, d)?,
                attn_output: g.mat(gpu, "attn_output", ha, nh * d)?,
                post_attention_norm: ones(gpu, ha)?,
                ffn_norm: ones(gpu, ha)?,
                ffn_gate: g.mat(gpu, "ffn_gate", ff, ha)?,
                ffn_up: g.mat(gpu, "ffn_up", ff, ha)?,
                ffn_down: g.mat(gpu, "ffn_down", ha, ff)?,
                post_ffw_norm: ones(gpu, ha)?,
                layer_scalar: 1.0,
                inv_freq: gpu.stream.clone_htod(&inv).map_err(drv("upload rope"))?,
            });
        }
        let token_embd = g.mat(gpu, "token_embd", v, ha)?;
        let pre_projection = g.mat(gpu, "nextn.pre_projection", ha, 2 * ht)?;
        let post_projection = g.mat(gpu, "nextn.post_projection", ht, ha)?;
        let centroid = match (config.num_centroids, config.centroid_intermediate_top_k) {
            (Some(c), Some(top_k)) => {
                let centroids = g.mat(gpu, "masked_embd_centroids", c, ha)?;
                let rng = g.rng();
                let mut ordering: Vec<u32> = (0..v as u32).collect();
                for i in (1..v).rev() {
                    let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                    ordering.swap(i, j);
                }
                Some(CentroidHead {
                    centroids,
                    ordering,
                    top_k,
                })
            }
            _ => None,
        };
        let weights = DraftWeights {
            layers,
            token_embd,
            pre_projection,
            post_projection,
            output_norm: ones(gpu, ha)?,
            centroid,
            weight_bytes: g.bytes(),
        };
        Self::assemble(
            gpu,
            config,
            store,
            target.sliding_window,
            DraftHead::Full,
            weights,
        )
    }
}
