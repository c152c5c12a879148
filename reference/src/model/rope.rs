//! Rotary position embedding (`spec/gemma4-text.md` §4.4): `default` RoPE on sliding layers,
//! `proportional` RoPE on full layers, half-split ("rotate_half", NeoX) pairing. Upstream:
//! transformers `Gemma4TextRotaryEmbedding`, `apply_rotary_pos_emb`, `rotate_half`;
//! `modeling_rope_utils._compute_proportional_rope_parameters` (float64 per §10 patches 2–3).

use super::Float;

/// How dimensions are paired for rotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// The Gemma-4 pairing: dimension `i` with `i + d/2` (§4.4).
    HalfSplit,
    /// Fault injection only: adjacent pairs `(2i, 2i+1)` (GPT-J style).
    Interleaved,
    /// Fault injection only: rotate the leading `2·n` dims as a half-split block of width `2·n`
    /// (`i` with `i + n`), i.e. partial rotary on the wrong lanes.
    LeadingBlock(usize),
}

/// Inverse frequencies of one layer kind, `[d/2]` (§4.4):
/// `inv_freq[i] = 1 / θ^((2i)/d)` for `i < pairs`, `0` for `pairs ≤ i < d/2`.
/// `default` RoPE is `pairs = d/2`; `proportional` keeps `d` = the full head dim in the exponent.
pub fn inv_freq<F: Float>(theta: f64, d: usize, pairs: usize) -> Vec<F> {
    let theta = F::from_f64(theta);
    let d_f = F::from_usize(d);
    (0..d / 2)
        .map(|i| {
            if i < pairs {
                F::ONE / theta.powf(F::from_usize(2 * i) / d_f)
            } else {
                F::ZERO
            }
        })
        .collect()
}

/// Rotates every head of `x` in place: `x` `[T, n, d]` (row-major), `pos` `[T]` absolute positions,
/// `inv` `[d/2]`. With `c = cos(p·inv[i])`, `s = sin(p·inv[i])` and the pair `(a, b)` =
/// `(x[i], x[i+d/2])` (half-split): `a' = a·c − b·s`, `b' = b·c + a·s`. Pairs with inverse
/// frequency 0 have angle exactly 0 and pass unchanged.
pub fn rope<F: Float>(x: &mut [F], n: usize, d: usize, pos: &[usize], inv: &[F], pairing: Pairing) {
    let half = d / 2;
    let mut cos = vec![F::ONE; half];
    let mut sin = vec![F::ZERO; half];
    for (t, row) in x.chunks_exact_mut(n * d).enumerate() {
        let p = F::from_usize(pos[t]);
        for i in 0..half {
            let ang = p * inv[i];
            cos[i] = ang.cos();
            sin[i] = ang.sin();
        }
        for head in row.chunks_exact_mut(d) {
            match pairing {
                Pairing::HalfSplit => rotate(head, half, &cos, &sin, |i| (i, i + half)),
                Pairing::Interleaved => rotate(head, half, &cos, &sin, |i| (2 * i, 2 * i + 1)),
                Pairing::LeadingBlock(m) => rotate(head, m, &cos, &sin, |i| (i, i + m)),
            }
        }
    }
}

/// Rotates the `n_pairs` pairs given by `idx` with angle tables `cos`, `sin`.
fn rotate<F: Float>(
    head: &mut [F],
    n_pairs: usize,
    cos: &[F],
    sin: &[F],
    idx: impl Fn(usize) -> (usize, usize),
) {
    for i in 0..n_pairs {
        let (ia, ib) = idx(i);
        let (a, b) = (head[ia], head[ib]);
        head[ia] = a * cos[i] - b * sin[i];
        head[ib] = b * cos[i] + a * sin[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_frequencies_follow_the_full_head_dim_and_zero_unrotated_pairs() {
        // d = 8, 2 rotated pairs: θ^(0/8) = 1, θ^(−2/8) = 10000^(−1/4) = 0.1, then zeros.
        let f: Vec<f64> = inv_freq(1e4, 8, 2);
        assert_eq!(f[0], 1.0);
        assert!((f[1] - 0.1).abs() < 1e-16);
        assert_eq!(&f[2..], &[0.0, 0.0]);
    }

    #[test]
    fn half_split_pairs_dimension_i_with_i_plus_half() {
        // d = 4, inv = [1, 0], position 1: pair (0, 2) turns by 1 rad, pair (1, 3) stays.
        let mut x = vec![1.0f64, 2.0, 3.0, 4.0];
        rope(&mut x, 1, 4, &[1], &[1.0, 0.0], Pairing::HalfSplit);
        let (c, s) = (1f64.cos(), 1f64.sin());
        assert_eq!(x, vec![1.0 * c - 3.0 * s, 2.0, 3.0 * c + 1.0 * s, 4.0]);
    }
}
