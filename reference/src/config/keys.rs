//! Metadata and tensor-shape readers shared by [`super::Config`] and
//! [`super::AssistantConfig`]: typed key access under an architecture prefix (`spec/gguf-gemma4.md`
//! §5: scalar-or-per-layer-array keys, `get_key_or_arr` semantics), the keys common to target and
//! assistant (§5, §8.1), shape checks (§6) and `rope_freqs` decoding (§4.4 of
//! `spec/gemma4-text.md`).

use super::ConfigError;
use crate::gguf::{Array, GgufFile, Value};

/// The shortest decimal that rounds to `x` (f32), read back as f64: recovers the checkpoint's
/// decimal (1e-6, 10000.0, 30.0) that the converter stored as f32.
pub(super) fn f32_decimal(x: f32) -> f64 {
    format!("{x}").parse::<f64>().unwrap_or(x as f64)
}

/// Metadata reader for one architecture prefix (`gemma4.` or `gemma4-assistant.`).
pub(super) struct Keys<'a> {
    pub(super) file: &'a GgufFile,
    pub(super) prefix: &'a str,
}

impl Keys<'_> {
    pub(super) fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.prefix)
    }

    pub(super) fn value(&self, k: &str) -> Option<(String, &Value)> {
        let key = self.key(k);
        self.file.get(&key).map(|v| (key, v))
    }

    pub(super) fn int_of(key: &str, v: &Value) -> Result<usize, ConfigError> {
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

    pub(super) fn usize_req(&self, k: &str) -> Result<usize, ConfigError> {
        match self.value(k) {
            Some((key, v)) => Self::int_of(&key, v),
            None => Err(ConfigError::MissingKey { key: self.key(k) }),
        }
    }

    pub(super) fn usize_or(&self, k: &str, default: usize) -> Result<usize, ConfigError> {
        match self.value(k) {
            Some((key, v)) => Self::int_of(&key, v),
            None => Ok(default),
        }
    }

    pub(super) fn f32_opt(&self, k: &str) -> Result<Option<f32>, ConfigError> {
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

    pub(super) fn f32_req(&self, k: &str) -> Result<f32, ConfigError> {
        self.f32_opt(k)?
            .ok_or_else(|| ConfigError::MissingKey { key: self.key(k) })
    }

    /// `x` (the value of key `k`) when it is finite and positive (`zero_ok`: or zero), else
    /// [`ConfigError::BadValue`] naming the key: a NaN ε, a negative θ or a zero soft-cap would
    /// otherwise load and give NaN or meaningless logits.
    pub(super) fn positive(&self, k: &str, x: f32, zero_ok: bool) -> Result<f32, ConfigError> {
        if x.is_finite() && (x > 0.0 || (zero_ok && x == 0.0)) {
            return Ok(x);
        }
        Err(ConfigError::BadValue {
            key: self.key(k),
            problem: format!(
                "{x} is not a finite {} number",
                if zero_ok { "non-negative" } else { "positive" }
            ),
        })
    }

    /// A scalar broadcast to `n` layers, or an integer array of length `n` (`get_key_or_arr`).
    pub(super) fn per_layer(
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

    pub(super) fn bool_array(&self, k: &str, n: usize) -> Result<Vec<bool>, ConfigError> {
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
pub(super) struct Common {
    pub(super) n_layer: usize,
    pub(super) n_ctx_train: usize,
    pub(super) n_embd: usize,
    pub(super) n_vocab: usize,
    pub(super) n_ff: Vec<usize>,
    pub(super) n_head: Vec<usize>,
    pub(super) n_head_kv: Vec<usize>,
    pub(super) is_swa: Vec<bool>,
    pub(super) head_dim_full: usize,
    pub(super) head_dim_swa: usize,
    pub(super) n_rot_full: usize,
    pub(super) n_rot_swa: usize,
    pub(super) rope_pairs_full: usize,
    pub(super) rope_base_full: f64,
    pub(super) rope_base_swa: f64,
    pub(super) rms_eps: f64,
    pub(super) sliding_window: usize,
    pub(super) n_kv_shared: usize,
    pub(super) final_softcap: Option<f64>,
}

pub(super) fn check_arch(file: &GgufFile, expected: &str) -> Result<(), ConfigError> {
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
pub(super) fn check_shape(file: &GgufFile, name: &str, dims: &[u64]) -> Result<(), ConfigError> {
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

/// Bounds `block_count` (value `n`, key `key`) by the file before anything is sized by it: every
/// layer of a target (§6) and of an assistant (§8.2) has its own `blk.{l}.*` tensors, so `n`
/// cannot exceed the number of distinct layer indices `l` among the tensor names (itself at most
/// the tensor count, which the reader bounds by the file's bytes). The per-layer arrays and
/// loops of [`Common::read`] and the configs are `O(n)`, so a huge but well-formed value (a u32
/// of 2^31 − 1) is refused here instead of allocating gigabytes.
///
/// Errors: [`ConfigError::LayerCount`] naming the key, `n` and the layers found.
pub(super) fn check_block_count(file: &GgufFile, key: &str, n: usize) -> Result<(), ConfigError> {
    let mut layers: Vec<u64> = file
        .tensors()
        .iter()
        .filter_map(|t| t.name.strip_prefix("blk.")?.split_once('.')?.0.parse().ok())
        .collect();
    layers.sort_unstable();
    layers.dedup();
    if n > layers.len() {
        return Err(ConfigError::LayerCount {
            key: key.to_string(),
            block_count: n,
            layers_in_file: layers.len(),
            n_tensors: file.tensors().len(),
        });
    }
    Ok(())
}

pub(super) fn has_tensor(file: &GgufFile, name: &str) -> bool {
    file.tensor(name).is_ok()
}

/// Number of rotated pairs encoded by `rope_freqs.weight` (§4.4, `spec/gguf-gemma4.md` §6).
pub(super) fn rope_pairs(file: &GgufFile, head_dim_full: usize) -> Result<usize, ConfigError> {
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
    pub(super) fn read(file: &GgufFile, prefix: &str) -> Result<Common, ConfigError> {
        let k = Keys { file, prefix };
        let n_layer = k.usize_req("block_count")?;
        if n_layer == 0 {
            return Err(ConfigError::BadValue {
                key: k.key("block_count"),
                problem: "must be > 0".into(),
            });
        }
        check_block_count(file, &k.key("block_count"), n_layer)?;
        // Widths that multiply another header value in a tensor shape (`[H, nh·d]`, `[H, P·L]`)
        // must be > 0: a zero factor makes the tensor empty, so its shape would bound nothing.
        let positive = |key: &str| -> Result<usize, ConfigError> {
            match k.usize_req(key)? {
                0 => Err(ConfigError::BadValue {
                    key: k.key(key),
                    problem: "must be > 0".into(),
                }),
                n => Ok(n),
            }
        };
        let n_embd = positive("embedding_length")?;
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
        let head_dim_full = positive("attention.key_length")?;
        let v_full = k.usize_req("attention.value_length")?;
        let head_dim_swa = positive("attention.key_length_swa")?;
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
        let theta = |key: &str| -> Result<f64, ConfigError> {
            let x = k.f32_opt(key)?.unwrap_or(10000.0);
            Ok(f32_decimal(k.positive(key, x, false)?))
        };
        let rope_base_full = theta("rope.freq_base")?;
        let rope_base_swa = theta("rope.freq_base_swa")?;
        let eps_key = "attention.layer_norm_rms_epsilon";
        let rms_eps = f32_decimal(k.positive(eps_key, k.f32_req(eps_key)?, true)?);
        let sliding_window = k.usize_req("attention.sliding_window")?;
        if sliding_window == 0 {
            return Err(ConfigError::BadValue {
                key: k.key("attention.sliding_window"),
                problem: "must be > 0".into(),
            });
        }
        // The trained context bounds how many positions the verbs and the runtime accept; 0
        // stands for "not given" there (the key absent), so a stored 0 is refused instead of
        // silently lifting the bound.
        let n_ctx_train = match k.value("context_length") {
            None => 0,
            Some((key, v)) => match Keys::int_of(&key, v)? {
                0 => {
                    return Err(ConfigError::BadValue {
                        key,
                        problem: "must be ≥ 1 (the trained context in positions)".into(),
                    })
                }
                n => n,
            },
        };
        Ok(Common {
            n_layer,
            n_ctx_train,
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
            // absent = no cap (§9); a stored value must be a usable c (the converter writes the
            // key only for a truthy HF value, so 0 is never a real "off")
            final_softcap: k
                .f32_opt("final_logit_softcapping")?
                .map(|c| {
                    k.positive("final_logit_softcapping", c, false)
                        .map(f32_decimal)
                })
                .transpose()?,
        })
    }
}
