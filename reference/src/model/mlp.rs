//! Dense GeGLU MLP (`spec/gemma4-text.md` §5). Upstream: transformers `Gemma4TextMLP`
//! (`gelu_pytorch_tanh`); llama.cpp `build_ffn(..., LLM_FFN_GELU, LLM_FFN_PAR)`.

use super::linear::{linear, Mat};
use super::{Float, ModelError};
use crate::gguf::GgufFile;

/// GELU, tanh approximation, as PyTorch's `gelu(x, approximate="tanh")`:
/// `0.5 · x · (1 + tanh(β · (x + 0.044715 · x³)))` with `β = √2 · (2/√π) · 0.5 = sqrt(2/π)`.
pub fn gelu<F: Float>(x: F) -> F {
    let beta = F::from_f64(std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5);
    let kappa = F::from_f64(0.044715);
    let half = F::from_f64(0.5);
    let inner = beta * (x + kappa * (x * x * x));
    half * x * (F::ONE + inner.tanh())
}

/// `gelu(g) ⊙ u` elementwise: `g`, `u` `[T, I]` → `[T, I]` (written into `g`).
pub fn geglu<F: Float>(g: &mut [F], u: &[F]) {
    for (a, &b) in g.iter_mut().zip(u) {
        *a = gelu(*a) * b;
    }
}

/// One dense MLP: `W_gate`, `W_up` `[I_l, H]`, `W_down` `[H, I_l]` (GGUF `ffn_gate`, `ffn_up`,
/// `ffn_down`; `I_l = 2·I` on double-wide reuse layers).
#[derive(Debug, Clone)]
pub struct Mlp {
    /// `blk.N.ffn_gate.weight`, `[I_l, H]`.
    pub ffn_gate: Mat,
    /// `blk.N.ffn_up.weight`, `[I_l, H]`.
    pub ffn_up: Mat,
    /// `blk.N.ffn_down.weight`, `[H, I_l]`.
    pub ffn_down: Mat,
}

impl Mlp {
    /// `mlp(h) = (gelu(h·W_gateᵀ) ⊙ (h·W_upᵀ)) · W_downᵀ`: `h` `[T, H]` → `[T, H]` (§5).
    pub fn forward<F: Float>(
        &self,
        file: &GgufFile,
        h: &[F],
        t: usize,
    ) -> Result<Vec<F>, ModelError> {
        let mut g = linear(h, t, self.ffn_gate.view(file))?;
        let u = linear(h, t, self.ffn_up.view(file))?;
        geglu(&mut g, &u);
        linear(&g, t, self.ffn_down.view(file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tanh_matches_the_formula_values() {
        // 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) evaluated with Python's math module.
        assert_eq!(gelu(0.0f64), 0.0);
        assert!((gelu(1.0f64) - 0.8411919906082768).abs() < 1e-16);
        assert!((gelu(-2.0f64) - -0.04540230591222494).abs() < 1e-16);
    }
}
