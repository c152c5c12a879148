//! The rule with wrapper engines around the real oracle on the smallest real-toolchain fixture
//! (`dense-target.Q4_K_M.gguf`, README-models.md §3): (b) one argmax flipped where the oracle
//! margin is large → divergence at exactly that position; (c) a fork accepted as a tie-flip
//! (τ raised above the margin) → the oracle re-scores the engine's own continuation, every later
//! position gets a margin; (a) noise far below τ on every logit → only `exact`/`tie-flip`, never a
//! divergence; (d) a GGUF copy with one corrupted weight block (the first block of the `","` row of
//! the tied `token_embd`, zeroed) judged against the intact file → divergence where the float64
//! engine leaves the float64 greedy output. Expected tokens come from
//! `oracle/dense-target.Q4_K_M.greedy.json` (transformers float64 greedy), not from the code under
//! test.

mod fixture_common;

use std::path::PathBuf;
use std::time::Instant;

use fixture_common::{count_chat, greedy_ids};

use suites::mock::{Perturbation, Perturbed};
use suites::oracle::{Oracle, ScoreCache};
use suites::reference_engine::{GemmaCodec, ReferenceEngine, ReferenceOracle};
use suites::rule::{judge, RuleParams, Verdict};
use suites::{Engine, Mode, Request};

#[test]
fn forced_flips_on_the_real_oracle_are_judged_at_the_right_position() {
    let Some(fx) = fixture_common::fixtures_with("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    let codec = GemmaCodec::load(&model).unwrap();
    let mut oracle = ReferenceOracle::load(&model).unwrap();
    let prompt = count_chat(&codec);
    assert_eq!(prompt.len(), 37);
    let expect = greedy_ids(&fx, "dense-target.Q4_K_M", "count_chat");
    let req = Request {
        id: "count_chat".into(),
        prompt: prompt.clone(),
        max_tokens: 24,
        stop: vec![1, 50, 106],
    };

    // the f32 engine alone reproduces the float64 greedy ids
    let mut f32e = ReferenceEngine::<f32>::load(&model).unwrap();
    let plain = f32e
        .generate(std::slice::from_ref(&req), &Mode::Plain)
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(plain.tokens(), expect[..24]);

    let mut params = RuleParams {
        tau: 2f64.powi(-10),
        max_tie_flips: 3,
        suppressed: oracle.suppressed_ids(),
        oracle_tie_rel: 1e-9,
        vocab_size: oracle.vocab_size(),
    };
    let mut wrapped = Perturbed::new(
        f32e,
        Perturbation::Force {
            id: "count_chat".into(),
            index: 5,
            rank: 1,
        },
    );
    let forced = wrapped
        .generate(&[req], &Mode::Plain)
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(forced.tokens()[..5], expect[..5]);
    assert_ne!(forced.tokens()[5], expect[5]);

    let mut cache = ScoreCache::new(None);
    let t0 = Instant::now();
    let rows = cache
        .score_trajectory(&mut oracle, &prompt, &forced.tokens(), 16)
        .unwrap();
    println!(
        "f64 scoring of {} tokens: {:.2} s",
        prompt.len() + 24,
        t0.elapsed().as_secs_f64()
    );
    // (b) the margin at the flip is large (> 1 logit on this model): divergence at exactly 5
    let j = judge(&forced.steps, &rows, &params, None);
    assert_eq!(j.verdict, Verdict::Divergence);
    assert_eq!(j.first_divergence, Some(5));
    assert!(j.positions[5].margin > 1.0, "{}", j.positions[5].margin);
    assert_eq!(j.positions[5].oracle_top, expect[5]);
    // (c) with τ above that margin the same fork is a tie-flip, and every later position has
    // an exact margin from re-scoring the engine's own prefix
    params.tau = j.positions[5].margin * 2.0;
    let j = judge(&forced.steps, &rows, &params, None);
    assert_eq!(j.verdict, Verdict::TieFlip);
    assert_eq!(j.positions.len(), 24);
    assert!(rows.iter().all(|r| r.chosen.is_some_and(f64::is_finite)));
}

#[test]
fn noise_far_below_tau_gives_only_exact_or_tie_flips() {
    let Some(fx) = fixture_common::fixtures_with("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    let codec = GemmaCodec::load(&model).unwrap();
    let mut oracle = ReferenceOracle::load(&model).unwrap();
    let prompt = count_chat(&codec);
    let tau = 2f64.powi(-9);
    let params = RuleParams {
        tau,
        max_tie_flips: 3,
        suppressed: oracle.suppressed_ids(),
        oracle_tie_rel: 1e-9,
        vocab_size: oracle.vocab_size(),
    };
    // |noise| ≤ τ/64 on every logit: a flip needs m_t ≤ 2·τ/64 + the f32 error (calibrated ≤ τ/2)
    let mut e = Perturbed::new(
        ReferenceEngine::<f32>::load(&model).unwrap(),
        Perturbation::Noise { amp: tau / 64.0 },
    );
    let req = Request {
        id: "count_chat".into(),
        prompt: prompt.clone(),
        max_tokens: 24,
        stop: vec![1, 50, 106],
    };
    let t = e.generate(&[req], &Mode::Plain).unwrap().pop().unwrap();
    let mut cache = ScoreCache::new(None);
    let rows = cache
        .score_trajectory(&mut oracle, &prompt, &t.tokens(), 16)
        .unwrap();
    let j = judge(&t.steps, &rows, &params, None);
    assert!(
        matches!(j.verdict, Verdict::Exact | Verdict::TieFlip),
        "{:?} at {:?}",
        j.verdict,
        j.first_divergence
    );
    assert_eq!(
        t.tokens(),
        greedy_ids(&fx, "dense-target.Q4_K_M", "count_chat")[..24]
    );
}

#[test]
fn one_corrupted_weight_block_is_a_divergence() {
    use reference::gguf::{GgufFile, GgufWriter};
    let Some(fx) = fixture_common::fixtures_with("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    let codec = GemmaCodec::load(&model).unwrap();
    let comma = codec.tokenizer().encode(",", false).unwrap();
    assert_eq!(comma.len(), 1);
    let comma = comma[0];
    // copy every key and tensor; zero the first block of the "," row of token_embd
    let src = GgufFile::open(&model).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k, v.clone());
    }
    for t in src.tensors() {
        let mut data = src.tensor_data(t).to_vec();
        if t.name == "token_embd.weight" {
            let ty = t.ggml_type;
            let row = ty.bytes_for(t.row_len() as u64).unwrap() as usize;
            let block = ty.bytes_for(ty.block_size() as u64).unwrap() as usize;
            let at = comma as usize * row;
            data[at..at + block].fill(0);
        }
        w.add_tensor(&t.name, &t.dims, t.ggml_type, data).unwrap();
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("dense-target.Q4_K_M.corrupt.gguf");
    w.write_file(&bad).unwrap();

    let mut oracle = ReferenceOracle::load(&model).unwrap();
    let prompt = count_chat(&codec);
    let expect = greedy_ids(&fx, "dense-target.Q4_K_M", "count_chat");
    let first_comma = expect.iter().position(|&t| t == comma).unwrap();
    let mut e = ReferenceEngine::<f32>::load(&bad).unwrap();
    let req = Request {
        id: "count_chat".into(),
        prompt: prompt.clone(),
        max_tokens: 24,
        stop: vec![1, 50, 106],
    };
    let t = e.generate(&[req], &Mode::Plain).unwrap().pop().unwrap();
    let mut cache = ScoreCache::new(None);
    let rows = cache
        .score_trajectory(&mut oracle, &prompt, &t.tokens(), 16)
        .unwrap();
    let params = RuleParams {
        tau: 2f64.powi(-9),
        max_tie_flips: 3,
        suppressed: oracle.suppressed_ids(),
        oracle_tie_rel: 1e-9,
        vocab_size: oracle.vocab_size(),
    };
    let j = judge(&t.steps, &rows, &params, None);
    // a zeroed block of H/256 blocks lowers the "," logit without removing it: where the engine
    // first leaves the float64 greedy output is not hand-derivable, but it must be a divergence
    // there (not a tie-flip), and the engine must agree with float64 greedy before it
    assert_eq!(j.verdict, Verdict::Divergence);
    let d = j.first_divergence.unwrap();
    assert!(d >= first_comma, "{d} < {first_comma}");
    assert_eq!(t.tokens()[..d], expect[..d]);
    assert_ne!(t.tokens()[d], expect[d]);
    assert_eq!(j.positions[d].oracle_top, expect[d]);
    assert!(
        j.positions[d].margin > params.tau,
        "{}",
        j.positions[d].margin
    );
    println!(
        "corrupted block: divergence at output index {d}, margin {}",
        j.positions[d].margin
    );
    let _ = std::fs::remove_file(&bad);
}
