//! Acceptance, partial acceptance and rollback of the oracle's `spec:K` loop
//! (`spec/gemma4-assistant-mtp.md` §4.1, §6, §6.3 checks 2, 3, 4, 7, 8) with scripted drafters:
//! - the `scripted_drafter` case of `dense-target.F32.greedy.json` (README-models §10): emitted
//!   ids, counters, per-round accepted counts and the whole round log;
//! - drafters forced wrong at chosen steps before and after the sliding window (16) fills and
//!   when the verify rows wrap around the sliding ring (`W + K` rows, reserve `R = K`):
//!   after every round the target cache equals, bit for bit, a fresh cache prefilled with the
//!   committed tokens (at every position a later query can read), the carried hidden equals the
//!   teacher-forced final-normed row `p−1`, the drafter sees `p` full and `min(p, W−1)` sliding
//!   rows, `n'` is what the rule implies, and the emitted ids are the fixture's plain greedy
//!   ids (transformers);
//! - EOS as an accepted draft mid-round, as the bonus, and the budget ending mid-round.

mod spec_common;

use reference::decode::KvCache;
use reference::model::Model;
use reference::spec::{spec_decode, FirstRound, ScriptedDrafter, SpecDecoder, SpecOptions};
use spec_common::*;

#[test]
fn scripted_drafter_fixture_case() {
    let Some(fix) = fixtures() else { return };
    let pair = load_pair(&fix, "dense-target.F32");
    for pr in pair.json["prompts"].as_array().expect("prompts") {
        let name = pr["name"].as_str().unwrap_or("?");
        let sc = &pr["scripted_drafter"];
        let prompt = ids(&pr["prompt_ids"]);
        let mut seq = prompt.clone();
        seq.extend(ids(&pr["greedy_ids"]));
        let mut drafter = ScriptedDrafter::every_third_round_second_draft(seq, 7);
        let got = spec_decode(
            &pair.target,
            &mut drafter,
            &prompt,
            SpecOptions::new(4, pair.max_new, &pair.stop),
        )
        .expect("spec");
        assert_eq!(got.tokens, ids(&sc["ids"]), "{name}: ids");
        assert_eq!(got.tokens, ids(&pr["greedy_ids"]), "{name}: ids vs greedy");
        assert_counts(&format!("{name} scripted_drafter"), &got.stats, sc);
        assert_eq!(got.stats.drafter_forwards, 0);
        println!(
            "{name}: scripted accepted per round {:?}",
            got.stats.accepted_per_round
        );
    }
}

/// Asserts `a` and `b` hold bit-identical K/V for every layer at every position a later query
/// can read (`needed`: the last `W − 1` positions on sliding rings, all on full layers).
fn assert_same_cache(a: &KvCache<f64>, b: &KvCache<f64>, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: cache length");
    for l in 0..a.n_layer() {
        let need = a.needed(l);
        assert_eq!(need, b.needed(l), "{what}: needed rows of layer {l}");
        let (ka, va) = a.rows(l, need.clone()).expect("rows of a");
        let (kb, vb) = b.rows(l, need).expect("rows of b");
        let same = |x: &[f64], y: &[f64]| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        };
        assert!(same(&ka, &kb), "{what}: keys of layer {l} differ");
        assert!(same(&va, &vb), "{what}: values of layer {l} differ");
    }
}

/// Runs a scripted drafter that is wrong at the steps `wrong(round) -> Some(i)` (1-based draft
/// index) and checks the state after every round against a plain, teacher-forced recomputation.
fn rollback_case(
    target: &Model<f64>,
    prompt: &[u32],
    greedy: &[u32],
    k: usize,
    first: FirstRound,
    wrong: fn(usize) -> Option<usize>,
    what: &str,
) -> [bool; 4] {
    let mut seq = prompt.to_vec();
    seq.extend_from_slice(greedy);
    let max_new = greedy.len();
    // The wrong id: the greedy token shifted by one (never equal to the target's choice there).
    let seq_c = seq.clone();
    let mut drafter = ScriptedDrafter::new(seq.clone(), move |s| {
        (wrong(s.round) == Some(s.i)).then(|| {
            let right = seq_c.get(s.p + s.i).copied().unwrap_or(0);
            (right + 1) % 16384
        })
    });
    let opts = SpecOptions {
        first_round: first,
        ..SpecOptions::new(k, max_new, &[])
    };
    let mut dec = SpecDecoder::new(target, prompt, opts).expect("prefill");
    let w = target.config().sliding_window;
    // The decoder's cache: reserve R = K, sliding rings of W + K rows, full layers linear.
    let sl = dec.store_layers().sliding.expect("a sliding store layer");
    let cap = w + k;
    assert_eq!(dec.cache().reserve(), k, "{what}: reserve");
    assert_eq!(dec.cache().capacity(sl), Some(cap), "{what}: ring capacity");
    let (mut saw_before_window, mut saw_after_window, mut saw_zero_at_kmax) = (false, false, false);
    let mut saw_wrap = false;
    while !dec.is_done() {
        let p0 = dec.position();
        let round = dec.stats().rounds + 1;
        let rounds_before = dec.stats().rounds;
        dec.step(&mut drafter).expect("step");
        let st = dec.stats();
        let p = dec.position();
        if st.rounds > rounds_before {
            let log = st.round_log.last().expect("log");
            let expect = match wrong(round) {
                Some(i) if i <= log.k => i - 1,
                _ => log.k,
            };
            let expect = expect.min(max_new - (dec.emitted().len() - log.accepted - 1) - 1);
            assert_eq!(log.accepted, expect, "{what}: round {round} at p {p0}: n'");
            if log.accepted < log.k {
                saw_before_window |= p0 + log.k < w;
                saw_after_window |= p0 >= w;
                saw_zero_at_kmax |= log.accepted == 0 && log.k == k;
                // The verify rows p0 … p0+K_r crossed a multiple of the ring capacity after the
                // ring had filled once: rejected rows overwrote the ring's oldest rows.
                saw_wrap |= p0 + log.k >= cap && p0 / cap != (p0 + log.k) / cap;
            }
            // The ring holds at most W + K rows once it has filled.
            let held = dec.cache().held(sl);
            assert!(held.len() <= cap, "{what}: ring holds {held:?}");
        }
        // Cache after rollback = a plain cache over the committed tokens t_0 … t_{p−1}.
        let mut fresh = target.new_cache();
        let hn = target
            .forward_hidden_batch(&mut [&mut fresh], &[&dec.committed()[..p]])
            .expect("teacher forced");
        assert_same_cache(
            dec.cache(),
            &fresh,
            &format!("{what}: after round {round}, p = {p}"),
        );
        // Carry: h = final-normed target row p−1.
        let h = target.config().n_embd;
        let want_h = &hn[(p - 1) * h..p * h];
        assert!(
            dec.hidden()
                .iter()
                .zip(want_h)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{what}: carried hidden at p = {p}"
        );
        // Visible rows for the next round: p full, min(p, W−1) sliding.
        let kv = dec.drafter_kv().expect("kv");
        assert_eq!(
            kv.full.as_ref().map(|r| r.len()),
            Some(p),
            "{what}: full rows at p = {p}"
        );
        assert_eq!(
            kv.sliding.as_ref().map(|r| r.len()),
            Some(p.min(w - 1)),
            "{what}: sliding rows at p = {p}"
        );
        assert_eq!(kv.sliding.as_ref().map(|r| r.positions.end), Some(p));
    }
    assert_eq!(dec.emitted(), greedy, "{what}: emitted ids");
    let st = dec.stats();
    let first_emit = usize::from(first == FirstRound::Spec41);
    assert_eq!(
        st.emitted,
        first_emit + st.accepted + st.rounds + st.plain_steps,
        "{what}: §7 identity"
    );
    assert_eq!(
        st.target_forwards,
        st.prefill_chunks + st.rounds + st.plain_steps
    );
    [
        saw_before_window,
        saw_after_window,
        saw_zero_at_kmax,
        saw_wrap,
    ]
}

/// Wrong at draft 1 in rounds 1, 5, 9 (n' = 0, maximal overwrite), draft 2 in rounds 2, 6, at the
/// last draft in round 3 and 7, none in rounds 4, 8, 10+.
fn rule(round: usize) -> Option<usize> {
    match round % 4 {
        1 if round < 12 => Some(1),
        2 => Some(2),
        3 => Some(4),
        _ => None,
    }
}

/// Runs `case(target, prompt, greedy, what)` on every prompt of the dense and e2b pair fixtures
/// except `count_chat` (plain, 11 tokens < W, and long_context, 47 tokens, cover both sides of
/// the window) and ORs the `[before window, after, n' = 0 at K_r = K, across a ring wrap]` flags
/// the cases return.
fn rollback_coverage(
    fix: &std::path::Path,
    mut case: impl FnMut(&Model<f64>, &[u32], &[u32], &str) -> Vec<[bool; 4]>,
) -> [bool; 4] {
    let mut seen = [false; 4];
    for stem in ["dense-target.F32", "e2b-target.BF16"] {
        let pair = load_pair(fix, stem);
        for pr in pair.json["prompts"].as_array().expect("prompts") {
            let name = pr["name"].as_str().unwrap_or("?");
            if name == "count_chat" {
                continue;
            }
            let what = format!("{stem} / {name}");
            for saw in case(
                &pair.target,
                &ids(&pr["prompt_ids"]),
                &ids(&pr["greedy_ids"]),
                &what,
            ) {
                for (s, w) in seen.iter_mut().zip(saw) {
                    *s |= w;
                }
            }
        }
    }
    seen
}

#[test]
fn rollback_before_and_after_the_window_fills() {
    let Some(fix) = fixtures() else { return };
    let seen = rollback_coverage(&fix, |target, prompt, greedy, what| {
        [FirstRound::Spec41, FirstRound::LlamaCpp]
            .into_iter()
            .map(|first| {
                let what = format!("{what} / {first:?}");
                let saw = rollback_case(target, prompt, &greedy[..40], 4, first, rule, &what);
                println!("{what}: rejections before the window fills / after / n' = 0 at K_r = K / across a ring wrap: {saw:?}");
                saw
            })
            .collect()
    });
    assert_eq!(
        seen, [true; 4],
        "the rule must reject before and after the window fills, reject all K, and reject across a ring wrap"
    );
}

/// Wrong at draft 1 in every second round (n' = 0: all `K_r` rejected rows overwrite the ring),
/// at draft 2 every fourth round (no rejection when `K = 1`).
fn rule_dense(round: usize) -> Option<usize> {
    match round % 4 {
        1 | 3 => Some(1),
        2 => Some(2),
        _ => None,
    }
}

/// The tightest rings: `K = 1` (ring `W + 1`, one row rolled back) and `K = 7` (ring `W + 7`,
/// seven rows rolled back when the first draft is wrong), on the dense target (three sliding
/// layers with own rings) and e2b (KV sharing: reuse layers read the store layer's ring).
#[test]
fn rollback_with_tight_rings_k1_and_k7() {
    let Some(fix) = fixtures() else { return };
    let seen = rollback_coverage(&fix, |target, prompt, greedy, what| {
        [1, 7]
            .into_iter()
            .map(|k| {
                let what = format!("{what} / K = {k}");
                let saw = rollback_case(
                    target,
                    prompt,
                    greedy,
                    k,
                    FirstRound::Spec41,
                    rule_dense,
                    &what,
                );
                println!("{what}: {saw:?}");
                saw
            })
            .collect()
    });
    assert_eq!(seen, [true; 4]);
}

#[test]
fn eos_and_budget_mid_round() {
    let Some(fix) = fixtures() else { return };
    let pair = load_pair(&fix, "dense-target.F32");
    let pr = &pair.json["prompts"][1]; // plain
    let prompt = ids(&pr["prompt_ids"]);
    let greedy = ids(&pr["greedy_ids"]);
    let mut seq = prompt.clone();
    seq.extend_from_slice(&greedy);
    let perfect = || ScriptedDrafter::new(seq.clone(), |_| None);
    // A stop id whose first occurrence in the greedy continuation is at index j: plain greedy
    // with that stop emits greedy[..=j].
    for j in [3usize, 5, 6, 10] {
        if greedy[..j].contains(&greedy[j]) {
            continue;
        }
        let stop = [greedy[j]];
        let want = pair
            .target
            .greedy(&prompt, 64, &stop)
            .expect("greedy")
            .tokens;
        assert_eq!(want, greedy[..=j]);
        let got = spec_decode(
            &pair.target,
            &mut perfect(),
            &prompt,
            SpecOptions::new(4, 64, &stop),
        )
        .expect("spec");
        assert_eq!(got.tokens, want, "stop at {j}");
        // Hand derivation with a perfect drafter, K = 4: round r emits greedy[1+5(r−1) ..= 5r];
        // the last round ends at j, so its n' = (j − 1) mod 5 (0 when the stop is the bonus… or
        // the first draft position's token), and rounds = ceil(j / 5).
        let st = &got.stats;
        assert_eq!(st.rounds, j.div_ceil(5), "stop at {j}: rounds");
        assert_eq!(
            *st.accepted_per_round.last().expect("round"),
            (j - 1) % 5,
            "stop at {j}: last n'"
        );
        assert_eq!(st.round_log.last().map(|r| r.bonus), Some(greedy[j]));
        assert_eq!(st.emitted, 1 + st.accepted + st.rounds + st.plain_steps);
    }
    // Budget: 7 tokens = 1 (prefill) + 5 (round 1, K_r = 4) + 1 plain step (K_r = min(4, 1 − 1) = 0).
    let got = spec_decode(
        &pair.target,
        &mut perfect(),
        &prompt,
        SpecOptions::new(4, 7, &[]),
    )
    .expect("spec");
    assert_eq!(got.tokens, greedy[..7]);
    assert_eq!(
        (got.stats.rounds, got.stats.plain_steps, got.stats.drafted),
        (1, 1, 4)
    );
    // Budget 4: one round with K_r = min(4, 3 − 1) = 2.
    let got = spec_decode(
        &pair.target,
        &mut perfect(),
        &prompt,
        SpecOptions::new(4, 4, &[]),
    )
    .expect("spec");
    assert_eq!(got.tokens, greedy[..4]);
    assert_eq!(
        (
            got.stats.rounds,
            got.stats.plain_steps,
            got.stats.drafted,
            got.stats.accepted
        ),
        (1, 0, 2, 2)
    );
    // Budget 1: prefill only.
    let got = spec_decode(
        &pair.target,
        &mut perfect(),
        &prompt,
        SpecOptions::new(4, 1, &[]),
    )
    .expect("spec");
    assert_eq!(got.tokens, greedy[..1]);
    assert_eq!(got.stats.target_forwards, 1);
}
