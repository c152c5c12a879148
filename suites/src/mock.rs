//! Test engines: a deterministic toy model ([`ToyModel`], both [`Engine`] and [`Oracle`]), a
//! byte codec ([`ByteCodec`]) and a wrapper engine ([`Perturbed`]) that perturbs any engine's
//! logits or forces a token at one output index and lets the inner engine continue from there.
//! They let the rule, runner and reports be tested without a real model.

use std::time::{Duration, Instant};

use crate::engine::{Engine, EngineError, Mode, Request, Scores, Step, StepKind, Trajectory};
use crate::oracle::{Codec, Oracle};
use crate::rule::OracleRow;
use crate::suite::PromptInput;

/// A deterministic toy language model over `vocab` ids: after a prefix ending in `l` the
/// logit of `(l + 1) mod V` is 10, every other id gets a pseudo-random value in `[0, 4)` from a
/// hash of (prefix length, last id, id); when `l % 7 == 3`, id `(l + 2) mod V` is put at
/// `10 − 2^-10` (a near-tie the rule must tolerate under τ ≥ 2^-10).
#[derive(Debug, Clone)]
pub struct ToyModel {
    /// Vocabulary size V.
    pub vocab: usize,
    /// Modes declared as an engine.
    pub modes: Vec<Mode>,
    /// Context length reported as an oracle (`None`: unknown, not checked).
    pub context: Option<usize>,
}

fn hash3(a: u64, b: u64, c: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ c.wrapping_mul(0x1656_67B1_9E37_79F9);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

impl ToyModel {
    /// A toy model with `vocab` ids declaring prefill, plain and batch:4.
    pub fn new(vocab: usize) -> ToyModel {
        ToyModel {
            vocab,
            modes: vec![Mode::Prefill, Mode::Plain, Mode::Batch { n: 4 }],
            context: None,
        }
    }

    /// Full logits `[V]` after `prefix` (non-empty).
    pub fn logits(&self, prefix: &[u32]) -> Vec<f64> {
        let v = self.vocab as u64;
        let l = u64::from(*prefix.last().unwrap_or(&0));
        let n = prefix.len() as u64;
        let mut out: Vec<f64> = (0..v)
            .map(|j| (hash3(n, l, j) >> 11) as f64 / (1u64 << 53) as f64 * 4.0)
            .collect();
        out[((l + 1) % v) as usize] = 10.0;
        if l % 7 == 3 {
            out[((l + 2) % v) as usize] = 10.0 - 2f64.powi(-10);
        }
        out
    }

    fn top_k(logits: &[f64], k: usize) -> Vec<(u32, f64)> {
        let mut idx: Vec<(u32, f64)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        idx.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        idx.truncate(k);
        idx
    }
}

/// Greedy decoding of one request from a logits function, recording top-16 per step.
pub fn greedy_with(
    req: &Request,
    mut logits: impl FnMut(&[u32]) -> Vec<(u32, f64)>,
    first_kind: StepKind,
) -> Trajectory {
    let t0 = Instant::now();
    let mut seq = req.prompt.clone();
    let mut steps = Vec::new();
    while steps.len() < req.max_tokens {
        let tk = logits(&seq);
        let token = tk[0].0;
        let kind = if steps.is_empty() {
            first_kind
        } else {
            StepKind::Decode
        };
        steps.push(Step {
            token,
            top_k: Some(tk),
            kind,
        });
        seq.push(token);
        if req.stop.contains(&token) {
            break;
        }
    }
    Trajectory {
        id: req.id.clone(),
        steps,
        spec: None,
        wall: t0.elapsed(),
    }
}

impl Engine for ToyModel {
    fn name(&self) -> &str {
        "toy"
    }
    fn modes(&self) -> Vec<Mode> {
        self.modes.clone()
    }
    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        if !self.modes.contains(mode) {
            return Err(EngineError::UnsupportedMode {
                engine: "toy".into(),
                mode: *mode,
            });
        }
        Ok(reqs
            .iter()
            .map(|r| {
                greedy_with(
                    r,
                    |s| ToyModel::top_k(&self.logits(s), 16),
                    StepKind::Prefill,
                )
            })
            .collect())
    }
    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        Ok(seqs
            .iter()
            .map(|s| Scores {
                rows: (1..=s.len())
                    .map(|t| ToyModel::top_k(&self.logits(&s[..t]), top_k))
                    .collect(),
            })
            .collect())
    }
}

impl Oracle for ToyModel {
    fn model_sha256(&self) -> &str {
        "toy-model"
    }
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn suppressed_ids(&self) -> Vec<u32> {
        Vec::new()
    }
    fn context_length(&self) -> Option<usize> {
        self.context
    }
    fn score(
        &mut self,
        seqs: &[Vec<u32>],
        top_k: usize,
    ) -> Result<Vec<Vec<OracleRow>>, EngineError> {
        Ok(seqs
            .iter()
            .map(|s| {
                (1..=s.len())
                    .map(|t| {
                        let l = self.logits(&s[..t]);
                        OracleRow {
                            top_k: ToyModel::top_k(&l, top_k),
                            chosen: s.get(t).map(|&id| l[id as usize]),
                            max_abs: Some(l.iter().fold(0.0, |m: f64, x| m.max(x.abs()))),
                        }
                    })
                    .collect()
            })
            .collect())
    }
}

/// A codec over a toy vocabulary: text bytes become ids `byte mod V` after a BOS id 2; messages
/// are joined as `role: content\n`; decoding writes ids as `<id>`.
#[derive(Debug, Clone)]
pub struct ByteCodec {
    /// Vocabulary size V.
    pub vocab: usize,
}

impl Codec for ByteCodec {
    fn encode(&self, input: &PromptInput, _enable_thinking: bool) -> Result<Vec<u32>, String> {
        let text = match input {
            PromptInput::Text(t) => t.clone(),
            PromptInput::Messages(m) => m
                .iter()
                .map(|m| format!("{}: {}\n", m.role, m.content))
                .collect(),
        };
        Ok(std::iter::once(2)
            .chain(text.bytes().map(|b| u32::from(b) % self.vocab as u32))
            .collect())
    }
    fn decode(&self, ids: &[u32]) -> String {
        ids.iter().map(|i| format!("<{i}>")).collect()
    }
}

/// How [`Perturbed`] changes its inner engine's output.
#[derive(Debug, Clone, PartialEq)]
pub enum Perturbation {
    /// Adds a deterministic pseudo-random value in `[−amp, amp]` to every top-k logit and
    /// re-picks the argmax among the top-k.
    Noise {
        /// Amplitude in logits.
        amp: f64,
    },
    /// At output index `index` of request `id`, emits the inner engine's `rank`-th candidate
    /// (1 = second best) instead of its argmax.
    Force {
        /// Request id.
        id: String,
        /// Output index.
        index: usize,
        /// Rank in the inner engine's top-k.
        rank: usize,
    },
}

/// A wrapper engine: runs the inner engine in `plain`, applies a [`Perturbation`] to each step,
/// and when the emitted token changes, restarts the inner engine on `prompt ‖ output so far`.
pub struct Perturbed<E> {
    /// The wrapped engine.
    pub inner: E,
    /// The perturbation.
    pub how: Perturbation,
    name: String,
    /// Per-request failures of the last call (the inner engine's, [`Engine::request_errors`]).
    errors: Vec<(String, String)>,
}

impl<E: Engine> Perturbed<E> {
    /// Wraps `inner`.
    pub fn new(inner: E, how: Perturbation) -> Perturbed<E> {
        let name = format!("perturbed:{}", inner.name());
        Perturbed {
            inner,
            how,
            name,
            errors: Vec::new(),
        }
    }

    fn one(&mut self, req: &Request) -> Result<Trajectory, EngineError> {
        let t0 = Instant::now();
        let mut out: Vec<Step> = Vec::new();
        'outer: while out.len() < req.max_tokens {
            let mut prompt = req.prompt.clone();
            prompt.extend(out.iter().map(|s| s.token));
            let sub = Request {
                id: req.id.clone(),
                prompt,
                max_tokens: req.max_tokens - out.len(),
                stop: req.stop.clone(),
            };
            let traj = self
                .inner
                .generate(&[sub], &Mode::Plain)?
                .pop()
                .ok_or_else(|| EngineError::Other("inner engine returned nothing".into()))?;
            // the inner engine's failure of this request is this request's failure
            if let Some((id, message)) = self.inner.request_errors().into_iter().next() {
                return Err(EngineError::Request { id, message });
            }
            if traj.steps.is_empty() {
                break;
            }
            for step in traj.steps {
                let index = out.len();
                let tk = step
                    .top_k
                    .clone()
                    .unwrap_or_else(|| vec![(step.token, 0.0)]);
                let new = match &self.how {
                    Perturbation::Noise { amp } => {
                        let mut p: Vec<(u32, f64)> = tk
                            .iter()
                            .map(|&(id, l)| {
                                let u = (hash3(index as u64, u64::from(id), 7) >> 11) as f64
                                    / (1u64 << 53) as f64;
                                (id, l + amp * (2.0 * u - 1.0))
                            })
                            .collect();
                        p.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                        Step {
                            token: p[0].0,
                            top_k: Some(p),
                            kind: step.kind,
                        }
                    }
                    Perturbation::Force {
                        id,
                        index: at,
                        rank,
                    } if *id == req.id && *at == index => {
                        let token = tk.get(*rank).map_or(step.token, |c| c.0);
                        Step {
                            token,
                            top_k: Some(tk),
                            kind: step.kind,
                        }
                    }
                    Perturbation::Force { .. } => step.clone(),
                };
                let changed = new.token != step.token;
                let stop = req.stop.contains(&new.token);
                out.push(new);
                if stop {
                    break 'outer;
                }
                if changed {
                    continue 'outer;
                }
            }
        }
        Ok(Trajectory {
            id: req.id.clone(),
            steps: out,
            spec: None,
            wall: t0.elapsed().max(Duration::from_nanos(1)),
        })
    }
}

impl<E: Engine> Engine for Perturbed<E> {
    fn name(&self) -> &str {
        &self.name
    }
    fn modes(&self) -> Vec<Mode> {
        vec![Mode::Plain]
    }
    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        if *mode != Mode::Plain {
            return Err(EngineError::UnsupportedMode {
                engine: self.name.clone(),
                mode: *mode,
            });
        }
        self.errors.clear();
        let mut out = Vec::with_capacity(reqs.len());
        for r in reqs {
            let t = self.one(r);
            out.push(crate::engine::per_request(&mut self.errors, r, t)?);
        }
        Ok(out)
    }
    fn request_errors(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.errors)
    }
    /// The inner engine's scores; under [`Perturbation::Noise`] every logit gets the same
    /// deterministic noise as in generation (keyed by position and id) and rows are re-sorted.
    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        let mut out = self.inner.score(seqs, top_k)?;
        if let Perturbation::Noise { amp } = self.how {
            for sc in &mut out {
                for (t, row) in sc.rows.iter_mut().enumerate() {
                    for (id, l) in row.iter_mut() {
                        let u =
                            (hash3(t as u64, u64::from(*id), 7) >> 11) as f64 / (1u64 << 53) as f64;
                        *l += amp * (2.0 * u - 1.0);
                    }
                    row.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                }
            }
        }
        Ok(out)
    }
}
