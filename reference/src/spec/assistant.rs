//! The Gemma-4 assistant (MTP drafter) forward: `spec/gemma4-assistant-mtp.md` §1 (weights),
//! §2 (one drafter forward over the target's K/V), §3 (centroid head). Upstream: transformers
//! 5.23.0 `models/gemma4_assistant/modeling_gemma4_assistant.py` (`Gemma4AssistantForCausalLM`,
//! `Gemma4AssistantMaskedEmbedder`); llama.cpp 0c1e570 `src/models/gemma4-assistant.cpp`.
//!
//! Every op is the target's own ([`crate::model`]: RMSNorm, RoPE, softmax, GeGLU MLP and the
//! deterministic [`linear`]), so a drafter row is computed in exactly the arithmetic order the
//! target uses. Notation (§ notation of the spec): `H_T` target width, `H_A` drafter width,
//! `n_q` query heads, `d` head dim of the layer's type, `V` vocabulary, `C` centroids.

use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;

use super::SpecError;
use crate::config::{blk, AssistantConfig, Config};
use crate::decode::{KvCache, KvCacheError};
use crate::gguf::GgufFile;
use crate::model::attention::softmax_in_place;
use crate::model::layer::load_vec;
use crate::model::linear::{dot, linear, Mat};
use crate::model::logits::argmax;
use crate::model::mlp::Mlp;
use crate::model::norm::{rms_norm, rms_normed};
use crate::model::rope::{inv_freq, rope, Pairing};
use crate::model::{Float, LoadOptions, Model, ModelError};
use crate::quant::GgmlType;

/// Which logits head the drafter runs (§3.4: a drafter option `head = centroid | full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Head {
    /// `logits = E_A · n` over all `V` ids (tied head over the drafter's own embedding, §2.6).
    Full,
    /// The ordered-embedding head of §3.1: only the tokens of the top-`k_c` clusters are scored,
    /// every other id gets `min − 1`.
    Centroid,
}

impl Head {
    /// `"full"` / `"centroid"` (the names the fixtures' `head` field uses).
    pub fn name(self) -> &'static str {
        match self {
            Head::Full => "full",
            Head::Centroid => "centroid",
        }
    }
}

/// The target layers whose K/V the drafter reads (§2.3): the last sliding and the last full layer
/// among the target layers that own a cache (`0 … L_T − N_s − 1`). `None` when the target has no
/// cache-owning layer of that type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLayers {
    /// Last cache-owning sliding layer.
    pub sliding: Option<usize>,
    /// Last cache-owning full layer.
    pub full: Option<usize>,
    /// Whether llama.cpp's positional rule (§2.3: target layers `L_T−2` (sliding) and `L_T−1`
    /// (full), resolved to their store layers) reads the same two layers. Informative: a target
    /// violating it aborts in llama.cpp, the oracle still selects by type.
    pub matches_llamacpp_rule: bool,
}

impl StoreLayers {
    /// Selects the store layers of `target` by type (§2.3).
    pub fn of(target: &Config) -> StoreLayers {
        let owners = 0..target.first_reuse_layer();
        let last = |swa: bool| owners.clone().rev().find(|&l| target.is_swa[l] == swa);
        let (sliding, full) = (last(true), last(false));
        let n = target.n_layer;
        let matches_llamacpp_rule = n >= 2
            && target.is_swa[n - 2]
            && !target.is_swa[n - 1]
            && Some(target.kv_source[n - 2]) == sliding
            && Some(target.kv_source[n - 1]) == full;
        StoreLayers {
            sliding,
            full,
            matches_llamacpp_rule,
        }
    }

    /// The store layer of one type (`sliding = true`: the sliding one).
    pub fn of_type(&self, sliding: bool) -> Option<usize> {
        if sliding {
            self.sliding
        } else {
            self.full
        }
    }
}

/// Target K/V rows visible to the drafter for one layer type: positions `positions` (contiguous),
/// keys and values `[n, nkv, d]` each (post-norm, post-RoPE keys and post-norm values exactly as
/// the target stored them, §2.2). Rows are borrowed from the cache when all are committed and
/// owned when the set includes saved rows of rejected drafts (transformers emulation, §4.2).
#[derive(Debug, Clone)]
pub struct KvRows<'a, F: Float> {
    /// The target store layer the rows come from.
    pub layer: usize,
    /// Absolute positions of the rows.
    pub positions: Range<usize>,
    /// KV heads `nkv`.
    pub n_kv: usize,
    /// Head dim `d`.
    pub head_dim: usize,
    /// Keys `[n, nkv, d]`.
    pub k: Cow<'a, [F]>,
    /// Values `[n, nkv, d]`.
    pub v: Cow<'a, [F]>,
}

impl<'a, F: Float> KvRows<'a, F> {
    /// Committed rows `positions` of target layer `layer` (a reuse layer resolves to its store
    /// layer), borrowed when contiguous in the cache, copied when they wrap around a sliding
    /// ring. Errors: a position the cache does not hold (`KvCacheError::NotHeld`).
    pub fn from_cache(
        cache: &'a KvCache<F>,
        layer: usize,
        positions: Range<usize>,
    ) -> Result<KvRows<'a, F>, KvCacheError> {
        let (n_kv, head_dim) = cache.kv_dims(layer);
        let (k, v) = cache.rows(layer, positions.clone())?;
        Ok(KvRows {
            layer,
            n_kv,
            head_dim,
            k,
            v,
            positions,
        })
    }

    /// Number of visible rows.
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Whether no row is visible.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// What the drafter attends to in one round: one row set per layer type (§2.3, §2.5). `None`
/// when the target has no store layer of that type (then a drafter layer of that type errors).
#[derive(Debug, Clone)]
pub struct DrafterKv<'a, F: Float> {
    /// Rows for sliding drafter layers.
    pub sliding: Option<KvRows<'a, F>>,
    /// Rows for full drafter layers.
    pub full: Option<KvRows<'a, F>>,
}

impl<'a, F: Float> DrafterKv<'a, F> {
    /// The intended visible sets of §2.5 for a round at position `p` over a cache holding exactly
    /// `0 … p−1`: full rows `0 … p−1`, sliding rows `max(0, p−W+1) … p−1` (`W` = the target's
    /// sliding window). Errors if `cache.len() != p`.
    pub fn intended(
        cache: &'a KvCache<F>,
        store: &StoreLayers,
        p: usize,
        window: usize,
    ) -> Result<DrafterKv<'a, F>, SpecError> {
        if cache.len() != p {
            return Err(SpecError::State(format!(
                "cache holds {} positions, round position is {p}",
                cache.len()
            )));
        }
        let lo = (p + 1).saturating_sub(window);
        Ok(DrafterKv {
            sliding: store
                .sliding
                .map(|l| KvRows::from_cache(cache, l, lo..p))
                .transpose()?,
            full: store
                .full
                .map(|l| KvRows::from_cache(cache, l, 0..p))
                .transpose()?,
        })
    }

    fn of_type(&self, sliding: bool) -> Option<&KvRows<'a, F>> {
        if sliding {
            self.sliding.as_ref()
        } else {
            self.full.as_ref()
        }
    }
}

/// Output of one drafter forward `D(x, g, p, KV)` (§2.6).
#[derive(Debug, Clone, PartialEq)]
pub struct DraftStep<F> {
    /// Drafter logits `[V]` (no soft-capping; for the centroid head the unselected ids hold the
    /// fill value `μ`, §3.1).
    pub logits: Vec<f64>,
    /// `g' = W_post · n` `[H_T]`, fed as `g` to the next draft step.
    pub hidden: Vec<F>,
    /// The final-normed drafter state `n` `[H_A]` (the head's input).
    pub normed: Vec<F>,
}

/// One query-only drafter layer (§1.2, §2.2); field names are the GGUF tensor suffixes.
#[derive(Debug, Clone)]
struct AssistantLayer<F> {
    sliding: bool,
    n_head: usize,
    n_kv: usize,
    head_dim: usize,
    attn_norm: Vec<F>,
    attn_q: Mat,
    attn_q_norm: Vec<F>,
    attn_output: Mat,
    post_attention_norm: Vec<F>,
    ffn_norm: Vec<F>,
    mlp: Mlp,
    post_ffw_norm: Vec<F>,
    layer_output_scale: F,
    /// RoPE inverse frequencies `[d/2]` of this layer's type (default / proportional, §2.2).
    inv_freq: Vec<F>,
}

/// The centroid head's parameters (§3): `Cw` `[C, H_A]`, `ord` `[V]`, `k_c`.
#[derive(Debug, Clone)]
struct CentroidHead {
    /// `masked_embd_centroids.weight`, `[C, H_A]`.
    centroids: Mat,
    /// `masked_embd_ordering(.weight)` as a `C × M` row-major table of canonical ids.
    ordering: Vec<u32>,
    /// `k_c` (`centroid_intermediate_top_k`, default 32).
    top_k: usize,
}

/// A Gemma-4 assistant (drafter) over the float type `F`, weights left in the mmapped GGUF.
///
/// `Send + Sync`. The drafter has no KV projections and no state of its own (§1): it reads the
/// target's embedding table and the K/V of the target's store layers.
pub struct Assistant<F: Float> {
    file: GgufFile,
    config: AssistantConfig,
    /// `token_embd.weight` `[V, H_A]`: output head only (§1.2).
    token_embd: Mat,
    /// `nextn.pre_projection.weight` `[H_A, 2·H_T]`.
    pre_projection: Mat,
    /// `nextn.post_projection.weight` `[H_T, H_A]`.
    post_projection: Mat,
    /// `output_norm.weight` `[H_A]`.
    output_norm: Vec<F>,
    layers: Vec<AssistantLayer<F>>,
    centroid: Option<CentroidHead>,
    head: Head,
}

/// Names the ordering tensor may carry (§1.2 lists it without, `gguf-gemma4.md` §8.2 with `.weight`).
const ORDERING_NAMES: [&str; 2] = ["masked_embd_ordering.weight", "masked_embd_ordering"];
/// GGUF name of the centroid scorer.
const CENTROIDS_NAME: &str = "masked_embd_centroids.weight";

impl<F: Float> Assistant<F> {
    /// Opens a `gemma4-assistant` GGUF (`gguf-gemma4.md` §8) and loads the drafter, every
    /// weight checked for NaN/±Inf (default [`LoadOptions`]; conformance contract §9).
    ///
    /// Errors: [`SpecError::Gguf`], [`SpecError::Config`], [`SpecError::Model`] wrapping
    /// [`ModelError::NonFinite`] for the first non-finite weight, [`SpecError::Pairing`], tensor
    /// errors.
    pub fn load(path: impl AsRef<Path>) -> Result<Assistant<F>, SpecError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`Assistant::load`] with `opts` (`allow_nonfinite` skips the non-finite check).
    pub fn load_with(path: impl AsRef<Path>, opts: LoadOptions) -> Result<Assistant<F>, SpecError> {
        Self::from_gguf_with(GgufFile::open(path)?, opts)
    }

    /// The drafter over an opened GGUF with the default [`LoadOptions`]. Checks the config and
    /// tensor shapes ([`AssistantConfig::from_gguf`]), every weight for NaN/±Inf, and the
    /// architecture constraints of §1.1 (no PLE, every layer KV-shared). The head defaults per
    /// §3.4: [`Head::Centroid`] when `use_ordered_embeddings` is set and both centroid tensors
    /// are present, else [`Head::Full`]. Errors as [`Assistant::load`].
    pub fn from_gguf(file: GgufFile) -> Result<Assistant<F>, SpecError> {
        Self::from_gguf_with(file, LoadOptions::default())
    }

    /// [`Assistant::from_gguf`] with `opts`: config and shapes first, then the weights as
    /// `opts` asks ([`LoadOptions::check`]). Errors as [`Assistant::load`].
    pub fn from_gguf_with(file: GgufFile, opts: LoadOptions) -> Result<Assistant<F>, SpecError> {
        let config = AssistantConfig::from_gguf(&file)?;
        opts.check(&file).map_err(ModelError::from)?;
        if config.n_kv_shared != 0 && config.n_kv_shared != config.n_layer {
            return Err(SpecError::Pairing(format!(
                "assistant shared_kv_layers {} != block_count {} (every drafter layer must reuse target K/V, §1.1)",
                config.n_kv_shared, config.n_layer
            )));
        }
        let eps_free = |name: &str| load_vec::<F>(&file, name);
        let mut layers = Vec::with_capacity(config.n_layer);
        for l in 0..config.n_layer {
            let d = config.head_dim(l);
            let sliding = config.is_swa[l];
            let (theta, pairs) = if sliding {
                (config.rope_base_swa, d / 2)
            } else {
                (config.rope_base_full, config.rope_pairs_full)
            };
            let mat = |s: &str| Mat::load(&file, &blk(l, s));
            let n_head = config.n_head[l];
            let n_kv = config.n_head_kv[l];
            if n_kv == 0 || n_head % n_kv != 0 {
                return Err(SpecError::Pairing(format!(
                    "assistant layer {l}: {n_head} query heads are not a multiple of {n_kv} KV heads"
                )));
            }
            layers.push(AssistantLayer {
                sliding,
                n_head,
                n_kv,
                head_dim: d,
                attn_norm: eps_free(&blk(l, "attn_norm.weight"))?,
                attn_q: mat("attn_q.weight")?,
                attn_q_norm: eps_free(&blk(l, "attn_q_norm.weight"))?,
                attn_output: mat("attn_output.weight")?,
                post_attention_norm: eps_free(&blk(l, "post_attention_norm.weight"))?,
                ffn_norm: eps_free(&blk(l, "ffn_norm.weight"))?,
                mlp: Mlp {
                    ffn_gate: mat("ffn_gate.weight")?,
                    ffn_up: mat("ffn_up.weight")?,
                    ffn_down: mat("ffn_down.weight")?,
                },
                post_ffw_norm: eps_free(&blk(l, "post_ffw_norm.weight"))?,
                layer_output_scale: eps_free(&blk(l, "layer_output_scale.weight"))?
                    .first()
                    .copied()
                    .unwrap_or(F::ONE),
                inv_freq: inv_freq(theta, d, pairs),
            });
        }
        let centroid = load_centroid_head(&file, &config)?;
        let head = if config.use_ordered_embeddings && centroid.is_some() {
            Head::Centroid
        } else {
            Head::Full
        };
        Ok(Assistant {
            token_embd: Mat::load(&file, "token_embd.weight")?,
            pre_projection: Mat::load(&file, "nextn.pre_projection.weight")?,
            post_projection: Mat::load(&file, "nextn.post_projection.weight")?,
            output_norm: load_vec(&file, "output_norm.weight")?,
            layers,
            centroid,
            head,
            config,
            file,
        })
    }

    /// The configuration read from the GGUF.
    pub fn config(&self) -> &AssistantConfig {
        &self.config
    }

    /// The head in use.
    pub fn head(&self) -> Head {
        self.head
    }

    /// Whether the GGUF carries the centroid tensors (so [`Head::Centroid`] can run).
    pub fn has_centroid_head(&self) -> bool {
        self.centroid.is_some()
    }

    /// Selects the head. Errors: [`Head::Centroid`] without the centroid tensors.
    pub fn set_head(&mut self, head: Head) -> Result<(), SpecError> {
        if head == Head::Centroid && self.centroid.is_none() {
            return Err(SpecError::Pairing(format!(
                "centroid head requested but the assistant GGUF has no '{CENTROIDS_NAME}' / '{}'",
                ORDERING_NAMES[0]
            )));
        }
        self.head = head;
        Ok(())
    }

    /// Checks the drafter against a target (§1.1 compatibility, `gguf-gemma4.md` §8.1
    /// "Pairing"): backbone width, vocabulary, per-type head dims and KV heads of the store layers
    /// read, RoPE parameters per type and the sliding window. Returns the store layers.
    pub fn check_target(&self, target: &Config) -> Result<StoreLayers, SpecError> {
        self.config.check_pairing(target)?;
        let a = &self.config;
        let store = StoreLayers::of(target);
        let uses = |swa: bool| a.is_swa.contains(&swa);
        if uses(true) {
            if a.rope_base_swa != target.rope_base_swa {
                return Err(SpecError::Pairing(format!(
                    "sliding RoPE θ: assistant {} != target {}",
                    a.rope_base_swa, target.rope_base_swa
                )));
            }
            if a.sliding_window != target.sliding_window {
                return Err(SpecError::Pairing(format!(
                    "sliding window: assistant {} != target {}",
                    a.sliding_window, target.sliding_window
                )));
            }
        }
        if uses(false)
            && (a.rope_base_full != target.rope_base_full
                || a.rope_pairs_full != target.rope_pairs_full)
        {
            return Err(SpecError::Pairing(format!(
                "full RoPE: assistant θ {} with {} rotated pairs != target θ {} with {}",
                a.rope_base_full, a.rope_pairs_full, target.rope_base_full, target.rope_pairs_full
            )));
        }
        Ok(store)
    }

    /// One drafter forward `D(x, g, p, KV)` (§2): `e = E_T[x]·√H_T` from the target,
    /// `z_0 = W_pre · [e ‖ g]`, the query-only layers (queries rotated at position `p`, keys and
    /// values = the rows of `kv` of the layer's type, scale 1.0, every given row visible), final
    /// norm, `g' = W_post · n`, logits by the current head (never soft-capped).
    ///
    /// `g`: `[H_T]`. Errors: `x ≥ V`, `g` of the wrong length, no rows for a layer type the
    /// drafter uses, K/V rows whose head count or dim differ from the drafter's, weight decode.
    pub fn forward(
        &self,
        target: &Model<F>,
        kv: &DrafterKv<'_, F>,
        x: u32,
        g: &[F],
        p: usize,
    ) -> Result<DraftStep<F>, SpecError> {
        let a = &self.config;
        let (ht, ha) = (a.n_embd_out, a.n_embd);
        if g.len() != ht {
            return Err(SpecError::State(format!(
                "carried hidden has {} values, expected H_T = {ht}",
                g.len()
            )));
        }
        let eps = F::from_f64(a.rms_eps);
        // §2.1: u = [E_T[x]·√H_T ‖ g], z_0 = W_pre · u.
        let mut u = target.embed(&[x])?;
        u.extend_from_slice(g);
        let mut z = linear(&u, 1, self.pre_projection.view(&self.file))?;
        for (l, layer) in self.layers.iter().enumerate() {
            let rows = kv.of_type(layer.sliding).ok_or_else(|| {
                SpecError::Pairing(format!(
                    "drafter layer {l} ({}) has no target K/V of its type",
                    if layer.sliding { "sliding" } else { "full" }
                ))
            })?;
            self.layer_forward(layer, l, &mut z, rows, p, eps)?;
        }
        rms_norm(&mut z, ha, Some(&self.output_norm), eps);
        let hidden = linear(&z, 1, self.post_projection.view(&self.file))?;
        let logits = match self.head {
            Head::Full => self.full_logits(&z)?,
            Head::Centroid => self.centroid_logits(&z)?,
        };
        Ok(DraftStep {
            logits,
            hidden,
            normed: z,
        })
    }

    /// §2.2 for one layer on the residual `z` `[H_A]` (in place).
    fn layer_forward(
        &self,
        layer: &AssistantLayer<F>,
        l: usize,
        z: &mut [F],
        rows: &KvRows<'_, F>,
        p: usize,
        eps: F,
    ) -> Result<(), SpecError> {
        let f = &self.file;
        let ha = self.config.n_embd;
        let (nh, nkv, d) = (layer.n_head, layer.n_kv, layer.head_dim);
        if rows.n_kv != nkv || rows.head_dim != d {
            return Err(SpecError::Pairing(format!(
                "drafter layer {l} expects {nkv} KV heads of dim {d}, target layer {} has {} of dim {}",
                rows.layer, rows.n_kv, rows.head_dim
            )));
        }
        let a = rms_normed(z, ha, Some(&layer.attn_norm), eps);
        let mut q = linear(&a, 1, layer.attn_q.view(f))?;
        rms_norm(&mut q, d, Some(&layer.attn_q_norm), eps);
        rope(&mut q, nh, d, &[p], &layer.inv_freq, Pairing::HalfSplit);
        let group = nh / nkv;
        let n = rows.len();
        let mut o = vec![F::ZERO; nh * d];
        let mut scores = vec![F::ZERO; n];
        for hh in 0..nh {
            let g = hh / group;
            let qh = &q[hh * d..(hh + 1) * d];
            let at = |j: usize| (j * nkv + g) * d..(j * nkv + g + 1) * d;
            for (j, s) in scores.iter_mut().enumerate() {
                *s = dot(qh, &rows.k[at(j)]);
            }
            if n == 0 {
                continue;
            }
            softmax_in_place(&mut scores);
            let oh = &mut o[hh * d..(hh + 1) * d];
            for (j, &s) in scores.iter().enumerate() {
                for (oi, &vi) in oh.iter_mut().zip(&rows.v[at(j)]) {
                    *oi += s * vi;
                }
            }
        }
        let mut r = linear(&o, 1, layer.attn_output.view(f))?;
        rms_norm(&mut r, ha, Some(&layer.post_attention_norm), eps);
        for (zi, ri) in z.iter_mut().zip(&r) {
            *zi += *ri;
        }
        let m = rms_normed(z, ha, Some(&layer.ffn_norm), eps);
        let mut ff = layer.mlp.forward(f, &m, 1)?;
        rms_norm(&mut ff, ha, Some(&layer.post_ffw_norm), eps);
        for (zi, fi) in z.iter_mut().zip(&ff) {
            *zi = (*zi + *fi) * layer.layer_output_scale;
        }
        Ok(())
    }

    /// Full head: `E_A · n` `[V]` (§2.6), as f64.
    pub fn full_logits(&self, n: &[F]) -> Result<Vec<f64>, SpecError> {
        let z = linear(n, 1, self.token_embd.view(&self.file))?;
        Ok(z.iter().map(|v| v.to_f64()).collect())
    }

    /// Centroid head (§3.1) on the final-normed state `n` `[H_A]`: cluster scores `c = Cw · n`,
    /// the `k_c` best clusters (lowest index first on equal scores), `s_t = E_A[t] · n` for their
    /// tokens (the same value the full head gives), every other id `min_t s_t − 1`.
    /// Errors: no centroid tensors.
    pub fn centroid_logits(&self, n: &[F]) -> Result<Vec<f64>, SpecError> {
        let head = self
            .centroid
            .as_ref()
            .ok_or_else(|| SpecError::Pairing("no centroid tensors".into()))?;
        let c_n = head.centroids.rows;
        let m = head.ordering.len() / c_n;
        let c = linear(n, 1, head.centroids.view(&self.file))?;
        let mut order: Vec<usize> = (0..c_n).collect();
        // Descending score, ascending index on ties (stable sort keeps index order).
        order.sort_by(|&i, &j| c[j].partial_cmp(&c[i]).unwrap_or(std::cmp::Ordering::Equal));
        let emb = self.token_embd.view(&self.file);
        let ha = self.config.n_embd;
        let mut row = vec![F::ZERO; ha];
        let mut selected: Vec<(usize, f64)> = Vec::with_capacity(head.top_k.min(c_n) * m);
        for &ci in order.iter().take(head.top_k.min(c_n)) {
            for &t in &head.ordering[ci * m..(ci + 1) * m] {
                emb.rows_into(t as usize, &mut row)?;
                selected.push((t as usize, dot(&row, n).to_f64()));
            }
        }
        let fill = selected
            .iter()
            .map(|&(_, s)| s)
            .fold(f64::INFINITY, f64::min)
            - 1.0;
        let mut logits = vec![fill; self.config.n_vocab];
        for (t, s) in selected {
            logits[t] = s;
        }
        Ok(logits)
    }

    /// Greedy draft of one step: `argmax` over all `V` ids of [`DraftStep::logits`] (lowest id on
    /// ties; drafter logits are never suppressed, §4.1 step 3).
    pub fn draft_token(step: &DraftStep<F>) -> Result<u32, SpecError> {
        argmax(&step.logits, &[])
            .ok_or_else(|| SpecError::State("drafter logits are all NaN".into()))
    }
}

/// Reads the centroid head's token ordering (`masked_embd_ordering`, §1.2, §3.1): an I32 or I64
/// tensor that must be a permutation of `0 … n_vocab−1`. Shared by the oracle and the CUDA
/// drafter so both accept exactly the same files.
///
/// Errors: a description of the problem (wrong type, entry out of range or repeated), for the
/// caller to wrap with the tensor name.
pub fn read_token_ordering(
    file: &GgufFile,
    t: &crate::gguf::TensorInfo,
    n_vocab: usize,
) -> Result<Vec<u32>, String> {
    let bytes = file.tensor_data(t);
    let ordering: Vec<i64> = match t.ggml_type {
        GgmlType::I32 => bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
            .collect(),
        GgmlType::I64 => bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .collect(),
        ty => return Err(format!("type {ty}, expected I32 or I64")),
    };
    if ordering.len() != n_vocab {
        return Err(format!(
            "{} entries, expected V = {n_vocab}",
            ordering.len()
        ));
    }
    let mut seen = vec![false; n_vocab];
    let mut out = Vec::with_capacity(n_vocab);
    for (i, &id) in ordering.iter().enumerate() {
        if id < 0 || id as usize >= n_vocab || seen[id as usize] {
            return Err(format!(
                "entry {i} = {id}: not a permutation of 0..{n_vocab}"
            ));
        }
        seen[id as usize] = true;
        out.push(id as u32);
    }
    Ok(out)
}

/// Loads the centroid head when both tensors are present (§3.4, `gguf-gemma4.md` §8.2 project
/// extension): checks `C` against `num_centroids`, `V % C == 0`, and that the ordering is a
/// permutation of `0 … V−1`.
fn load_centroid_head(
    file: &GgufFile,
    cfg: &AssistantConfig,
) -> Result<Option<CentroidHead>, SpecError> {
    let ord_name = ORDERING_NAMES.iter().find(|n| file.tensor(n).is_ok());
    let (Ok(_), Some(&ord_name)) = (file.tensor(CENTROIDS_NAME), ord_name) else {
        return Ok(None);
    };
    let centroids = Mat::load(file, CENTROIDS_NAME)?;
    let bad = |tensor: &str, problem: String| SpecError::BadTensor {
        tensor: tensor.to_string(),
        problem,
    };
    if centroids.cols != cfg.n_embd {
        return Err(bad(
            CENTROIDS_NAME,
            format!(
                "row length {} != drafter width {}",
                centroids.cols, cfg.n_embd
            ),
        ));
    }
    let c_n = centroids.rows;
    if let Some(nc) = cfg.num_centroids {
        if nc != c_n {
            return Err(bad(
                CENTROIDS_NAME,
                format!("{c_n} centroids but num_centroids = {nc}"),
            ));
        }
    }
    let v = cfg.n_vocab;
    if c_n == 0 || !v.is_multiple_of(c_n) {
        return Err(bad(
            CENTROIDS_NAME,
            format!("{c_n} centroids do not divide the vocabulary {v}"),
        ));
    }
    let t = file.tensor(ord_name)?;
    if t.n_elements() as usize != v {
        return Err(bad(
            ord_name,
            format!("{} entries, expected V = {v}", t.n_elements()),
        ));
    }
    let out = read_token_ordering(file, t, v).map_err(|problem| bad(ord_name, problem))?;
    Ok(Some(CentroidHead {
        centroids,
        ordering: out,
        top_k: cfg.centroid_intermediate_top_k.unwrap_or(32),
    }))
}
