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

use crate::gguf::{Array, GgufError, GgufFile, Value};

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
    /// `context_length` (informative; no effect on the math).
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

/// The shortest decimal that rounds to `x` (f32), read back as f64: recovers the checkpoint's
/// decimal (1e-6, 10000.0, 30.0) that the converter stored as f32.
fn f32_decimal(x: f32) -> f64 {
    format!("{x}").parse::<f64>().unwrap_or(x as f64)
}

/// Metadata reader for one architecture prefix (`gemma4.` or `gemma4-assistant.`).
struct Keys<'a> {
    file: &'a GgufFile,
    prefix: &'a str,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.prefix)
    }

    fn value(&self, k: &str) -> Option<(String, &Value)> {
        let key = self.key(k);
        self.file.get(&key).map(|v| (key, v))
    }

    fn int_of(key: &str, v: &Value) -> Result<usize, ConfigError> {
        let i = v.as_int().ok_or_else(|| ConfigError::WrongType {
            key: key.to_string(),
            expected: "integer".into(),
            found: v.type_name(),
        })?;
        usize::try_from(i).map_err(|_| ConfigError::BadValue {
            key: key.to_string(),
            problem: format!("value {i} is not a valid size"),
        })
    }

    fn usize_req(&self, k: &str) -> Result<usize, ConfigError> {
        match self.value(k) {
            Some((key, v)) => Self::int_of(&key, v),
            None => Err(ConfigError::MissingKey { key: self.key(k) }),
        }
    }

    fn usize_or(&self, k: &str, default: usize) -> Result<usize, ConfigError> {
        match self.value(k) {
            Some((key, v)) => Self::int_of(&key, v),
            None => Ok(default),
        }
    }

    fn f32_opt(&self, k: &str) -> Result<Option<f32>, ConfigError> {
        match self.value(k) {
            Some((_, Value::F32(x))) => Ok(Some(*x)),
            Some((key, v)) => Err(ConfigError::WrongType {
                key,
                expected: "f32".into(),
                found: v.type_name(),
            }),
            None => Ok(None),
        }
    }

    fn f32_req(&self, k: &str) -> Result<f32, ConfigError> {
        self.f32_opt(k)?
            .ok_or_else(|| ConfigError::MissingKey { key: self.key(k) })
    }

    /// A scalar broadcast to `n` layers, or an integer array of length `n` (`get_key_or_arr`).
    fn per_layer(
        &self,
        k: &str,
        n: usize,
        default: Option<usize>,
    ) -> Result<Vec<usize>, ConfigError> {
        let (key, v) = match self.value(k) {
            Some(kv) => kv,
            None => {
                return default
                    .map(|d| vec![d; n])
                    .ok_or_else(|| ConfigError::MissingKey { key: self.key(k) })
            }
        };
        let arr: Vec<i128> = match v {
            Value::Array(a) => match a {
                Array::U32(x) => x.iter().map(|&e| e.into()).collect(),
                Array::I32(x) => x.iter().map(|&e| e.into()).collect(),
                Array::U64(x) => x.iter().map(|&e| e.into()).collect(),
                Array::I64(x) => x.iter().map(|&e| e.into()).collect(),
                Array::Bool(x) => x.iter().map(|&e| e.into()).collect(),
                _ => {
                    return Err(ConfigError::WrongType {
                        key,
                        expected: "integer or integer array".into(),
                        found: v.type_name(),
                    })
                }
            },
            scalar => return Ok(vec![Self::int_of(&key, scalar)?; n]),
        };
        if arr.len() != n {
            return Err(ConfigError::BadValue {
                key,
                problem: format!("array has {} elements, block_count is {n}", arr.len()),
            });
        }
        arr.into_iter()
            .map(|i| {
                usize::try_from(i).map_err(|_| ConfigError::BadValue {
                    key: key.clone(),
                    problem: format!("element {i} is not a valid size"),
                })
            })
            .collect()
    }

    fn bool_array(&self, k: &str, n: usize) -> Result<Vec<bool>, ConfigError> {
        let (key, v) = self
            .value(k)
            .ok_or_else(|| ConfigError::MissingKey { key: self.key(k) })?;
        let out: Vec<bool> = match v.as_array() {
            Some(Array::Bool(x)) => x.clone(),
            Some(Array::U32(x)) => x.iter().map(|&e| e != 0).collect(),
            Some(Array::I32(x)) => x.iter().map(|&e| e != 0).collect(),
            _ => {
                return Err(ConfigError::WrongType {
                    key,
                    expected: "array of bool".into(),
                    found: v.type_name(),
                })
            }
        };
        if out.len() != n {
            return Err(ConfigError::BadValue {
                key,
                problem: format!("array has {} elements, block_count is {n}", out.len()),
            });
        }
        Ok(out)
    }
}

/// Architecture keys shared by the target and the assistant (§5, §8.1).
#[derive(Debug, Clone, PartialEq)]
struct Common {
    n_layer: usize,
    n_ctx_train: usize,
    n_embd: usize,
    n_vocab: usize,
    n_ff: Vec<usize>,
    n_head: Vec<usize>,
    n_head_kv: Vec<usize>,
    is_swa: Vec<bool>,
    head_dim_full: usize,
    head_dim_swa: usize,
    n_rot_full: usize,
    n_rot_swa: usize,
    rope_pairs_full: usize,
    rope_base_full: f64,
    rope_base_swa: f64,
    rms_eps: f64,
    sliding_window: usize,
    n_kv_shared: usize,
    final_softcap: Option<f64>,
}

fn check_arch(file: &GgufFile, expected: &str) -> Result<(), ConfigError> {
    let arch = file.get_str("general.architecture")?;
    if arch != expected {
        return Err(ConfigError::WrongArchitecture {
            found: arch.to_string(),
            expected: expected.to_string(),
        });
    }
    Ok(())
}

/// Checks that `name` exists with exactly `dims`.
fn check_shape(file: &GgufFile, name: &str, dims: &[u64]) -> Result<(), ConfigError> {
    let t = file.tensor(name).map_err(|_| ConfigError::MissingTensor {
        name: name.to_string(),
    })?;
    if t.dims != dims {
        return Err(ConfigError::ShapeMismatch {
            tensor: name.to_string(),
            expected: dims.to_vec(),
            got: t.dims.clone(),
        });
    }
    Ok(())
}

fn has_tensor(file: &GgufFile, name: &str) -> bool {
    file.tensor(name).is_ok()
}

/// Number of rotated pairs encoded by `rope_freqs.weight` (§4.4, `spec/gguf-gemma4.md` §6).
fn rope_pairs(file: &GgufFile, head_dim_full: usize) -> Result<usize, ConfigError> {
    let name = "rope_freqs.weight";
    let Ok(t) = file.tensor(name) else {
        return Ok(head_dim_full / 2);
    };
    let half = (head_dim_full / 2) as u64;
    check_shape(file, name, &[half])?;
    let mut vals = vec![0f64; half as usize];
    crate::quant::dequantize(t.ggml_type, file.tensor_data(t), &mut vals).map_err(|e| {
        ConfigError::Unsupported(format!("tensor '{name}' could not be decoded: {e}"))
    })?;
    let n = vals.iter().take_while(|&&f| f == 1.0).count();
    if let Some((i, f)) = vals.iter().enumerate().skip(n).find(|(_, &f)| f < 1e29) {
        return Err(ConfigError::Unsupported(format!(
            "'{name}'[{i}] = {f}: only 1.0 (rotated) followed by ≥ 1e29 (frozen) is supported"
        )));
    }
    Ok(n)
}

impl Common {
    fn read(file: &GgufFile, prefix: &str) -> Result<Common, ConfigError> {
        let k = Keys { file, prefix };
        let n_layer = k.usize_req("block_count")?;
        if n_layer == 0 {
            return Err(ConfigError::BadValue {
                key: k.key("block_count"),
                problem: "must be > 0".into(),
            });
        }
        let n_embd = k.usize_req("embedding_length")?;
        let embd = file
            .tensor("token_embd.weight")
            .map_err(|_| ConfigError::MissingTensor {
                name: "token_embd.weight".into(),
            })?;
        if embd.dims.len() != 2 || embd.dims[0] != n_embd as u64 {
            return Err(ConfigError::ShapeMismatch {
                tensor: "token_embd.weight".into(),
                expected: vec![n_embd as u64, embd.dims.get(1).copied().unwrap_or(0)],
                got: embd.dims.clone(),
            });
        }
        let n_vocab = embd.dims[1] as usize;
        let n_head = k.per_layer("attention.head_count", n_layer, None)?;
        let n_head_kv = k
            .per_layer("attention.head_count_kv", n_layer, None)
            .or_else(|e| match e {
                ConfigError::MissingKey { .. } => Ok(n_head.clone()),
                e => Err(e),
            })?;
        let head_dim_full = k.usize_req("attention.key_length")?;
        let v_full = k.usize_req("attention.value_length")?;
        let head_dim_swa = k.usize_req("attention.key_length_swa")?;
        let v_swa = k.usize_req("attention.value_length_swa")?;
        if head_dim_full != v_full || head_dim_swa != v_swa {
            return Err(ConfigError::Inconsistent(format!(
                "key_length {head_dim_full} / value_length {v_full}, key_length_swa {head_dim_swa} / value_length_swa {v_swa} must be equal"
            )));
        }
        let n_rot_full = k.usize_or("rope.dimension_count", head_dim_full)?;
        let n_rot_swa = k.usize_or("rope.dimension_count_swa", n_rot_full)?;
        if n_rot_full != head_dim_full || n_rot_swa != head_dim_swa {
            return Err(ConfigError::Unsupported(format!(
                "rope.dimension_count {n_rot_full} / _swa {n_rot_swa} differ from the head dims {head_dim_full} / {head_dim_swa} (Gemma-4 rotates full width, partial rotation only through rope_freqs)"
            )));
        }
        let is_swa = k.bool_array("attention.sliding_window_pattern", n_layer)?;
        for l in 0..n_layer {
            let nkv = n_head_kv[l];
            if nkv == 0 || n_head[l] == 0 || n_head[l] % nkv != 0 {
                return Err(ConfigError::Inconsistent(format!(
                    "layer {l}: head_count {} is not a positive multiple of head_count_kv {nkv}",
                    n_head[l]
                )));
            }
        }
        let rope_base_full = f32_decimal(k.f32_opt("rope.freq_base")?.unwrap_or(10000.0));
        let rope_base_swa = f32_decimal(k.f32_opt("rope.freq_base_swa")?.unwrap_or(10000.0));
        let rms_eps = f32_decimal(k.f32_req("attention.layer_norm_rms_epsilon")?);
        let sliding_window = k.usize_req("attention.sliding_window")?;
        if sliding_window == 0 {
            return Err(ConfigError::BadValue {
                key: k.key("attention.sliding_window"),
                problem: "must be > 0".into(),
            });
        }
        Ok(Common {
            n_layer,
            n_ctx_train: k.usize_or("context_length", 0)?,
            n_embd,
            n_vocab,
            n_ff: k.per_layer("feed_forward_length", n_layer, None)?,
            n_head,
            n_head_kv,
            is_swa,
            head_dim_full,
            head_dim_swa,
            n_rot_full,
            n_rot_swa,
            rope_pairs_full: rope_pairs(file, head_dim_full)?,
            rope_base_full,
            rope_base_swa,
            rms_eps,
            sliding_window,
            n_kv_shared: k.usize_or("attention.shared_kv_layers", 0)?,
            final_softcap: k.f32_opt("final_logit_softcapping")?.map(f32_decimal),
        })
    }
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
    /// model code loads by exactly these names.
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
            add("per_layer_token_embd.weight".into(), vec![p * ln, v]);
            add("per_layer_model_proj.weight".into(), vec![e, p * ln]);
            add("per_layer_proj_norm.weight".into(), vec![p]);
        }
        for l in 0..self.n_layer {
            let hd = self.head_dim(l) as u64;
            let nh = self.n_head[l] as u64;
            let nkv = self.n_head_kv[l] as u64;
            let ff = self.n_ff[l] as u64;
            add(blk(l, "attn_norm.weight"), vec![e]);
            add(blk(l, "attn_q.weight"), vec![e, nh * hd]);
            add(blk(l, "attn_q_norm.weight"), vec![hd]);
            if self.has_kv(l) {
                add(blk(l, "attn_k.weight"), vec![e, nkv * hd]);
                add(blk(l, "attn_k_norm.weight"), vec![hd]);
                if !self.k_eq_v[l] {
                    add(blk(l, "attn_v.weight"), vec![e, nkv * hd]);
                }
            }
            add(blk(l, "attn_output.weight"), vec![nh * hd, e]);
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
                    add(blk(l, "ffn_gate_up_exps.weight"), vec![e, 2 * fx, x]);
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

/// The Gemma-4 assistant (MTP drafter) configuration, `general.architecture =
/// "gemma4-assistant"` (`spec/gguf-gemma4.md` §8.1). Field meanings as in [`Config`]; keys are
/// read under the prefix `gemma4-assistant.`.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantConfig {
    /// Drafter layers (`block_count` = `nextn_predict_layers`).
    pub n_layer: usize,
    /// `context_length` (informative).
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
        check_shape(file, "nextn.pre_projection.weight", &[2 * b, e])?;
        check_shape(file, "nextn.post_projection.weight", &[e, b])?;
        let _ = v;
        for l in 0..cfg.n_layer {
            let hd = cfg.head_dim(l) as u64;
            let nh = cfg.n_head[l] as u64;
            let ff = cfg.n_ff[l] as u64;
            for (name, dims) in [
                (blk(l, "attn_norm.weight"), vec![e]),
                (blk(l, "attn_q.weight"), vec![e, nh * hd]),
                (blk(l, "attn_q_norm.weight"), vec![hd]),
                (blk(l, "attn_output.weight"), vec![nh * hd, e]),
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
