//! Goldens (`design/conformance.md` §9, style R11): one insta YAML snapshot per (model, suite,
//! prompt) under `goldens/<model-stem>/<suite>/<prompt>.snap`, readable in review (prompt id,
//! decoded text, token ids, per-position oracle top-2 margin rounded to 4 significant digits;
//! model SHA-256, file name and oracle version in the snapshot's `info`), plus a full-precision
//! sidecar `<prompt>.oracle.json` with the oracle's top-k `(id, logit)` per position as
//! shortest-round-trip decimals (serde_json `float_roundtrip`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rule::OracleRow;
use crate::suite::Prompt;

/// Version string of the oracle recorded in every golden, and required of a golden when it is
/// loaded ([`load_goldens`]: another version is [`GoldenError::Stale`]).
///
/// It names the oracle's arithmetic, not a release: change it only when a change to the f64
/// forward (reference/src/model) can change a golden's tokens or logits, and re-bless every
/// golden in the same commit. It is deliberately not the crate version (it was
/// `CARGO_PKG_VERSION` of `suites`, whose value it keeps), so that a version bump does not
/// make every committed golden stale.
pub const ORACLE_VERSION: &str = "reference-f64 0.1.0";

/// Sidecar schema name.
pub const SIDECAR_SCHEMA: &str = "golden-oracle/1";

/// What [`load_goldens`] checks a golden's top-k rows against: the model's vocabulary and the
/// suite's `top_k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLimits {
    /// The model's vocabulary size: every id is below it.
    pub vocab: usize,
    /// Ids a row can list: the vocabulary less the model's suppressed ids.
    pub rankable: usize,
    /// The suite's `top_k`: every row lists `min(top_k, rankable)` ids at least.
    pub top_k: usize,
}

impl RowLimits {
    /// The limits of a model of `vocab` ids with the suppressed ids `suppressed`, for a suite
    /// of `top_k`.
    pub fn new(vocab: usize, suppressed: &[u32], top_k: usize) -> RowLimits {
        let mut s: Vec<u32> = suppressed
            .iter()
            .copied()
            .filter(|&i| (i as usize) < vocab)
            .collect();
        s.sort_unstable();
        s.dedup();
        RowLimits {
            vocab,
            rankable: vocab - s.len(),
            top_k,
        }
    }

    /// The fewest ids a row must list: `min(top_k, rankable)`.
    pub fn width(&self) -> usize {
        self.top_k.min(self.rankable)
    }
}

/// The top-k width `cargo xtask bless` writes for a suite of `top_k`: the oracle's greedy
/// width ([`reference::decode::GREEDY_TOP_K`]), or the suite's when larger, so that a golden
/// blessed for a suite always holds what its `top_k` asks of it ([`RowLimits::width`]).
pub fn bless_width(top_k: usize) -> usize {
    top_k.max(reference::decode::GREEDY_TOP_K)
}

/// A golden: the oracle's greedy output for (model, suite, prompt) with full-precision top-k.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Golden {
    /// Always [`SIDECAR_SCHEMA`].
    pub schema: String,
    /// Model file name (no directory).
    pub model_file: String,
    /// Lowercase hex SHA-256 of the model file.
    pub model_sha256: String,
    /// [`ORACLE_VERSION`] of the run that made it.
    pub oracle_version: String,
    /// Suite name.
    pub suite: String,
    /// Prompt id.
    pub prompt_id: String,
    /// Prompt ids `[P]`.
    pub prompt: Vec<u32>,
    /// Greedy output ids `[n]`.
    pub tokens: Vec<u32>,
    /// Oracle top-k `(id, logit)` at each output index (on the golden prefix), `[n][k]`.
    pub top_k: Vec<Vec<(u32, f64)>>,
}

impl Golden {
    /// Why this golden cannot be the oracle's greedy output over a vocabulary of `vocab` ids (a
    /// corrupt or hand-edited sidecar), naming the output index, or `None`: one top-k row per
    /// output token, every id below `vocab`, each row non-empty, each id once in its row (an id
    /// listed twice reads as a top-2 tie of margin 0), sorted by logit (descending, finite or
    /// −∞), and headed by the golden token (greedy: the row's top).
    pub fn problem(&self, vocab: usize) -> Option<String> {
        if self.top_k.len() != self.tokens.len() {
            return Some(format!(
                "{} output tokens but {} top-k rows",
                self.tokens.len(),
                self.top_k.len()
            ));
        }
        if let Some(&t) = self.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Some(format!(
                "prompt token {t} is outside the vocabulary ({vocab})"
            ));
        }
        for (i, (&tok, row)) in self.tokens.iter().zip(&self.top_k).enumerate() {
            if tok as usize >= vocab {
                return Some(format!(
                    "output {i}: token {tok} is outside the vocabulary ({vocab})"
                ));
            }
            let Some(&(top, _)) = row.first() else {
                return Some(format!("output {i}: empty top-k row"));
            };
            if let Some(&(id, _)) = row.iter().find(|(id, _)| *id as usize >= vocab) {
                return Some(format!(
                    "output {i}: top-k id {id} is outside the vocabulary ({vocab})"
                ));
            }
            let mut ids: Vec<u32> = row.iter().map(|x| x.0).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Some(format!("output {i}: top-k id {} listed twice", w[0]));
            }
            if row.iter().any(|(_, l)| l.is_nan() || *l == f64::INFINITY)
                || row.windows(2).any(|w| w[1].1 > w[0].1)
            {
                return Some(format!(
                    "output {i}: top-k logits not finite and descending"
                ));
            }
            // the oracle's rows list exact ties lower id first, as greedy takes the lower id
            if let Some(w) = row.windows(2).find(|w| w[1].1 == w[0].1 && w[1].0 < w[0].0) {
                return Some(format!(
                    "output {i}: ids {} and {} tie exactly but the higher is listed first \
                     (greedy takes the lower id)",
                    w[0].0, w[1].0
                ));
            }
            if top != tok {
                return Some(format!(
                    "output {i}: token {tok} is not the top of its row (id {top} is)"
                ));
            }
        }
        None
    }

    /// Why `tokens` cannot be the oracle's greedy output for a prompt with `max_tokens` and stop
    /// ids `stop` (what `cargo xtask bless` generates the golden with), or `None`.
    ///
    /// Greedy generation emits a token per step until it emits a stop id (kept as the last
    /// token) or reaches `max_tokens`; a suite's `max_tokens` is at least 1 (`Suite` parsing
    /// refuses 0), and a first token that is a stop id gives one token, never none (a model
    /// whose row has no argmax — NaN logits — is refused by `bless`). So a golden holds
    /// `1..=max_tokens` tokens, fewer than `max_tokens` only when the last one is a stop id, and
    /// no stop id before its last token. (`max_tokens = 0` allows only an empty list.)
    pub fn length_problem(tokens: &[u32], max_tokens: usize, stop: &[u32]) -> Option<String> {
        let n = tokens.len();
        if n > max_tokens {
            return Some(format!(
                "{n} output tokens, more than the prompt's max_tokens {max_tokens} (was \
                 max_tokens lowered in the suite since the golden was blessed? `cargo xtask \
                 bless` rewrites it)"
            ));
        }
        if n == 0 && max_tokens > 0 {
            return Some(format!(
                "no output tokens, but the prompt's max_tokens is {max_tokens} (greedy \
                 generation emits at least one token; a stop id as the first gives one): the \
                 golden was written from a model whose logits had no argmax (NaN?)"
            ));
        }
        if let Some(&last) = tokens.last() {
            if n < max_tokens && !stop.contains(&last) {
                return Some(format!(
                    "{n} output tokens of max_tokens {max_tokens}, and the last ({last}) is not \
                     a stop id {stop:?}: greedy generation ends early only on a stop id (were \
                     max_tokens or the stop ids changed in the suite since the golden was \
                     blessed? `cargo xtask bless` rewrites it)"
                ));
            }
        }
        if let Some(i) = tokens[..n.saturating_sub(1)]
            .iter()
            .position(|t| stop.contains(t))
        {
            return Some(format!(
                "output {i} is the stop id {} but the output goes on after it ({n} tokens; \
                 were the stop ids changed in the suite since the golden was blessed? `cargo \
                 xtask bless` rewrites it)",
                tokens[i]
            ));
        }
        None
    }

    /// Oracle rows for the rule (the golden token's logit is looked up in the top-k).
    pub fn rows(&self) -> Vec<OracleRow> {
        self.top_k
            .iter()
            .map(|tk| OracleRow {
                top_k: tk.clone(),
                chosen: None,
                max_abs: None,
            })
            .collect()
    }
}

/// The reviewable YAML snapshot body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoldenSnapshot {
    /// Prompt id.
    pub prompt_id: String,
    /// Decoded output text.
    pub text: String,
    /// Number of prompt tokens.
    pub prompt_tokens: usize,
    /// Output ids.
    pub tokens: Vec<u32>,
    /// Oracle top-2 margin per output index, 4 significant digits.
    pub margins: Vec<f64>,
}

/// `info` metadata of a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldenInfo {
    /// Model file name.
    pub model_file: String,
    /// Model SHA-256.
    pub model_sha256: String,
    /// Oracle version.
    pub oracle_version: String,
}

/// The snapshot's margin of one top-k row: top-1 − top-2 logit rounded to 4 significant digits
/// ([`round_sig4`]); +∞ for a row with fewer than two candidates.
pub fn snapshot_margin(row: &[(u32, f64)]) -> f64 {
    match (row.first(), row.get(1)) {
        (Some(a), Some(b)) => round_sig4(a.1 - b.1),
        _ => f64::INFINITY,
    }
}

/// Rounds to 4 significant decimal digits (the snapshot's precision; R11). Non-finite and zero
/// values are returned unchanged. The result is the f64 nearest to the 4-digit decimal.
pub fn round_sig4(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = x.abs().log10().floor() as i32;
    let shift = 3 - e;
    if shift >= 0 {
        let s = 10f64.powi(shift);
        (x * s).round() / s
    } else {
        let s = 10f64.powi(-shift);
        (x / s).round() * s
    }
}

/// Errors reading goldens; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// Unreadable file.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Malformed sidecar or snapshot.
    #[error("{path}: malformed golden: {message}")]
    Format {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The golden was made from another model file.
    #[error("{path}: golden pinned to model SHA-256 {golden}, but the model file has {model}")]
    ShaMismatch {
        /// Golden file.
        path: PathBuf,
        /// SHA-256 in the golden.
        golden: String,
        /// SHA-256 of the model in hand.
        model: String,
    },
    /// The golden cannot be what `cargo xtask bless` writes for its prompt (written from a NaN
    /// model, truncated or hand-edited): judging against it would pass or fail on nothing.
    #[error(
        "{path}: prompt {prompt_id:?}: impossible golden: {message}; re-bless it (`cargo xtask \
         bless --prompts {prompt_id}`)"
    )]
    Impossible {
        /// The file that holds what is wrong (the snapshot for the token list).
        path: PathBuf,
        /// Prompt id.
        prompt_id: String,
        /// What is wrong.
        message: String,
    },
    /// The sidecar was written by another oracle version: its logits, which stand in for the
    /// oracle's on the golden prefix, may not be this oracle's.
    #[error(
        "{path}: prompt {prompt_id:?}: stale golden: written by oracle {golden:?}, this is \
         {oracle:?}; re-bless it (`cargo xtask bless --prompts {prompt_id}`)",
        oracle = ORACLE_VERSION
    )]
    Stale {
        /// The sidecar.
        path: PathBuf,
        /// Prompt id.
        prompt_id: String,
        /// The oracle version in the sidecar.
        golden: String,
    },
    /// A prompt of the suite has no golden.
    #[error("{path}: missing golden for prompt {prompt_id:?} (run `cargo xtask bless`)")]
    Missing {
        /// Expected sidecar path.
        path: PathBuf,
        /// Prompt id.
        prompt_id: String,
    },
}

/// `goldens/<model-stem>/<suite>/`.
pub fn golden_dir(goldens_root: &Path, model_stem: &str, suite: &str) -> PathBuf {
    goldens_root.join(model_stem).join(suite)
}

/// The model's file stem used for golden folders and plot folders (`dense-target.Q4_K_M.gguf`
/// → `dense-target.Q4_K_M`; split files drop the `-00001-of-0000N` suffix).
///
/// A file name that is not UTF-8 is percent-encoded: each byte of an invalid sequence as `%XX`
/// and each `%` as `%25` (`caf\xE9.gguf` → `caf%E9`), so two such names stay two stems (their
/// lossy forms, `caf\u{FFFD}`, were one: one golden and plot folder for two models).
pub fn model_stem(model: &Path) -> String {
    let name = model.file_name().map(stem_text).unwrap_or_default();
    let stem = name.strip_suffix(".gguf").unwrap_or(&name);
    match stem.rfind("-00001-of-") {
        Some(i) => stem[..i].to_string(),
        None => stem.to_string(),
    }
}

/// A file name as [`model_stem`] writes it: itself when UTF-8, else percent-encoded.
fn stem_text(name: &std::ffi::OsStr) -> String {
    if let Some(s) = name.to_str() {
        return s.to_string();
    }
    let mut out = String::new();
    for chunk in name.as_encoded_bytes().utf8_chunks() {
        out.push_str(&chunk.valid().replace('%', "%25"));
        for b in chunk.invalid() {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads the `model_sha256:` line of a snapshot's header (`info` map).
fn snapshot_sha(text: &str) -> Option<String> {
    snapshot_info_value(text, "model_sha256")
}

/// Reads the value of the `key:` line of a snapshot's header (`info` map), quotes removed.
fn snapshot_info_value(text: &str, key: &str) -> Option<String> {
    let header = text.strip_prefix("---")?;
    let end = header.find("\n---")?;
    header[..end].lines().find_map(|l| {
        l.trim()
            .strip_prefix(key)
            .and_then(|v| v.strip_prefix(':'))
            .map(|v| v.trim().trim_matches('"').to_string())
    })
}

/// The reviewed content of a snapshot's YAML body.
#[derive(Debug, Clone, PartialEq)]
struct SnapshotBody {
    /// `prompt_id` (quotes removed).
    prompt_id: Option<String>,
    /// `prompt_tokens`.
    prompt_tokens: usize,
    /// `tokens`.
    tokens: Vec<u32>,
    /// `margins`.
    margins: Vec<f64>,
}

/// Reads `prompt_id`, `prompt_tokens` and the `tokens` and `margins` lists of a snapshot's YAML
/// body (the reviewed truth), as insta writes them (top-level keys, list items `  - v`, floats
/// as Rust prints them: `inf` for an unbounded margin). `None` when one is missing or does not
/// parse (`tokens: []` and `margins: []` are empty lists).
fn snapshot_body(text: &str) -> Option<SnapshotBody> {
    let header = text.strip_prefix("---")?;
    let body = &header[header.find("\n---")? + 4..];
    let mut prompt_id = None;
    let mut prompt_tokens = None;
    let mut tokens: Option<Vec<u32>> = None;
    let mut margins: Option<Vec<f64>> = None;
    // the list being read: 't' tokens, 'm' margins
    let mut current = None;
    for l in body.lines() {
        if let Some(item) = l.strip_prefix("  - ") {
            match current {
                Some('t') => tokens.as_mut()?.push(item.trim().parse().ok()?),
                Some('m') => margins.as_mut()?.push(item.trim().parse().ok()?),
                _ => {}
            }
            continue;
        }
        current = None;
        // an indented line continues a multi-line scalar (the decoded `text`)
        if l.starts_with(' ') {
            continue;
        }
        let Some((key, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let list = match key {
            "prompt_id" => {
                prompt_id = Some(value.trim_matches(|c| c == '"' || c == '\'').to_string());
                continue;
            }
            "prompt_tokens" => {
                prompt_tokens = Some(value.parse().ok()?);
                continue;
            }
            "tokens" => {
                tokens = Some(Vec::new());
                't'
            }
            "margins" => {
                margins = Some(Vec::new());
                'm'
            }
            _ => continue,
        };
        match value {
            "" => current = Some(list),
            "[]" => {}
            _ => return None,
        }
    }
    Some(SnapshotBody {
        prompt_id,
        prompt_tokens: prompt_tokens?,
        tokens: tokens?,
        margins: margins?,
    })
}

fn read_sidecar(path: &Path) -> Result<Golden, GoldenError> {
    let text = std::fs::read_to_string(path).map_err(|source| GoldenError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| GoldenError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Loads the goldens of every prompt of `prompts` (a suite's, with its stop ids `stop_ids`)
/// from `dir`, checking each sidecar and snapshot against `model_sha256` (a model of
/// `limits.vocab` token ids, for a suite of `limits.top_k`), and the sidecar
/// against the reviewed snapshot (`INSTA_UPDATE=no` semantics: the `.snap` is the truth, a
/// pending `.snap.new` is never read). When the sidecar disagrees with the snapshot but a
/// pending `<prompt>.oracle.json.new` (written by `bless` next to a `.snap.new`) agrees — the
/// change was accepted with `cargo insta review` — that sidecar is promoted to
/// `<prompt>.oracle.json` and used (once it passes the checks below).
///
/// A golden that cannot be what `bless` writes is refused, never judged against: the output
/// tokens must be a greedy output for the prompt's `max_tokens` and `stop_ids`
/// ([`Golden::length_problem`]: `1..=max_tokens` tokens, fewer only when the last is a stop
/// id, none before it — an empty list, as written from a NaN model, is refused), the prompt
/// non-empty, one top-k row per token listing at least [`RowLimits::width`] ids (the suite's
/// `top_k`, or every id that is not suppressed when fewer: a narrower row, hand-edited or
/// blessed before `top_k` was raised, has no margin to judge by), each row the oracle's
/// greedy choice over the model's `vocab` ids ([`Golden::problem`]: ids in the vocabulary, each once, logits
/// descending, headed by the golden token — a token that is not its row's argmax is a
/// tampered or stale golden), the snapshot's `margins` one per token and
/// equal to the sidecar's rows' ([`snapshot_margin`]), the sidecar's `schema` [`SIDECAR_SCHEMA`]
/// and `suite` the suite's name `suite` (the folder's: a sidecar copied from another suite's
/// folder), both files' prompt id the prompt's, and the sidecar written by this oracle
/// ([`ORACLE_VERSION`]: its logits stand in for the oracle's on the golden prefix). The
/// sidecar's `model_file` is not checked: the SHA-256 is the model's identity, and a renamed
/// copy of the file is the same weights.
///
/// Errors: [`GoldenError::Missing`] for a prompt without sidecar or snapshot,
/// [`GoldenError::ShaMismatch`] when pinned to another model (checked before the content),
/// [`GoldenError::Format`] when a file does not parse, is another prompt's, suite's or
/// schema's, or the sidecar does not match the snapshot (re-run `bless`),
/// [`GoldenError::Stale`] for a sidecar of another oracle version, [`GoldenError::Impossible`]
/// for content no greedy run gives (naming the file, the prompt and what is wrong), `Io`
/// otherwise.
pub fn load_goldens(
    dir: &Path,
    suite: &str,
    prompts: &[Prompt],
    stop_ids: &[u32],
    model_sha256: &str,
    limits: RowLimits,
) -> Result<BTreeMap<String, Golden>, GoldenError> {
    let mut out = BTreeMap::new();
    for prompt in prompts {
        let id = &prompt.id;
        let side = dir.join(format!("{id}.oracle.json"));
        let snap = dir.join(format!("{id}.snap"));
        let pending = dir.join(format!("{id}.oracle.json.new"));
        for p in [&side, &snap] {
            if !p.exists() && (p != &side || !pending.exists()) {
                return Err(GoldenError::Missing {
                    path: p.clone(),
                    prompt_id: id.clone(),
                });
            }
        }
        let io = |path: &PathBuf| {
            let path = path.clone();
            move |source| GoldenError::Io { path, source }
        };
        let snap_text = std::fs::read_to_string(&snap).map_err(io(&snap))?;
        let sha = snapshot_sha(&snap_text).ok_or_else(|| GoldenError::Format {
            path: snap.clone(),
            message: "no model_sha256 in the snapshot header".into(),
        })?;
        if sha != model_sha256 {
            return Err(GoldenError::ShaMismatch {
                path: snap,
                golden: sha,
                model: model_sha256.to_string(),
            });
        }
        let body = snapshot_body(&snap_text).ok_or_else(|| GoldenError::Format {
            path: snap.clone(),
            message: "no readable prompt_tokens, tokens and margins in the snapshot body".into(),
        })?;
        // What review sees in the snapshot: the prompt's length, the tokens and (where it
        // lists one per row; a count mismatch or an empty row is `check_content`'s error) the
        // margins. A margin-only change (same tokens) is a review too: its accepted snapshot
        // must promote the pending sidecar, not keep the old one.
        // A sidecar pinned to another model does not agree either: after a `bless --force`
        // whose `.snap.new` was accepted, the old sidecar may hold the same tokens and margins,
        // and the pending one (this model's) is the reviewed snapshot's.
        let agrees = |g: &Golden| {
            g.model_sha256 == model_sha256
                && (g.prompt.len(), &g.tokens) == (body.prompt_tokens, &body.tokens)
                && (body.margins.len() != g.top_k.len()
                    || g.top_k
                        .iter()
                        .zip(&body.margins)
                        .all(|(row, &m)| row.is_empty() || snapshot_margin(row) == m))
        };
        let current = if side.exists() {
            Some(read_sidecar(&side)?)
        } else {
            None
        };
        let (g, promote) = match current {
            Some(g) if agrees(&g) => (g, false),
            other => match read_sidecar(&pending) {
                Ok(p) if agrees(&p) => (p, true),
                _ => {
                    if let Some(g) = other.as_ref().filter(|g| g.model_sha256 != model_sha256) {
                        return Err(GoldenError::ShaMismatch {
                            path: side,
                            golden: g.model_sha256.clone(),
                            model: model_sha256.to_string(),
                        });
                    }
                    return Err(GoldenError::Format {
                        path: side,
                        message: match other {
                            None => format!(
                                "no sidecar (nor a pending one that agrees) for the reviewed \
                                 snapshot {}; re-run `cargo xtask bless` and review",
                                snap.display()
                            ),
                            Some(g) => format!(
                                "the sidecar disagrees with the reviewed snapshot {}: {}; re-run \
                                 `cargo xtask bless` and review",
                                snap.display(),
                                disagreement(&g, &body)
                            ),
                        },
                    });
                }
            },
        };
        check_content(
            &snap,
            if promote { &pending } else { &side },
            suite,
            prompt,
            (stop_ids, limits),
            &body,
            &g,
        )?;
        if promote {
            std::fs::rename(&pending, &side).map_err(io(&side))?;
        }
        out.insert(id.clone(), g);
    }
    Ok(out)
}

/// What differs between a sidecar `g` and the snapshot `body` it should agree with (same
/// prompt length, same output tokens, same rounded margins), for the message that refuses them:
/// `prompt_tokens` (the snapshot holds only the prompt's length), or the first output index
/// whose token differs, or the output lengths, or the first output whose margin differs.
fn disagreement(g: &Golden, body: &SnapshotBody) -> String {
    if g.prompt.len() != body.prompt_tokens {
        return format!(
            "the prompt's length differs: the sidecar's prompt has {} tokens, the snapshot's \
             prompt_tokens is {}",
            g.prompt.len(),
            body.prompt_tokens
        );
    }
    if let Some(i) = g.tokens.iter().zip(&body.tokens).position(|(a, b)| a != b) {
        return format!(
            "output token {i} differs: {} in the sidecar, {} in the snapshot",
            g.tokens[i], body.tokens[i]
        );
    }
    if g.tokens.len() != body.tokens.len() {
        return format!(
            "the output's length differs: {} tokens in the sidecar, {} in the snapshot",
            g.tokens.len(),
            body.tokens.len()
        );
    }
    match g
        .top_k
        .iter()
        .zip(&body.margins)
        .enumerate()
        .filter(|(_, (row, _))| !row.is_empty())
        .map(|(i, (row, &m))| (i, (snapshot_margin(row), m)))
        .find(|(_, (want, m))| want != m)
    {
        Some((i, (want, m))) => format!(
            "output {i}: the sidecar's top-2 margin rounds to {want}, the reviewed snapshot \
             says {m}"
        ),
        None => "they differ".into(),
    }
}

/// The content checks of [`load_goldens`] on a golden whose sidecar `side` agrees with the
/// snapshot `snap` (same prompt length, tokens and margins, same model), for the suite's stop
/// ids and the model's and suite's row limits `(stop_ids, limits)`.
fn check_content(
    snap: &Path,
    side: &Path,
    suite: &str,
    prompt: &Prompt,
    (stop_ids, limits): (&[u32], RowLimits),
    body: &SnapshotBody,
    g: &Golden,
) -> Result<(), GoldenError> {
    let format = |path: &Path, message: String| GoldenError::Format {
        path: path.to_path_buf(),
        message,
    };
    let impossible = |path: &Path, message: String| GoldenError::Impossible {
        path: path.to_path_buf(),
        prompt_id: prompt.id.clone(),
        message,
    };
    if g.schema != SIDECAR_SCHEMA {
        return Err(format(
            side,
            format!("schema {:?}, expected {SIDECAR_SCHEMA:?}", g.schema),
        ));
    }
    if g.suite != suite {
        return Err(format(
            side,
            format!(
                "the sidecar is suite {:?}'s, not {suite:?}'s (copied from another suite's \
                 goldens folder?)",
                g.suite
            ),
        ));
    }
    if g.prompt_id != prompt.id {
        return Err(format(
            side,
            format!(
                "the sidecar is prompt {:?}'s, not {:?}'s",
                g.prompt_id, prompt.id
            ),
        ));
    }
    if g.oracle_version != ORACLE_VERSION {
        return Err(GoldenError::Stale {
            path: side.to_path_buf(),
            prompt_id: prompt.id.clone(),
            golden: g.oracle_version.clone(),
        });
    }
    if body.prompt_id.as_deref() != Some(prompt.id.as_str()) {
        return Err(format(
            snap,
            format!(
                "the snapshot is prompt {:?}'s, not {:?}'s",
                body.prompt_id.as_deref().unwrap_or("(none)"),
                prompt.id
            ),
        ));
    }
    if g.prompt.is_empty() {
        return Err(impossible(
            side,
            "empty prompt (an encoded prompt holds at least BOS)".into(),
        ));
    }
    if let Some(why) = Golden::length_problem(&body.tokens, prompt.max_tokens, stop_ids) {
        return Err(impossible(snap, why));
    }
    if g.top_k.len() != g.tokens.len() {
        return Err(format(
            side,
            format!("{} tokens but {} top-k rows", g.tokens.len(), g.top_k.len()),
        ));
    }
    if let Some(i) = g.top_k.iter().position(Vec::is_empty) {
        return Err(format(
            side,
            format!("top-k row {i} (of output token {i}) is empty"),
        ));
    }
    let width = limits.width();
    if let Some((i, row)) = g.top_k.iter().enumerate().find(|(_, r)| r.len() < width) {
        return Err(impossible(
            side,
            format!(
                "top-k row {i} (of output token {i}) lists {} ids, fewer than the {width} the \
                 suite's top_k = {} asks for (of {} ids that are not suppressed; was [suite] \
                 top_k raised since the golden was blessed?)",
                row.len(),
                limits.top_k,
                limits.rankable
            ),
        ));
    }
    if body.margins.len() != body.tokens.len() {
        return Err(impossible(
            snap,
            format!(
                "{} output tokens but {} margins",
                body.tokens.len(),
                body.margins.len()
            ),
        ));
    }
    // the rows are the oracle's greedy choices (the token its row's argmax, ids in the
    // vocabulary): named here, with the sidecar that holds them (the run named only the suite)
    if let Some(why) = g.problem(limits.vocab) {
        return Err(impossible(side, why));
    }
    // each margin equals its sidecar row's: `load_goldens` takes only a sidecar that agrees
    Ok(())
}

/// How a snapshot compared when written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotOutcome {
    /// Identical to the committed snapshot.
    Unchanged,
    /// Written (new or changed) as the `.snap` (and its sidecar), or the sidecar repaired.
    Written,
    /// New or changed, written as `.snap.new` (sidecar `.oracle.json.new`) for `cargo insta
    /// review`: the `.snap` is not changed yet.
    Pending,
    /// Differs and was not written (INSTA_UPDATE=no semantics): the run must fail.
    Mismatch,
}

/// The environment `cargo xtask bless` runs insta under (insta reads it once per process, at
/// its first assertion): `INSTA_FORCE_PASS=1`, and with `accept` `INSTA_UPDATE=always` (write
/// `.snap` directly; otherwise insta's own `INSTA_UPDATE` rules apply: `.snap.new` for review,
/// `no` in CI).
///
/// Force-pass keeps insta from panicking on a changed snapshot, and so from printing, after
/// each diff, "Stopped on the first failure. Run `cargo insta test` to run all snapshots." —
/// false for bless, which writes every prompt's golden and counts what changed. Whether a
/// snapshot changed is [`write_golden`]'s own finding (insta's comparison, recorded), with or
/// without force-pass.
pub fn bless_insta_env(accept: bool) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![("INSTA_FORCE_PASS", "1")];
    if accept {
        env.push(("INSTA_UPDATE", "always"));
    }
    env
}

/// insta's own comparison ([`insta::DefaultComparator`]) that records whether it found the
/// snapshot unchanged: [`write_golden`] reads the outcome from here, not from insta's panic
/// (none under [`bless_insta_env`]'s force-pass). With `repin` (the committed snapshot's
/// header pins another model SHA-256 or oracle version) it never matches: insta compares
/// bodies, not the `info` that holds the pin.
#[derive(Clone)]
struct Recorded {
    /// Whether the last comparison matched.
    matched: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The committed snapshot is pinned to another model or oracle: a change.
    repin: bool,
}

impl Recorded {
    fn record(&self, matched: bool) -> bool {
        let matched = matched && !self.repin;
        self.matched
            .store(matched, std::sync::atomic::Ordering::SeqCst);
        matched
    }
}

impl insta::Comparator for Recorded {
    fn matches(&self, reference: &insta::Snapshot, test: &insta::Snapshot) -> bool {
        self.record(insta::DefaultComparator.matches(reference, test))
    }
    fn matches_fully(&self, reference: &insta::Snapshot, test: &insta::Snapshot) -> bool {
        self.record(insta::DefaultComparator.matches_fully(reference, test))
    }
    fn dyn_clone(&self) -> Box<dyn insta::Comparator> {
        Box::new(self.clone())
    }
}

/// Writes (or compares) the snapshot and writes the sidecar of one golden.
///
/// `text` is the decoded output. The snapshot goes through insta (`assert_yaml_snapshot!`
/// with `snapshot_path = dir`, no module prefix, `info` = [`GoldenInfo`]), so its behaviour
/// follows `INSTA_UPDATE`: `always` writes `.snap`, `new`/`auto` writes `.snap.new` for
/// `cargo insta review`, `no` (CI) only compares. A committed `.snap` pinned to another model
/// SHA-256 or oracle version (`bless --force`) is a change even when its body is the same, and
/// it is never removed here: only insta replaces it (`always`), or the reviewer accepting the
/// `.snap.new`. The sidecar follows the snapshot: `.oracle.json` when the `.snap` holds this
/// golden, `.oracle.json.new` beside a `.snap.new`, and nothing written (nor removed) when the
/// snapshot mismatched under `no`. The outcome is the same whether insta panics on a change or
/// not (`INSTA_FORCE_PASS`, [`bless_insta_env`]): insta's comparison is recorded.
pub fn write_golden(
    dir: &Path,
    golden: &Golden,
    text: &str,
) -> Result<SnapshotOutcome, GoldenError> {
    std::fs::create_dir_all(dir).map_err(|source| GoldenError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let snap = GoldenSnapshot {
        prompt_id: golden.prompt_id.clone(),
        text: text.to_string(),
        prompt_tokens: golden.prompt.len(),
        tokens: golden.tokens.clone(),
        margins: golden.top_k.iter().map(|r| snapshot_margin(r)).collect(),
    };
    let info = GoldenInfo {
        model_file: golden.model_file.clone(),
        model_sha256: golden.model_sha256.clone(),
        oracle_version: golden.oracle_version.clone(),
    };
    let snap_path = dir.join(format!("{}.snap", golden.prompt_id));
    let before = std::fs::read_to_string(&snap_path).ok();
    // insta compares bodies only: a snapshot pinned to another model (bless --force) or oracle
    // version with the same body would pass and keep its old pin. It counts as changed instead
    // (`Recorded::repin`), so insta writes it as any change: `.snap` (`always`), `.snap.new`
    // for review with the `.snap` left as it is (`new`, `auto`), or nothing (`no`)
    let repin = before.as_deref().is_some_and(|text| {
        snapshot_sha(text).as_deref() != Some(golden.model_sha256.as_str())
            || snapshot_info_value(text, "oracle_version").as_deref()
                != Some(golden.oracle_version.as_str())
    });
    // a `.snap.new` and `.oracle.json.new` left by an earlier bless of this prompt are stale:
    // this run's outcome replaces them (pending again, accepted as `.snap`, or unchanged); kept,
    // an accepting bless left them behind and wrote its sidecar as the pending one. They are
    // put back when this run writes nothing (a mismatch under `no`)
    let mut stale = Vec::new();
    for name in [
        format!("{}.snap.new", golden.prompt_id),
        format!("{}.oracle.json.new", golden.prompt_id),
    ] {
        let path = dir.join(name);
        if let Ok(bytes) = std::fs::read(&path) {
            std::fs::remove_file(&path).map_err(|source| GoldenError::Io {
                path: path.clone(),
                source,
            })?;
            stale.push((path, bytes));
        }
    }
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(dir);
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_info(&info);
    settings.set_description(format!(
        "golden: suite {}, prompt {}",
        golden.suite, golden.prompt_id
    ));
    let matched = Recorded {
        matched: Default::default(),
        repin,
    };
    settings.set_comparator(Box::new(matched.clone()));
    let name = golden.prompt_id.clone();
    // insta panics on a change unless force-pass is set; the outcome does not depend on it
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        settings.bind(|| insta::assert_yaml_snapshot!(name, &snap));
    }));
    let matched = matched.matched.load(std::sync::atomic::Ordering::SeqCst);
    let after = std::fs::read_to_string(&snap_path).ok();
    let new_pending = dir.join(format!("{}.snap.new", golden.prompt_id)).exists();
    // a change (or a first snapshot) is written as `.snap` (`always`), as `.snap.new` (`new`,
    // `auto`), or not at all (`no`: a mismatch)
    let written = new_pending || before != after;
    let outcome = match (matched, written) {
        (_, true) if new_pending => SnapshotOutcome::Pending,
        (_, true) => SnapshotOutcome::Written,
        (true, false) => SnapshotOutcome::Unchanged,
        (false, false) => SnapshotOutcome::Mismatch,
    };
    if outcome == SnapshotOutcome::Mismatch {
        // nothing written (`no`): the earlier bless's pending files stay for review
        for (path, bytes) in stale {
            std::fs::write(&path, bytes).map_err(|source| GoldenError::Io { path, source })?;
        }
    }
    if outcome != SnapshotOutcome::Mismatch {
        // the sidecar follows the snapshot: written when the `.snap` holds this golden, kept
        // pending as `.oracle.json.new` beside a `.snap.new` until `cargo insta review`
        let side = dir.join(format!("{}.oracle.json", golden.prompt_id));
        let pending = dir.join(format!("{}.oracle.json.new", golden.prompt_id));
        let target = if new_pending { &pending } else { &side };
        let json = serde_json::to_string_pretty(golden).map_err(|e| GoldenError::Format {
            path: target.clone(),
            message: e.to_string(),
        })?;
        let json = json + "\n";
        // a snapshot that stayed the same beside a sidecar that did not (corrupt, hand-edited,
        // or missing) is a write: the repair is reported, not counted as unchanged
        let side_changed = std::fs::read_to_string(target).ok().as_deref() != Some(json.as_str());
        std::fs::write(target, &json).map_err(|source| GoldenError::Io {
            path: target.clone(),
            source,
        })?;
        if !new_pending && pending.exists() {
            let _ = std::fs::remove_file(&pending);
        }
        if outcome == SnapshotOutcome::Unchanged && side_changed {
            return Ok(SnapshotOutcome::Written);
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig4_rounding_keeps_four_significant_digits() {
        // hand-rounded decimals
        assert_eq!(round_sig4(0.003141592), 0.003142);
        assert_eq!(round_sig4(123456.0), 123500.0);
        assert_eq!(round_sig4(-2.61828), -2.618);
        assert_eq!(round_sig4(9.99996), 10.0);
        assert_eq!(round_sig4(0.0), 0.0);
        assert!(round_sig4(f64::INFINITY).is_infinite());
    }

    /// A row must list the suite's top_k ids, or every id that is not suppressed when fewer
    /// (suppressed ids outside the vocabulary or listed twice count once or not at all); bless
    /// writes at least the oracle's 16, and the suite's top_k when larger.
    #[test]
    fn row_width_is_top_k_or_every_rankable_id() {
        assert_eq!(RowLimits::new(262_144, &[0, 1], 16).width(), 16);
        let tiny = RowLimits::new(10, &[1, 2, 2, 99], 16);
        assert_eq!((tiny.rankable, tiny.width()), (8, 8));
        assert_eq!(bless_width(2), 16);
        assert_eq!(bless_width(16), 16);
        assert_eq!(bless_width(32), 32);
    }

    #[test]
    fn model_stem_drops_extension_and_shard_suffix() {
        assert_eq!(
            model_stem(Path::new("/m/dense-target.Q4_K_M.gguf")),
            "dense-target.Q4_K_M"
        );
        assert_eq!(model_stem(Path::new("big-00001-of-00003.gguf")), "big");
    }

    /// A file name that is not UTF-8 gets a stem that names its bytes (`%XX` for each invalid
    /// byte, `%25` for `%`): two such names that read the same lossily (they both had the stem
    /// `caf\u{FFFD}`, one golden and plot folder) stay apart; UTF-8 names keep their stem.
    #[cfg(unix)]
    #[test]
    fn non_utf8_file_names_keep_distinct_stems() {
        use std::os::unix::ffi::OsStrExt;
        let stem = |b: &[u8]| model_stem(Path::new(std::ffi::OsStr::from_bytes(b)));
        assert_eq!(stem(b"/m/caf\xE9.gguf"), "caf%E9");
        assert_eq!(stem(b"/m/caf\xE8.gguf"), "caf%E8");
        assert_eq!(stem(b"/m/\xFF%FE.gguf"), "%FF%25FE");
        assert_eq!(stem(b"/m/%FF\xFE.gguf"), "%25FF%FE");
        assert_eq!(stem(b"big\xE9-00001-of-00003.gguf"), "big%E9");
        assert_eq!(stem(b"/m/50%.gguf"), "50%");
        assert_eq!(stem("/m/café.gguf".as_bytes()), "café");
    }

    #[test]
    fn snapshot_body_gives_prompt_length_and_tokens() {
        let text = "---\nsource: x\ninfo:\n  model_sha256: abc\n---\nprompt_id: p\ntext: \"a\"\nprompt_tokens: 7\ntokens:\n  - 3\n  - 40\nmargins:\n  - 1.5\n";
        assert_eq!(
            snapshot_body(text),
            Some(SnapshotBody {
                prompt_id: Some("p".into()),
                prompt_tokens: 7,
                tokens: vec![3, 40],
                margins: vec![1.5],
            })
        );
    }

    #[test]
    fn snapshot_header_sha_is_found_in_info() {
        let text = "---\nsource: x\ninfo:\n  model_file: a.gguf\n  model_sha256: abc123\n---\nprompt_id: p\n";
        assert_eq!(snapshot_sha(text).as_deref(), Some("abc123"));
        assert_eq!(snapshot_sha("no header"), None);
    }
}
