//! The Gemma-4 text forward pass, written once over [`Float`] (`f64` = the oracle, `f32` = the
//! cheap engine): `spec/gemma4-text.md` §2–§9 and §13 (the 12B is this decoder with PLE and MoE
//! off). Upstream: transformers 5.23.0 `models/gemma4/modeling_gemma4.py` run in float64 with
//! the §10 patches; llama.cpp `src/models/gemma4.cpp`.
//!
//! One file per op family: [`embed`] (§2), [`norm`] (§3), [`rope`] (§4.4), [`attention`] (§4),
//! [`mlp`] (§5), [`moe`] (§6), [`ple`] (§7), [`layer`] (§8), [`logits`] (§9); [`linear`] holds the
//! weight views and the tiled, deterministic matrix product. Weights stay in the mmapped GGUF
//! and are dequantized per tile of rows on every use (memory ≈ file + KV cache + buffers); only
//! vectors (norm weights, scales) are decoded at load.
//!
//! Notation (R2): `T` rows of one forward (all sequences of a batch concatenated), `H` hidden,
//! `L` layers, `nh`/`nkv_l` heads, `d_l` head dim, `P` PLE width, `V` vocab, `U` cached positions.

pub mod attention;
pub mod embed;
mod float;
pub mod layer;
pub mod linear;
pub mod logits;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod ple;
pub mod rope;

use std::path::Path;

pub use float::Float;

use crate::config::{Config, ConfigError};
use crate::decode::{KvCache, KvCacheError, DEFAULT_ROLLBACK_RESERVE};
use crate::gguf::{GgufError, GgufFile};
use crate::quant::{NonFiniteError, QuantError};
use layer::{load_norm, Layer};
use linear::Mat;
use ple::PleInput;

/// Errors of the oracle (loading, forward, decoding, scoring).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The GGUF container could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The metadata does not describe a usable Gemma-4 model.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A tensor the forward needs is absent.
    #[error("missing tensor '{name}'")]
    MissingTensor {
        /// GGUF tensor name.
        name: String,
    },
    /// A tensor's layout cannot be used (named, with the reason).
    #[error("tensor '{tensor}': {problem}")]
    Shape {
        /// GGUF tensor name.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// A tensor's blocks could not be dequantized.
    #[error("tensor '{name}': {source}")]
    Tensor {
        /// GGUF tensor name.
        name: String,
        /// The dequantizer's error.
        source: QuantError,
    },
    /// A weight holds NaN or ±Inf (a quantized block's scale field or a float element), found
    /// by the load-time check (conformance contract §9; skipped with
    /// [`LoadOptions::allow_nonfinite`]).
    #[error(transparent)]
    NonFinite(#[from] NonFiniteError),
    /// A token id is not below the vocabulary size.
    #[error("token id {token} at position {position} of sequence {sequence} is out of range (vocabulary {vocab})")]
    TokenOutOfRange {
        /// Index of the sequence in the batch.
        sequence: usize,
        /// Index of the token in this call's tokens of that sequence.
        position: usize,
        /// The id.
        token: u32,
        /// `V`.
        vocab: usize,
    },
    /// `forward_batch`/`score` got different numbers of caches and sequences.
    #[error("batch has {caches} caches but {sequences} token sequences")]
    BatchMismatch {
        /// Number of caches.
        caches: usize,
        /// Number of sequences.
        sequences: usize,
    },
    /// A cache was not made by this model's `new_cache`.
    #[error("KV cache does not fit this model: {0}")]
    CacheMismatch(String),
    /// A cache cannot be used (e.g. after a failed rollback of a sliding ring).
    #[error(transparent)]
    Cache(#[from] KvCacheError),
}

/// Fault injection for tests: each flag plants one classic implementation bug so a test can
/// show the oracle's checks catch it (`tests/oracle_faults.rs`). All off by default; not part of
/// the supported API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Sliding layers see `W + 1` keys instead of `W` (query included).
    pub sliding_window_off_by_one: bool,
    /// RoPE pairs `(2i, 2i+1)` instead of `(i, i + d/2)`.
    pub rope_interleaved: bool,
    /// Norm weights used as `1 + w` (Gemma 2/3) instead of `w`.
    pub norm_one_plus_w: bool,
    /// Token embeddings not multiplied by `sqrt(H)`.
    pub no_embed_scale: bool,
    /// KV-reuse layers project their own K/V (with the store layer's weights) instead of
    /// reusing the store layer's K/V.
    pub reuse_layers_own_kv: bool,
    /// Proportional RoPE rotates the leading `2·n_rot` dims as one block (pairs `i`, `i+n_rot`)
    /// instead of pairs `i`, `i + d/2` for `i < n_rot`.
    pub proportional_rope_wrong_lanes: bool,
}

/// How a model file is loaded ([`Model::load_with`], [`Model::from_gguf_with`],
/// `spec::Assistant::load_with`; the CUDA runtime's loaders take it too).
///
/// The default checks every floating field of every block of every tensor once
/// ([`crate::quant::check_finite`], conformance contract §9 "Non-finite values") and refuses
/// the file at the first NaN/±Inf with [`ModelError::NonFinite`] naming tensor, block and
/// field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Skip the non-finite check (forensic use, the CLI's `--allow-nonfinite`): the model
    /// loads with its NaN/Inf weights, which propagate as IEEE arithmetic gives (§3.6 item 3 of
    /// `spec/gguf-gemma4.md`). Default false.
    pub allow_nonfinite: bool,
}

impl LoadOptions {
    /// The options with [`LoadOptions::allow_nonfinite`] set to `allow`.
    pub fn with_allow_nonfinite(mut self, allow: bool) -> LoadOptions {
        self.allow_nonfinite = allow;
        self
    }

    /// Runs the checks these options ask for on an opened file: [`crate::quant::check_finite`]
    /// unless `allow_nonfinite`. Errors: [`NonFiniteError`] for the first non-finite field.
    pub fn check(&self, file: &GgufFile) -> Result<(), NonFiniteError> {
        if self.allow_nonfinite {
            return Ok(());
        }
        crate::quant::check_finite(file)
    }
}

/// The rows of one sequence inside a batched forward: rows `start .. start + len` of the
/// concatenated `[T, ·]` activations, absolute positions `pos0 .. pos0 + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// First row in the batch.
    pub start: usize,
    /// Number of rows (new tokens of this sequence).
    pub len: usize,
    /// Position of the first new token (= tokens already in the sequence's cache).
    pub pos0: usize,
}

/// A Gemma-4 text model over the float type `F`, reading its weights from a GGUF file.
///
/// `Send + Sync`: one model serves many threads; all mutable state is in [`KvCache`].
pub struct Model<F: Float> {
    file: GgufFile,
    config: Config,
    faults: Faults,
    /// `token_embd.weight` `[V, H]`: input embedding and tied LM head.
    token_embd: Mat,
    /// `output_norm.weight` `[H]`.
    output_norm: Vec<F>,
    /// Model-level PLE tensors when `P > 0`.
    ple: Option<PleInput<F>>,
    layers: Vec<Layer<F>>,
    /// Per layer: the cache slot it attends to (after faults).
    kv_source: Vec<usize>,
}

impl<F: Float> Model<F> {
    /// Opens a GGUF (all shards of a split model) and prepares the model: config from metadata
    /// with every tensor shape checked (`Config::from_gguf`), every weight checked for NaN/±Inf
    /// (default [`LoadOptions`]), small vectors decoded, large matrices left in the mmapped
    /// file.
    ///
    /// Errors: [`ModelError::Gguf`], [`ModelError::Config`], [`ModelError::NonFinite`] (the
    /// first non-finite weight, conformance contract §9), tensor errors.
    pub fn load(path: impl AsRef<Path>) -> Result<Model<F>, ModelError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`Model::load`] with `opts` (e.g. `LoadOptions::default().with_allow_nonfinite(true)`
    /// to load a file with NaN/Inf weights for forensic use).
    pub fn load_with(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Model<F>, ModelError> {
        Self::from_gguf_with(GgufFile::open(path)?, Faults::default(), opts)
    }

    /// [`Model::load`] with planted faults (tests only).
    #[doc(hidden)]
    pub fn load_with_faults(
        path: impl AsRef<Path>,
        faults: Faults,
    ) -> Result<Model<F>, ModelError> {
        Self::from_gguf(GgufFile::open(path)?, faults)
    }

    /// A model over an already opened GGUF file (e.g. `GgufFile::from_bytes` in tests), with
    /// the default [`LoadOptions`] (every weight checked for NaN/±Inf). Errors as
    /// [`Model::load`].
    pub fn from_gguf(file: GgufFile, faults: Faults) -> Result<Model<F>, ModelError> {
        Self::from_gguf_with(file, faults, LoadOptions::default())
    }

    /// [`Model::from_gguf`] with `opts`: the config is read and every tensor shape checked
    /// first, then the weights are checked as `opts` asks ([`LoadOptions::check`]), then the
    /// model is prepared. Errors as [`Model::load`].
    pub fn from_gguf_with(
        file: GgufFile,
        faults: Faults,
        opts: LoadOptions,
    ) -> Result<Model<F>, ModelError> {
        let config = Config::from_gguf(&file)?;
        opts.check(&file)?;
        let layers = (0..config.n_layer)
            .map(|l| Layer::load(&config, &file, l, &faults))
            .collect::<Result<Vec<_>, _>>()?;
        let ple = if config.n_embd_per_layer > 0 {
            Some(PleInput {
                per_layer_token_embd: Mat::load(&file, "per_layer_token_embd.weight")?,
                per_layer_model_proj: Mat::load(&file, "per_layer_model_proj.weight")?,
                per_layer_proj_norm: load_norm(&file, "per_layer_proj_norm.weight", &faults)?,
            })
        } else {
            None
        };
        let kv_source = layers.iter().map(|l| l.attn.kv_source).collect();
        Ok(Model {
            token_embd: Mat::load(&file, "token_embd.weight")?,
            output_norm: load_norm(&file, "output_norm.weight", &faults)?,
            ple,
            layers,
            kv_source,
            config,
            faults,
            file,
        })
    }

    /// The configuration read from the GGUF metadata.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `V`.
    pub fn vocab_size(&self) -> usize {
        self.config.n_vocab
    }

    /// Suppressed token ids `S` (`tokenizer.ggml.suppress_tokens` within `[0, V)`, sorted;
    /// empty when absent), §13.6. Never emitted by [`Model::greedy`] nor listed by `score`.
    pub fn suppressed_ids(&self) -> &[u32] {
        &self.config.suppress_tokens
    }

    /// The underlying GGUF file (e.g. for the drafter, which reads the target's embedding).
    pub fn gguf(&self) -> &GgufFile {
        &self.file
    }

    /// An empty KV cache for this model with the default rollback reserve
    /// ([`DEFAULT_ROLLBACK_RESERVE`]): one K/V slot per layer that computes K/V, reuse layers
    /// pointing at their store layer (§4.8); sliding slots are rings of `W + R` rows
    /// (`crate::decode`).
    pub fn new_cache(&self) -> KvCache<F> {
        self.new_cache_with_reserve(DEFAULT_ROLLBACK_RESERVE)
    }

    /// [`Model::new_cache`] with rollback reserve `reserve` (`R`): removing up to `R` of the
    /// newest positions with `KvCache::truncate` always succeeds; sliding rings hold `W + R`
    /// rows. A slot's window is the largest window among the layers reading it (`None`, i.e.
    /// linear, if any of them is a full-attention layer).
    pub fn new_cache_with_reserve(&self, reserve: usize) -> KvCache<F> {
        let n = self.config.n_layer;
        let dims = (0..n)
            .map(|l| (self.config.n_head_kv[l], self.config.head_dim(l)))
            .collect();
        let window = (0..n)
            .map(|s| {
                let mut readers = self.layers.iter().filter(|l| l.attn.kv_source == s);
                let owner = self.kv_source[s] == s;
                owner
                    .then(|| readers.try_fold(0, |w, l| l.attn.window.map(|x| w.max(x))))
                    .flatten()
            })
            .collect();
        KvCache::new(self.kv_source.clone(), dims, window, reserve)
    }

    /// Scaled token embeddings `E[ids] · sqrt(H)`: `[T, H]` (§2).
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<F>, ModelError> {
        let scale = if self.faults.no_embed_scale {
            F::ONE
        } else {
            F::from_f64((self.config.n_embd as f64).sqrt())
        };
        embed::embed(self.token_embd.view(&self.file), ids, scale)
    }

    /// The decoder over a batch: runs `tokens[s]` after what `caches[s]` holds, for all
    /// sequences at once (every weight tile is read once for all rows), appends their K/V, and
    /// returns the final-normed hidden states `hN` `[T, H]` of all rows, sequence after sequence
    /// (§2–§9 up to the LM head). On error the caches are left as they were. Errors also when a
    /// cache is unusable after a failed rollback (`ModelError::Cache`).
    pub fn forward_hidden_batch(
        &self,
        caches: &mut [&mut KvCache<F>],
        tokens: &[&[u32]],
    ) -> Result<Vec<F>, ModelError> {
        if caches.len() != tokens.len() {
            return Err(ModelError::BatchMismatch {
                caches: caches.len(),
                sequences: tokens.len(),
            });
        }
        let mut segs = Vec::with_capacity(tokens.len());
        let mut start = 0;
        for (s, (cache, toks)) in caches.iter().zip(tokens).enumerate() {
            cache.check_usable()?;
            if cache.source_layers() != self.kv_source.as_slice() {
                return Err(ModelError::CacheMismatch(format!(
                    "cache {s} has layer sources {:?}, model {:?}",
                    cache.source_layers(),
                    self.kv_source
                )));
            }
            if let Some((position, &token)) = toks
                .iter()
                .enumerate()
                .find(|(_, &id)| id as usize >= self.config.n_vocab)
            {
                return Err(ModelError::TokenOutOfRange {
                    sequence: s,
                    position,
                    token,
                    vocab: self.config.n_vocab,
                });
            }
            segs.push(Segment {
                start,
                len: toks.len(),
                pos0: cache.len(),
            });
            start += toks.len();
        }
        let result = self.run_layers(caches, tokens, &segs);
        for (cache, s) in caches.iter_mut().zip(&segs) {
            match result {
                Ok(_) => cache.commit(s.pos0 + s.len),
                Err(_) => cache.discard_pending(),
            }
        }
        result
    }

    /// Embedding, PLE inputs, the layer loop and the final norm (§2, §7, §8, §9 first line).
    fn run_layers(
        &self,
        caches: &mut [&mut KvCache<F>],
        tokens: &[&[u32]],
        segs: &[Segment],
    ) -> Result<Vec<F>, ModelError> {
        let cfg = &self.config;
        let eps = F::from_f64(cfg.rms_eps);
        let ids: Vec<u32> = tokens.iter().flat_map(|t| t.iter().copied()).collect();
        let mut x = self.embed(&ids)?;
        let ple = match &self.ple {
            Some(p) => {
                Some(p.forward(&self.file, &ids, &x, cfg.n_embd_per_layer, cfg.n_embd, eps)?)
            }
            None => None,
        };
        for layer in &self.layers {
            layer.forward(
                &self.file,
                &mut x,
                segs,
                caches,
                ple.as_deref(),
                cfg.n_layer,
                eps,
            )?;
        }
        norm::rms_norm(&mut x, cfg.n_embd, Some(&self.output_norm), eps);
        Ok(x)
    }

    /// Logits of final-normed hidden rows: `hN` `[T, H]` → `[T, V]` in `F`, soft-capped (§9).
    pub fn logits_of_hidden(&self, hn: &[F]) -> Result<Vec<F>, ModelError> {
        let t = hn.len() / self.config.n_embd;
        logits::logits(
            hn,
            t,
            self.token_embd.view(&self.file),
            self.config.final_softcap,
        )
    }

    /// Logits of final-normed hidden rows before the soft-cap: `hN` `[T, H]` → `[T, V]` in `F`
    /// (§9 without the last line; `logits::soft_cap` with `config().final_softcap` finishes it).
    pub fn raw_logits_of_hidden(&self, hn: &[F]) -> Result<Vec<F>, ModelError> {
        let t = hn.len() / self.config.n_embd;
        logits::logits(hn, t, self.token_embd.view(&self.file), None)
    }

    /// Runs `tokens` after what `cache` holds (chunked prefill or one decode step) and returns
    /// the logits rows `[tokens.len(), V]` as f64 (after final soft-capping, no suppression).
    pub fn forward(
        &self,
        cache: &mut KvCache<F>,
        tokens: &[u32],
    ) -> Result<Vec<Vec<f64>>, ModelError> {
        let mut out = self.forward_batch(&mut [cache], &[tokens])?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`Model::forward`] for several sequences sharing each weight read: returns, per sequence,
    /// its logits rows `[tokens[s].len(), V]` as f64.
    pub fn forward_batch(
        &self,
        caches: &mut [&mut KvCache<F>],
        tokens: &[&[u32]],
    ) -> Result<Vec<Vec<Vec<f64>>>, ModelError> {
        let hn = self.forward_hidden_batch(caches, tokens)?;
        let z = self.logits_of_hidden(&hn)?;
        let v = self.config.n_vocab;
        let mut rows = z
            .chunks_exact(v)
            .map(|r| r.iter().map(|x| x.to_f64()).collect::<Vec<f64>>());
        Ok(tokens
            .iter()
            .map(|t| rows.by_ref().take(t.len()).collect())
            .collect())
    }
}
