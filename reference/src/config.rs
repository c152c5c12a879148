//! Gemma-4 configuration from GGUF metadata, the per-layer derived attributes and the tensor-name
//! map.
//!
//! Spec: `spec/gguf-gemma4.md` §5 (keys), §5.1 (config struct and consistency checks), §6 (tensor
//! names and shapes), §8 (assistant keys); `spec/gemma4-text.md` §1.2 (per-layer attributes, KV
//! sharing roles), §4.4 (proportional RoPE), §13.6 (suppressed tokens). Upstream: llama.cpp
//! `src/models/gemma4.cpp` `load_arch_hparams` / `load_arch_tensors`; transformers
//! `configuration_gemma4.py` (`Gemma4TextConfig.__post_init__`, `kv_sharing_modes`).
//!
//! Shapes in errors and in [`TensorSpec`] are GGUF dims (`ne` order, `dims[0]` = row length), as
//! `gguf-dump` prints them.

mod assistant;
mod keys;

pub use assistant::AssistantConfig;

use crate::gguf::{Array, GgufError, GgufFile, Value};
use keys::{check_arch, check_shape, has_tensor, Common, Keys};

/// Errors turning GGUF metadata into a [`Config`] / [`AssistantConfig`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required metadata key is absent.
    #[error("missing metadata key '{key}'")]
    MissingKey {
        /// The full key, e.g. `gemma4.block_count`.
        key: String,
    },
    /// A key holds a type the loader cannot use.
    #[error("metadata key '{key}' has type {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What was expected (e.g. `u32 or array of i32`).
        expected: String,
        /// What the file holds.
        found: String,
    },
    /// A per-layer array has the wrong length, or holds a value out of range.
    #[error("metadata key '{key}': {problem}")]
    BadValue {
        /// The key.
        key: String,
        /// What is wrong, with the values involved.
        problem: String,
    },
    /// `general.architecture` is not the expected one.
    #[error("general.architecture is '{found}', expected '{expected}'")]
    WrongArchitecture {
        /// What the file says.
        found: String,
        /// What the loader expects (`gemma4` or `gemma4-assistant`).
        expected: String,
    },
    /// `block_count` is larger than the number of layers the file's tensors name
    /// (`blk.{l}.*`, §6, §8.2): refused before any per-layer array or loop is sized by it.
    #[error(
        "metadata key '{key}' is {block_count}, but the file's {n_tensors} tensors name only \
         {layers_in_file} layers (blk.{{l}}.*; every layer has its own tensors)"
    )]
    LayerCount {
        /// The key, e.g. `gemma4.block_count`.
        key: String,
        /// The value in the file.
        block_count: usize,
        /// Distinct `l` among the tensor names `blk.{l}.*`.
        layers_in_file: usize,
        /// Tensors in the file.
        n_tensors: usize,
    },
    /// Two metadata values contradict each other (§5.1 consistency checks).
    #[error("inconsistent metadata: {0}")]
    Inconsistent(String),
    /// A required tensor is absent.
    #[error("missing tensor '{name}'")]
    MissingTensor {
        /// The GGUF tensor name.
        name: String,
    },
    /// A tensor's shape is not what the metadata implies.
    #[error("tensor '{tensor}' has shape {got:?}, expected {expected:?} (GGUF ne order)")]
    ShapeMismatch {
        /// The GGUF tensor name.
        tensor: String,
        /// The shape implied by the metadata.
        expected: Vec<u64>,
        /// The shape in the file.
        got: Vec<u64>,
    },
    /// A feature this oracle does not implement (named).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Any other GGUF-layer error (already names its key or tensor).
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// Attention kind of one layer (`layer_types[l]`, GGUF `sliding_window_pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// `sliding_attention`: causal and window `W` (query included), default RoPE, `head_dim_swa`.
    Sliding,
    /// `full_attention`: causal, proportional RoPE, `head_dim_full`.
    Full,
}

/// The Gemma-4 text configuration (`spec/gguf-gemma4.md` §5.1), with the per-layer attributes of
/// `spec/gemma4-text.md` §1.2 resolved. Field names follow the GGUF keys (prefix `gemma4.`).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `L`, `block_count`.
    pub n_layer: usize,
    /// `context_length`: the trained context in positions (no effect on the math; bounds the
    /// positions the verbs and the runtime accept). 0 only when the key is absent (a stored 0
    /// is refused).
    pub n_ctx_train: usize,
    /// `H`, `embedding_length`.
    pub n_embd: usize,
    /// `V`: rows of `token_embd.weight` (GGUF `ne1`).
    pub n_vocab: usize,
    /// `I_l` per layer (`feed_forward_length`, broadcast; 2·I on double-wide reuse layers).
    pub n_ff: Vec<usize>,
    /// `nh` per layer (`attention.head_count`, broadcast).
    pub n_head: Vec<usize>,
    /// `nkv_l` per layer (`attention.head_count_kv`, broadcast; default `n_head`).
    pub n_head_kv: Vec<usize>,
    /// Per layer: true = sliding (`attention.sliding_window_pattern`), length `L`.
    pub is_swa: Vec<bool>,
    /// Full-layer head dim (`attention.key_length` = `value_length`).
    pub head_dim_full: usize,
    /// Sliding-layer head dim (`attention.key_length_swa` = `value_length_swa`).
    pub head_dim_swa: usize,
    /// `rope.dimension_count` (must equal `head_dim_full`; partial rotation is in `rope_freqs`).
    pub n_rot_full: usize,
    /// `rope.dimension_count_swa` (must equal `head_dim_swa`).
    pub n_rot_swa: usize,
    /// Rotated frequency pairs of full layers (`n_rot` of §4.4): the leading 1.0 entries of
    /// `rope_freqs.weight` (the rest must be ≥ 1e29, i.e. inverse frequency 0 in transformers);
    /// `head_dim_full / 2` when the tensor is absent (llama.cpp then rotates every pair).
    pub rope_pairs_full: usize,
    /// θ of full layers (`rope.freq_base`), as the shortest decimal of the stored f32.
    pub rope_base_full: f64,
    /// θ of sliding layers (`rope.freq_base_swa`), as the shortest decimal of the stored f32.
    pub rope_base_swa: f64,
    /// RMSNorm epsilon (`attention.layer_norm_rms_epsilon`), as the shortest decimal of the stored
    /// f32 (the f32 9.99999997e-07 becomes the checkpoint's 1e-6).
    pub rms_eps: f64,
    /// `W`, `attention.sliding_window` (keys counted including the query, §4.6).
    pub sliding_window: usize,
    /// `attention.shared_kv_layers`: the last this-many layers reuse K/V (§4.8).
    pub n_kv_shared: usize,
    /// `P`, `embedding_length_per_layer_input` (0 = no PLE).
    pub n_embd_per_layer: usize,
    /// `E`, `expert_count` (0 = dense).
    pub n_expert: usize,
    /// `K`, `expert_used_count`.
    pub n_expert_used: usize,
    /// `Ie`, `expert_feed_forward_length`.
    pub n_ff_exp: usize,
    /// Final logit soft-cap `c` (`final_logit_softcapping`); `None` when the key is absent (the
    /// transformers reading, `spec/gguf-gemma4.md` §5 disagreement table).
    pub final_softcap: Option<f64>,
    /// Per layer: the full layer has no `attn_v` and takes V from the raw K projection
    /// (`attention_k_eq_v`, §4.2). Always false on sliding and reuse layers.
    pub k_eq_v: Vec<bool>,
    /// Per layer: the layer whose K/V it attends to — itself for layers `< F`, the store layer
    /// of its kind for reuse layers (§4.8, transformers rule).
    pub kv_source: Vec<usize>,
    /// Whether the layers carry the MoE block (`ffn_gate_inp` present; all layers or none).
    pub moe: bool,
    /// MoE experts stored as one fused `ffn_gate_up_exps` (true) or split gate/up (false).
    pub moe_fused_gate_up: bool,
    /// Suppressed token ids (`tokenizer.ggml.suppress_tokens`, restricted to `[0, V)`, sorted,
    /// deduplicated; empty when absent), §13.6.
    pub suppress_tokens: Vec<u32>,
}

/// One tensor the model reads: its GGUF name, expected GGUF dims and whether it must exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// GGUF tensor name, e.g. `blk.3.attn_q.weight`.
    pub name: String,
    /// Expected dims in GGUF `ne` order.
    pub dims: Vec<u64>,
}

/// GGUF name of a per-layer tensor: `blk.{layer}.{suffix}` (§6).
pub fn blk(layer: usize, suffix: &str) -> String {
    format!("blk.{layer}.{suffix}")
}

impl Config {
    /// Reads the configuration of a `gemma4` GGUF and checks every tensor shape the forward
    /// reads (§5, §5.1, §6).
    ///
    /// Errors: [`ConfigError::MissingKey`] naming the key, [`ConfigError::ShapeMismatch`] naming
    /// the tensor and both shapes, [`ConfigError::Inconsistent`] for contradicting keys.
    pub fn from_gguf(file: &GgufFile) -> Result<Config, ConfigError> {
        check_arch(file, "gemma4")?;
        let c = Common::read(file, "gemma4")?;
        let k = Keys {
            file,
            prefix: "gemma4",
        };
        let l_n = c.n_layer;
        if c.n_kv_shared >= l_n {
            return Err(ConfigError::Inconsistent(format!(
                "shared_kv_layers {} must be < block_count {l_n}",
                c.n_kv_shared
            )));
        }
        if c.is_swa[l_n - 1] {
            return Err(ConfigError::Inconsistent(format!(
                "the last layer ({}) is sliding; transformers forces it to full attention",
                l_n - 1
            )));
        }
        let first_reuse = l_n - c.n_kv_shared;
        let mut kv_source = Vec::with_capacity(l_n);
        for l in 0..l_n {
            if l < first_reuse {
                kv_source.push(l);
            } else {
                let src = (0..first_reuse).rev().find(|&j| c.is_swa[j] == c.is_swa[l]);
                let Some(src) = src else {
                    return Err(ConfigError::Inconsistent(format!(
                        "reuse layer {l} ({}) has no unshared layer of its kind before layer {first_reuse}",
                        if c.is_swa[l] { "sliding" } else { "full" }
                    )));
                };
                kv_source.push(src);
            }
        }
        for (l, &s) in kv_source.iter().enumerate().skip(first_reuse) {
            if c.n_head_kv[l] != c.n_head_kv[s] {
                return Err(ConfigError::Inconsistent(format!(
                    "reuse layer {l} has head_count_kv {} but its store layer {s} has {}",
                    c.n_head_kv[l], c.n_head_kv[s]
                )));
            }
        }
        let n_expert = k.usize_or("expert_count", 0)?;
        let n_expert_used = k.usize_or("expert_used_count", 0)?;
        let n_ff_exp = k.usize_or("expert_feed_forward_length", 0)?;
        if (n_expert == 0) != (n_expert_used == 0) || n_expert_used > n_expert {
            return Err(ConfigError::Inconsistent(format!(
                "expert_count {n_expert} / expert_used_count {n_expert_used}"
            )));
        }
        let n_embd_per_layer = k.usize_req("embedding_length_per_layer_input")?;
        let k_eq_v = (0..l_n)
            .map(|l| l < first_reuse && !c.is_swa[l] && !has_tensor(file, &blk(l, "attn_v.weight")))
            .collect();
        let moe_layers: Vec<bool> = (0..l_n)
            .map(|l| has_tensor(file, &blk(l, "ffn_gate_inp.weight")))
            .collect();
        let moe = moe_layers[0];
        if moe_layers.iter().any(|&m| m != moe) || moe != (n_expert > 0) {
            return Err(ConfigError::Unsupported(format!(
                "MoE on layers {:?} with expert_count {n_expert}: transformers has the MoE block on every layer or none",
                moe_layers.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| i).collect::<Vec<_>>()
            )));
        }
        let moe_fused_gate_up = moe && has_tensor(file, &blk(0, "ffn_gate_up_exps.weight"));
        let suppress_tokens = match file.get("tokenizer.ggml.suppress_tokens") {
            None => Vec::new(),
            Some(Value::Array(Array::I32(ids))) => {
                let mut s: Vec<u32> = ids
                    .iter()
                    .filter(|&&i| i >= 0 && (i as usize) < c.n_vocab)
                    .map(|&i| i as u32)
                    .collect();
                s.sort_unstable();
                s.dedup();
                s
            }
            Some(v) => {
                return Err(ConfigError::WrongType {
                    key: "tokenizer.ggml.suppress_tokens".into(),
                    expected: "array of i32".into(),
                    found: v.type_name(),
                })
            }
        };
        let cfg = Config {
            n_layer: l_n,
            n_ctx_train: c.n_ctx_train,
            n_embd: c.n_embd,
            n_vocab: c.n_vocab,
            n_ff: c.n_ff,
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            is_swa: c.is_swa,
            head_dim_full: c.head_dim_full,
            head_dim_swa: c.head_dim_swa,
            n_rot_full: c.n_rot_full,
            n_rot_swa: c.n_rot_swa,
            rope_pairs_full: c.rope_pairs_full,
            rope_base_full: c.rope_base_full,
            rope_base_swa: c.rope_base_swa,
            rms_eps: c.rms_eps,
            sliding_window: c.sliding_window,
            n_kv_shared: c.n_kv_shared,
            n_embd_per_layer,
            n_expert,
            n_expert_used,
            n_ff_exp,
            final_softcap: c.final_softcap,
            k_eq_v,
            kv_source,
            moe,
            moe_fused_gate_up,
            suppress_tokens,
        };
        for spec in cfg.tensor_specs() {
            check_shape(file, &spec.name, &spec.dims)?;
        }
        Ok(cfg)
    }

    /// Kind of layer `l`.
    pub fn kind(&self, l: usize) -> LayerKind {
        if self.is_swa[l] {
            LayerKind::Sliding
        } else {
            LayerKind::Full
        }
    }

    /// Head dim `d_l` of layer `l` (§1.2).
    pub fn head_dim(&self, l: usize) -> usize {
        if self.is_swa[l] {
            self.head_dim_swa
        } else {
            self.head_dim_full
        }
    }

    /// `F = L − n_kv_shared`: index of the first reuse layer (§4.8).
    pub fn first_reuse_layer(&self) -> usize {
        self.n_layer - self.n_kv_shared
    }

    /// Whether layer `l` computes its own K/V (`l < F`).
    pub fn has_kv(&self, l: usize) -> bool {
        l < self.first_reuse_layer()
    }

    /// Every tensor the forward reads, with its expected GGUF dims (§6). The tensor-name map:
    /// model code loads by exactly these names. Products of metadata values (`nh·d`, `P·L`,
    /// `2·Ie`) saturate at `u64::MAX`, which no tensor has (the reader refuses dims above
    /// `i64::MAX`), so an absurd key value gives a shape mismatch naming the tensor instead of
    /// an overflow.
    pub fn tensor_specs(&self) -> Vec<TensorSpec> {
        let e = self.n_embd as u64;
        let v = self.n_vocab as u64;
        let p = self.n_embd_per_layer as u64;
        let ln = self.n_layer as u64;
        let mut out = Vec::new();
        let mut add = |name: String, dims: Vec<u64>| out.push(TensorSpec { name, dims });
        add("token_embd.weight".into(), vec![e, v]);
        add("output_norm.weight".into(), vec![e]);
        if p > 0 {
            add(
                "per_layer_token_embd.weight".into(),
                vec![p.saturating_mul(ln), v],
            );
            add(
                "per_layer_model_proj.weight".into(),
                vec![e, p.saturating_mul(ln)],
            );
            add("per_layer_proj_norm.weight".into(), vec![p]);
        }
        for l in 0..self.n_layer {
            let hd = self.head_dim(l) as u64;
            let nh = self.n_head[l] as u64;
            let nkv = self.n_head_kv[l] as u64;
            let ff = self.n_ff[l] as u64;
            add(blk(l, "attn_norm.weight"), vec![e]);
            add(blk(l, "attn_q.weight"), vec![e, nh.saturating_mul(hd)]);
            add(blk(l, "attn_q_norm.weight"), vec![hd]);
            if self.has_kv(l) {
                add(blk(l, "attn_k.weight"), vec![e, nkv.saturating_mul(hd)]);
                add(blk(l, "attn_k_norm.weight"), vec![hd]);
                if !self.k_eq_v[l] {
                    add(blk(l, "attn_v.weight"), vec![e, nkv.saturating_mul(hd)]);
                }
            }
            add(blk(l, "attn_output.weight"), vec![nh.saturating_mul(hd), e]);
            add(blk(l, "post_attention_norm.weight"), vec![e]);
            add(blk(l, "ffn_norm.weight"), vec![e]);
            add(blk(l, "ffn_gate.weight"), vec![e, ff]);
            add(blk(l, "ffn_up.weight"), vec![e, ff]);
            add(blk(l, "ffn_down.weight"), vec![ff, e]);
            add(blk(l, "post_ffw_norm.weight"), vec![e]);
            if self.moe {
                let x = self.n_expert as u64;
                let fx = self.n_ff_exp as u64;
                add(blk(l, "ffn_gate_inp.weight"), vec![e, x]);
                add(blk(l, "ffn_gate_inp.scale"), vec![e]);
                add(blk(l, "ffn_down_exps.scale"), vec![x]);
                add(blk(l, "pre_ffw_norm_2.weight"), vec![e]);
                add(blk(l, "post_ffw_norm_1.weight"), vec![e]);
                add(blk(l, "post_ffw_norm_2.weight"), vec![e]);
                if self.moe_fused_gate_up {
                    add(
                        blk(l, "ffn_gate_up_exps.weight"),
                        vec![e, fx.saturating_mul(2), x],
                    );
                } else {
                    add(blk(l, "ffn_gate_exps.weight"), vec![e, fx, x]);
                    add(blk(l, "ffn_up_exps.weight"), vec![e, fx, x]);
                }
                add(blk(l, "ffn_down_exps.weight"), vec![fx, e, x]);
            }
            if p > 0 {
                add(blk(l, "inp_gate.weight"), vec![e, p]);
                add(blk(l, "proj.weight"), vec![p, e]);
                add(blk(l, "post_norm.weight"), vec![e]);
            }
        }
        out
    }
}
