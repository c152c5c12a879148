//! `runtime spec-check`: the CUDA `spec:K` loop (`spec/gemma4-assistant-mtp.md` §4.1) checked
//! on (target, assistant) pairs against the CUDA engine's own plain decoding and the f64 oracle
//! (`reference::spec::spec_decode`):
//!
//! - speculative invariance (`design/conformance.md` §7): spec:K ids == plain ids, per K;
//! - row invariance (§7, `--strict-invariance`): each emitted token's verify-row logits vs the
//!   plain decode row of the same prefix (largest |difference|, argmax flips, bitwise-equal rows);
//! - acceptance: drafted/accepted/rounds per prompt and K vs the oracle's on the same prompt
//!   (same §4.1 first round, intended visibility §2.5, same head), and the emitted ids vs the
//!   oracle's greedy ids;
//! - counters (§6.3 check 8): `emitted = 1 + accepted + rounds + plain_steps`;
//! - scripted rollback ([`rollback`], issue 6): drafts from a host script, wrong at every draft
//!   step position in every round (and all right), before and after the sliding window fills:
//!   ids, per-round acceptance and rows bitwise equal to plain decoding (no assistant needed);
//! - drafter logits ([`drafter`], issue 6): the CUDA drafter against the oracle's assistant,
//!   teacher-forced, within a stated tolerance.

use std::time::Instant;

use reference::model::{Faults, Model};
use reference::spec::{spec_decode, Assistant, SpecOptions};
use serde_json::json;

use crate::args::{checked_load, SpecPair};
use crate::draft::DraftHead;
use crate::engine::{CudaEngine, EngineOptions, GenRequest};
use crate::error::RuntimeError;
use crate::modelcheck::PROMPTS;

pub mod batch;
pub mod drafter;
pub mod rollback;

/// Prompt tokens of the short scripted-rollback prompt (a prefix of `PROMPTS[1]`, BOS
/// included): far below the fixtures' window `W = 16`, so the first rounds reject drafts
/// before the window fills.
pub const ROLLBACK_SHORT_PROMPT: usize = 4;

pub(crate) fn err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Model {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// Options of [`check_pair`].
#[derive(Debug, Clone)]
pub struct SpecCheckOptions {
    /// Draft lengths to run.
    pub ks: Vec<usize>,
    /// Tokens generated per prompt.
    pub max_tokens: usize,
    /// Prompts used (from [`PROMPTS`], first `n`).
    pub prompts: usize,
    /// Also run the f64 oracle's `spec:K` for acceptance counts (and, with `drafter_steps > 0`,
    /// the teacher-forced drafter check, which needs the f64 oracle).
    pub oracle: bool,
    /// Tokens per scripted-rollback run ([`rollback`]; 0 skips the check). Use enough that the
    /// sliding window fills and the ring wraps (96 on the fixtures: W = 16, ring 48 rows).
    pub rollback_tokens: usize,
    /// Draft steps per position of the teacher-forced drafter check ([`drafter`]; 0 skips it).
    pub drafter_steps: usize,
    /// Tolerance on `|CUDA − oracle|` drafter logits ([`drafter::DEFAULT_TOL`]).
    pub drafter_tol: f64,
    /// Sequences speculating at once in the batched check ([`batch`]; 0 or 1 skips it).
    pub batch: usize,
}

/// Runs the scripted-rollback check of [`rollback`] on the short prompt (a prefix of
/// [`ROLLBACK_SHORT_PROMPT`] tokens of `PROMPTS[1]`) and on `PROMPTS[2]` (longer than the
/// fixtures' window); `prompts`: every one of [`PROMPTS`], encoded with BOS. `"ok"`: every run
/// ok, and rejections were seen before the window fills, after it, and across a ring wrap
/// (when the target has a sliding window).
fn rollback_check(
    eng: &mut CudaEngine,
    prompts: &[Vec<u32>],
    opts: &SpecCheckOptions,
) -> Result<serde_json::Value, RuntimeError> {
    let w = eng.config().sliding_window;
    let ring = crate::forward::kv_rows(Some(w), CHECK_CTX);
    let (Some(short), Some(long)) = (prompts.get(1), prompts.get(2)) else {
        return Err(err(
            "scripted rollback",
            format!(
                "{} prompts given, it needs PROMPTS[1] and PROMPTS[2]",
                prompts.len()
            ),
        ));
    };
    let short = short[..short.len().min(ROLLBACK_SHORT_PROMPT)].to_vec();
    let long = long.clone();
    let mut ok = true;
    let mut cover = [0u64; 3];
    let mut per = Vec::new();
    for prompt in [short, long] {
        let v = rollback::check_prompt(eng, &prompt, opts.rollback_tokens, &opts.ks, w, ring)?;
        ok &= v["ok"].as_bool().unwrap_or(false);
        for (c, key) in cover.iter_mut().zip([
            "rejections_before_window",
            "rejections_after_window",
            "rejections_across_ring_wrap",
        ]) {
            *c += v[key].as_u64().unwrap_or(0);
        }
        per.push(v);
    }
    let covered = w == 0 || cover.iter().all(|&c| c > 0);
    Ok(json!({
        "window": w,
        "ring_rows": ring,
        "tokens": opts.rollback_tokens,
        "covered_before_after_wrap": covered,
        "ok": ok && covered,
        "prompts": per,
    }))
}

/// Runs one sub-check: its JSON record (an error becomes `{"ok": false, "error": …}`) with
/// `"seconds"` added; `ok` keeps the record's verdict.
fn timed_check(
    ok: &mut bool,
    f: impl FnOnce() -> Result<serde_json::Value, RuntimeError>,
) -> serde_json::Value {
    let t = Instant::now();
    let mut v = f().unwrap_or_else(|e| json!({"ok": false, "error": e.to_string()}));
    v["seconds"] = json!(t.elapsed().as_secs_f64());
    *ok &= v["ok"].as_bool().unwrap_or(false);
    v
}

/// Context of the spec-check engine (positions per slot).
pub const CHECK_CTX: usize = 1024;

fn first_argmax(r: &[f32]) -> usize {
    let mut b = 0;
    for (i, &v) in r.iter().enumerate() {
        if v > r[b] {
            b = i;
        }
    }
    b
}

/// Runs the checks for one pair, checked and opened by [`crate::args::spec_check`] (the engine,
/// its drafter and the f64 oracle are built from those open files, configs and prompt ids: no
/// file is opened, nor its weights scanned, again), and returns a JSON summary (`"ok"`: spec ==
/// plain for every K and prompt, counters add up, and — with the oracle — acceptance equals
/// the oracle's).
///
/// No drafter (a target alone): only the scripted-rollback check runs. With a drafter, the
/// scripted-rollback check (`opts.rollback_tokens > 0`) and, with the oracle, the
/// teacher-forced drafter check (`opts.drafter_steps > 0`) run after the per-prompt checks;
/// their records are `"scripted_rollback"` and `"drafter_teacher_forced"`; with
/// `opts.batch > 1` the batched `spec:K` check ([`batch`], record `"spec_batch"`) runs too, and
/// `"ok"` includes theirs.
pub fn check_pair(
    pair: SpecPair,
    opts: &SpecCheckOptions,
) -> Result<serde_json::Value, RuntimeError> {
    let SpecPair { target, draft, .. } = pair;
    let tname = target.path.display().to_string();
    let dname = draft.as_ref().map(|d| d.path.display().to_string());
    let stop = target.tokenizer.stop_ids();
    let t0 = Instant::now();
    let mut eng = CudaEngine::from_gguf_with(
        &target.file,
        target.config.clone(),
        EngineOptions {
            slots: if draft.is_some() && opts.batch > 1 {
                opts.batch
            } else {
                1
            },
            max_ctx: CHECK_CTX,
        },
        checked_load(),
    )?;
    if let Some(d) = &draft {
        eng.load_draft_from(&d.file, d.config.clone(), checked_load())?;
    }
    let head = match eng.drafter().map(|d| d.head) {
        Some(DraftHead::Centroid) => "centroid",
        Some(DraftHead::Full) => "full",
        None => "none",
    };
    let load_s = t0.elapsed().as_secs_f64();
    let has_draft = draft.is_some();
    let spec_prompts = if has_draft { opts.prompts } else { 0 };
    let all_prompts = target.prompts;
    let mut oracle = match draft {
        Some(d) if opts.oracle => {
            let m = Model::<f64>::from_gguf_with(target.file, Faults::default(), checked_load())
                .map_err(|e| err(&tname, e))?;
            let a = Assistant::<f64>::from_gguf_with(d.file, checked_load())
                .map_err(|e| err("assistant", e))?;
            a.check_target(m.config())
                .map_err(|e| err("assistant", e))?;
            Some((m, a))
        }
        _ => None,
    };
    let mut ok = true;
    let mut per_prompt = Vec::new();
    let prompts = &all_prompts[..opts.prompts.min(all_prompts.len())];
    for (text, prompt) in PROMPTS.iter().zip(prompts).take(spec_prompts) {
        let prompt = prompt.clone();
        let req = GenRequest {
            prompt: prompt.clone(),
            max_tokens: opts.max_tokens,
            stop: stop.clone(),
        };
        let tp = Instant::now();
        let plain = eng.greedy_with_logits(&req, 16)?;
        let plain_s = tp.elapsed().as_secs_f64();
        let plain_ids: Vec<u32> = plain.iter().map(|s| s.0.token).collect();
        let oracle_greedy = match &oracle {
            Some((m, _)) => Some(
                m.greedy(&prompt, opts.max_tokens, &stop)
                    .map_err(|e| err("oracle greedy", e))?
                    .tokens,
            ),
            None => None,
        };
        let mut per_k = Vec::new();
        for &k in &opts.ks {
            let ts = Instant::now();
            let run = eng.spec(&req, k, 16, true)?;
            let spec_s = ts.elapsed().as_secs_f64();
            let ids: Vec<u32> = run.steps.iter().map(|s| s.token).collect();
            let same = ids == plain_ids;
            // Row invariance over the common prefix of the two runs.
            let common = ids
                .iter()
                .zip(&plain_ids)
                .take_while(|(a, b)| a == b)
                .count();
            let mut max_diff = 0f64;
            let mut bitwise_rows = 0usize;
            let mut flips = Vec::new();
            for (i, (st, pl)) in run.steps.iter().zip(&plain).take(common).enumerate() {
                let (Some(a), b) = (&st.logits, &pl.1) else {
                    continue;
                };
                let mut bit = true;
                for (x, y) in a.iter().zip(b) {
                    if x.to_bits() != y.to_bits() {
                        bit = false;
                        max_diff = max_diff.max((*x as f64 - *y as f64).abs());
                    }
                }
                bitwise_rows += bit as usize;
                let (ia, ib) = (first_argmax(a), first_argmax(b));
                if ia != ib {
                    flips.push(json!({"index": i, "verify": ia, "plain": ib}));
                }
            }
            let drafted: usize = run.rounds.iter().map(|r| r.k).sum();
            let accepted: usize = run.rounds.iter().map(|r| r.accepted).sum();
            let counters_ok = ids.len() == 1 + accepted + run.rounds.len() + run.plain_steps;
            let verify_widths: Vec<usize> = run.rounds.iter().map(|r| r.k + 1).collect();
            let mut entry = json!({
                "k": k,
                "spec_equals_plain": same,
                "emitted": ids.len(),
                "rounds": run.rounds.len(),
                "plain_steps": run.plain_steps,
                "drafted": drafted,
                "accepted": accepted,
                "bonus_rounds": run.rounds.iter().filter(|r| r.has_bonus).count(),
                "acceptance_rate": if drafted > 0 { accepted as f64 / drafted as f64 } else { 0.0 },
                "accepted_per_round": run.rounds.iter().map(|r| r.accepted).collect::<Vec<_>>(),
                "verify_widths": verify_widths,
                "counters_add_up": counters_ok,
                "row_invariance": {
                    "rows_compared": common.min(plain.len()),
                    "bitwise_equal_rows": bitwise_rows,
                    "max_abs_diff": max_diff,
                    "argmax_flips": flips,
                },
                "spec_s": spec_s,
                "plain_s": plain_s,
            });
            ok &= same && counters_ok;
            if let Some((m, a)) = &oracle {
                let mut d = a;
                let o = spec_decode(
                    m,
                    &mut d,
                    &prompt,
                    SpecOptions::new(k, opts.max_tokens, &stop),
                )
                .map_err(|e| err("oracle spec", e))?;
                let acc_same = o.stats.accepted == accepted
                    && o.stats.drafted == drafted
                    && o.stats.rounds == run.rounds.len();
                let oracle_ids_same = o.tokens == ids;
                entry["oracle"] = json!({
                    "head": a.head().name(),
                    "rounds": o.stats.rounds,
                    "drafted": o.stats.drafted,
                    "accepted": o.stats.accepted,
                    "accepted_per_round": o.stats.accepted_per_round,
                    "acceptance_equal": acc_same,
                    "ids_equal_cuda_spec": oracle_ids_same,
                    "oracle_spec_equals_oracle_greedy": oracle_greedy.as_ref() == Some(&o.tokens),
                });
                ok &= acc_same;
            }
            per_k.push(entry);
        }
        per_prompt.push(json!({
            "prompt": text,
            "prompt_tokens": prompt.len(),
            "plain_ids": plain_ids,
            "cuda_plain_equals_oracle_greedy": oracle_greedy.as_ref().map(|g| g == &plain_ids),
            "spec": per_k,
        }));
    }
    let rollback = (opts.rollback_tokens > 0)
        .then(|| timed_check(&mut ok, || rollback_check(&mut eng, &all_prompts, opts)));
    let batched = (has_draft && opts.batch > 1).then(|| {
        // The prompts with the check's budget, plus two short-budget requests (1 and 7 tokens)
        // so that, with `batch` below the request count, requests join as others finish.
        let mut reqs: Vec<GenRequest> = prompts
            .iter()
            .map(|p| GenRequest {
                prompt: p.clone(),
                max_tokens: opts.max_tokens,
                stop: stop.clone(),
            })
            .collect();
        for (i, budget) in [1usize, 7].into_iter().enumerate() {
            if let Some(r) = reqs.get(i).cloned() {
                reqs.push(GenRequest {
                    max_tokens: budget,
                    ..r
                });
            }
        }
        timed_check(&mut ok, || {
            batch::check(&mut eng, &reqs, &opts.ks, opts.batch)
        })
    });
    let drafter_tf = match oracle.as_mut() {
        Some((m, a)) if opts.drafter_steps > 0 => {
            let steps = opts.drafter_steps.min(crate::draft::MAX_DRAFT);
            Some(timed_check(&mut ok, || {
                drafter::check(&mut eng, m, a, prompts, steps, opts.drafter_tol)
            }))
        }
        _ => None,
    };
    Ok(json!({
        "target": tname,
        "draft": dname,
        "head": head,
        "drafter_weight_bytes": eng.drafter().map(|d| d.weight_bytes),
        "load_s": load_s,
        "ok": ok,
        "prompts": per_prompt,
        "scripted_rollback": rollback,
        "drafter_teacher_forced": drafter_tf,
        "spec_batch": batched,
    }))
}
