//! `spec:K` on the CUDA engine: greedy MTP speculative decoding in slot 0
//! (`spec/gemma4-assistant-mtp.md` §4.1: prefill, draft, verify, accept, rollback §6, carry),
//! with the drafts of a round from the device drafter or from a host script ([`DraftSource`]),
//! and teacher-forced drafter steps for the drafter check against the oracle (§6.3 item 5).

use super::{CudaEngine, GenRequest, GenStep};
use crate::draft::DraftStepRow;
use crate::error::RuntimeError;
use crate::forward::{Forward, Row};

/// How a `spec:K` token was produced (`design/conformance.md` §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecKind {
    /// The prefill's token.
    Prefill,
    /// A one-row decode step (budget left no room to draft).
    Decode,
    /// An accepted draft of a verify forward.
    VerifyAccepted,
    /// The bonus (target) token of a verify forward.
    VerifyBonus,
}

/// One emitted token of a `spec:K` run.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecStep {
    /// Emitted id.
    pub token: u32,
    /// Top-k of the (verify or decode) row that chose it.
    pub top_k: Vec<(u32, f64)>,
    /// Step kind.
    pub kind: SpecKind,
    /// The full logits row that chose it (only when asked for, for row-invariance checks).
    pub logits: Option<Vec<f32>>,
}

/// One verify round (`spec/gemma4-assistant-mtp.md` §7): `(p, K_r, drafts, n', last id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecRoundLog {
    /// Round position `p`.
    pub p: usize,
    /// `K_r` (verify width `K_r + 1`).
    pub k: usize,
    /// `d_1 … d_{K_r}`.
    pub drafted: Vec<u32>,
    /// `n'` (after stop/budget truncation).
    pub accepted: usize,
    /// Last emitted id of the round.
    pub bonus: u32,
    /// Whether the last emitted id is the bonus token (false when a stop id or the budget cut
    /// the round inside the accepted drafts).
    pub has_bonus: bool,
}

/// What a host-side draft script is told about one verify round: the §4.1 state before
/// step 2 (`spec/gemma4-assistant-mtp.md`).
#[derive(Debug, Clone, Copy)]
pub struct ScriptRound<'a> {
    /// 1-based verify round (plain one-row steps are not rounds).
    pub round: usize,
    /// Round position `p` (position of `t_p`, the newest committed token).
    pub p: usize,
    /// `K_r`: how many drafts the script must return.
    pub k: usize,
    /// Committed tokens `t_0 … t_p` (prompt ‖ emitted), `[p + 1]`.
    pub committed: &'a [u32],
}

/// Where a `spec:K` round takes its drafts `d_1 … d_{K_r}` (§4.1 step 2). The rest of the loop
/// (verify, accept, rollback, carry) is the same for every source.
pub enum DraftSource<'a> {
    /// The MTP drafter loaded with [`CudaEngine::load_draft`], on the device.
    Device,
    /// A host-side script, called once per verify round; it must return exactly `K_r` ids, each
    /// below the target's vocabulary size (tests of acceptance and rollback: scripted drafts that
    /// are right or wrong at chosen steps). No drafter need be loaded.
    Script(&'a mut dyn FnMut(&ScriptRound<'_>) -> Vec<u32>),
}

/// Result of a `spec:K` run.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecRun {
    /// Emitted tokens.
    pub steps: Vec<SpecStep>,
    /// Verify rounds.
    pub rounds: Vec<SpecRoundLog>,
    /// Plain one-row steps (`K_r = 0`).
    pub plain_steps: usize,
}

impl CudaEngine {
    /// [`CudaEngine::step_rows`], or with `keep` the host path that also returns each row's
    /// full logits.
    #[allow(clippy::type_complexity)]
    pub(super) fn steps_keep(
        &mut self,
        rows: &[Row],
        top_k: usize,
        at: usize,
        keep: bool,
    ) -> Result<(Vec<GenStep>, Vec<Option<Vec<f32>>>), RuntimeError> {
        if keep {
            let lg = self.forward(rows)?;
            let steps = lg
                .iter()
                .enumerate()
                .map(|(i, row)| self.pick(row, top_k, at + i))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((steps, lg.into_iter().map(Some).collect()))
        } else {
            let steps = self.step_rows(rows, top_k, at)?;
            let n = steps.len();
            Ok((steps, vec![None; n]))
        }
    }

    /// Runs `rows` (one sequence, logits on the last) and returns the pick of the last row as a
    /// step of `kind` (the prefill, or a plain decode step when no draft fits), its logits kept
    /// when `keep`. `at` is the step index the pick reports errors at.
    ///
    /// Errors: forward errors; [`RuntimeError::NonFinite`] at `at` when no step came back.
    pub(super) fn plain_step(
        &mut self,
        rows: &[Row],
        top_k: usize,
        at: usize,
        keep: bool,
        kind: SpecKind,
    ) -> Result<SpecStep, RuntimeError> {
        let (mut sts, mut lgs) = self.steps_keep(rows, top_k, at, keep)?;
        let st = sts.pop().ok_or(RuntimeError::NonFinite { row: at })?;
        Ok(SpecStep {
            token: st.token,
            top_k: st.top_k,
            kind,
            logits: lgs.pop().flatten(),
        })
    }

    /// Checks that `slot` holds exactly the `p` committed positions a round at position `p`
    /// starts from (§4.1: rows `< p`; a verify forward then writes `p …`).
    ///
    /// Errors: [`RuntimeError::Capacity`] naming the slot, its length and `p`.
    pub(super) fn check_round_start(&self, slot: usize, p: usize) -> Result<(), RuntimeError> {
        if self.cache.len(slot) != p {
            return Err(RuntimeError::Capacity(format!(
                "slot {slot} holds {} positions at round position {p}",
                self.cache.len(slot)
            )));
        }
        Ok(())
    }

    /// The loaded drafter's `k` drafts for `slot` at round position `p` from token `x` and the
    /// carried hidden state at device address `hidden` ([`crate::draft::DeviceAssistant::draft`]).
    ///
    /// Errors: no drafter loaded ([`no_drafter`] naming `what`), the drafter's errors.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn device_draft(
        &mut self,
        what: &str,
        slot: usize,
        x: u32,
        hidden: u64,
        p: usize,
        k: usize,
    ) -> Result<Vec<u32>, RuntimeError> {
        let fw = Forward {
            gpu: &self.gpu,
            model: &self.model,
        };
        let d = self.draft.as_mut().ok_or_else(|| no_drafter(what))?;
        d.draft(&fw, &self.cache, slot, x, hidden, p, k)
    }

    /// Teacher-forced drafter steps for the drafter check (`spec/gemma4-assistant-mtp.md` §6.3
    /// item 5, §5 last point): in slot 0, prefill `prefix` (`t_0 … t_{p−1}`, one forward as
    /// [`CudaEngine::greedy`] does), then run `inputs.len()` drafter steps at the round position
    /// `p = prefix.len()` from the carried hidden state of row `p−1` (§2.1), embedding
    /// `inputs[i]` at step `i + 1` instead of the drafter's own previous pick (`inputs[0]` is
    /// `t_p`). Returns each step's full-head logits, `g'` and the drafter's own pick
    /// ([`DraftStepRow`]); the slot is reset afterwards.
    ///
    /// Errors: no drafter loaded, empty `prefix`, `inputs.len()` outside
    /// `1 ..= draft::MAX_DRAFT`, ids `≥ V`, forward/driver errors.
    pub fn draft_teacher_forced(
        &mut self,
        prefix: &[u32],
        inputs: &[u32],
    ) -> Result<Vec<DraftStepRow>, RuntimeError> {
        if prefix.is_empty() {
            return Err(RuntimeError::Shape {
                what: "draft_teacher_forced".into(),
                detail: "empty prefix (the drafter needs p ≥ 1)".into(),
            });
        }
        let h = self.model.config.n_embd;
        self.reset_slot(0);
        let res = self.forward(&Row::prompt(0, prefix)).and_then(|_| {
            let hid = self.ws.hidden_row_ptr(&self.gpu, 0, h);
            let fw = Forward {
                gpu: &self.gpu,
                model: &self.model,
            };
            let d = self
                .draft
                .as_mut()
                .ok_or_else(|| no_drafter("draft_teacher_forced"))?;
            d.draft_forced(&fw, &self.cache, 0, inputs, hid, prefix.len())
        });
        self.reset_slot(0);
        res
    }

    /// Greedy MTP speculative decoding `spec:K` in slot 0 (`spec/gemma4-assistant-mtp.md` §4.1):
    /// prefill (emit its argmax, carry the last row's final-normed hidden state); per round
    /// `K_r = min(K, remaining − 1)` drafts on the GPU at the constant position `p` (a plain
    /// one-row step when `K_r = 0`), one target verify forward over `[t_p, d_1 … d_{K_r}]`,
    /// accept the longest prefix with `d_i = a_{i−1}` plus the bonus `a_n`, truncate after the
    /// first stop id and to the budget, roll the cache back to `p + n' + 1` positions, carry the
    /// hidden state of verify row `n'` (it stays on the device). `keep_logits` keeps each emitted
    /// token's full logits row in [`SpecStep::logits`].
    ///
    /// Errors: no drafter loaded, `k` outside `1 ..= draft::MAX_DRAFT`, forward/driver errors,
    /// non-finite logits.
    pub fn spec(
        &mut self,
        req: &GenRequest,
        k: usize,
        top_k: usize,
        keep_logits: bool,
    ) -> Result<SpecRun, RuntimeError> {
        self.spec_with(req, k, top_k, keep_logits, DraftSource::Device)
    }

    /// [`CudaEngine::spec`] with the drafts of every round taken from `source`: the device
    /// drafter, or a host script ([`DraftSource::Script`], called with the round's
    /// [`ScriptRound`]; then no drafter need be loaded). One loop for both sources.
    ///
    /// Errors: as [`CudaEngine::spec`] (no drafter only for [`DraftSource::Device`]);
    /// [`RuntimeError::Shape`] when a script returns a number of drafts other than `K_r`, and
    /// [`RuntimeError::TokenOutOfRange`] for a scripted id `≥ V` (row = draft index, 0-based).
    pub fn spec_with(
        &mut self,
        req: &GenRequest,
        k: usize,
        top_k: usize,
        keep_logits: bool,
        mut source: DraftSource<'_>,
    ) -> Result<SpecRun, RuntimeError> {
        if matches!(source, DraftSource::Device) && self.draft.is_none() {
            return Err(no_drafter("spec:K"));
        }
        if k == 0 || k > crate::draft::MAX_DRAFT || k + 1 > crate::forward::CHUNK_ROWS {
            return Err(RuntimeError::Capacity(format!(
                "spec:{k} (1 ≤ K ≤ {})",
                crate::draft::MAX_DRAFT
            )));
        }
        let mut run = SpecRun {
            steps: Vec::new(),
            rounds: Vec::new(),
            plain_steps: 0,
        };
        if req.max_tokens == 0 || req.prompt.is_empty() {
            return Ok(run);
        }
        let h = self.model.config.n_embd;
        self.reset_slot(0);
        let rows = Row::prompt(0, &req.prompt);
        let st = self.plain_step(&rows, top_k, 0, keep_logits, SpecKind::Prefill)?;
        let mut committed = req.prompt.clone();
        committed.push(st.token);
        run.steps.push(st);
        // Row of the workspace's hidden states that holds the carried `h`.
        let mut hidden_row = 0usize;
        let done = |steps: &[SpecStep]| {
            steps.len() >= req.max_tokens
                || steps.last().is_some_and(|s| req.stop.contains(&s.token))
        };
        while !done(&run.steps) {
            let p = committed.len() - 1;
            let remaining = req.max_tokens - run.steps.len();
            let k_r = k.min(remaining - 1);
            let t_p = committed[p];
            if k_r == 0 {
                let row = Row {
                    slot: 0,
                    token: t_p,
                    logits: true,
                };
                let st = self.plain_step(
                    &[row],
                    top_k,
                    run.steps.len(),
                    keep_logits,
                    SpecKind::Decode,
                )?;
                committed.push(st.token);
                run.steps.push(st);
                run.plain_steps += 1;
                hidden_row = 0;
                continue;
            }
            self.check_round_start(0, p)?;
            let drafts = match &mut source {
                DraftSource::Device => {
                    let hid = self.ws.hidden_row_ptr(&self.gpu, hidden_row, h);
                    self.device_draft("spec:K", 0, t_p, hid, p, k_r)?
                }
                DraftSource::Script(script) => {
                    let d = script(&ScriptRound {
                        round: run.rounds.len() + 1,
                        p,
                        k: k_r,
                        committed: &committed,
                    });
                    check_script_drafts(&d, k_r, self.model.config.n_vocab, p)?;
                    d
                }
            };
            let mut rows = vec![Row {
                slot: 0,
                token: t_p,
                logits: true,
            }];
            rows.extend(drafts.iter().map(|&token| Row {
                slot: 0,
                token,
                logits: true,
            }));
            let (all, lg) = self.steps_keep(&rows, top_k, run.steps.len(), keep_logits)?;
            let n_acc = commit_round(&mut run, &mut committed, p, drafts, all, lg, req, remaining);
            self.truncate_slot(0, p + n_acc + 1)?;
            hidden_row = n_acc;
        }
        self.reset_slot(0);
        Ok(run)
    }
}

/// The typed error of a drafter call with no drafter loaded (`what`: the caller).
pub(crate) fn no_drafter(what: &str) -> RuntimeError {
    RuntimeError::Model {
        what: what.into(),
        detail: "no draft model loaded".into(),
    }
}

/// How one verify round ends (§4.1 steps 4–5): `emit` rows `0 … emit−1` of the verify forward
/// are emitted (`n' = emit − 1` accepted drafts plus the last one), `n_raw` drafts agreed with
/// the target before any stop/budget cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acceptance {
    /// Verify rows emitted, `1 ≤ emit ≤ K_r + 1`.
    pub emit: usize,
    /// The longest prefix of drafts with `d_{i+1} = a_i`.
    pub n_raw: usize,
}

/// Greedy acceptance of one round: `picks[i]` = `a_i`, the target's choice at verify row `i`
/// (`picks.len() = drafts.len() + 1`); accept the longest prefix with `drafts[i] = a_i` plus the
/// next row's `a`, cut after the first stop id and to `remaining` (≥ 1) tokens.
pub fn accept_round(drafts: &[u32], picks: &[u32], stop: &[u32], remaining: usize) -> Acceptance {
    let n_raw = drafts.iter().zip(picks).take_while(|(d, a)| d == a).count();
    let mut emit = (n_raw + 1).min(picks.len());
    if let Some(i) = picks[..emit].iter().position(|t| stop.contains(t)) {
        emit = i + 1;
    }
    Acceptance {
        emit: emit.min(remaining.max(1)),
        n_raw,
    }
}

/// Applies a verify round to `run`: [`accept_round`] over the verify rows' picks `all`
/// (`lg`: their kept logits rows), pushes the emitted steps (kinds, logits) to `run` and
/// `committed`, and logs the round. Returns `n'` (accepted drafts after the cuts); the caller
/// rolls the cache back to `p + n' + 1` and carries the hidden state of verify row `n'`.
#[allow(clippy::too_many_arguments)]
pub(super) fn commit_round(
    run: &mut SpecRun,
    committed: &mut Vec<u32>,
    p: usize,
    drafts: Vec<u32>,
    all: Vec<GenStep>,
    mut lg: Vec<Option<Vec<f32>>>,
    req: &GenRequest,
    remaining: usize,
) -> usize {
    let picks: Vec<u32> = all.iter().map(|s| s.token).collect();
    let acc = accept_round(&drafts, &picks, &req.stop, remaining);
    let n_acc = acc.emit - 1;
    for (r, st) in all.into_iter().take(acc.emit).enumerate() {
        committed.push(st.token);
        run.steps.push(SpecStep {
            token: st.token,
            top_k: st.top_k,
            kind: if r < acc.n_raw {
                SpecKind::VerifyAccepted
            } else {
                SpecKind::VerifyBonus
            },
            logits: lg.get_mut(r).and_then(Option::take),
        });
    }
    let last = run.steps.last().map_or(0, |s| s.token);
    run.rounds.push(SpecRoundLog {
        p,
        k: drafts.len(),
        drafted: drafts,
        accepted: n_acc,
        bonus: last,
        has_bonus: n_acc == acc.n_raw,
    });
    n_acc
}

/// Checks a scripted round's drafts: exactly `k_r` ids, each `< vocab` (`p`: round position,
/// named in the error).
fn check_script_drafts(d: &[u32], k_r: usize, vocab: usize, p: usize) -> Result<(), RuntimeError> {
    if d.len() != k_r {
        return Err(RuntimeError::Shape {
            what: "scripted drafts".into(),
            detail: format!(
                "{} drafts for the round at position {p}, K_r = {k_r}",
                d.len()
            ),
        });
    }
    match d.iter().position(|&t| t as usize >= vocab) {
        Some(i) => Err(RuntimeError::TokenOutOfRange {
            row: i,
            token: d[i],
            vocab,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Acceptance derived by hand (drafts d, target picks a, stop ids, budget):
    /// - d = [5, 6, 7], a = [5, 6, 9, 4]: d1 = a0, d2 = a1, d3 ≠ a2 → 2 accepted + bonus a2 → 3 rows;
    /// - all agree, a = [5, 6, 7, 8] → 3 + bonus → 4 rows;
    /// - first draft wrong → only a0 (the bonus) → 1 row;
    /// - stop id 6 at row 1 → cut after it → 2 rows (n_raw still 2);
    /// - budget 2 with 3 agreeing drafts → 2 rows.
    #[test]
    fn acceptance_hand_cases() {
        let a = |d: &[u32], p: &[u32], stop: &[u32], rem: usize| accept_round(d, p, stop, rem);
        assert_eq!(
            a(&[5, 6, 7], &[5, 6, 9, 4], &[], 9),
            Acceptance { emit: 3, n_raw: 2 }
        );
        assert_eq!(
            a(&[5, 6, 7], &[5, 6, 7, 8], &[], 9),
            Acceptance { emit: 4, n_raw: 3 }
        );
        assert_eq!(
            a(&[5, 6, 7], &[1, 6, 7, 8], &[], 9),
            Acceptance { emit: 1, n_raw: 0 }
        );
        assert_eq!(
            a(&[5, 6, 7], &[5, 6, 9, 4], &[6], 9),
            Acceptance { emit: 2, n_raw: 2 }
        );
        assert_eq!(
            a(&[5, 6, 7], &[5, 6, 7, 8], &[], 2),
            Acceptance { emit: 2, n_raw: 3 }
        );
    }

    /// A script must return exactly K_r ids below V: 3 ids for K_r = 3, V = 10 pass; 2 ids is a
    /// shape error; id 10 at draft index 1 is out of range, named with its index.
    #[test]
    fn scripted_drafts_are_checked_for_count_and_range() {
        assert!(check_script_drafts(&[1, 2, 9], 3, 10, 5).is_ok());
        assert!(matches!(
            check_script_drafts(&[1, 2], 3, 10, 5),
            Err(RuntimeError::Shape { .. })
        ));
        assert!(matches!(
            check_script_drafts(&[1, 10, 2], 3, 10, 5),
            Err(RuntimeError::TokenOutOfRange {
                row: 1,
                token: 10,
                vocab: 10
            })
        ));
    }
}
