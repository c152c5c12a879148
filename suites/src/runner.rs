//! The suite runner (`design/conformance.md` §2–§4): runs an engine in each mode on a suite,
//! judges every (prompt, mode) with the tie-budget rule against the oracle (golden rows up to the
//! first difference, re-scoring of the engine's own continuation after it), compares modes and
//! builds the report entries.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use crate::engine::{
    first_duplicate, Engine, EngineError, Mode, Request, Step, StepKind, Trajectory,
};
use crate::golden::Golden;
use crate::invariance::{compare_rows, InvarianceInput, RowInvariance};
use crate::oracle::{Codec, Oracle, ScoreCache};
use crate::report::{Candidate, Entry, Event, ForkReport, ModelRef, Run, TokenRef};
use crate::rule::{compare_modes, judge, Judgement, OracleRow, PositionVerdict, RuleParams};
use crate::suite::Suite;

/// What a run needs besides the engine, oracle and suite.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Modes to run (those the engine does not declare are skipped and listed).
    pub modes: Vec<Mode>,
    /// τ in logits.
    pub tau: f64,
    /// Where τ came from.
    pub tau_source: String,
    /// Target model.
    pub model: ModelRef,
    /// Draft model.
    pub draft: Option<ModelRef>,
    /// Golden folder (for the report).
    pub goldens_dir: Option<String>,
    /// Show an indicatif progress bar (hidden anyway when stderr is not a terminal).
    pub progress: bool,
}

/// Optional checks of a run beyond §3 (kept apart from [`RunConfig`] so that existing callers
/// keep building).
#[derive(Debug, Clone, Default)]
pub struct RunExtras {
    /// Row invariance (`--strict-invariance`, §7): compare every non-plain mode's rows with
    /// the engine's plain decode rows on the same prefixes.
    pub strict_invariance: bool,
}

/// A run that could not be judged (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A prompt could not be encoded.
    #[error("prompt {id:?}: cannot encode: {message}")]
    Encode {
        /// Prompt id.
        id: String,
        /// Cause.
        message: String,
    },
    /// A golden was made from other prompt tokens than the suite's prompt gives now (the suite
    /// text or chat template changed, or the sidecar was edited): judging against it would
    /// blame the engine for the golden's staleness.
    #[error(
        "{}: prompt {id:?}: its golden was made from a different prompt ({golden} tokens, the \
         suite gives {suite}; first difference at token {at}): re-bless it (`cargo xtask bless \
         --prompts {id}`) or restore the suite text",
        file.display()
    )]
    StaleGolden {
        /// Suite file.
        file: PathBuf,
        /// Prompt id.
        id: String,
        /// Prompt tokens in the golden.
        golden: usize,
        /// Prompt tokens from the suite.
        suite: usize,
        /// First differing token index.
        at: usize,
    },
    /// A golden is not what the oracle's greedy run writes (corrupt or hand-edited sidecar).
    #[error(
        "{}: prompt {id:?}: its golden is inconsistent: {message}; re-bless it (`cargo xtask \
         bless --prompts {id}`)",
        suite.display()
    )]
    BadGolden {
        /// Suite file.
        suite: PathBuf,
        /// Prompt id.
        id: String,
        /// What is wrong, with the output index.
        message: String,
    },
    /// A prompt's tokens plus its `max_tokens` exceed the model's context length: the run
    /// would judge positions the model was not made for (refused before anything runs). The
    /// hint says how far to lower `max_tokens`, or, when the prompt alone fills the context,
    /// only to shorten the prompt.
    #[error(
        "{}: prompt {id:?}: {prompt_tokens} prompt tokens + max_tokens {max_tokens} = {} exceed \
         the context length {context} of {}: {}",
        suite.display(),
        .prompt_tokens + .max_tokens,
        model_name(.model),
        overflow_hint(*.prompt_tokens, *.context)
    )]
    ContextOverflow {
        /// Suite file.
        suite: PathBuf,
        /// Prompt id.
        id: String,
        /// Prompt tokens (chat template and BOS applied).
        prompt_tokens: usize,
        /// The prompt's `max_tokens`.
        max_tokens: usize,
        /// The model's context length.
        context: usize,
        /// The model's file name, when known ([`RunError::for_model`]).
        model: Option<String>,
    },
    /// A `[suite] stop_ids` entry is not an id of the model's vocabulary (no output could ever
    /// stop on it).
    #[error(
        "{}: [suite] stop_ids: {stop} is outside the vocabulary of {} ({vocab} ids, 0..={})",
        suite.display(),
        model_name(.model),
        .vocab.saturating_sub(1)
    )]
    StopIdOutOfVocab {
        /// Suite file.
        suite: PathBuf,
        /// The stop id.
        stop: u32,
        /// The model's vocabulary size.
        vocab: usize,
        /// The model's file name, when known ([`RunError::for_model`]).
        model: Option<String>,
    },
    /// `[suite] top_k` is larger than the model's vocabulary: no engine or oracle row has that
    /// many candidates.
    #[error(
        "{}: [suite] top_k = {top_k} exceeds the vocabulary of {} ({vocab} ids)",
        suite.display(),
        model_name(.model)
    )]
    TopKBeyondVocab {
        /// Suite file.
        suite: PathBuf,
        /// The suite's `top_k`.
        top_k: usize,
        /// The model's vocabulary size.
        vocab: usize,
        /// The model's file name, when known ([`RunError::for_model`]).
        model: Option<String>,
    },
    /// The modes to run list one twice (`--modes plain,plain`): it would run, and be reported,
    /// twice.
    #[error("mode {mode} is listed twice in the modes to run (each mode runs once)")]
    DuplicateMode {
        /// The repeated mode.
        mode: Mode,
    },
    /// The oracle failed.
    #[error("oracle failed on prompt {id:?}: {source}")]
    Oracle {
        /// Prompt id.
        id: String,
        /// Cause.
        source: EngineError,
    },
}

impl RunError {
    /// The same error naming the model file `name` where it is about the suite against the
    /// model ([`RunError::ContextOverflow`], [`RunError::StopIdOutOfVocab`],
    /// [`RunError::TopKBeyondVocab`]): in a run over several models, which one.
    pub fn for_model(mut self, name: &str) -> RunError {
        match &mut self {
            RunError::ContextOverflow { model, .. }
            | RunError::StopIdOutOfVocab { model, .. }
            | RunError::TopKBeyondVocab { model, .. } => *model = Some(name.to_string()),
            _ => {}
        }
        self
    }
}

/// `the model`, or the model's file name.
fn model_name(model: &Option<String>) -> String {
    model.clone().unwrap_or_else(|| "the model".into())
}

/// What to change when a prompt and its `max_tokens` do not fit `context`: only the prompt
/// when it fills the context alone (max_tokens is at least 1), else max_tokens or the prompt.
fn overflow_hint(prompt_tokens: usize, context: usize) -> String {
    if prompt_tokens >= context {
        "shorten the prompt (it fills the context alone)".into()
    } else {
        format!(
            "lower max_tokens to at most {} or shorten the prompt",
            context - prompt_tokens
        )
    }
}

/// Why a mode the engine does not declare is skipped, listing what it declares (a drafter
/// declares only some `spec:K`: `spec:8` with `--draft` read as if the drafter were missing):
/// `engine reference-f32 does not declare it (it declares prefill, plain, batch:4, spec:1,
/// spec:2, spec:4)`, consecutive batch widths as one range ([`crate::engine::mode_list`]:
/// `plain, batch:1..16` for an HTTP engine); `hint` is appended inside the parentheses.
pub fn undeclared_reason(engine: &str, declared: &[Mode], hint: &str) -> String {
    format!(
        "engine {engine} does not declare it (it declares {}{hint})",
        crate::engine::mode_list(declared)
    )
}

/// The result of judging one trajectory.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The rule's result.
    pub judgement: Judgement,
    /// Oracle rows used, `[judged positions]`.
    pub rows: Vec<OracleRow>,
    /// First output index differing from the golden.
    pub golden_fork: Option<usize>,
    /// Token-identical to the golden (`None` without golden).
    pub identical: Option<bool>,
    /// Whether the continuation was re-scored.
    pub rescored: bool,
}

/// Judges one generated trajectory (§3): golden rows while the output equals the golden; at the
/// first difference the golden's top-k (a divergence if the top-k bound already exceeds τ);
/// otherwise the oracle re-scores `prompt ‖ output` (cached) for every later position.
pub fn judge_output(
    oracle: &mut dyn Oracle,
    cache: &mut ScoreCache,
    prompt: &[u32],
    steps: &[Step],
    golden: Option<&Golden>,
    params: &RuleParams,
    top_k: usize,
) -> Result<Judged, EngineError> {
    let tokens: Vec<u32> = steps.iter().map(|s| s.token).collect();
    let mut golden_fork = None;
    let mut identical = None;
    if let Some(g) = golden {
        let fork =
            (0..tokens.len().max(g.tokens.len())).find(|&i| tokens.get(i) != g.tokens.get(i));
        identical = Some(fork.is_none());
        golden_fork = fork;
        let grows = g.rows();
        let upto = match fork {
            None => tokens.len(),
            Some(f) => (f + 1).min(grows.len()),
        };
        let rows = grows[..upto.min(grows.len())].to_vec();
        let j = judge(steps, &rows, params, None);
        let decided =
            fork.is_none() || (j.first_divergence.is_some() && j.first_divergence == fork);
        if decided || j.verdict == crate::rule::Verdict::Error {
            return Ok(Judged {
                judgement: j,
                rows,
                golden_fork,
                identical,
                rescored: false,
            });
        }
    }
    let mut rows = cache.score_trajectory(oracle, prompt, &tokens, top_k)?;
    if let (Some(g), Some(f)) = (golden, golden_fork) {
        // positions before the fork share the golden prefix: the stored rows are the same scores
        for (t, r) in rows.iter_mut().enumerate().take(f.min(g.top_k.len())) {
            r.top_k.clone_from(&g.top_k[t]);
        }
    }
    let j = judge(steps, &rows, params, None);
    Ok(Judged {
        judgement: j,
        rows,
        golden_fork,
        identical,
        rescored: true,
    })
}

/// Judges the `prefill` mode (§2): the engine's teacher-forced argmax at each position of
/// `prompt ‖ golden` against the golden rows; where the engine's token is outside the stored
/// top-k and the bound does not decide, the oracle scores `prompt ‖ golden_<t ‖ e_t`.
pub fn judge_prefill(
    oracle: &mut dyn Oracle,
    cache: &mut ScoreCache,
    golden: &Golden,
    steps: &[Step],
    params: &RuleParams,
    top_k: usize,
) -> Result<Judged, EngineError> {
    let mut rows = golden.rows();
    loop {
        let j = judge(steps, &rows, params, None);
        let Some(t) = j
            .needs_rescore
            .filter(|&t| t < steps.len() && t < rows.len())
        else {
            let identical = steps
                .iter()
                .map(|s| s.token)
                .eq(golden.tokens.iter().copied());
            return Ok(Judged {
                judgement: j,
                rows,
                golden_fork: None,
                identical: Some(identical),
                rescored: false,
            });
        };
        let mut prefix = golden.prompt.clone();
        prefix.extend_from_slice(&golden.tokens[..t]);
        let r = cache.score_trajectory(oracle, &prefix, &[steps[t].token], top_k)?;
        rows[t] = r.into_iter().next().unwrap_or_else(|| rows[t].clone());
        if rows[t].chosen.is_none() {
            return Err(EngineError::Other(format!(
                "oracle gave no logit for the token at {t}"
            )));
        }
    }
}

fn token_ref(codec: &dyn Codec, id: u32) -> TokenRef {
    TokenRef {
        id,
        text: codec.decode(&[id]),
    }
}

fn candidates(codec: &dyn Codec, tk: &[(u32, f64)]) -> Vec<Candidate> {
    tk.iter()
        .take(5)
        .map(|&(id, logit)| Candidate {
            id,
            logit,
            text: codec.decode(&[id]),
        })
        .collect()
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Builds a report entry from a judged trajectory.
#[allow(clippy::too_many_arguments)]
pub fn make_entry(
    codec: &dyn Codec,
    prompt_id: &str,
    mode: &Mode,
    prompt: &[u32],
    traj: &Trajectory,
    judged: &Judged,
    tau: f64,
) -> Entry {
    let tokens = traj.tokens();
    let j = &judged.judgement;
    let event = |t: usize| -> Event {
        let p = &j.positions[t];
        let row = &judged.rows[t];
        let lo = t.saturating_sub(12);
        Event {
            kind: p.verdict,
            index: t,
            position: prompt.len() + t,
            token: token_ref(codec, p.token),
            oracle_top: token_ref(codec, p.oracle_top),
            margin: finite(p.margin),
            margin_is_bound: p.margin_is_bound,
            tau,
            oracle_top5: candidates(codec, &row.top_k),
            engine_top5: traj.steps[t].top_k.as_ref().map(|tk| candidates(codec, tk)),
            context_before: codec.decode(&tokens[lo..t]),
            context_after: codec
                .decode(&tokens[(t + 1).min(tokens.len())..(t + 7).min(tokens.len())]),
        }
    };
    let events: Vec<Event> = j
        .positions
        .iter()
        .filter(|p| p.verdict != PositionVerdict::Agree)
        .take(50)
        .map(|p| event(p.index))
        .collect();
    Entry {
        prompt: prompt_id.to_string(),
        mode: mode.to_string(),
        verdict: j.verdict,
        passes: j.verdict.passes(),
        prompt_tokens: prompt.len(),
        prompt_sha256: Some(crate::report::prompt_sha256(prompt)),
        text: codec.decode(&tokens),
        tokens: tokens.clone(),
        identical_to_golden: judged.identical,
        golden_fork: judged.golden_fork,
        rescored: judged.rescored,
        judged: j.positions.len(),
        tie_flips: j.tie_flips,
        oracle_tie_flips: j.oracle_tie_flips,
        first_divergence: j.first_divergence.map(event),
        events,
        margins: j.positions.iter().map(|p| finite(p.oracle_top2)).collect(),
        wall_s: traj.wall.as_secs_f64(),
        spec: traj.spec.clone(),
        error: j.error.clone(),
        row_invariance: None,
    }
}

/// Checks a trajectory's shape: length within `max_tokens`, and shorter only when it ends on a
/// stop id. Returns the error message for the `error` verdict.
fn shape_error(req: &Request, traj: &Trajectory) -> Option<String> {
    let n = traj.steps.len();
    if traj.id != req.id {
        return Some(format!(
            "trajectory id {:?} for request {:?}",
            traj.id, req.id
        ));
    }
    if n > req.max_tokens {
        return Some(format!("{n} tokens emitted, max_tokens {}", req.max_tokens));
    }
    let stopped = traj
        .steps
        .last()
        .is_some_and(|s| req.stop.contains(&s.token));
    if n < req.max_tokens && !stopped {
        return Some(format!(
            "output ended after {n} of {} tokens without a stop id",
            req.max_tokens
        ));
    }
    if let Some(i) = traj.steps[..n.saturating_sub(1)]
        .iter()
        .position(|s| req.stop.contains(&s.token))
    {
        return Some(format!("output continues after stop id at index {i}"));
    }
    None
}

/// The engine result's first NaN/+Inf logit (conformance §9: the `error` verdict), naming the
/// output index and id; `None` when every reported logit is finite or −Inf (a masked id).
fn nonfinite_error(traj: &Trajectory) -> Option<String> {
    traj.steps.iter().enumerate().find_map(|(i, s)| {
        let (id, l) = s
            .top_k
            .as_deref()?
            .iter()
            .find(|(_, l)| l.is_nan() || *l == f64::INFINITY)?;
        Some(format!(
            "non-finite logit {l} for id {id} at output index {i}"
        ))
    })
}

/// What a suite is checked against before it runs: the model's vocabulary size and context
/// length. The rule for a Gemma-4 model is [`ModelLimits::from_config`]; the reference oracle
/// answers [`Oracle::vocab_size`] and [`Oracle::context_length`] with it, so
/// [`ModelLimits::of`] gives the same limits for it as its configuration does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Vocabulary size V: every stop id must be below it.
    pub vocab_size: usize,
    /// Context length (`None`: unknown, not checked): prompt tokens + `max_tokens` must fit.
    pub context_length: Option<usize>,
}

impl ModelLimits {
    /// The limits of a model with this configuration: vocabulary size `n_vocab`, context length
    /// `n_ctx_train` (`None` when the GGUF gives none, i.e. 0). The one place this rule lives.
    pub fn from_config(config: &reference::config::Config) -> ModelLimits {
        ModelLimits {
            vocab_size: config.n_vocab,
            context_length: (config.n_ctx_train > 0).then_some(config.n_ctx_train),
        }
    }

    /// Any oracle's limits, as it reports them ([`Oracle::vocab_size`],
    /// [`Oracle::context_length`]); for the reference oracle those of
    /// [`ModelLimits::from_config`].
    pub fn of(oracle: &dyn Oracle) -> ModelLimits {
        ModelLimits {
            vocab_size: oracle.vocab_size(),
            context_length: oracle.context_length(),
        }
    }
}

/// The suite's requests for one model (prompts encoded with `codec`), checked against it
/// before anything runs.
///
/// Errors: [`RunError::StopIdOutOfVocab`] (naming the suite file and the id),
/// [`RunError::TopKBeyondVocab`], [`RunError::Encode`], [`RunError::ContextOverflow`] (naming the
/// suite file, the prompt, its token count + `max_tokens` and the context length); callers that
/// know the model file name it with [`RunError::for_model`].
pub fn suite_requests(
    suite: &Suite,
    codec: &dyn Codec,
    limits: ModelLimits,
) -> Result<Vec<Request>, RunError> {
    let st = &suite.settings;
    if let Some(&stop) = st
        .stop_ids
        .iter()
        .find(|&&id| id as usize >= limits.vocab_size)
    {
        return Err(RunError::StopIdOutOfVocab {
            suite: suite.path.clone(),
            stop,
            vocab: limits.vocab_size,
            model: None,
        });
    }
    if st.top_k > limits.vocab_size {
        return Err(RunError::TopKBeyondVocab {
            suite: suite.path.clone(),
            top_k: st.top_k,
            vocab: limits.vocab_size,
            model: None,
        });
    }
    let mut reqs = Vec::new();
    for p in &suite.prompts {
        let ids = codec
            .encode(&p.input, st.enable_thinking)
            .map_err(|message| RunError::Encode {
                id: p.id.clone(),
                message,
            })?;
        if let Some(context) = limits
            .context_length
            .filter(|&c| ids.len() + p.max_tokens > c)
        {
            return Err(RunError::ContextOverflow {
                suite: suite.path.clone(),
                id: p.id.clone(),
                prompt_tokens: ids.len(),
                max_tokens: p.max_tokens,
                context,
                model: None,
            });
        }
        reqs.push(Request {
            id: p.id.clone(),
            prompt: ids,
            max_tokens: p.max_tokens,
            stop: st.stop_ids.clone(),
        });
    }
    Ok(reqs)
}

/// Runs `engine` on `suite` in every configured mode and judges it against `oracle`.
///
/// `goldens` maps prompt id → golden (needed for `prefill`, and for the `exact`/golden-fork
/// columns). Errors: [`RunError`] when the run cannot be judged (exit 2), checked before the
/// engine runs where they can be ([`suite_requests`], the goldens, a mode listed twice);
/// engine failures are `error` verdicts, not errors. A golden is refused
/// ([`RunError::BadGolden`]) when it is not the oracle's greedy output ([`Golden::problem`]) or,
/// cut to its request's `max_tokens`, not an output of that request
/// ([`Golden::length_problem`]: empty, or ending early without a stop id — `prefill` would be
/// judged on fewer positions than asked, none for an empty golden); one longer than the
/// request's budget is judged on its prefix.
pub fn run_suite(
    engine: &mut dyn Engine,
    oracle: &mut dyn Oracle,
    codec: &dyn Codec,
    cache: &mut ScoreCache,
    suite: &Suite,
    goldens: Option<&BTreeMap<String, Golden>>,
    cfg: &RunConfig,
) -> Result<Run, RunError> {
    run_suite_with(
        engine,
        oracle,
        codec,
        cache,
        suite,
        goldens,
        cfg,
        &RunExtras::default(),
    )
}

/// [`run_suite`] with the optional checks of [`RunExtras`]: with `strict_invariance`, every
/// non-`error` entry of a mode other than `plain` gets its [`RowInvariance`], and an entry whose
/// invariance failed (a flip with oracle margin > τ) does not pass.
#[allow(clippy::too_many_arguments)]
pub fn run_suite_with(
    engine: &mut dyn Engine,
    oracle: &mut dyn Oracle,
    codec: &dyn Codec,
    cache: &mut ScoreCache,
    suite: &Suite,
    goldens: Option<&BTreeMap<String, Golden>>,
    cfg: &RunConfig,
    extras: &RunExtras,
) -> Result<Run, RunError> {
    if let Some(mode) = first_duplicate(&cfg.modes) {
        return Err(RunError::DuplicateMode { mode });
    }
    let reqs = suite_requests(suite, codec, ModelLimits::of(oracle))?;
    run_requests(
        engine, oracle, codec, cache, suite, &reqs, goldens, cfg, extras,
    )
}

/// [`run_suite_with`] on requests already built and checked: `reqs` are
/// [`suite_requests`]`(suite, codec, limits)` for the limits of `oracle`'s model. `cargo xtask
/// conformance` builds them once per (suite, model) in its up-front check and hands them
/// through, so no prompt is encoded again here; `codec` only decodes (report texts). Errors as
/// [`run_suite_with`], but the suite is not checked against the model again.
#[allow(clippy::too_many_arguments)]
pub fn run_requests(
    engine: &mut dyn Engine,
    oracle: &mut dyn Oracle,
    codec: &dyn Codec,
    cache: &mut ScoreCache,
    suite: &Suite,
    reqs: &[Request],
    goldens: Option<&BTreeMap<String, Golden>>,
    cfg: &RunConfig,
    extras: &RunExtras,
) -> Result<Run, RunError> {
    let st = &suite.settings;
    if let Some(mode) = first_duplicate(&cfg.modes) {
        return Err(RunError::DuplicateMode { mode });
    }
    if let Some(g) = goldens {
        for r in reqs {
            if let Some(gold) = g.get(&r.id) {
                // the golden as an output of this request, cut to its budget (a request may
                // ask for fewer tokens than the golden holds, and is judged on that prefix): an
                // empty golden, or one that ends early without a stop id, judges nothing
                let upto = gold.tokens.len().min(r.max_tokens);
                let problem = gold.problem(oracle.vocab_size()).or_else(|| {
                    Golden::length_problem(&gold.tokens[..upto], r.max_tokens, &r.stop)
                });
                if let Some(message) = problem {
                    return Err(RunError::BadGolden {
                        suite: suite.path.clone(),
                        id: r.id.clone(),
                        message,
                    });
                }
                if gold.prompt != r.prompt {
                    let at = gold
                        .prompt
                        .iter()
                        .zip(&r.prompt)
                        .take_while(|(a, b)| a == b)
                        .count();
                    return Err(RunError::StaleGolden {
                        file: suite.path.clone(),
                        id: r.id.clone(),
                        golden: gold.prompt.len(),
                        suite: r.prompt.len(),
                        at,
                    });
                }
            }
        }
    }
    let params = RuleParams {
        tau: cfg.tau,
        max_tie_flips: st.max_tie_flips,
        suppressed: oracle.suppressed_ids(),
        oracle_tie_rel: st.oracle_tie_rel,
        vocab_size: oracle.vocab_size(),
    };
    let declared = engine.modes();
    let mut skipped = Vec::new();
    let mut modes = Vec::new();
    for m in &cfg.modes {
        if !declared.contains(m) {
            // spec:K needs a drafter: the likely cause when the engine declares no spec mode
            let hint = if matches!(m, Mode::Spec { .. })
                && !declared.iter().any(|d| matches!(d, Mode::Spec { .. }))
            {
                "; spec:K needs a drafter: --draft with --model; an HTTP engine takes ,spec=K in --engine"
            } else {
                ""
            };
            skipped.push((
                m.to_string(),
                undeclared_reason(engine.name(), &declared, hint),
            ));
        } else if *m == Mode::Prefill && goldens.is_none() {
            skipped.push((
                m.to_string(),
                "needs goldens (run `cargo xtask bless`)".into(),
            ));
        } else {
            modes.push(*m);
        }
    }
    let bar = if cfg.progress {
        let b = ProgressBar::new((modes.len() * reqs.len()) as u64);
        if let Ok(style) =
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})")
        {
            b.set_style(style.progress_chars("=> "));
        }
        b.set_prefix(format!("{} {}", suite.settings.name, engine.name()));
        b
    } else {
        ProgressBar::hidden()
    };
    let (mut engine_s, mut oracle_s, mut invariance_s) = (0.0, 0.0, 0.0);
    let mut entries = Vec::new();
    let mut judged_by_prompt: BTreeMap<String, Vec<(Mode, Trajectory, Judged)>> = BTreeMap::new();
    for mode in &modes {
        bar.set_message(mode.to_string());
        let t0 = Instant::now();
        let result: Result<Vec<Trajectory>, EngineError> = if *mode == Mode::Prefill {
            prefill_trajectories(engine, reqs, goldens, st.top_k)
        } else {
            engine.generate(reqs, mode)
        };
        engine_s += t0.elapsed().as_secs_f64();
        let req_errors: BTreeMap<String, String> = engine.request_errors().into_iter().collect();
        let trajs: Vec<Result<Trajectory, String>> = match result {
            Ok(t) if t.len() == reqs.len() => t.into_iter().map(Ok).collect(),
            Ok(t) => vec![
                Err(format!(
                    "engine returned {} trajectories for {} requests",
                    t.len(),
                    reqs.len()
                ));
                reqs.len()
            ],
            Err(e) => vec![Err(e.to_string()); reqs.len()],
        };
        for (req, traj) in reqs.iter().zip(trajs) {
            let golden = goldens.and_then(|g| g.get(&req.id));
            let t1 = Instant::now();
            let (traj, engine_err) = match traj {
                Ok(t) => {
                    let err = req_errors.get(&req.id).cloned();
                    (t, err)
                }
                Err(msg) => (
                    Trajectory {
                        id: req.id.clone(),
                        steps: Vec::new(),
                        spec: None,
                        wall: std::time::Duration::ZERO,
                    },
                    Some(msg),
                ),
            };
            let shape = if *mode == Mode::Prefill {
                None
            } else {
                shape_error(req, &traj)
            }
            .or_else(|| nonfinite_error(&traj));
            let judged = match (engine_err.or(shape), golden) {
                (Some(err), _) => error_judged(err),
                (None, Some(g)) if *mode == Mode::Prefill => {
                    judge_prefill(oracle, cache, g, &traj.steps, &params, st.top_k).map_err(
                        |source| RunError::Oracle {
                            id: req.id.clone(),
                            source,
                        },
                    )?
                }
                (None, None) if *mode == Mode::Prefill => {
                    error_judged("no golden for prefill".into())
                }
                (None, g) => judge_output(
                    oracle,
                    cache,
                    &req.prompt,
                    &traj.steps,
                    g,
                    &params,
                    st.top_k,
                )
                .map_err(|source| RunError::Oracle {
                    id: req.id.clone(),
                    source,
                })?,
            };
            oracle_s += t1.elapsed().as_secs_f64();
            let mut entry = make_entry(codec, &req.id, mode, &req.prompt, &traj, &judged, cfg.tau);
            if extras.strict_invariance
                && *mode != Mode::Plain
                && entry.verdict != crate::rule::Verdict::Error
            {
                let t2 = Instant::now();
                let prefix = match (*mode, golden) {
                    (Mode::Prefill, Some(g)) => g.tokens.clone(),
                    _ => traj.tokens(),
                };
                let inv = row_invariance(
                    engine,
                    oracle,
                    codec,
                    cache,
                    &InvarianceInput {
                        prompt: &req.prompt,
                        prefix_tokens: &prefix,
                        steps: &traj.steps,
                        oracle_rows: &judged.rows,
                        tau: cfg.tau,
                    },
                    st.top_k,
                )
                .map_err(|source| RunError::Oracle {
                    id: req.id.clone(),
                    source,
                })?;
                entry.passes &= !inv.failed;
                entry.row_invariance = Some(inv);
                invariance_s += t2.elapsed().as_secs_f64();
            }
            entries.push(entry);
            judged_by_prompt
                .entry(req.id.clone())
                .or_default()
                .push((*mode, traj, judged));
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let forks = cross_mode_forks(codec, reqs, &judged_by_prompt, cfg.tau);
    // entries in (prompt, mode) order
    let order: BTreeMap<&str, usize> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    entries.sort_by_key(|e| {
        (
            order.get(e.prompt.as_str()).copied().unwrap_or(0),
            modes.iter().position(|m| m.to_string() == e.mode),
        )
    });
    Ok(Run {
        model: cfg.model.clone(),
        draft: cfg.draft.clone(),
        suite: suite.settings.name.clone(),
        engine: engine.name().to_string(),
        tau: cfg.tau,
        tau_source: cfg.tau_source.clone(),
        max_tie_flips: st.max_tie_flips,
        goldens: cfg.goldens_dir.clone(),
        modes: modes.iter().map(|m| m.to_string()).collect(),
        skipped_modes: skipped,
        entries,
        forks,
        engine_s,
        oracle_s,
        cache: (cache.hits, cache.misses),
        strict_invariance: extras.strict_invariance,
        invariance_s,
        acceptance: Vec::new(),
    })
}

/// Row invariance of one entry: the engine's plain decode rows on the entry's prefixes, compared
/// with its rows ([`compare_rows`]). An engine without plain decode rows, or one that fails to
/// give them, is reported `unsupported` (never a failure of the entry).
fn row_invariance(
    engine: &mut dyn Engine,
    oracle: &mut dyn Oracle,
    codec: &dyn Codec,
    cache: &mut ScoreCache,
    input: &InvarianceInput<'_>,
    top_k: usize,
) -> Result<RowInvariance, EngineError> {
    match engine.decode_rows(input.prompt, input.prefix_tokens, top_k) {
        Ok(Some(rows)) if rows.len() == input.prefix_tokens.len() => {
            compare_rows(oracle, cache, codec, input, &rows, top_k)
        }
        Ok(Some(rows)) => Ok(RowInvariance::unsupported(format!(
            "engine {} gave {} plain decode rows for {} tokens",
            engine.name(),
            rows.len(),
            input.prefix_tokens.len()
        ))),
        Ok(None) => Ok(RowInvariance::unsupported(format!(
            "engine {} has no plain decode rows",
            engine.name()
        ))),
        Err(e) => Ok(RowInvariance::unsupported(format!(
            "plain decode rows failed: {e}"
        ))),
    }
}

fn error_judged(err: String) -> Judged {
    Judged {
        judgement: judge(
            &[],
            &[],
            &RuleParams {
                tau: 0.0,
                max_tie_flips: 0,
                suppressed: vec![],
                oracle_tie_rel: 0.0,
                vocab_size: 0,
            },
            Some(&err),
        ),
        rows: Vec::new(),
        golden_fork: None,
        identical: None,
        rescored: false,
    }
}

/// Prefill mode: the engine scores `prompt ‖ golden`; its argmax per position becomes a step.
fn prefill_trajectories(
    engine: &mut dyn Engine,
    reqs: &[Request],
    goldens: Option<&BTreeMap<String, Golden>>,
    top_k: usize,
) -> Result<Vec<Trajectory>, EngineError> {
    let goldens = goldens.ok_or_else(|| EngineError::Other("prefill needs goldens".into()))?;
    let mut seqs = Vec::new();
    for r in reqs {
        let g = goldens.get(&r.id).ok_or_else(|| EngineError::Request {
            id: r.id.clone(),
            message: "no golden".into(),
        })?;
        let mut s = r.prompt.clone();
        s.extend_from_slice(&g.tokens);
        seqs.push(s);
    }
    let t0 = Instant::now();
    let scores = engine.score(&seqs, top_k)?;
    let wall = t0.elapsed() / reqs.len().max(1) as u32;
    let mut out = Vec::new();
    for ((r, sc), s) in reqs.iter().zip(scores).zip(&seqs) {
        let p = r.prompt.len();
        let n = s.len() - p;
        if sc.rows.len() < p + n - 1 {
            return Err(EngineError::Request {
                id: r.id.clone(),
                message: format!("engine scored {} rows of {}", sc.rows.len(), s.len()),
            });
        }
        let steps = (0..n)
            .map(|t| {
                let row = &sc.rows[p - 1 + t];
                Step {
                    token: row.first().map_or(u32::MAX, |x| x.0),
                    top_k: Some(row.clone()),
                    kind: StepKind::Prefill,
                }
            })
            .collect();
        out.push(Trajectory {
            id: r.id.clone(),
            steps,
            spec: None,
            wall,
        });
    }
    Ok(out)
}

/// §4: for each prompt, `plain` against every other generated mode (or, without `plain`, the
/// first generated mode against the rest).
fn cross_mode_forks(
    codec: &dyn Codec,
    reqs: &[Request],
    by_prompt: &BTreeMap<String, Vec<(Mode, Trajectory, Judged)>>,
    tau: f64,
) -> Vec<ForkReport> {
    let mut out = Vec::new();
    for r in reqs {
        let Some(list) = by_prompt.get(&r.id) else {
            continue;
        };
        let gen: Vec<_> = list
            .iter()
            .filter(|(m, _, _)| *m != Mode::Prefill)
            .collect();
        let base = gen
            .iter()
            .position(|(m, _, _)| *m == Mode::Plain)
            .unwrap_or(0);
        let Some((bm, bt, bj)) = gen.get(base) else {
            continue;
        };
        for (i, (m, t, j)) in gen.iter().enumerate() {
            if i == base || t.steps.is_empty() || bt.steps.is_empty() {
                continue;
            }
            let (ma, mb) = (bm.to_string(), m.to_string());
            if let Some(f) = compare_modes(
                (&ma, &bt.steps, &bj.judgement),
                (&mb, &t.steps, &j.judgement),
                tau,
            ) {
                let text = |x: Option<u32>| x.map_or(String::new(), |x| codec.decode(&[x]));
                out.push(ForkReport {
                    prompt: r.id.clone(),
                    position: r.prompt.len() + f.index,
                    texts: (text(f.tokens.0), text(f.tokens.1)),
                    fork: f,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine result with a NaN or +Inf logit is the `error` verdict's message (conformance
    /// §9), naming index and id; −Inf (a masked id) and finite rows pass.
    #[test]
    fn nonfinite_engine_logits_are_an_error() {
        let traj = |rows: Vec<Vec<(u32, f64)>>| Trajectory {
            id: "p".into(),
            steps: rows
                .into_iter()
                .map(|r| Step {
                    token: r[0].0,
                    top_k: Some(r),
                    kind: StepKind::Decode,
                })
                .collect(),
            spec: None,
            wall: std::time::Duration::ZERO,
        };
        assert_eq!(
            nonfinite_error(&traj(vec![vec![(5, 1.0)], vec![(7, 2.0), (8, f64::NAN)]])),
            Some("non-finite logit NaN for id 8 at output index 1".into())
        );
        assert!(nonfinite_error(&traj(vec![vec![(5, f64::INFINITY)]]))
            .is_some_and(|m| m.contains("inf for id 5 at output index 0")));
        assert_eq!(
            nonfinite_error(&traj(vec![vec![(5, 1.0), (6, f64::NEG_INFINITY)]])),
            None
        );
    }

    /// One rule for a model's limits: the reference oracle reports those of its configuration
    /// (the dense fixture: 16384 ids, context 4096); a configuration without a context length
    /// (GGUF `context_length` 0) gives none, which is not checked.
    #[test]
    fn limits_come_from_the_configuration() {
        let Some(path) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let oracle = crate::reference_engine::ReferenceOracle::load(&path).unwrap();
        let mut config = oracle.model().config().clone();
        let want = ModelLimits {
            vocab_size: 16384,
            context_length: Some(4096),
        };
        assert_eq!(ModelLimits::from_config(&config), want);
        assert_eq!(ModelLimits::of(&oracle), want);
        config.n_ctx_train = 0;
        assert_eq!(
            ModelLimits::from_config(&config),
            ModelLimits {
                vocab_size: 16384,
                context_length: None
            }
        );
    }

    /// The suite-against-model errors name the model file once it is known (a run over several
    /// models says which one); other errors are left as they are.
    #[test]
    fn suite_against_model_errors_name_the_model() {
        let e = RunError::StopIdOutOfVocab {
            suite: "s.toml".into(),
            stop: 16383,
            vocab: 1024,
            model: None,
        }
        .for_model("syn-dense-target.UD-Q2_K_XL.gguf");
        assert_eq!(
            e.to_string(),
            "s.toml: [suite] stop_ids: 16383 is outside the vocabulary of \
             syn-dense-target.UD-Q2_K_XL.gguf (1024 ids, 0..=1023)"
        );
        let e = RunError::ContextOverflow {
            suite: "s.toml".into(),
            id: "p".into(),
            prompt_tokens: 2,
            max_tokens: 4095,
            context: 4096,
            model: None,
        }
        .for_model("m.gguf");
        assert_eq!(
            e.to_string(),
            "s.toml: prompt \"p\": 2 prompt tokens + max_tokens 4095 = 4097 exceed the context \
             length 4096 of m.gguf: lower max_tokens to at most 4094 or shorten the prompt"
        );
        let e = RunError::DuplicateMode { mode: Mode::Plain }.for_model("m.gguf");
        assert!(!e.to_string().contains("m.gguf"), "{e}");
    }
}
