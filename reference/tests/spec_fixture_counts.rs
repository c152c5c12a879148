//! `spec:4` of the oracle against every `oracle/<target>.greedy.json` (README-models §6, §10):
//! emitted ids equal plain greedy and `greedy_ids`; §4.1 counters equal `spec41_reference`,
//! with llama.cpp's first round they equal `spec41_llamacpp_first_round` (counts, per-round
//! accepted, the whole round log: p, K_r, drafted ids, n', bonus); with transformers' visible
//! rows (spec §4.2) the per-round `(pos, drafted ids, accepted)` and counters equal the recorded
//! `transformers_assisted` run. The expected values come from the fixtures' float64
//! transformers models and their independent Python §4.1 loop (`make/models/spec41.py`).

mod spec_common;

use reference::spec::{spec_decode, FirstRound, SpecOptions, Visibility};
use spec_common::*;

fn check_file(stem: &str) {
    let Some(fix) = fixtures() else { return };
    let pair = load_pair(&fix, stem);
    let k = uint(&pair.json["draft_tokens_per_round"]);
    assert_eq!(k, 4);
    for pr in pair.json["prompts"].as_array().expect("prompts") {
        let name = format!("{stem} / {}", pr["name"].as_str().unwrap_or("?"));
        let prompt = ids(&pr["prompt_ids"]);
        let greedy = ids(&pr["greedy_ids"]);
        let plain = pair
            .target
            .greedy(&prompt, pair.max_new, &pair.stop)
            .expect("greedy");
        assert_eq!(plain.tokens, greedy, "{name}: plain greedy");

        // §4.1, §3.4 default head (full: these GGUFs carry no centroid tensors; README §10 shows
        // the e2b full-head counts equal the centroid ones).
        let mut drafter = &pair.assistant;
        let opts = SpecOptions::new(k, pair.max_new, &pair.stop);
        let got = spec_decode(&pair.target, &mut drafter, &prompt, opts.clone()).expect("spec41");
        assert_eq!(got.tokens, greedy, "{name}: spec:4 ids");
        assert_counts(
            &format!("{name} spec41_reference"),
            &got.stats,
            &pr["spec41_reference"],
        );
        let s = &got.stats;
        assert_eq!(
            s.emitted,
            1 + s.accepted + s.rounds + s.plain_steps,
            "{name}: §7 emitted identity"
        );

        // llama.cpp's first round.
        let opts_l = SpecOptions {
            first_round: FirstRound::LlamaCpp,
            ..opts.clone()
        };
        let got_l = spec_decode(&pair.target, &mut drafter, &prompt, opts_l).expect("llamacpp");
        assert_eq!(got_l.tokens, greedy, "{name}: llama.cpp first round ids");
        assert_counts(
            &format!("{name} spec41_llamacpp_first_round"),
            &got_l.stats,
            &pr["spec41_llamacpp_first_round"],
        );
        let s = &got_l.stats;
        assert_eq!(
            s.emitted,
            s.accepted + s.rounds + s.plain_steps,
            "{name}: llama.cpp emitted identity"
        );

        // transformers 5.23.0's visible rows (§4.2).
        let opts_t = SpecOptions {
            visibility: Visibility::Transformers,
            ..opts
        };
        let got_t = spec_decode(&pair.target, &mut drafter, &prompt, opts_t).expect("transformers");
        let tf = &pr["transformers_assisted"];
        assert_eq!(got_t.tokens, ids(&tf["ids"]), "{name}: transformers ids");
        let st = &got_t.stats;
        for (key, value) in [
            ("drafter_forwards", st.drafter_forwards),
            ("target_forwards", st.target_forwards),
            ("drafted_tokens", st.drafted),
            ("accepted_drafts", st.accepted),
        ] {
            assert_eq!(value, uint(&tf[key]), "{name}: transformers {key}");
        }
        // Its `rounds` list starts with the prefill (pos P−1, nothing drafted) and lists plain
        // steps with no drafts; ours logs verify rounds only.
        let want: Vec<(usize, Vec<u32>, usize)> = tf["rounds"]
            .as_array()
            .expect("rounds")
            .iter()
            .skip(1)
            .filter(|r| !r["drafted"].as_array().expect("drafted").is_empty())
            .map(|r| (uint(&r["pos"]), ids(&r["drafted"]), uint(&r["accepted"])))
            .collect();
        let have: Vec<(usize, Vec<u32>, usize)> = st
            .round_log
            .iter()
            .map(|r| (r.p, r.drafted.clone(), r.accepted))
            .collect();
        assert_eq!(have, want, "{name}: transformers rounds");
        println!(
            "{name}: spec41 R/DF/TF/D/A/PS = {}/{}/{}/{}/{}/{}; llama.cpp first round {}/{}/{}/{}/{}/{}; transformers rows {}/{}/{}/{}/{}/{}",
            got.stats.rounds, got.stats.drafter_forwards, got.stats.target_forwards, got.stats.drafted, got.stats.accepted, got.stats.plain_steps,
            got_l.stats.rounds, got_l.stats.drafter_forwards, got_l.stats.target_forwards, got_l.stats.drafted, got_l.stats.accepted, got_l.stats.plain_steps,
            st.rounds, st.drafter_forwards, st.target_forwards, st.drafted, st.accepted, st.plain_steps,
        );
    }
}

#[test]
fn dense_f32() {
    check_file("dense-target.F32");
}

#[test]
fn dense_q4_k_m() {
    check_file("dense-target.Q4_K_M");
}

#[test]
fn e2b_bf16() {
    check_file("e2b-target.BF16");
}

#[test]
fn e2b_q4_0() {
    check_file("e2b-target.Q4_0");
}

#[test]
fn moe_bf16() {
    check_file("moe-target.BF16");
}

#[test]
fn moe_q4_k_m() {
    check_file("moe-target.Q4_K_M");
}

#[test]
fn every_greedy_json_is_covered() {
    let Some(fix) = fixtures() else { return };
    let stems = greedy_stems(&fix);
    assert_eq!(
        stems,
        [
            "dense-target.F32",
            "dense-target.Q4_K_M",
            "e2b-target.BF16",
            "e2b-target.Q4_0",
            "moe-target.BF16",
            "moe-target.Q4_K_M"
        ]
    );
}
