//! Self-consistency of the oracle: KV-cache decoding, chunked prefill, batching, rollback and
//! thread count change no logit (the design makes them bitwise equal; the tests allow 1e-12
//! relative and print the observed maximum); the f32 engine stays close to the f64 oracle.
//! Inputs: the fixture models and their `long_context` prompt (47 tokens, past the 16-token
//! sliding window), `fixtures/README-models.md` §6.

mod oracle_common;

use oracle_common::*;
use reference::decode::KvCache;
use reference::model::{Float, Model};
use reference::score::score;

const TOL: f64 = 1e-12;

fn long_prompt(fix: &std::path::Path, stem: &str) -> Vec<u32> {
    let g = read_json(&fix.join("oracle").join(format!("{stem}.greedy.json")));
    let p = g["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "long_context")
        .expect("long_context");
    let mut ids = json_ids(&p["prompt_ids"]);
    ids.extend(json_ids(&p["greedy_ids"]).into_iter().take(13)); // 60 tokens
    ids
}

/// Full-recompute rows of `ids` (one forward from an empty cache).
fn full_rows<F: Float>(m: &Model<F>, ids: &[u32]) -> Vec<Vec<f64>> {
    m.forward(&mut m.new_cache(), ids).expect("forward")
}

#[test]
fn kv_cache_decode_and_chunked_prefill_equal_full_recompute() {
    let Some(fix) = fixtures() else { return };
    for stem in ["dense-target.F32", "e2b-target.BF16", "moe-target.Q4_K_M"] {
        let m = Model::<f64>::load(fix.join("models").join(format!("{stem}.gguf"))).expect("load");
        let ids = long_prompt(&fix, stem);
        let full = full_rows(&m, &ids);

        // Prefill 7 tokens, then one token per step through the cache.
        let mut cache = m.new_cache();
        let mut dec = m.forward(&mut cache, &ids[..7]).expect("prefill");
        for &id in &ids[7..] {
            dec.extend(m.forward(&mut cache, &[id]).expect("step"));
        }
        let e_dec = max_rel(&dec, &full);

        // Chunked prefill, uneven chunks.
        let mut cache = m.new_cache();
        let mut chunked = Vec::new();
        for part in ids.chunks(11) {
            chunked.extend(m.forward(&mut cache, part).expect("chunk"));
        }
        let e_chunk = max_rel(&chunked, &full);

        // Teacher-forced scoring (top-k values and next-token logits) vs the full rows.
        let sc = score(&m, std::slice::from_ref(&ids), 16).expect("score");
        let mut e_score: f64 = 0.0;
        for (t, ps) in sc[0].iter().enumerate() {
            let mx = full[t].iter().map(|x| x.abs()).fold(0.0, f64::max);
            let want = reference::model::logits::top_k(&full[t], 16, &[]);
            assert_eq!(
                ps.top_k.iter().map(|x| x.0).collect::<Vec<_>>(),
                want.iter().map(|x| x.0).collect::<Vec<_>>()
            );
            for (&(_, a), &(_, b)) in ps.top_k.iter().zip(&want) {
                e_score = e_score.max((a - b).abs() / mx);
            }
            if let Some(nl) = ps.next_logit {
                e_score = e_score.max((nl - full[t][ids[t + 1] as usize]).abs() / mx);
            }
        }
        println!("{stem}: decode vs full {e_dec:.1e}, chunked vs full {e_chunk:.1e}, score vs full {e_score:.1e}");
        assert!(e_dec <= TOL && e_chunk <= TOL && e_score <= TOL);
    }
}

#[test]
fn batched_forward_and_rollback_equal_single_sequence_runs() {
    let Some(fix) = fixtures() else { return };
    let stem = "e2b-target.BF16";
    let m = Model::<f64>::load(fix.join("models").join(format!("{stem}.gguf"))).expect("load");
    let ids = long_prompt(&fix, stem);
    let (a, b) = (&ids[..40], &ids[5..29]);

    // Two sequences in one batch, continuing from caches of different lengths.
    let (mut ca, mut cb) = (m.new_cache(), m.new_cache());
    m.forward(&mut ca, &a[..20]).expect("a");
    m.forward(&mut cb, &b[..3]).expect("b");
    let batch = m
        .forward_batch(&mut [&mut ca, &mut cb], &[&a[20..], &b[3..]])
        .expect("batch");
    let e_a = max_rel(&batch[0], &full_rows(&m, a)[20..]);
    let e_b = max_rel(&batch[1], &full_rows(&m, b)[3..]);

    // Rollback: run 9 wrong tokens, truncate, continue; must equal the clean run.
    let mut c = m.new_cache();
    m.forward(&mut c, &a[..30]).expect("prefix");
    m.forward(&mut c, &[7; 9]).expect("garbage");
    assert_eq!(c.len(), 39);
    c.truncate(30)
        .expect("rollback of 9 rows (default reserve 8: R + 1 rows always work)");
    let resumed = m.forward(&mut c, &a[30..]).expect("resume");
    let e_rb = max_rel(&resumed, &full_rows(&m, a)[30..]);
    println!("{stem}: batch {e_a:.1e} / {e_b:.1e}, rollback {e_rb:.1e}");
    assert!(e_a <= TOL && e_b <= TOL && e_rb <= TOL);
}

#[test]
fn drafter_can_read_store_layer_kv_through_reuse_layers() {
    let Some(fix) = fixtures() else { return };
    let m = Model::<f64>::load(fix.join("models/e2b-target.BF16.gguf")).expect("load");
    let mut c: KvCache<f64> = m.new_cache();
    m.forward(&mut c, &[2, 105, 2041, 107]).expect("forward");
    // e2b: layers 2 (sliding) and 3 (full) reuse layers 0 and 1 (README-models §2).
    assert_eq!(c.source_layers(), &[0, 1, 0, 1]);
    assert_eq!(c.k(2, 3), c.k(0, 3));
    assert_eq!(c.v(3, 1), c.v(1, 1));
    assert_eq!(c.kv_dims(1), (1, 64));
    assert_eq!(c.rows(0, 0..4).expect("rows").0.len(), 4 * 32);
}

#[test]
fn f32_engine_is_close_to_f64_oracle() {
    let Some(fix) = fixtures() else { return };
    let mut worst: f64 = 0.0;
    for stem in target_stems(&fix) {
        let path = fix.join("models").join(format!("{stem}.gguf"));
        let meta = read_json(&fix.join("oracle").join(format!("{stem}.logits.json")));
        let m64 = Model::<f64>::load(&path).expect("load f64");
        let m32 = Model::<f32>::load(&path).expect("load f32");
        let mut e: f64 = 0.0;
        for s in meta["sequences"].as_array().expect("sequences") {
            let ids = json_ids(&s["ids"]);
            e = e.max(max_rel(&full_rows(&m32, &ids), &full_rows(&m64, &ids)));
        }
        println!("{stem}: f32 engine vs f64 oracle, max relative logit error {e:.2e}");
        worst = worst.max(e);
    }
    // transformers' own float32 model is 5.6e-7 … 6.9e-7 from float64 (README-models §5).
    assert!(
        worst < 1e-4,
        "f32 engine too far from the oracle: {worst:e}"
    );
}

#[test]
fn logits_are_bitwise_identical_for_1_and_3_threads() {
    let Some(fix) = fixtures() else { return };
    for stem in ["dense-target.Q4_K_M", "moe-target.BF16"] {
        let m = Model::<f64>::load(fix.join("models").join(format!("{stem}.gguf"))).expect("load");
        let ids = long_prompt(&fix, stem);
        let seqs = vec![ids.clone(), ids[..17].to_vec()];
        let run = |n: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .expect("pool");
            pool.install(|| (full_rows(&m, &ids), score(&m, &seqs, 16).expect("score")))
        };
        let (r1, s1) = run(1);
        let (r3, s3) = run(3);
        assert!(
            r1.iter()
                .flatten()
                .zip(r3.iter().flatten())
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{stem}: rows differ"
        );
        assert_eq!(s1, s3, "{stem}: scores differ");
    }
}
