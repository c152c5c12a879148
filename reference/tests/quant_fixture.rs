//! Dequantizers against `fixtures/dequant-vectors.gguf` (`fixtures/README-tokenizer-dequant.md`
//! §4): `expect.<TYPE>` holds gguf-py 0.19.0's float32 dequantization of the `q.<TYPE>`
//! blocks; `nanq.*` holds blocks with NaN/Inf scales. Spec: `spec/gguf-gemma4.md` §3.6.

use std::path::PathBuf;

use reference::gguf::GgufFile;
use reference::quant::{dequantize, dequantize_f32, first_nonfinite_block, GgmlType};

/// The fixtures directory: `$GEMMA4_FIXTURES`, else `<workspace>/../shared/fixtures`.
fn fixtures() -> Option<PathBuf> {
    let dir = reference::fixtures_dir();
    if dir.join("dequant-vectors.gguf").is_file() {
        Some(dir)
    } else {
        println!("skipped: fixtures not found at {}", dir.display());
        None
    }
}

fn open() -> Option<GgufFile> {
    let path = fixtures()?.join("dequant-vectors.gguf");
    Some(GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// The 14 types of the fixture (Q8_K is not in it: gguf-py has no Q8_K dequantizer).
const FIXTURE_TYPES: [GgmlType; 14] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
];

/// Order-preserving integer image of an f32 (ulp distance = difference of images).
fn ordered(x: f32) -> i64 {
    let b = x.to_bits() as i32 as i64;
    if b < 0 {
        i32::MIN as i64 - b
    } else {
        b
    }
}

/// The task allowed 1 f32 ulp (a difference could only come from gguf-py's float32
/// evaluation order). Per §3.6 there is none: every product of a scale with the block's small
/// integers is exact in float32 and only the final add/subtract (Q4_1, Q5_1, Q2_K, Q4_K,
/// Q5_K) rounds, once, so gguf-py's value is the exact value rounded once to f32 — which is
/// what `dequantize_f32` returns. The test therefore asserts **bit equality** (it holds for
/// all 14 types, including ±0 signs and F16/BF16 subnormals), and reports the max ulp
/// distance on failure.
#[test]
fn dequantize_f32_is_bit_identical_to_gguf_py_for_every_fixture_type() {
    let Some(f) = open() else { return };
    for ty in FIXTURE_TYPES {
        let q = f.tensor(&format!("q.{ty}")).unwrap();
        let e = f.tensor(&format!("expect.{ty}")).unwrap();
        assert_eq!(q.ggml_type, ty);
        assert_eq!(e.ggml_type, GgmlType::F32);
        assert_eq!(q.n_elements(), e.n_elements());
        let expect: Vec<f32> = f
            .tensor_data(e)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut got = vec![0f32; expect.len()];
        dequantize_f32(ty, f.tensor_data(q), &mut got).unwrap();
        let diffs: Vec<usize> = (0..got.len())
            .filter(|&i| got[i].to_bits() != expect[i].to_bits())
            .collect();
        let max_ulp = (0..got.len())
            .map(|i| (ordered(got[i]) - ordered(expect[i])).abs())
            .max()
            .unwrap_or(0);
        assert!(
            diffs.is_empty(),
            "{ty}: {} of {} values differ (max {max_ulp} ulp); first at {}: got {:e} expect {:e}",
            diffs.len(),
            got.len(),
            diffs[0],
            got[diffs[0]],
            expect[diffs[0]]
        );
    }
}

/// §3.6: the f64 values are exact, so rounding them once gives `expect` too; for the
/// formats whose value is exact in f32 (F16, BF16, Q4_0, Q5_0, Q8_0, Q3_K, Q6_K, IQ4_NL,
/// IQ4_XS — all products of ≤ 24 significant bits) the f64 value equals the f32 one.
#[test]
fn dequantize_f64_rounds_once_to_gguf_py_and_is_f32_exact_where_spec_says() {
    let Some(f) = open() else { return };
    use GgmlType::*;
    for ty in FIXTURE_TYPES {
        let q = f.tensor(&format!("q.{ty}")).unwrap();
        let e = f.tensor(&format!("expect.{ty}")).unwrap();
        let expect: Vec<u32> = f
            .tensor_data(e)
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut got = vec![0f64; expect.len()];
        dequantize(ty, f.tensor_data(q), &mut got).unwrap();
        let exact_in_f32 = matches!(
            ty,
            F16 | BF16 | Q4_0 | Q5_0 | Q8_0 | Q3_K | Q6_K | IQ4_NL | IQ4_XS
        );
        let mut inexact = 0;
        for (i, (&g, &x)) in got.iter().zip(&expect).enumerate() {
            assert_eq!((g as f32).to_bits(), x, "{ty} element {i}: f64 {g:e}");
            if (g as f32) as f64 != g {
                inexact += 1;
            }
        }
        if exact_in_f32 {
            assert_eq!(inexact, 0, "{ty}: values not exact in f32");
        } else {
            // Q4_1, Q5_1, Q2_K, Q4_K, Q5_K: the final add/subtract rounds for some blocks.
            assert!(inexact > 0, "{ty}: expected some values inexact in f32");
        }
    }
}

/// README §4: the fixture's `q.*` scale fields are all finite (random blocks get finite
/// f16 scales), while every `nanq.*` block has a NaN/Inf scale field.
#[test]
fn first_nonfinite_block_finds_nan_scales_only_in_nanq_tensors() {
    let Some(f) = open() else { return };
    for ty in FIXTURE_TYPES {
        let q = f.tensor(&format!("q.{ty}")).unwrap();
        assert_eq!(first_nonfinite_block(ty, f.tensor_data(q)), None, "{ty}");
    }
    for ty in [GgmlType::Q4_0, GgmlType::Q4_K] {
        let data = f.tensor_data(f.tensor(&format!("nanq.{ty}")).unwrap());
        let n_blocks = data.len() / ty.type_size();
        assert_eq!(n_blocks, 8, "{ty}");
        for k in 0..n_blocks {
            assert_eq!(
                first_nonfinite_block(ty, &data[k * ty.type_size()..]),
                Some(0),
                "{ty} block {k}"
            );
        }
    }
}

/// README §4 "NaN / Inf scales": every element of every `nanq.*` block is non-finite (never
/// flushed to a finite number), and the NaN/Inf split is the one measured with gguf-py
/// (Q4_0: 165 NaN + 91 Inf; Q4_K: 1316 NaN + 732 Inf) because the products are grouped as
/// gguf-py groups them (`(d·sc)·q − dmin·mn`).
#[test]
fn nan_and_inf_scales_propagate_to_every_element_as_in_gguf_py() {
    let Some(f) = open() else { return };
    for (ty, n_nan, n_inf) in [(GgmlType::Q4_0, 165, 91), (GgmlType::Q4_K, 1316, 732)] {
        let t = f.tensor(&format!("nanq.{ty}")).unwrap();
        let n = t.n_elements() as usize;
        let mut x64 = vec![0f64; n];
        dequantize(ty, f.tensor_data(t), &mut x64).unwrap();
        let mut x32 = vec![0f32; n];
        dequantize_f32(ty, f.tensor_data(t), &mut x32).unwrap();
        assert!(
            x64.iter().all(|v| !v.is_finite()),
            "{ty}: a finite f64 value"
        );
        assert_eq!(
            x64.iter().filter(|v| v.is_nan()).count(),
            n_nan,
            "{ty} NaN count"
        );
        assert_eq!(
            x64.iter().filter(|v| v.is_infinite()).count(),
            n_inf,
            "{ty} Inf count"
        );
        for (a, b) in x64.iter().zip(&x32) {
            assert_eq!(a.is_nan(), b.is_nan());
            assert!(a.is_nan() || *a == *b as f64);
        }
    }
}
