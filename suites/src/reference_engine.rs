//! The oracle as an engine and as the arbiter (`design/conformance.md` §1, §2):
//! [`ReferenceEngine<F>`] (`reference-f64` / `reference-f32`) over `reference::model::Model<F>`
//! with modes `prefill`, `plain`, `batch:N` (one running batch through `Model::forward_batch`,
//! requests joining and leaving as they finish) and — when a draft model is given — `spec:K`;
//! [`ReferenceOracle`] (f64 teacher-forced scoring, `reference::score::score`); and
//! [`GemmaCodec`] (the GGUF's tokenizer and chat template, `reference::tokenizer`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Instant;

use reference::decode::KvCache;
use reference::gguf::GgufFile;
use reference::model::logits::top_k as select_top_k;
use reference::model::{Float, LoadOptions, Model, ModelError};
use reference::tokenizer::{ChatMessage, GemmaTokenizer};

use reference::spec::Assistant;

use crate::engine::{
    per_request, Engine, EngineError, Mode, Request, Scores, Step, StepKind, TopKRows, Trajectory,
};
use crate::oracle::{Codec, Oracle};
use crate::rule::OracleRow;
use crate::runner::ModelLimits;
use crate::spec_engine::spec_generate;
use crate::suite::PromptInput;

/// Whether `spec:K` is wired to `reference::spec` (the MTP loop of [`crate::spec_engine`]).
pub const SPEC_WIRED: bool = true;

/// Top-k recorded per emitted token by the reference engine.
pub const ENGINE_TOP_K: usize = 16;

/// The generic oracle forward as an engine: `reference-f64` for `F = f64`, `reference-f32`
/// (the deliberately imperfect CI engine) for `F = f32`.
pub struct ReferenceEngine<F: Float> {
    model: Model<F>,
    name: String,
    draft: Option<PathBuf>,
    assistant: Option<Assistant<F>>,
    /// How the drafter is loaded (the target's options).
    load: LoadOptions,
    /// Per-request failures of the last [`Engine::generate`] call ([`Engine::request_errors`]).
    errors: Vec<(String, String)>,
}

fn model_err(id: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Request {
        id: id.to_string(),
        message: e.to_string(),
    }
}

/// What `--allow-nonfinite` does, appended to a load error for a non-finite weight.
pub const NONFINITE_HINT: &str =
    "--allow-nonfinite loads it anyway for forensic use (NaN/Inf logits are then reported, never judged)";

/// The message of a model load error: its text, plus [`NONFINITE_HINT`] for a non-finite
/// weight ([`ModelError::NonFinite`], conformance contract §9).
pub fn load_message(e: &ModelError) -> String {
    match e {
        ModelError::NonFinite(_) => format!("{e}; {NONFINITE_HINT}"),
        _ => e.to_string(),
    }
}

/// [`load_message`] for an assistant load error.
pub fn spec_load_message(e: &reference::spec::SpecError) -> String {
    match e {
        reference::spec::SpecError::Model(m) => load_message(m),
        _ => e.to_string(),
    }
}

impl<F: Float> ReferenceEngine<F> {
    /// Loads the model (default [`LoadOptions`]: a non-finite weight is refused). Errors: the
    /// model cannot be loaded (named by path).
    pub fn load(path: &Path) -> Result<ReferenceEngine<F>, EngineError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`ReferenceEngine::load`] with `opts`, which also load the drafter
    /// (`allow_nonfinite`: `--allow-nonfinite`). Errors: the model cannot be loaded (named by
    /// path; a non-finite weight's message ends with [`NONFINITE_HINT`]).
    pub fn load_with(path: &Path, opts: LoadOptions) -> Result<ReferenceEngine<F>, EngineError> {
        let model = Model::<F>::load_with(path, opts).map_err(|e| EngineError::Load {
            path: path.to_path_buf(),
            message: load_message(&e),
        })?;
        let mut engine = Self::from_model(model);
        engine.load = opts;
        Ok(engine)
    }

    /// Wraps a loaded model.
    pub fn from_model(model: Model<F>) -> ReferenceEngine<F> {
        let name = if std::mem::size_of::<F>() == 8 {
            "reference-f64"
        } else {
            "reference-f32"
        };
        ReferenceEngine {
            model,
            name: name.into(),
            draft: None,
            assistant: None,
            load: LoadOptions::default(),
            errors: Vec::new(),
        }
    }

    /// Declares `spec:K` modes with this MTP drafter.
    ///
    /// The assistant is loaded on the first `spec:K` request (`reference::spec::Assistant`);
    /// a load or pairing failure is an engine error of that request.
    pub fn with_draft(mut self, draft: Option<PathBuf>) -> Self {
        self.draft = draft;
        self.assistant = None;
        self
    }

    /// `spec:K` over every request with the MTP assistant ([`crate::spec_engine`]).
    fn spec(&mut self, reqs: &[Request], k: usize) -> Result<Vec<Trajectory>, EngineError> {
        if self.assistant.is_none() {
            let path = self
                .draft
                .as_ref()
                .ok_or_else(|| EngineError::UnsupportedMode {
                    engine: self.name.clone(),
                    mode: Mode::Spec { k },
                })?;
            let a = Assistant::<F>::load_with(path, self.load).map_err(|e| EngineError::Load {
                path: path.to_path_buf(),
                message: spec_load_message(&e),
            })?;
            a.check_target(self.model.config())
                .map_err(|e| EngineError::Load {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?;
            self.assistant = Some(a);
        }
        let Some(a) = self.assistant.as_ref() else {
            return Err(EngineError::Other("assistant not loaded".into()));
        };
        let mut drafter = a;
        let errors = &mut self.errors;
        reqs.iter()
            .map(|r| {
                let t = spec_generate(&self.model, &mut drafter, r, k, ENGINE_TOP_K);
                per_request(errors, r, t)
            })
            .collect()
    }

    /// Plain decode rows for a given continuation (`--strict-invariance`, §7): prefill `prompt`
    /// (its last row predicts `tokens[0]`), then feed `tokens` one per forward; returns the
    /// top-`top_k` of every row `[tokens.len()]`, row `t` on the prefix `prompt ‖ tokens[..t]`.
    pub fn decode_rows(
        &self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Vec<Vec<(u32, f64)>>, EngineError> {
        let mut cache = self.model.new_cache();
        let sup = self.model.suppressed_ids().to_vec();
        let mut out = Vec::with_capacity(tokens.len());
        if tokens.is_empty() {
            return Ok(out);
        }
        let rows = self
            .model
            .forward(&mut cache, prompt)
            .map_err(|e| model_err("*", e))?;
        let mut last = rows.into_iter().last().unwrap_or_default();
        for (t, &tok) in tokens.iter().enumerate() {
            out.push(select_top_k(&last, top_k, &sup));
            if t + 1 == tokens.len() {
                break;
            }
            last = self
                .model
                .forward(&mut cache, &[tok])
                .map_err(|e| model_err("*", e))?
                .pop()
                .unwrap_or_default();
        }
        Ok(out)
    }

    /// The wrapped model.
    pub fn model(&self) -> &Model<F> {
        &self.model
    }

    fn plain(&self, req: &Request) -> Result<Trajectory, EngineError> {
        let t0 = Instant::now();
        let g = self
            .model
            .greedy(&req.prompt, req.max_tokens, &req.stop)
            .map_err(|e| model_err(&req.id, e))?;
        if let Some((i, bad)) = g.nonfinite {
            return Err(model_err(
                &req.id,
                format!("non-finite logits at output index {i} ({bad} NaN/Inf)"),
            ));
        }
        let steps = g
            .tokens
            .iter()
            .zip(g.top_k)
            .enumerate()
            .map(|(i, (&token, tk))| Step {
                token,
                top_k: Some(tk),
                kind: if i == 0 {
                    StepKind::Prefill
                } else {
                    StepKind::Decode
                },
            })
            .collect();
        Ok(Trajectory {
            id: req.id.clone(),
            steps,
            spec: None,
            wall: t0.elapsed(),
        })
    }

    /// Running batch of width `n` over all requests: each forward carries, per active slot,
    /// either its whole prompt (a request joining) or its last token (decoding). A request
    /// whose row has NaN/Inf logits (or no top-k) leaves the batch with its failure recorded
    /// in `self.errors` ([`Engine::request_errors`]) and no steps; the others go on.
    fn batch(&mut self, reqs: &[Request], n: usize) -> Result<Vec<Trajectory>, EngineError> {
        struct Slot<F> {
            req: usize,
            cache: KvCache<F>,
            feed: Vec<u32>,
            steps: Vec<Step>,
        }
        let t0 = Instant::now();
        let mut queue: VecDeque<usize> = (0..reqs.len()).collect();
        let mut active: Vec<Slot<F>> = Vec::new();
        let mut done: Vec<Option<Vec<Step>>> = vec![None; reqs.len()];
        let suppressed = self.model.suppressed_ids().to_vec();
        loop {
            while active.len() < n {
                let Some(r) = queue.pop_front() else { break };
                if reqs[r].max_tokens == 0 || reqs[r].prompt.is_empty() {
                    done[r] = Some(Vec::new());
                    continue;
                }
                active.push(Slot {
                    req: r,
                    cache: self.model.new_cache(),
                    feed: reqs[r].prompt.clone(),
                    steps: Vec::new(),
                });
            }
            if active.is_empty() {
                break;
            }
            let feeds: Vec<Vec<u32>> = active.iter().map(|s| s.feed.clone()).collect();
            let tokens: Vec<&[u32]> = feeds.iter().map(|f| f.as_slice()).collect();
            let rows = {
                let mut caches: Vec<&mut KvCache<F>> =
                    active.iter_mut().map(|s| &mut s.cache).collect();
                self.model
                    .forward_batch(&mut caches, &tokens)
                    .map_err(|e| model_err("*", e))?
            };
            let mut keep = Vec::new();
            for (mut slot, r) in active.drain(..).zip(rows) {
                let req = &reqs[slot.req];
                let bad = r
                    .last()
                    .map(|last| last.iter().filter(|z| !z.is_finite()).count());
                let tk = r
                    .last()
                    .map(|last| select_top_k(last, ENGINE_TOP_K, &suppressed))
                    .unwrap_or_default();
                let failure = match (bad, tk.first()) {
                    (None, _) => Some("no logits row".to_string()),
                    (Some(bad), _) if bad > 0 => Some(format!(
                        "non-finite logits at output index {} ({bad} NaN/Inf)",
                        slot.steps.len()
                    )),
                    (_, None) => Some("empty top-k".to_string()),
                    _ => None,
                };
                if let Some(message) = failure {
                    // this request leaves the batch; the others go on
                    self.errors.push((req.id.clone(), message));
                    done[slot.req] = Some(Vec::new());
                    continue;
                }
                let token = tk[0].0;
                let kind = if slot.steps.is_empty() {
                    StepKind::Prefill
                } else {
                    StepKind::Decode
                };
                slot.steps.push(Step {
                    token,
                    top_k: Some(tk),
                    kind,
                });
                if req.stop.contains(&token) || slot.steps.len() >= req.max_tokens {
                    done[slot.req] = Some(slot.steps);
                } else {
                    slot.feed = vec![token];
                    keep.push(slot);
                }
            }
            active = keep;
        }
        let wall = t0.elapsed();
        Ok(reqs
            .iter()
            .zip(done)
            .map(|(r, s)| Trajectory {
                id: r.id.clone(),
                steps: s.unwrap_or_default(),
                spec: None,
                wall,
            })
            .collect())
    }
}

impl<F: Float> Engine for ReferenceEngine<F> {
    fn name(&self) -> &str {
        &self.name
    }

    fn modes(&self) -> Vec<Mode> {
        let mut m = vec![Mode::Prefill, Mode::Plain, Mode::Batch { n: 4 }];
        if self.draft.is_some() && SPEC_WIRED {
            m.extend([1, 2, 4].map(|k| Mode::Spec { k }));
        }
        m
    }

    /// Generates every request in `mode`; a request that fails on its own (NaN/Inf logits
    /// under `--allow-nonfinite`: `non-finite logits at output index I (N NaN/Inf)`) gets an
    /// empty trajectory and its message in [`Engine::request_errors`], while the others are
    /// generated as if it were not there (in `batch:N` its slot leaves the batch).
    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        self.errors.clear();
        match *mode {
            Mode::Plain => {
                let mut out = Vec::with_capacity(reqs.len());
                for r in reqs {
                    let t = self.plain(r);
                    out.push(per_request(&mut self.errors, r, t)?);
                }
                Ok(out)
            }
            Mode::Batch { n } => self.batch(reqs, n),
            Mode::Spec { k } if self.draft.is_some() && SPEC_WIRED => self.spec(reqs, k),
            _ => Err(EngineError::UnsupportedMode {
                engine: self.name.clone(),
                mode: *mode,
            }),
        }
    }

    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        let s = reference::score::score(&self.model, seqs, top_k).map_err(|e| model_err("*", e))?;
        Ok(s.into_iter()
            .map(|rows| Scores {
                rows: rows.into_iter().map(|p| p.top_k).collect(),
            })
            .collect())
    }

    fn decode_rows(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Option<TopKRows>, EngineError> {
        ReferenceEngine::decode_rows(self, prompt, tokens, top_k).map(Some)
    }

    fn request_errors(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.errors)
    }
}

/// The f64 oracle as the arbiter of the rule.
pub struct ReferenceOracle {
    model: Model<f64>,
    sha256: String,
    /// The model file as errors name it (empty for [`ReferenceOracle::from_model`]).
    label: String,
}

impl ReferenceOracle {
    /// Loads the model and hashes the file. Errors name the path.
    pub fn load(path: &Path) -> Result<ReferenceOracle, EngineError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`ReferenceOracle::load`] with `opts` (`allow_nonfinite`: `--allow-nonfinite`; the
    /// oracle then refuses to score a row with NaN/Inf logits, [`Oracle::score`]).
    pub fn load_with(path: &Path, opts: LoadOptions) -> Result<ReferenceOracle, EngineError> {
        let file = GgufFile::open(path).map_err(|e| EngineError::Load {
            path: path.to_path_buf(),
            message: crate::conformance::gguf_open_cause(path, &e),
        })?;
        ReferenceOracle::from_gguf_with(path, file, opts)
    }

    /// The oracle over `file`, the GGUF already opened from `path` (conformance and explain
    /// keep the file their up-front check opened, so the model is opened once): the model
    /// prepared from it (`Model::from_gguf`) and the SHA-256 of `path`. Errors name the path.
    pub fn from_gguf(path: &Path, file: GgufFile) -> Result<ReferenceOracle, EngineError> {
        Self::from_gguf_with(path, file, LoadOptions::default())
    }

    /// [`ReferenceOracle::from_gguf`] with `opts` (`Model::from_gguf_with`). Errors name the
    /// path; a non-finite weight's message ends with [`NONFINITE_HINT`].
    pub fn from_gguf_with(
        path: &Path,
        file: GgufFile,
        opts: LoadOptions,
    ) -> Result<ReferenceOracle, EngineError> {
        let load = |message: String| EngineError::Load {
            path: path.to_path_buf(),
            message,
        };
        let sha256 = reference::gguf::sha256_file(path).map_err(|e| load(e.to_string()))?;
        let model = Model::<f64>::from_gguf_with(file, reference::model::Faults::default(), opts)
            .map_err(|e| load(load_message(&e)))?;
        Ok(ReferenceOracle {
            model,
            sha256,
            label: path.display().to_string(),
        })
    }

    /// From a loaded model and its file's SHA-256.
    pub fn from_model(model: Model<f64>, sha256: String) -> ReferenceOracle {
        ReferenceOracle {
            model,
            sha256,
            label: String::new(),
        }
    }

    /// The model.
    pub fn model(&self) -> &Model<f64> {
        &self.model
    }
}

impl Oracle for ReferenceOracle {
    fn model_sha256(&self) -> &str {
        &self.sha256
    }
    fn vocab_size(&self) -> usize {
        ModelLimits::from_config(self.model.config()).vocab_size
    }
    fn suppressed_ids(&self) -> Vec<u32> {
        self.model.suppressed_ids().to_vec()
    }
    fn context_length(&self) -> Option<usize> {
        ModelLimits::from_config(self.model.config()).context_length
    }
    fn score(
        &mut self,
        seqs: &[Vec<u32>],
        top_k: usize,
    ) -> Result<Vec<Vec<OracleRow>>, EngineError> {
        let s = reference::score::score(&self.model, seqs, top_k).map_err(|e| model_err("*", e))?;
        for (seq, rows) in seqs.iter().zip(&s) {
            if let Some((t, p)) = rows.iter().enumerate().find(|(_, p)| p.nonfinite > 0) {
                return Err(EngineError::Other(format!(
                    "{}the oracle's logits are non-finite at position {t} of a {}-token sequence \
                     ({} NaN/Inf logits in that row): the run cannot be judged",
                    if self.label.is_empty() {
                        String::new()
                    } else {
                        format!("model {}: ", self.label)
                    },
                    seq.len(),
                    p.nonfinite
                )));
            }
        }
        Ok(s.into_iter()
            .map(|rows| {
                rows.into_iter()
                    .map(|p| OracleRow {
                        top_k: p.top_k,
                        chosen: p.next_logit,
                        max_abs: None,
                    })
                    .collect()
            })
            .collect())
    }
}

/// The model's tokenizer and chat template as a [`Codec`].
pub struct GemmaCodec {
    tok: GemmaTokenizer,
}

impl GemmaCodec {
    /// Reads the tokenizer from the GGUF file. Errors name the path.
    pub fn load(path: &Path) -> Result<GemmaCodec, String> {
        let f = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        GemmaCodec::from_gguf(&f, path)
    }

    /// Reads the tokenizer from `file`, the GGUF already opened from `path` (named by errors).
    pub fn from_gguf(file: &GgufFile, path: &Path) -> Result<GemmaCodec, String> {
        let tok =
            GemmaTokenizer::from_gguf(file).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(GemmaCodec { tok })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &GemmaTokenizer {
        &self.tok
    }
}

impl Codec for GemmaCodec {
    fn encode(&self, input: &PromptInput, enable_thinking: bool) -> Result<Vec<u32>, String> {
        match input {
            PromptInput::Text(t) => self.tok.encode(t, true).map_err(|e| e.to_string()),
            PromptInput::Messages(m) => {
                let msgs: Vec<ChatMessage> = m
                    .iter()
                    .map(|m| ChatMessage::new(&m.role, &m.content))
                    .collect();
                self.tok
                    .encode_chat(&msgs, true, enable_thinking)
                    .map_err(|e| e.to_string())
            }
        }
    }
    fn decode(&self, ids: &[u32]) -> String {
        self.tok
            .decode(ids)
            .unwrap_or_else(|_| ids.iter().map(|i| format!("<id:{i}>")).collect())
    }
}

#[cfg(test)]
mod nonfinite_tests {
    use super::*;

    /// A model with a NaN weight: refused by default naming the tensor, with the
    /// `--allow-nonfinite` hint; with `allow_nonfinite` it loads, and its NaN logits are an
    /// engine error in plain and batch (greedy stopped silently with no token), and the oracle
    /// refuses to score them, naming the position (they were left out of its top-k).
    #[test]
    fn nan_logits_are_errors_of_engine_and_oracle() {
        let dir = std::env::temp_dir().join(format!("suites-nan-engine-{}", std::process::id()));
        let Some(path) = crate::test_nan_copy("dense-target.Q4_K_M.gguf", &dir, "nanw") else {
            return;
        };
        match ReferenceEngine::<f32>::load(&path) {
            Err(EngineError::Load { message, .. }) => {
                assert!(message.contains("'output_norm.weight'"), "{message}");
                assert!(message.ends_with(NONFINITE_HINT), "{message}");
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a NaN weight loaded by default"),
        }
        let allow = LoadOptions::default().with_allow_nonfinite(true);
        let e = ReferenceEngine::<f32>::load_with(&path, allow).unwrap();
        let req = Request {
            id: "p".into(),
            prompt: vec![2, 818],
            max_tokens: 2,
            stop: vec![],
        };
        // every logit NaN (output_norm scales every one): all 16384 ids of the fixture's
        // vocabulary; a failure of the request, reported by request_errors with no steps
        let want = vec![(
            "p".to_string(),
            "non-finite logits at output index 0 (16384 NaN/Inf)".to_string(),
        )];
        // spec:K with the paired drafter: the same (its first row's empty top-k was "empty
        // top-k", and a NaN verify row emitted token u32::MAX)
        let Some(draft) = crate::test_fixture_model("dense-assistant.F32.gguf") else {
            return;
        };
        let mut e = e.with_draft(Some(draft));
        for mode in [
            Mode::Plain,
            Mode::Batch { n: 4 },
            Mode::Spec { k: 1 },
            Mode::Spec { k: 3 },
        ] {
            let t = e.generate(std::slice::from_ref(&req), &mode).unwrap();
            assert_eq!(t.len(), 1, "{mode}");
            assert_eq!(t[0].id, "p");
            assert!(t[0].steps.is_empty(), "{mode}: {:?}", t[0].tokens());
            assert_eq!(e.request_errors(), want, "{mode}");
            // taken: the next call starts without them
            assert!(e.request_errors().is_empty());
        }
        let mut o = ReferenceOracle::load_with(&path, allow).unwrap();
        let err = o.score(&[vec![2, 818]], 4).unwrap_err().to_string();
        assert!(
            err.contains("non-finite at position 0 of a 2-token sequence"),
            "{err}"
        );
        assert!(err.contains("nanw.gguf"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Only the request that meets a NaN row fails: on a copy of the e2b fixture whose
    /// per-layer embedding row of token `X` is NaN (row and offset from the GGUF tensor table,
    /// [`crate::test_nan_row_copy`]; per_layer_token_embd is not the output head, so only a
    /// sequence holding `X` is touched), request `a` (prompt with `X`) gets the error verdict
    /// `non-finite logits at output index 0 (N NaN/Inf)` in plain, batch:4 and spec:2, and
    /// request `b` (without `X`) the trajectory the unmodified fixture gives it in that mode
    /// (tokens, top-k and spec counters), judged normally by the runner. The expected values
    /// come from the unmodified fixture and from the reference loader's greedy on the copy
    /// (`Model::greedy` names the first NaN row and counts its non-finite logits).
    #[test]
    fn a_nan_row_fails_only_its_request() {
        const X: u32 = 1000;
        let dir = std::env::temp_dir().join(format!("suites-nan-row-{}", std::process::id()));
        let Some(path) = crate::test_nan_row_copy(
            "e2b-target.Q4_0.gguf",
            "per_layer_token_embd.weight",
            X as usize,
            &dir,
            "nanrow",
        ) else {
            return;
        };
        let Some(orig) = crate::test_fixture_model("e2b-target.Q4_0.gguf") else {
            return;
        };
        let Some(draft) = crate::test_fixture_model("e2b-assistant.Q8_0.gguf") else {
            return;
        };
        let req = |id: &str, prompt: Vec<u32>| Request {
            id: id.into(),
            prompt,
            max_tokens: 6,
            stop: vec![1, 50, 106],
        };
        let reqs = [req("a", vec![2, 818, X, 563]), req("b", vec![2, 818, 563])];
        let allow = LoadOptions::default().with_allow_nonfinite(true);
        // the reference loader on the copy: `a` meets a NaN row at its first output, `b` none,
        // and `b`'s output never holds X (else it would meet the NaN row too)
        let m = Model::<f32>::load_with(&path, allow).unwrap();
        let ga = m.greedy(&reqs[0].prompt, 6, &reqs[0].stop).unwrap();
        let (at, bad) = ga.nonfinite.expect("a NaN row for the prompt with X");
        assert_eq!(at, 0);
        assert!(bad > 0);
        let gb = m.greedy(&reqs[1].prompt, 6, &reqs[1].stop).unwrap();
        assert_eq!(gb.nonfinite, None);
        assert!(!gb.tokens.contains(&X), "{:?}", gb.tokens);
        let message = format!("non-finite logits at output index 0 ({bad} NaN/Inf)");

        let mut clean = ReferenceEngine::<f32>::load(&orig)
            .unwrap()
            .with_draft(Some(draft.clone()));
        let mut e = ReferenceEngine::<f32>::load_with(&path, allow)
            .unwrap()
            .with_draft(Some(draft));
        let modes = [Mode::Plain, Mode::Batch { n: 4 }, Mode::Spec { k: 2 }];
        for mode in &modes {
            let want_b = clean.generate(&reqs, mode).unwrap().remove(1);
            assert!(clean.request_errors().is_empty());
            let t = e.generate(&reqs, mode).unwrap();
            assert_eq!(
                e.request_errors(),
                vec![("a".to_string(), message.clone())],
                "{mode}"
            );
            assert_eq!(t.len(), 2);
            assert_eq!(t[0].id, "a");
            assert!(t[0].steps.is_empty(), "{mode}: {:?}", t[0].tokens());
            assert_eq!(t[1].id, "b");
            assert_eq!(t[1].steps, want_b.steps, "{mode}");
            assert_eq!(t[1].spec, want_b.spec, "{mode}");
            if *mode == Mode::Plain {
                assert_eq!(t[1].tokens(), gb.tokens);
            }
        }

        // the runner: `a` is the error verdict with the message, `b` judged (by the oracle on
        // the copy, whose rows for `b` are finite) as the unmodified engine's output
        let suite = crate::suite::Suite::parse(
            "[suite]\nname = \"t\"\nstop_ids = [1, 50, 106]\nmodes = [\"plain\"]\n\
             [[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 6\n\
             [[prompt]]\nid = \"b\"\ntext = \"y\"\nmax_tokens = 6\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let mut oracle = ReferenceOracle::load_with(&path, allow).unwrap();
        let codec = GemmaCodec::load(&path).unwrap();
        let mut cache = crate::oracle::ScoreCache::new(None);
        let cfg = crate::runner::RunConfig {
            modes: modes.to_vec(),
            tau: 2f64.powi(-10),
            tau_source: "test".into(),
            model: crate::report::ModelRef {
                path: path.display().to_string(),
                path_bytes: None,
                stem: "nanrow".into(),
                sha256: oracle.model_sha256().to_string(),
            },
            draft: None,
            goldens_dir: None,
            progress: false,
        };
        let run = crate::runner::run_requests(
            &mut e,
            &mut oracle,
            &codec,
            &mut cache,
            &suite,
            &reqs,
            None,
            &cfg,
            &crate::runner::RunExtras::default(),
        )
        .unwrap();
        assert_eq!(run.entries.len(), 2 * modes.len());
        for entry in &run.entries {
            match entry.prompt.as_str() {
                "a" => {
                    assert_eq!(entry.verdict, crate::rule::Verdict::Error, "{}", entry.mode);
                    assert_eq!(entry.error.as_deref(), Some(message.as_str()));
                }
                _ => {
                    assert_ne!(
                        entry.verdict,
                        crate::rule::Verdict::Error,
                        "{:?}",
                        entry.error
                    );
                    assert!(entry.passes, "{}: {:?}", entry.mode, entry.verdict);
                    assert_eq!(entry.judged, gb.tokens.len(), "{}", entry.mode);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
