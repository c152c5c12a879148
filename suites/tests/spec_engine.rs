//! `spec:K` of the reference engines (`suites::spec_engine`) on the real-toolchain dense fixture
//! (`dense-target.Q4_K_M` + `dense-assistant.F32`): token ids and counters equal
//! `reference::spec::spec_decode` (an independent implementation of the same loop), and in the
//! f64 oracle speculative output equals plain greedy for every K (conformance §7 speculative
//! invariance), with transformers' float64 greedy ids (`oracle/dense-target.Q4_K_M.greedy.json`)
//! as the expected tokens.

mod fixture_common;

use fixture_common::{count_chat, greedy_ids};
use reference::model::Model;
use reference::spec::{spec_decode, Assistant, SpecOptions};
use suites::reference_engine::GemmaCodec;
use suites::spec_engine::spec_generate;
use suites::{Request, StepKind};

#[test]
fn spec_engine_matches_reference_spec_decoder_and_plain_greedy() {
    let Some(fx) = fixture_common::fixtures_with("models/dense-assistant.F32.gguf") else {
        return;
    };
    let target = fx.join("models/dense-target.Q4_K_M.gguf");
    let codec = GemmaCodec::load(&target).unwrap();
    let prompt = count_chat(&codec);
    let expect = greedy_ids(&fx, "dense-target.Q4_K_M", "count_chat");
    let model = Model::<f64>::load(&target).unwrap();
    let assistant = Assistant::<f64>::load(fx.join("models/dense-assistant.F32.gguf")).unwrap();
    let n = 20;
    for k in [1, 2, 4] {
        let req = Request {
            id: "count_chat".into(),
            prompt: prompt.clone(),
            max_tokens: n,
            stop: vec![1, 50, 106],
        };
        let mut d = &assistant;
        let traj = spec_generate(&model, &mut d, &req, k, 16).unwrap();
        let mut d2 = &assistant;
        let want = spec_decode(
            &model,
            &mut d2,
            &prompt,
            SpecOptions::new(k, n, &[1, 50, 106]),
        )
        .unwrap();
        assert_eq!(traj.tokens(), want.tokens, "spec:{k} tokens");
        assert_eq!(traj.tokens(), expect[..n], "spec:{k} = float64 greedy");
        let s = traj.spec.as_ref().unwrap();
        assert_eq!(s.rounds, want.stats.rounds, "spec:{k} rounds");
        assert_eq!(s.drafted, want.stats.drafted, "spec:{k} drafted");
        assert_eq!(s.accepted, want.stats.accepted, "spec:{k} accepted");
        let per_round: Vec<usize> = s.per_round.iter().map(|r| r.1).collect();
        assert_eq!(per_round, want.stats.accepted_per_round);
        // every emitted token carries the top-1 of its own row, and step kinds add up
        for st in &traj.steps {
            assert_eq!(st.top_k.as_ref().unwrap()[0].0, st.token);
        }
        let accepted = traj
            .steps
            .iter()
            .filter(|s| s.kind == StepKind::VerifyAccepted)
            .count();
        assert_eq!(accepted, s.accepted);
    }
}
