//! The tie-budget rule (`design/conformance.md` §3) and the cross-mode comparison (§4), as pure
//! functions over an engine trajectory and the oracle's scores of the engine's own prefix.
//!
//! Notation of §3: at output index `t` the oracle's logits on `x ‖ y_<t` are `ℓ_t`, its argmax
//! `a_t` (lowest id on equality, suppressed ids excluded), the engine's token `y_t` and the margin
//! `m_t = ℓ_t[a_t] − ℓ_t[y_t]`. Indices here are 0-based output indices; reports add the prompt
//! length to give absolute positions.

use serde::{Deserialize, Serialize};

use crate::engine::Step;

/// The oracle's scores at one output index, on the engine's own prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleRow {
    /// Top-k `(id, logit)`, descending by logit, ties lower id first, suppressed ids excluded
    /// (`reference::score::PositionScore::top_k`). At least one entry.
    pub top_k: Vec<(u32, f64)>,
    /// The oracle's logit of the engine's token `ℓ_t[y_t]` when known exactly (teacher-forced
    /// scoring of `x ‖ y` gives it as `next_logit`); `None` when only a top-k is stored (golden
    /// sidecar), in which case the token's logit is looked up in `top_k`.
    pub chosen: Option<f64>,
    /// `max|ℓ_t|` over the vocabulary if known; otherwise the largest magnitude among the logits
    /// in this row is used for `ε_oracle` (with soft-capping all logits are within ±30, so the
    /// proxy is within a small factor of the true value).
    pub max_abs: Option<f64>,
}

impl OracleRow {
    /// The oracle's own top-2 margin `ℓ[top-1] − ℓ[top-2]` (`+∞` if the row has one entry).
    pub fn top2_margin(&self) -> f64 {
        match (self.top_k.first(), self.top_k.get(1)) {
            (Some(a), Some(b)) => a.1 - b.1,
            _ => f64::INFINITY,
        }
    }

    fn max_abs(&self) -> f64 {
        self.max_abs.unwrap_or_else(|| {
            let mut m = self.chosen.map(f64::abs).unwrap_or(0.0);
            for &(_, l) in &self.top_k {
                m = m.max(l.abs());
            }
            m
        })
    }
}

/// Parameters of the rule for one (model, engine, suite).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleParams {
    /// Tie budget τ in logits.
    pub tau: f64,
    /// Allowed tie-flips per (prompt, mode).
    pub max_tie_flips: usize,
    /// The model's suppressed ids (`tokenizer.ggml.suppress_tokens`).
    pub suppressed: Vec<u32>,
    /// `ε_oracle = oracle_tie_rel · max|ℓ_t|` (default 1e-9).
    pub oracle_tie_rel: f64,
    /// Vocabulary size V: ids `>= V` are an `error`.
    pub vocab_size: usize,
}

/// Verdict at one output index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PositionVerdict {
    /// `y_t = a_t`.
    Agree,
    /// `y_t ≠ a_t` with `m_t ≤ ε_oracle`: exact arithmetic cannot separate them (not a flip).
    OracleTie,
    /// `y_t ≠ a_t` with `m_t ≤ τ`: allowed, counted against `max_tie_flips`.
    TieFlip,
    /// `y_t ≠ a_t` with `m_t > τ` (possibly from the top-k lower bound), or a suppressed id.
    Divergence,
    /// Only a top-k is known, `y_t` is outside it and the bound `ℓ[top-1] − ℓ[k-th] ≤ τ`:
    /// the position must be re-scored on the engine's prefix.
    NeedsRescore,
}

/// The rule's result at one output index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PositionJudgement {
    /// 0-based output index.
    pub index: usize,
    /// Engine token `y_t`.
    pub token: u32,
    /// Oracle argmax `a_t`.
    pub oracle_top: u32,
    /// `m_t` in logits (`+∞` for a suppressed id); a lower bound when `margin_is_bound`.
    pub margin: f64,
    /// `margin` is only the top-k lower bound `ℓ[top-1] − ℓ[k-th]`.
    pub margin_is_bound: bool,
    /// The oracle's own top-2 margin at `t` (for plots).
    pub oracle_top2: f64,
    /// The oracle's top-2 margin is `≤ ε_oracle` (exact arithmetic ties here), whatever `y_t`.
    pub oracle_tie: bool,
    /// Verdict at `t`.
    pub verdict: PositionVerdict,
}

/// Per (prompt, mode) verdict, in order of precedence (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The engine failed, returned NaN/Inf, or an id outside the vocabulary.
    Error,
    /// Some `m_t > τ`.
    Divergence,
    /// More than `max_tie_flips` tie-flips.
    TooManyFlips,
    /// At least one tie-flip, none of the above.
    TieFlip,
    /// Agrees with the oracle at every position (token-identical to the golden, up to oracle ties).
    Exact,
}

impl Verdict {
    /// Whether this verdict passes.
    pub fn passes(self) -> bool {
        matches!(self, Verdict::TieFlip | Verdict::Exact)
    }
    /// Kebab-case name as in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Error => "error",
            Verdict::Divergence => "divergence",
            Verdict::TooManyFlips => "too-many-flips",
            Verdict::TieFlip => "tie-flip",
            Verdict::Exact => "exact",
        }
    }
}

/// The rule's result for one (prompt, mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// Final verdict.
    pub verdict: Verdict,
    /// Per-position results (up to the first position that needs re-scoring, if any).
    pub positions: Vec<PositionJudgement>,
    /// Output index of the first divergence.
    pub first_divergence: Option<usize>,
    /// Number of tie-flips.
    pub tie_flips: usize,
    /// Number of positions where the engine's token differs from `a_t` by an oracle tie.
    pub oracle_tie_flips: usize,
    /// Output index of the first position that needs re-scoring (then `verdict` is provisional).
    pub needs_rescore: Option<usize>,
    /// Why the verdict is `error`.
    pub error: Option<String>,
}

/// Checks the engine's own output for the `error` conditions of §3: an id `>= vocab_size`, or
/// a NaN/Inf logit in an exposed top-k. Returns a message naming the output index.
pub fn check_steps(steps: &[Step], vocab_size: usize) -> Option<String> {
    for (i, s) in steps.iter().enumerate() {
        if s.token as usize >= vocab_size {
            return Some(format!(
                "output index {i}: token id {} outside the vocabulary (V = {vocab_size})",
                s.token
            ));
        }
        if let Some(tk) = &s.top_k {
            if let Some((id, l)) = tk.iter().find(|(_, l)| !l.is_finite()) {
                return Some(format!("output index {i}: engine logit of id {id} is {l}"));
            }
            if let Some((id, _)) = tk.iter().find(|(id, _)| *id as usize >= vocab_size) {
                return Some(format!(
                    "output index {i}: engine top-k id {id} outside the vocabulary (V = {vocab_size})"
                ));
            }
        }
    }
    None
}

/// Judges one output index `t` (§3) given the oracle row on the engine's prefix.
pub fn judge_position(
    index: usize,
    token: u32,
    row: &OracleRow,
    p: &RuleParams,
) -> PositionJudgement {
    let (top_id, top_logit) = row.top_k[0];
    let eps = p.oracle_tie_rel * row.max_abs();
    let oracle_top2 = row.top2_margin();
    let oracle_tie = oracle_top2 <= eps;
    let mk = |margin: f64, margin_is_bound: bool, verdict: PositionVerdict| PositionJudgement {
        index,
        token,
        oracle_top: top_id,
        margin,
        margin_is_bound,
        oracle_top2,
        oracle_tie,
        verdict,
    };
    if p.suppressed.contains(&token) {
        return mk(f64::INFINITY, false, PositionVerdict::Divergence);
    }
    if token == top_id {
        return mk(0.0, false, PositionVerdict::Agree);
    }
    let logit = row
        .chosen
        .or_else(|| row.top_k.iter().find(|(id, _)| *id == token).map(|x| x.1));
    match logit {
        Some(l) => {
            let m = top_logit - l;
            let v = if m <= eps {
                PositionVerdict::OracleTie
            } else if m <= p.tau {
                PositionVerdict::TieFlip
            } else {
                PositionVerdict::Divergence
            };
            mk(m, false, v)
        }
        None => {
            let kth = row.top_k.last().map(|x| x.1).unwrap_or(top_logit);
            let bound = top_logit - kth;
            let v = if bound > p.tau {
                PositionVerdict::Divergence
            } else {
                PositionVerdict::NeedsRescore
            };
            mk(bound, true, v)
        }
    }
}

/// The tie-budget rule (§3) over a whole trajectory.
///
/// `steps[t]` is the engine's output at index `t`; `rows[t]` the oracle's scores on the engine's
/// prefix `x ‖ y_<t` (rows beyond `steps.len()` are ignored; fewer rows than steps is treated as
/// needing re-scoring from `rows.len()` on). `engine_error` is set when the engine call failed.
///
/// The walk stops at the first position that needs re-scoring (the caller re-scores the
/// engine's prefix and calls again); divergences and flips after it are not counted.
pub fn judge(
    steps: &[Step],
    rows: &[OracleRow],
    p: &RuleParams,
    engine_error: Option<&str>,
) -> Judgement {
    let mut j = Judgement {
        verdict: Verdict::Exact,
        positions: Vec::with_capacity(steps.len()),
        first_divergence: None,
        tie_flips: 0,
        oracle_tie_flips: 0,
        needs_rescore: None,
        error: None,
    };
    if let Some(e) = engine_error {
        j.verdict = Verdict::Error;
        j.error = Some(e.to_string());
        return j;
    }
    if let Some(e) = check_steps(steps, p.vocab_size) {
        j.verdict = Verdict::Error;
        j.error = Some(e);
        return j;
    }
    for (t, step) in steps.iter().enumerate() {
        let Some(row) = rows.get(t).filter(|r| !r.top_k.is_empty()) else {
            j.needs_rescore = Some(t);
            break;
        };
        if row.top_k.iter().any(|(_, l)| !l.is_finite())
            || row.chosen.is_some_and(|l| !l.is_finite())
        {
            j.verdict = Verdict::Error;
            j.error = Some(format!("output index {t}: oracle logits are not finite"));
            return j;
        }
        let pj = judge_position(t, step.token, row, p);
        match pj.verdict {
            PositionVerdict::Agree => {}
            PositionVerdict::OracleTie => j.oracle_tie_flips += 1,
            PositionVerdict::TieFlip => j.tie_flips += 1,
            PositionVerdict::Divergence => {
                if j.first_divergence.is_none() {
                    j.first_divergence = Some(t);
                }
            }
            PositionVerdict::NeedsRescore => {
                j.needs_rescore = Some(t);
                j.positions.push(pj);
                break;
            }
        }
        j.positions.push(pj);
    }
    j.verdict = if j.first_divergence.is_some() {
        Verdict::Divergence
    } else if j.tie_flips > p.max_tie_flips {
        Verdict::TooManyFlips
    } else if j.tie_flips > 0 {
        Verdict::TieFlip
    } else {
        Verdict::Exact
    };
    j
}

/// Classification of the first fork between two modes (§4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForkClass {
    /// Both sides within τ of the oracle's top: a legitimate rounding split.
    TieSplit,
    /// This side (the mode named) diverges from the oracle, the other conforms.
    Wrong(String),
    /// Both sides diverge.
    BothWrong,
    /// One output is a prefix of the other (one stopped or was cut earlier) and the longer
    /// side's token there is within τ of the oracle's argmax (or unscored); beyond τ the fork is
    /// that side's [`ForkClass::Wrong`].
    Length,
}

impl std::fmt::Display for ForkClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForkClass::TieSplit => write!(f, "tie-split"),
            ForkClass::Wrong(m) => write!(f, "{m} wrong"),
            ForkClass::BothWrong => write!(f, "both wrong"),
            ForkClass::Length => write!(f, "length"),
        }
    }
}

/// The first fork between two modes' outputs for one prompt (§4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fork {
    /// Mode names (a, b).
    pub modes: (String, String),
    /// First differing output index.
    pub index: usize,
    /// Tokens of a and b there (`None` past the end of a shorter output).
    pub tokens: (Option<u32>, Option<u32>),
    /// Oracle margin `m` of each side on the shared prefix (`None` when unknown).
    pub margins: (Option<f64>, Option<f64>),
    /// Each mode's own top-2 gap there, if the engine exposes logits.
    pub engine_gaps: (Option<f64>, Option<f64>),
    /// Classification.
    pub class: ForkClass,
}

fn engine_gap(step: Option<&Step>) -> Option<f64> {
    let tk = step?.top_k.as_ref()?;
    Some(tk.first()?.1 - tk.get(1)?.1)
}

/// Compares two modes' trajectories of one prompt (§4). `ja`, `jb` are their judgements; the
/// oracle margin at the fork comes from each side's own judgement at that index (its prefix is
/// the shared prefix). Returns `None` when the outputs are identical.
pub fn compare_modes(
    (mode_a, steps_a, ja): (&str, &[Step], &Judgement),
    (mode_b, steps_b, jb): (&str, &[Step], &Judgement),
    tau: f64,
) -> Option<Fork> {
    let n = steps_a.len().max(steps_b.len());
    let index =
        (0..n).find(|&i| steps_a.get(i).map(|s| s.token) != steps_b.get(i).map(|s| s.token))?;
    let ta = steps_a.get(index).map(|s| s.token);
    let tb = steps_b.get(index).map(|s| s.token);
    let ma = ja.positions.get(index).map(|p| p.margin);
    let mb = jb.positions.get(index).map(|p| p.margin);
    let class = if ta.is_none() || tb.is_none() {
        // the longer side's token is scored on the shared prefix like any other
        let (longer, m) = if ta.is_some() {
            (mode_a, ma)
        } else {
            (mode_b, mb)
        };
        if m.is_some_and(|m| m > tau) {
            ForkClass::Wrong(longer.to_string())
        } else {
            ForkClass::Length
        }
    } else {
        let wa = ma.is_some_and(|m| m > tau);
        let wb = mb.is_some_and(|m| m > tau);
        match (wa, wb) {
            (false, false) => ForkClass::TieSplit,
            (true, false) => ForkClass::Wrong(mode_a.to_string()),
            (false, true) => ForkClass::Wrong(mode_b.to_string()),
            (true, true) => ForkClass::BothWrong,
        }
    };
    Some(Fork {
        modes: (mode_a.to_string(), mode_b.to_string()),
        index,
        tokens: (ta, tb),
        margins: (ma, mb),
        engine_gaps: (
            engine_gap(steps_a.get(index)),
            engine_gap(steps_b.get(index)),
        ),
        class,
    })
}
