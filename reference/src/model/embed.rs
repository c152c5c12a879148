//! Scaled token embedding (`spec/gemma4-text.md` §2). Upstream: transformers
//! `Gemma4TextScaledWordEmbedding.forward` (float64 scale, §10 patch 6); llama.cpp
//! `src/models/gemma4.cpp` (`ggml_scale(inpL, sqrtf(n_embd))`).

use super::linear::MatRef;
use super::{Float, ModelError};

/// Looks up rows of an embedding table and scales them: `out[t, :] = table[ids[t], :] · scale`.
///
/// `table`: `[V, n]` (GGUF `token_embd` or `per_layer_token_embd`); `ids`: `[T]`; returns
/// `[T, n]`. The main embedding uses `scale = sqrt(H)`, the PLE table `sqrt(P)` (§2, §7).
/// Errors: an id `≥ V` ([`ModelError::TokenOutOfRange`], naming the row as `position`), or a block that
/// fails to decode.
pub fn embed<F: Float>(table: MatRef<'_>, ids: &[u32], scale: F) -> Result<Vec<F>, ModelError> {
    let n = table.cols;
    let mut out = vec![F::ZERO; ids.len() * n];
    for (t, (&id, row)) in ids.iter().zip(out.chunks_exact_mut(n)).enumerate() {
        if id as usize >= table.rows {
            return Err(ModelError::TokenOutOfRange {
                sequence: 0,
                token: id,
                position: t,
                vocab: table.rows,
            });
        }
        table.rows_into(id as usize, row)?;
        for v in row.iter_mut() {
            *v *= scale;
        }
    }
    Ok(out)
}
