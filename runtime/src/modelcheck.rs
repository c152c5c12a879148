//! `runtime model-check`: the CUDA forward against the f64 oracle (`reference::model::Model`)
//! on real token sequences, and the engine's self-consistency (design/conformance.md §4: the
//! same prefix must give the same numbers in prefill, decode and batch rows).
//!
//! Per model: sequences = each prompt + the oracle's greedy continuation; reports the max
//! |logit difference| over every row and id, argmax agreement, and bitwise comparisons of
//! prefill rows vs one-token decode rows vs rows inside a running batch vs chunked prefill
//! (5 rows per call), plus repeatability over 10 identical runs (issue 5: bitwise identical
//! output over 10 repeats).

use std::time::Instant;

use reference::model::{Faults, Model};
use serde_json::json;

use crate::args::{checked_load, TargetFile};
use crate::engine::{CudaEngine, EngineOptions};
use crate::error::RuntimeError;
use crate::forward::Row;

/// Texts used as prompts (the smoke suite's, run as plain text with BOS).
pub const PROMPTS: [&str; 3] = [
    "Write the numbers from 1 to 300 in order, separated by commas, and nothing more.",
    "Once upon a time there was a little model that",
    "The sun rose over the quiet town. A small dog ran to the park. Numbers: 40, 41, 42, 43,",
];

/// Context of the model-check engine (positions per slot): a prompt plus `--gen` tokens fit it.
pub const CHECK_CTX: usize = 512;

fn err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Model {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// (number of differing f32 values, max |a − b|) of two row sets (a row-count mismatch counts
/// as one more difference).
pub(crate) fn cmp(a: &[Vec<f32>], b: &[Vec<f32>]) -> (usize, f64) {
    let mut n = 0;
    let mut m = 0f64;
    for (ra, rb) in a.iter().zip(b) {
        for (x, y) in ra.iter().zip(rb) {
            if x.to_bits() != y.to_bits() {
                n += 1;
                m = m.max((*x as f64 - *y as f64).abs());
            }
        }
    }
    if a.len() != b.len() {
        n += 1;
    }
    (n, m)
}

fn argmax(r: &[f64]) -> usize {
    let mut b = 0;
    for (i, &v) in r.iter().enumerate() {
        if v > r[b] {
            b = i;
        }
    }
    b
}

/// Runs the check for one model, checked and opened by [`crate::args::model_check`] (the
/// engine and the f64 oracle are built from that open file, its config and prompt ids: the
/// file is not opened, nor its weights scanned, again); returns the JSON record (also printed
/// as a log by the caller).
pub fn check_model(
    model: TargetFile,
    gen_tokens: usize,
) -> Result<serde_json::Value, RuntimeError> {
    let TargetFile {
        path,
        file,
        config,
        prompts,
        ..
    } = model;
    let p = path.display().to_string();
    let t0 = Instant::now();
    let mut eng = CudaEngine::from_gguf_with(
        &file,
        config,
        EngineOptions {
            slots: 4,
            max_ctx: CHECK_CTX,
        },
        checked_load(),
    )?;
    let load_s = t0.elapsed().as_secs_f64();
    let oracle = Model::<f64>::from_gguf_with(file, Faults::default(), checked_load())
        .map_err(|e| err(&p, e))?;
    let mut seqs = Vec::new();
    for prompt in prompts {
        let g = oracle
            .greedy(&prompt, gen_tokens, &[])
            .map_err(|e| err(&p, e))?;
        let mut s = prompt;
        s.extend(g.tokens);
        seqs.push(s);
    }
    let mut max_diff = 0f64;
    let mut max_rel = 0f64;
    let (mut agree, mut rows_n) = (0usize, 0usize);
    let mut per_seq = Vec::new();
    let mut consistency = Vec::new();
    for (si, seq) in seqs.iter().enumerate() {
        let mut cache = oracle.new_cache();
        let want = oracle.forward(&mut cache, seq).map_err(|e| err(&p, e))?;
        let tf = Instant::now();
        let got = eng.logits_all(seq)?;
        let fwd_s = tf.elapsed().as_secs_f64();
        let mut md = 0f64;
        let mut ag = 0;
        for (w, g) in want.iter().zip(&got) {
            let g64: Vec<f64> = g.iter().map(|&v| v as f64).collect();
            let scale = w.iter().fold(0f64, |a, &b| a.max(b.abs())).max(1e-30);
            for (a, b) in w.iter().zip(&g64) {
                let d = (a - b).abs();
                md = md.max(d);
                max_rel = max_rel.max(d / scale);
            }
            if argmax(w) == argmax(&g64) {
                ag += 1;
            }
        }
        max_diff = max_diff.max(md);
        agree += ag;
        rows_n += want.len();
        per_seq.push(
            json!({"seq": si, "len": seq.len(), "max_abs_logit_diff": md,
            "argmax_agree": ag, "rows": want.len(), "cuda_forward_s": fwd_s}),
        );

        // Self-consistency.
        let prefill = got;
        eng.reset();
        let mut decode = Vec::new();
        for &t in seq {
            decode.extend(eng.forward(&[Row {
                slot: 0,
                token: t,
                logits: true,
            }])?);
        }
        eng.reset();
        let mut chunked = Vec::new();
        for part in seq.chunks(5) {
            let rows: Vec<Row> = part
                .iter()
                .map(|&token| Row {
                    slot: 0,
                    token,
                    logits: true,
                })
                .collect();
            chunked.extend(eng.forward(&rows)?);
        }
        // Batch: this sequence in slot 1, the other sequences in slots 0, 2, 3, fed together
        // (others in chunks of 3 tokens while this one decodes one token per step).
        eng.reset();
        let others: Vec<&Vec<u32>> = seqs.iter().filter(|s| *s != seq).collect();
        let mut batch = Vec::new();
        for (i, &t) in seq.iter().enumerate() {
            let mut rows = Vec::new();
            for (oi, o) in others.iter().enumerate() {
                let slot = if oi == 0 { 0 } else { oi + 1 };
                for &ot in o.iter().skip(3 * i).take(3) {
                    rows.push(Row {
                        slot,
                        token: ot,
                        logits: false,
                    });
                }
            }
            let at = rows.len() / 2;
            rows.insert(
                at,
                Row {
                    slot: 1,
                    token: t,
                    logits: true,
                },
            );
            let _ = i;
            batch.extend(eng.forward(&rows)?);
        }
        eng.reset();
        let mut repeat_diff = 0;
        for _ in 0..10 {
            let again = eng.logits_all(seq)?;
            repeat_diff += cmp(&prefill, &again).0;
        }
        let (dn, dm) = cmp(&prefill, &decode);
        let (cn, cm) = cmp(&prefill, &chunked);
        let (bn, bm) = cmp(&prefill, &batch);
        consistency.push(json!({"seq": si,
            "prefill_vs_decode": {"differing": dn, "max_abs": dm},
            "prefill_vs_chunked5": {"differing": cn, "max_abs": cm},
            "prefill_vs_batch": {"differing": bn, "max_abs": bm},
            "repeat10_differing": repeat_diff}));
    }
    Ok(json!({
        "model": p,
        "weight_bytes": eng.model().weight_bytes,
        "load_s": load_s,
        "max_abs_logit_diff": max_diff,
        "max_rel_logit_diff": max_rel,
        "argmax_agree": agree,
        "rows": rows_n,
        "per_seq": per_seq,
        "self_consistency": consistency,
        "precision": "f32 activations and accumulation; weights decoded exactly from GGUF blocks",
    }))
}
