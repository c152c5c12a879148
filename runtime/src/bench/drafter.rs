//! The drafter part of `runtime bench`: a synthetic MTP assistant of 12B-compatible shapes
//! (`spec/gemma4-assistant-mtp.md` §8, [`AssistantShape`]; built by
//! `DeviceAssistant::synthetic`, §1.2) timed drafting over the 12B target's cache (§2, §4.1
//! step 2), its step cost ÷ the target decode step, and the speed-up model of
//! [`super::speedup`] from the costs measured in the same run.

use std::time::Instant;

use reference::config::{AssistantConfig, Config};
use reference::spec::StoreLayers;
use serde_json::json;

use super::{speedup, WeightMix, ALPHAS, DRAFT_KS};
use crate::draft::{DeviceAssistant, DraftHead};
use crate::engine::CudaEngine;
use crate::error::RuntimeError;
use crate::forward::{Forward, KvCache, Row, Workspace};

/// The drafter part of [`super::run`].
#[derive(Debug, Clone, PartialEq)]
pub struct DraftOptions {
    /// Drafter shape ([`AssistantShape::plausible_12b`] by default).
    pub shape: AssistantShape,
    /// Drafter weight formats (the project's 12B drafter GGUF is BF16, §8).
    pub mix: WeightMix,
}

impl DraftOptions {
    /// Whether `DeviceAssistant::synthetic` can build this drafter for `target`, checked on the
    /// CPU: the shape ([`AssistantShape::config`]), the pairing ([`crate::draft::check_pairing`])
    /// and every weight matrix's row length a whole number of blocks of its format, with a GPU
    /// kernel for that format.
    ///
    /// Errors: [`RuntimeError::Model`] (shape, pairing), [`RuntimeError::Shape`] (row length),
    /// [`RuntimeError::UnsupportedType`].
    pub fn check(&self, target: &Config) -> Result<(), RuntimeError> {
        let config = self.shape.config(target)?;
        crate::draft::check_pairing(&config, target)?;
        let ha = config.n_embd;
        let mut rows: Vec<(&str, usize)> = vec![
            ("token_embd", ha),
            ("nextn.pre_projection", 2 * config.n_embd_out),
            ("nextn.post_projection", ha),
        ];
        if config.num_centroids.is_some() {
            rows.push(("masked_embd_centroids", ha));
        }
        for l in 0..config.n_layer {
            rows.extend([
                ("attn_q", ha),
                ("attn_output", config.n_head[l] * config.head_dim(l)),
                ("ffn_gate", ha),
                ("ffn_up", ha),
                ("ffn_down", config.n_ff[l]),
            ]);
        }
        super::check_rows(self.mix, &rows)
    }
}

/// The shape of the synthetic 12B drafter (`spec/gemma4-assistant-mtp.md` §8: the real 12B
/// assistant's width, layer count and heads are unknown, so this is a stated guess). Everything
/// the pairing fixes (§1.1: `backbone_hidden_size` = `H_T`, `V`, per-type head dims and KV heads
/// of the target store layers, RoPE, `W`) comes from the target in [`AssistantShape::config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssistantShape {
    /// Drafter width `H_A`.
    pub n_embd: usize,
    /// MLP width `F` (every layer).
    pub n_ff: usize,
    /// Query heads `n_q` (every layer; a multiple of the KV heads of both store layers).
    pub n_head: usize,
    /// Per drafter layer: `true` = sliding (`L_A = is_swa.len()`).
    pub is_swa: Vec<bool>,
    /// Centroid head (§3): `(C, k_c)`, `C` dividing `V`; `None` = full head only.
    pub centroids: Option<(usize, usize)>,
}

impl AssistantShape {
    /// The default guess for the 12B drafter: `H_A` 1024, `F` 4096 (4·`H_A`), 8 query heads,
    /// 4 layers `[s, s, s, f]` (sliding layers first, one full layer last, as the fixture
    /// assistants' `[s, f]`, extended to 4 layers), centroid head with the Gemma-4 numbers of
    /// §3 / `tf:asst-cfg` (`C` 2048, `k_c` 32). About 354 M parameters, 76 % of them `E_A`
    /// (`262144 × 1024`).
    pub fn plausible_12b() -> AssistantShape {
        AssistantShape {
            n_embd: 1024,
            n_ff: 4096,
            n_head: 8,
            is_swa: vec![true, true, true, false],
            centroids: Some((2048, 32)),
        }
    }

    /// `n_layer` layers of width `n_embd` (`F` = 4·`n_embd`, 8 query heads), all sliding but
    /// the last (full), centroid head as [`AssistantShape::plausible_12b`].
    pub fn with_size(n_embd: usize, n_layer: usize) -> AssistantShape {
        AssistantShape {
            n_embd,
            n_ff: 4 * n_embd,
            is_swa: (0..n_layer).map(|l| l + 1 < n_layer).collect(),
            ..AssistantShape::plausible_12b()
        }
    }

    /// Layer types as a string, `s` sliding / `f` full (`"sssf"`).
    pub fn pattern(&self) -> String {
        self.is_swa
            .iter()
            .map(|&s| if s { 's' } else { 'f' })
            .collect()
    }

    /// The drafter configuration paired with `target` (§1.1, §8): `n_embd_out` = `H_T`, `V`,
    /// head dims, RoPE, `W` and `rms_eps` from the target; each layer's KV heads = those of the
    /// target store layer of its type (§2.3, [`StoreLayers`]); no soft-cap; every layer reads
    /// target K/V (`n_kv_shared = L_A`); `use_ordered_embeddings` iff a centroid head is asked.
    ///
    /// Errors ([`RuntimeError::Model`]): zero width/heads/layers, a layer type the target has no
    /// store layer of, `n_q` not a multiple of a store layer's KV heads, `C` not dividing `V`
    /// or `k_c` outside `1 ..= C`.
    pub fn config(&self, target: &Config) -> Result<AssistantConfig, RuntimeError> {
        let bad = |detail: String| RuntimeError::Model {
            what: "synthetic drafter shape".into(),
            detail,
        };
        let n = self.is_swa.len();
        if n == 0 || self.n_embd == 0 || self.n_ff == 0 || self.n_head == 0 {
            return Err(bad(format!("{self:?} has a zero dimension")));
        }
        let store = StoreLayers::of(target);
        let mut n_head_kv = Vec::with_capacity(n);
        for (l, &sliding) in self.is_swa.iter().enumerate() {
            let src = store.of_type(sliding).ok_or_else(|| {
                bad(format!(
                    "layer {l}: the target has no store layer of its type"
                ))
            })?;
            let nkv = target.n_head_kv[src];
            if nkv == 0 || !self.n_head.is_multiple_of(nkv) {
                return Err(bad(format!(
                    "layer {l}: {} query heads over {nkv} KV heads of target layer {src}",
                    self.n_head
                )));
            }
            n_head_kv.push(nkv);
        }
        if let Some((c, kc)) = self.centroids {
            if c == 0 || !target.n_vocab.is_multiple_of(c) || kc == 0 || kc > c {
                return Err(bad(format!(
                    "centroid head C {c}, k_c {kc} over V {}",
                    target.n_vocab
                )));
            }
        }
        Ok(AssistantConfig {
            n_layer: n,
            n_ctx_train: target.n_ctx_train,
            n_embd: self.n_embd,
            n_embd_out: target.n_embd,
            n_vocab: target.n_vocab,
            n_ff: vec![self.n_ff; n],
            n_head: vec![self.n_head; n],
            n_head_kv,
            is_swa: self.is_swa.clone(),
            head_dim_full: target.head_dim_full,
            head_dim_swa: target.head_dim_swa,
            rope_pairs_full: target.rope_pairs_full,
            rope_base_full: target.rope_base_full,
            rope_base_swa: target.rope_base_swa,
            rms_eps: target.rms_eps,
            sliding_window: target.sliding_window,
            n_kv_shared: n,
            final_softcap: None,
            use_ordered_embeddings: self.centroids.is_some(),
            num_centroids: self.centroids.map(|c| c.0),
            centroid_intermediate_top_k: self.centroids.map(|c| c.1),
        })
    }
}

/// Median of `v` (sorted in place; the upper median for an even length; 0 when empty).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Drafter step cost and speed-up model (`spec/gemma4-assistant-mtp.md` §2, §4.1 step 2, §7
/// `drafter_forwards`) for the target of `eng`, measured after its decode and verify timings.
///
/// Builds [`DeviceAssistant::synthetic`] of `opts` (seed fixed) for `eng`'s model, prefills `p`
/// tokens into a one-slot cache and workspace of its own (the drafter reads the store layers'
/// rows `< p`, §2.5; the carried hidden state is the final-normed last prefill row, §2.1), and
/// times `draft` rounds of `K` ∈ [`DRAFT_KS`] steps at position `p` (2 warm-ups, median of 9;
/// stream synchronized before and after each call; eager launches, no graph) with the full head
/// and, when the shape has one, the centroid head (§3; the engine computes the full head and
/// masks on the host, §3.3). Per head: `draft_step_s` = slope and `draft_round_fixed_s` =
/// intercept of the least-squares line through `(K, t_round(K))`, ÷ `step_s` (one plain decode
/// step of the same run); the speed-up model ([`speedup`]) per `K` and `α` ∈ [`ALPHAS`] with
/// `t_round = t_draft_round(K) + verify_s[K]` (`verify_s` in [`DRAFT_KS`] order) and the
/// break-even `α`.
///
/// Errors: drafter shape/pairing errors, driver/kernel errors.
pub fn draft_bench(
    eng: &CudaEngine,
    opts: &DraftOptions,
    p: usize,
    step_s: f64,
    verify_s: &[f64],
) -> Result<serde_json::Value, RuntimeError> {
    let gpu = eng.gpu();
    let model = eng.model();
    let tc = &model.config;
    let t0 = Instant::now();
    let mut asst = DeviceAssistant::synthetic(gpu, tc, &opts.shape, opts.mix, 0x5eed_d4af)?;
    gpu.sync()?;
    let gen_s = t0.elapsed().as_secs_f64();
    let p = p.max(1);
    let mut cache = KvCache::new(gpu, model, 1, p + 1)?;
    let mut ws = Workspace::new(gpu, model)?;
    let fw = Forward { gpu, model };
    let toks: Vec<u32> = (0..p)
        .map(|i| ((i * 7919 + 29) % tc.n_vocab) as u32)
        .collect();
    let top = fw.run_topk(&mut ws, &mut cache, &Row::prompt(0, &toks), 1)?;
    let x = top.first().and_then(|r| r.first()).map_or(0, |t| t.0);
    let hidden = ws.hidden_row_ptr(gpu, 0, tc.n_embd);
    let mut heads = vec![DraftHead::Full];
    if asst.has_centroid_head() {
        heads.push(DraftHead::Centroid);
    }
    let mut per_head = Vec::new();
    let mut full_step = (0.0, 0.0);
    for head in heads {
        asst.set_head(head)?;
        let mut rounds = Vec::new();
        for k in DRAFT_KS {
            for _ in 0..2 {
                asst.draft(&fw, &cache, 0, x, hidden, p, k)?;
            }
            let mut t = Vec::new();
            for _ in 0..9 {
                gpu.sync()?;
                let t0 = Instant::now();
                asst.draft(&fw, &cache, 0, x, hidden, p, k)?;
                gpu.sync()?;
                t.push(t0.elapsed().as_secs_f64());
            }
            rounds.push((k, median(&mut t)));
        }
        let (fixed, per_step) = speedup::fit_line(&rounds).unwrap_or((0.0, rounds[0].1));
        if head == DraftHead::Full {
            full_step = (per_step, per_step / step_s);
        }
        let mut model_rows = Vec::new();
        for (i, &(k, dr)) in rounds.iter().enumerate() {
            let vs = verify_s.get(i).copied().unwrap_or(f64::NAN);
            let points: Vec<serde_json::Value> = ALPHAS
                .iter()
                .map(|&a| {
                    let m = speedup::predict(a, k, dr, vs, step_s);
                    json!({"alpha": a, "expected_tokens_per_round": m.expected_tokens,
                        "round_s": m.round_s, "tok_per_s": m.tok_per_s,
                        "speedup_vs_decode": m.speedup})
                })
                .collect();
            model_rows.push(json!({
                "k": k,
                "draft_round_s": dr,
                "verify_s": vs,
                "break_even_alpha": speedup::break_even_alpha(k, dr, vs, step_s),
                "points": points,
            }));
        }
        per_head.push(json!({
            "head": match head { DraftHead::Full => "full", DraftHead::Centroid => "centroid" },
            "rounds": rounds.iter().map(|&(k, t)| json!({"k": k, "draft_round_s": t,
                "per_step_s": t / k as f64, "ratio_to_decode_step": t / step_s})).collect::<Vec<_>>(),
            "draft_step_s": per_step,
            "draft_step_ms": per_step * 1e3,
            "draft_round_fixed_s": fixed,
            "draft_step_over_target_step": per_step / step_s,
            "draft_k1_over_target_step": rounds[0].1 / step_s,
            "speedup_model": model_rows,
        }));
    }
    let c = &asst.config;
    Ok(json!({
        "shape": {
            "n_embd": c.n_embd,
            "n_ff": opts.shape.n_ff,
            "n_head": opts.shape.n_head,
            "n_layer": c.n_layer,
            "layer_types": opts.shape.pattern(),
            "n_head_kv": c.n_head_kv,
            "head_dim_swa": c.head_dim_swa,
            "head_dim_full": c.head_dim_full,
            "n_embd_out": c.n_embd_out,
            "n_vocab": c.n_vocab,
            "centroids": c.num_centroids,
            "centroid_top_k": c.centroid_intermediate_top_k,
            "source": "guess (spec/gemma4-assistant-mtp.md §8: the 12B drafter's width, layers and heads are unknown); pairing fields from the 12B target (§1.1)",
        },
        "format": opts.mix.name(),
        "weight_bytes": asst.weight_bytes,
        "store_layers": {"sliding": asst.store.sliding, "full": asst.store.full},
        "random_weights_gen_upload_s": gen_s,
        "position_p": p,
        "target_decode_step_s": step_s,
        "decode_tok_per_s": 1.0 / step_s,
        "draft_step_ms": full_step.0 * 1e3,
        "draft_step_over_target_step": full_step.1,
        "alphas": ALPHAS,
        "heads": per_head,
        "model": "i.i.d. per-draft acceptance alpha (input, not measured; Leviathan et al. 2023 eq. 1): E = (1 - alpha^(K+1)) / (1 - alpha) tokens per round; round_s = draft_round_s(K) (measured, ~ K*draft_step_s + draft_round_fixed_s) + verify_s(K) (measured above); tok_per_s = E / round_s; speedup_vs_decode = tok_per_s * decode_step_s; spec-loop host bookkeeping not included",
    }))
}

#[cfg(test)]
mod tests {
    use super::super::config_12b;
    use super::*;

    /// §8: the 12B target's store layers are 46 (sliding) and 47 (full) — the last layer is
    /// full ((47 + 1) % 6 == 0) and 46 the last sliding one ((46 + 1) % 6 != 0), no KV sharing.
    /// The default drafter pairs with it (reference `check_pairing`): backbone 3840, V 262144,
    /// sliding head dim 256 over 8 KV heads, full head dim 512 over 1 KV head, W 1024, RoPE θ
    /// 1e4 / 1e6 with 64 rotated pairs (0.25 · 512 / 2), no soft-cap, every layer reading K/V.
    #[test]
    fn default_drafter_pairs_with_the_12b_target() {
        let t = config_12b();
        let store = StoreLayers::of(&t);
        assert_eq!((store.sliding, store.full), (Some(46), Some(47)));
        assert!(store.matches_llamacpp_rule);
        let shape = AssistantShape::plausible_12b();
        assert_eq!(shape, AssistantShape::with_size(1024, 4));
        assert_eq!(shape.pattern(), "sssf");
        let c = shape.config(&t).unwrap();
        c.check_pairing(&t).unwrap();
        assert_eq!((c.n_embd, c.n_embd_out, c.n_vocab), (1024, 3840, 262_144));
        assert_eq!(c.n_head_kv, vec![8, 8, 8, 1]);
        assert_eq!((c.head_dim_swa, c.head_dim_full), (256, 512));
        assert_eq!(c.head_dim(0), 256);
        assert_eq!(c.head_dim(3), 512);
        assert_eq!(c.sliding_window, 1024);
        assert_eq!((c.rope_base_swa, c.rope_base_full), (1e4, 1e6));
        assert_eq!(c.rope_pairs_full, 64);
        assert_eq!((c.n_kv_shared, c.final_softcap), (4, None));
        assert!(c.use_ordered_embeddings);
        assert_eq!(
            (c.num_centroids, c.centroid_intermediate_top_k),
            (Some(2048), Some(32))
        );
    }

    /// 12 query heads do not group over the sliding store layer's 8 KV heads; 3000 centroids
    /// do not divide V = 262144 = 2^18; no layers is no drafter.
    #[test]
    fn drafter_shape_errors_name_the_mismatch() {
        let t = config_12b();
        let heads = AssistantShape {
            n_head: 12,
            ..AssistantShape::plausible_12b()
        };
        let e = heads.config(&t).unwrap_err().to_string();
        assert!(
            e.contains("12 query heads over 8 KV heads of target layer 46"),
            "{e}"
        );
        let cents = AssistantShape {
            centroids: Some((3000, 32)),
            ..AssistantShape::plausible_12b()
        };
        assert!(cents.config(&t).unwrap_err().to_string().contains("C 3000"));
        assert!(AssistantShape::with_size(1024, 0).config(&t).is_err());
    }
}
