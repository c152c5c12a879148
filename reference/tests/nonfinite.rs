//! The load-time non-finite check (conformance contract §9 "Non-finite values"): for every
//! block format the crate decodes, a tensor with one NaN/±Inf floating field at a known block is
//! reported naming tensor, block, element, row and field, and the dequantized elements that are
//! non-finite are exactly that block's (so the field table agrees with the decoders); the
//! oracle's loaders refuse such a model by default and load it with `allow_nonfinite`; every
//! clean fixture passes. Field offsets below are written from `spec/gguf-gemma4.md` §3.3–§3.4
//! (decoded formats) and ggml's `block_*` structs (`ggml/src/ggml-common.h`, the others), not
//! from the checker's table.

mod oracle_common;

use oracle_common::fixtures;
use reference::gguf::{GgufFile, GgufWriter, Value};
use reference::model::{Faults, LoadOptions, Model, ModelError};
use reference::quant::{
    check_finite, check_tensor_finite, dequantize, first_nonfinite_block, quantize, GgmlType,
    NonFiniteError,
};
use reference::spec::{Assistant, SpecError};

/// Deterministic finite inputs in [-1, 1) (`(37·i mod 101) / 50 − 1`).
fn values(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect()
}

/// A GGUF with `clean.weight` (the same data, untouched) and `bad.weight`, both `dims` of `ty`.
fn file_with(ty: GgmlType, dims: &[u64], clean: Vec<u8>, bad: Vec<u8>) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("test".into()));
    w.add_tensor("clean.weight", dims, ty, clean)
        .expect("clean");
    w.add_tensor("bad.weight", dims, ty, bad).expect("bad");
    GgufFile::from_bytes(w.to_bytes().expect("write")).expect("reread")
}

/// One case: format, field name, byte offset of the field in the block, bytes written there.
struct Case {
    ty: GgmlType,
    field: &'static str,
    offset: usize,
    bits: &'static [u8],
}

const INF16: &[u8] = &0x7C00u16.to_le_bytes();
const NINF16: &[u8] = &0xFC00u16.to_le_bytes();
const NAN16: &[u8] = &0x7E00u16.to_le_bytes();
const NAN32: &[u8] = &0x7FC0_0000u32.to_le_bytes();
const INF32: &[u8] = &0x7F80_0000u32.to_le_bytes();
const NINF_BF16: &[u8] = &0xFF80u16.to_le_bytes();

/// Every decoded format (§3.1), one field each, and the second field of the two-field formats.
fn decoded_cases() -> Vec<Case> {
    use GgmlType::*;
    let c = |ty, field, offset, bits| Case {
        ty,
        field,
        offset,
        bits,
    };
    vec![
        c(Q8_0, "d", 0, INF16),
        c(Q4_0, "d", 0, NAN16),
        c(Q5_0, "d", 0, NINF16),
        c(Q4_1, "d", 0, INF16),
        c(Q4_1, "m", 2, NAN16),
        c(Q5_1, "m", 2, INF16),
        c(IQ4_NL, "d", 0, NAN16),
        c(Q2_K, "d", 80, INF16),
        c(Q2_K, "dmin", 82, NAN16),
        c(Q3_K, "d", 108, NINF16),
        c(Q4_K, "d", 0, INF16),
        c(Q4_K, "dmin", 2, NAN16),
        c(Q5_K, "dmin", 2, INF16),
        c(Q6_K, "d", 208, NAN16),
        c(Q8_K, "d", 0, INF32),
        c(IQ4_XS, "d", 0, INF16),
        c(F32, "value", 0, NAN32),
        c(F16, "value", 0, INF16),
        c(BF16, "value", 0, NINF_BF16),
    ]
}

/// Tensor `[2 blocks, 3 rows]` (6 blocks; plain floats `[2, 3]`), the field of block 3 made
/// non-finite: the error names `bad.weight`, block 3, its first element (3 · block size), row
/// 1, the field, the bits and the field's byte in the file; dequantizing gives non-finite
/// values in exactly block 3; the clean tensor passes.
#[test]
fn one_nonfinite_field_is_named_for_every_decoded_format() {
    for case in decoded_cases() {
        let ty = case.ty;
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let ne0 = 2 * bs;
        let n = ne0 * 3;
        let clean = quantize(ty, &values(n)).expect("quantize");
        let mut bad = clean.clone();
        let at = 3 * ts + case.offset;
        bad[at..at + case.bits.len()].copy_from_slice(case.bits);
        let what = format!("{ty} {}", case.field);

        let mut x = vec![0f64; n];
        dequantize(ty, &clean, &mut x).expect("dequantize clean");
        assert!(x.iter().all(|v| v.is_finite()), "{what}: clean data");
        dequantize(ty, &bad, &mut x).expect("dequantize bad");
        let non_finite: Vec<usize> = (0..n).filter(|&i| !x[i].is_finite()).collect();
        assert_eq!(
            non_finite,
            (3 * bs..4 * bs).collect::<Vec<_>>(),
            "{what}: the non-finite elements are block 3's"
        );
        assert_eq!(first_nonfinite_block(ty, &bad), Some(3), "{what}");

        let f = file_with(ty, &[ne0 as u64, 3], clean, bad);
        assert_eq!(
            check_tensor_finite(&f, f.tensor("clean.weight").expect("clean")),
            Ok(()),
            "{what}"
        );
        let e: NonFiniteError = check_finite(&f).expect_err(&what);
        assert_eq!(
            (e.tensor.as_str(), e.ty, e.block, e.element, e.row, e.field),
            ("bad.weight", ty, 3, 3 * bs as u64, 1, case.field),
            "{what}"
        );
        assert!(!e.value.is_finite(), "{what}");
        let mut raw = [0u8; 8];
        raw[..case.bits.len()].copy_from_slice(case.bits);
        assert_eq!(e.bits, u64::from_le_bytes(raw), "{what}");
        let t = f.tensor("bad.weight").expect("bad");
        assert_eq!(e.file_offset, f.tensor_file_offset(t) + at as u64, "{what}");
        let msg = e.to_string();
        assert!(
            msg.contains("'bad.weight'") && msg.contains("row 1"),
            "{what}: {msg}"
        );
        if bs == 1 {
            assert!(msg.contains("element 3 (row 1)"), "{msg}");
        } else {
            assert!(
                msg.contains(&format!("field {} of block 3", case.field)),
                "{msg}"
            );
        }
    }
}

/// Formats nothing here decodes still have their floating fields checked (ggml-common.h:
/// TQ2_0 `d` after `qs[64]`, TQ1_0 `d` after `qs[48]`, `qh[4]`; IQ2_XXS `d` first; Q8_1 `s`
/// second), and a format with none passes whatever its bytes: I32 (an integer that looks like
/// +Inf) and MXFP4 (E8M0 0xFF decodes to a finite 2^127 in ggml).
#[test]
fn undecoded_formats_are_checked_by_their_layout() {
    use GgmlType::*;
    for (ty, field, offset) in [
        (TQ2_0, "d", 64),
        (TQ1_0, "d", 52),
        (IQ2_XXS, "d", 0),
        (Q8_1, "s", 2),
    ] {
        let ts = ty.type_size();
        let clean = vec![0u8; 4 * ts];
        let mut bad = clean.clone();
        bad[2 * ts + offset..2 * ts + offset + 2].copy_from_slice(NAN16);
        let f = file_with(ty, &[4 * ty.block_size() as u64], clean, bad);
        let e = check_finite(&f).expect_err(ty.name());
        assert_eq!(
            (e.tensor.as_str(), e.block, e.field, e.row),
            ("bad.weight", 2, field, 0)
        );
    }
    for ty in [I32, MXFP4] {
        let bytes: Vec<u8> = INF32
            .iter()
            .copied()
            .cycle()
            .take(ty.type_size() * 8)
            .collect();
        let f = file_with(ty, &[8 * ty.block_size() as u64], bytes.clone(), bytes);
        assert_eq!(check_finite(&f), Ok(()), "{ty}");
    }
}

/// A tensor larger than one parallel work item (1 MiB): a NaN only in the second item is
/// reported with its global element index; with another NaN earlier in the first item, that
/// one is reported (first in tensor order, whatever thread finishes first). Two bad tensors:
/// the first in file order is reported. F32 `[1024, 300]` = 1.2 MB.
#[test]
fn the_first_nonfinite_field_in_file_order_is_reported() {
    let (ne0, rows) = (1024usize, 300usize);
    let clean = quantize(GgmlType::F32, &values(ne0 * rows)).expect("f32");
    let set = |b: &mut Vec<u8>, i: usize| b[4 * i..4 * i + 4].copy_from_slice(NAN32);
    let mut bad = clean.clone();
    set(&mut bad, 280_000); // element 280 000 = row 273, column 448; in the second MiB
    let dims = [ne0 as u64, rows as u64];
    let f = file_with(GgmlType::F32, &dims, clean.clone(), bad.clone());
    let e = check_finite(&f).expect_err("late NaN");
    assert_eq!((e.element, e.row, e.block), (280_000, 273, 280_000));
    set(&mut bad, 5);
    let f = file_with(GgmlType::F32, &dims, clean.clone(), bad.clone());
    assert_eq!(check_finite(&f).expect_err("two NaNs").element, 5);
    // Both tensors bad: 'clean.weight' (written first) at element 7 is the one reported.
    let mut first = clean;
    set(&mut first, 7);
    let f = file_with(GgmlType::F32, &dims, first, bad);
    let e = check_finite(&f).expect_err("two tensors");
    assert_eq!((e.tensor.as_str(), e.element), ("clean.weight", 7));
}

/// A copy of fixture `name` with the bytes at `tensor`'s data offset `at` replaced by `bits`.
fn patched(fix: &std::path::Path, name: &str, tensor: &str, at: usize, bits: &[u8]) -> GgufFile {
    let path = fix.join("models").join(name);
    let f = GgufFile::open(&path).expect("open");
    let t = f.tensor(tensor).expect("tensor");
    let pos = f.tensor_file_offset(t) as usize + at;
    let mut b = std::fs::read(&path).expect("read");
    b[pos..pos + bits.len()].copy_from_slice(bits);
    GgufFile::from_bytes(b).expect("reread")
}

/// The reported cases. `dense-target.Q4_K_M` stores `token_embd.weight` `[64, V]` as Q8_0 (64
/// is not a multiple of 256, `spec/gguf-gemma4.md` §3.8): the `<bos>` row (id 2) starts at
/// block 2 · 64 / 32 = 4; its `d` set to +Inf is refused naming tensor, block 4, row 2 and `d`;
/// `output_norm.weight` (F32) element 0 set to NaN is refused naming element 0. With
/// `allow_nonfinite` both load, and the `<bos>` row's logits are NaN, as before the check.
#[test]
fn fixture_with_nonfinite_weights_is_refused_unless_allowed() {
    let Some(fix) = fixtures() else { return };
    let name = "dense-target.Q4_K_M.gguf";
    let src = GgufFile::open(fix.join("models").join(name)).expect("open");
    assert_eq!(src.get_u32("tokenizer.ggml.bos_token_id").expect("bos"), 2);
    let te = src.tensor("token_embd.weight").expect("token_embd");
    assert_eq!((te.ggml_type, te.dims[0]), (GgmlType::Q8_0, 64));

    let bos = patched(&fix, name, "token_embd.weight", 4 * 34, INF16);
    match Model::<f64>::from_gguf(bos, Faults::default()) {
        Err(ModelError::NonFinite(e)) => {
            assert_eq!(
                (e.tensor.as_str(), e.block, e.element, e.row, e.field),
                ("token_embd.weight", 4, 128, 2, "d")
            );
            assert_eq!(e.value, f64::INFINITY);
        }
        other => panic!("expected NonFinite, got {:?}", other.err()),
    }
    let bos = patched(&fix, name, "token_embd.weight", 4 * 34, INF16);
    let allow = LoadOptions::default().with_allow_nonfinite(true);
    let m = Model::<f64>::from_gguf_with(bos, Faults::default(), allow).expect("allowed");
    let rows = m.forward(&mut m.new_cache(), &[2]).expect("forward");
    assert!(rows[0].iter().any(|v| v.is_nan()), "NaN logits");

    let norm = patched(&fix, name, "output_norm.weight", 0, NAN32);
    match Model::<f32>::from_gguf(norm, Faults::default()) {
        Err(ModelError::NonFinite(e)) => {
            assert_eq!(
                (e.tensor.as_str(), e.block, e.element, e.row, e.field),
                ("output_norm.weight", 0, 0, 0, "value")
            );
            assert!(e.value.is_nan());
        }
        other => panic!("expected NonFinite, got {:?}", other.err()),
    }
    let norm = patched(&fix, name, "output_norm.weight", 0, NAN32);
    Model::<f32>::from_gguf_with(norm, Faults::default(), allow).expect("allowed");
}

/// A model loaded with `allow_nonfinite` reports its NaN logits: scoring counts them per row
/// (`PositionScore::nonfinite`; `top_k` leaves NaN out, so it came back empty and looked like
/// nothing), and greedy decoding names the first such row (`Generation::nonfinite`; it
/// stopped with no token, silently). The clean fixture counts 0 and gives `None`.
#[test]
fn nonfinite_logits_are_counted_by_score_and_greedy() {
    let Some(fix) = fixtures() else { return };
    let name = "dense-target.Q4_K_M.gguf";
    let allow = LoadOptions::default().with_allow_nonfinite(true);
    let norm = patched(&fix, name, "output_norm.weight", 0, NAN32);
    let m = Model::<f64>::from_gguf_with(norm, Faults::default(), allow).expect("allowed");
    let v = m.vocab_size();
    let s = reference::score::score(&m, &[vec![2, 818]], 4).expect("score");
    assert_eq!(s[0].len(), 2);
    for p in &s[0] {
        assert_eq!(p.nonfinite, v);
        assert!(p.top_k.is_empty());
    }
    let g = m.greedy(&[2, 818], 3, &[]).expect("greedy");
    assert_eq!(g.nonfinite, Some((0, v)));
    assert!(g.tokens.is_empty());

    let clean = Model::<f64>::load(fix.join("models").join(name)).expect("clean");
    let s = reference::score::score(&clean, &[vec![2, 818]], 4).expect("score");
    assert!(s[0].iter().all(|p| p.nonfinite == 0 && p.top_k.len() == 4));
    assert_eq!(
        clean.greedy(&[2, 818], 2, &[]).expect("greedy").nonfinite,
        None
    );
}

/// The assistant loader runs the same check: `e2b-assistant.Q8_0` with the `d` of the last
/// block of `nextn.post_projection.weight` set to NaN is refused naming it, and loads with
/// `allow_nonfinite`.
#[test]
fn assistant_with_nonfinite_weights_is_refused_unless_allowed() {
    let Some(fix) = fixtures() else { return };
    let name = "e2b-assistant.Q8_0.gguf";
    let src = GgufFile::open(fix.join("models").join(name)).expect("open");
    let t = src.tensor("nextn.post_projection.weight").expect("tensor");
    let ty = t.ggml_type;
    assert_eq!((ty, t.dims.as_slice()), (GgmlType::Q8_0, &[32u64, 64][..]));
    // [32, 64] Q8_0: one block per row, 64 blocks; the last is block 63, row 63.
    let last = 63;
    let at = last * ty.type_size();
    let bad = patched(&fix, name, "nextn.post_projection.weight", at, NAN16);
    match Assistant::<f64>::from_gguf(bad) {
        Err(SpecError::Model(ModelError::NonFinite(e))) => {
            assert_eq!(
                (e.tensor.as_str(), e.block, e.row, e.field),
                ("nextn.post_projection.weight", 63, 63, "d")
            );
            assert!(e.value.is_nan());
        }
        other => panic!("expected NonFinite, got {:?}", other.err()),
    }
    let bad = patched(&fix, name, "nextn.post_projection.weight", at, NAN16);
    let allow = LoadOptions::default().with_allow_nonfinite(true);
    Assistant::<f64>::from_gguf_with(bad, allow).expect("allowed");
}

/// Every fixture model is clean: the check passes on each file and the loaders (which run it)
/// load every target and assistant.
#[test]
fn clean_fixtures_pass_and_load() {
    let Some(fix) = fixtures() else { return };
    let mut names: Vec<String> = std::fs::read_dir(fix.join("models"))
        .expect("models")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 10, "{names:?}");
    for n in &names {
        let path = fix.join("models").join(n);
        check_finite(&GgufFile::open(&path).expect("open")).unwrap_or_else(|e| panic!("{n}: {e}"));
        if n.contains("-assistant.") {
            Assistant::<f64>::load(&path).unwrap_or_else(|e| panic!("{n}: {e}"));
        } else {
            Model::<f64>::load(&path).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }
}
