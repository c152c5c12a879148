//! Batched `spec:K` check (issue 6: `spec:K` "works with `batch:N` (several sequences
//! speculating at once)"): [`CudaEngine::spec_batch`] over the built-in prompts must give, for
//! every request, exactly what [`CudaEngine::spec`] gives on it alone — the same ids, the same
//! rounds (position, `K_r`, drafts, `n'`, bonus) and bitwise the same logits rows — because
//! every row of a forward is computed independently of the other rows.

use serde_json::json;

use crate::engine::{spec_batch_width, CudaEngine, GenRequest, SpecRun};
use crate::error::RuntimeError;

/// `(rows compared, bitwise-equal rows)` over the emitted steps both runs kept logits for.
fn rows_equal(a: &SpecRun, b: &SpecRun) -> (usize, usize) {
    let mut n = 0;
    let mut eq = 0;
    for (x, y) in a.steps.iter().zip(&b.steps) {
        if let (Some(x), Some(y)) = (&x.logits, &y.logits) {
            n += 1;
            eq += usize::from(
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
            );
        }
    }
    (n, eq)
}

/// Runs, per `k` in `ks`, every request alone with [`CudaEngine::spec`] and all of them with
/// [`CudaEngine::spec_batch`] (`n` at once; with more requests than `n` they join as others
/// finish), both keeping logits, and compares; then the batched run again on the device top-k
/// path (no logits kept, CUDA graphs) against the same ids and rounds. Returns the JSON record
/// (`"ok"`: ids, rounds, plain steps and every logits row equal for every request and `k`).
///
/// Errors: forward/driver errors (no drafter loaded is an error of `spec`).
pub fn check(
    eng: &mut CudaEngine,
    reqs: &[GenRequest],
    ks: &[usize],
    n: usize,
) -> Result<serde_json::Value, RuntimeError> {
    let mut ok = true;
    let mut per_k = Vec::new();
    for &k in ks {
        let single = reqs
            .iter()
            .map(|r| eng.spec(r, k, 16, true))
            .collect::<Result<Vec<_>, _>>()?;
        let t = std::time::Instant::now();
        let batched = eng.spec_batch(reqs, n, k, 16, true)?;
        let batch_s = t.elapsed().as_secs_f64();
        let fast = eng.spec_batch(reqs, n, k, 16, false)?;
        let fast_ok = fast.len() == single.len()
            && single.iter().zip(&fast).all(|(s, f)| {
                s.rounds == f.rounds
                    && s.plain_steps == f.plain_steps
                    && s.steps
                        .iter()
                        .map(|x| x.token)
                        .eq(f.steps.iter().map(|x| x.token))
            });
        let mut per_req = Vec::new();
        let mut k_ok = batched.len() == single.len() && fast_ok;
        for (s, b) in single.iter().zip(&batched) {
            let ids = s
                .steps
                .iter()
                .map(|x| x.token)
                .eq(b.steps.iter().map(|x| x.token));
            let rounds = s.rounds == b.rounds && s.plain_steps == b.plain_steps;
            let (rows, eq) = rows_equal(s, b);
            let r_ok = ids && rounds && rows == s.steps.len() && eq == rows;
            k_ok &= r_ok;
            per_req.push(json!({
                "emitted": b.steps.len(), "ids_equal": ids, "rounds_equal": rounds,
                "rows_compared": rows, "bitwise_equal_rows": eq, "ok": r_ok,
            }));
        }
        ok &= k_ok;
        per_k.push(json!({
            "k": k,
            "width": spec_batch_width(n, k, eng.slots()),
            "batch_s": batch_s,
            "device_topk_path_equal": fast_ok,
            "ok": k_ok,
            "requests": per_req,
        }));
    }
    Ok(json!({"requests": reqs.len(), "n": n, "ok": ok, "per_k": per_k}))
}
