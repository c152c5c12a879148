//! Speed-up model of greedy MTP speculative decoding (`spec/gemma4-assistant-mtp.md` §4.1,
//! §7) from measured step costs: the standard analysis of Leviathan, Kalman & Matias, "Fast
//! Inference from Transformers via Speculative Decoding" (ICML 2023), §3.1 eq. (1) and §3.4.
//!
//! Model: each draft is accepted independently with probability `α` (the per-draft acceptance
//! rate — an **input**, not measured here). A round drafts `K` tokens and verifies them in one
//! target forward over `K + 1` rows; it emits the accepted prefix `n'` plus the bonus token, so
//! `P(n' ≥ i) = α^i` (`i ≤ K`) and the expected tokens per round are
//! `E = Σ_{i=0}^{K} α^i = (1 − α^{K+1}) / (1 − α)` (`K + 1` at `α = 1`). With a round time
//! `t_round = t_draft_round(K) + t_verify(K)` — the measured drafter call of `K` steps
//! (≈ `K·t_draft` plus a fixed per-round cost) and the measured verify forward — the predicted
//! rate is `E / t_round` tokens/s and the speed-up over plain decoding (one step `t_step` per
//! token) is `E · t_step / t_round`. Host-side bookkeeping of the spec loop (acceptance compare,
//! rollback) is not in the model.

/// One point of the model: `α`, `K` and the predicted figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Per-draft acceptance rate `α` (input).
    pub alpha: f64,
    /// Drafts per round `K`.
    pub k: usize,
    /// Expected tokens emitted per round `E` (accepted drafts + bonus).
    pub expected_tokens: f64,
    /// Round time `t_draft_round(K) + t_verify(K)` in seconds.
    pub round_s: f64,
    /// Predicted tokens/s, `E / round_s`.
    pub tok_per_s: f64,
    /// Predicted tokens/s ÷ plain decode tokens/s (`E · t_step / round_s`).
    pub speedup: f64,
}

/// Expected tokens per round `E = Σ_{i=0}^{K} α^i` (= `(1 − α^{K+1}) / (1 − α)`, summed
/// directly so `α = 1` gives `K + 1`). `α` is clamped to `[0, 1]`.
pub fn expected_tokens(alpha: f64, k: usize) -> f64 {
    let a = alpha.clamp(0.0, 1.0);
    let mut term = 1.0;
    let mut sum = 1.0;
    for _ in 0..k {
        term *= a;
        sum += term;
    }
    sum
}

/// The model at (`alpha`, `k`) for a measured drafter round of `k` steps `draft_round_s`, a
/// verify forward over `k + 1` rows `verify_s` and one plain decode step `step_s` (seconds).
pub fn predict(alpha: f64, k: usize, draft_round_s: f64, verify_s: f64, step_s: f64) -> Prediction {
    let expected_tokens = expected_tokens(alpha, k);
    let round_s = draft_round_s + verify_s;
    let tok_per_s = expected_tokens / round_s;
    Prediction {
        alpha,
        k,
        expected_tokens,
        round_s,
        tok_per_s,
        speedup: tok_per_s * step_s,
    }
}

/// The smallest `α` at which the model breaks even with plain decoding (speed-up 1), by
/// bisection to 1e-9 (the speed-up rises with `α`); `Some(0.0)` when it is ≥ 1 already at
/// `α = 0`, `None` when it stays below 1 even at `α = 1`.
pub fn break_even_alpha(k: usize, draft_round_s: f64, verify_s: f64, step_s: f64) -> Option<f64> {
    let s = |a: f64| predict(a, k, draft_round_s, verify_s, step_s).speedup;
    if s(0.0) >= 1.0 {
        return Some(0.0);
    }
    if s(1.0) < 1.0 {
        return None;
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    while hi - lo > 1e-9 {
        let mid = 0.5 * (lo + hi);
        if s(mid) >= 1.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// Least-squares line `t = a + b·k` through the points `(k, t)`: `(a, b)` = (fixed per-round
/// cost, per-step cost). `None` with fewer than two distinct `k`.
pub fn fit_line(points: &[(usize, f64)]) -> Option<(f64, f64)> {
    if points.len() < 2 {
        return None;
    }
    let n = points.len() as f64;
    let mk = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let mt = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mk).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mk) * (p.1 - mt)).sum();
    let b = sxy / sxx;
    Some((mt - b * mk, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    /// Hand derivation: E = 1 + α + … + α^K. α = 0.5, K = 2: 1 + 0.5 + 0.25 = 1.75
    /// (closed form (1 − 0.125)/0.5 = 1.75). α = 0.8, K = 1: 1.8. α = 0.9, K = 4:
    /// (1 − 0.59049)/0.1 = 4.0951. α = 0: 1 (only the bonus). α = 1, K = 8: 9.
    #[test]
    fn expected_tokens_is_the_truncated_geometric_sum() {
        assert!(close(expected_tokens(0.5, 2), 1.75));
        assert!(close(expected_tokens(0.8, 1), 1.8));
        assert!(close(expected_tokens(0.9, 4), 4.0951));
        assert!(close(expected_tokens(0.0, 8), 1.0));
        assert!(close(expected_tokens(1.0, 8), 9.0));
        assert!(close(expected_tokens(0.3, 0), 1.0));
    }

    /// α = 0.5, K = 2, drafter round 0.1 s, verify 1.2 s, plain step 1.0 s: round 1.3 s,
    /// 1.75 / 1.3 = 1.346153846… tokens/s, speed-up the same number (step 1 s ⇒ 1 token/s).
    /// With step 0.5 s the speed-up halves: 0.673076923…
    #[test]
    fn prediction_divides_expected_tokens_by_round_time() {
        let p = predict(0.5, 2, 0.1, 1.2, 1.0);
        assert!(close(p.round_s, 1.3));
        assert!(close(p.tok_per_s, 1.75 / 1.3));
        assert!(close(p.speedup, 1.346_153_846_153_846));
        let q = predict(0.5, 2, 0.1, 1.2, 0.5);
        assert!(close(q.speedup, 0.673_076_923_076_923));
    }

    /// K = 2, round = 1.75 plain steps (draft 0.25, verify 1.5, step 1): speed-up 1 exactly
    /// where E = 1.75, i.e. α = 0.5 (1 + α + α² = 1.75). A free round (draft 0, verify =
    /// step) breaks even at α = 0; a round of 4 steps with K = 2 never does (E ≤ 3).
    #[test]
    fn break_even_alpha_solves_expected_tokens_equal_round_steps() {
        let a = break_even_alpha(2, 0.25, 1.5, 1.0).unwrap();
        assert!((a - 0.5).abs() < 1e-8, "{a}");
        assert_eq!(break_even_alpha(4, 0.0, 1.0, 1.0), Some(0.0));
        assert_eq!(break_even_alpha(2, 1.0, 3.0, 1.0), None);
    }

    /// Points on t = 0.5 + 2k (k = 1, 2, 4, 8: 2.5, 4.5, 8.5, 16.5) give (0.5, 2) exactly;
    /// one point gives no line.
    #[test]
    fn fit_line_recovers_intercept_and_slope() {
        let (a, b) = fit_line(&[(1, 2.5), (2, 4.5), (4, 8.5), (8, 16.5)]).unwrap();
        assert!(close(a, 0.5) && close(b, 2.0), "{a} {b}");
        assert_eq!(fit_line(&[(3, 1.0)]), None);
    }
}
