//! Config from GGUF metadata: the fixture values (`fixtures/README-models.md` §2) and typed errors
//! that name the key or tensor; the suppressed-token rule of greedy decoding
//! (`spec/gemma4-text.md` §13.6) on a fixture rewritten with `tokenizer.ggml.suppress_tokens`.

mod oracle_common;

use oracle_common::*;
use reference::config::{Config, ConfigError, LayerKind};
use reference::gguf::{Array, GgufFile, GgufWriter, Value};
use reference::model::{Faults, Model, ModelError};

/// A copy of `src` with metadata edited by `edit` and tensors renamed/reshaped by `tensor`
/// (`None` drops the tensor).
fn rewrite(
    src: &GgufFile,
    edit: impl Fn(&mut GgufWriter),
    tensor: impl Fn(&str, &[u64]) -> Option<(String, Vec<u64>)>,
) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "general.alignment" {
            w.set(k, v.clone());
        }
    }
    edit(&mut w);
    for t in src.tensors() {
        if let Some((name, dims)) = tensor(&t.name, &t.dims) {
            // A shrunk tensor keeps the leading bytes of its data.
            let n = t
                .ggml_type
                .bytes_for(dims.iter().product())
                .expect("whole blocks") as usize;
            w.add_tensor(&name, &dims, t.ggml_type, src.tensor_data(t)[..n].to_vec())
                .expect("add_tensor");
        }
    }
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reread")
}

fn keep(name: &str, dims: &[u64]) -> Option<(String, Vec<u64>)> {
    Some((name.to_string(), dims.to_vec()))
}

#[test]
fn config_reads_fixture_hyperparameters() {
    let Some(fix) = fixtures() else { return };
    let f = GgufFile::open(fix.join("models/e2b-target.BF16.gguf")).expect("open");
    let c = Config::from_gguf(&f).expect("config");
    // README-models §2, e2b: 4 layers s f s f, head dims 32 / 64, FFN 128/128/256/256, PLE 8,
    // 2 shared layers reading layers 0 and 1, W 16, 64·0.25/2 = 8 rotated pairs, soft-cap 30.
    assert_eq!((c.n_layer, c.n_embd, c.n_vocab), (4, 64, 16384));
    assert_eq!(c.kind(0), LayerKind::Sliding);
    assert_eq!(c.kind(3), LayerKind::Full);
    assert_eq!((c.head_dim(0), c.head_dim(1)), (32, 64));
    assert_eq!(c.n_ff, vec![128, 128, 256, 256]);
    assert_eq!(c.n_embd_per_layer, 8);
    assert_eq!(c.kv_source, vec![0, 1, 0, 1]);
    assert_eq!(c.sliding_window, 16);
    assert_eq!(c.rope_pairs_full, 8);
    assert_eq!((c.rope_base_swa, c.rope_base_full), (1e4, 1e6));
    assert_eq!(c.rms_eps, 1e-6);
    assert_eq!(c.final_softcap, Some(30.0));
    assert_eq!(c.k_eq_v, vec![false; 4]);
    assert!(!c.moe && c.suppress_tokens.is_empty());

    let m =
        Config::from_gguf(&GgufFile::open(fix.join("models/moe-target.BF16.gguf")).expect("open"))
            .expect("config");
    assert!(m.moe && m.moe_fused_gate_up);
    assert_eq!((m.n_expert, m.n_expert_used, m.n_ff_exp), (4, 2, 64));
    assert_eq!(m.k_eq_v, vec![false, true, false, true]);
}

#[test]
fn missing_key_and_bad_shape_are_named() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");

    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "gemma4.attention.sliding_window" && k != "general.alignment" {
            w.set(k, v.clone());
        }
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
            .expect("add");
    }
    let no_key = GgufFile::from_bytes(w.to_bytes().expect("bytes")).expect("reread");
    match Config::from_gguf(&no_key) {
        Err(ConfigError::MissingKey { key }) => assert_eq!(key, "gemma4.attention.sliding_window"),
        other => panic!("expected MissingKey, got {other:?}"),
    }

    // A norm weight of half the hidden width.
    let bad = rewrite(
        &src,
        |_| {},
        |n, d| {
            if n == "blk.1.ffn_norm.weight" {
                Some((n.to_string(), vec![d[0] / 2]))
            } else {
                keep(n, d)
            }
        },
    );
    match Config::from_gguf(&bad) {
        Err(ConfigError::ShapeMismatch {
            tensor,
            expected,
            got,
        }) => {
            assert_eq!(
                (tensor.as_str(), expected, got),
                ("blk.1.ffn_norm.weight", vec![64], vec![32])
            );
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    let missing = rewrite(
        &src,
        |_| {},
        |n, d| (n != "blk.4.attn_k_norm.weight").then(|| (n.to_string(), d.to_vec())),
    );
    match Model::<f64>::from_gguf(missing, Faults::default()) {
        Err(ModelError::Config(ConfigError::MissingTensor { name })) => {
            assert_eq!(name, "blk.4.attn_k_norm.weight")
        }
        other => panic!("expected MissingTensor, got {:?}", other.err()),
    }
}

/// Float hyperparameters that would load and then give NaN or meaningless logits are refused,
/// naming the key: a NaN or negative RMSNorm ε, a zero or negative RoPE θ, a stored soft-cap of
/// 0 or NaN. An ε of 0 is a number the formula can take, so it stays accepted.
#[test]
fn unusable_float_hyperparameters_are_named() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    for (key, x, ok) in [
        ("gemma4.attention.layer_norm_rms_epsilon", f32::NAN, false),
        ("gemma4.attention.layer_norm_rms_epsilon", -1e-6, false),
        ("gemma4.attention.layer_norm_rms_epsilon", 0.0, true),
        ("gemma4.rope.freq_base", -1.0, false),
        ("gemma4.rope.freq_base", 0.0, false),
        ("gemma4.rope.freq_base_swa", f32::INFINITY, false),
        ("gemma4.final_logit_softcapping", 0.0, false),
        ("gemma4.final_logit_softcapping", f32::NAN, false),
        ("gemma4.final_logit_softcapping", 50.0, true),
    ] {
        let f = rewrite(&src, |w| w.set(key, Value::F32(x)), keep);
        match Config::from_gguf(&f) {
            Ok(_) if ok => {}
            Err(ConfigError::BadValue { key: k, problem }) if !ok => {
                assert_eq!(k, key);
                assert!(problem.contains(&format!("{x}")), "{problem}");
            }
            other => panic!("{key} = {x}: got {other:?}"),
        }
    }
}

#[test]
fn greedy_never_emits_suppressed_ids_and_takes_the_best_remaining() {
    let Some(fix) = fixtures() else { return };
    let path = fix.join("models/dense-target.F32.gguf");
    let g = read_json(&fix.join("oracle/dense-target.F32.greedy.json"));
    let p = &g["prompts"][0];
    let prompt = json_ids(&p["prompt_ids"]);
    let want = json_ids(&p["greedy_ids"]);
    // Suppress the first two greedy tokens (and an out-of-range id, dropped per §13.6).
    let sup = vec![want[0] as i32, want[1] as i32, 999_999];
    let src = GgufFile::open(&path).expect("open");
    let file = rewrite(
        &src,
        |w| {
            w.set(
                "tokenizer.ggml.suppress_tokens",
                Value::Array(Array::I32(sup.clone())),
            )
        },
        keep,
    );
    let m = Model::<f64>::from_gguf(file, Faults::default()).expect("model");
    let mut s = vec![want[0], want[1]];
    s.sort();
    assert_eq!(m.suppressed_ids(), s.as_slice());

    let gen = m.greedy(&prompt, 8, &[1, 50, 106]).expect("greedy");
    assert!(gen.tokens.iter().all(|t| !s.contains(t)));
    // First token: the best non-suppressed id of the raw prompt logits (raw logits unchanged).
    let raw = Model::<f64>::load(&path).expect("load");
    let row = raw
        .forward(&mut raw.new_cache(), &prompt)
        .expect("forward")
        .pop()
        .expect("row");
    let mut order: Vec<u32> = (0..row.len() as u32).collect();
    order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    let best = *order.iter().find(|i| !s.contains(i)).expect("some id");
    assert_eq!(gen.tokens[0], best);
    assert!(gen.top_k[0].iter().all(|(id, _)| !s.contains(id)));
}

#[test]
fn assistant_config_reads_fixture_and_pairs_with_its_target() {
    let Some(fix) = fixtures() else { return };
    let a = reference::config::AssistantConfig::from_gguf(
        &GgufFile::open(fix.join("models/e2b-assistant.Q8_0.gguf")).expect("open"),
    )
    .expect("assistant config");
    // README-models §2: hidden 32, FFN 64, 2 layers [s, f], head dims 32 / 64, backbone 64.
    assert_eq!(
        (a.n_layer, a.n_embd, a.n_embd_out, a.n_vocab),
        (2, 32, 64, 16384)
    );
    assert_eq!(a.is_swa, vec![true, false]);
    assert_eq!(
        (a.head_dim_swa, a.head_dim_full, a.n_kv_shared),
        (32, 64, 2)
    );
    assert_eq!(a.n_ff, vec![64, 64]);
    let t =
        Config::from_gguf(&GgufFile::open(fix.join("models/e2b-target.BF16.gguf")).expect("open"))
            .expect("target");
    a.check_pairing(&t).expect("pairs with e2b target");
    let d =
        Config::from_gguf(&GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open"))
            .expect("dense");
    assert!(
        matches!(a.check_pairing(&d), Err(ConfigError::Inconsistent(_))),
        "dense target has full head dim 128"
    );
}
