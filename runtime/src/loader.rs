//! GGUF → device: every weight matrix uploaded as its raw GGUF blocks (no dequantization, the
//! kernels decode on the fly), norm weights and small scales decoded to f32 on the host
//! (`reference::quant::dequantize_f32`, bit-identical to gguf-py) and uploaded as f32.
//!
//! Spec: `spec/gguf-gemma4.md` §5–§6 (keys, tensor names; read through
//! `reference::config::Config`), `spec/gemma4-text.md` §1.2 (per-layer attributes), §4.4
//! (RoPE tables), §4.8 (KV sharing), §6 (MoE tensors), §7 (PLE tensors).

use std::path::Path;

use cudarc::driver::CudaSlice;
use reference::config::{blk, Config};
use reference::gguf::GgufFile;
use reference::model::LoadOptions;
use reference::quant::GgmlType;

use crate::error::{drv, RuntimeError};
use crate::ops::{format_suffix, row_bytes};
use crate::Gpu;

/// A weight matrix `[rows, cols]` on the device in its GGUF block format (`cols` = GGUF `ne0`,
/// rows = product of the other dims; a 3-D expert tensor is `E` stacked matrices).
pub struct Mat {
    /// GGUF tensor name.
    pub name: String,
    /// Block format.
    pub ty: GgmlType,
    /// Kernel suffix of `ty` (`q4_k`, …).
    pub fmt: &'static str,
    /// Output rows (all experts together for a 3-D tensor).
    pub rows: usize,
    /// Row length `K`.
    pub cols: usize,
    /// Bytes of one row.
    pub row_bytes: usize,
    /// Raw blocks, `rows · row_bytes` bytes.
    pub data: CudaSlice<u8>,
}

/// The MoE tensors of one layer (§6).
pub struct MoeWeights {
    /// `ffn_gate_inp.weight` `[E, H]`.
    pub gate_inp: Mat,
    /// `ffn_gate_inp.scale · H^(−1/2)` `[H]` (f32; the router's per-channel scale and the
    /// `1/sqrt(H)` folded into one weight of the weightless router norm).
    pub router_w: CudaSlice<f32>,
    /// `ffn_down_exps.scale` `[E]`.
    pub down_scale: CudaSlice<f32>,
    /// `pre_ffw_norm_2.weight` `[H]`.
    pub pre_ffw_norm_2: CudaSlice<f32>,
    /// `post_ffw_norm_1.weight` `[H]`.
    pub post_ffw_norm_1: CudaSlice<f32>,
    /// `post_ffw_norm_2.weight` `[H]`.
    pub post_ffw_norm_2: CudaSlice<f32>,
    /// Fused `ffn_gate_up_exps` `[E·2Ie, H]` (gate rows first per expert), or split
    /// (`ffn_gate_exps`, `ffn_up_exps`), each `[E·Ie, H]`.
    pub gate_up: ExpertsGateUp,
    /// `ffn_down_exps` `[E·H, Ie]`.
    pub down: Mat,
    /// `E`.
    pub n_expert: usize,
    /// `K`.
    pub top_k: usize,
    /// `Ie`.
    pub ie: usize,
}

/// Gate/up expert tensors (§6).
pub enum ExpertsGateUp {
    /// `ffn_gate_up_exps`.
    Fused(Mat),
    /// `ffn_gate_exps`, `ffn_up_exps`.
    Split(Mat, Mat),
}

/// PLE tensors of one layer (§7).
pub struct PleLayerWeights {
    /// `inp_gate.weight` `[P, H]`.
    pub inp_gate: Mat,
    /// `proj.weight` `[H, P]`.
    pub proj: Mat,
    /// `post_norm.weight` `[H]`.
    pub post_norm: CudaSlice<f32>,
}

/// One decoder layer on the device (field names = GGUF suffixes).
pub struct LayerWeights {
    /// `attn_norm.weight` `[H]`.
    pub attn_norm: CudaSlice<f32>,
    /// `attn_q.weight` `[nh·d, H]`.
    pub attn_q: Mat,
    /// `attn_q_norm.weight` `[d]`.
    pub attn_q_norm: CudaSlice<f32>,
    /// Own K/V projections: (`attn_k`, `attn_k_norm`, `attn_v` unless k_eq_v); `None` on reuse
    /// layers (§4.8).
    pub kv: Option<(Mat, CudaSlice<f32>, Option<Mat>)>,
    /// `attn_output.weight` `[H, nh·d]`.
    pub attn_output: Mat,
    /// `post_attention_norm.weight`.
    pub post_attention_norm: CudaSlice<f32>,
    /// `ffn_norm.weight`.
    pub ffn_norm: CudaSlice<f32>,
    /// `ffn_gate`, `ffn_up` `[I_l, H]`, `ffn_down` `[H, I_l]`.
    pub ffn_gate: Mat,
    /// See `ffn_gate`.
    pub ffn_up: Mat,
    /// See `ffn_gate`.
    pub ffn_down: Mat,
    /// `post_ffw_norm.weight`.
    pub post_ffw_norm: CudaSlice<f32>,
    /// MoE branch.
    pub moe: Option<MoeWeights>,
    /// PLE branch.
    pub ple: Option<PleLayerWeights>,
    /// `layer_output_scale` (1 when absent).
    pub layer_scalar: f32,
    /// RoPE inverse frequencies `[d/2]` (f64; default or proportional, §4.4).
    pub inv_freq: CudaSlice<f64>,
    /// `nh`, `nkv`, `d` of this layer.
    pub n_head: usize,
    /// KV heads.
    pub n_kv: usize,
    /// Head dim.
    pub head_dim: usize,
    /// `I_l`.
    pub n_ff: usize,
    /// `Some(W)` on sliding layers.
    pub window: Option<usize>,
    /// Layer whose cache this layer attends to (itself unless a reuse layer).
    pub kv_source: usize,
}

/// Model-level PLE tensors (§7).
pub struct PleInputWeights {
    /// `per_layer_token_embd.weight` `[V, L·P]`.
    pub token_embd: Mat,
    /// `per_layer_model_proj.weight` `[L·P, H]`.
    pub model_proj: Mat,
    /// `per_layer_proj_norm.weight` `[P]`.
    pub proj_norm: CudaSlice<f32>,
}

/// A whole Gemma-4 text model on the device.
pub struct DeviceModel {
    /// Configuration from the GGUF metadata (the oracle's parser).
    pub config: Config,
    /// `token_embd.weight` `[V, H]` (input embedding and tied LM head).
    pub token_embd: Mat,
    /// `output_norm.weight` `[H]`.
    pub output_norm: CudaSlice<f32>,
    /// PLE inputs when `P > 0`.
    pub ple: Option<PleInputWeights>,
    /// Decoder layers.
    pub layers: Vec<LayerWeights>,
    /// Bytes of weights uploaded.
    pub weight_bytes: usize,
}

pub(crate) fn model_err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Model {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// Tensor `name` of `file` dequantized to f32 on the host (the f32 rounding of the exact
/// value, `reference::quant::dequantize_f32`), all elements in GGUF order.
///
/// Errors: [`RuntimeError::Model`] (no such tensor), [`RuntimeError::Quant`] (bad block data),
/// each naming the tensor.
pub(crate) fn tensor_f32(file: &GgufFile, name: &str) -> Result<Vec<f32>, RuntimeError> {
    let t = file.tensor(name).map_err(|e| model_err(name, e))?;
    let n = t.n_elements() as usize;
    let mut out = vec![0f32; n];
    reference::quant::dequantize_f32(t.ggml_type, file.tensor_data(t), &mut out).map_err(
        |source| RuntimeError::Quant {
            name: name.to_string(),
            source,
        },
    )?;
    Ok(out)
}

/// The per-layer output scalar of block `l` (`spec/gemma4-text.md` §1.2, `layer_scalar`): the first
/// element of `blk.{l}.layer_output_scale.weight`, or 1 when the file has no such tensor (or it
/// is empty). Used by the target loader ([`DeviceModel::load`]) and the drafter loader
/// (`draft::DeviceAssistant::load`).
///
/// Errors: the tensor exists but cannot be dequantized ([`tensor_f32`]).
pub fn layer_output_scale(file: &GgufFile, l: usize) -> Result<f32, RuntimeError> {
    let name = blk(l, "layer_output_scale.weight");
    if file.tensor(&name).is_err() {
        return Ok(1.0);
    }
    Ok(tensor_f32(file, &name)?.first().copied().unwrap_or(1.0))
}

/// The checks `opts` asks for before any weight of `file` is uploaded: every floating field of
/// every block of every tensor finite (`reference::quant::check_finite`, the oracle's own check;
/// conformance contract §9 "Non-finite values") unless `opts.allow_nonfinite`. CPU only.
///
/// Errors: [`RuntimeError::NonFiniteWeight`] naming the first non-finite field's tensor, block
/// and field.
pub fn check_weights(file: &GgufFile, opts: LoadOptions) -> Result<(), RuntimeError> {
    Ok(opts.check(file)?)
}

/// Checks, on the CPU and before anything is uploaded, that every tensor of `file` has a type
/// the loaders can take as they read it: a tensor of two or more dimensions is a matrix uploaded
/// as stored ([`Loader::mat`]), which needs a GPU kernel for its type ([`format_suffix`], the
/// loader's own check); a vector (one dimension: norms, scales) is decoded on the host
/// ([`tensor_f32`], decoded here too: they are small); the drafter's token ordering
/// ([`crate::draft::TOKEN_ORDERING_NAMES`], integers) is read by its own reader and skipped. A
/// tensor the loaders do not read is held to the same rule. `runtime::args` runs this before the
/// GPU is probed, so such a file is refused on any machine instead of when it is uploaded.
///
/// Errors: [`RuntimeError::UnsupportedType`] naming the matrix and its type,
/// [`RuntimeError::Quant`] naming the vector and why it does not decode.
pub fn check_types(file: &GgufFile) -> Result<(), RuntimeError> {
    for t in file.tensors() {
        if crate::draft::TOKEN_ORDERING_NAMES.contains(&t.name.as_str()) {
            continue;
        }
        if t.dims.len() >= 2 {
            format_suffix(t.ggml_type, &t.name)?;
        } else {
            tensor_f32(file, &t.name)?;
        }
    }
    Ok(())
}

/// Uploads tensors of one GGUF file, counting bytes (also used by the drafter loader).
pub(crate) struct Loader<'a> {
    pub(crate) gpu: &'a Gpu,
    pub(crate) file: &'a GgufFile,
    pub(crate) bytes: usize,
}

impl Loader<'_> {
    pub(crate) fn mat(&mut self, name: &str) -> Result<Mat, RuntimeError> {
        let t = self.file.tensor(name).map_err(|e| model_err(name, e))?;
        let cols = t.dims.first().copied().unwrap_or(1) as usize;
        let rows = t.dims.iter().skip(1).product::<u64>() as usize;
        let fmt = format_suffix(t.ggml_type, name)?;
        let rb = row_bytes(t.ggml_type, cols, name)?;
        let bytes = self.file.tensor_data(t);
        if bytes.len() != rows * rb {
            return Err(RuntimeError::Shape {
                what: name.to_string(),
                detail: format!("{} bytes for {rows} rows of {rb}", bytes.len()),
            });
        }
        let data = self
            .gpu
            .stream
            .clone_htod(bytes)
            .map_err(drv(format!("upload {name}")))?;
        self.bytes += bytes.len();
        Ok(Mat {
            name: name.to_string(),
            ty: t.ggml_type,
            fmt,
            rows,
            cols,
            row_bytes: rb,
            data,
        })
    }

    pub(crate) fn host_vec(&self, name: &str) -> Result<Vec<f32>, RuntimeError> {
        tensor_f32(self.file, name)
    }

    /// The `layer_scalar` of block `l` ([`layer_output_scale`]), for the target and the
    /// drafter alike.
    pub(crate) fn layer_scalar(&self, l: usize) -> Result<f32, RuntimeError> {
        layer_output_scale(self.file, l)
    }

    pub(crate) fn upload_f32(
        &mut self,
        name: &str,
        v: &[f32],
    ) -> Result<CudaSlice<f32>, RuntimeError> {
        self.bytes += v.len() * 4;
        self.gpu
            .stream
            .clone_htod(v)
            .map_err(drv(format!("upload {name}")))
    }

    pub(crate) fn vec(&mut self, name: &str) -> Result<CudaSlice<f32>, RuntimeError> {
        let v = self.host_vec(name)?;
        self.upload_f32(name, &v)
    }
}

impl DeviceModel {
    /// Opens `path` (all shards of a split model), parses the config, checks every weight for
    /// NaN/±Inf ([`check_weights`] with the default [`LoadOptions`]) and uploads every tensor
    /// the forward reads.
    ///
    /// Errors: [`RuntimeError::Model`] (unreadable file, bad metadata, missing tensor),
    /// [`RuntimeError::NonFiniteWeight`], [`RuntimeError::UnsupportedType`],
    /// [`RuntimeError::Shape`], [`RuntimeError::Driver`].
    pub fn load(gpu: &Gpu, path: &Path) -> Result<DeviceModel, RuntimeError> {
        Self::load_with(gpu, path, LoadOptions::default())
    }

    /// [`DeviceModel::load`] with `opts` (`allow_nonfinite` uploads a file with NaN/Inf
    /// weights, for forensic use).
    pub fn load_with(
        gpu: &Gpu,
        path: &Path,
        opts: LoadOptions,
    ) -> Result<DeviceModel, RuntimeError> {
        let p = path.display().to_string();
        let file = GgufFile::open(path).map_err(|e| model_err(&p, e))?;
        let config = Config::from_gguf(&file).map_err(|e| model_err(&p, e))?;
        Self::from_gguf_with(gpu, &file, config, opts)
    }

    /// [`DeviceModel::load`] from an opened file and its parsed config (default
    /// [`LoadOptions`]: the weights are checked before the upload).
    pub fn from_gguf(
        gpu: &Gpu,
        file: &GgufFile,
        config: Config,
    ) -> Result<DeviceModel, RuntimeError> {
        Self::from_gguf_with(gpu, file, config, LoadOptions::default())
    }

    /// [`DeviceModel::from_gguf`] with `opts`: [`check_weights`] before anything is uploaded.
    pub fn from_gguf_with(
        gpu: &Gpu,
        file: &GgufFile,
        config: Config,
        opts: LoadOptions,
    ) -> Result<DeviceModel, RuntimeError> {
        check_weights(file, opts)?;
        let mut ld = Loader {
            gpu,
            file,
            bytes: 0,
        };
        let cfg = &config;
        let h = cfg.n_embd;
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for l in 0..cfg.n_layer {
            let name = |s: &str| blk(l, s);
            let d = cfg.head_dim(l);
            check_head_dim(l, d)?;
            let sliding = cfg.is_swa[l];
            let kv = if cfg.has_kv(l) {
                let k = ld.mat(&name("attn_k.weight"))?;
                let kn = ld.vec(&name("attn_k_norm.weight"))?;
                let v = if cfg.k_eq_v[l] {
                    None
                } else {
                    Some(ld.mat(&name("attn_v.weight"))?)
                };
                Some((k, kn, v))
            } else {
                None
            };
            let (theta, pairs) = if sliding {
                (cfg.rope_base_swa, d / 2)
            } else {
                (cfg.rope_base_full, cfg.rope_pairs_full)
            };
            let inv: Vec<f64> = reference::model::rope::inv_freq::<f64>(theta, d, pairs);
            let inv_freq = gpu.stream.clone_htod(&inv).map_err(drv("upload rope"))?;
            let moe = if cfg.moe {
                let scale = ld.host_vec(&name("ffn_gate_inp.scale"))?;
                let root = (h as f64).powf(-0.5);
                let rw: Vec<f32> = scale.iter().map(|&s| (s as f64 * root) as f32).collect();
                let gate_up = if cfg.moe_fused_gate_up {
                    ExpertsGateUp::Fused(ld.mat(&name("ffn_gate_up_exps.weight"))?)
                } else {
                    ExpertsGateUp::Split(
                        ld.mat(&name("ffn_gate_exps.weight"))?,
                        ld.mat(&name("ffn_up_exps.weight"))?,
                    )
                };
                Some(MoeWeights {
                    gate_inp: ld.mat(&name("ffn_gate_inp.weight"))?,
                    router_w: ld.upload_f32("router scale", &rw)?,
                    down_scale: ld.vec(&name("ffn_down_exps.scale"))?,
                    pre_ffw_norm_2: ld.vec(&name("pre_ffw_norm_2.weight"))?,
                    post_ffw_norm_1: ld.vec(&name("post_ffw_norm_1.weight"))?,
                    post_ffw_norm_2: ld.vec(&name("post_ffw_norm_2.weight"))?,
                    gate_up,
                    down: ld.mat(&name("ffn_down_exps.weight"))?,
                    n_expert: cfg.n_expert,
                    top_k: cfg.n_expert_used,
                    ie: cfg.n_ff_exp,
                })
            } else {
                None
            };
            let ple = if cfg.n_embd_per_layer > 0 {
                Some(PleLayerWeights {
                    inp_gate: ld.mat(&name("inp_gate.weight"))?,
                    proj: ld.mat(&name("proj.weight"))?,
                    post_norm: ld.vec(&name("post_norm.weight"))?,
                })
            } else {
                None
            };
            let layer_scalar = ld.layer_scalar(l)?;
            layers.push(LayerWeights {
                attn_norm: ld.vec(&name("attn_norm.weight"))?,
                attn_q: ld.mat(&name("attn_q.weight"))?,
                attn_q_norm: ld.vec(&name("attn_q_norm.weight"))?,
                kv,
                attn_output: ld.mat(&name("attn_output.weight"))?,
                post_attention_norm: ld.vec(&name("post_attention_norm.weight"))?,
                ffn_norm: ld.vec(&name("ffn_norm.weight"))?,
                ffn_gate: ld.mat(&name("ffn_gate.weight"))?,
                ffn_up: ld.mat(&name("ffn_up.weight"))?,
                ffn_down: ld.mat(&name("ffn_down.weight"))?,
                post_ffw_norm: ld.vec(&name("post_ffw_norm.weight"))?,
                moe,
                ple,
                layer_scalar,
                inv_freq,
                n_head: cfg.n_head[l],
                n_kv: cfg.n_head_kv[l],
                head_dim: d,
                n_ff: cfg.n_ff[l],
                window: sliding.then_some(cfg.sliding_window),
                kv_source: cfg.kv_source[l],
            });
        }
        let ple = if cfg.n_embd_per_layer > 0 {
            Some(PleInputWeights {
                token_embd: ld.mat("per_layer_token_embd.weight")?,
                model_proj: ld.mat("per_layer_model_proj.weight")?,
                proj_norm: ld.vec("per_layer_proj_norm.weight")?,
            })
        } else {
            None
        };
        let token_embd = ld.mat("token_embd.weight")?;
        let output_norm = ld.vec("output_norm.weight")?;
        let weight_bytes = ld.bytes;
        Ok(DeviceModel {
            config,
            token_embd,
            output_norm,
            ple,
            layers,
            weight_bytes,
        })
    }
}

/// Checks that layer `l`'s `head_dim` `d` fits the attention kernels
/// ([`kernels::ATTENTION_MAX_HEAD_DIM`]). Errors: [`RuntimeError::Shape`] naming the layer.
pub(crate) fn check_head_dim(l: usize, d: usize) -> Result<(), RuntimeError> {
    if d > kernels::ATTENTION_MAX_HEAD_DIM {
        return Err(RuntimeError::Shape {
            what: format!("layer {l} attention"),
            detail: format!(
                "head_dim {d} > {} (the attention kernel's limit)",
                kernels::ATTENTION_MAX_HEAD_DIM
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference::gguf::GgufWriter;

    /// A GGUF holding only `blk.0.layer_output_scale.weight` (F32 `[1]` = 0.5, an exact binary
    /// value) and `blk.2.layer_output_scale.weight` (F16 `[1]` = 0x3A00 = 0.75 by the IEEE half
    /// layout: exponent 14, mantissa 0.5 → 2^-1 · 1.5).
    fn file() -> GgufFile {
        file_with_f16(0x3A00)
    }

    /// [`file`] with `bits` as the F16 element of `blk.2.layer_output_scale.weight`.
    fn file_with_f16(bits: u16) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_tensor(
            "blk.0.layer_output_scale.weight",
            &[1],
            GgmlType::F32,
            0.5f32.to_le_bytes().to_vec(),
        )
        .unwrap();
        w.add_tensor(
            "blk.2.layer_output_scale.weight",
            &[1],
            GgmlType::F16,
            bits.to_le_bytes().to_vec(),
        )
        .unwrap();
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn layer_output_scale_reads_the_tensor_or_defaults_to_one() {
        let f = file();
        assert_eq!(layer_output_scale(&f, 0).unwrap(), 0.5);
        assert_eq!(layer_output_scale(&f, 1).unwrap(), 1.0);
        assert_eq!(layer_output_scale(&f, 2).unwrap(), 0.75);
    }

    #[test]
    fn tensor_f32_names_a_missing_tensor() {
        match tensor_f32(&file(), "blk.9.attn_norm.weight") {
            Err(RuntimeError::Model { what, .. }) => assert_eq!(what, "blk.9.attn_norm.weight"),
            other => panic!("{other:?}"),
        }
    }

    /// The CUDA loader's check is the oracle's: a NaN in the F16 `blk.2.layer_output_scale`
    /// (element 0) is refused naming tensor, element and field; `allow_nonfinite` passes; the
    /// clean file passes.
    #[test]
    fn check_weights_refuses_nonfinite_unless_allowed() {
        assert!(check_weights(&file(), LoadOptions::default()).is_ok());
        // 0x7E00: exponent all ones, mantissa non-zero — a quiet NaN
        let bad = file_with_f16(0x7E00);
        match check_weights(&bad, LoadOptions::default()) {
            Err(RuntimeError::NonFiniteWeight(e)) => {
                assert_eq!(
                    (e.tensor.as_str(), e.element, e.field),
                    ("blk.2.layer_output_scale.weight", 0, "value")
                );
                assert_eq!(e.bits, 0x7E00);
            }
            other => panic!("{other:?}"),
        }
        let allow = LoadOptions::default().with_allow_nonfinite(true);
        assert!(check_weights(&bad, allow).is_ok());
    }

    #[test]
    fn head_dim_limit_of_the_attention_kernels() {
        // 512 is Gemma-4's widest head (full-attention layers); one more is refused, naming
        // the layer.
        assert!(check_head_dim(3, 512).is_ok());
        match check_head_dim(3, 513) {
            Err(RuntimeError::Shape { what, detail }) => {
                assert_eq!(what, "layer 3 attention");
                assert!(detail.contains("513"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
}
