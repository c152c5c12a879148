//! The Gemma-4 assistant (MTP drafter) configuration (`spec/gguf-gemma4.md` §8.1 keys, §8.2
//! tensors), read under the prefix `gemma4-assistant.`, and its structural pairing check
//! against a target.

use super::keys::{check_arch, check_shape, Common, Keys};
use super::{blk, Config, ConfigError};
use crate::gguf::{GgufFile, Value};

/// The Gemma-4 assistant (MTP drafter) configuration, `general.architecture =
/// "gemma4-assistant"` (`spec/gguf-gemma4.md` §8.1). Field meanings as in [`Config`]; keys are
/// read under the prefix `gemma4-assistant.`.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantConfig {
    /// Drafter layers (`block_count` = `nextn_predict_layers`).
    pub n_layer: usize,
    /// `context_length` (informative); 0 only when the key is absent (a stored 0 is refused).
    pub n_ctx_train: usize,
    /// Drafter width `E` (`embedding_length`).
    pub n_embd: usize,
    /// Target (backbone) width `B` (`embedding_length_out`).
    pub n_embd_out: usize,
    /// `V`: rows of the drafter's `token_embd.weight`.
    pub n_vocab: usize,
    /// MLP width per layer.
    pub n_ff: Vec<usize>,
    /// Query heads per layer.
    pub n_head: Vec<usize>,
    /// KV heads per layer (of the target layers it reads).
    pub n_head_kv: Vec<usize>,
    /// Per layer: true = sliding.
    pub is_swa: Vec<bool>,
    /// Full-layer head dim.
    pub head_dim_full: usize,
    /// Sliding-layer head dim.
    pub head_dim_swa: usize,
    /// Rotated pairs of full layers (from `rope_freqs.weight`, as in [`Config`]).
    pub rope_pairs_full: usize,
    /// θ of full layers.
    pub rope_base_full: f64,
    /// θ of sliding layers.
    pub rope_base_swa: f64,
    /// RMSNorm epsilon (shortest decimal of the stored f32).
    pub rms_eps: f64,
    /// Sliding window `W`.
    pub sliding_window: usize,
    /// `shared_kv_layers` (= `n_layer`: every drafter layer reads target K/V).
    pub n_kv_shared: usize,
    /// `final_logit_softcapping` if written (the drafter graph applies none, §8.1).
    pub final_softcap: Option<f64>,
    /// Project extension `use_ordered_embeddings` (centroid head), default false.
    pub use_ordered_embeddings: bool,
    /// Project extension `num_centroids`, if present.
    pub num_centroids: Option<usize>,
    /// Project extension `centroid_intermediate_top_k`, if present.
    pub centroid_intermediate_top_k: Option<usize>,
}

impl AssistantConfig {
    /// Reads a `gemma4-assistant` GGUF (§8.1) and checks the required tensor shapes (§8.2).
    ///
    /// Errors as [`Config::from_gguf`]; additionally `embedding_length_out` must differ from
    /// `embedding_length` (llama.cpp's rule) and `nextn_predict_layers`, if present, must equal
    /// `block_count`.
    pub fn from_gguf(file: &GgufFile) -> Result<AssistantConfig, ConfigError> {
        const P: &str = "gemma4-assistant";
        check_arch(file, P)?;
        let c = Common::read(file, P)?;
        let k = Keys { file, prefix: P };
        let n_embd_out = k.usize_req("embedding_length_out")?;
        if n_embd_out == c.n_embd {
            return Err(ConfigError::Inconsistent(format!(
                "{P}.embedding_length_out ({n_embd_out}) must carry the target width, not the drafter width {}",
                c.n_embd
            )));
        }
        let nextn = k.usize_or("nextn_predict_layers", c.n_layer)?;
        if nextn != c.n_layer {
            return Err(ConfigError::Inconsistent(format!(
                "{P}.nextn_predict_layers {nextn} != block_count {}",
                c.n_layer
            )));
        }
        let flag = |key: &str| -> Result<bool, ConfigError> {
            match k.value(key) {
                None => Ok(false),
                Some((_, Value::Bool(b))) => Ok(*b),
                Some((key, v)) => Err(ConfigError::WrongType {
                    key,
                    expected: "bool".into(),
                    found: v.type_name(),
                }),
            }
        };
        let opt = |key: &str| -> Result<Option<usize>, ConfigError> {
            match k.value(key) {
                None => Ok(None),
                Some((key, v)) => Keys::int_of(&key, v).map(Some),
            }
        };
        let cfg = AssistantConfig {
            n_layer: c.n_layer,
            n_ctx_train: c.n_ctx_train,
            n_embd: c.n_embd,
            n_embd_out,
            n_vocab: c.n_vocab,
            n_ff: c.n_ff,
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            is_swa: c.is_swa,
            head_dim_full: c.head_dim_full,
            head_dim_swa: c.head_dim_swa,
            rope_pairs_full: c.rope_pairs_full,
            rope_base_full: c.rope_base_full,
            rope_base_swa: c.rope_base_swa,
            rms_eps: c.rms_eps,
            sliding_window: c.sliding_window,
            n_kv_shared: c.n_kv_shared,
            final_softcap: c.final_softcap,
            use_ordered_embeddings: flag("use_ordered_embeddings")?,
            num_centroids: opt("num_centroids")?,
            centroid_intermediate_top_k: opt("centroid_intermediate_top_k")?,
        };
        let (e, b, v) = (cfg.n_embd as u64, n_embd_out as u64, cfg.n_vocab as u64);
        check_shape(file, "output_norm.weight", &[e])?;
        check_shape(
            file,
            "nextn.pre_projection.weight",
            &[b.saturating_mul(2), e],
        )?;
        check_shape(file, "nextn.post_projection.weight", &[e, b])?;
        let _ = v;
        for l in 0..cfg.n_layer {
            let hd = cfg.head_dim(l) as u64;
            let nh = cfg.n_head[l] as u64;
            let ff = cfg.n_ff[l] as u64;
            for (name, dims) in [
                (blk(l, "attn_norm.weight"), vec![e]),
                (blk(l, "attn_q.weight"), vec![e, nh.saturating_mul(hd)]),
                (blk(l, "attn_q_norm.weight"), vec![hd]),
                (blk(l, "attn_output.weight"), vec![nh.saturating_mul(hd), e]),
                (blk(l, "post_attention_norm.weight"), vec![e]),
                (blk(l, "ffn_norm.weight"), vec![e]),
                (blk(l, "ffn_gate.weight"), vec![e, ff]),
                (blk(l, "ffn_up.weight"), vec![e, ff]),
                (blk(l, "ffn_down.weight"), vec![ff, e]),
                (blk(l, "post_ffw_norm.weight"), vec![e]),
                (blk(l, "layer_output_scale.weight"), vec![1]),
            ] {
                check_shape(file, &name, &dims)?;
            }
        }
        Ok(cfg)
    }

    /// Head dim of drafter layer `l`.
    pub fn head_dim(&self, l: usize) -> usize {
        if self.is_swa[l] {
            self.head_dim_swa
        } else {
            self.head_dim_full
        }
    }

    /// Structural pairing check against a target (§8.1 "Pairing"): backbone width, vocabulary
    /// size, head dims and KV heads of the target store layers it reads.
    pub fn check_pairing(&self, target: &Config) -> Result<(), ConfigError> {
        let mismatch = |what: &str, a: usize, t: usize| {
            ConfigError::Inconsistent(format!("assistant {what} {a} != target {what} {t}"))
        };
        if self.n_embd_out != target.n_embd {
            return Err(mismatch(
                "embedding_length_out / embedding_length",
                self.n_embd_out,
                target.n_embd,
            ));
        }
        if self.n_vocab != target.n_vocab {
            return Err(mismatch("vocabulary size", self.n_vocab, target.n_vocab));
        }
        if self.head_dim_full != target.head_dim_full {
            return Err(mismatch(
                "key_length",
                self.head_dim_full,
                target.head_dim_full,
            ));
        }
        if self.head_dim_swa != target.head_dim_swa {
            return Err(mismatch(
                "key_length_swa",
                self.head_dim_swa,
                target.head_dim_swa,
            ));
        }
        let first_reuse = target.first_reuse_layer();
        for l in 0..self.n_layer {
            let src = (0..first_reuse)
                .rev()
                .find(|&j| target.is_swa[j] == self.is_swa[l]);
            let Some(src) = src else {
                return Err(ConfigError::Inconsistent(format!(
                    "assistant layer {l} needs a target layer of its kind before layer {first_reuse}"
                )));
            };
            if target.n_head_kv[src] != self.n_head_kv[l] {
                return Err(mismatch(
                    "head_count_kv",
                    self.n_head_kv[l],
                    target.n_head_kv[src],
                ));
            }
        }
        Ok(())
    }
}
