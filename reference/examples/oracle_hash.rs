//! Bitwise fingerprint of the oracle's outputs (a regression check for performance work, not a
//! correctness test): prints one SHA-256 per (model, float type, mode) over the bits of every
//! logit / score it produces. Compare two runs with `diff`.
//!
//! `cargo run -p reference --example oracle_hash [> target/oracle_hash.txt]`; models from
//! `GEMMA4_FIXTURES` (default `../shared/fixtures`).

use std::path::{Path, PathBuf};

use reference::model::{Float, Model};
use reference::score::score;
use sha2::{Digest, Sha256};

fn fixtures() -> PathBuf {
    reference::fixtures_dir()
}

fn seq(len: usize, salt: usize, vocab: usize) -> Vec<u32> {
    (0..len)
        .map(|t| ((t * 7919 + salt * 131 + 17) % (vocab - 10) + 5) as u32)
        .collect()
}

fn hash_rows(h: &mut Sha256, rows: &[Vec<f64>]) {
    for r in rows {
        for v in r {
            h.update(v.to_bits().to_le_bytes());
        }
    }
}

fn run<F: Float>(path: &Path) -> Vec<(String, String)> {
    let m = Model::<F>::load(path).expect("load");
    let v = m.vocab_size();
    let mut out = Vec::new();
    // 1. Scoring a batch of mixed lengths (few-position and blocked paths, > sliding window).
    let seqs = vec![seq(1, 1, v), seq(5, 2, v), seq(70, 3, v), seq(9, 4, v)];
    let sc = score(&m, &seqs, 8).expect("score");
    let mut h = Sha256::new();
    for s in &sc {
        for p in s {
            for &(id, l) in &p.top_k {
                h.update(id.to_le_bytes());
                h.update(l.to_bits().to_le_bytes());
            }
            h.update(p.next_logit.unwrap_or(f64::NAN).to_bits().to_le_bytes());
        }
    }
    out.push(("score".to_string(), hex(h)));
    // 2. Full logits: one prefill of 40 tokens; chunks of 17, 1 ×6, 6, 2, 9; must equal.
    let s = seq(40, 9, v);
    let mut c = m.new_cache();
    let full = m.forward(&mut c, &s).expect("forward");
    let mut h = Sha256::new();
    hash_rows(&mut h, &full);
    out.push(("full_logits".to_string(), hex(h)));
    let mut c = m.new_cache();
    let mut rows = m.forward(&mut c, &s[..17]).expect("chunk");
    rows.extend(m.forward(&mut c, &s[17..18]).expect("decode"));
    for t in 18..23 {
        rows.extend(m.forward(&mut c, &s[t..t + 1]).expect("decode"));
    }
    rows.extend(m.forward(&mut c, &s[23..29]).expect("chunk"));
    rows.extend(m.forward(&mut c, &s[29..31]).expect("chunk"));
    rows.extend(m.forward(&mut c, &s[31..]).expect("chunk"));
    let mut h = Sha256::new();
    hash_rows(&mut h, &rows);
    out.push(("chunked_logits".to_string(), hex(h)));
    out
}

fn hex(h: Sha256) -> String {
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

fn main() {
    let dir = fixtures().join("models");
    for stem in [
        "dense-target.Q4_K_M",
        "e2b-target.BF16",
        "moe-target.Q4_K_M",
        "dense-target.F32",
    ] {
        let p = dir.join(format!("{stem}.gguf"));
        for (k, h) in run::<f64>(&p) {
            println!("{stem} f64 {k} {h}");
        }
        if stem == "e2b-target.BF16" {
            for (k, h) in run::<f32>(&p) {
                println!("{stem} f32 {k} {h}");
            }
        }
    }
}
