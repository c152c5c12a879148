//! `spec:K` for the reference engines (`design/conformance.md` §2, §7): the greedy MTP loop of
//! `spec/gemma4-assistant-mtp.md` §4.1 (first round §4.1, intended drafter visibility §2.5) over
//! `reference::spec`'s [`Drafter`] and `Model::forward_hidden_batch`, recording what
//! `reference::spec::SpecDecoder` does not expose: the engine's own top-k of every verify row, so
//! that each emitted token carries its logits (`VerifyAccepted` / `VerifyBonus` steps) and
//! `--strict-invariance` can compare verify rows with plain decode rows.
//!
//! Same decisions as `SpecDecoder::step`: `K_r = min(K, remaining − 1)` (a plain one-row step
//! when it is 0), accept the longest agreeing prefix plus the bonus, truncate after the first
//! stop id and to the budget, roll the cache back to `p + n' + 1`, carry the hidden state of row
//! `n'`. The test `spec_engine_matches_reference_spec_decoder` pins the token ids and counters to
//! `reference::spec::spec_decode`.

use std::time::Instant;

use reference::model::logits::top_k as select_top_k;
use reference::model::{Float, Model};
use reference::spec::{Drafter, DrafterKv, RoundContext, StoreLayers};

use crate::engine::{EngineError, Request, SpecStats, Step, StepKind, Trajectory};

fn err(id: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Request {
        id: id.to_string(),
        message: e.to_string(),
    }
}

/// Refuses rows `first..first + n` of `z` (`[T, V]` flat) when one has a NaN/±Inf logit: the
/// engine error of the plain and batch modes, naming the first such row by its output index
/// (`out + i` for row `first + i`; a NaN row's top-k is empty or partial, and its argmax was
/// emitted as `u32::MAX` or taken from the finite rest).
fn check_rows<F: Float>(
    id: &str,
    z: &[F],
    v: usize,
    first: usize,
    n: usize,
    out: usize,
) -> Result<(), EngineError> {
    for (i, r) in z.chunks_exact(v).skip(first).take(n).enumerate() {
        let bad = r.iter().filter(|x| !x.to_f64().is_finite()).count();
        if bad > 0 {
            return Err(err(
                id,
                format!(
                    "non-finite logits at output index {} ({bad} NaN/Inf)",
                    out + i
                ),
            ));
        }
    }
    Ok(())
}

/// Top-`k` `(id, logit)` of each row of `z` (`[T, V]` flat, row-major), suppressed ids excluded.
fn rows_top_k<F: Float>(z: &[F], v: usize, k: usize, suppressed: &[u32]) -> Vec<Vec<(u32, f64)>> {
    z.chunks_exact(v)
        .map(|r| {
            let r: Vec<f64> = r.iter().map(|x| x.to_f64()).collect();
            select_top_k(&r, k, suppressed)
        })
        .collect()
}

/// Greedy speculative decoding of one request with `k` drafts per round; every step carries the
/// engine's top-`top_k` of the row that produced it. `stats.per_round[r] = (K_r, n'_r)`: the
/// verify width of round `r` is `K_r + 1`, and its last emitted token is the bonus unless a stop
/// id or the budget cut the round inside the accepted drafts (then no `VerifyBonus` step).
///
/// Errors: `k = 0`, empty prompt, model or drafter failures (named by request id).
pub fn spec_generate<F: Float>(
    model: &Model<F>,
    drafter: &mut dyn Drafter<F>,
    req: &Request,
    k: usize,
    top_k: usize,
) -> Result<Trajectory, EngineError> {
    let t0 = Instant::now();
    let id = req.id.as_str();
    if k == 0 || req.prompt.is_empty() {
        return Err(err(id, "spec:K needs K >= 1 and a non-empty prompt"));
    }
    let cfg = model.config();
    let (h, v) = (cfg.n_embd, model.vocab_size());
    let window = cfg.sliding_window;
    let suppressed = model.suppressed_ids().to_vec();
    let store = StoreLayers::of(cfg);
    let mut stats = SpecStats::default();
    let mut steps: Vec<Step> = Vec::new();
    let done = |steps: &[Step]| {
        steps.len() >= req.max_tokens || steps.last().is_some_and(|s| req.stop.contains(&s.token))
    };
    // A verify writes K + 1 rows and keeps n_acc + 1 of them: the sliding rings must be able
    // to give back up to K rows.
    let mut cache = model.new_cache_with_reserve(k + 1);
    let mut committed = req.prompt.clone();
    if req.max_tokens == 0 {
        return Ok(Trajectory {
            id: req.id.clone(),
            steps,
            spec: Some(stats),
            wall: t0.elapsed(),
        });
    }
    // prefill (§4.1): emit the argmax of the last prompt row, carry its hidden state
    let hn = model
        .forward_hidden_batch(&mut [&mut cache], &[&req.prompt])
        .map_err(|e| err(id, e))?;
    let mut hidden = hn[hn.len() - h..].to_vec();
    let z = model.logits_of_hidden(&hidden).map_err(|e| err(id, e))?;
    check_rows(id, &z, v, 0, 1, steps.len())?;
    let tk = rows_top_k(&z, v, top_k, &suppressed).remove(0);
    let t = tk.first().ok_or_else(|| err(id, "empty top-k"))?.0;
    steps.push(Step {
        token: t,
        top_k: Some(tk),
        kind: StepKind::Prefill,
    });
    committed.push(t);
    while !done(&steps) {
        let p = committed.len() - 1;
        let remaining = req.max_tokens - steps.len();
        let k_r = k.min(remaining - 1);
        if k_r == 0 {
            let hn = model
                .forward_hidden_batch(&mut [&mut cache], &[&[committed[p]]])
                .map_err(|e| err(id, e))?;
            let z = model.logits_of_hidden(&hn).map_err(|e| err(id, e))?;
            check_rows(id, &z, v, 0, 1, steps.len())?;
            let tk = rows_top_k(&z, v, top_k, &suppressed).remove(0);
            let t = tk.first().ok_or_else(|| err(id, "empty top-k"))?.0;
            steps.push(Step {
                token: t,
                top_k: Some(tk),
                kind: StepKind::Decode,
            });
            committed.push(t);
            hidden = hn;
            continue;
        }
        let round = stats.rounds + 1;
        let draft = {
            let kv = DrafterKv::intended(&cache, &store, p, window).map_err(|e| err(id, e))?;
            let ctx = RoundContext {
                target: model,
                committed: &committed,
                p,
                hidden: &hidden,
                round,
                kv,
            };
            drafter.draft(&ctx, k_r).map_err(|e| err(id, e))?
        };
        if draft.tokens.len() != k_r || draft.tokens.iter().any(|&t| t as usize >= v) {
            return Err(err(
                id,
                format!(
                    "drafter returned {:?} for {k_r} drafts in round {round}",
                    draft.tokens
                ),
            ));
        }
        // verify: one forward over [t_p, d_1 … d_{K_r}] at positions p … p + K_r
        let mut feed = vec![committed[p]];
        feed.extend_from_slice(&draft.tokens);
        let hn = model
            .forward_hidden_batch(&mut [&mut cache], &[&feed])
            .map_err(|e| err(id, e))?;
        let z = model.logits_of_hidden(&hn).map_err(|e| err(id, e))?;
        let rows = rows_top_k(&z, v, top_k, &suppressed);
        let a: Vec<u32> = rows
            .iter()
            .map(|r| r.first().map_or(u32::MAX, |x| x.0))
            .collect();
        let n = draft
            .tokens
            .iter()
            .zip(&a)
            .take_while(|(d, a)| d == a)
            .count();
        let mut emit: Vec<u32> = draft.tokens[..n].to_vec();
        emit.push(a[n]);
        if let Some(i) = emit.iter().position(|t| req.stop.contains(t)) {
            emit.truncate(i + 1);
        }
        emit.truncate(remaining);
        // the rows of the emitted tokens (a NaN row never agrees with a draft: its argmax is
        // u32::MAX, so it is at most the bonus row)
        check_rows(id, &z, v, 0, emit.len(), steps.len())?;
        let n_acc = emit.len() - 1;
        cache.truncate(p + n_acc + 1).map_err(|e| err(id, e))?;
        hidden = hn[n_acc * h..(n_acc + 1) * h].to_vec();
        for (i, &t) in emit.iter().enumerate() {
            steps.push(Step {
                token: t,
                top_k: Some(rows[i].clone()),
                kind: if i < n {
                    StepKind::VerifyAccepted
                } else {
                    StepKind::VerifyBonus
                },
            });
        }
        committed.extend_from_slice(&emit);
        stats.rounds += 1;
        stats.drafted += k_r;
        stats.accepted += n_acc;
        stats.per_round.push((k_r, n_acc));
    }
    Ok(Trajectory {
        id: req.id.clone(),
        steps,
        spec: Some(stats),
        wall: t0.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verify row with a NaN logit is the engine error naming its output index (the round's
    /// first emitted index plus the row); rows past those emitted are not checked.
    #[test]
    fn check_rows_names_the_first_nonfinite_emitted_row() {
        let z = [
            0.5f64,
            1.0,
            2.0,
            f64::NAN,
            f64::INFINITY,
            f64::NAN,
            1.0,
            f64::NAN,
        ];
        assert!(check_rows("r", &z, 2, 0, 1, 7).is_ok());
        match check_rows("r", &z, 2, 0, 3, 7) {
            Err(EngineError::Request { id, message }) => {
                assert_eq!(id, "r");
                assert_eq!(message, "non-finite logits at output index 8 (1 NaN/Inf)");
            }
            other => panic!("{other:?}"),
        }
        match check_rows("r", &z, 2, 2, 2, 0) {
            Err(EngineError::Request { message, .. }) => {
                assert_eq!(message, "non-finite logits at output index 0 (2 NaN/Inf)");
            }
            other => panic!("{other:?}"),
        }
        let z32 = [1.0f32, 2.0, 3.0, 4.0];
        assert!(check_rows("r", &z32, 2, 0, 2, 0).is_ok());
    }
}
