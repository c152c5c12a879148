//! The rule with wrapper engines around the real oracle on the smallest real-toolchain fixture
//! (`dense-target.Q4_K_M.gguf`, README-models.md §3): (b) one argmax flipped where the oracle
//! margin is large → divergence at exactly that position; (c) a fork accepted as a tie-flip
//! (τ raised above the margin) → the oracle re-scores the engine's own continuation, every later
//! position gets a margin. Expected tokens come from `oracle/dense-target.Q4_K_M.greedy.json`
//! (transformers float64 greedy), not from the code under test.

use std::path::PathBuf;
use std::time::Instant;

use suites::mock::{Perturbation, Perturbed};
use suites::oracle::{Codec, Oracle, ScoreCache};
use suites::reference_engine::{GemmaCodec, ReferenceEngine, ReferenceOracle};
use suites::rule::{judge, RuleParams, Verdict};
use suites::suite::{Message, PromptInput};
use suites::{Engine, Mode, Request};

fn fixtures() -> Option<PathBuf> {
    let p = std::env::var_os("GEMMA4_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"));
    if p.join("models/dense-target.Q4_K_M.gguf").exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", p.display());
        None
    }
}

fn count_chat(codec: &GemmaCodec) -> Vec<u32> {
    let m = vec![Message {
        role: "user".into(),
        content: "Write the numbers from 1 to 300 in order, separated by commas, and nothing more."
            .into(),
    }];
    codec.encode(&PromptInput::Messages(m), false).unwrap()
}

fn greedy_ids(fx: &std::path::Path) -> Vec<u32> {
    let text = std::fs::read_to_string(fx.join("oracle/dense-target.Q4_K_M.greedy.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let p = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "count_chat")
        .unwrap();
    p["greedy_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn forced_flips_on_the_real_oracle_are_judged_at_the_right_position() {
    let Some(fx) = fixtures() else { return };
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    let codec = GemmaCodec::load(&model).unwrap();
    let mut oracle = ReferenceOracle::load(&model).unwrap();
    let prompt = count_chat(&codec);
    assert_eq!(prompt.len(), 37);
    let expect = greedy_ids(&fx);
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
