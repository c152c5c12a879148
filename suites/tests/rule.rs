//! The tie-budget rule (conformance §3) and cross-mode comparison (§4) on synthetic scores.
//!
//! Every expected value is derived by hand from the §3 definitions; logits are chosen as dyadic
//! rationals (multiples of 2^-k) so that the margins are exact in f64 and can be compared with `==`.

use suites::rule::{
    compare_modes, judge, ForkClass, Judgement, OracleRow, PositionVerdict, RuleParams, Verdict,
};
use suites::{Step, StepKind};

fn params() -> RuleParams {
    RuleParams {
        tau: 0.0625, // 2^-4
        max_tie_flips: 2,
        suppressed: vec![0],
        oracle_tie_rel: 1e-9,
        vocab_size: 100,
    }
}

fn steps(tokens: &[u32]) -> Vec<Step> {
    tokens
        .iter()
        .map(|&token| Step {
            token,
            top_k: None,
            kind: StepKind::Decode,
        })
        .collect()
}

/// A row with top-k `(id, logit)` as given (already descending) and no exact chosen logit.
fn row(top: &[(u32, f64)]) -> OracleRow {
    OracleRow {
        top_k: top.to_vec(),
        chosen: None,
        max_abs: None,
    }
}

/// Top-3 row: `top` at 10.0, `second` at 10 − gap, id 99 at 5.0.
fn gap_row(top: u32, second: u32, gap: f64) -> OracleRow {
    row(&[(top, 10.0), (second, 10.0 - gap), (99, 5.0)])
}

fn run(tokens: &[u32], rows: &[OracleRow]) -> Judgement {
    judge(&steps(tokens), rows, &params(), None)
}

#[test]
fn engine_that_always_picks_the_oracle_argmax_is_exact() {
    let rows = vec![gap_row(5, 6, 1.0), gap_row(7, 8, 0.001), gap_row(9, 5, 3.0)];
    let j = run(&[5, 7, 9], &rows);
    assert_eq!(j.verdict, Verdict::Exact);
    assert_eq!(j.positions.len(), 3);
    assert!(j
        .positions
        .iter()
        .all(|p| p.verdict == PositionVerdict::Agree && p.margin == 0.0));
    // oracle top-2 margins are reported as given: 1.0, 0.001 (approximately), 3.0
    assert_eq!(j.positions[0].oracle_top2, 1.0);
    assert_eq!(j.positions[2].oracle_top2, 3.0);
}

#[test]
fn tie_within_budget_is_not_a_mismatch() {
    // index 1: engine picks 8, oracle ranks it 2^-7 = 0.0078125 below 7; τ = 0.0625.
    let rows = vec![
        gap_row(5, 6, 1.0),
        gap_row(7, 8, 0.0078125),
        gap_row(9, 5, 3.0),
    ];
    let j = run(&[5, 8, 9], &rows);
    assert_eq!(j.verdict, Verdict::TieFlip);
    assert!(j.verdict.passes());
    assert_eq!(j.tie_flips, 1);
    assert_eq!(j.positions[1].verdict, PositionVerdict::TieFlip);
    assert_eq!(j.positions[1].margin, 0.0078125);
    assert_eq!(j.positions[1].oracle_top, 7);
}

#[test]
fn margin_exactly_tau_is_a_tie_flip_and_just_above_is_a_divergence() {
    // m = 0.0625 = τ → tie-flip (≤); m = 0.0625 + 2^-20 → divergence.
    let j = run(&[2], &[gap_row(1, 2, 0.0625)]);
    assert_eq!(j.positions[0].verdict, PositionVerdict::TieFlip);
    let above = 0.0625 + 2f64.powi(-20);
    let j = run(&[2], &[gap_row(1, 2, above)]);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert_eq!(j.positions[0].margin, above);
}

#[test]
fn divergence_is_reported_at_its_first_position_with_its_margin() {
    let rows = vec![
        gap_row(5, 6, 1.0),
        gap_row(7, 8, 0.5),
        gap_row(9, 5, 3.0),
        gap_row(4, 3, 2.0),
    ];
    let j = run(&[5, 8, 5, 4], &rows);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert!(!j.verdict.passes());
    assert_eq!(j.first_divergence, Some(1));
    assert_eq!(j.positions[1].margin, 0.5);
    // the walk goes on: index 2 is a second divergence (m = 3.0), index 3 agrees
    assert_eq!(j.positions[2].verdict, PositionVerdict::Divergence);
    assert_eq!(j.positions[2].margin, 3.0);
    assert_eq!(j.positions[3].verdict, PositionVerdict::Agree);
}

#[test]
fn more_than_max_tie_flips_fails_and_exactly_max_passes() {
    let rows: Vec<_> = (0..4).map(|i| gap_row(10 + i, 20 + i, 0.03125)).collect();
    let j = run(&[20, 21, 12, 13], &rows);
    assert_eq!((j.verdict, j.tie_flips), (Verdict::TieFlip, 2));
    let j = run(&[20, 21, 22, 13], &rows);
    assert_eq!((j.verdict, j.tie_flips), (Verdict::TooManyFlips, 3));
    assert!(!j.verdict.passes());
}

#[test]
fn divergence_takes_precedence_over_too_many_flips() {
    let mut rows: Vec<_> = (0..4).map(|i| gap_row(10 + i, 20 + i, 0.03125)).collect();
    rows.push(gap_row(30, 31, 4.0));
    let j = run(&[20, 21, 22, 23, 31], &rows);
    assert_eq!(j.tie_flips, 4);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert_eq!(j.first_divergence, Some(4));
}

#[test]
fn exact_oracle_tie_is_marked_and_never_counted_as_a_flip() {
    // ids 3 and 7 have identical logits 12.5; a_t = 3 (lowest id); the engine picks 7.
    let rows = vec![row(&[(3, 12.5), (7, 12.5), (1, 2.0)]); 4];
    let j = run(&[7, 7, 7, 7], &rows);
    assert_eq!(j.verdict, Verdict::Exact);
    assert_eq!((j.tie_flips, j.oracle_tie_flips), (0, 4));
    assert!(j
        .positions
        .iter()
        .all(|p| p.oracle_tie && p.verdict == PositionVerdict::OracleTie));
    // the lowest id itself agrees and is still marked as an oracle tie
    let j = run(&[3], &rows[..1]);
    assert_eq!(j.positions[0].verdict, PositionVerdict::Agree);
    assert!(j.positions[0].oracle_tie);
}

#[test]
fn oracle_tie_threshold_scales_with_the_largest_logit() {
    // max|ℓ| = 20 → ε = 2e-8. A margin 2^-26 ≈ 1.49e-8 is an oracle tie, 2^-25 ≈ 2.98e-8 a flip.
    let r = |g: f64| row(&[(1, 20.0), (2, 20.0 - g)]);
    assert_eq!(
        run(&[2], &[r(2f64.powi(-26))]).positions[0].verdict,
        PositionVerdict::OracleTie
    );
    assert_eq!(
        run(&[2], &[r(2f64.powi(-25))]).positions[0].verdict,
        PositionVerdict::TieFlip
    );
}

#[test]
fn emitting_a_suppressed_id_fails_with_infinite_margin() {
    // id 0 is suppressed; even if it were "close" it is a divergence with m = ∞.
    let j = run(&[0], &[gap_row(1, 2, 0.001)]);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert_eq!(j.positions[0].margin, f64::INFINITY);
}

#[test]
fn token_outside_stored_top_k_uses_the_kth_logit_bound() {
    // top-3 spans 10.0 … 5.0: bound 5.0 > τ → divergence without re-scoring.
    let j = run(&[42], &[gap_row(1, 2, 0.5)]);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert!(j.positions[0].margin_is_bound);
    assert_eq!(j.positions[0].margin, 5.0);
    // a flat top-3 (bound 2^-5 ≤ τ) cannot decide: the walk stops and asks for re-scoring.
    let flat = row(&[(1, 10.0), (2, 9.984375), (3, 9.96875)]);
    let j = run(&[1, 42, 1], &[gap_row(1, 2, 1.0), flat, gap_row(1, 2, 1.0)]);
    assert_eq!(j.needs_rescore, Some(1));
    assert_eq!(j.positions.len(), 2);
    assert_eq!(j.positions[1].verdict, PositionVerdict::NeedsRescore);
    assert_eq!(j.positions[1].margin, 0.03125);
}

#[test]
fn exact_chosen_logit_from_rescoring_overrides_the_top_k_lookup() {
    // re-scored row: token 42's logit is known exactly (9.9375 → m = 0.0625 = τ): tie-flip.
    let mut r = row(&[(1, 10.0), (2, 9.984375)]);
    r.chosen = Some(9.9375);
    let j = run(&[42], &[r]);
    assert_eq!(j.positions[0].verdict, PositionVerdict::TieFlip);
    assert_eq!(j.positions[0].margin, 0.0625);
    assert!(!j.positions[0].margin_is_bound);
}

#[test]
fn missing_rows_ask_for_rescoring_from_the_first_missing_index() {
    let j = run(&[5, 7, 9], &[gap_row(5, 6, 1.0)]);
    assert_eq!(j.needs_rescore, Some(1));
    assert_eq!(j.positions.len(), 1);
}

#[test]
fn engine_failures_and_bad_outputs_are_errors() {
    let rows = vec![gap_row(5, 6, 1.0); 2];
    let j = judge(&steps(&[5, 5]), &rows, &params(), Some("device lost"));
    assert_eq!(j.verdict, Verdict::Error);
    assert_eq!(j.error.as_deref(), Some("device lost"));
    // id 100 is outside V = 100
    let j = run(&[5, 100], &rows);
    assert_eq!(j.verdict, Verdict::Error);
    assert!(j.error.unwrap().contains("output index 1"));
    // NaN in the engine's own top-k
    let mut s = steps(&[5, 5]);
    s[1].top_k = Some(vec![(5, f64::NAN), (6, 1.0)]);
    let j = judge(&s, &rows, &params(), None);
    assert_eq!(j.verdict, Verdict::Error);
    assert!(j.error.unwrap().contains("NaN"));
}

#[test]
fn verdicts_order_by_precedence() {
    assert!(Verdict::Error < Verdict::Divergence);
    assert!(Verdict::Divergence < Verdict::TooManyFlips);
    assert!(Verdict::TooManyFlips < Verdict::TieFlip);
    assert!(Verdict::TieFlip < Verdict::Exact);
}

fn with_gaps(tokens: &[u32], gap: f64) -> Vec<Step> {
    tokens
        .iter()
        .map(|&token| Step {
            token,
            top_k: Some(vec![(token, 1.0), (99, 1.0 - gap)]),
            kind: StepKind::Decode,
        })
        .collect()
}

#[test]
fn cross_mode_fork_is_classified_from_both_sides_margins() {
    // shared prefix [5], fork at index 1: oracle ranks 7 first, 8 second.
    let tau = params().tau;
    let a = with_gaps(&[5, 7, 9], 0.25);
    let b = with_gaps(&[5, 8, 9], 0.125);
    let near = vec![
        gap_row(5, 6, 1.0),
        gap_row(7, 8, 0.03125),
        gap_row(9, 5, 1.0),
    ];
    let ja = judge(&a, &near, &params(), None);
    let jb = judge(&b, &near, &params(), None);
    let f = compare_modes(("plain", &a, &ja), ("spec:4", &b, &jb), tau).unwrap();
    assert_eq!(f.index, 1);
    assert_eq!(f.tokens, (Some(7), Some(8)));
    assert_eq!(f.margins, (Some(0.0), Some(0.03125)));
    assert_eq!(f.engine_gaps, (Some(0.25), Some(0.125)));
    assert_eq!(f.class, ForkClass::TieSplit);

    let far = vec![gap_row(5, 6, 1.0), gap_row(7, 8, 0.5), gap_row(9, 5, 1.0)];
    let jb = judge(&b, &far, &params(), None);
    let ja = judge(&a, &far, &params(), None);
    let f = compare_modes(("plain", &a, &ja), ("spec:4", &b, &jb), tau).unwrap();
    assert_eq!(f.class, ForkClass::Wrong("spec:4".into()));
    assert_eq!(f.class.to_string(), "spec:4 wrong");

    // both wrong: the oracle's top at the fork is a third token 4
    let third = vec![
        gap_row(5, 6, 1.0),
        row(&[(4, 11.0), (7, 10.0), (8, 9.5)]),
        gap_row(9, 5, 1.0),
    ];
    let ja = judge(&a, &third, &params(), None);
    let jb = judge(&b, &third, &params(), None);
    let f = compare_modes(("plain", &a, &ja), ("spec:4", &b, &jb), tau).unwrap();
    assert_eq!(f.margins, (Some(1.0), Some(1.5)));
    assert_eq!(f.class, ForkClass::BothWrong);

    assert!(compare_modes(("plain", &a, &ja), ("plain", &a, &ja), tau).is_none());
    let short = with_gaps(&[5, 7], 0.25);
    let js = judge(&short, &near, &params(), None);
    let f = compare_modes(("plain", &a, &ja), ("batch:4", &short, &js), tau).unwrap();
    assert_eq!((f.index, f.class), (2, ForkClass::Length));
    // the longer side's token 9 at the fork is 2.0 below the oracle's top 4 (> τ = 2^-4): that
    // side is wrong, not a mere length difference
    let off = vec![gap_row(5, 6, 1.0), gap_row(7, 8, 0.5), gap_row(4, 9, 2.0)];
    let ja = judge(&a, &off, &params(), None);
    let js = judge(&short, &off, &params(), None);
    let f = compare_modes(("plain", &a, &ja), ("batch:4", &short, &js), tau).unwrap();
    assert_eq!(f.margins, (Some(2.0), None));
    assert_eq!((f.index, f.class), (2, ForkClass::Wrong("plain".into())));
    let f = compare_modes(("batch:4", &short, &js), ("plain", &a, &ja), tau).unwrap();
    assert_eq!(f.class, ForkClass::Wrong("plain".into()));
}
