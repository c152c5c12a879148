//! The drafter forward's heads and pairing checks (`spec/gemma4-assistant-mtp.md` §1.1, §3,
//! §6.3 check 6). The fixture assistants carry no centroid tensors (llama.cpp's converter drops
//! them, README-models §7), so the centroid head is exercised on the dense assistant with
//! synthetic centroid tensors added through the project's GGUF extension (`gguf-gemma4.md`
//! §8.2). Expected values come from an independent implementation of §3.1 in this file (plain
//! f64 sums for the cluster scores, selection by sorting) on top of the full head, whose logits
//! the fixture count tests validate against transformers.

mod spec_common;

use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::model::Model;
use reference::quant::GgmlType;
use reference::spec::{Assistant, DraftStep, DrafterKv, Head, SpecError, StoreLayers};
use spec_common::*;

const C: usize = 64;
const TOP_K: usize = 8;
const V: usize = 16384;

/// `ord[i] = 7919·i mod V` (a permutation: 7919 is odd and V a power of two).
fn ordering() -> Vec<i32> {
    (0..V).map(|i| ((i * 7919) % V) as i32).collect()
}

/// Deterministic values in [−1, 1) (64-bit LCG), exactly representable in f32.
fn lcg(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The dense assistant GGUF plus centroid tensors `cw` (`[C, H_A]` row-major) and the ordering.
fn with_centroids(path: &std::path::Path, cw: &[f32]) -> GgufFile {
    let src = GgufFile::open(path).expect("assistant");
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k, v.clone());
    }
    w.set("gemma4-assistant.use_ordered_embeddings", Value::Bool(true));
    w.set("gemma4-assistant.num_centroids", Value::U32(C as u32));
    w.set(
        "gemma4-assistant.centroid_intermediate_top_k",
        Value::U32(TOP_K as u32),
    );
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
            .expect("copy tensor");
    }
    let h_a = cw.len() / C;
    let bytes: Vec<u8> = cw.iter().flat_map(|x| x.to_le_bytes()).collect();
    w.add_tensor(
        "masked_embd_centroids.weight",
        &[h_a as u64, C as u64],
        GgmlType::F32,
        bytes,
    )
    .expect("centroids");
    let ord: Vec<u8> = ordering().iter().flat_map(|x| x.to_le_bytes()).collect();
    w.add_tensor(
        "masked_embd_ordering.weight",
        &[V as u64],
        GgmlType::I32,
        ord,
    )
    .expect("ordering");
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("read back")
}

/// One real drafter step: the dense target prefilled over the `plain` prompt, `g` = its last
/// final-normed row, §2.5 rows, `x` = the target's next token, `p` = prompt length.
fn one_step(
    target: &Model<f64>,
    assistant: &Assistant<f64>,
    prompt: &[u32],
    x: u32,
) -> DraftStep<f64> {
    let mut cache = target.new_cache();
    let hn = target
        .forward_hidden_batch(&mut [&mut cache], &[prompt])
        .expect("prefill");
    let h = target.config().n_embd;
    let g = &hn[hn.len() - h..];
    let store = assistant.check_target(target.config()).expect("pairing");
    let kv = DrafterKv::intended(&cache, &store, prompt.len(), target.config().sliding_window)
        .expect("kv");
    assistant
        .forward(target, &kv, x, g, prompt.len())
        .expect("drafter forward")
}

/// §3.1 by hand: the selected token set `T` for the normed state `n`.
fn selected(cw: &[f32], n: &[f64]) -> Vec<usize> {
    let h_a = n.len();
    let scores: Vec<f64> = (0..C)
        .map(|c| (0..h_a).map(|i| cw[c * h_a + i] as f64 * n[i]).sum())
        .collect();
    let mut idx: Vec<usize> = (0..C).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    assert!(
        scores[idx[TOP_K - 1]] - scores[idx[TOP_K]] > 1e-9,
        "cluster scores too close for an independent check"
    );
    let ord = ordering();
    let m = V / C;
    idx[..TOP_K]
        .iter()
        .flat_map(|&c| ord[c * m..(c + 1) * m].iter().map(|&t| t as usize))
        .collect()
}

/// Checks the centroid logits against the full ones per §3.1 and returns the argmax over `T`.
fn check_centroid(full: &[f64], cent: &[f64], t_set: &[usize]) -> usize {
    let mut in_t = vec![false; V];
    for &t in t_set {
        in_t[t] = true;
    }
    let min_t = t_set.iter().map(|&t| full[t]).fold(f64::INFINITY, f64::min);
    for t in 0..V {
        if in_t[t] {
            assert_eq!(
                cent[t].to_bits(),
                full[t].to_bits(),
                "selected id {t}: s_t equals the full head's value"
            );
        } else {
            assert_eq!(
                cent[t],
                min_t - 1.0,
                "unselected id {t}: fill value min − 1"
            );
        }
    }
    let best = t_set
        .iter()
        .copied()
        .max_by(|&a, &b| full[a].total_cmp(&full[b]).then(b.cmp(&a)))
        .expect("T non-empty");
    let am = Assistant::<f64>::draft_token(&DraftStep {
        logits: cent.to_vec(),
        hidden: vec![],
        normed: vec![],
    })
    .expect("argmax") as usize;
    assert_eq!(am, best, "centroid argmax = argmax over T of the full head");
    best
}

#[test]
fn centroid_head_matches_an_independent_implementation() {
    let Some(fix) = fixtures() else { return };
    let pair = load_pair(&fix, "dense-target.F32");
    let apath = fix.join("models/dense-assistant.F32.gguf");
    let pr = &pair.json["prompts"][1];
    let prompt = ids(&pr["prompt_ids"]);
    let x = ids(&pr["greedy_ids"])[0];
    // The shipped GGUF has no centroid tensors: §3.4 default is the full head.
    assert_eq!(pair.assistant.head(), Head::Full);
    assert!(!pair.assistant.has_centroid_head());
    let full = one_step(&pair.target, &pair.assistant, &prompt, x);
    let h_a = full.normed.len();

    // 1. Random centroids: the §3.4 default becomes the centroid head.
    let cw = lcg(C * h_a, 42);
    let mut a =
        Assistant::<f64>::from_gguf(with_centroids(&apath, &cw)).expect("assistant with centroids");
    assert_eq!(a.head(), Head::Centroid);
    let cent = one_step(&pair.target, &a, &prompt, x);
    assert_eq!(cent.normed, full.normed, "heads share the trunk");
    assert_eq!(cent.hidden, full.hidden, "g' does not depend on the head");
    let t_set = selected(&cw, &cent.normed);
    assert_eq!(t_set.len(), TOP_K * V / C);
    check_centroid(&full.logits, &cent.logits, &t_set);
    a.set_head(Head::Full).expect("full head");
    assert_eq!(one_step(&pair.target, &a, &prompt, x).logits, full.logits);

    // 2. A constructed case: the full head's winner sits in a cluster whose centroid points
    //    away from n, so it is not selected and the two heads draft different tokens.
    let t_star = Assistant::<f64>::draft_token(&full).expect("argmax") as usize;
    let c_star = ordering()
        .iter()
        .position(|&t| t as usize == t_star)
        .expect("in ordering")
        / (V / C);
    let mut cw2 = cw.clone();
    for i in 0..h_a {
        cw2[c_star * h_a + i] = (-10.0 * full.normed[i]) as f32;
    }
    let a2 = Assistant::<f64>::from_gguf(with_centroids(&apath, &cw2)).expect("assistant 2");
    let cent2 = one_step(&pair.target, &a2, &prompt, x);
    let t_set2 = selected(&cw2, &cent2.normed);
    assert!(!t_set2.contains(&t_star));
    let best = check_centroid(&full.logits, &cent2.logits, &t_set2);
    assert_ne!(
        best, t_star,
        "centroid head drafts inside T, not the full-head winner"
    );
    println!("full-head draft {t_star} (cluster {c_star}), centroid-head draft {best}");
}

#[test]
fn pairing_and_store_layers() {
    let Some(fix) = fixtures() else { return };
    let dense = load_pair(&fix, "dense-target.F32");
    let e2b = load_pair(&fix, "e2b-target.BF16");
    // §2.3 / README-models §10: dense reads layers 3 (s) and 4 (f); e2b (2 KV-shared layers of
    // 4) reads its store layers 0 (s) and 1 (f); both agree with llama.cpp's positional rule.
    let s = StoreLayers::of(dense.target.config());
    assert_eq!(
        (s.sliding, s.full, s.matches_llamacpp_rule),
        (Some(3), Some(4), true)
    );
    let s = StoreLayers::of(e2b.target.config());
    assert_eq!(
        (s.sliding, s.full, s.matches_llamacpp_rule),
        (Some(0), Some(1), true)
    );
    let moe = Model::<f64>::load(fix.join("models/moe-target.BF16.gguf")).expect("moe");
    let s = StoreLayers::of(moe.config());
    assert_eq!((s.sliding, s.full), (Some(2), Some(3)));
    // The dense drafter (full head dim 128) does not fit the e2b target (64).
    match dense.assistant.check_target(e2b.target.config()) {
        Err(SpecError::Config(e)) => assert!(e.to_string().contains("key_length"), "{e}"),
        other => panic!("expected a pairing error, got {other:?}"),
    }
}
