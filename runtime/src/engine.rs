//! The CUDA engine with plain methods (the `suites` crate adapts it to its `Engine` trait
//! behind its `cuda` feature): greedy decoding of one sequence, a running batch of N
//! sequences, teacher-forced scoring, and raw logits rows (for diffs against the oracle).
//!
//! Selection rules are the oracle's (`reference::model::logits`): greedy = the largest logit
//! over non-suppressed ids, lowest id on exact ties (`spec/gemma4-text.md` §13.6); top-k
//! descending with lower id first on ties. Logits are f32 on the GPU, reported as f64.

use std::path::Path;

use reference::config::Config;
use reference::model::logits::top_k as select_top_k;

use crate::error::RuntimeError;
use crate::forward::{Forward, KvCache, Row, Workspace};
use crate::loader::DeviceModel;
use crate::Gpu;

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

/// The CUDA engine: device, weights, KV cache, scratch.
pub struct CudaEngine {
    gpu: Gpu,
    model: DeviceModel,
    cache: KvCache,
    ws: Workspace,
}

impl CudaEngine {
    /// Opens GPU 0, uploads the model at `path`, allocates the cache.
    ///
    /// Errors: [`RuntimeError::Unavailable`] (no GPU), model/driver errors.
    pub fn load(path: &Path, opts: EngineOptions) -> Result<CudaEngine, RuntimeError> {
        let gpu = Gpu::new(0)?;
        let model = DeviceModel::load(&gpu, path)?;
        let ctx = opts.max_ctx.min(crate::forward::MAX_CTX);
        let cache = KvCache::new(&gpu, &model, opts.slots, ctx)?;
        let ws = Workspace::new(&gpu, &model)?;
        gpu.sync()?;
        Ok(CudaEngine {
            gpu,
            model,
            cache,
            ws,
        })
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
        })
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

    /// Empties slot `s`.
    pub fn reset_slot(&mut self, s: usize) {
        if let Some(l) = self.cache.len.get_mut(s) {
            *l = 0;
        }
    }

    /// Empties every slot.
    pub fn reset(&mut self) {
        self.cache.len.iter_mut().for_each(|l| *l = 0);
    }

    /// Runs `rows` (see [`Forward::run`]) and returns the logits of the rows asking for them.
    pub fn forward(&mut self, rows: &[Row]) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let fw = Forward {
            gpu: &self.gpu,
            model: &self.model,
        };
        fw.run(&mut self.ws, &mut self.cache, rows)
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
        let n = req.prompt.len();
        let mut rows: Vec<Row> = req
            .prompt
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                slot: 0,
                token,
                logits: i + 1 == n,
            })
            .collect();
        loop {
            let lg = self.forward(&rows)?;
            let step = self.pick(&lg[0], top_k, out.len())?;
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
            let lg = self.forward(&rows)?;
            let mut keep = Vec::new();
            for (mut a, row) in active.drain(..).zip(lg) {
                let step = self.pick(&row, top_k, a.steps.len())?;
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

    /// Teacher-forced scoring: per sequence and position `t` the top-`k` of the row after
    /// `seq[..=t]` (sequences run `slots` at a time, each in one forward).
    pub fn score(
        &mut self,
        seqs: &[Vec<u32>],
        k: usize,
    ) -> Result<Vec<Vec<TopK>>, RuntimeError> {
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
