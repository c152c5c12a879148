//! Hand-derived block tests for `reference::quant` (`spec/gguf-gemma4.md` §3): Q8_K (not in
//! the fixture), the §3.3 nibble order, scale-field positions for `first_nonfinite_block`,
//! and the typed errors.

use reference::quant::{
    dequantize, dequantize_f32, first_nonfinite_block, quantize, GgmlType, QuantError,
};

/// A Q8_K block (§3.4: `d` f32 @0, `qs` i8[256] @4, `bsums` i16[16] @260) with
/// `qs[e] = e − 128` and `d = 1 + 2⁻²³` (f32 bits 0x3F800001). `bsums` is filled with junk
/// (0x7F7F) because §3.4 says it does not enter dequantization.
fn q8_k_block() -> Vec<u8> {
    let mut b = vec![0x7Fu8; 292];
    b[0..4].copy_from_slice(&0x3F80_0001u32.to_le_bytes());
    for e in 0..256 {
        b[4 + e] = (e as i32 - 128) as i8 as u8;
    }
    b
}

/// Values derived by hand from `x[e] = d·qs[e]` with `d = 1 + 2⁻²³`:
/// * `q = 127` (e = 255): exact `127 + 127·2⁻²³`; in f32 the spacing on [64, 128) is 2⁻¹⁷ and
///   `127·2⁻²³ = 1.98…·2⁻¹⁷`, so f32 rounds to `127 + 2⁻¹⁶` (one rounding, §3.6 Q8_K row).
/// * `q = 3` (e = 131): exact `3 + 3·2⁻²³ = 3 + 1.5·2⁻²²`, a tie on f32's 2⁻²² grid; round to
///   even picks `3 + 2⁻²¹` (significand …10 rather than …01).
/// * `q = −128` (e = 0): `−128 − 2⁻¹⁶`, exact in f32 (spacing 2⁻¹⁶ on [128, 256)).
/// * `q = 1` (e = 129): `1 + 2⁻²³`; `q = 0` (e = 128): `+0`.
#[test]
fn q8_k_block_dequantizes_to_d_times_code_and_rounds_once_in_f32() {
    let b = q8_k_block();
    let mut x = vec![0f64; 256];
    dequantize(GgmlType::Q8_K, &b, &mut x).unwrap();
    let mut y = vec![0f32; 256];
    dequantize_f32(GgmlType::Q8_K, &b, &mut y).unwrap();
    let t = |k: i32| 2f64.powi(k);
    assert_eq!(x[255], 127.0 + 127.0 * t(-23));
    assert_eq!(y[255] as f64, 127.0 + t(-16));
    assert_eq!(x[131], 3.0 + 3.0 * t(-23));
    assert_eq!(y[131] as f64, 3.0 + t(-21));
    assert_eq!(x[0], -128.0 - t(-16));
    assert_eq!(y[0] as f64, -128.0 - t(-16));
    assert_eq!(x[129], 1.0 + t(-23));
    assert_eq!(x[128].to_bits(), 0.0f64.to_bits());
    for e in 0..256 {
        // (1 + 2⁻²³)·q = q + q·2⁻²³, both terms exact in f64.
        let q = e as f64 - 128.0;
        assert_eq!(x[e], q + q * t(-23), "element {e}");
        assert_eq!(y[e], x[e] as f32, "element {e}");
    }
}

/// §3.3 nibble order (not interleaved pairs): with `d = 0.5` (f16 0x3800) and `qs[0] = 0xF0`,
/// element 0 is the low nibble 0 → `0.5·(0 − 8) = −4`, element 16 the high nibble 15 →
/// `0.5·(15 − 8) = 3.5`; the other bytes 0x88 give `0.5·0 = 0`.
#[test]
fn q4_0_low_nibbles_are_elements_0_to_15_and_high_nibbles_16_to_31() {
    let mut b = vec![0x88u8; 18];
    b[0..2].copy_from_slice(&0x3800u16.to_le_bytes());
    b[2] = 0xF0;
    let mut x = vec![1f64; 32];
    dequantize(GgmlType::Q4_0, &b, &mut x).unwrap();
    assert_eq!(x[0], -4.0);
    assert_eq!(x[16], 3.5);
    assert!(x
        .iter()
        .enumerate()
        .all(|(e, &v)| e == 0 || e == 16 || v == 0.0));
}

/// Scale-field byte offsets of §3.3/§3.4: a NaN (f16 0x7E00, f32 0x7FC00000) written there in
/// block 2 of three is found; 0xFF bytes everywhere else (codes, packed scales) are not scales.
#[test]
fn first_nonfinite_block_checks_exactly_the_scale_fields_of_each_format() {
    use GgmlType::*;
    let cases: [(GgmlType, &[usize]); 13] = [
        (Q4_0, &[0]),
        (Q4_1, &[0, 2]),
        (Q5_0, &[0]),
        (Q5_1, &[0, 2]),
        (Q8_0, &[0]),
        (Q2_K, &[80, 82]),
        (Q3_K, &[108]),
        (Q4_K, &[0, 2]),
        (Q5_K, &[0, 2]),
        (Q6_K, &[208]),
        (IQ4_NL, &[0]),
        (IQ4_XS, &[0]),
        (Q8_K, &[0]),
    ];
    for (ty, fields) in cases {
        let ts = ty.type_size();
        // Every byte 0xFF except the scale fields, which get 1.0.
        let mut bytes = vec![0xFFu8; 3 * ts];
        for blk in 0..3 {
            for &off in fields {
                let at = blk * ts + off;
                if ty == Q8_K {
                    bytes[at..at + 4].copy_from_slice(&1f32.to_le_bytes());
                } else {
                    bytes[at..at + 2].copy_from_slice(&0x3C00u16.to_le_bytes());
                }
            }
        }
        assert_eq!(first_nonfinite_block(ty, &bytes), None, "{ty}");
        for &off in fields {
            let mut b = bytes.clone();
            let at = 2 * ts + off;
            if ty == Q8_K {
                b[at..at + 4].copy_from_slice(&0x7FC0_0000u32.to_le_bytes());
            } else {
                b[at..at + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
            }
            assert_eq!(first_nonfinite_block(ty, &b), Some(2), "{ty} field @{off}");
        }
    }
    // Plain types: every element is a block.
    let f = [1f32, 2.0, f32::INFINITY, f32::NAN];
    let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(first_nonfinite_block(F32, &bytes), Some(2));
    assert_eq!(first_nonfinite_block(F16, &[0, 0x3C, 0, 0x7C]), Some(1));
    assert_eq!(
        first_nonfinite_block(BF16, &[0x80, 0x3F, 0xC0, 0x7F]),
        Some(1)
    );
    // Outside §3.1 the fields follow ggml's structs: IQ2_XXS has `d` (f16) first, so 0xFFFF
    // there is a NaN; an integer type has no floating field, whatever its bits.
    assert_eq!(first_nonfinite_block(IQ2_XXS, &[0xFF; 66]), Some(0));
    assert_eq!(first_nonfinite_block(I32, &[0xFF; 8]), None);
}

#[test]
fn wrong_lengths_and_unsupported_types_are_typed_errors() {
    let mut out = vec![0f64; 64];
    assert_eq!(
        dequantize(GgmlType::Q4_0, &[0; 35], &mut out),
        Err(QuantError::Length {
            ty: GgmlType::Q4_0,
            n_elements: 64,
            expected: 36,
            got: 35
        })
    );
    assert_eq!(
        dequantize(GgmlType::Q4_K, &[0; 144], &mut out),
        Err(QuantError::NotBlockMultiple {
            ty: GgmlType::Q4_K,
            n_elements: 64,
            block_size: 256
        })
    );
    for ty in [
        GgmlType::Q8_1,
        GgmlType::IQ2_XXS,
        GgmlType::MXFP4,
        GgmlType::I32,
    ] {
        let mut out = vec![0f32; ty.block_size()];
        let err = dequantize_f32(ty, &vec![0; ty.type_size()], &mut out).unwrap_err();
        assert_eq!(err, QuantError::Unsupported { ty });
        assert!(err.to_string().contains(ty.name()), "{err}");
        assert_eq!(quantize(ty, &out), Err(QuantError::Unsupported { ty }));
    }
    assert_eq!(
        quantize(GgmlType::Q8_0, &[0.0; 33]),
        Err(QuantError::NotBlockMultiple {
            ty: GgmlType::Q8_0,
            n_elements: 33,
            block_size: 32
        })
    );
    let mut x = vec![0f32; 64];
    x[40] = f32::NAN;
    assert!(matches!(
        quantize(
            GgmlType::Q4_K,
            &[x.clone(), x.clone(), x.clone(), x.clone()].concat()
        ),
        Err(QuantError::NonFinite {
            ty: GgmlType::Q4_K,
            index: 40,
            ..
        })
    ));
    // Q8_0: d = 1e7/127 ≈ 78740 > 65504 (largest f16) in block 1.
    let mut x = vec![0f32; 64];
    x[33] = 1e7;
    assert_eq!(
        quantize(GgmlType::Q8_0, &x),
        Err(QuantError::ScaleOverflow {
            ty: GgmlType::Q8_0,
            block: 1,
            amax: 1e7
        })
    );
    // Q8_K's scale is f32: 1e30 fits.
    let mut x = vec![0f32; 256];
    x[7] = 1e30;
    assert!(quantize(GgmlType::Q8_K, &x).is_ok());
}
