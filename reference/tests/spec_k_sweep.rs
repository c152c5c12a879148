//! `spec:K` with the real assistant equals plain greedy token for token (float64 oracle,
//! `spec/gemma4-assistant-mtp.md` §4.1 "Guarantee", §6.3 check 1) for every fixture
//! target/assistant pair, every prompt and `K ∈ {1, 2, 4, 7}`; expected ids: the fixtures'
//! float64 transformers `greedy_ids`. Prints the acceptance counts (§7).

mod spec_common;

use reference::spec::{spec_decode, SpecOptions};
use spec_common::*;

#[test]
fn spec_k_equals_greedy_for_every_pair_and_k() {
    let Some(fix) = fixtures() else { return };
    for stem in greedy_stems(&fix) {
        let pair = load_pair(&fix, &stem);
        for pr in pair.json["prompts"].as_array().expect("prompts") {
            let name = format!("{stem} / {}", pr["name"].as_str().unwrap_or("?"));
            let prompt = ids(&pr["prompt_ids"]);
            let greedy = ids(&pr["greedy_ids"]);
            let mut line = String::new();
            for k in [1usize, 2, 4, 7] {
                let mut drafter = &pair.assistant;
                let got = spec_decode(
                    &pair.target,
                    &mut drafter,
                    &prompt,
                    SpecOptions::new(k, pair.max_new, &pair.stop),
                )
                .expect("spec");
                assert_eq!(got.tokens, greedy, "{name}: spec:{k}");
                let s = &got.stats;
                assert_eq!(
                    s.emitted,
                    1 + s.accepted + s.rounds + s.plain_steps,
                    "{name}: spec:{k} §7 identity"
                );
                assert_eq!(s.drafter_forwards, s.drafted);
                assert!(s.round_log.iter().all(|r| r.accepted <= r.k && r.k <= k));
                line += &format!(
                    "  K={k}: R {} D {} A {} PS {} ({:.3})",
                    s.rounds,
                    s.drafted,
                    s.accepted,
                    s.plain_steps,
                    s.acceptance_rate()
                );
            }
            println!("{name}:{line}");
        }
    }
}
