//! The float64 oracle against the transformers float64 reference logits of every target fixture
//! (`fixtures/README-models.md` §5): full-vocabulary rows at the `npy_positions`, the top-16 of
//! every position, to ≤ 1e-10 relative (`max|diff| / max|logit|` of the position).

mod oracle_common;

use oracle_common::*;
use reference::model::Model;

const TOL: f64 = 1e-10;

#[test]
fn f64_logits_match_transformers_float64_on_every_target_fixture() {
    let Some(fix) = fixtures() else { return };
    let stems = target_stems(&fix);
    assert_eq!(stems.len(), 7, "expected 7 target GGUFs, found {stems:?}");
    let mut report = Vec::new();
    for stem in &stems {
        let gguf = fix.join("models").join(format!("{stem}.gguf"));
        let meta = read_json(&fix.join("oracle").join(format!("{stem}.logits.json")));
        let sha = reference::gguf::sha256_file(&gguf).expect("sha256");
        assert_eq!(
            meta["file_sha256"].as_str(),
            Some(sha.as_str()),
            "{stem}: file_sha256"
        );

        let model = Model::<f64>::load(&gguf).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let seqs: Vec<Vec<u32>> = meta["sequences"]
            .as_array()
            .expect("sequences")
            .iter()
            .map(|s| json_ids(&s["ids"]))
            .collect();
        let mut caches: Vec<_> = seqs.iter().map(|_| model.new_cache()).collect();
        let mut refs: Vec<_> = caches.iter_mut().collect();
        let toks: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
        let logits = model.forward_batch(&mut refs, &toks).expect("forward");

        // Full rows at npy_positions.
        let (shape, npy) = read_npy_f64(&fix.join("oracle").join(format!("{stem}.logits.npy")));
        let v = model.vocab_size();
        assert_eq!(shape[2], v, "{stem}: npy vocab");
        let mut worst_full: f64 = 0.0;
        for (s, positions) in meta["npy_positions"]
            .as_array()
            .expect("npy_positions")
            .iter()
            .enumerate()
        {
            for (k, p) in positions.as_array().expect("positions").iter().enumerate() {
                let p = p.as_u64().expect("position") as usize;
                let off = (s * shape[1] + k) * v;
                let e = rel_err(&logits[s][p], &npy[off..off + v]);
                assert!(
                    e <= TOL,
                    "{stem}: sequence {s} position {p}: full-row relative error {e:e}"
                );
                worst_full = worst_full.max(e);
            }
        }

        // Top-16 of every position: same ids in the same order, logits to TOL.
        let mut worst_top: f64 = 0.0;
        for (s, per_pos) in meta["top16"].as_array().expect("top16").iter().enumerate() {
            for (p, pairs) in per_pos.as_array().expect("positions").iter().enumerate() {
                let row = &logits[s][p];
                let max_abs = row.iter().map(|x| x.abs()).fold(0.0, f64::max);
                let want = top16_pairs(pairs);
                let got = reference::model::logits::top_k(row, want.len(), &[]);
                let diff = want
                    .iter()
                    .map(|&(id, x)| (row[id as usize] - x).abs())
                    .fold(0.0, f64::max);
                let e = diff / max_abs;
                assert!(
                    e <= TOL,
                    "{stem}: sequence {s} position {p}: top-16 relative error {e:e}"
                );
                let got_ids: Vec<u32> = got.iter().map(|g| g.0).collect();
                let want_ids: Vec<u32> = want.iter().map(|w| w.0).collect();
                assert_eq!(
                    got_ids, want_ids,
                    "{stem}: sequence {s} position {p}: top-16 ids"
                );
                worst_top = worst_top.max(e);
            }
        }
        report.push(format!(
            "{stem}: worst relative error full rows {worst_full:.3e}, top-16 {worst_top:.3e}"
        ));
    }
    for line in &report {
        println!("{line}");
    }
}
