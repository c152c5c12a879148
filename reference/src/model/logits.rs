//! Tied LM head, final logit soft-capping (`spec/gemma4-text.md` §9) and the selection rules
//! on a logit row: top-k and greedy argmax over the non-suppressed ids (§13.6). Upstream:
//! transformers `Gemma4ForCausalLM.forward` (`logits = lm_head(h)`, `tanh(x/c)·c`),
//! `SuppressTokensLogitsProcessor` + `argmax` (lowest id on exact ties).

use std::cmp::Ordering;

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
                *v = soft_cap(*v, c);
            }
        });
    }
    Ok(z)
}

/// `c · tanh(z / c)`: the final soft-cap of one logit (§9), the exact expression [`logits`]
/// applies to every element.
pub fn soft_cap<F: Float>(z: F, c: F) -> F {
    c * (z / c).tanh()
}

/// [`top_k`] of the soft-capped row `soft_cap(raw[i], c)`, evaluating the cap (libm `tanh`) only
/// where it can matter; bitwise the same list as capping the whole row first.
///
/// Why it is exact: with `y = z / c` (rounded; monotone in `z`), let `y_k` be the `k`-th largest
/// `y` over the allowed ids and `δ = 2⁻²⁰ · (1 + |y_k|)`. Every id with `y < y_k − δ` is left
/// out. The true `tanh` is increasing, so such an id has `tanh(y) ≤ tanh(y_k − δ)`, while the `k`
/// ids with `y ≥ y_k` have `tanh(y) ≥ tanh(y_k)`. libm's `tanh` is within `e = 2⁻³²` of the true
/// value (glibc documents ≤ 2 ulp; `e` is a million times that), so if the libm gap
/// `g = tanh(y_k) − tanh(y_k − δ)` exceeds `4e + 2⁻⁵⁰`, every left-out id's capped logit is
/// strictly below (beyond a rounding tie of `c · t`) those of `k` kept ids, so it can be neither
/// in the top `k` nor tie with them. When the check fails (saturation, infinities) or `F` is not
/// f64, the whole row is capped (the plain path).
pub fn top_k_soft_capped<F: Float>(raw: &[F], k: usize, excluded: &[u32], c: F) -> Vec<(u32, f64)> {
    let plain = || {
        let capped: Vec<F> = raw.iter().map(|&z| soft_cap(z, c)).collect();
        top_k(&capped, k, excluded)
    };
    if F::NAME != "f64" || k == 0 || c.to_f64().partial_cmp(&0.0) != Some(Ordering::Greater) {
        return plain();
    }
    // k-th largest y over allowed, non-NaN ids (raw order = y order: division by c > 0 is
    // monotone), then the candidates y ≥ y_k − δ.
    let kth = top_k(raw, k, excluded);
    if kth.len() < k {
        return plain();
    }
    let cf = c.to_f64();
    let y_k = kth[k - 1].1 / cf;
    let lo = y_k - (1.0 + y_k.abs()) * 2f64.powi(-20);
    let gap = y_k.tanh() - lo.tanh();
    let needed = 4.0 * 2f64.powi(-32) + 2f64.powi(-50);
    if !y_k.is_finite() || gap.partial_cmp(&needed) != Some(Ordering::Greater) {
        return plain();
    }
    let mut cand: Vec<(usize, F)> = Vec::new();
    for (i, &z) in raw.iter().enumerate() {
        if (z / c).to_f64() >= lo {
            cand.push((i, soft_cap(z, c)));
        }
    }
    // Exact top-k over the candidates (ids ascending, as in the full row).
    let vals: Vec<F> = cand.iter().map(|&(_, v)| v).collect();
    let ids: Vec<u32> = cand.iter().map(|&(i, _)| i as u32).collect();
    let ex: Vec<u32> = ids
        .iter()
        .enumerate()
        .filter(|&(_, id)| is_excluded(excluded, *id as usize))
        .map(|(j, _)| j as u32)
        .collect();
    top_k(&vals, k, &ex)
        .into_iter()
        .map(|(j, v)| (ids[j as usize], v))
        .collect()
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
    if k == 0 {
        return Vec::new();
    }
    // At most one entry per id (a `k` beyond the row, e.g. a huge `--topk`, allocates nothing
    // more).
    let mut best: Vec<(u32, F)> = Vec::with_capacity(k.min(row.len()) + 1);
    for (i, &v) in row.iter().enumerate() {
        // Cheapest test first: most ids fall below the current k-th logit (a NaN fails `>`).
        if best.len() == k && v.partial_cmp(&best[k - 1].1) != Some(Ordering::Greater) {
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
        // A k far beyond the row (a user's `--topk 99999999999`) returns the whole ranked row
        // instead of aborting on a k-sized allocation (16·10^11 bytes before).
        assert_eq!(top_k(&row, 99_999_999_999, &[]), top_k(&row, 5, &[]));
        assert_eq!(top_k_soft_capped(&row, usize::MAX, &[], 30.0).len(), 5);
    }

    #[test]
    fn soft_capped_top_k_equals_capping_the_whole_row() {
        // Independent path: cap every element with the formula, then the plain top-k.
        let c = 30.0f64;
        let mut rows: Vec<Vec<f64>> = Vec::new();
        // Pseudo-random logits, exact duplicates, near-ties one ulp apart, saturated values.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let base: Vec<f64> = (0..5000).map(|_| next() * 40.0 - 20.0).collect();
        rows.push(base.clone());
        let mut dup = base.clone();
        for i in (0..5000).step_by(7) {
            dup[i] = 9.5;
        }
        for i in (3..5000).step_by(11) {
            dup[i] = f64::from_bits(9.5f64.to_bits() - 1);
        }
        rows.push(dup);
        rows.push(base.iter().map(|v| v * 1e3).collect());
        let mut odd = base.clone();
        odd[10] = f64::NAN;
        odd[20] = f64::INFINITY;
        odd[30] = 1e300;
        rows.push(odd);
        for row in &rows {
            for k in [1, 4, 16] {
                for ex in [&[][..], &[0u32, 7, 14, 3, 20][..]] {
                    let mut ex = ex.to_vec();
                    ex.sort();
                    let capped: Vec<f64> = row.iter().map(|&z| c * (z / c).tanh()).collect();
                    let want = top_k(&capped, k, &ex);
                    let got = top_k_soft_capped(row, k, &ex, c);
                    assert_eq!(want.len(), got.len());
                    for (a, b) in want.iter().zip(&got) {
                        assert_eq!((a.0, a.1.to_bits()), (b.0, b.1.to_bits()));
                    }
                }
            }
        }
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
