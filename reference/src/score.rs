//! Teacher-forced, batched scoring: one forward over every position of several sequences (each
//! weight tile read once for all rows, `model::linear`), then per position the top-k logits and
//! the logit of the next token. Selection rules: `spec/gemma4-text.md` §13.6 (suppressed ids
//! never listed; ties → lower id first).

use rayon::prelude::*;

use crate::model::logits::{soft_cap, top_k as select_top_k, top_k_soft_capped};
use crate::model::{Float, Model, ModelError};

/// Rows of logits materialised at once (bounds memory at `LOGIT_ROWS · V` values).
const LOGIT_ROWS: usize = 64;

/// The oracle's view of one position `t` of a scored sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct PositionScore {
    /// The `k` largest logits of row `t` as `(id, logit)`: descending logit, lower id first on
    /// exact ties, suppressed ids excluded.
    pub top_k: Vec<(u32, f64)>,
    /// Logit of `seq[t + 1]` in row `t` (raw, even if that id is suppressed); `None` at the last
    /// position.
    pub next_logit: Option<f64>,
    /// Logits of row `t` that are NaN or ±Inf after the final soft-cap, if any (0 for a finite
    /// model; a model loaded with `LoadOptions::allow_nonfinite` can give more). `top_k` leaves
    /// NaN out, so a row with non-finite logits is reported by this count, not by `top_k`.
    pub nonfinite: usize,
}

/// Scores every position of every sequence (each from an empty cache, causal, no padding):
/// returns `out[s][t]` for `t < seqs[s].len()`. Default `top_k` is 16.
///
/// Errors: a token id `≥ V` (named by sequence and position), or a weight that fails to decode.
pub fn score<F: Float>(
    model: &Model<F>,
    seqs: &[Vec<u32>],
    top_k: usize,
) -> Result<Vec<Vec<PositionScore>>, ModelError> {
    let mut caches: Vec<_> = seqs.iter().map(|_| model.new_cache()).collect();
    let mut cache_refs: Vec<_> = caches.iter_mut().collect();
    let tokens: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
    let hn = model.forward_hidden_batch(&mut cache_refs, &tokens)?;
    drop(caches);

    let h = model.config().n_embd;
    let v = model.vocab_size();
    let index: Vec<(usize, usize)> = seqs
        .iter()
        .enumerate()
        .flat_map(|(s, seq)| (0..seq.len()).map(move |t| (s, t)))
        .collect();
    let mut out: Vec<Vec<PositionScore>> =
        seqs.iter().map(|s| Vec::with_capacity(s.len())).collect();
    for (c, rows) in index.chunks(LOGIT_ROWS).enumerate() {
        let r0 = c * LOGIT_ROWS;
        // Raw logits; the soft-cap is applied only where it can change the answer
        // (`top_k_soft_capped`, bitwise equal to capping the whole row).
        let z = model.raw_logits_of_hidden(&hn[r0 * h..(r0 + rows.len()) * h])?;
        let cap = model.config().final_softcap.map(F::from_f64);
        let suppressed = model.suppressed_ids();
        let scored: Vec<PositionScore> = rows
            .par_iter()
            .zip(z.par_chunks_exact(v))
            .map(|(&(s, t), row)| PositionScore {
                top_k: match cap {
                    Some(c) => top_k_soft_capped(row, top_k, suppressed, c),
                    None => select_top_k(row, top_k, suppressed),
                },
                next_logit: seqs[s].get(t + 1).map(|&id| {
                    let z = row[id as usize];
                    cap.map_or(z, |c| soft_cap(z, c)).to_f64()
                }),
                nonfinite: row
                    .iter()
                    .filter(|&&z| {
                        !z.to_f64().is_finite()
                            && !cap.map_or(z, |c| soft_cap(z, c)).to_f64().is_finite()
                    })
                    .count(),
            })
            .collect();
        for (&(s, _), ps) in rows.iter().zip(scored) {
            out[s].push(ps);
        }
    }
    Ok(out)
}
