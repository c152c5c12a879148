//! Header values that size allocations or loops are bounded by the file before anything is
//! sized by them (`spec/gguf-gemma4.md` §5.1, §6, §8.2): a huge but well-formed `block_count`
//! is refused naming the key and the layers the tensors name (it used to allocate
//! `8 · block_count` bytes per per-layer key: 16 GiB for 2^31 − 1); absurd head counts give a
//! shape mismatch naming the tensor (no `u64` overflow); a sliding window beyond every position
//! is full attention (no overflow in the ring sizes). Every file here is a few MB at most.

mod oracle_common;

use oracle_common::fixtures;
use reference::config::{AssistantConfig, Config, ConfigError};
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::model::{Faults, Model, ModelError};
use reference::quant::GgmlType;

/// A metadata-only-ish GGUF: `general.architecture = arch`, `{arch}.block_count = n` and one
/// F32 `[4]` tensor per name in `tensors`.
fn tiny(arch: &str, n: Value, tensors: &[&str]) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String(arch.into()));
    w.set(&format!("{arch}.block_count"), n);
    for name in tensors {
        w.add_tensor(name, &[4], GgmlType::F32, vec![0; 16])
            .expect("add_tensor");
    }
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reread")
}

/// `Config::from_gguf` of `f` is `LayerCount` with exactly these numbers.
fn assert_layer_count(
    err: ConfigError,
    key: &str,
    block_count: usize,
    layers_in_file: usize,
    n_tensors: usize,
) {
    match err {
        ConfigError::LayerCount {
            key: k,
            block_count: b,
            layers_in_file: l,
            n_tensors: t,
        } => {
            assert_eq!(
                (k.as_str(), b, l, t),
                (key, block_count, layers_in_file, n_tensors)
            );
            let msg = ConfigError::LayerCount {
                key: k,
                block_count: b,
                layers_in_file: l,
                n_tensors: t,
            }
            .to_string();
            assert!(
                msg.contains(key) && msg.contains(&block_count.to_string()),
                "{msg}"
            );
        }
        other => panic!("expected LayerCount, got {other:?}"),
    }
}

/// The reported case: `block_count` = 2^31 − 1 (u32) in a file whose tensors name 2 layers
/// (`blk.0`, `blk.1`; `blk.1` twice, `token_embd` none) is refused by both configs before any
/// per-layer array exists; the model loader passes the error through.
#[test]
fn huge_block_count_is_refused_naming_the_key() {
    let names = [
        "token_embd.weight",
        "blk.0.attn_norm.weight",
        "blk.1.attn_norm.weight",
        "blk.1.ffn_norm.weight",
    ];
    let f = tiny("gemma4", Value::U32(0x7fff_ffff), &names);
    let e = Config::from_gguf(&f).expect_err("refused");
    assert_layer_count(e, "gemma4.block_count", 0x7fff_ffff, 2, 4);

    let f = tiny("gemma4-assistant", Value::U64(u64::MAX), &names);
    let e = AssistantConfig::from_gguf(&f).expect_err("refused");
    assert_layer_count(
        e,
        "gemma4-assistant.block_count",
        usize::MAX,
        2,
        names.len(),
    );

    let f = tiny("gemma4", Value::U32(0x7fff_ffff), &names);
    match Model::<f64>::from_gguf(f, Faults::default()) {
        Err(ModelError::Config(ConfigError::LayerCount { key, .. })) => {
            assert_eq!(key, "gemma4.block_count")
        }
        other => panic!("expected LayerCount, got {:?}", other.err()),
    }
}

/// The bound is exact: as many layers as the tensors name passes it (the next check then asks
/// for the next key), one more is refused. Names that only look like layers (`blk.x.…`,
/// `blk.7` without a dot) do not count.
#[test]
fn block_count_bound_is_the_layers_the_tensors_name() {
    let names = ["blk.0.a", "blk.1.a", "blk.x.a", "blk.7", "other.weight"];
    let e = Config::from_gguf(&tiny("gemma4", Value::U32(2), &names)).expect_err("incomplete");
    assert!(
        matches!(&e, ConfigError::MissingKey { key } if key == "gemma4.embedding_length"),
        "{e:?}"
    );
    let e = Config::from_gguf(&tiny("gemma4", Value::U32(3), &names)).expect_err("3 > 2");
    assert_layer_count(e, "gemma4.block_count", 3, 2, 5);
}

/// The user's file: `dense-target.Q4_K_M.gguf` with the u32 `gemma4.block_count` at byte 223
/// (5, README-models §2: 5 layers) set to 0x7fffffff. Refused naming the key and the 5 layers its
/// tensors name; the same for the assistant's key in `dense-assistant.F32.gguf` (2 layers).
#[test]
fn fixture_with_huge_block_count_is_refused() {
    let Some(fix) = fixtures() else { return };
    let mut b = std::fs::read(fix.join("models/dense-target.Q4_K_M.gguf")).expect("read");
    assert_eq!(&b[201..219], b"gemma4.block_count");
    assert_eq!(b[219..223], 4u32.to_le_bytes(), "value type u32");
    assert_eq!(b[223..227], 5u32.to_le_bytes(), "5 layers");
    b[223..227].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let f = GgufFile::from_bytes(b).expect("parses");
    let n_tensors = f.tensors().len();
    let e = Config::from_gguf(&f).expect_err("refused");
    assert_layer_count(e, "gemma4.block_count", 0x7fff_ffff, 5, n_tensors);

    let mut b = std::fs::read(fix.join("models/dense-assistant.F32.gguf")).expect("read");
    let key = b"gemma4-assistant.block_count";
    let at = b
        .windows(key.len())
        .position(|w| w == key)
        .expect("key present")
        + key.len();
    assert_eq!(b[at..at + 4], 4u32.to_le_bytes(), "value type u32");
    let layers = u32::from_le_bytes(b[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
    b[at + 4..at + 8].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    let f = GgufFile::from_bytes(b).expect("parses");
    let n_tensors = f.tensors().len();
    let e = AssistantConfig::from_gguf(&f).expect_err("refused");
    assert_layer_count(
        e,
        "gemma4-assistant.block_count",
        0x7fff_ffff,
        layers,
        n_tensors,
    );
}

/// A copy of `src` with metadata edited by `edit` (tensors unchanged).
fn with_metadata(src: &GgufFile, edit: impl Fn(&mut GgufWriter)) -> GgufFile {
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "general.alignment" {
            w.set(k, v.clone());
        }
    }
    edit(&mut w);
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
            .expect("add_tensor");
    }
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reread")
}

/// A head count of 2^62 (a multiple of every KV head count) times the head dim overflows `u64`;
/// the expected shape saturates and the mismatch names the first tensor it sizes, with both
/// shapes. Same for the assistant's `embedding_length_out` (pre-projection `[2·B, E]`).
#[test]
fn absurd_head_count_is_a_shape_mismatch_not_an_overflow() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    let f = with_metadata(&src, |w| {
        w.set("gemma4.attention.head_count", Value::U64(1 << 62))
    });
    match Config::from_gguf(&f) {
        Err(ConfigError::ShapeMismatch {
            tensor,
            expected,
            got,
        }) => {
            assert_eq!(tensor, "blk.0.attn_q.weight");
            let real = &src.tensor("blk.0.attn_q.weight").expect("tensor").dims;
            assert_eq!(&got, real);
            assert_eq!(expected, vec![real[0], u64::MAX]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }

    let src = GgufFile::open(fix.join("models/dense-assistant.F32.gguf")).expect("open");
    let f = with_metadata(&src, |w| {
        w.set("gemma4-assistant.embedding_length_out", Value::U64(1 << 63))
    });
    match AssistantConfig::from_gguf(&f) {
        Err(ConfigError::ShapeMismatch {
            tensor, expected, ..
        }) => {
            assert_eq!(tensor, "nextn.pre_projection.weight");
            assert_eq!(expected[0], u64::MAX);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

/// `attention.sliding_window` = u64::MAX: no ring is sized by it (rings hold `min(W + R,
/// written)` rows) and no `W + R` overflows; a window beyond every position is full
/// attention, so the logits of a 6-token prompt are bitwise those of the same model with
/// W = 64 > 6 (both attend to every earlier position).
#[test]
fn huge_sliding_window_is_full_attention() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    let key = "gemma4.attention.sliding_window";
    let huge = with_metadata(&src, |w| w.set(key, Value::U64(u64::MAX)));
    let wide = with_metadata(&src, |w| w.set(key, Value::U32(64)));
    let huge = Model::<f64>::from_gguf(huge, Faults::default()).expect("huge window loads");
    let wide = Model::<f64>::from_gguf(wide, Faults::default()).expect("W = 64 loads");
    assert_eq!(huge.config().sliding_window, usize::MAX);
    let prompt = [2u32, 818, 5279, 529, 7001, 563];
    let a = huge
        .forward(&mut huge.new_cache(), &prompt)
        .expect("forward");
    let b = wide
        .forward(&mut wide.new_cache(), &prompt)
        .expect("forward");
    assert_eq!(a.len(), prompt.len());
    for (ra, rb) in a.iter().zip(&b) {
        assert!(ra.iter().zip(rb).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

/// A zero width that multiplies another header value in a tensor shape would make that tensor
/// empty, so its shape would bound nothing (`key_length` 0: `attn_q` `[H, nh·0]` holds no bytes
/// whatever `head_count` says): refused naming the key.
#[test]
fn zero_widths_are_refused_naming_the_key() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    for key in [
        "gemma4.embedding_length",
        "gemma4.attention.key_length",
        "gemma4.attention.key_length_swa",
    ] {
        let f = with_metadata(&src, |w| w.set(key, Value::U32(0)));
        match Config::from_gguf(&f) {
            Err(ConfigError::BadValue { key: k, problem }) => {
                assert_eq!((k.as_str(), problem.as_str()), (key, "must be > 0"))
            }
            other => panic!("{key} = 0: expected BadValue, got {other:?}"),
        }
    }
}

/// `context_length` bounds the positions the verbs accept, and 0 stands for "not given" there:
/// a stored 0 (it silently lifted the bound) is refused naming the key, for the target and the
/// assistant; an absent key is still 0 (the fixture's 4096 read back for reference).
#[test]
fn zero_context_length_is_refused_naming_the_key() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    assert_eq!(Config::from_gguf(&src).expect("fixture").n_ctx_train, 4096);
    let f = with_metadata(&src, |w| w.set("gemma4.context_length", Value::U32(0)));
    let err = Config::from_gguf(&f).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "metadata key 'gemma4.context_length': must be ≥ 1 (the trained context in positions)"
    );
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "gemma4.context_length" && k != "general.alignment" {
            w.set(k, v.clone());
        }
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, &t.dims, t.ggml_type, src.tensor_data(t).to_vec())
            .expect("add_tensor");
    }
    let absent = GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reread");
    assert_eq!(Config::from_gguf(&absent).expect("loads").n_ctx_train, 0);

    let src = GgufFile::open(fix.join("models/dense-assistant.F32.gguf")).expect("open");
    let f = with_metadata(&src, |w| {
        w.set("gemma4-assistant.context_length", Value::U64(0))
    });
    match AssistantConfig::from_gguf(&f) {
        Err(ConfigError::BadValue { key, .. }) => {
            assert_eq!(key, "gemma4-assistant.context_length")
        }
        other => panic!("expected BadValue, got {other:?}"),
    }
}

/// `embedding_length` stored as u64 (llama.cpp refuses any type but the converter's u32) loads
/// the same config as the u32 original: the value is range-checked into `usize` and must equal
/// `token_embd.weight`'s row length, so the wider type admits no value the u32 would not; a
/// u64 beyond that width is a shape mismatch naming the tensor.
#[test]
fn u64_embedding_length_reads_as_its_value() {
    let Some(fix) = fixtures() else { return };
    let src = GgufFile::open(fix.join("models/dense-target.F32.gguf")).expect("open");
    let want = Config::from_gguf(&src).expect("fixture");
    let f = with_metadata(&src, |w| {
        w.set("gemma4.embedding_length", Value::U64(want.n_embd as u64))
    });
    assert_eq!(Config::from_gguf(&f).expect("u64 width"), want);
    let f = with_metadata(&src, |w| {
        w.set("gemma4.embedding_length", Value::U64(1 << 40))
    });
    match Config::from_gguf(&f) {
        Err(ConfigError::ShapeMismatch { tensor, .. }) => assert_eq!(tensor, "token_embd.weight"),
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}
