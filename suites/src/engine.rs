//! The engine interface of `design/conformance.md` §9: [`Engine`], [`Mode`], [`Request`],
//! [`Step`], [`StepKind`], [`Trajectory`], [`SpecStats`], [`Scores`], [`EngineError`].
//!
//! Every engine (the f64 oracle, the f32 CPU engine, the CUDA runtime, a wrapped external
//! engine) implements [`Engine`]; the suite runner and the tie-budget rule (§3) see nothing else.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An inference engine under test (conformance §9).
///
/// Logits are reported as `f64` whatever the engine computes in (raw logits after final
/// soft-capping). An engine that exposes no logits returns `top_k: None` in its steps.
pub trait Engine {
    /// Engine name as it appears in reports and `budgets.toml`: `"reference-f64"`,
    /// `"reference-f32"`, `"cuda"`, `"llama-server"`, `"openai"` (a `budgets.toml` table must
    /// be one of [`crate::budgets::ENGINE_NAMES`]).
    fn name(&self) -> &str;
    /// The modes this engine can run (conformance §2).
    fn modes(&self) -> Vec<Mode>;
    /// Greedy generation of every request in `mode`; returns one trajectory per request, in
    /// request order. For [`Mode::Batch`] the engine runs up to `n` requests at once in one
    /// running batch (requests join and leave as they finish); for [`Mode::Prefill`] the
    /// engine is not asked to generate (the suite runner uses [`Engine::score`]).
    ///
    /// Errors: [`EngineError`] naming the request and mode.
    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError>;
    /// Teacher-forced scoring: one forward over each sequence; returns per sequence and per
    /// position `t` the engine's top-`top_k` `(id, logit)` of the next-token distribution after
    /// `seq[..=t]` (rows `[len(seq)]`, each descending by logit).
    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError>;
    /// Per-request failures of the last [`Engine::generate`] call as `(request id, message)`:
    /// the runner judges those requests `error` with the message and the others normally
    /// (an external engine whose server fails on one request). Default: none.
    fn request_errors(&mut self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Plain decode rows for a given continuation (`--strict-invariance`, conformance §7): the
    /// engine prefills `prompt` and then feeds `tokens` one per forward, as `plain` does;
    /// returns per output index `t` the top-`top_k` `(id, logit)` (descending) of the row on the
    /// prefix `prompt ‖ tokens[..t]` (rows `[tokens.len()]`). The runner compares them with the
    /// rows the engine produced in `prefill`, `batch:N` and `spec:K`.
    ///
    /// Default: `Ok(None)` — the engine cannot replay a given continuation (row invariance is
    /// then reported as unsupported, never failed). Errors: [`EngineError`].
    fn decode_rows(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Option<TopKRows>, EngineError> {
        let _ = (prompt, tokens, top_k);
        Ok(None)
    }
}

/// Top-k rows: per position, `(id, logit)` descending by logit (`[positions][k]`).
pub type TopKRows = Vec<Vec<(u32, f64)>>;

/// A decoding mode (conformance §2), written `prefill`, `plain`, `batch:N`, `spec:K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Teacher-forced: one forward over prompt + golden continuation, judged per position.
    Prefill,
    /// Greedy decoding, one sequence, one token per forward.
    Plain,
    /// Greedy decoding of `n` sequences in one running batch (`n ≥ 1`).
    Batch {
        /// Batch width N.
        n: usize,
    },
    /// Greedy MTP speculative decoding with `k` draft steps per round (`k ≥ 1`).
    Spec {
        /// Draft steps K per round.
        k: usize,
    },
}

/// Error parsing a [`Mode`] string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad mode {text:?}: expected prefill, plain, batch:N or spec:K with N, K >= 1")]
pub struct ModeParseError {
    /// The text that failed to parse.
    pub text: String,
}

impl Mode {
    /// Parses `prefill`, `plain`, `batch:N`, `spec:K` (N, K ≥ 1, written in digits only: not
    /// `batch:+4`, not `batch: 4`).
    ///
    /// Errors: [`ModeParseError`] naming the text.
    pub fn parse(text: &str) -> Result<Mode, ModeParseError> {
        let err = || ModeParseError {
            text: text.to_string(),
        };
        let t = text.trim();
        match t {
            "prefill" => return Ok(Mode::Prefill),
            "plain" => return Ok(Mode::Plain),
            _ => {}
        }
        let (kind, num) = t.split_once(':').ok_or_else(err)?;
        // digits only: `usize::from_str` takes `+4`, which `batch: 4` (refused) is not
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err());
        }
        let n: usize = num.parse().map_err(|_| err())?;
        if n == 0 {
            return Err(err());
        }
        match kind {
            "batch" => Ok(Mode::Batch { n }),
            "spec" => Ok(Mode::Spec { k: n }),
            _ => Err(err()),
        }
    }

    /// Parses a comma-separated list of modes (`"plain,spec:4"`); a mode may appear once.
    ///
    /// Errors: [`ModeListError`]: a bad mode (naming its text), a mode listed twice (naming it).
    pub fn parse_list(text: &str) -> Result<Vec<Mode>, ModeListError> {
        let modes = text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Mode::parse)
            .collect::<Result<Vec<Mode>, ModeParseError>>()?;
        match first_duplicate(&modes) {
            Some(mode) => Err(ModeListError::Duplicate { mode }),
            None => Ok(modes),
        }
    }
}

/// Error parsing a list of modes ([`Mode::parse_list`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModeListError {
    /// One entry is not a mode.
    #[error(transparent)]
    Bad(#[from] ModeParseError),
    /// A mode is listed twice (it would run, and be reported, twice).
    #[error("mode {mode} is listed twice (each mode runs once)")]
    Duplicate {
        /// The repeated mode.
        mode: Mode,
    },
}

/// The first mode that occurs a second time in `modes` (`None` when all differ).
pub fn first_duplicate(modes: &[Mode]) -> Option<Mode> {
    modes
        .iter()
        .enumerate()
        .find(|(i, m)| modes[..*i].contains(m))
        .map(|(_, m)| *m)
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Prefill => write!(f, "prefill"),
            Mode::Plain => write!(f, "plain"),
            Mode::Batch { n } => write!(f, "batch:{n}"),
            Mode::Spec { k } => write!(f, "spec:{k}"),
        }
    }
}

/// The modes of `modes` as a message lists them, in the given order, comma-separated, with
/// each run of consecutive batch widths written once (`plain, batch:1..16`: an HTTP engine
/// declares every `batch:N` up to its concurrency); `"no mode"` for an empty list.
pub fn mode_list(modes: &[Mode]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < modes.len() {
        if let Mode::Batch { n: first } = modes[i] {
            let mut last = first;
            let mut j = i + 1;
            while let Some(Mode::Batch { n }) = modes.get(j) {
                if *n != last + 1 {
                    break;
                }
                last = *n;
                j += 1;
            }
            parts.push(match last - first {
                0 => format!("batch:{first}"),
                1 => format!("batch:{first}, batch:{last}"),
                _ => format!("batch:{first}..{last}"),
            });
            i = j;
        } else {
            parts.push(modes[i].to_string());
            i += 1;
        }
    }
    if parts.is_empty() {
        "no mode".into()
    } else {
        parts.join(", ")
    }
}

impl FromStr for Mode {
    type Err = ModeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::parse(s)
    }
}

impl Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Mode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Mode::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// One generation request: token ids of the prompt (BOS and chat template already applied),
/// the token budget and the stop ids (generation ends after emitting one of them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Prompt id from the suite.
    pub id: String,
    /// Prompt token ids `[P]`.
    pub prompt: Vec<u32>,
    /// Maximum number of generated tokens.
    pub max_tokens: usize,
    /// Stop ids (the stop token itself is emitted and recorded).
    pub stop: Vec<u32>,
}

/// How an emitted token was produced (conformance §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepKind {
    /// The first token, from the prefill forward.
    Prefill,
    /// A one-row decode forward.
    Decode,
    /// An accepted draft token of a verify forward.
    VerifyAccepted,
    /// The bonus (target) token of a verify forward.
    VerifyBonus,
}

/// One emitted token with the engine's own top-k `(id, logit)` where exposed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Emitted token id.
    pub token: u32,
    /// The engine's top-k `(id, logit)` at this position, descending; `None` if not exposed.
    pub top_k: Option<Vec<(u32, f64)>>,
    /// How the token was produced.
    pub kind: StepKind,
}

/// Speculative-decoding counters of one trajectory (spec:K only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecStats {
    /// Verify rounds.
    pub rounds: usize,
    /// Tokens drafted in total.
    pub drafted: usize,
    /// Drafted tokens accepted in total.
    pub accepted: usize,
    /// Per round: (drafted, accepted).
    pub per_round: Vec<(usize, usize)>,
}

/// The output of one request: every emitted token, spec counters, wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// The request id.
    pub id: String,
    /// Emitted tokens in order.
    pub steps: Vec<Step>,
    /// Speculative counters (spec:K modes).
    pub spec: Option<SpecStats>,
    /// Wall time of the request (for batch modes: of the whole batch call).
    pub wall: Duration,
}

impl Trajectory {
    /// The emitted token ids `[n]`.
    pub fn tokens(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.token).collect()
    }
}

/// The trajectory of a request that failed on its own (its failure is in
/// [`Engine::request_errors`], judged `error`): no steps, as an HTTP engine's failed request.
pub(crate) fn failed_trajectory(req: &Request) -> Trajectory {
    Trajectory {
        id: req.id.clone(),
        steps: Vec::new(),
        spec: None,
        wall: Duration::ZERO,
    }
}

/// One request's result in a call over several: a failure of that request alone
/// ([`EngineError::Request`] naming it, e.g. `non-finite logits at output index I (N NaN/Inf)`)
/// is recorded in `errors` and answered with [`failed_trajectory`], so the call goes on for the
/// other requests; any other failure (a drafter that does not load) fails the call.
pub(crate) fn per_request(
    errors: &mut Vec<(String, String)>,
    req: &Request,
    result: Result<Trajectory, EngineError>,
) -> Result<Trajectory, EngineError> {
    match result {
        Err(EngineError::Request { id, message }) if id == req.id => {
            errors.push((id, message));
            Ok(failed_trajectory(req))
        }
        other => other,
    }
}

/// Teacher-forced scores of one sequence: per position `t` the top-k `(id, logit)` of the
/// next-token distribution after `seq[..=t]`, descending by logit (ties: lower id first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Rows `[len(seq)][k]`.
    pub rows: Vec<Vec<(u32, f64)>>,
}

/// An engine failure (becomes the `error` verdict, conformance §3).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine does not support the mode.
    #[error("engine {engine} does not support mode {mode}")]
    UnsupportedMode {
        /// Engine name.
        engine: String,
        /// The mode asked for.
        mode: Mode,
    },
    /// The engine failed on one request.
    #[error("engine failed on request {id}: {message}")]
    Request {
        /// Request id (or "*" for the whole call).
        id: String,
        /// What went wrong.
        message: String,
    },
    /// A model or drafter file could not be loaded (missing, not a GGUF, unsupported, a
    /// drafter that does not pair): the file, not the engine, is at fault.
    #[error("cannot load {}: {message}", path.display())]
    Load {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        message: String,
    },
    /// Any other failure (device, server).
    #[error("engine error: {0}")]
    Other(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of consecutive batch widths are written once; other modes as they are, in order.
    #[test]
    fn mode_lists_collapse_batch_runs() {
        let b = |n| Mode::Batch { n };
        assert_eq!(mode_list(&[]), "no mode");
        let mut http = vec![Mode::Plain];
        http.extend((1..=16).map(b));
        assert_eq!(mode_list(&http), "plain, batch:1..16");
        assert_eq!(
            mode_list(&[
                Mode::Prefill,
                b(4),
                Mode::Spec { k: 1 },
                Mode::Spec { k: 2 }
            ]),
            "prefill, batch:4, spec:1, spec:2"
        );
        assert_eq!(
            mode_list(&[b(1), b(2), b(4), b(5), b(6), b(8)]),
            "batch:1, batch:2, batch:4..6, batch:8"
        );
    }

    #[test]
    fn mode_strings_round_trip() {
        for (text, mode) in [
            ("prefill", Mode::Prefill),
            ("plain", Mode::Plain),
            ("batch:4", Mode::Batch { n: 4 }),
            ("spec:2", Mode::Spec { k: 2 }),
        ] {
            assert_eq!(Mode::parse(text).unwrap(), mode);
            assert_eq!(mode.to_string(), text);
        }
    }

    #[test]
    fn bad_mode_strings_are_rejected() {
        for text in ["", "spec", "spec:0", "batch:x", "greedy", "spec:-1"] {
            assert!(Mode::parse(text).is_err(), "{text}");
        }
        // a sign is refused like a space (`batch:+4` ran as batch:4, `batch: 4` was refused)
        for text in ["batch:+4", "spec:+1", "batch: 4", "batch:4 4", "batch:"] {
            assert_eq!(
                Mode::parse(text).unwrap_err().to_string(),
                format!(
                    "bad mode {text:?}: expected prefill, plain, batch:N or spec:K with N, K >= 1"
                )
            );
        }
        assert_eq!(
            Mode::parse_list("plain, spec:4").unwrap(),
            vec![Mode::Plain, Mode::Spec { k: 4 }]
        );
    }

    /// A mode listed twice would run (and be reported) twice: refused, naming the mode.
    #[test]
    fn duplicate_modes_in_a_list_are_refused() {
        for (text, dup) in [
            ("plain,plain", "plain"),
            ("plain, spec:4,batch:4, spec:4", "spec:4"),
        ] {
            let e = Mode::parse_list(text).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("mode {dup} is listed twice (each mode runs once)"),
                "{text}"
            );
        }
        assert_eq!(
            Mode::parse_list("spec:1,spec:2").unwrap(),
            vec![Mode::Spec { k: 1 }, Mode::Spec { k: 2 }]
        );
        let e = Mode::parse_list("plain,spec:0").unwrap_err();
        assert!(e.to_string().starts_with("bad mode \"spec:0\""), "{e}");
    }
}
