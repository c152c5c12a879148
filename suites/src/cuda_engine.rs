//! The CUDA runtime as an [`Engine`] (`cuda`, conformance §9), feature `cuda`: adapts
//! `runtime::CudaEngine` (plain methods) to the trait. Modes: `prefill` (teacher-forced
//! scoring), `plain`, `batch:4` (one running batch, requests joining and leaving).

use std::path::Path;
use std::time::Instant;

use runtime::{CudaEngine, EngineOptions, GenRequest, GenStep};

use crate::engine::{Engine, EngineError, Mode, Request, Scores, Step, StepKind, Trajectory};

/// Top-k recorded per emitted token.
pub const CUDA_TOP_K: usize = 16;

/// `runtime::CudaEngine` behind the [`Engine`] trait.
pub struct CudaEngineAdapter {
    inner: CudaEngine,
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

impl CudaEngineAdapter {
    /// Loads the model on GPU 0 (4 KV slots of 4096 positions). Errors: no GPU, bad model.
    pub fn load(path: &Path) -> Result<CudaEngineAdapter, EngineError> {
        let inner = CudaEngine::load(
            path,
            EngineOptions {
                slots: 4,
                max_ctx: 4096,
            },
        )
        .map_err(|e| EngineError::Other(format!("{}: {e}", path.display())))?;
        Ok(CudaEngineAdapter { inner })
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
    fn name(&self) -> &str {
        "cuda"
    }

    fn modes(&self) -> Vec<Mode> {
        vec![Mode::Prefill, Mode::Plain, Mode::Batch { n: 4 }]
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
}
