//! `spec:K` for several sequences at once (issue 6: "works with `batch:N`"): each round drafts
//! `K_r` tokens per active sequence with the device drafter (one sequence after the other, each
//! in its own KV slot), then **one** target verify forward carries the verify rows of every
//! active sequence; acceptance, rollback and the carried hidden state are per sequence
//! (`spec/gemma4-assistant-mtp.md` §4.1, §6). Requests join as others finish (continuous
//! batching, as [`CudaEngine::batch`]). Every row's numbers are independent of the other rows of
//! a forward (`forward.rs`), so each sequence's output equals its own [`CudaEngine::spec`] run.

use cudarc::driver::CudaSlice;

use super::spec::{commit_round, no_drafter, SpecKind, SpecRun, SpecStep};
use super::{CudaEngine, GenRequest};
use crate::error::{drv, RuntimeError};
use crate::forward::{ptr, Row, CHUNK_ROWS};

/// One sequence being decoded.
struct Active {
    req: usize,
    slot: usize,
    committed: Vec<u32>,
    run: SpecRun,
}

/// How many sequences speculate at once for `spec:k` with `n` requested: at most the cache's
/// slots and as many as fit one verify forward of `k + 1` rows each (≤ [`CHUNK_ROWS`] rows, so
/// every carried hidden state is in the forward's last chunk); at least 1.
pub fn spec_batch_width(n: usize, k: usize, slots: usize) -> usize {
    n.min(slots).min(CHUNK_ROWS / (k + 1)).max(1)
}

impl CudaEngine {
    /// Greedy `spec:K` over `reqs`, up to [`spec_batch_width`]`(n, k, slots)` sequences at
    /// once (continuous batching): per sequence the same tokens, rounds and rows as
    /// [`CudaEngine::spec`] on it alone. Joining prompts are prefilled one per forward (the
    /// carried hidden state of each is copied aside); every round's verify rows of all active
    /// sequences go through one forward. Returns one [`SpecRun`] per request, in order.
    ///
    /// Errors: no drafter loaded, `k` outside `1 ..= draft::MAX_DRAFT`, forward/driver
    /// errors, non-finite logits.
    pub fn spec_batch(
        &mut self,
        reqs: &[GenRequest],
        n: usize,
        k: usize,
        top_k: usize,
        keep_logits: bool,
    ) -> Result<Vec<SpecRun>, RuntimeError> {
        if self.draft.is_none() {
            return Err(no_drafter("spec:K batch"));
        }
        if k == 0 || k > crate::draft::MAX_DRAFT || k + 1 > CHUNK_ROWS {
            return Err(RuntimeError::Capacity(format!(
                "spec:{k} (1 ≤ K ≤ {})",
                crate::draft::MAX_DRAFT
            )));
        }
        let width = spec_batch_width(n, k, self.cache.slots);
        let h = self.model.config.n_embd;
        // Carried hidden state per slot (`[width, H]`).
        let mut carried: CudaSlice<f32> = self
            .gpu
            .stream
            .alloc_zeros::<f32>(width * h)
            .map_err(drv("alloc carried hidden"))?;
        let empty = || SpecRun {
            steps: Vec::new(),
            rounds: Vec::new(),
            plain_steps: 0,
        };
        let mut out: Vec<Option<SpecRun>> = vec![None; reqs.len()];
        let mut queue: std::collections::VecDeque<usize> = (0..reqs.len()).collect();
        let mut active: Vec<Active> = Vec::new();
        let mut free: Vec<usize> = (0..width).rev().collect();
        let done = |a: &Active, req: &GenRequest| {
            a.run.steps.len() >= req.max_tokens
                || a.run
                    .steps
                    .last()
                    .is_some_and(|s| req.stop.contains(&s.token))
        };
        self.reset();
        loop {
            // Join: prefill each new request in its own forward, emit its argmax, keep its h.
            while let Some(&slot) = free.last() {
                let Some(r) = queue.pop_front() else { break };
                let req = &reqs[r];
                if req.max_tokens == 0 || req.prompt.is_empty() {
                    out[r] = Some(empty());
                    continue;
                }
                free.pop();
                self.reset_slot(slot);
                let rows = Row::prompt(slot, &req.prompt);
                let st = self.plain_step(&rows, top_k, 0, keep_logits, SpecKind::Prefill)?;
                self.ws
                    .copy_hidden_row(&self.gpu, 0, h, &mut carried, slot)?;
                let mut a = Active {
                    req: r,
                    slot,
                    committed: req.prompt.clone(),
                    run: empty(),
                };
                a.committed.push(st.token);
                a.run.steps.push(st);
                if done(&a, req) {
                    self.reset_slot(slot);
                    free.push(slot);
                    out[r] = Some(a.run);
                } else {
                    active.push(a);
                }
            }
            if active.is_empty() {
                // Every free slot took a request or finished it, so nothing can be queued here.
                if let Some(&r) = queue.front() {
                    return Err(RuntimeError::Capacity(format!(
                        "spec batch: request {r} still queued with no active sequence"
                    )));
                }
                break;
            }
            // Draft per sequence, then one verify forward over every sequence's rows.
            let mut rows = Vec::new();
            let mut plan = Vec::with_capacity(active.len());
            for a in &active {
                let req = &reqs[a.req];
                let p = a.committed.len() - 1;
                let k_r = k.min(req.max_tokens - a.run.steps.len() - 1);
                let t_p = a.committed[p];
                self.check_round_start(a.slot, p)?;
                let drafts = if k_r == 0 {
                    Vec::new()
                } else {
                    let hid = ptr(&self.gpu, &carried) + (a.slot * h * 4) as u64;
                    self.device_draft("spec:K batch", a.slot, t_p, hid, p, k_r)?
                };
                let first = rows.len();
                rows.extend(
                    std::iter::once(t_p)
                        .chain(drafts.iter().copied())
                        .map(|token| Row {
                            slot: a.slot,
                            token,
                            logits: true,
                        }),
                );
                plan.push((first, p, drafts));
            }
            let (all, lg) = self.steps_keep(&rows, top_k, 0, keep_logits)?;
            let mut all = all.into_iter();
            let mut lg = lg.into_iter();
            let mut keep = Vec::new();
            for (mut a, (first, p, drafts)) in active.drain(..).zip(plan) {
                let req = &reqs[a.req];
                let width_rows = drafts.len() + 1;
                let a_rows: Vec<_> = all.by_ref().take(width_rows).collect();
                let a_lg: Vec<_> = lg.by_ref().take(width_rows).collect();
                let remaining = req.max_tokens - a.run.steps.len();
                let n_acc = if drafts.is_empty() {
                    // A plain one-row step (K_r = 0).
                    let st = a_rows
                        .into_iter()
                        .next()
                        .ok_or(RuntimeError::NonFinite { row: first })?;
                    a.committed.push(st.token);
                    a.run.steps.push(SpecStep {
                        token: st.token,
                        top_k: st.top_k,
                        kind: SpecKind::Decode,
                        logits: a_lg.into_iter().next().flatten(),
                    });
                    a.run.plain_steps += 1;
                    0
                } else {
                    commit_round(
                        &mut a.run,
                        &mut a.committed,
                        p,
                        drafts,
                        a_rows,
                        a_lg,
                        req,
                        remaining,
                    )
                };
                self.truncate_slot(a.slot, p + n_acc + 1)?;
                self.ws
                    .copy_hidden_row(&self.gpu, first + n_acc, h, &mut carried, a.slot)?;
                if done(&a, req) {
                    self.reset_slot(a.slot);
                    free.push(a.slot);
                    out[a.req] = Some(a.run);
                } else {
                    keep.push(a);
                }
            }
            active = keep;
        }
        self.reset();
        Ok(out.into_iter().map(|r| r.unwrap_or_else(empty)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-derived: 32 verify rows per forward; spec:4 → 5 rows a sequence → 6 sequences;
    /// spec:1 → 16, capped by 8 slots; spec:16 → 17 rows → 1; n = 3 requested → 3; never 0.
    #[test]
    fn batch_width() {
        assert_eq!(CHUNK_ROWS, 32);
        assert_eq!(spec_batch_width(8, 4, 8), 6);
        assert_eq!(spec_batch_width(16, 1, 8), 8);
        assert_eq!(spec_batch_width(8, 16, 8), 1);
        assert_eq!(spec_batch_width(3, 2, 8), 3);
        assert_eq!(spec_batch_width(0, 2, 8), 1);
    }

    /// On a GPU with the fixtures: five requests (budgets 40, 25, 0, 1, 7; one with a stop id)
    /// on two slots, so requests join as others finish (spec:2, dense pair), give each the ids,
    /// rounds and logits rows of its own `spec` run, bitwise; and the device top-k path (no
    /// logits kept) the same ids and rounds.
    #[test]
    fn batched_spec_equals_single_on_gpu() {
        let Some(target) = crate::testing::gpu_fixture_model("dense-target.Q4_K_M") else {
            return;
        };
        let Some(draft) = crate::testing::gpu_fixture_model("dense-assistant.F32") else {
            return;
        };
        let mut e = CudaEngine::load(
            &target,
            crate::engine::EngineOptions {
                slots: 2,
                max_ctx: 256,
            },
        )
        .unwrap();
        e.load_draft(&draft).unwrap();
        let req = |prompt: Vec<u32>, max_tokens: usize, stop: Vec<u32>| GenRequest {
            prompt,
            max_tokens,
            stop,
        };
        let reqs = vec![
            req(vec![2, 16308, 16302], 40, Vec::new()),
            req(vec![2, 100, 200, 300, 400], 25, vec![1]),
            req(vec![2, 7], 0, Vec::new()),
            req(vec![2, 7], 1, Vec::new()),
            req(vec![2, 9, 11], 7, Vec::new()),
        ];
        let single: Vec<SpecRun> = reqs
            .iter()
            .map(|r| e.spec(r, 2, 4, true).unwrap())
            .collect();
        let batched = e.spec_batch(&reqs, 2, 2, 4, true).unwrap();
        let fast = e.spec_batch(&reqs, 2, 2, 4, false).unwrap();
        assert_eq!(batched.len(), reqs.len());
        for (i, ((s, b), f)) in single.iter().zip(&batched).zip(&fast).enumerate() {
            let ids = |r: &SpecRun| r.steps.iter().map(|x| x.token).collect::<Vec<_>>();
            assert_eq!(ids(s), ids(b), "request {i}: ids");
            assert_eq!(s.rounds, b.rounds, "request {i}: rounds");
            assert_eq!(s.plain_steps, b.plain_steps, "request {i}: plain steps");
            let same_rows = s
                .steps
                .iter()
                .zip(&b.steps)
                .filter(|(x, y)| x.logits == y.logits && x.logits.is_some())
                .count();
            assert_eq!(same_rows, s.steps.len(), "request {i}: logits rows");
            assert_eq!(ids(s), ids(f), "request {i}: ids on the device top-k path");
            assert_eq!(
                s.rounds, f.rounds,
                "request {i}: rounds on the device top-k path"
            );
        }
    }
}
