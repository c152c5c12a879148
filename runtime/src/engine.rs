//! The CUDA engine with plain methods (the `suites` crate adapts it to its `Engine` trait
//! behind its `cuda` feature): greedy decoding of one sequence, a running batch of N
//! sequences, teacher-forced scoring, and raw logits rows (for diffs against the oracle);
//! `spec:K` speculative decoding and its draft sources live in the `engine/spec.rs` submodule
//! (types re-exported here).
//!
//! Selection rules are the oracle's (`reference::model::logits`): greedy = the largest logit
//! over non-suppressed ids, lowest id on exact ties (`spec/gemma4-text.md` §13.6); top-k
//! descending with lower id first on ties. Logits are f32 on the GPU, reported as f64.

use std::path::Path;

use reference::config::{AssistantConfig, Config};
use reference::gguf::GgufFile;
use reference::model::logits::top_k as select_top_k;
use reference::model::LoadOptions;

use crate::draft::DeviceAssistant;
use crate::error::RuntimeError;
use crate::forward::{Forward, KvCache, Row, Workspace};
use crate::loader::DeviceModel;
use crate::Gpu;

mod spec;
mod spec_batch;
pub(crate) use spec::no_drafter;
pub use spec_batch::spec_batch_width;

pub use spec::{
    accept_round, Acceptance, DraftSource, ScriptRound, SpecKind, SpecRoundLog, SpecRun, SpecStep,
};

/// Capacity of a [`CudaEngine`].
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// KV slots (sequences at once): the widest batch, and the sequences scored at once.
    pub slots: usize,
    /// Positions per slot (prompt + generated tokens).
    pub max_ctx: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            slots: 4,
            max_ctx: 2048,
        }
    }
}

/// Top-k `(id, logit)` of one logits row, descending.
pub type TopK = Vec<(u32, f64)>;

/// One emitted token with the engine's top-k `(id, logit)`.
#[derive(Debug, Clone, PartialEq)]
pub struct GenStep {
    /// Emitted id.
    pub token: u32,
    /// Top-k of the row that chose it (descending, suppressed ids excluded).
    pub top_k: Vec<(u32, f64)>,
}

/// A generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Token budget.
    pub max_tokens: usize,
    /// Stop ids (emitted, then generation ends).
    pub stop: Vec<u32>,
}

/// The CUDA engine: device, weights, KV cache, scratch, optional MTP drafter.
pub struct CudaEngine {
    gpu: Gpu,
    model: DeviceModel,
    cache: KvCache,
    ws: Workspace,
    draft: Option<DeviceAssistant>,
}

impl CudaEngine {
    /// Opens GPU 0, uploads the model at `path`, allocates the cache.
    ///
    /// Errors: [`RuntimeError::Unavailable`] (no GPU), model/driver errors.
    pub fn load(path: &Path, opts: EngineOptions) -> Result<CudaEngine, RuntimeError> {
        Self::load_with(path, opts, LoadOptions::default())
    }

    /// [`CudaEngine::load`] with the model's load options (`load.allow_nonfinite` uploads a
    /// model with NaN/Inf weights, for forensic use; by default the first such weight is
    /// [`RuntimeError::NonFiniteWeight`]).
    pub fn load_with(
        path: &Path,
        opts: EngineOptions,
        load: LoadOptions,
    ) -> Result<CudaEngine, RuntimeError> {
        let gpu = Gpu::new(0)?;
        let model = DeviceModel::load_with(&gpu, path, load)?;
        Self::from_parts(gpu, model, opts)
    }

    /// [`CudaEngine::load_with`] from a model file opened by the caller and its parsed config:
    /// the file is not opened again (the `runtime` binary opens each file once, while checking
    /// its arguments, `crate::args`). The weights are checked as `load` asks
    /// ([`crate::loader::check_weights`]) before anything is uploaded.
    ///
    /// Errors: as [`CudaEngine::load_with`].
    pub fn from_gguf_with(
        file: &GgufFile,
        config: Config,
        opts: EngineOptions,
        load: LoadOptions,
    ) -> Result<CudaEngine, RuntimeError> {
        let gpu = Gpu::new(0)?;
        let model = DeviceModel::from_gguf_with(&gpu, file, config, load)?;
        Self::from_parts(gpu, model, opts)
    }

    /// An engine over an already uploaded model (benchmarks: synthetic weights).
    pub fn from_parts(
        gpu: Gpu,
        model: DeviceModel,
        opts: EngineOptions,
    ) -> Result<CudaEngine, RuntimeError> {
        let ctx = opts.max_ctx.min(crate::forward::MAX_CTX);
        let cache = KvCache::new(&gpu, &model, opts.slots, ctx)?;
        let ws = Workspace::new(&gpu, &model)?;
        gpu.sync()?;
        Ok(CudaEngine {
            gpu,
            model,
            cache,
            ws,
            draft: None,
        })
    }

    /// Drops the captured CUDA graphs: the next forward of each shape runs eagerly and the one
    /// after it is captured again (after [`crate::forward::set_skipped_kernels`]).
    pub fn drop_graphs(&mut self) {
        self.ws.drop_graphs();
    }

    /// The model's configuration.
    pub fn config(&self) -> &Config {
        &self.model.config
    }

    /// The device.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The weights on the device.
    pub fn model(&self) -> &DeviceModel {
        &self.model
    }

    /// KV slots.
    pub fn slots(&self) -> usize {
        self.cache.slots
    }

    /// Suppressed ids (sorted), excluded from greedy choice and top-k.
    pub fn suppressed_ids(&self) -> &[u32] {
        &self.model.config.suppress_tokens
    }

    /// Empties slot `s` (also clears a failed rollback).
    pub fn reset_slot(&mut self, s: usize) {
        self.cache.reset_slot(s);
    }

    /// Empties every slot.
    pub fn reset(&mut self) {
        self.cache.reset();
    }

    /// Runs `rows` (see [`Forward::run`]) and returns the logits of the rows asking for them.
    pub fn forward(&mut self, rows: &[Row]) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let fw = Forward {
            gpu: &self.gpu,
            model: &self.model,
        };
        fw.run(&mut self.ws, &mut self.cache, rows)
    }

    /// Runs `rows` and returns, per row asking for logits, its top-`k` `(id, logit)` computed
    /// on the device over the non-suppressed ids ([`Forward::run_topk`]; `1 ≤ k ≤`
    /// [`crate::forward::TOPK_MAX`]); decode/verify-shaped calls replay a captured CUDA graph.
    pub fn forward_topk(
        &mut self,
        rows: &[Row],
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, RuntimeError> {
        let fw = Forward {
            gpu: &self.gpu,
            model: &self.model,
        };
        fw.run_topk(&mut self.ws, &mut self.cache, rows, k)
    }

    /// Greedy steps of `rows` (one per row asking for logits) with the top-`top_k` of each:
    /// on the device when `top_k ≤ TOPK_MAX` (only k pairs copied back), else from the full
    /// logits rows on the host. `at`: step index of the first row (error messages).
    fn step_rows(
        &mut self,
        rows: &[Row],
        top_k: usize,
        at: usize,
    ) -> Result<Vec<GenStep>, RuntimeError> {
        let kk = top_k.max(1);
        if kk <= crate::forward::TOPK_MAX {
            let tk = self.forward_topk(rows, kk).map_err(|e| match e {
                RuntimeError::NonFinite { row } => RuntimeError::NonFinite { row: at + row },
                e => e,
            })?;
            tk.into_iter()
                .enumerate()
                .map(|(i, p)| {
                    let token = p
                        .first()
                        .map(|x| x.0)
                        .ok_or(RuntimeError::NonFinite { row: at + i })?;
                    Ok(GenStep {
                        token,
                        top_k: p.into_iter().map(|(id, v)| (id, v as f64)).collect(),
                    })
                })
                .collect()
        } else {
            let lg = self.forward(rows)?;
            lg.iter()
                .enumerate()
                .map(|(i, row)| self.pick(row, top_k, at + i))
                .collect()
        }
    }

    /// All logits rows `[seq.len(), V]` of one sequence run from an empty slot 0 in one call
    /// (chunked internally).
    pub fn logits_all(&mut self, seq: &[u32]) -> Result<Vec<Vec<f32>>, RuntimeError> {
        self.reset_slot(0);
        let rows: Vec<Row> = seq
            .iter()
            .map(|&token| Row {
                slot: 0,
                token,
                logits: true,
            })
            .collect();
        let out = self.forward(&rows);
        self.reset_slot(0);
        out
    }

    fn pick(&self, row: &[f32], k: usize, at: usize) -> Result<GenStep, RuntimeError> {
        if row.iter().any(|v| !v.is_finite()) {
            return Err(RuntimeError::NonFinite { row: at });
        }
        let r64: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let tk = select_top_k(&r64, k.max(1), self.suppressed_ids());
        let token = tk
            .first()
            .map(|x| x.0)
            .ok_or(RuntimeError::NonFinite { row: at })?;
        Ok(GenStep { token, top_k: tk })
    }

    /// Plain greedy decoding in slot 0: prefill the prompt in one forward, then one token per
    /// forward until a stop id (included) or `max_tokens`.
    pub fn greedy(&mut self, req: &GenRequest, top_k: usize) -> Result<Vec<GenStep>, RuntimeError> {
        let mut out = Vec::new();
        if req.max_tokens == 0 || req.prompt.is_empty() {
            return Ok(out);
        }
        self.reset_slot(0);
        let mut rows = Row::prompt(0, &req.prompt);
        loop {
            let step = self
                .step_rows(&rows, top_k, out.len())?
                .pop()
                .ok_or(RuntimeError::NonFinite { row: out.len() })?;
            let tok = step.token;
            out.push(step);
            if req.stop.contains(&tok) || out.len() >= req.max_tokens {
                break;
            }
            rows = vec![Row {
                slot: 0,
                token: tok,
                logits: true,
            }];
        }
        self.reset_slot(0);
        Ok(out)
    }

    /// Plain decode rows for a given continuation (row invariance, `--strict-invariance`,
    /// `design/conformance.md` §7): in slot 0, prefill `prompt` in one forward as
    /// [`CudaEngine::greedy`] does, then feed `tokens` one per forward (the decode-shaped calls
    /// plain decoding makes, CUDA-graph replay included) instead of the engine's own choices.
    /// Returns per output index `t` the top-`top_k` `(id, logit)` (descending, suppressed ids
    /// excluded) of the row on the prefix `prompt ‖ tokens[..t]`: rows `[tokens.len()]`; the
    /// last token is never fed. The calls are [`decode_row_feeds`].
    ///
    /// Errors: [`RuntimeError::Shape`] for an empty prompt with a non-empty continuation,
    /// [`RuntimeError::Capacity`] when `prompt ‖ tokens` does not fit a slot, forward/driver
    /// errors, [`RuntimeError::NonFinite`] naming the output index.
    pub fn decode_rows(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Vec<TopK>, RuntimeError> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        if prompt.is_empty() {
            return Err(RuntimeError::Shape {
                what: "decode_rows".into(),
                detail: format!(
                    "empty prompt with a continuation of {} tokens",
                    tokens.len()
                ),
            });
        }
        self.reset_slot(0);
        let mut out = Vec::with_capacity(tokens.len());
        let res = decode_row_feeds(prompt, tokens).iter().try_for_each(
            |rows| -> Result<(), RuntimeError> {
                let at = out.len();
                let st = self
                    .step_rows(rows, top_k, at)?
                    .pop()
                    .ok_or(RuntimeError::NonFinite { row: at })?;
                out.push(st.top_k);
                Ok(())
            },
        );
        self.reset_slot(0);
        res.map(|()| out)
    }

    /// Running batch of width `n` (≤ slots): each forward carries, per active sequence, its
    /// whole prompt (joining) or its last token (decoding); requests join in order as others
    /// finish. Returns the steps of every request, in request order.
    pub fn batch(
        &mut self,
        reqs: &[GenRequest],
        n: usize,
        top_k: usize,
    ) -> Result<Vec<Vec<GenStep>>, RuntimeError> {
        let n = n.min(self.cache.slots).max(1);
        struct Active {
            req: usize,
            slot: usize,
            feed: Vec<u32>,
            steps: Vec<GenStep>,
        }
        let mut done: Vec<Option<Vec<GenStep>>> = vec![None; reqs.len()];
        let mut queue: std::collections::VecDeque<usize> = (0..reqs.len()).collect();
        let mut active: Vec<Active> = Vec::new();
        let mut free: Vec<usize> = (0..n).rev().collect();
        self.reset();
        loop {
            while let Some(&slot) = free.last() {
                let Some(r) = queue.pop_front() else { break };
                if reqs[r].max_tokens == 0 || reqs[r].prompt.is_empty() {
                    done[r] = Some(Vec::new());
                    continue;
                }
                free.pop();
                self.reset_slot(slot);
                active.push(Active {
                    req: r,
                    slot,
                    feed: reqs[r].prompt.clone(),
                    steps: Vec::new(),
                });
            }
            if active.is_empty() {
                break;
            }
            let mut rows = Vec::new();
            for a in &active {
                let m = a.feed.len();
                rows.extend(a.feed.iter().enumerate().map(|(i, &token)| Row {
                    slot: a.slot,
                    token,
                    logits: i + 1 == m,
                }));
            }
            let picked = self.step_rows(&rows, top_k, 0)?;
            let mut keep = Vec::new();
            for (mut a, step) in active.drain(..).zip(picked) {
                let tok = step.token;
                a.steps.push(step);
                let req = &reqs[a.req];
                if req.stop.contains(&tok) || a.steps.len() >= req.max_tokens {
                    free.push(a.slot);
                    done[a.req] = Some(a.steps);
                } else {
                    a.feed = vec![tok];
                    keep.push(a);
                }
            }
            active = keep;
        }
        self.reset();
        Ok(done.into_iter().map(|d| d.unwrap_or_default()).collect())
    }

    /// Loads the MTP assistant at `path` for this target (`spec/gemma4-assistant-mtp.md` §1.1
    /// pairing checks; every weight checked for NaN/±Inf first). Errors: unreadable file, bad
    /// metadata, [`RuntimeError::NonFiniteWeight`], pairing mismatch, driver errors.
    pub fn load_draft(&mut self, path: &Path) -> Result<(), RuntimeError> {
        self.load_draft_with(path, LoadOptions::default())
    }

    /// [`CudaEngine::load_draft`] with the assistant's load options: its metadata is read,
    /// then its weights are checked as `load` asks before the drafter is uploaded
    /// ([`DeviceAssistant::load_with`], one open of the file).
    pub fn load_draft_with(&mut self, path: &Path, load: LoadOptions) -> Result<(), RuntimeError> {
        let d = DeviceAssistant::load_with(&self.gpu, path, &self.model, load)?;
        self.gpu.sync()?;
        self.draft = Some(d);
        Ok(())
    }

    /// [`CudaEngine::load_draft_with`] from an assistant file opened by the caller and its
    /// parsed config ([`DeviceAssistant::from_gguf_with`]: the file is not opened again).
    /// Errors: as [`CudaEngine::load_draft`], less the file's opening.
    pub fn load_draft_from(
        &mut self,
        file: &GgufFile,
        config: AssistantConfig,
        load: LoadOptions,
    ) -> Result<(), RuntimeError> {
        let d = DeviceAssistant::from_gguf_with(&self.gpu, file, config, &self.model, load)?;
        self.gpu.sync()?;
        self.draft = Some(d);
        Ok(())
    }

    /// The loaded drafter, if any.
    pub fn drafter(&self) -> Option<&DeviceAssistant> {
        self.draft.as_ref()
    }

    /// The loaded drafter, mutable (head selection).
    pub fn drafter_mut(&mut self) -> Option<&mut DeviceAssistant> {
        self.draft.as_mut()
    }

    /// Sets slot `s`'s committed length to `len` (≤ its current length): the rollback of
    /// `spec/gemma4-assistant-mtp.md` §6. Full-attention layers keep every position; sliding
    /// layers are rings of `W + CHUNK_ROWS` rows (option 1 of §6.2), so a truncate that keeps at
    /// least `high − CHUNK_ROWS − 1` positions (`high` = one past the furthest position written)
    /// is always exact — a `spec:K` round removes at most `K < CHUNK_ROWS` rows of its own
    /// verify — and leaves exactly the state plain decoding leaves (`crate::forward::kv_rows`
    /// derives the bound).
    ///
    /// Errors: [`RuntimeError::Capacity`] for a bad slot or `len` too large;
    /// [`RuntimeError::RollbackPastWindow`] (layer and positions named) when a ring no longer
    /// holds what the shorter sequence needs — the slot then refuses forwards until a
    /// reachable truncate or a reset ([`crate::forward::KvBook::truncate`]).
    pub fn truncate_slot(&mut self, s: usize, len: usize) -> Result<(), RuntimeError> {
        self.cache.truncate(s, len)
    }

    /// Committed length of slot `s`.
    pub fn slot_len(&self, s: usize) -> usize {
        self.cache.len(s)
    }

    /// Device bytes held by the KV cache (rings on sliding layers).
    pub fn kv_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Plain greedy decoding like [`CudaEngine::greedy`], also returning each emitted token's
    /// full logits row (row-invariance checks, `design/conformance.md` §7).
    pub fn greedy_with_logits(
        &mut self,
        req: &GenRequest,
        top_k: usize,
    ) -> Result<Vec<(GenStep, Vec<f32>)>, RuntimeError> {
        let mut out: Vec<(GenStep, Vec<f32>)> = Vec::new();
        if req.max_tokens == 0 || req.prompt.is_empty() {
            return Ok(out);
        }
        self.reset_slot(0);
        let mut rows = Row::prompt(0, &req.prompt);
        loop {
            let mut lg = self.forward(&rows)?;
            let row = lg.pop().unwrap_or_default();
            let step = self.pick(&row, top_k, out.len())?;
            let tok = step.token;
            out.push((step, row));
            if req.stop.contains(&tok) || out.len() >= req.max_tokens {
                break;
            }
            rows = vec![Row {
                slot: 0,
                token: tok,
                logits: true,
            }];
        }
        self.reset_slot(0);
        Ok(out)
    }

    /// Teacher-forced scoring: per sequence and position `t` the top-`k` of the row after
    /// `seq[..=t]` (sequences run `slots` at a time, each in one forward).
    pub fn score(&mut self, seqs: &[Vec<u32>], k: usize) -> Result<Vec<Vec<TopK>>, RuntimeError> {
        let mut out = Vec::with_capacity(seqs.len());
        for group in seqs.chunks(self.cache.slots) {
            self.reset();
            let mut rows = Vec::new();
            for (s, seq) in group.iter().enumerate() {
                rows.extend(seq.iter().map(|&token| Row {
                    slot: s,
                    token,
                    logits: true,
                }));
            }
            if (1..=crate::forward::TOPK_MAX).contains(&k) {
                let tk = self.forward_topk(&rows, k)?;
                let mut it = tk.into_iter();
                for seq in group {
                    out.push(
                        (0..seq.len())
                            .map(|_| {
                                it.next()
                                    .unwrap_or_default()
                                    .into_iter()
                                    .map(|(id, v)| (id, v as f64))
                                    .collect()
                            })
                            .collect(),
                    );
                }
                continue;
            }
            let lg = self.forward(&rows)?;
            let mut it = lg.into_iter();
            for seq in group {
                let mut rs = Vec::with_capacity(seq.len());
                for i in 0..seq.len() {
                    let row = it.next().unwrap_or_default();
                    if row.iter().any(|v| !v.is_finite()) {
                        return Err(RuntimeError::NonFinite { row: i });
                    }
                    let r64: Vec<f64> = row.iter().map(|&v| v as f64).collect();
                    rs.push(select_top_k(&r64, k, self.suppressed_ids()));
                }
                out.push(rs);
            }
        }
        self.reset();
        Ok(out)
    }
}

/// The forward calls of [`CudaEngine::decode_rows`] in slot 0, in order: the whole `prompt`
/// with logits on its last row, then one row per token of `tokens[..n−1]`, each with logits,
/// so that call `t` returns the row on the prefix `prompt ‖ tokens[..t]` (`n = tokens.len()`
/// calls in all, none when `tokens` is empty). This is the call sequence of
/// [`CudaEngine::greedy`] with the emitted tokens given.
pub fn decode_row_feeds(prompt: &[u32], tokens: &[u32]) -> Vec<Vec<Row>> {
    let Some((_, fed)) = tokens.split_last() else {
        return Vec::new();
    };
    let first = Row::prompt(0, prompt);
    std::iter::once(first)
        .chain(fed.iter().map(|&token| {
            vec![Row {
                slot: 0,
                token,
                logits: true,
            }]
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(token: u32, logits: bool) -> Row {
        Row {
            slot: 0,
            token,
            logits,
        }
    }

    /// Hand-derived: prompt [5, 6, 7], continuation [8, 9, 10] gives 3 rows — the prefill on
    /// [5, 6, 7] (prefix ‖ []), then 8 (prefix ‖ [8]), then 9 (prefix ‖ [8, 9]); 10 is never
    /// fed. Exactly one logits row per call, so output index t comes from call t.
    #[test]
    fn decode_row_feeds_match_plain_decoding() {
        let f = decode_row_feeds(&[5, 6, 7], &[8, 9, 10]);
        assert_eq!(
            f,
            vec![
                vec![row(5, false), row(6, false), row(7, true)],
                vec![row(8, true)],
                vec![row(9, true)],
            ]
        );
        for call in &f {
            assert_eq!(call.iter().filter(|r| r.logits).count(), 1);
            assert!(call.last().is_some_and(|r| r.logits));
        }
    }

    #[test]
    fn decode_row_feeds_edge_cases() {
        assert!(decode_row_feeds(&[5, 6], &[]).is_empty());
        assert_eq!(decode_row_feeds(&[5], &[8]), vec![vec![row(5, true)]]);
    }

    /// On a GPU with the fixtures: decode rows on the plain greedy continuation are the
    /// greedy steps' own top-k, bitwise (the same calls in the same order), and the argmax of
    /// row t is greedy token t.
    #[test]
    fn decode_rows_equal_greedy_rows_on_gpu() {
        let Some(path) = crate::testing::gpu_fixture_model("dense-target.Q4_K_M") else {
            return;
        };
        let mut e = CudaEngine::load(&path, EngineOptions::default()).unwrap();
        let req = GenRequest {
            prompt: vec![2, 16308, 16302, 16281],
            max_tokens: 12,
            stop: vec![],
        };
        let g = e.greedy(&req, 16).unwrap();
        let toks: Vec<u32> = g.iter().map(|s| s.token).collect();
        let rows = e.decode_rows(&req.prompt, &toks, 16).unwrap();
        assert_eq!(rows.len(), g.len());
        for (t, (r, s)) in rows.iter().zip(&g).enumerate() {
            assert_eq!(r, &s.top_k, "output index {t}");
        }
    }
}
