//! External engines over HTTP (`design/conformance.md` §1 "any engine a user wraps", §9): a
//! running inference server judged against the f64 oracle like any other [`Engine`].
//!
//! Engine specs (the `--engine` value of `cargo xtask conformance`):
//!
//! - `llama-server=http://127.0.0.1:8080` — llama.cpp's `llama-server`, native
//!   `POST /completion`: prompt sent as token ids, greedy (`temperature` 0, `top_k` 1, sampler
//!   chain `["top_k"]`, every penalty off), `cache_prompt` false, `n_probs` = top-k,
//!   `return_tokens` true, raw (pre-sampling) log-probabilities.
//! - `openai=http://127.0.0.1:8000/v1` — an OpenAI-compatible `POST /v1/completions` (vLLM,
//!   llama.cpp, …): token-id prompt, `logprobs` = top-k, token ids through llama.cpp's
//!   `logprobs.content[].id` or vLLM's `return_token_ids` / `return_tokens_as_token_ids`.
//!   `prefill` is declared when the server returns prompt log-probs (`echo`).
//!
//! Options follow the URL, comma-separated: `allow-remote` (a non-loopback URL is refused
//! without it), `sha256=HEX` (the served model file's SHA-256), `spec=K` (the server was
//! started with an MTP drafter drafting K tokens; the engine then declares only `spec:K`, and
//! a server without a draft model — its `/slots` say so, or a probe drafts nothing — is
//! refused when the engine connects, [`HttpError::NoDrafter`], and so is one whose probes stop
//! too early to show drafting, [`HttpError::DrafterProbeInconclusive`]),
//! `timeout=SECONDS` (per request, default 600, at most [`MAX_TIMEOUT`], a week; the first
//! requests, `/props`, `/v1/models` and, with `spec=K`, llama-server's `/slots`, give up after
//! at most [`PROBE_TIMEOUT`], 30 s, saying on stderr after [`PROBE_NOTICE_AFTER`], 5 s, that
//! they still wait — a `/slots` that gives up is an error, not passed over; a later request
//! still waiting after 30 s says so on stderr), `retries=N` (connection errors only,
//! default 4), `concurrency=N` (largest `batch:N`, at most [`MAX_CONCURRENCY`]; default: the
//! server's slots, else 16, and never more than [`MAX_CONCURRENCY`]), `top-k=K` (default 16,
//! at least 2 as a suite's `top_k`), `model=NAME` (OpenAI `model` field, not empty; default:
//! the first of `/v1/models`).
//!
//! **Log-probabilities, not logits.** Servers return `log p = logit − logsumexp(logits)`: per
//! position every candidate is shifted by the same constant, so differences — the engine's
//! top-2 gap in reports, margins — are logit differences (up to the server's `f32` softmax
//! rounding), while absolute values are not logits. The tie-budget rule (§3) uses the oracle's
//! logits only; the engine's values appear only as gaps and top-5 lists.
//!
//! Checks before judging ([`HttpEngine::connect`], failures are fatal: exit 2): the served model
//! is the file the oracle reads (same path or same SHA-256 through `/props` `model_path`, or
//! the user's `sha256=`), and one probe request proves that the server counts our prompt tokens
//! as we do (no BOS added to a token-id prompt) and returns ids and log-probabilities. Every
//! later request is checked the same way, and its log-probabilities too: none above 0, no id
//! twice in a top-k ([`parse`]), and the output greedy by them — no id the model does not
//! suppress ranked strictly above an emitted token ([`greedy_problem`]); a failing request
//! becomes an `error` verdict with the server's message, or the check's naming the output
//! index, while the others are judged ([`Engine::request_errors`]).
//!
//! Speculative servers: llama-server (0.3.36's llama.cpp) returns an empty `top_logprobs` for
//! tokens emitted by speculative verify batches, so in `spec:K` only the first token carries the
//! engine's top-k (`Step::top_k` is `None` elsewhere; the rule needs only the ids). Step kinds
//! are `prefill` for the first token and `decode` for the rest (the wire does not say which
//! tokens were accepted drafts); `SpecStats` comes from `timings.draft_n` /
//! `draft_n_accepted`, with `rounds` derived as `tokens − 1 − accepted`.
//!
//! Stops: the server stops at its own end-of-generation ids; the client cuts the output after the
//! first of the suite's stop ids (the stop id kept), so a server that does not stop there is
//! judged on the same tokens as one that does.

pub mod client;
#[cfg(test)]
pub(crate) mod fake;
pub mod parse;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::engine::{
    Engine, EngineError, Mode, Request, Scores, SpecStats, Step, StepKind, Trajectory,
};
use client::Client;
use parse::Completion;

/// An HTTP engine failure before or outside judging (fatal, exit 2) or of one request (its
/// message becomes the `error` verdict).
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The engine spec or URL is malformed.
    #[error("bad engine spec {spec:?}: {message}")]
    Spec {
        /// The spec text.
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// A non-loopback URL without `allow-remote`.
    #[error("{url} is not a loopback address: pass --allow-remote (engine option `allow-remote`) to judge a remote server")]
    Remote {
        /// The URL.
        url: String,
    },
    /// The server could not be reached.
    #[error("{url}: cannot connect ({attempts} attempts): {message} — is the server running?")]
    Connect {
        /// The URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Transport error.
        message: String,
    },
    /// The request exceeded its timeout.
    #[error("{url}: no complete response within {secs} s (engine option timeout=SECONDS)")]
    Timeout {
        /// The URL.
        url: String,
        /// The timeout in seconds.
        secs: f64,
    },
    /// A non-2xx HTTP status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Start of the body.
        body: String,
    },
    /// A response that does not have what the judge needs.
    #[error("{url}: {message}")]
    Response {
        /// The URL.
        url: String,
        /// What is missing or wrong.
        message: String,
    },
    /// The served model is not (or cannot be shown to be) the oracle's model file.
    #[error("served model check failed: {0}")]
    Model(String),
    /// The server counts the prompt differently (e.g. adds a BOS to a token-id prompt).
    #[error("prompt check failed: {0}")]
    PromptCount(String),
    /// `spec=K` was asked of a server that runs no speculative decoding (started without a
    /// draft model): every `spec:K` entry would be an `error`, so the run is refused up front.
    #[error(
        "{url}: engine option spec={k}, but the server has no draft model ({evidence}): start it \
         with one (`cargo xtask llama-server --draft ASSISTANT.gguf --spec-k {k}`), or judge it \
         without spec={k}"
    )]
    NoDrafter {
        /// The server's URL.
        url: String,
        /// The `spec=K` option.
        k: usize,
        /// How it was found out: the server's `/slots`, or a probe that drafted nothing.
        evidence: String,
    },
    /// `spec=K` was asked, the server does not say whether it drafts (no `/slots`), and both
    /// drafter probes stopped within 2 tokens without drafting: too few tokens to show drafting
    /// either way, so the run is refused rather than taken as speculating.
    #[error(
        "{url}: engine option spec={k}: the drafter probe was inconclusive: asked for {asked} \
         tokens, the server stopped after {first} and, with a second prompt, after {second}, \
         drafting none (a probe shows drafting only past 2 tokens); let the server say whether \
         it drafts (llama-server: leave /slots on, no --no-slots), or judge it without spec={k}"
    )]
    DrafterProbeInconclusive {
        /// The server's URL.
        url: String,
        /// The `spec=K` option.
        k: usize,
        /// Tokens each probe asked for (K + 2).
        asked: usize,
        /// Tokens the first probe returned.
        first: usize,
        /// Tokens the second probe (another prompt) returned.
        second: usize,
    },
}

/// Which wire API the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// llama.cpp `llama-server`, native `POST /completion`.
    LlamaServer,
    /// OpenAI-compatible `POST /v1/completions`.
    OpenAi,
}

/// A parsed engine spec (see the module docs for the syntax).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSpec {
    /// Wire API.
    pub api: Api,
    /// Base URL without trailing `/` (`http://host:port` or `http://host:port/v1`).
    pub url: String,
    /// Allow a non-loopback host.
    pub allow_remote: bool,
    /// The served model file's SHA-256 (lowercase hex), as stated by the user.
    pub sha256: Option<String>,
    /// `Some(K)`: the server runs MTP speculative decoding with K draft tokens.
    pub spec_k: Option<usize>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries on connection errors.
    pub retries: u32,
    /// Largest concurrency (`batch:N`); `None` = the server's slot count, else 16.
    pub concurrency: Option<usize>,
    /// Top-k log-probabilities asked per token.
    pub top_k: usize,
    /// OpenAI `model` field.
    pub model: Option<String>,
}

/// The largest `batch:N` an HTTP engine runs: each of the N requests in flight is one client
/// thread (and one server slot). A `concurrency=N` above it is refused; a server that reports
/// more slots (`/props` `total_slots`) is run with this many at most, which the engine's notes
/// say. (A server-given slot count once sized the list of declared modes: 10¹² slots aborted
/// the run allocating 16 TB.)
pub const MAX_CONCURRENCY: usize = 256;

/// The longest per-request `timeout=`: a week. (`timeout=18446744073709551615` panicked with
/// an overflow adding the timeout to the clock at the first request.)
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Whether `spec` names an HTTP engine (`llama-server=…` or `openai=…`).
pub fn is_http_spec(spec: &str) -> bool {
    spec.starts_with("llama-server=") || spec.starts_with("openai=")
}

impl HttpSpec {
    /// Parses `llama-server=URL[,opt…]` / `openai=URL[,opt…]`.
    ///
    /// Errors: [`HttpError::Spec`] naming the bad part.
    pub fn parse(spec: &str) -> Result<HttpSpec, HttpError> {
        let bad = |message: String| HttpError::Spec {
            spec: spec.to_string(),
            message,
        };
        let (kind, rest) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected llama-server=URL or openai=URL".into()))?;
        let api = match kind {
            "llama-server" => Api::LlamaServer,
            "openai" => Api::OpenAi,
            k => return Err(bad(format!("unknown HTTP engine {k:?}"))),
        };
        let mut parts = rest.split(',');
        let url = parts.next().unwrap_or("").trim_end_matches('/').to_string();
        client::url_host(&url)?;
        let mut s = HttpSpec {
            api,
            url,
            allow_remote: false,
            sha256: None,
            spec_k: None,
            timeout: Duration::from_secs(600),
            retries: 4,
            concurrency: None,
            top_k: 16,
            model: None,
        };
        for opt in parts.map(str::trim).filter(|o| !o.is_empty()) {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            let num = |v: &str| -> Result<usize, HttpError> {
                v.parse::<usize>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| bad(format!("option {k}: {v:?} is not a positive integer")))
            };
            match k {
                "allow-remote" if opt.contains('=') => {
                    return Err(bad(format!(
                        "option allow-remote takes no value (got {opt:?})"
                    )))
                }
                "allow-remote" => s.allow_remote = true,
                "sha256" => {
                    if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(bad(format!("sha256={v:?} is not 64 hex digits")));
                    }
                    s.sha256 = Some(v.to_ascii_lowercase());
                }
                "spec" => s.spec_k = Some(num(v)?),
                "timeout" => {
                    let secs = num(v)? as u64;
                    if secs > MAX_TIMEOUT.as_secs() {
                        return Err(bad(format!(
                            "option timeout: {v:?} seconds is more than {} (a week)",
                            MAX_TIMEOUT.as_secs()
                        )));
                    }
                    s.timeout = Duration::from_secs(secs);
                }
                "retries" => {
                    s.retries = v.parse().map_err(|_| {
                        bad(format!(
                            "option retries: {v:?} is not a whole number (0 or more)"
                        ))
                    })?
                }
                "concurrency" => {
                    let n = num(v)?;
                    if n > MAX_CONCURRENCY {
                        return Err(bad(format!(
                            "option concurrency: {v:?} is more than {MAX_CONCURRENCY} (the most \
                             requests this client runs at once: one thread each)"
                        )));
                    }
                    s.concurrency = Some(n);
                }
                "top-k" => {
                    s.top_k = num(v)?;
                    if s.top_k < crate::suite::MIN_TOP_K {
                        return Err(bad(format!(
                            "option top-k: {v:?} must be >= {} (as a suite's top_k: the rule \
                             needs the top-2)",
                            crate::suite::MIN_TOP_K
                        )));
                    }
                }
                "model" if v.is_empty() => {
                    return Err(bad(format!(
                        "option model: the value is empty in {opt:?} (model=NAME, the OpenAI \
                         `model` field; leave the option out for the first of /v1/models)"
                    )))
                }
                "model" => s.model = Some(v.to_string()),
                _ => return Err(bad(format!("unknown option {opt:?}"))),
            }
        }
        Ok(s)
    }

    /// The loopback rule: a URL that does not name this machine needs `allow-remote`.
    /// Errors: [`HttpError::Remote`] naming the URL.
    pub fn check_remote(&self) -> Result<(), HttpError> {
        if !self.allow_remote && !client::is_loopback(&self.url)? {
            return Err(HttpError::Remote {
                url: self.url.clone(),
            });
        }
        Ok(())
    }

    /// The server root (`url` without a trailing `/v1`), where llama.cpp serves `/props`.
    pub fn root(&self) -> &str {
        self.url.strip_suffix("/v1").unwrap_or(&self.url)
    }
}

/// Checks an `--engine` spec without connecting or reading any file: [`HttpSpec::parse`] (the
/// URL and every option) and the loopback rule ([`HttpSpec::check_remote`]), which
/// [`HttpEngine::connect`] applies first. Errors: [`HttpError::Spec`], [`HttpError::Remote`].
pub fn check_spec(spec: &str) -> Result<HttpSpec, HttpError> {
    let s = HttpSpec::parse(spec)?;
    s.check_remote()?;
    Ok(s)
}

/// Longest wait for the first requests of [`HttpEngine::connect`] (`GET /props`, `/v1/models`):
/// metadata a working server answers at once, so a server that accepts connections but never
/// answers is reported after this long, not after the per-request `timeout=` (600 s default).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The limit of the metadata requests: [`PROBE_TIMEOUT`], or the spec's `timeout=` if shorter.
fn probe_timeout(spec: &HttpSpec) -> Duration {
    spec.timeout.min(PROBE_TIMEOUT)
}

/// How long a metadata request ([`PROBE_TIMEOUT`]) waits before it says on stderr that it is
/// still waiting: with the request notice time ([`client::NOTICE_AFTER`], 30 s), a request that
/// gives up at 30 s never said so, and a `/slots` that hung cost 30 s in silence.
pub const PROBE_NOTICE_AFTER: Duration = Duration::from_secs(5);

/// The client of the metadata requests (`/props`, `/v1/models`, `/slots`): limit
/// [`probe_timeout`], saying it is still waiting after [`PROBE_NOTICE_AFTER`] (or half the
/// limit, if shorter), naming the URL and the limit.
fn probe_client(spec: &HttpSpec, backoff: Duration) -> Client {
    let limit = probe_timeout(spec);
    Client::new(limit, spec.retries, backoff).with_notice_after(PROBE_NOTICE_AFTER.min(limit / 2))
}

/// An external engine behind HTTP (see the module docs).
pub struct HttpEngine {
    spec: HttpSpec,
    name: String,
    client: Client,
    modes: Vec<Mode>,
    model_name: Option<String>,
    /// The model's suppressed ids (`tokenizer.ggml.suppress_tokens`): a server suppresses them
    /// while sampling, after the raw log-probabilities it reports ([`greedy_problem`]).
    suppressed: Vec<u32>,
    errors: Vec<(String, String)>,
    /// What the checks found (printed by the caller).
    pub notes: Vec<String>,
}

/// Builds an HTTP engine from an `--engine` spec for the oracle's model at `model` (fatal
/// errors: exit 2). See [`HttpEngine::connect`].
pub fn engine_from_spec(spec: &str, model: &Path) -> Result<Box<dyn Engine>, HttpError> {
    let e = HttpEngine::connect(HttpSpec::parse(spec)?, model)?;
    for n in &e.notes {
        eprintln!("{}: {n}", e.name);
    }
    Ok(Box::new(e))
}

fn sha256_of(path: &Path) -> Result<String, HttpError> {
    reference::gguf::sha256_file(path)
        .map_err(|e| HttpError::Model(format!("{}: {e}", path.display())))
}

impl HttpEngine {
    /// Connects and checks the server (module docs, "Checks before judging"): loopback rule,
    /// model identity, a probe request for prompt count, ids and log-probabilities, modes.
    ///
    /// Errors: any [`HttpError`]; all are fatal for the run (exit 2).
    pub fn connect(spec: HttpSpec, model: &Path) -> Result<HttpEngine, HttpError> {
        spec.check_remote()?;
        let backoff = Duration::from_millis(500);
        let client = Client::new(spec.timeout, spec.retries, backoff);
        // the metadata GETs answer at once on a working server: a shorter limit
        let probe = probe_client(&spec, backoff);
        let name = match spec.api {
            Api::LlamaServer => "llama-server",
            Api::OpenAi => "openai",
        }
        .to_string();
        let mut notes = Vec::new();
        let props_url = format!("{}/props", spec.root());
        let props = match probe.get_json(&props_url) {
            Ok(p) => p,
            Err(e @ HttpError::Connect { .. }) => return Err(e),
            Err(HttpError::Timeout { url, secs }) => {
                return Err(HttpError::Response {
                    url,
                    message: format!(
                        "no answer to the first request within {secs} s: the server accepts \
                         connections but does not respond (stuck, or not an inference server?)"
                    ),
                })
            }
            Err(e) if spec.api == Api::LlamaServer => return Err(e),
            Err(_) => None,
        };
        // model identity
        let served_path = props
            .as_ref()
            .and_then(|p| p.get("model_path"))
            .and_then(Value::as_str)
            .map(PathBuf::from);
        check_model(&spec, model, served_path.as_deref(), &mut notes)?;
        // whether the server drafts, where it says so itself (llama-server's `/slots`)
        let slots_speculate = match (spec.api, spec.spec_k) {
            (Api::LlamaServer, Some(_)) => slots_speculate(&probe, spec.root(), &mut notes)?,
            _ => None,
        };
        let slots = props
            .as_ref()
            .and_then(|p| p.get("total_slots"))
            .and_then(Value::as_u64)
            .map(|n| n as usize);
        let mut engine = HttpEngine {
            name,
            client,
            modes: Vec::new(),
            model_name: spec.model.clone(),
            suppressed: Vec::new(),
            errors: Vec::new(),
            notes,
            spec,
        };
        if engine.spec.api == Api::OpenAi && engine.model_name.is_none() {
            let url = format!("{}/models", engine.spec.url);
            engine.model_name = probe.get_json(&url)?.and_then(|m| {
                m.pointer("/data/0/id")
                    .and_then(Value::as_str)
                    .map(String::from)
            });
        }
        // probe: our tokenizer's ids for a short text, BOS included
        let ProbePrompts {
            probe,
            counting,
            suppressed,
        } = probe_prompts(model)?;
        engine.suppressed = suppressed;
        let req = Request {
            id: "probe".into(),
            prompt: probe.clone(),
            max_tokens: 2,
            stop: Vec::new(),
        };
        let c = engine.complete(&req, false).map_err(|e| match e {
            RequestError::Http(h) => h,
            RequestError::Check(m) => HttpError::PromptCount(m),
            RequestError::NotGreedy(message) => HttpError::Response {
                url: engine.spec.url.clone(),
                message: format!("the probe request: {message}"),
            },
        })?;
        if c.tokens.is_empty() {
            return Err(HttpError::Response {
                url: engine.spec.url.clone(),
                message: "the probe request returned no tokens".into(),
            });
        }
        engine.notes.push(format!(
            "probe: {} prompt tokens counted as sent, ids and {} log-probs per token returned",
            probe.len(),
            c.top_k.first().map_or(0, Vec::len)
        ));
        if let Some(k) = engine.spec.spec_k {
            engine.check_drafter(k, slots_speculate, [&probe, &counting])?;
        }
        let max_n = engine
            .spec
            .concurrency
            .or(slots)
            .unwrap_or(16)
            .clamp(1, MAX_CONCURRENCY);
        engine.modes = match engine.spec.spec_k {
            Some(k) => vec![Mode::Spec { k }],
            None => std::iter::once(Mode::Plain)
                .chain((1..=max_n).map(|n| Mode::Batch { n }))
                .collect(),
        };
        if engine.spec.api == Api::OpenAi {
            match engine.echo(&probe) {
                Ok(_) => engine.modes.insert(0, Mode::Prefill),
                Err(e) => engine
                    .notes
                    .push(format!("prefill not declared: no prompt log-probs ({e})")),
            }
        } else {
            engine.notes.push(
                "prefill not declared: llama-server's /completion returns no prompt log-probs \
                 (calibrate scores prefix by prefix)"
                    .into(),
            );
        }
        match (slots, engine.spec.spec_k) {
            (_, Some(k)) => engine
                .notes
                .push(format!("speculative server: only spec:{k} declared")),
            (Some(n), None) => engine.notes.push(match engine.spec.concurrency {
                None if n > MAX_CONCURRENCY => format!(
                    "server has {n} slots: batch:1..{max_n} declared (at most \
                     {MAX_CONCURRENCY} requests at once; engine option concurrency=N lowers it)"
                ),
                _ => format!("server has {n} slots: batch:1..{max_n} declared"),
            }),
            (None, None) => {}
        }
        Ok(engine)
    }

    /// Refuses `spec=K` on a server without a draft model ([`HttpError::NoDrafter`]): its own
    /// word when it gives one (`slots_speculate`, from `/slots`), else a probe of `prompts[0]`
    /// asking for `K + 2` tokens — room for one draft of K after the first token (llama-server
    /// drafts at most the tokens still to come less one) — that reports no drafted token
    /// (`timings.draft_n`) over more than 2 tokens, as a `spec:K` entry that drafts nothing
    /// fails. A probe that stops within 2 tokens without drafting shows nothing either way: the
    /// probe is asked again with `prompts[1]` (a counting prompt, which a model continues), and
    /// if that one also stops within 2 tokens without drafting the run is refused
    /// ([`HttpError::DrafterProbeInconclusive`], naming both token counts) — it was taken as a
    /// server that drafts.
    fn check_drafter(
        &mut self,
        k: usize,
        slots_speculate: Option<bool>,
        prompts: [&[u32]; 2],
    ) -> Result<(), HttpError> {
        let no_drafter = |evidence: String| HttpError::NoDrafter {
            url: self.spec.url.clone(),
            k,
            evidence,
        };
        match slots_speculate {
            Some(true) => {
                self.notes
                    .push("drafter: /slots says the server speculates".into());
                return Ok(());
            }
            Some(false) => return Err(no_drafter("its /slots say no slot speculates".into())),
            None => {}
        }
        let asked = k.saturating_add(2);
        let mut counts = Vec::with_capacity(2);
        for (i, prompt) in prompts.into_iter().enumerate() {
            let c = self.drafter_probe(prompt, asked)?;
            let which = if i == 0 { "a probe" } else { "a second probe" };
            match c.drafted.unwrap_or(0) {
                0 if c.tokens.len() > 2 => {
                    return Err(no_drafter(format!(
                        "{which} of {} tokens drafted none: {}",
                        c.tokens.len(),
                        if c.drafted.is_some() {
                            "timings.draft_n = 0"
                        } else {
                            "no timings.draft_n in its answer"
                        }
                    )))
                }
                0 => counts.push(c.tokens.len()),
                d => {
                    self.notes
                        .push(format!("drafter: {which} drafted {d} tokens"));
                    return Ok(());
                }
            }
        }
        Err(HttpError::DrafterProbeInconclusive {
            url: self.spec.url.clone(),
            k,
            asked,
            first: counts[0],
            second: counts[1],
        })
    }

    /// One drafter probe: `prompt`, `asked` tokens, greedy ([`HttpEngine::check_drafter`]).
    fn drafter_probe(&self, prompt: &[u32], asked: usize) -> Result<Completion, HttpError> {
        let req = Request {
            id: "drafter probe".into(),
            prompt: prompt.to_vec(),
            max_tokens: asked,
            stop: Vec::new(),
        };
        self.complete(&req, false).map_err(|e| match e {
            RequestError::Http(h) => h,
            other => HttpError::Response {
                url: self.spec.url.clone(),
                message: format!("the drafter probe request: {other}"),
            },
        })
    }

    /// The wire API.
    pub fn api(&self) -> Api {
        self.spec.api
    }

    /// The request URL and JSON body. `echo`: OpenAI prompt log-probs; `cache`: let llama-server
    /// reuse its KV cache for a prompt prefix it has seen (prefix scoring only).
    fn body(&self, req: &Request, echo: bool, cache: bool) -> (String, Value) {
        let k = self.spec.top_k;
        match self.spec.api {
            Api::LlamaServer => (
                format!("{}/completion", self.spec.url),
                json!({
                    "prompt": req.prompt,
                    "n_predict": req.max_tokens,
                    "temperature": 0.0,
                    "top_k": 1,
                    "top_p": 1.0,
                    "min_p": 0.0,
                    "typical_p": 1.0,
                    "repeat_penalty": 1.0,
                    "repeat_last_n": 0,
                    "presence_penalty": 0.0,
                    "frequency_penalty": 0.0,
                    "dry_multiplier": 0.0,
                    "xtc_probability": 0.0,
                    "mirostat": 0,
                    "samplers": ["top_k"],
                    "n_probs": k,
                    "post_sampling_probs": false,
                    "return_tokens": true,
                    "cache_prompt": cache,
                    "stream": false,
                    "seed": 0,
                }),
            ),
            Api::OpenAi => {
                let mut b = json!({
                    "prompt": req.prompt,
                    "max_tokens": req.max_tokens,
                    "temperature": 0.0,
                    "top_p": 1.0,
                    "top_k": 1,
                    "n": 1,
                    "stream": false,
                    "seed": 0,
                    "logprobs": k,
                    "return_tokens_as_token_ids": true,
                    "return_token_ids": true,
                    "cache_prompt": false,
                });
                if !req.stop.is_empty() {
                    b["stop_token_ids"] = json!(req.stop);
                }
                if echo {
                    b["echo"] = json!(true);
                }
                if let Some(m) = &self.model_name {
                    b["model"] = json!(m);
                }
                (format!("{}/completions", self.spec.url), b)
            }
        }
    }

    /// One completion request; checks the prompt count and (`check_ids`) the shape.
    fn complete(&self, req: &Request, echo: bool) -> Result<Completion, RequestError> {
        self.complete_with(req, echo, false)
    }

    /// [`HttpEngine::complete`] with llama-server's prompt cache on or off.
    fn complete_with(
        &self,
        req: &Request,
        echo: bool,
        cache: bool,
    ) -> Result<Completion, RequestError> {
        let (url, body) = self.body(req, echo, cache);
        let v = self.client.post_json(&url, &body)?;
        let c = match self.spec.api {
            Api::LlamaServer => parse::parse_llama_completion(&v),
            Api::OpenAi => parse::parse_openai_completion(&v, echo.then_some(req.prompt.len())),
        }
        .map_err(|message| HttpError::Response {
            url: url.clone(),
            message,
        })?;
        if let Some(why) = greedy_problem(&c, &self.suppressed) {
            return Err(RequestError::NotGreedy(why));
        }
        match c.prompt_tokens {
            Some(n) if n == req.prompt.len() => {}
            Some(n) => {
                return Err(RequestError::Check(format!(
                    "the server counted {n} prompt tokens, we sent {} (does it add a BOS to a \
                     token-id prompt, or truncate to its context size?)",
                    req.prompt.len()
                )))
            }
            None => {
                return Err(RequestError::Check(
                    "the server does not report its prompt token count (tokens_evaluated / \
                     usage.prompt_tokens)"
                        .into(),
                ))
            }
        }
        Ok(c)
    }

    fn echo(&self, prompt: &[u32]) -> Result<Completion, RequestError> {
        let req = Request {
            id: "echo".into(),
            prompt: prompt.to_vec(),
            max_tokens: 1,
            stop: Vec::new(),
        };
        let c = self.complete(&req, true)?;
        match &c.prompt_top_k {
            Some(p) if p.len() + 1 == prompt.len() && p.iter().all(|r| !r.is_empty()) => Ok(c),
            _ => Err(RequestError::Check(
                "echo gave no top log-probs for the prompt positions".into(),
            )),
        }
    }

    /// Teacher-forced scores of `seq` for a server without prompt log-probs (llama-server): one
    /// request per position `t` with prompt `seq[..=t]` and one generated token, whose top-k is
    /// row `t` (`[seq.len()]` rows). The prompt cache is on, so each request evaluates only the
    /// new token: row `t` is the decode row the server computes for that prefix in `plain` mode.
    fn score_by_prefixes(&self, seq: &[u32]) -> Result<Scores, RequestError> {
        let mut rows = Vec::with_capacity(seq.len());
        for t in 0..seq.len() {
            let req = Request {
                id: format!("prefix {}", t + 1),
                prompt: seq[..=t].to_vec(),
                max_tokens: 1,
                stop: Vec::new(),
            };
            let c = self.complete_with(&req, false, true)?;
            match c.top_k.into_iter().next() {
                Some(top) if !top.is_empty() => rows.push(top),
                _ => {
                    return Err(RequestError::Check(format!(
                        "prefix of {} tokens: no top log-probs returned",
                        t + 1
                    )))
                }
            }
        }
        Ok(Scores { rows })
    }

    fn trajectory(&self, req: &Request, mode: &Mode) -> Result<Trajectory, String> {
        let t0 = Instant::now();
        let c = self.complete(req, false).map_err(|e| e.to_string())?;
        let mut n = c.tokens.len();
        if let Some(i) = c.tokens.iter().position(|t| req.stop.contains(t)) {
            n = i + 1;
        }
        let drafted = c.drafted.unwrap_or(0);
        let spec = match mode {
            Mode::Spec { k } => {
                if drafted == 0 && n > 2 {
                    return Err(format!(
                        "spec:{k}: the server drafted no tokens (start it with --spec-type \
                         draft-mtp --model-draft DRAFTER --spec-draft-n-max {k})"
                    ));
                }
                let accepted = c.accepted.unwrap_or(0);
                // counts the server gives: bounded before they are summed over a run
                if accepted > drafted {
                    return Err(format!(
                        "spec:{k}: the server reports {accepted} accepted drafts of {drafted} \
                         drafted (timings.draft_n_accepted > timings.draft_n)"
                    ));
                }
                if drafted > k.saturating_mul(c.tokens.len()) {
                    return Err(format!(
                        "spec:{k}: the server reports {drafted} drafted tokens for {} emitted \
                         (timings.draft_n): more than {k} per emitted token",
                        c.tokens.len()
                    ));
                }
                Some(SpecStats {
                    rounds: c.tokens.len().saturating_sub(accepted.saturating_add(1)),
                    drafted,
                    accepted,
                    per_round: Vec::new(),
                })
            }
            _ => {
                if drafted > 0 {
                    return Err(format!(
                        "{mode}: the server drafted {drafted} tokens — it runs speculative \
                         decoding; judge it with engine option spec=K"
                    ));
                }
                None
            }
        };
        let steps = c
            .tokens
            .into_iter()
            .zip(c.top_k)
            .take(n)
            .enumerate()
            .map(|(i, (token, top))| Step {
                token,
                top_k: (!top.is_empty()).then_some(top),
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
            spec,
            wall: t0.elapsed(),
        })
    }
}

/// A failed request: transport/format error or a failed check.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("{0}")]
    Check(String),
    /// The output is not greedy by the log-probabilities the server reports with it
    /// ([`greedy_problem`]).
    #[error("{0}")]
    NotGreedy(String),
}

/// Runs `f(i)` for `i in 0..n` on at most `conc` threads; results in index order.
fn run_pool<T: Send>(n: usize, conc: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..conc.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let r = f(i);
                if let Ok(mut o) = out.lock() {
                    o[i] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|x| x.expect("every index ran"))
        .collect()
}

fn check_model(
    spec: &HttpSpec,
    model: &Path,
    served: Option<&Path>,
    notes: &mut Vec<String>,
) -> Result<(), HttpError> {
    if let Some(want) = &spec.sha256 {
        let ours = sha256_of(model)?;
        if &ours != want {
            return Err(HttpError::Model(format!(
                "the served model's SHA-256 is {want} (sha256=), the oracle's {} is {ours}",
                model.display()
            )));
        }
        notes.push(format!(
            "served model SHA-256 {want} = oracle model (given by the user)"
        ));
        return Ok(());
    }
    let Some(served) = served else {
        return Err(HttpError::Model(format!(
            "the server does not say which file it serves (no /props model_path); pass the served \
             file's SHA-256 as engine option sha256=HEX (sha256sum FILE) to judge it against {}",
            model.display()
        )));
    };
    let same_path = match (served.canonicalize(), model.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same_path {
        notes.push(format!("server serves {} (same file)", served.display()));
        return Ok(());
    }
    if !served.exists() {
        return Err(HttpError::Model(format!(
            "the server serves {}, which is not readable here; pass engine option sha256=HEX \
             of that file to judge it against {}",
            served.display(),
            model.display()
        )));
    }
    let (a, b) = (sha256_of(served)?, sha256_of(model)?);
    if a != b {
        return Err(HttpError::Model(format!(
            "the server serves {} (SHA-256 {a}), the oracle reads {} (SHA-256 {b}): not the same \
             weights",
            served.display(),
            model.display()
        )));
    }
    notes.push(format!(
        "server serves {} (same SHA-256 {a})",
        served.display()
    ));
    Ok(())
}

/// The probe prompts of [`HttpEngine::connect`], our tokenizer's ids (BOS included), and the
/// model's suppressed ids.
struct ProbePrompts {
    /// A short sentence: the prompt-count probe, and the first drafter probe.
    probe: Vec<u32>,
    /// A counting sequence, which a model continues: the second drafter probe, asked when the
    /// first stopped too early to show drafting ([`HttpEngine::check_drafter`]).
    counting: Vec<u32>,
    /// The model's suppressed ids (`tokenizer.ggml.suppress_tokens`).
    suppressed: Vec<u32>,
}

/// The probe prompts ([`ProbePrompts`]) for `model`.
fn probe_prompts(model: &Path) -> Result<ProbePrompts, HttpError> {
    let f = reference::gguf::GgufFile::open(model)
        .map_err(|e| HttpError::Model(format!("{}: {e}", model.display())))?;
    let tok = reference::tokenizer::GemmaTokenizer::from_gguf(&f)
        .map_err(|e| HttpError::Model(format!("{}: tokenizer: {e}", model.display())))?;
    let encode = |text: &str| {
        tok.encode(text, true)
            .map_err(|e| HttpError::Model(format!("{}: tokenizer: {e}", model.display())))
    };
    Ok(ProbePrompts {
        probe: encode("The quick brown fox jumps over the lazy dog.")?,
        counting: encode("1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,")?,
        suppressed: tok.suppressed_ids(),
    })
}

/// Whether llama-server at `root` speculates, by its `GET /slots` (on by default; each slot's
/// `speculative` is whether it has a draft model): `Some(true)` when a slot does,
/// `Some(false)` when every slot says it does not, `None` when the server does not say (the
/// endpoint off — `--no-slots` —, missing, failing, or an answer without the field; a note in
/// `notes` says which, before the drafter probe is asked instead).
///
/// Errors: a `/slots` that does not answer within the client's limit is not passed over (it
/// cost the limit, 30 s, in silence, then the probe asked the same stuck server):
/// [`HttpError::Response`] naming the URL and the limit.
fn slots_speculate(
    client: &Client,
    root: &str,
    notes: &mut Vec<String>,
) -> Result<Option<bool>, HttpError> {
    let url = format!("{root}/slots");
    let unsaid = |notes: &mut Vec<String>, why: String| {
        notes.push(format!(
            "drafter: {url} does not say whether the server drafts ({why}): a probe asks"
        ));
        Ok(None)
    };
    let slots = match client.get_json(&url) {
        Ok(Some(v)) => v,
        Ok(None) => return unsaid(notes, "HTTP 404".into()),
        Err(HttpError::Timeout { url, secs }) => {
            return Err(HttpError::Response {
                url,
                message: format!(
                    "no answer within {secs} s (asked because of engine option spec=K, to learn \
                     whether the server drafts): the server accepts connections but does not \
                     respond (stuck?)"
                ),
            })
        }
        Err(HttpError::Status { status, .. }) => return unsaid(notes, format!("HTTP {status}")),
        Err(e) => return unsaid(notes, e.to_string()),
    };
    let flags: Option<Vec<bool>> = slots.as_array().and_then(|a| {
        a.iter()
            .map(|s| s.get("speculative").and_then(Value::as_bool))
            .collect()
    });
    match flags {
        Some(f) if !f.is_empty() => Ok(Some(f.contains(&true))),
        _ => unsaid(notes, "no slot list with `speculative` flags".into()),
    }
}

/// Why the completion `c`, asked for greedily, is not a greedy output of the log-probabilities
/// the server reports with it, naming the first output index, or `None`. At each index with a
/// top-k row, the emitted token must have the largest log-probability among the ids the model
/// does not suppress (`suppressed`: a server drops them while sampling, after the raw
/// log-probabilities it reports; an emitted suppressed id is left to the rule, which fails it):
/// an id of the row ranked strictly above it, or — when it is not in the row — any id of the
/// row above the row's last (an id outside a top-k is at most its last), is an engine
/// inconsistency. Exact ties pass (the server may take either). Its own log-probability is
/// the row's entry or, outside the row, the one the server gives beside it.
pub fn greedy_problem(c: &Completion, suppressed: &[u32]) -> Option<String> {
    for (i, (&tok, row)) in c.tokens.iter().zip(&c.top_k).enumerate() {
        if row.is_empty() || suppressed.contains(&tok) {
            continue;
        }
        let Some(&(best, best_lp)) = row.iter().find(|x| !suppressed.contains(&x.0)) else {
            continue;
        };
        let own = row.iter().find(|x| x.0 == tok).map(|x| x.1);
        let last = row.last().map_or(best_lp, |x| x.1);
        let (below, lp) = match (own, c.token_logprobs.get(i).copied().flatten()) {
            (Some(lp), _) => (lp < best_lp, Some(lp)),
            (None, Some(lp)) => (lp < best_lp, Some(lp)),
            (None, None) => (last < best_lp, None),
        };
        if below {
            return Some(format!(
                "output index {i}: the server emitted token {tok}{} but ranks id {best} above it \
                 (log-prob {best_lp}){}: not a greedy choice",
                lp.map_or(String::new(), |lp| format!(" (log-prob {lp})")),
                if own.is_none() {
                    ", and the token is not in its top-k"
                } else {
                    ""
                }
            ));
        }
    }
    None
}

impl Engine for HttpEngine {
    fn name(&self) -> &str {
        &self.name
    }

    fn modes(&self) -> Vec<Mode> {
        self.modes.clone()
    }

    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        if !self.modes.contains(mode) || *mode == Mode::Prefill {
            return Err(EngineError::UnsupportedMode {
                engine: self.name.clone(),
                mode: *mode,
            });
        }
        let conc = match mode {
            Mode::Batch { n } => *n,
            _ => 1,
        };
        let t0 = Instant::now();
        let this = &*self;
        let results = run_pool(reqs.len(), conc, |i| this.trajectory(&reqs[i], mode));
        let batch_wall = t0.elapsed();
        self.errors.clear();
        let mut out = Vec::with_capacity(reqs.len());
        for (req, r) in reqs.iter().zip(results) {
            match r {
                Ok(mut t) => {
                    if conc > 1 {
                        t.wall = batch_wall;
                    }
                    out.push(t);
                }
                Err(message) => {
                    self.errors.push((req.id.clone(), message));
                    out.push(Trajectory {
                        id: req.id.clone(),
                        steps: Vec::new(),
                        spec: None,
                        wall: Duration::ZERO,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Teacher-forced scores. OpenAI servers with `echo`: one request per sequence (prompt
    /// log-probs). llama-server: one request per position ([`HttpEngine::score_by_prefixes`]),
    /// used by `cargo xtask calibrate`; `prefill` stays undeclared because these rows are decode
    /// rows, not one forward over the sequence.
    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        if self.spec.api == Api::LlamaServer {
            let mut out = Vec::with_capacity(seqs.len());
            for (i, seq) in seqs.iter().enumerate() {
                let mut s = self
                    .score_by_prefixes(seq)
                    .map_err(|e| EngineError::Request {
                        id: format!("sequence {i}"),
                        message: e.to_string(),
                    })?;
                for r in &mut s.rows {
                    r.truncate(top_k);
                }
                out.push(s);
            }
            return Ok(out);
        }
        if !self.modes.contains(&Mode::Prefill) {
            return Err(EngineError::UnsupportedMode {
                engine: self.name.clone(),
                mode: Mode::Prefill,
            });
        }
        let this = &*self;
        let results = run_pool(seqs.len(), 1, |i| this.echo(&seqs[i]));
        let mut out = Vec::with_capacity(seqs.len());
        for (i, r) in results.into_iter().enumerate() {
            let c = r.map_err(|e| EngineError::Request {
                id: format!("sequence {i}"),
                message: e.to_string(),
            })?;
            let mut rows = c.prompt_top_k.unwrap_or_default();
            rows.push(c.top_k.into_iter().next().unwrap_or_default());
            for r in &mut rows {
                r.truncate(top_k);
            }
            out.push(Scores { rows });
        }
        Ok(out)
    }

    fn request_errors(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.errors)
    }
}

/// Command line of llama.cpp's `llama-server` binary `bin` serving `model` on
/// `127.0.0.1:port` with `parallel` slots, a context of `ctx` tokens in all and 2 CPU threads,
/// for the `llama-server=` engine spec; with `draft = Some((assistant, k))`, MTP speculative
/// decoding drafting `k` tokens (`spec=K` in the spec). The one set of server flags for
/// `cargo xtask llama-server` and the integration tests. `--no-repack`: the pinned llama.cpp's
/// CPU weight repacking segfaults right after "llama threadpool init" on the Q4_K_M fixture
/// target on an AVX-512/AMX machine (measured 2026-12-02: F32 serves, Q4_K_M crashes with 1 or 2
/// threads and 1 or 4 slots, and serves with `--no-repack`). The caller sets stdout/stderr and
/// spawns it.
pub fn llama_server_command(
    bin: &Path,
    model: &Path,
    draft: Option<(&Path, usize)>,
    port: u16,
    parallel: usize,
    ctx: usize,
) -> std::process::Command {
    let mut c = std::process::Command::new(bin);
    c.arg("-m")
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["-np", &parallel.to_string(), "-c", &ctx.to_string()])
        .args(["-t", "2", "--no-warmup", "--no-repack"]);
    if let Some((d, k)) = draft {
        c.args(["--spec-type", "draft-mtp", "--model-draft"])
            .arg(d)
            .args([
                "--spec-draft-n-max",
                &k.to_string(),
                "--spec-draft-p-min",
                "0",
            ]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parsing() {
        let s = HttpSpec::parse("llama-server=http://127.0.0.1:8080/,spec=4,timeout=30,top-k=8")
            .unwrap();
        assert_eq!(s.api, Api::LlamaServer);
        assert_eq!(s.url, "http://127.0.0.1:8080");
        assert_eq!((s.spec_k, s.top_k), (Some(4), 8));
        assert_eq!(s.timeout, Duration::from_secs(30));
        let o =
            HttpSpec::parse("openai=http://localhost:8000/v1,model=gemma,allow-remote").unwrap();
        assert_eq!(o.root(), "http://localhost:8000");
        assert!(o.allow_remote);
        for bad in [
            "llama-server",
            "vllm=http://x",
            "openai=https://x/v1",
            "llama-server=http://h:1,spec=0",
            "llama-server=http://h:1,sha256=abc",
            "llama-server=http://h:1,bogus",
        ] {
            assert!(HttpSpec::parse(bad).is_err(), "{bad}");
        }
    }

    /// `top-k=1` is refused as a suite's `top_k = 1` is (the rule needs the top-2); a bad
    /// `retries=` says what it takes; an empty `model=` says the value is empty; `allow-remote`
    /// with a value and a timeout over a week (u64::MAX panicked at the first request) are
    /// refused.
    #[test]
    fn top_k_below_two_and_bad_retries_are_refused() {
        let e = HttpSpec::parse("llama-server=http://127.0.0.1:1,top-k=1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad engine spec \"llama-server=http://127.0.0.1:1,top-k=1\": option top-k: \"1\" \
             must be >= 2 (as a suite's top_k: the rule needs the top-2)"
        );
        assert_eq!(
            HttpSpec::parse("llama-server=http://127.0.0.1:1,top-k=2")
                .unwrap()
                .top_k,
            2
        );
        // an empty model= was 'unknown option "model="'; allow-remote takes no value
        for (opt, why) in [
            (
                "model=",
                "option model: the value is empty in \"model=\" (model=NAME, the OpenAI \
                        `model` field; leave the option out for the first of /v1/models)",
            ),
            (
                "model",
                "option model: the value is empty in \"model\" (model=NAME, the OpenAI \
                       `model` field; leave the option out for the first of /v1/models)",
            ),
            (
                "allow-remote=no",
                "option allow-remote takes no value (got \"allow-remote=no\")",
            ),
            (
                "timeout=604801",
                "option timeout: \"604801\" seconds is more than 604800 (a week)",
            ),
        ] {
            let spec = format!("openai=http://127.0.0.1:1/v1,{opt}");
            assert_eq!(
                HttpSpec::parse(&spec).unwrap_err().to_string(),
                format!("bad engine spec {spec:?}: {why}")
            );
        }
        let week = HttpSpec::parse("llama-server=http://127.0.0.1:1,timeout=604800").unwrap();
        assert_eq!(week.timeout, MAX_TIMEOUT);
        let e = HttpSpec::parse("llama-server=http://127.0.0.1:1,retries=-1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad engine spec \"llama-server=http://127.0.0.1:1,retries=-1\": option retries: \
             \"-1\" is not a whole number (0 or more)"
        );
    }

    /// A server that accepts connections but never answers stops the first request after the
    /// probe limit (30 s, or a shorter timeout=), not after the 600 s request timeout, saying
    /// what it saw.
    #[test]
    fn a_silent_server_is_reported_at_the_first_request() {
        let d = HttpSpec::parse("llama-server=http://127.0.0.1:1").unwrap();
        assert_eq!(d.timeout, Duration::from_secs(600));
        assert_eq!(probe_timeout(&d), Duration::from_secs(30));
        let url = client::tests::silent_server();
        for api in ["llama-server", "openai"] {
            let s = HttpSpec::parse(&format!("{api}={url},timeout=1")).unwrap();
            assert_eq!(probe_timeout(&s), Duration::from_secs(1));
            let t0 = Instant::now();
            let e = HttpEngine::connect(s, Path::new("/nonexistent.gguf"))
                .err()
                .unwrap();
            assert!(t0.elapsed() < Duration::from_secs(10));
            assert_eq!(
                e.to_string(),
                format!(
                    "{url}/props: no answer to the first request within 1 s: the server accepts \
                     connections but does not respond (stuck, or not an inference server?)"
                ),
                "{api}"
            );
        }
    }

    /// A `/slots` that never answers (asked for spec=K) says it is still waiting before the
    /// limit — half of it here, 5 s of the default 30 s (it waited 30 s without a word) —
    /// naming the URL and the limit, and its timeout stops the engine naming both (it was
    /// passed over in silence, and a drafter probe asked instead).
    #[test]
    fn a_hanging_slots_request_is_reported_not_passed_over() {
        let d = HttpSpec::parse("llama-server=http://127.0.0.1:1").unwrap();
        assert_eq!(
            probe_client(&d, Duration::ZERO).notice_after(),
            Duration::from_secs(5)
        );
        let root = client::tests::silent_server();
        let spec = HttpSpec::parse(&format!("llama-server={root},spec=2,timeout=1")).unwrap();
        let sink = std::sync::Arc::new(Mutex::new(Vec::new()));
        let probe = probe_client(&spec, Duration::ZERO).notices_kept(sink.clone());
        let mut notes = Vec::new();
        let t0 = Instant::now();
        let e = slots_speculate(&probe, &root, &mut notes).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(5));
        let want = format!(
            "{root}/slots: no answer within 1 s (asked because of engine option spec=K, to \
             learn whether the server drafts): the server accepts connections but does not \
             respond (stuck?)"
        );
        assert_eq!(e.to_string(), want);
        assert_eq!(
            *sink.lock().unwrap(),
            [format!(
                "{root}/slots: no response after 0.5 s, still waiting (gives up after 1 s: \
                 engine option timeout=SECONDS)"
            )]
        );
        assert!(notes.is_empty(), "{notes:?}");
        // through connect: /props answers, /slots hangs, the completions would draft
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let m = model.display().to_string();
        let url = fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match path {
                "/props" => (200, json!({"model_path": m, "total_slots": 1})),
                "/slots" => {
                    std::thread::sleep(Duration::from_secs(3));
                    (200, json!([{"id": 0, "speculative": true}]))
                }
                "/completion" => {
                    let mut c = fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]);
                    c["timings"] = json!({"draft_n": 2, "draft_n_accepted": 1});
                    (200, c)
                }
                _ => (404, json!({})),
            },
        ));
        let spec = HttpSpec::parse(&format!("llama-server={url},spec=2,timeout=1")).unwrap();
        let e = HttpEngine::connect(spec, &model).err().unwrap();
        assert!(
            matches!(&e, HttpError::Response { url: u, .. } if *u == format!("{url}/slots")),
            "{e:?}"
        );
        assert!(e.to_string().contains("no answer within 1 s"), "{e}");
        // a /slots that is off (404, --no-slots) is said, and the probe asks
        let mut notes = Vec::new();
        let off = fake::serve(std::sync::Arc::new(|_: &str, _: &str, _: &Value| {
            (404, json!({}))
        }));
        assert_eq!(slots_speculate(&probe, &off, &mut notes).unwrap(), None);
        assert_eq!(
            notes,
            [format!(
                "drafter: {off}/slots does not say whether the server drafts (HTTP 404): a probe \
                 asks"
            )]
        );
    }

    /// A llama-server engine at `url` with engine option spec=3, judging `model`.
    fn connect_spec3(url: &str, model: &Path) -> Result<HttpEngine, HttpError> {
        HttpEngine::connect(
            HttpSpec::parse(&format!("llama-server={url},spec=3")).unwrap(),
            model,
        )
    }

    /// A llama-server fake serving `model` with `/props` `total_slots` = `slots` and greedy
    /// completions of token 236 (top-2: 236, 237); its URL.
    fn slots_server(model: &Path, slots: u64) -> String {
        let model = model.display().to_string();
        fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match path {
                "/props" => (200, json!({"model_path": model, "total_slots": slots})),
                "/completion" => (
                    200,
                    fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]),
                ),
                _ => (404, json!({})),
            },
        ))
    }

    /// A slot count the server gives is bounded: 10¹² slots (it aborted the run allocating the
    /// list of modes, 16 TB) declare plain and batch:1..256 with a note saying so; a
    /// concurrency=N above 256 is refused naming the option; 4 slots give batch:1..4.
    #[test]
    fn a_huge_slot_count_is_bounded() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let url = slots_server(&model, 1_000_000_000_000);
        let e = HttpEngine::connect(
            HttpSpec::parse(&format!("llama-server={url}")).unwrap(),
            &model,
        )
        .unwrap();
        let mut want = vec![Mode::Plain];
        want.extend((1..=256).map(|n| Mode::Batch { n }));
        assert_eq!(e.modes(), want);
        assert!(
            e.notes.contains(
                &"server has 1000000000000 slots: batch:1..256 declared (at most 256 requests \
                  at once; engine option concurrency=N lowers it)"
                    .to_string()
            ),
            "{:?}",
            e.notes
        );
        let spec = format!("llama-server={url},concurrency=99999999999");
        assert_eq!(
            HttpSpec::parse(&spec).unwrap_err().to_string(),
            format!(
                "bad engine spec {spec:?}: option concurrency: \"99999999999\" is more than 256 \
                 (the most requests this client runs at once: one thread each)"
            )
        );
        let spec = format!("llama-server={url},concurrency=256");
        let e = HttpEngine::connect(HttpSpec::parse(&spec).unwrap(), &model).unwrap();
        assert_eq!(e.modes().len(), 257);
        let e = HttpEngine::connect(
            HttpSpec::parse(&format!("llama-server={}", slots_server(&model, 4))).unwrap(),
            &model,
        )
        .unwrap();
        assert_eq!(
            e.modes(),
            [
                Mode::Plain,
                Mode::Batch { n: 1 },
                Mode::Batch { n: 2 },
                Mode::Batch { n: 3 },
                Mode::Batch { n: 4 }
            ]
        );
        assert!(e
            .notes
            .contains(&"server has 4 slots: batch:1..4 declared".to_string()));
    }

    /// Speculative counters the server gives are checked before they are summed: more
    /// accepted than drafted, or more drafted than K per emitted token (u64::MAX overflowed the
    /// rounds count), fail that request naming the counter; plausible ones give the stats
    /// (3 tokens, 4 drafted, 1 accepted: rounds = 3 − 1 − 1 = 1).
    #[test]
    fn impossible_draft_counts_fail_the_request() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let m = model.display().to_string();
        let url = fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match path {
                "/props" => (200, json!({"model_path": m, "total_slots": 1})),
                "/completion" => {
                    let mut c = fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]);
                    let (d, a) = match body["n_predict"].as_u64() {
                        Some(3) => (4u64, 1u64),
                        Some(4) => (3, 5),
                        _ => (u64::MAX, 2),
                    };
                    c["timings"] = json!({"draft_n": d, "draft_n_accepted": a});
                    (200, c)
                }
                _ => (404, json!({})),
            },
        ));
        let spec = HttpSpec::parse(&format!("llama-server={url},spec=2")).unwrap();
        let mut e = HttpEngine::connect(spec, &model).unwrap();
        let req = |n: usize| Request {
            id: format!("r{n}"),
            prompt: vec![2, 818],
            max_tokens: n,
            stop: vec![],
        };
        let t = e
            .generate(&[req(3), req(4), req(5)], &Mode::Spec { k: 2 })
            .unwrap();
        assert_eq!(
            t[0].spec,
            Some(SpecStats {
                rounds: 1,
                drafted: 4,
                accepted: 1,
                per_round: vec![],
            })
        );
        assert_eq!(
            e.request_errors(),
            [
                (
                    "r4".to_string(),
                    "spec:2: the server reports 5 accepted drafts of 3 drafted \
                     (timings.draft_n_accepted > timings.draft_n)"
                        .to_string()
                ),
                (
                    "r5".to_string(),
                    "spec:2: the server reports 18446744073709551615 drafted tokens for 5 \
                     emitted (timings.draft_n): more than 2 per emitted token"
                        .to_string()
                )
            ]
        );
    }

    /// `spec=K` on a server without a draft model is refused when the engine connects (the
    /// run's exit 2, before any entry; each `spec:K` entry was an `error` verdict, exit 1):
    /// by the server's `/slots` when it says so, else by a probe of K + 2 tokens that drafted
    /// none. A server whose `/slots` say it speculates, or whose probe drafted, is taken.
    #[test]
    fn spec_without_a_drafter_is_refused_up_front() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        // `/slots` answer (None: 404, as with --no-slots) and `timings.draft_n` per completion
        let server = |slots: Option<Value>, drafted: u64| {
            let m = model.display().to_string();
            fake::serve(std::sync::Arc::new(
                move |_: &str, path: &str, body: &Value| match (path, &slots) {
                    ("/props", _) => (200, json!({"model_path": m, "total_slots": 2})),
                    ("/slots", Some(s)) => (200, s.clone()),
                    ("/completion", _) => {
                        let mut c = fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]);
                        if drafted > 0 {
                            c["timings"] = json!({"draft_n": drafted, "draft_n_accepted": 0});
                        }
                        (200, c)
                    }
                    _ => (404, json!({})),
                },
            ))
        };
        let connect = |url: &str| connect_spec3(url, &model);
        let refusal = |url: &str, evidence: &str| {
            format!(
                "{url}: engine option spec=3, but the server has no draft model ({evidence}): \
                 start it with one (`cargo xtask llama-server --draft ASSISTANT.gguf --spec-k \
                 3`), or judge it without spec=3"
            )
        };
        let no = json!([{"id": 0, "speculative": false}, {"id": 1, "speculative": false}]);
        let url = server(Some(no), 0);
        let e = connect(&url).err().unwrap();
        assert!(matches!(e, HttpError::NoDrafter { k: 3, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            refusal(&url, "its /slots say no slot speculates")
        );
        // what conformance, calibrate and explain build their engine with: fatal there
        assert_eq!(
            engine_from_spec(&format!("llama-server={url},spec=3"), &model)
                .err()
                .unwrap()
                .to_string(),
            refusal(&url, "its /slots say no slot speculates")
        );
        let url = server(None, 0);
        assert_eq!(
            connect(&url).err().unwrap().to_string(),
            refusal(
                &url,
                "a probe of 5 tokens drafted none: no timings.draft_n in its answer"
            )
        );
        let yes = json!([{"id": 0, "speculative": false}, {"id": 1, "speculative": true}]);
        let e = connect(&server(Some(yes), 0)).unwrap();
        assert_eq!(e.modes(), [Mode::Spec { k: 3 }]);
        assert!(e
            .notes
            .contains(&"drafter: /slots says the server speculates".to_string()));
        let e = connect(&server(None, 3)).unwrap();
        assert!(e
            .notes
            .contains(&"drafter: a probe drafted 3 tokens".to_string()));
        // without spec=K nothing is asked about a drafter
        let url = server(Some(json!([{"id": 0, "speculative": false}])), 0);
        let e = HttpEngine::connect(
            HttpSpec::parse(&format!("llama-server={url}")).unwrap(),
            &model,
        )
        .unwrap();
        assert!(e.modes().contains(&Mode::Plain));
    }

    /// A drafter probe that stops within 2 tokens without drafting shows nothing (it was taken
    /// as a server that drafts): the probe is asked again with a counting prompt, and that one
    /// decides — drafted tokens take the server, more than 2 tokens without a draft refuse it
    /// (NoDrafter) — or, stopping within 2 tokens again, the run is refused as inconclusive,
    /// naming both token counts.
    #[test]
    fn a_drafter_probe_that_stops_early_is_not_taken_as_drafting() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let counting = probe_prompts(&model).unwrap().counting;
        // no /slots (404); the first probe stops after 2 tokens without drafting; the counting
        // probe answers `tokens` tokens with `timings.draft_n` = `drafted` (None: absent)
        let server = |tokens: u64, drafted: Option<u64>| {
            let (m, counting) = (model.display().to_string(), json!(counting));
            fake::serve(std::sync::Arc::new(
                move |_: &str, path: &str, body: &Value| match path {
                    "/props" => (200, json!({"model_path": m, "total_slots": 1})),
                    "/completion" => {
                        let second = body["prompt"] == counting;
                        let mut b = body.clone();
                        b["n_predict"] = json!(if second { tokens } else { 2 });
                        let mut c = fake::completion(&b, 236, &[(236, -0.1), (237, -2.5)]);
                        if let (true, Some(d)) = (second, drafted) {
                            c["timings"] = json!({"draft_n": d, "draft_n_accepted": 0});
                        }
                        (200, c)
                    }
                    _ => (404, json!({})),
                },
            ))
        };
        let connect = |url: &str| connect_spec3(url, &model);
        let url = server(2, None);
        let e = connect(&url).err().unwrap();
        assert!(
            matches!(
                e,
                HttpError::DrafterProbeInconclusive {
                    k: 3,
                    asked: 5,
                    first: 2,
                    second: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{url}: engine option spec=3: the drafter probe was inconclusive: asked for 5 \
                 tokens, the server stopped after 2 and, with a second prompt, after 2, drafting \
                 none (a probe shows drafting only past 2 tokens); let the server say whether it \
                 drafts (llama-server: leave /slots on, no --no-slots), or judge it without \
                 spec=3"
            )
        );
        let e = connect(&server(1, Some(0))).err().unwrap();
        assert!(
            matches!(
                e,
                HttpError::DrafterProbeInconclusive {
                    first: 2,
                    second: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = connect(&server(5, Some(3))).unwrap();
        assert_eq!(e.modes(), [Mode::Spec { k: 3 }]);
        assert!(
            e.notes
                .contains(&"drafter: a second probe drafted 3 tokens".to_string()),
            "{:?}",
            e.notes
        );
        let url = server(5, None);
        let e = connect(&url).err().unwrap();
        assert!(matches!(e, HttpError::NoDrafter { k: 3, .. }), "{e:?}");
        assert!(
            e.to_string().contains(
                "(a second probe of 5 tokens drafted none: no timings.draft_n in its answer)"
            ),
            "{e}"
        );
    }

    /// The greedy check on hand-made completions: a top-k id strictly above the emitted token
    /// is reported with the index and both ids, also when the token is outside the row (its
    /// own log-prob given, or not: an id outside a top-k is at most the row's last); a
    /// suppressed id above it, an exact tie and a row of equal values are not.
    #[test]
    fn non_greedy_outputs_are_named() {
        let c = |tokens: Vec<u32>, rows: Vec<Vec<(u32, f64)>>, own: Vec<Option<f64>>| Completion {
            tokens,
            top_k: rows,
            token_logprobs: own,
            prompt_tokens: Some(1),
            drafted: None,
            accepted: None,
            prompt_top_k: None,
        };
        let ok = vec![(7, -0.1), (5, -2.0)];
        let bad = c(
            vec![7, 7],
            vec![ok.clone(), vec![(5, -0.1), (7, -2.0)]],
            vec![None, None],
        );
        assert_eq!(
            greedy_problem(&bad, &[]).unwrap(),
            "output index 1: the server emitted token 7 (log-prob -2) but ranks id 5 above it \
             (log-prob -0.1): not a greedy choice"
        );
        // id 5 suppressed: the server samples among the others
        assert_eq!(greedy_problem(&bad, &[5]), None);
        let tie = c(vec![7], vec![vec![(5, -0.5), (7, -0.5)]], vec![None]);
        assert_eq!(greedy_problem(&tie, &[]), None);
        let outside = c(vec![7], vec![vec![(5, -0.1), (9, -1.0)]], vec![None]);
        assert_eq!(
            greedy_problem(&outside, &[]).unwrap(),
            "output index 0: the server emitted token 7 but ranks id 5 above it (log-prob -0.1), \
             and the token is not in its top-k: not a greedy choice"
        );
        let outside_own = c(vec![7], vec![vec![(5, -0.1), (9, -1.0)]], vec![Some(-3.0)]);
        assert!(greedy_problem(&outside_own, &[]).unwrap().starts_with(
            "output index 0: the server emitted token 7 (log-prob -3) but ranks id 5"
        ));
        let flat = c(vec![7], vec![vec![(5, -1.0), (9, -1.0)]], vec![None]);
        assert_eq!(greedy_problem(&flat, &[]), None);
    }

    /// Served through the fake llama-server, a completion whose top-1 is not the emitted token
    /// fails that request with the index, and one with a log-probability above 0 fails it with
    /// the field; the other request of the call is judged (a trajectory of 3 tokens).
    #[test]
    fn impossible_server_log_probabilities_fail_the_request() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let m = model.display().to_string();
        let url = fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match (path, body["n_predict"].as_u64()) {
                ("/props", _) => (200, json!({"model_path": m, "total_slots": 4})),
                ("/completion", Some(4)) => (
                    200,
                    fake::completion(body, 237, &[(236, -0.1), (237, -2.5)]),
                ),
                ("/completion", Some(5)) => {
                    (200, fake::completion(body, 236, &[(236, -0.1), (237, 0.5)]))
                }
                ("/completion", _) => (
                    200,
                    fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]),
                ),
                _ => (404, json!({})),
            },
        ));
        let mut e = HttpEngine::connect(
            HttpSpec::parse(&format!("llama-server={url}")).unwrap(),
            &model,
        )
        .unwrap();
        let req = |n: usize| Request {
            id: format!("r{n}"),
            prompt: vec![2, 818],
            max_tokens: n,
            stop: vec![],
        };
        let t = e
            .generate(&[req(3), req(4), req(5)], &Mode::Batch { n: 2 })
            .unwrap();
        assert_eq!(t[0].steps.len(), 3);
        assert_eq!(
            e.request_errors(),
            [
                (
                    "r4".to_string(),
                    "output index 0: the server emitted token 237 (log-prob -2.5) but ranks id 236 \
                     above it (log-prob -0.1): not a greedy choice"
                        .to_string()
                ),
                (
                    "r5".to_string(),
                    format!(
                        "{url}/completion: completion_probabilities[0]: top_logprobs[1].logprob is \
                         0.5, above 0: a log-probability is at most 0 (a probability at most 1)"
                    )
                )
            ]
        );
    }

    #[test]
    fn remote_urls_need_allow_remote() {
        let s = HttpSpec::parse("llama-server=http://10.1.2.3:8080").unwrap();
        let e = HttpEngine::connect(s, Path::new("/nonexistent.gguf"))
            .err()
            .unwrap();
        assert!(matches!(e, HttpError::Remote { .. }), "{e}");
    }

    #[test]
    fn connection_refused_is_a_clear_error() {
        // a free port: bind, read the number, release
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s =
            HttpSpec::parse(&format!("llama-server=http://127.0.0.1:{port},retries=1")).unwrap();
        let e = HttpEngine::connect(s, Path::new("/nonexistent.gguf"))
            .err()
            .unwrap();
        assert!(matches!(e, HttpError::Connect { attempts: 2, .. }), "{e}");
    }

    #[test]
    fn pool_keeps_order_and_bounds_concurrency() {
        let live = AtomicUsize::new(0);
        let peak = AtomicUsize::new(0);
        let r = run_pool(12, 3, |i| {
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
            live.fetch_sub(1, Ordering::SeqCst);
            i * 2
        });
        assert_eq!(r, (0..12).map(|i| i * 2).collect::<Vec<_>>());
        assert!(peak.load(Ordering::SeqCst) <= 3);
    }
}
