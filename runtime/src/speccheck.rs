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
//! - counters (§6.3 check 8): `emitted = 1 + accepted + rounds + plain_steps`.

use std::path::Path;
use std::time::Instant;

use reference::model::Model;
use reference::spec::{spec_decode, Assistant, SpecOptions};
use reference::tokenizer::GemmaTokenizer;
use serde_json::json;

use crate::draft::DraftHead;
use crate::engine::{CudaEngine, EngineOptions, GenRequest};
use crate::error::RuntimeError;
use crate::modelcheck::PROMPTS;

fn err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
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
    /// Also run the f64 oracle's `spec:K` for acceptance counts.
    pub oracle: bool,
}

fn first_argmax(r: &[f32]) -> usize {
    let mut b = 0;
    for (i, &v) in r.iter().enumerate() {
        if v > r[b] {
            b = i;
        }
    }
    b
}

/// Runs the checks for one pair and returns a JSON summary (`"ok"`: spec == plain for every K
/// and prompt, counters add up, and — with the oracle — acceptance equals the oracle's).
pub fn check_pair(
    target: &Path,
    draft: &Path,
    opts: &SpecCheckOptions,
) -> Result<serde_json::Value, RuntimeError> {
    let tname = target.display().to_string();
    let file = reference::gguf::GgufFile::open(target).map_err(|e| err(&tname, e))?;
    let tok = GemmaTokenizer::from_gguf(&file).map_err(|e| err(&tname, e))?;
    let stop = tok.stop_ids();
    let t0 = Instant::now();
    let mut eng = CudaEngine::load(
        target,
        EngineOptions {
            slots: 1,
            max_ctx: 1024,
        },
    )?;
    eng.load_draft(draft)?;
    let head = match eng.drafter().map(|d| d.head) {
        Some(DraftHead::Centroid) => "centroid",
        _ => "full",
    };
    let load_s = t0.elapsed().as_secs_f64();
    let oracle = if opts.oracle {
        let m = Model::<f64>::load(target).map_err(|e| err(&tname, e))?;
        let a = Assistant::<f64>::load(draft).map_err(|e| err("assistant", e))?;
        a.check_target(m.config())
            .map_err(|e| err("assistant", e))?;
        Some((m, a))
    } else {
        None
    };
    let mut ok = true;
    let mut per_prompt = Vec::new();
    for text in PROMPTS.iter().take(opts.prompts) {
        let prompt = tok.encode(text, true).map_err(|e| err("tokenize", e))?;
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
    Ok(json!({
        "target": tname,
        "draft": draft.display().to_string(),
        "head": head,
        "drafter_weight_bytes": eng.drafter().map(|d| d.weight_bytes),
        "load_s": load_s,
        "ok": ok,
        "prompts": per_prompt,
    }))
}
