//! The CUDA runtime as an [`Engine`] (`cuda`, conformance §9), feature `cuda`: adapts
//! `runtime::CudaEngine` (plain methods) to the trait. Modes: `prefill` (teacher-forced
//! scoring), `plain`, `batch:4` (one running batch, requests joining and leaving), and with a
//! draft model `spec:1`, `spec:2`, `spec:4` (GPU MTP speculative decoding,
//! `spec/gemma4-assistant-mtp.md` §4.1; steps `verify-accepted` / `verify-bonus`, per-round
//! `(K_r, n')` in [`SpecStats`]). [`Engine::decode_rows`] gives the plain decode rows of a given
//! continuation (`--strict-invariance`, `design/conformance.md` §7) through
//! `CudaEngine::decode_rows`: the prefill and one-row decode calls `plain` makes.

use std::path::Path;
use std::time::Instant;

use reference::model::LoadOptions;
use runtime::{CudaEngine, EngineOptions, GenRequest, GenStep, RuntimeError, SpecKind};

use crate::engine::{
    Engine, EngineError, Mode, Request, Scores, SpecStats, Step, StepKind, TopKRows, Trajectory,
};

/// Top-k recorded per emitted token.
pub const CUDA_TOP_K: usize = 16;

/// `runtime::CudaEngine` behind the [`Engine`] trait.
pub struct CudaEngineAdapter {
    inner: CudaEngine,
    has_draft: bool,
}

fn req_err(id: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Request {
        id: id.to_string(),
        message: e.to_string(),
    }
}

fn steps(gs: Vec<GenStep>) -> Vec<Step> {
    gs.into_iter()
        .enumerate()
        .map(|(i, g)| Step {
            token: g.token,
            top_k: Some(g.top_k),
            kind: if i == 0 {
                StepKind::Prefill
            } else {
                StepKind::Decode
            },
        })
        .collect()
}

/// A load failure of `path`: [`EngineError::Load`] when the file is at fault (unusable GGUF or
/// metadata, a block format without a GPU kernel, a non-finite weight, a drafter that does not
/// pair), else (no GPU,
/// driver, kernel compilation, memory) [`EngineError::Other`] naming the file.
fn load_err(path: &Path, e: RuntimeError) -> EngineError {
    match e {
        RuntimeError::Model { .. }
        | RuntimeError::UnsupportedType { .. }
        | RuntimeError::Quant { .. } => EngineError::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
        RuntimeError::NonFiniteWeight(_) => EngineError::Load {
            path: path.to_path_buf(),
            message: format!("{e}; {}", crate::reference_engine::NONFINITE_HINT),
        },
        e => EngineError::Other(format!("{}: {e}", path.display())),
    }
}

impl CudaEngineAdapter {
    /// Loads the model on GPU 0 (4 KV slots of 4096 positions). Errors: no GPU, bad model.
    pub fn load(path: &Path) -> Result<CudaEngineAdapter, EngineError> {
        Self::load_with_draft(path, None)
    }

    /// [`CudaEngineAdapter::load`] plus the MTP assistant `draft` (enables `spec:1/2/4`).
    /// Errors: no GPU, bad model, drafter/target pairing mismatch.
    pub fn load_with_draft(
        path: &Path,
        draft: Option<&Path>,
    ) -> Result<CudaEngineAdapter, EngineError> {
        Self::load_with_options(path, draft, LoadOptions::default())
    }

    /// [`CudaEngineAdapter::load_with_draft`] with the load options of target and drafter
    /// (`allow_nonfinite`: `--allow-nonfinite`; by default a non-finite weight is
    /// [`EngineError::Load`] naming tensor, block and field).
    pub fn load_with_options(
        path: &Path,
        draft: Option<&Path>,
        load: LoadOptions,
    ) -> Result<CudaEngineAdapter, EngineError> {
        let mut inner = CudaEngine::load_with(
            path,
            EngineOptions {
                slots: 4,
                max_ctx: 4096,
            },
            load,
        )
        .map_err(|e| load_err(path, e))?;
        if let Some(d) = draft {
            inner.load_draft_with(d, load).map_err(|e| load_err(d, e))?;
        }
        Ok(CudaEngineAdapter {
            inner,
            has_draft: draft.is_some(),
        })
    }

    fn spec(&mut self, r: &Request, k: usize) -> Result<Trajectory, EngineError> {
        let t0 = Instant::now();
        let run = self
            .inner
            .spec(&Self::gen_req(r), k, CUDA_TOP_K, false)
            .map_err(|e| req_err(&r.id, e))?;
        let steps = run
            .steps
            .into_iter()
            .map(|s| Step {
                token: s.token,
                top_k: Some(s.top_k),
                kind: match s.kind {
                    SpecKind::Prefill => StepKind::Prefill,
                    SpecKind::Decode => StepKind::Decode,
                    SpecKind::VerifyAccepted => StepKind::VerifyAccepted,
                    SpecKind::VerifyBonus => StepKind::VerifyBonus,
                },
            })
            .collect();
        let stats = SpecStats {
            rounds: run.rounds.len(),
            drafted: run.rounds.iter().map(|x| x.k).sum(),
            accepted: run.rounds.iter().map(|x| x.accepted).sum(),
            per_round: run.rounds.iter().map(|x| (x.k, x.accepted)).collect(),
        };
        Ok(Trajectory {
            id: r.id.clone(),
            steps,
            spec: Some(stats),
            wall: t0.elapsed(),
        })
    }

    fn gen_req(r: &Request) -> GenRequest {
        GenRequest {
            prompt: r.prompt.clone(),
            max_tokens: r.max_tokens,
            stop: r.stop.clone(),
        }
    }
}

impl Engine for CudaEngineAdapter {
    /// `cuda`, or `cuda-fast` when the process runs the integer tensor-core matvecs at two int8
    /// digits (`GEMMA4_TC_DIGITS=2`, [`runtime::kernels::tc_digits`]): each mode has its own tie budgets
    /// in `budgets.toml`.
    fn name(&self) -> &str {
        if runtime::kernels::tc_digits() == 2 {
            "cuda-fast"
        } else {
            "cuda"
        }
    }

    fn modes(&self) -> Vec<Mode> {
        let mut m = vec![Mode::Prefill, Mode::Plain, Mode::Batch { n: 4 }];
        if self.has_draft {
            m.extend([1, 2, 4].map(|k| Mode::Spec { k }));
        }
        m
    }

    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        match *mode {
            Mode::Plain => reqs
                .iter()
                .map(|r| {
                    let t0 = Instant::now();
                    let g = self
                        .inner
                        .greedy(&Self::gen_req(r), CUDA_TOP_K)
                        .map_err(|e| req_err(&r.id, e))?;
                    Ok(Trajectory {
                        id: r.id.clone(),
                        steps: steps(g),
                        spec: None,
                        wall: t0.elapsed(),
                    })
                })
                .collect(),
            Mode::Batch { n } => {
                let t0 = Instant::now();
                let g: Vec<GenRequest> = reqs.iter().map(Self::gen_req).collect();
                let out = self
                    .inner
                    .batch(&g, n, CUDA_TOP_K)
                    .map_err(|e| req_err("*", e))?;
                let wall = t0.elapsed();
                Ok(reqs
                    .iter()
                    .zip(out)
                    .map(|(r, s)| Trajectory {
                        id: r.id.clone(),
                        steps: steps(s),
                        spec: None,
                        wall,
                    })
                    .collect())
            }
            Mode::Spec { k } if self.has_draft => reqs.iter().map(|r| self.spec(r, k)).collect(),
            _ => Err(EngineError::UnsupportedMode {
                engine: "cuda".into(),
                mode: *mode,
            }),
        }
    }

    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        let s = self.inner.score(seqs, top_k).map_err(|e| req_err("*", e))?;
        Ok(s.into_iter().map(|rows| Scores { rows }).collect())
    }

    /// Plain decode rows on `prompt ‖ tokens[..t]` (`CudaEngine::decode_rows`; rows
    /// `[tokens.len()]`, top-`top_k` descending). Errors name the call (`*`).
    fn decode_rows(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Option<TopKRows>, EngineError> {
        self.inner
            .decode_rows(prompt, tokens, top_k)
            .map(Some)
            .map_err(|e| req_err("*", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixtures() -> PathBuf {
        reference::fixtures_dir()
    }

    /// A non-finite weight is the file's fault: [`EngineError::Load`] naming the tensor, with
    /// the `--allow-nonfinite` hint (it was [`EngineError::Other`]).
    #[test]
    fn a_nonfinite_weight_is_a_load_error() {
        let e = RuntimeError::NonFiniteWeight(reference::quant::NonFiniteError {
            tensor: "output_norm.weight".into(),
            ty: reference::quant::GgmlType::F32,
            block: 0,
            element: 0,
            row: 0,
            field: "value",
            value: f64::NAN,
            bits: 0x7FC0_0000,
            file_offset: 0,
        });
        match load_err(Path::new("m.gguf"), e) {
            EngineError::Load { path, message } => {
                assert_eq!(path, Path::new("m.gguf"));
                assert!(message.contains("output_norm.weight"), "{message}");
                assert!(message.contains("--allow-nonfinite"), "{message}");
            }
            other => panic!("{other}"),
        }
    }

    /// Without a GPU (CI), loading is a typed engine error naming the file, never a panic.
    #[test]
    fn load_without_gpu_is_an_engine_error() {
        if runtime::device::unavailable_reason().is_none() {
            println!("skipped: a GPU is present (this checks the no-GPU path)");
            return;
        }
        let p = fixtures().join("models/dense-target.Q4_K_M.gguf");
        match CudaEngineAdapter::load(&p) {
            // the driver, not the file, is at fault: not EngineError::Load
            Err(EngineError::Other(m)) => {
                assert!(
                    m.contains("dense-target.Q4_K_M") && m.contains("CUDA unavailable"),
                    "{m}"
                )
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("loaded without a GPU"),
        }
    }

    /// On a GPU with the fixtures: the plain decode rows of the `plain` output are that
    /// output's own rows, bitwise (same calls, same order); on the `spec:4` output they give one
    /// row per emitted token, each holding `top_k` finite logits.
    #[test]
    fn decode_rows_on_gpu() {
        if let Some(why) = runtime::device::unavailable_reason() {
            println!("skipped: {why}");
            return;
        }
        let m = fixtures().join("models");
        let (t, d) = (
            m.join("dense-target.Q4_K_M.gguf"),
            m.join("dense-assistant.F32.gguf"),
        );
        if !t.exists() || !d.exists() {
            println!("skipped: fixtures not found at {}", fixtures().display());
            return;
        }
        let mut e = CudaEngineAdapter::load_with_draft(&t, Some(&d)).unwrap();
        let req = Request {
            id: "count".into(),
            prompt: vec![2, 16308, 16302, 16281],
            max_tokens: 20,
            stop: vec![],
        };
        let plain = e
            .generate(std::slice::from_ref(&req), &Mode::Plain)
            .unwrap();
        let toks = plain[0].tokens();
        let rows = e
            .decode_rows(&req.prompt, &toks, CUDA_TOP_K)
            .unwrap()
            .unwrap();
        assert_eq!(rows.len(), toks.len());
        for (i, (r, s)) in rows.iter().zip(&plain[0].steps).enumerate() {
            assert_eq!(Some(r), s.top_k.as_ref(), "output index {i}");
        }
        let spec = e
            .generate(std::slice::from_ref(&req), &Mode::Spec { k: 4 })
            .unwrap();
        let st = spec[0].tokens();
        let rows = e.decode_rows(&req.prompt, &st, 8).unwrap().unwrap();
        assert_eq!(rows.len(), st.len());
        assert!(rows
            .iter()
            .all(|r| r.len() == 8 && r.iter().all(|x| x.1.is_finite())));
    }
}
