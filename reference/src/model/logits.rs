//! Tied LM head, final logit soft-capping (`spec/gemma4-text.md` §9) and the selection rules
//! on a logit row: top-k and greedy argmax over the non-suppressed ids (§13.6). Upstream:
//! transformers `Gemma4ForCausalLM.forward` (`logits = lm_head(h)`, `tanh(x/c)·c`),
//! `SuppressTokensLogitsProcessor` + `argmax` (lowest id on exact ties).

use rayon::prelude::*;

use super::linear::{linear, MatRef};
use super::{Float, ModelError};

/// Logits of final-normed hidden rows: `hN` `[T, H]` · `token_embdᵀ` (`[V, H]`, the raw tied
/// embedding, not scaled) → `[T, V]`, then `c · tanh(logits / c)` when a soft-cap `c` is set.
pub fn logits<F: Float>(
    hn: &[F],
    t: usize,
    token_embd: MatRef<'_>,
    softcap: Option<f64>,
) -> Result<Vec<F>, ModelError> {
    let mut z = linear(hn, t, token_embd)?;
    if let Some(c) = softcap {
        let c = F::from_f64(c);
        z.par_chunks_mut(4096).for_each(|part| {
            for v in part.iter_mut() {
                *v = c * (*v / c).tanh();
            }
        });
    }
    Ok(z)
}

/// Whether `id` is in `excluded` (sorted ascending).
fn is_excluded(excluded: &[u32], id: usize) -> bool {
    excluded.binary_search(&(id as u32)).is_ok()
}

/// Greedy choice on one logit row `[V]`: the largest logit over ids not in `excluded` (sorted
/// ascending), lowest id on exact ties. `None` if every id is excluded. NaN logits are never
/// chosen.
pub fn argmax(row: &[f64], excluded: &[u32]) -> Option<u32> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &v) in row.iter().enumerate() {
        if is_excluded(excluded, i) || v.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i, v));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// The `k` largest logits of one row `[V]` over ids not in `excluded` (sorted ascending):
/// descending logit, lower id first on exact ties; NaN logits skipped. Generic over the row's
/// float type so callers need not widen a whole row (comparisons of `f32` values equal those
/// of their exact `f64` widenings); the logits come back as f64.
pub fn top_k<F: Float>(row: &[F], k: usize, excluded: &[u32]) -> Vec<(u32, f64)> {
    // `best` is kept sorted by (logit desc, id asc); ids arrive in increasing order, so an equal
    // logit never displaces an earlier (lower) id.
    let mut best: Vec<(u32, F)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return Vec::new();
    }
    for (i, &v) in row.iter().enumerate() {
        // Cheapest test first: most ids fall below the current k-th logit (a NaN fails `>`).
        if best.len() == k && !(v > best[k - 1].1) {
            continue;
        }
        #[allow(clippy::eq_op)] // `v != v` is the NaN test of a generic float
        if v != v || is_excluded(excluded, i) {
            continue;
        }
        let at = best.partition_point(|&(_, b)| b >= v);
        best.insert(at, (i as u32, v));
        best.truncate(k);
    }
    best.into_iter().map(|(i, v)| (i, v.to_f64())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_logit_then_lower_id_and_skips_suppressed() {
        let row = [1.0, 5.0, 3.0, 5.0, f64::NAN, 4.0];
        assert_eq!(top_k(&row, 3, &[]), vec![(1, 5.0), (3, 5.0), (5, 4.0)]);
        assert_eq!(top_k(&row, 3, &[1, 5]), vec![(3, 5.0), (2, 3.0), (0, 1.0)]);
        assert_eq!(top_k(&row, 10, &[]).len(), 5);
    }

    #[test]
    fn argmax_takes_lowest_id_on_ties_and_never_a_suppressed_id() {
        let row = [1.0, 5.0, 3.0, 5.0];
        assert_eq!(argmax(&row, &[]), Some(1));
        assert_eq!(argmax(&row, &[1]), Some(3));
        assert_eq!(argmax(&row, &[1, 3]), Some(2));
        assert_eq!(argmax(&row, &[0, 1, 2, 3]), None);
    }
}
