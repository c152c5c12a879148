//! Quantize → dequantize round trips for every supported type (`spec/gguf-gemma4.md` §3):
//! random blocks stay within the documented `quantize_error_bound`, and values already on a
//! format's grid come back exactly.

use proptest::prelude::*;
use reference::quant::{dequantize, quantize, quantize_error_bound, GgmlType, SUPPORTED_TYPES};

/// Quantizes `x`, dequantizes, and checks every element against the bound of its block.
fn check_bound(ty: GgmlType, x: &[f32]) -> Result<(), TestCaseError> {
    let bytes = quantize(ty, x).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(bytes.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
    let mut y = vec![0f64; x.len()];
    dequantize(ty, &bytes, &mut y).unwrap();
    let bs = ty.block_size();
    for (k, (xb, yb)) in x.chunks(bs).zip(y.chunks(bs)).enumerate() {
        let amax = xb.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
        let bound = quantize_error_bound(ty, amax).unwrap();
        for (e, (&a, &b)) in xb.iter().zip(yb).enumerate() {
            let err = (a as f64 - b).abs();
            prop_assert!(
                err <= bound,
                "{} block {} element {}: x {:e} got {:e} err {:e} > bound {:e} (amax {:e})",
                ty,
                k,
                e,
                a,
                b,
                err,
                bound,
                amax
            );
        }
    }
    Ok(())
}

/// Two 256-element rows: per 32-element group a magnitude `10^p` (p ∈ [−5, 3]) and a shape —
/// uniform in [−1, 1], all positive (shifted), all negative, constant, or zero — so both the
/// block-level and the sub-block-level scales see varied ranges.
fn rows() -> impl Strategy<Value = Vec<f32>> {
    let group = (
        -5.0f64..3.0,
        0u8..5,
        prop::collection::vec(-1.0f32..1.0, 32),
    )
        .prop_map(|(p, shape, v)| {
            let s = 10f64.powf(p) as f32;
            v.into_iter()
                .map(|u| match shape {
                    0 => u * s,
                    1 => (u + 1.5) * s,
                    2 => (u - 1.5) * s,
                    3 => 0.7 * s,
                    _ => 0.0,
                })
                .collect::<Vec<f32>>()
        });
    prop::collection::vec(group, 16).prop_map(|g| g.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn quantize_then_dequantize_stays_within_the_documented_bound(x in rows()) {
        for ty in SUPPORTED_TYPES {
            check_bound(ty, &x)?;
        }
    }
}

/// Scaled data where one block spans many orders of magnitude (tiny sub-blocks next to a
/// large one): sub-block scale codes round to 0 or 1, the bound must still hold.
#[test]
fn bound_holds_for_sub_blocks_of_very_different_magnitude() {
    let mut x: Vec<f32> = (0..512)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-6)
        .collect();
    x[3] = 900.0;
    x[300] = -0.02;
    for ty in SUPPORTED_TYPES {
        check_bound(ty, &x).unwrap();
    }
}

/// Exact recovery of values on a format's grid. Each grid is built so that the quantizer's
/// ideal scales are exactly the chosen f16 scale (its codes reach the top code), so the
/// rounded-up scales do not move: symmetric formats `d·q` with `d = 0.375` and `|q| ≤ qmax`,
/// every block including `qmax`; IQ4 `d·K[i]` with the entry 113 present (and no −127, which lies beyond
/// the symmetric range); affine formats `d·q + m` with `q` covering `0..=qmax`; K formats with
/// every sub-block using the top scale (and top min) code.
#[test]
fn values_on_the_format_grid_are_recovered_exactly() {
    use GgmlType::*;
    let d = 0.375f64; // an f16 (0x3600)
    let kv = [
        -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
    ];
    let sym = |n: usize, qmax: i32| -> Vec<f32> {
        // Element 0 of every 32-element block is the top code.
        let q = |e: usize| {
            if e.is_multiple_of(32) {
                qmax
            } else {
                (e as i32 * 7) % (2 * qmax + 1) - qmax
            }
        };
        (0..n).map(|e| (d * q(e) as f64) as f32).collect()
    };
    let cases: Vec<(GgmlType, Vec<f32>)> = vec![
        (Q4_0, sym(64, 7)),
        (Q5_0, sym(64, 15)),
        (Q8_0, sym(64, 127)),
        (Q8_K, sym(256, 127)),
        // Q3_K/Q6_K: every 16-element sub-block holds ±qmax so scale code = scmax.
        (
            Q3_K,
            (0..256)
                .map(|e| (d * 31.0 * [3, -3, 0, 1, -2, 2, -1, 3][e % 8] as f64) as f32)
                .collect(),
        ),
        (
            Q6_K,
            (0..256)
                .map(|e: usize| {
                    let q = if e.is_multiple_of(16) {
                        31
                    } else {
                        (e as i32 * 5) % 63 - 31
                    };
                    (d * 127.0 * q as f64) as f32
                })
                .collect(),
        ),
        (
            IQ4_NL,
            (0..64).map(|e| (d * kv[e % 15] as f64) as f32).collect(),
        ),
        (
            IQ4_XS,
            (0..256)
                .map(|e| (d * 31.0 * kv[e % 15] as f64) as f32)
                .collect(),
        ),
        // Affine: m = −1.5, q = e mod (qmax+1).
        (
            Q4_1,
            (0..64)
                .map(|e| (d * (e % 16) as f64 - 1.5) as f32)
                .collect(),
        ),
        (
            Q5_1,
            (0..64)
                .map(|e| (d * (e % 32) as f64 - 1.5) as f32)
                .collect(),
        ),
        // K affine: x = d·scmax·q − dmin·scmax, dmin = 0.5, q = e mod (qmax+1) per sub-block.
        (
            Q2_K,
            (0..256)
                .map(|e| (0.25 * 15.0 * (e % 4) as f64 - 0.5 * 15.0) as f32)
                .collect(),
        ),
        (
            Q4_K,
            (0..256)
                .map(|e| (0.25 * 63.0 * (e % 16) as f64 - 0.5 * 63.0) as f32)
                .collect(),
        ),
        (
            Q5_K,
            (0..256)
                .map(|e| (0.25 * 63.0 * (e % 32) as f64 - 0.5 * 63.0) as f32)
                .collect(),
        ),
        (F32, vec![1.0e-40, -3.5, 1.0e30, 0.1]),
        // f16 bit patterns: smallest subnormal, −65504, 0.0999755859375, 1.
        (
            F16,
            [0x0001u16, 0xFBFF, 0x2E66, 0x3C00]
                .map(|b| half::f16::from_bits(b).to_f32())
                .to_vec(),
        ),
        // bf16 bit patterns (upper halves of f32): a subnormal, the largest finite, −0.1015625, 1.
        (
            BF16,
            [0x0001u32, 0x7F7F, 0xBDD0, 0x3F80]
                .map(|b| f32::from_bits(b << 16))
                .to_vec(),
        ),
    ];
    for (ty, x) in cases {
        let bytes = quantize(ty, &x).unwrap();
        let mut y = vec![0f64; x.len()];
        dequantize(ty, &bytes, &mut y).unwrap();
        for (e, (&a, &b)) in x.iter().zip(&y).enumerate() {
            assert_eq!(b, a as f64, "{ty} element {e}");
        }
    }
}
