//! RMSNorm (`spec/gemma4-text.md` §3). Upstream: transformers `Gemma4RMSNorm` (run in float64,
//! §10 patch 1); llama.cpp `build_norm(LLM_NORM_RMS)`.
//!
//! The weight is used as stored (`normed · w`, **not** `1 + w`); eps is added inside the root.

use super::linear::dot;
use super::Float;

/// In-place RMSNorm of every row of `x` (`[T, n]`, row-major, `n` = the normalised width):
/// `x ← x · (mean_j(x_j²) + eps)^(-1/2) [⊙ w]` (§3). `w` (`[n]`) is `None` for the weightless
/// norms (`v_norm`, router norm). The mean square is the [`dot`]-ordered `Σ x_j²` divided by `n`.
pub fn rms_norm<F: Float>(x: &mut [F], n: usize, w: Option<&[F]>, eps: F) {
    let inv_n = F::ONE / F::from_usize(n);
    let minus_half = F::from_f64(-0.5);
    for row in x.chunks_exact_mut(n) {
        let ms = dot(row, row) * inv_n;
        let r = (ms + eps).powf(minus_half);
        match w {
            Some(w) => {
                for (v, &g) in row.iter_mut().zip(w) {
                    *v = (*v * r) * g;
                }
            }
            None => {
                for v in row.iter_mut() {
                    *v *= r;
                }
            }
        }
    }
}

/// RMSNorm of a copy: returns `rms_norm(x)` (`[T, n]`), leaving `x` unchanged.
pub fn rms_normed<F: Float>(x: &[F], n: usize, w: Option<&[F]>, eps: F) -> Vec<F> {
    let mut y = x.to_vec();
    rms_norm(&mut y, n, w, eps);
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_multiplies_by_the_stored_weight() {
        // x = [3, 4]: mean square 12.5; eps 0; weight [2, 1] (not 1 + w).
        let mut x = vec![3.0f64, 4.0];
        rms_norm(&mut x, 2, Some(&[2.0, 1.0]), 0.0);
        let r = 12.5f64.powf(-0.5);
        assert_eq!(x, vec![3.0 * r * 2.0, 4.0 * r]);
        let y = rms_normed(&[3.0f64, 4.0], 2, None, 0.5);
        assert_eq!(y, vec![3.0 * 13f64.powf(-0.5), 4.0 * 13f64.powf(-0.5)]);
    }
}
