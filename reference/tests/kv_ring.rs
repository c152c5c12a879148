//! The sliding-window ring of the oracle's KV cache (`reference::decode`; `spec/gemma4-text.md`
//! §4.6, `spec/gemma4-assistant-mtp.md` §6.2) on the fixture models (`fixtures/README-models.md`
//! §2: sliding window W = 16; e2b: layer 0 sliding and layer 1 full own K/V, layers 2 and 3
//! reuse them; sliding head dim 32, full head dim 64, one KV head):
//! - ring decode (one token per step and uneven chunks, rings as small as `W`) against the
//!   transformers float64 top-16 of the fixture sequences (≤ 1e-10 relative, the oracle's bound)
//!   and against a full recompute (≤ 1e-12 relative) at positions up to 6·W past the window;
//! - rolling back further than the ring still holds gives the typed error with the positions
//!   derived by hand below, and the cache refuses forwards until a reachable rollback;
//! - sliding storage stays at `min(len, W + R)` rows while the context grows to 1088 tokens.

mod oracle_common;

use oracle_common::*;
use reference::decode::KvCacheError;
use reference::model::{Model, ModelError};

const TOL: f64 = 1e-12;

fn load(fix: &std::path::Path, stem: &str) -> Model<f64> {
    Model::<f64>::load(fix.join("models").join(format!("{stem}.gguf"))).expect("load")
}

/// The `long_context` prompt followed by its 64 greedy ids (111 tokens, about 7 windows).
fn long_ids(fix: &std::path::Path, stem: &str) -> Vec<u32> {
    let g = read_json(&fix.join("oracle").join(format!("{stem}.greedy.json")));
    let p = g["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "long_context")
        .expect("long_context");
    let mut ids = json_ids(&p["prompt_ids"]);
    ids.extend(json_ids(&p["greedy_ids"]));
    ids
}

/// Runs `ids` through a cache with reserve `r` in forwards of the given sizes (cycled).
fn chunked(m: &Model<f64>, ids: &[u32], r: usize, sizes: &[usize]) -> Vec<Vec<f64>> {
    let mut cache = m.new_cache_with_reserve(r);
    let mut rows = Vec::new();
    let mut at = 0;
    for &n in sizes.iter().cycle() {
        if at >= ids.len() {
            break;
        }
        let end = (at + n).min(ids.len());
        rows.extend(m.forward(&mut cache, &ids[at..end]).expect("forward"));
        at = end;
    }
    assert_eq!(cache.len(), ids.len());
    rows
}

#[test]
fn ring_decode_matches_transformers_top16_and_full_recompute() {
    let Some(fix) = fixtures() else { return };
    for stem in ["e2b-target.BF16", "dense-target.F32", "moe-target.Q4_K_M"] {
        let m = load(&fix, stem);
        let w = m.config().sliding_window;
        assert_eq!(w, 16, "{stem}: README-models §2 window");

        // 1. transformers float64 top-16 of every position of the fixture sequences (the
        //    24-token `count` sequence is past the window), decoded one token per step through a
        //    ring of exactly W rows (R = 0).
        let meta = read_json(&fix.join("oracle").join(format!("{stem}.logits.json")));
        let mut worst_tf: f64 = 0.0;
        for (s, seq) in meta["sequences"]
            .as_array()
            .expect("sequences")
            .iter()
            .enumerate()
        {
            let ids = json_ids(&seq["ids"]);
            let rows = chunked(&m, &ids, 0, &[1]);
            for (p, pairs) in meta["top16"][s]
                .as_array()
                .expect("top16")
                .iter()
                .enumerate()
            {
                let row = &rows[p];
                let max_abs = row.iter().map(|x| x.abs()).fold(0.0, f64::max);
                let want = top16_pairs(pairs);
                let got = reference::model::logits::top_k(row, want.len(), &[]);
                assert_eq!(
                    got.iter().map(|x| x.0).collect::<Vec<_>>(),
                    want.iter().map(|x| x.0).collect::<Vec<_>>(),
                    "{stem}: sequence {s} position {p}: top-16 ids"
                );
                for &(id, x) in &want {
                    worst_tf = worst_tf.max((row[id as usize] - x).abs() / max_abs);
                }
            }
        }
        assert!(worst_tf <= 1e-10, "{stem}: vs transformers {worst_tf:e}");

        // 2. 111 tokens (positions up to ~7 W): full recompute (one forward, no ring involved)
        //    vs rings of W + R rows fed one token at a time and in uneven chunks, some longer
        //    than the ring (only their last W + R rows are kept).
        let ids = long_ids(&fix, stem);
        assert!(ids.len() > 6 * w);
        let full = m
            .forward(&mut m.new_cache_with_reserve(0), &ids)
            .expect("full");
        let mut worst: f64 = 0.0;
        for (r, sizes) in [
            (0, &[1][..]),
            (0, &[5, 1, 1, 16, 17, 3, 33]),
            (3, &[1, 19, 2, 40]),
            (8, &[7]),
        ] {
            let e = max_rel(&chunked(&m, &ids, r, sizes), &full);
            assert!(e <= TOL, "{stem}: R = {r}, chunks {sizes:?}: {e:e}");
            worst = worst.max(e);
        }
        println!(
            "{stem}: ring decode vs transformers top-16 {worst_tf:.1e}, vs full recompute {worst:.1e} ({} positions)",
            ids.len()
        );
    }
}

#[test]
fn rollback_past_the_ring_is_a_typed_error() {
    let Some(fix) = fixtures() else { return };
    let m = load(&fix, "e2b-target.BF16");
    let ids = long_ids(&fix, "e2b-target.BF16");
    let full = m
        .forward(&mut m.new_cache_with_reserve(0), &ids[..60])
        .expect("full");

    // R = 2: the sliding ring of layer 0 has W + R = 18 rows. After one forward over
    // positions 0…39 it holds 40 − 18 = 22 … 39; layer 1 (full) holds 0 … 39.
    let mut c = m.new_cache_with_reserve(2);
    m.forward(&mut c, &ids[..40]).expect("prefill");
    assert_eq!(c.capacity(0), Some(18));
    assert_eq!(c.capacity(1), None);
    assert_eq!((c.held(0), c.held(1), c.held(2)), (22..40, 0..40, 22..40));

    // Reads outside the ring: typed, naming the layer asked (2 reads layer 0's slot).
    assert_eq!(
        c.k(2, 10),
        Err(KvCacheError::NotHeld {
            layer: 2,
            asked: 10..11,
            held: 22..40
        })
    );
    assert!(c.k(1, 10).is_ok());

    // Back to 36 positions: the next query (position 36) needs 36 + 1 − 16 = 21 … 35, but 21 was
    // overwritten by position 39 (39 mod 18 = 21 mod 18 = 3).
    let e = c.truncate(36).expect_err("4 rows > R + 1");
    assert_eq!(
        e,
        KvCacheError::RollbackPastWindow {
            layer: 0,
            len: 36,
            cached: 40,
            window: 16,
            capacity: 18,
            needed_from: 21,
            oldest_held: 22
        }
    );
    println!("{e}");
    assert_eq!(c.len(), 40, "a failed rollback changes nothing");
    match m.forward(&mut c, &ids[40..41]) {
        Err(ModelError::Cache(KvCacheError::Unusable(inner))) => assert_eq!(*inner, e),
        other => panic!("forward after a failed rollback: {other:?}"),
    }

    // R + 1 = 3 rows back (needs 22 … 36) works, clears the failure, and the continuation is the
    // clean run's.
    c.truncate(37).expect("3 rows back");
    assert_eq!(c.held(0), 22..37);
    let rows = m.forward(&mut c, &ids[37..60]).expect("resume");
    let e_rb = max_rel(&rows, &full[37..]);
    assert!(e_rb <= TOL, "resume after rollback: {e_rb:e}");

    // A chunk longer than the ring cannot be rolled back as a whole: after positions 60 … 89
    // in one forward the ring holds 72 … 89; back to 60 needs 45 … 59.
    m.forward(&mut c, &ids[60..90]).expect("chunk");
    assert!(matches!(
        c.truncate(60),
        Err(KvCacheError::RollbackPastWindow {
            layer: 0,
            needed_from: 45,
            oldest_held: 72,
            ..
        })
    ));
    // Emptying the cache needs no row and always works.
    c.truncate(0).expect("to empty");
    assert_eq!((c.len(), c.held(0), c.held(1)), (0, 0..0, 0..0));
    let again = m.forward(&mut c, &ids[..60]).expect("from empty");
    assert!(max_rel(&again, &full) <= TOL);
}

#[test]
fn sliding_storage_stays_bounded_as_the_context_grows() {
    let Some(fix) = fixtures() else { return };
    let m = load(&fix, "e2b-target.BF16");
    let v = m.vocab_size() as u32;
    // A count_300-sized context (~1024 prompt tokens + decode), synthetic ids.
    let ids: Vec<u32> = (0..1088u32)
        .map(|t| (t * 7919 + 17) % (v - 10) + 5)
        .collect();
    // e2b: slots 0 (sliding, [nkv, d] = [1, 32]) and 1 (full, [1, 64]); K and V, f64.
    let (ws, wf) = (32usize, 64usize);
    let linear_bytes = |len: usize| 2 * (ws + wf) * len * 8;
    for r in [0usize, 8] {
        let cap = 16 + r;
        let mut c = m.new_cache_with_reserve(r);
        // 1024-token prefill in chunks of 64, then 64 single-token steps.
        let mut sizes = vec![64; 16];
        sizes.extend([1; 64]);
        let mut at = 0;
        for n in sizes {
            m.forward_hidden_batch(&mut [&mut c], &[&ids[at..at + n]])
                .expect("forward");
            at += n;
            assert_eq!(c.stored_rows(0), at.min(cap), "sliding rows at {at}");
            assert_eq!(c.stored_rows(2), at.min(cap), "reuse layer 2 reads slot 0");
            assert_eq!(c.stored_rows(1), at, "full rows at {at}");
            assert_eq!(c.held(0), at.saturating_sub(cap)..at);
        }
        let ring = 2 * ws * cap * 8;
        let full = 2 * wf * at * 8;
        println!(
            "e2b fixture, {at} positions, R = {r}: cache {} bytes (sliding ring {ring} + full {full}); keeping every position: {} bytes",
            c.bytes(),
            linear_bytes(at)
        );
        assert_eq!(c.bytes(), ring + full);
    }
}
