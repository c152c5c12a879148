//! Scripted-rollback check of the CUDA `spec:K` loop (`spec/gemma4-assistant-mtp.md` §4.1
//! steps 4–6, §6, §6.3 checks 1, 2, 8; issue 6): the drafts come from a host script
//! ([`DraftSource::Script`]) instead of the drafter, so acceptance, partial acceptance and
//! rollback are exercised at chosen steps even on fixture models whose real drafter is random.
//!
//! The golden continuation is the engine's own plain greedy output (stop ids off, so the budget
//! is always reached; the suppressed-id rule is the engine's, so a correct draft is never a
//! suppressed id). For each `K` and each draft step `j ∈ 1 ..= K` the script proposes the golden
//! continuation with draft `j` replaced by a wrong id in **every** round — each round then
//! accepts exactly `min(j − 1, K_r)` drafts and rolls back `K_r − n'` verify rows — plus one
//! all-correct script (every draft accepted). The run must emit the plain ids, follow the round
//! plan of [`planned_rounds`] exactly, and every emitted token's verify/decode row must equal
//! the plain decode row of the same prefix bit for bit (`design/conformance.md` §7). Rejections
//! are counted before the sliding window fills (`p + K_r < W`), after it (`p ≥ W`) and across a
//! wrap of the engine's sliding ring (`W + CHUNK_ROWS` rows).

use reference::spec::ScriptStep;
use serde_json::json;

use crate::engine::{CudaEngine, DraftSource, GenRequest, ScriptRound, SpecRun};
use crate::error::RuntimeError;

/// The wrong draft put in place of the golden id `right`: the next id after it (cyclically over
/// `0 … vocab−1`) that is not suppressed, so the rejection is decided by the target's argmax and
/// not by the suppression rule. Returns `right` itself only when no other id qualifies.
pub fn wrong_id(right: u32, vocab: usize, suppressed: &[u32]) -> u32 {
    let v = vocab.max(1) as u64;
    (1..v)
        .map(|d| ((right as u64 + d) % v) as u32)
        .find(|c| !suppressed.contains(c))
        .unwrap_or(right)
}

/// Drafts of one scripted round, as the oracle's `reference::spec::ScriptedDrafter` makes
/// them: `d_i = rule(step)` where the rule decides, else `golden[p + i]` (0 past its end), for
/// `i = 1 … K_r`; `golden` = prompt ‖ plain greedy ids, so an unreplaced draft is always the
/// target's own choice.
pub fn scripted_drafts(
    golden: &[u32],
    r: &ScriptRound<'_>,
    rule: &dyn Fn(ScriptStep) -> Option<u32>,
) -> Vec<u32> {
    (1..=r.k)
        .map(|i| {
            let step = ScriptStep {
                round: r.round,
                p: r.p,
                i,
                k: r.k,
            };
            rule(step).unwrap_or_else(|| golden.get(r.p + i).copied().unwrap_or(0))
        })
        .collect()
}

/// The round structure `spec:K` must follow for a budget of `n_tokens` (no stop ids) when every
/// round's draft `wrong_at` is wrong (`None`: all drafts right): per verify round `(K_r, n')`,
/// and the number of plain one-row steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    /// `(K_r, n')` per verify round.
    pub rounds: Vec<(usize, usize)>,
    /// Plain steps (`K_r = 0`).
    pub plain_steps: usize,
}

/// §4.1 bookkeeping without the model: the prefill emits 1 token; while fewer than `n_tokens`
/// are emitted, `K_r = min(K, remaining − 1)` (a plain step when 0), `n' = min(j − 1, K_r)` for
/// `wrong_at = Some(j)` (drafts `1 … j−1` are the target's choices, draft `j` is not; with
/// `j > K_r` every draft is right) or `K_r` for `None`, and the round emits `n' + 1` tokens.
/// The bonus always fits: `n' + 1 ≤ K_r + 1 ≤ remaining`.
pub fn planned_rounds(n_tokens: usize, k: usize, wrong_at: Option<usize>) -> RoundPlan {
    let mut plan = RoundPlan {
        rounds: Vec::new(),
        plain_steps: 0,
    };
    if n_tokens == 0 {
        return plan;
    }
    let mut emitted = 1;
    while emitted < n_tokens {
        let k_r = k.min(n_tokens - emitted - 1);
        if k_r == 0 {
            plan.plain_steps += 1;
            emitted += 1;
            continue;
        }
        let acc = wrong_at.map_or(k_r, |j| j.saturating_sub(1).min(k_r));
        plan.rounds.push((k_r, acc));
        emitted += acc + 1;
    }
    plan
}

/// Where a round's rejected verify rows lie relative to the sliding window `w` and the ring of
/// `ring` rows: `(before the window fills, after it filled, across a ring wrap)` for a round at
/// `p` with `K_r = k_r`. `before`: all verify rows below `w` (`p + K_r < w`); `after`: `p ≥ w`;
/// `wrap`: the verify rows `p … p+K_r` cross a multiple of `ring` after the ring filled once.
pub fn rejection_zone(p: usize, k_r: usize, w: usize, ring: usize) -> (bool, bool, bool) {
    let wrap = ring > 0 && p + k_r >= ring && p / ring != (p + k_r) / ring;
    (p + k_r < w, p >= w, wrap)
}

/// Bitwise comparison of emitted rows: `(rows compared, bitwise-equal rows, max |Δ|)` over the
/// common length of `a` (spec rows, `None` = not kept) and `b` (plain rows).
fn compare_rows(a: &SpecRun, b: &[Vec<f32>]) -> (usize, usize, f64) {
    let (mut n, mut eq, mut md) = (0usize, 0usize, 0f64);
    for (st, pl) in a.steps.iter().zip(b) {
        let Some(row) = &st.logits else { continue };
        n += 1;
        let mut same = row.len() == pl.len();
        for (x, y) in row.iter().zip(pl) {
            if x.to_bits() != y.to_bits() {
                same = false;
                let d = (*x as f64 - *y as f64).abs();
                md = if d.is_nan() { f64::INFINITY } else { md.max(d) };
            }
        }
        eq += usize::from(same);
    }
    (n, eq, md)
}

/// Runs the scripted-rollback check on one prompt: plain greedy (`n_tokens`, no stop ids) as
/// the golden continuation, then for each `k` in `ks` the scripts wrong at `j = 1 … k` and the
/// all-correct one. `w`/`ring`: the target's sliding window and the engine's ring rows
/// (coverage counts only). Returns the JSON record (`"ok"`: every run as planned, ids equal,
/// rows bitwise equal).
///
/// Errors: plain decoding fails (a failing `spec:K` run is recorded in the JSON as not ok).
pub fn check_prompt(
    eng: &mut CudaEngine,
    prompt: &[u32],
    n_tokens: usize,
    ks: &[usize],
    w: usize,
    ring: usize,
) -> Result<serde_json::Value, RuntimeError> {
    let req = GenRequest {
        prompt: prompt.to_vec(),
        max_tokens: n_tokens,
        stop: Vec::new(),
    };
    let plain = eng.greedy_with_logits(&req, 16)?;
    let plain_ids: Vec<u32> = plain.iter().map(|s| s.0.token).collect();
    let plain_rows: Vec<Vec<f32>> = plain.into_iter().map(|s| s.1).collect();
    let mut golden = prompt.to_vec();
    golden.extend_from_slice(&plain_ids);
    let vocab = eng.config().n_vocab;
    let suppressed = eng.suppressed_ids().to_vec();
    let mut ok = plain_ids.len() == n_tokens;
    let (mut rows_all, mut eq_all, mut md_all) = (0usize, 0usize, 0f64);
    let mut cover = [0usize; 3];
    let mut runs = Vec::new();
    for &k in ks {
        let cases = (1..=k).map(Some).chain(std::iter::once(None));
        for wrong_at in cases {
            let g = golden.clone();
            let sup = suppressed.clone();
            let rule = move |s: ScriptStep| {
                (Some(s.i) == wrong_at).then(|| {
                    let right = g.get(s.p + s.i).copied().unwrap_or(0);
                    wrong_id(right, vocab, &sup)
                })
            };
            let mut script = |r: &ScriptRound<'_>| scripted_drafts(&golden, r, &rule);
            let res = eng.spec_with(&req, k, 16, true, DraftSource::Script(&mut script));
            let run = match res {
                Ok(run) => run,
                Err(e) => {
                    eng.reset_slot(0);
                    ok = false;
                    runs.push(json!({"k": k, "wrong_at": wrong_at, "run_ok": false,
                        "error": e.to_string()}));
                    continue;
                }
            };
            let ids: Vec<u32> = run.steps.iter().map(|s| s.token).collect();
            let plan = planned_rounds(n_tokens, k, wrong_at);
            let got: Vec<(usize, usize)> = run.rounds.iter().map(|r| (r.k, r.accepted)).collect();
            let as_planned = got == plan.rounds && run.plain_steps == plan.plain_steps;
            let accepted: usize = run.rounds.iter().map(|r| r.accepted).sum();
            let counters = ids.len() == 1 + accepted + run.rounds.len() + run.plain_steps;
            let bonus = run.rounds.iter().all(|r| r.has_bonus);
            let (n, eq, md) = compare_rows(&run, &plain_rows);
            let mut zone = [0usize; 3];
            for r in run.rounds.iter().filter(|r| r.accepted < r.k) {
                let z = rejection_zone(r.p, r.k, w, ring);
                for (c, hit) in zone.iter_mut().zip([z.0, z.1, z.2]) {
                    *c += usize::from(hit);
                }
            }
            for (c, z) in cover.iter_mut().zip(zone) {
                *c += z;
            }
            let run_ok =
                ids == plain_ids && as_planned && counters && bonus && n == ids.len() && eq == n;
            ok &= run_ok;
            rows_all += n;
            eq_all += eq;
            md_all = md_all.max(md);
            let mut entry = json!({
                "k": k,
                "wrong_at": wrong_at,
                "run_ok": run_ok,
                "ids_equal_plain": ids == plain_ids,
                "rounds_as_planned": as_planned,
                "counters_add_up": counters,
                "rounds": run.rounds.len(),
                "plain_steps": run.plain_steps,
                "rows_compared": n,
                "bitwise_equal_rows": eq,
                "max_abs_diff": md,
                "rejections_before_window": zone[0],
                "rejections_after_window": zone[1],
                "rejections_across_ring_wrap": zone[2],
            });
            if !as_planned {
                entry["accepted_per_round"] = json!(got);
                entry["planned"] = json!(plan.rounds);
                entry["planned_plain_steps"] = json!(plan.plain_steps);
            }
            runs.push(entry);
        }
    }
    Ok(json!({
        "prompt_tokens": prompt.len(),
        "tokens": n_tokens,
        "ok": ok,
        "rows_compared": rows_all,
        "bitwise_equal_rows": eq_all,
        "max_abs_diff": md_all,
        "rejections_before_window": cover[0],
        "rejections_after_window": cover[1],
        "rejections_across_ring_wrap": cover[2],
        "runs": runs,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-derived, N = 10, K = 4, draft 2 wrong: prefill emits 1; round 1 (remaining 9)
    /// K_r = 4, n' = 1 → 3 emitted; rounds 2, 3 the same → 5, 7; round 4 (remaining 3) K_r = 2,
    /// n' = 1 → 9; then remaining 1 → K_r = 0, one plain step → 10.
    #[test]
    fn wrong_second_draft_accepts_one_per_round() {
        let p = planned_rounds(10, 4, Some(2));
        assert_eq!(p.rounds, vec![(4, 1), (4, 1), (4, 1), (2, 1)]);
        assert_eq!(p.plain_steps, 1);
    }

    /// Hand-derived, N = 10, K = 4, all right: round 1 K_r = 4, n' = 4 → 6 emitted; round 2
    /// (remaining 4) K_r = 3, n' = 3 → 10; no plain step.
    #[test]
    fn all_right_script_accepts_every_draft() {
        let p = planned_rounds(10, 4, None);
        assert_eq!(p.rounds, vec![(4, 4), (3, 3)]);
        assert_eq!(p.plain_steps, 0);
    }

    /// Hand-derived, N = 6, K = 2, draft 1 wrong: every round accepts nothing and emits only
    /// the bonus: rounds at 1, 2, 3, 4 emitted (remaining 5, 4, 3, 2 → K_r = 2, 2, 2, 1), then
    /// remaining 1 → a plain step: 4 rounds, 1 plain step, 6 tokens = 1 + 0 + 4 + 1.
    #[test]
    fn wrong_first_draft_rolls_back_every_draft() {
        let p = planned_rounds(6, 2, Some(1));
        assert_eq!(p.rounds, vec![(2, 0), (2, 0), (2, 0), (1, 0)]);
        assert_eq!(p.plain_steps, 1);
    }

    /// Draft 4 wrong, K = 4. N = 6: round 1 (remaining 5) K_r = 4, n' = 3 → 5 emitted, then a
    /// plain step. N = 5: K_r = min(4, 4 − 1) = 3 < 4, so the wrong step is never drafted and
    /// all 3 are accepted → 5. N = 4: K_r = 2, n' = 2 → 4.
    #[test]
    fn wrong_step_past_a_short_round_is_not_drafted() {
        let p6 = planned_rounds(6, 4, Some(4));
        assert_eq!((p6.rounds, p6.plain_steps), (vec![(4, 3)], 1));
        assert_eq!(planned_rounds(5, 4, Some(4)).rounds, vec![(3, 3)]);
        assert_eq!(planned_rounds(4, 4, Some(4)).rounds, vec![(2, 2)]);
        assert_eq!(
            planned_rounds(1, 4, Some(1)),
            RoundPlan {
                rounds: vec![],
                plain_steps: 0
            }
        );
        assert_eq!(planned_rounds(2, 4, None).plain_steps, 1);
    }

    /// The plan's emitted count is the budget for every K, j, N (§7 identity
    /// `emitted = 1 + Σ n' + rounds + plain_steps`), and every n' is `min(j − 1, K_r)`.
    #[test]
    fn plans_meet_the_budget_exactly() {
        for n in 1..40 {
            for k in 1..=8 {
                for j in (1..=k).map(Some).chain([None]) {
                    let p = planned_rounds(n, k, j);
                    let acc: usize = p.rounds.iter().map(|r| r.1).sum();
                    assert_eq!(1 + acc + p.rounds.len() + p.plain_steps, n, "{n} {k} {j:?}");
                    for &(k_r, a) in &p.rounds {
                        assert!(k_r >= 1 && k_r <= k);
                        assert_eq!(a, j.map_or(k_r, |j| (j - 1).min(k_r)));
                    }
                }
            }
        }
    }

    /// Golden = prompt [10, 11] ‖ plain [20, 21, 22, 23]; a round at p = 2 (committed
    /// [10, 11, 20]) with K_r = 3 drafts golden[3..6] = [21, 22, 23]; a rule wrong at i = 2
    /// gives [21, 23, 23] (wrong_id(22) = 23); at p = 4 the script drafts 0 past the end.
    #[test]
    fn script_drafts_golden_with_the_chosen_step_replaced() {
        let golden = [10, 11, 20, 21, 22, 23];
        let committed = [10, 11, 20];
        let r = ScriptRound {
            round: 1,
            p: 2,
            k: 3,
            committed: &committed,
        };
        assert_eq!(scripted_drafts(&golden, &r, &|_| None), vec![21, 22, 23]);
        let g = golden;
        let rule = move |s: ScriptStep| {
            (s.i == 2).then(|| wrong_id(g.get(s.p + s.i).copied().unwrap_or(0), 100, &[]))
        };
        assert_eq!(scripted_drafts(&golden, &r, &rule), vec![21, 23, 23]);
        let late = ScriptRound { p: 4, ..r };
        assert_eq!(scripted_drafts(&golden, &late, &|_| None), vec![23, 0, 0]);
    }

    /// On a GPU with the fixtures: scripted drafts wrong at each step of K = 2 (and all right)
    /// over 40 tokens from a 4-token prompt follow the hand-checked plan, emit the plain ids and
    /// give rows bitwise equal to plain decoding.
    #[test]
    fn scripted_rollback_equals_plain_on_gpu() {
        let Some(path) = crate::testing::gpu_fixture_model("dense-target.Q4_K_M") else {
            return;
        };
        let mut e = CudaEngine::load(&path, crate::engine::EngineOptions::default()).unwrap();
        let w = e.config().sliding_window;
        let v = check_prompt(&mut e, &[2, 16308, 16302, 16281], 40, &[2], w, w + 32).unwrap();
        assert_eq!(v["ok"], json!(true), "{v:#}");
        assert_eq!(v["runs"].as_array().map(|r| r.len()), Some(3));
    }

    /// The wrong id skips suppressed ids and wraps around the vocabulary.
    #[test]
    fn wrong_id_is_the_next_unsuppressed_id() {
        assert_eq!(wrong_id(5, 10, &[]), 6);
        assert_eq!(wrong_id(9, 10, &[]), 0);
        assert_eq!(wrong_id(5, 10, &[6, 7]), 8);
        assert_eq!(wrong_id(8, 10, &[9, 0]), 1);
        assert_eq!(wrong_id(3, 1, &[]), 3);
    }

    /// W = 16, ring 48: a round at p = 4 with K_r = 8 lies before the window fills; p = 16 after
    /// it; p = 44, K_r = 4 (rows 44 … 48) crosses the ring's first wrap; p = 40, K_r = 7 (rows
    /// 40 … 47) does not.
    #[test]
    fn rejection_zones_by_hand() {
        assert_eq!(rejection_zone(4, 8, 16, 48), (true, false, false));
        assert_eq!(rejection_zone(16, 1, 16, 48), (false, true, false));
        assert_eq!(rejection_zone(44, 4, 16, 48), (false, true, true));
        assert_eq!(rejection_zone(40, 7, 16, 48), (false, true, false));
        assert_eq!(rejection_zone(10, 6, 16, 48), (false, false, false));
    }
}
