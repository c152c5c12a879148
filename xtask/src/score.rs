//! `cargo xtask score`: teacher-forced scoring of one token sequence with the oracle
//! (`reference::score::score`, `design/conformance.md` §3 "Scoring the engine's own trajectory").
//! Per position `t` it prints the top-k `(id, logit)` of the next-token logits after `seq[..=t]`
//! and the logit of `seq[t+1]`, every logit as the shortest decimal that round-trips to the same
//! f64 (Rust `{}` / serde_json with `float_roundtrip`).
//!
//! JSON shape (`--json`, schema `score/1`):
//!
//! ```json
//! { "schema": "score/1", "model": "path", "float": "f64", "top_k": 16,
//!   "tokens": [2, 818, ...],
//!   "positions": [ { "position": 0, "token": 2, "next": 818, "next_logit": 12.25,
//!                    "top_k": [[818, 12.25], [651, 11.5], ...] }, ... ] }
//! ```
//!
//! `next`/`next_logit` are `null` at the last position; `top_k` excludes suppressed ids.
//! `nonfinite_logits` counts the row's NaN/±Inf logits (0 for a finite model); a non-finite
//! logit is written as the string `"NaN"`, `"inf"` or `"-inf"`, never `null` (a model loaded
//! with `--allow-nonfinite`; NaN is left out of `top_k`). Such a row makes the verb exit 1
//! after printing, with a `non-finite logits: …` line on stderr.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use reference::config::Config;
use reference::model::{Float, LoadOptions, Model};
use reference::score::{score, PositionScore};
use reference::tokenizer::{ChatMessage, GemmaTokenizer};
use serde::{Serialize, Serializer};

/// Flags of `score`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model GGUF (default: $GEMMA4_FIXTURES/models/dense-target.Q4_K_M.gguf).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Token ids, comma-separated (e.g. `2,818,5279`).
    #[arg(long, conflicts_with = "text", value_parser = crate::Text)]
    pub tokens: Option<String>,
    /// Text to tokenize (BOS added); with `--chat`, the user message of a chat prompt.
    #[arg(long, value_parser = crate::Text)]
    pub text: Option<String>,
    /// Apply the chat template to `--text` as one user message (generation prompt added).
    #[arg(long, requires = "text", conflicts_with = "tokens")]
    pub chat: bool,
    /// Candidates per position (at least 1, at most the model's vocabulary).
    #[arg(long, default_value_t = 16, value_parser = crate::at_least_one)]
    pub topk: usize,
    /// Score with the f32 engine instead of the f64 oracle.
    #[arg(long)]
    pub f32: bool,
    /// Print JSON (schema `score/1`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Load a model with NaN/Inf weights anyway, for forensic use (conformance §9): by
    /// default loading stops at the first one, naming tensor, block and field (exit 2).
    /// Non-finite logits are then reported, never judged, blessed or passed.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// A logit of the JSON output: a number when finite, else the string `"NaN"`, `"inf"` or
/// `"-inf"` (serde_json writes a non-finite f64 as `null`, which means "last position" for
/// `next_logit`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Logit(f64);

impl Serialize for Logit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if x.is_finite() {
            s.serialize_f64(x)
        } else if x.is_nan() {
            s.serialize_str("NaN")
        } else if x > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }
}

/// One position of the JSON output.
#[derive(Debug, Serialize)]
struct Position {
    position: usize,
    token: u32,
    next: Option<u32>,
    next_logit: Option<Logit>,
    /// NaN/±Inf logits in the row (`PositionScore::nonfinite`).
    nonfinite_logits: usize,
    top_k: Vec<(u32, Logit)>,
}

/// The JSON output.
#[derive(Debug, Serialize)]
struct Output {
    schema: &'static str,
    model: String,
    float: &'static str,
    top_k: usize,
    tokens: Vec<u32>,
    positions: Vec<Position>,
}

fn run_score<F: Float>(
    model: &PathBuf,
    ids: &[u32],
    k: usize,
    load: LoadOptions,
) -> Result<Vec<PositionScore>> {
    let m = Model::<F>::load_with(model, load)
        .map_err(|e| anyhow::Error::msg(suites::reference_engine::load_message(&e)))
        .with_context(|| format!("loading {}", model.display()))?;
    let mut s = score(&m, &[ids.to_vec()], k)?;
    s.pop().context("oracle returned no scores")
}

/// The ids of `--tokens`: comma-separated, spaces around an id allowed. Errors: an empty entry
/// (`2,,5`, a leading or trailing comma: it was skipped, scoring fewer tokens than written) or
/// an entry that is not a u32, naming the entry.
fn parse_tokens(text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .enumerate()
        .map(|(i, s)| {
            let s = s.trim();
            if s.is_empty() {
                Err(format!(
                    "--tokens {text:?}: entry {} is empty (ids are separated by single commas)",
                    i + 1
                ))
            } else {
                s.parse::<u32>().map_err(|_| {
                    format!(
                        "--tokens {text:?}: entry {} ({s:?}) is not a token id",
                        i + 1
                    )
                })
            }
        })
        .collect()
}

/// `n` tokens fit the context length `context` of `model` (0: unknown, not checked). Errors:
/// the message (a sequence past the context scores positions the model was not made for).
fn within_context(n: usize, context: usize, model: &std::path::Path) -> Result<(), String> {
    if context > 0 && n > context {
        Err(format!(
            "{n} tokens exceed the context length {context} of {}: give at most {context}",
            model.display()
        ))
    } else {
        Ok(())
    }
}

/// `--topk k` fits the vocabulary of `vocab` ids of `model`. Errors: the message (no row holds
/// more than `vocab` entries, and the JSON's `top_k` would claim what the rows do not hold), in
/// the wording of conformance's `[suite] top_k` check.
fn within_vocab(k: usize, vocab: usize, model: &std::path::Path) -> Result<(), String> {
    if k > vocab {
        Err(format!(
            "--topk {k} exceeds the vocabulary of {} ({vocab} ids): give at most {vocab}",
            model.display()
        ))
    } else {
        Ok(())
    }
}

/// The stderr line for the positions of `positions` with non-finite logits, or `None` when
/// every row is finite.
fn nonfinite_summary(positions: &[Position]) -> Option<String> {
    let bad: Vec<&Position> = positions
        .iter()
        .filter(|p| p.nonfinite_logits > 0)
        .collect();
    let first = bad.first()?;
    Some(format!(
        "non-finite logits at {} of {}, first at position {} ({} NaN/Inf logits in that row)",
        crate::count(bad.len(), "position"),
        positions.len(),
        first.position,
        first.nonfinite_logits
    ))
}

/// Runs the verb; returns the exit code: 0, or 1 when a row has NaN/Inf logits (a finding
/// about the model, printed; only with `--allow-nonfinite`, which loads such a model).
pub fn run(a: &Args) -> Result<i32> {
    let model = match &a.model {
        Some(m) => m.clone(),
        None => crate::conformance::default_fixture("models/dense-target.Q4_K_M.gguf")
            .map_err(anyhow::Error::msg)?,
    };
    let file = crate::open_gguf(Some("model"), &model)?;
    let tok = GemmaTokenizer::from_gguf(&file)
        .with_context(|| format!("tokenizer of {}", model.display()))?;
    let ids: Vec<u32> = match (&a.tokens, &a.text) {
        (Some(t), _) => parse_tokens(t).map_err(anyhow::Error::msg)?,
        (None, Some(text)) if a.chat => {
            tok.encode_chat(&[ChatMessage::new("user", text.as_str())], true, false)?
        }
        (None, Some(text)) => tok.encode(text, true)?,
        (None, None) => bail!("give --tokens or --text"),
    };
    if ids.is_empty() {
        bail!("empty token sequence");
    }
    let config =
        Config::from_gguf(&file).with_context(|| format!("config of {}", model.display()))?;
    within_context(ids.len(), config.n_ctx_train, &model).map_err(anyhow::Error::msg)?;
    within_vocab(a.topk, config.n_vocab, &model).map_err(anyhow::Error::msg)?;
    drop(file);
    let load = crate::conformance::load_options(a.allow_nonfinite);
    let rows = if a.f32 {
        run_score::<f32>(&model, &ids, a.topk, load)?
    } else {
        run_score::<f64>(&model, &ids, a.topk, load)?
    };
    let positions: Vec<Position> = rows
        .into_iter()
        .enumerate()
        .map(|(t, r)| Position {
            position: t,
            token: ids[t],
            next: ids.get(t + 1).copied(),
            next_logit: r.next_logit.map(Logit),
            nonfinite_logits: r.nonfinite,
            top_k: r.top_k.into_iter().map(|(id, l)| (id, Logit(l))).collect(),
        })
        .collect();
    let summary = nonfinite_summary(&positions);
    let float = if a.f32 { "f32" } else { "f64" };
    let text = if a.json {
        let out = Output {
            schema: "score/1",
            model: model.display().to_string(),
            float,
            top_k: a.topk,
            tokens: ids,
            positions,
        };
        serde_json::to_string_pretty(&out)? + "\n"
    } else {
        table(&model, float, &ids, &positions, &tok)
    };
    write_stdout(&text).context("writing to stdout")?;
    Ok(match summary {
        Some(line) => {
            crate::print_error(line);
            1
        }
        None => 0,
    })
}

/// The human-readable table of the scores.
fn table(
    model: &std::path::Path,
    float: &str,
    ids: &[u32],
    positions: &[Position],
    tok: &GemmaTokenizer,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "model {} ({float}), {}",
        model.display(),
        crate::count(ids.len(), "token")
    );
    let piece = |id: u32| format!("{:?}", tok.token_piece(id).unwrap_or("?"));
    for p in positions {
        let next = match (p.next, p.next_logit) {
            (Some(n), Some(l)) => format!("next {n} {} logit {}", piece(n), l.0),
            _ => "next -".into(),
        };
        let bad = if p.nonfinite_logits > 0 {
            format!(" · NON-FINITE: {} NaN/Inf logits", p.nonfinite_logits)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "[{}] token {} {} · {next}{bad}",
            p.position,
            p.token,
            piece(p.token)
        );
        for (id, l) in &p.top_k {
            let _ = writeln!(s, "    {id:>7} {:<24} {}", l.0, piece(*id));
        }
    }
    s
}

/// Writes `text` to the locked stdout; a closed pipe (`… --json | head`) is a normal end of
/// output, not an error (Rust ignores SIGPIPE, so the write returns `BrokenPipe`).
fn write_stdout(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-finite logit is a string in the JSON, never `null` (which means "last
    /// position" for `next_logit`), and a row with non-finite logits is summarised for the
    /// exit-1 line; finite rows give no line.
    #[test]
    fn nonfinite_logits_are_explicit_in_json_and_summarised() {
        let pos = |position, next_logit, nonfinite_logits| Position {
            position,
            token: 2,
            next: Some(818),
            next_logit,
            nonfinite_logits,
            top_k: vec![(5, Logit(f64::INFINITY)), (6, Logit(-1.5))],
        };
        let p = pos(0, Some(Logit(f64::NAN)), 16384);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["next_logit"], "NaN");
        assert_eq!(v["nonfinite_logits"], 16384);
        assert_eq!(v["top_k"], serde_json::json!([[5, "inf"], [6, -1.5]]));
        assert_eq!(
            serde_json::to_value(Logit(f64::NEG_INFINITY)).unwrap(),
            "-inf"
        );
        let last = serde_json::to_value(pos(1, None, 0)).unwrap();
        assert!(last["next_logit"].is_null());
        assert_eq!(
            nonfinite_summary(&[pos(0, Some(Logit(1.0)), 0), p, pos(2, None, 3)]).unwrap(),
            "non-finite logits at 2 positions of 3, first at position 0 (16384 NaN/Inf logits \
             in that row)"
        );
        assert_eq!(nonfinite_summary(&[pos(0, Some(Logit(1.0)), 0)]), None);
    }

    /// `--tokens 2,,5` is refused naming the empty entry (it scored 2 tokens); a leading or
    /// trailing comma too; spaces are allowed; a bad id is named.
    #[test]
    fn token_lists_with_empty_entries_are_refused() {
        assert_eq!(parse_tokens("2, 818 ,5").unwrap(), [2, 818, 5]);
        assert_eq!(
            parse_tokens("2,,5").unwrap_err(),
            "--tokens \"2,,5\": entry 2 is empty (ids are separated by single commas)"
        );
        assert!(parse_tokens("2,5,")
            .unwrap_err()
            .contains("entry 3 is empty"));
        assert!(parse_tokens("").unwrap_err().contains("entry 1 is empty"));
        assert_eq!(
            parse_tokens("2,x").unwrap_err(),
            "--tokens \"2,x\": entry 2 (\"x\") is not a token id"
        );
    }

    /// A sequence longer than the context length is refused (it was scored past the context);
    /// one of exactly the context length and an unknown context length (0) are scored.
    #[test]
    fn sequences_beyond_the_context_are_refused() {
        let m = std::path::Path::new("m.gguf");
        assert_eq!(
            within_context(4097, 4096, m).unwrap_err(),
            "4097 tokens exceed the context length 4096 of m.gguf: give at most 4096"
        );
        within_context(4096, 4096, m).unwrap();
        within_context(5000, 0, m).unwrap();
    }
}
