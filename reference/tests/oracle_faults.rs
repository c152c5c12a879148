//! The fixture checks catch classic implementation bugs: each planted fault (`model::Faults`)
//! moves the logits far beyond 1e-6 relative from the transformers float64 reference, while the
//! fault-free model stays within 1e-10. Model: `e2b-target.BF16` (sliding and full layers,
//! proportional RoPE, PLE, KV sharing; `fixtures/README-models.md` §2); reference rows: its
//! `.logits.npy` (last position of each sequence; the `count` sequence is longer than the window).

mod oracle_common;

use oracle_common::*;
use reference::model::{Faults, Model};

/// Worst full-row relative error of the model against the npy rows.
fn worst_error(fix: &std::path::Path, stem: &str, faults: Faults) -> f64 {
    let model =
        Model::<f64>::load_with_faults(fix.join("models").join(format!("{stem}.gguf")), faults)
            .expect("load");
    let meta = read_json(&fix.join("oracle").join(format!("{stem}.logits.json")));
    let (shape, npy) = read_npy_f64(&fix.join("oracle").join(format!("{stem}.logits.npy")));
    let v = shape[2];
    let mut worst: f64 = 0.0;
    for (s, seq) in meta["sequences"]
        .as_array()
        .expect("sequences")
        .iter()
        .enumerate()
    {
        let ids = json_ids(&seq["ids"]);
        let rows = model
            .forward(&mut model.new_cache(), &ids)
            .expect("forward");
        for (k, p) in meta["npy_positions"][s]
            .as_array()
            .expect("positions")
            .iter()
            .enumerate()
        {
            let off = (s * shape[1] + k) * v;
            worst = worst.max(rel_err(
                &rows[p.as_u64().expect("pos") as usize],
                &npy[off..off + v],
            ));
        }
    }
    worst
}

#[test]
fn every_planted_fault_moves_logits_far_beyond_tolerance() {
    let Some(fix) = fixtures() else { return };
    let stem = "e2b-target.BF16";
    let clean = worst_error(&fix, stem, Faults::default());
    println!("no fault: {clean:.2e}");
    assert!(clean <= 1e-10);
    let cases: [(&str, Faults); 6] = [
        (
            "sliding window off by one",
            Faults {
                sliding_window_off_by_one: true,
                ..Faults::default()
            },
        ),
        (
            "RoPE pairs interleaved",
            Faults {
                rope_interleaved: true,
                ..Faults::default()
            },
        ),
        (
            "norm weights as 1 + w",
            Faults {
                norm_one_plus_w: true,
                ..Faults::default()
            },
        ),
        (
            "embedding not scaled",
            Faults {
                no_embed_scale: true,
                ..Faults::default()
            },
        ),
        (
            "reuse layers compute own K/V",
            Faults {
                reuse_layers_own_kv: true,
                ..Faults::default()
            },
        ),
        (
            "proportional RoPE on wrong lanes",
            Faults {
                proportional_rope_wrong_lanes: true,
                ..Faults::default()
            },
        ),
    ];
    for (name, f) in cases {
        let e = worst_error(&fix, stem, f);
        println!("{name}: {e:.2e}");
        assert!(e > 1e-6, "fault '{name}' not caught: relative error {e:e}");
    }
}
