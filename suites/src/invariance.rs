//! Row invariance (`--strict-invariance`, `design/conformance.md` §7): for one (prompt, mode)
//! other than `plain`, the logits the engine computed in that mode's rows (prefill rows,
//! `batch:N` rows, `spec:K` verify rows) are compared position by position with the rows a
//! plain decode gives for the same prefix ([`Engine::decode_rows`](crate::Engine::decode_rows)).
//!
//! Per entry the report gives the largest `|logit difference|` over the ids both top-k lists
//! hold, and every argmax flip between the two rows with the oracle margin between the two
//! argmaxes there, `|ℓ_t[a] − ℓ_t[b]|` on the same prefix. A flip whose oracle margin exceeds
//! `τ` fails the entry (and so the run, exit code 1): exact arithmetic separates the two tokens
//! by more than the engine's error budget, so one of the two rows is wrong by more than `τ`.

use serde::{Deserialize, Serialize};

use crate::engine::{EngineError, Step};
use crate::oracle::{Codec, Oracle, ScoreCache};
use crate::report::TokenRef;
use crate::rule::OracleRow;

/// One argmax flip between a mode's row and the plain decode row on the same prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowFlip {
    /// 0-based output index (row `t` predicts output token `t`).
    pub index: usize,
    /// Absolute position of the predicted token (prompt length + index).
    pub position: usize,
    /// Argmax of the mode's row.
    pub mode_top: TokenRef,
    /// Argmax of the plain decode row.
    pub plain_top: TokenRef,
    /// The oracle's `|ℓ_t[mode_top] − ℓ_t[plain_top]|` in logits on the same prefix.
    pub oracle_margin: f64,
    /// `oracle_margin > τ`: this flip fails the entry.
    pub exceeds_tau: bool,
    /// The mode row's own top-2 gap (logits).
    pub mode_gap: Option<f64>,
    /// The plain decode row's own top-2 gap (logits).
    pub plain_gap: Option<f64>,
}

/// Row-invariance result of one (prompt, mode) entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowInvariance {
    /// Rows compared (both sides expose logits).
    pub compared: usize,
    /// Rows skipped because one side exposed no logits.
    pub missing: usize,
    /// Largest `|e_mode[i] − e_plain[i]|` over the ids in both top-k lists, over all rows
    /// (`null` when nothing was compared).
    pub max_abs_diff: Option<f64>,
    /// Output index where `max_abs_diff` occurs.
    pub max_diff_index: Option<usize>,
    /// Every argmax flip, in output order.
    pub flips: Vec<RowFlip>,
    /// Some flip's oracle margin exceeds `τ` (the entry fails).
    pub failed: bool,
    /// Why the check could not run (the engine has no plain decode rows); never fails.
    pub unsupported: Option<String>,
}

impl RowInvariance {
    /// The result for an engine without [`Engine::decode_rows`](crate::Engine::decode_rows).
    pub fn unsupported(why: impl Into<String>) -> RowInvariance {
        RowInvariance {
            compared: 0,
            missing: 0,
            max_abs_diff: None,
            max_diff_index: None,
            flips: Vec::new(),
            failed: false,
            unsupported: Some(why.into()),
        }
    }
}

fn gap(row: &[(u32, f64)]) -> Option<f64> {
    match (row.first(), row.get(1)) {
        (Some(a), Some(b)) => Some(a.1 - b.1),
        _ => None,
    }
}

/// The oracle's logit of `id` in `row` when known: from its top-k, or `chosen` when `id` is the
/// token the row's `chosen` refers to (`chosen_token`).
fn known_logit(row: &OracleRow, chosen_token: u32, id: u32) -> Option<f64> {
    row.top_k
        .iter()
        .find(|x| x.0 == id)
        .map(|x| x.1)
        .or_else(|| (id == chosen_token).then_some(row.chosen).flatten())
}

/// What [`compare_rows`] needs to know about one judged entry.
pub struct InvarianceInput<'a> {
    /// Prompt ids `[P]`.
    pub prompt: &'a [u32],
    /// The continuation the mode's rows were computed on `[n]` (the golden for `prefill`, the
    /// emitted tokens otherwise): row `t` is on the prefix `prompt ‖ prefix_tokens[..t]`.
    pub prefix_tokens: &'a [u32],
    /// The mode's steps `[n]` (their `top_k` are the mode's rows; `steps[t].token` is the
    /// token the oracle row's `chosen` refers to).
    pub steps: &'a [Step],
    /// Oracle rows on the same prefixes, `[≤ n]` (the judged rows; missing tail rows are
    /// scored here).
    pub oracle_rows: &'a [OracleRow],
    /// τ in logits.
    pub tau: f64,
}

/// Compares a mode's rows with plain decode rows `plain[t]` (same prefixes) and finds the
/// oracle margin of every argmax flip (§7). Oracle logits missing from the judged rows are
/// obtained by teacher-forced scoring of `prompt ‖ prefix_tokens[..t] ‖ id` (cached).
///
/// Errors: the oracle fails.
pub fn compare_rows(
    oracle: &mut dyn Oracle,
    cache: &mut ScoreCache,
    codec: &dyn Codec,
    input: &InvarianceInput<'_>,
    plain: &[Vec<(u32, f64)>],
    top_k: usize,
) -> Result<RowInvariance, EngineError> {
    let n = input
        .steps
        .len()
        .min(plain.len())
        .min(input.prefix_tokens.len());
    let mut out = RowInvariance {
        compared: 0,
        missing: input.steps.len().saturating_sub(n),
        max_abs_diff: None,
        max_diff_index: None,
        flips: Vec::new(),
        failed: false,
        unsupported: None,
    };
    let mut full_rows: Option<Vec<OracleRow>> = None;
    for (t, prow) in plain.iter().enumerate().take(n) {
        let (Some(mode_row), prow) = (input.steps[t].top_k.as_deref(), prow.as_slice()) else {
            out.missing += 1;
            continue;
        };
        if mode_row.is_empty() || prow.is_empty() {
            out.missing += 1;
            continue;
        }
        out.compared += 1;
        for &(id, l) in mode_row {
            if let Some(&(_, lp)) = prow.iter().find(|x| x.0 == id) {
                let d = (l - lp).abs();
                if out.max_abs_diff.is_none_or(|m| d > m) {
                    out.max_abs_diff = Some(d);
                    out.max_diff_index = Some(t);
                }
            }
        }
        let (a, b) = (mode_row[0].0, prow[0].0);
        if a == b {
            continue;
        }
        // oracle logits of both argmaxes on this prefix
        let row = match input.oracle_rows.get(t) {
            Some(r) => r.clone(),
            None => {
                if full_rows.is_none() {
                    full_rows = Some(cache.score_trajectory(
                        oracle,
                        input.prompt,
                        input.prefix_tokens,
                        top_k,
                    )?);
                }
                full_rows
                    .as_ref()
                    .and_then(|r| r.get(t).cloned())
                    .ok_or_else(|| EngineError::Other(format!("no oracle row at index {t}")))?
            }
        };
        let chosen_token = input.steps[t].token;
        let mut logit = |id: u32| -> Result<f64, EngineError> {
            if let Some(l) = known_logit(&row, chosen_token, id) {
                return Ok(l);
            }
            let mut prefix = input.prompt.to_vec();
            prefix.extend_from_slice(&input.prefix_tokens[..t]);
            cache
                .score_trajectory(oracle, &prefix, &[id], top_k)?
                .first()
                .and_then(|r| r.chosen)
                .ok_or_else(|| EngineError::Other(format!("oracle gave no logit for {id} at {t}")))
        };
        let margin = (logit(a)? - logit(b)?).abs();
        let exceeds = margin > input.tau;
        out.failed |= exceeds;
        out.flips.push(RowFlip {
            index: t,
            position: input.prompt.len() + t,
            mode_top: TokenRef {
                id: a,
                text: codec.decode(&[a]),
            },
            plain_top: TokenRef {
                id: b,
                text: codec.decode(&[b]),
            },
            oracle_margin: margin,
            exceeds_tau: exceeds,
            mode_gap: gap(mode_row),
            plain_gap: gap(prow),
        });
    }
    Ok(out)
}
