//! `xtask` — the project's one CLI, run as `cargo xtask <verb>` through the alias in
//! `.cargo/config.toml`. One module per verb (style R8); to add a verb: a module with
//! `Args` (clap derive) and `run(&Args)`, one variant in [`Command`], one line in `main`.

mod bench;
mod bless;
mod calibrate;
mod compare;
mod conformance;
mod explain;
mod fixtures;
mod inspect;
mod llama_server;
#[cfg(feature = "cuda")]
mod run;
mod score;

use clap::{Parser, Subcommand};

/// The project's CLI.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The verbs. Each takes negative numbers as values (`--topk -1` is a bad value to refuse by
/// its range, not an unknown flag `-1`).
#[derive(Debug, Subcommand)]
enum Command {
    /// Dump a GGUF file: header, metadata, tensor table, per-type totals.
    #[command(allow_negative_numbers = true)]
    Inspect(inspect::Args),
    /// Build the deterministic synthetic Gemma-4 fixture models (and manifest) for CI.
    #[command(allow_negative_numbers = true)]
    Fixtures(fixtures::Args),
    /// Judge an engine against the f64 oracle on the conformance suites (exit 0/1/2).
    #[command(allow_negative_numbers = true, after_help = HTTP_ENGINE_HELP)]
    Conformance(conformance::Args),
    /// Write goldens (insta snapshots + full-precision sidecars) from the f64 oracle.
    #[command(allow_negative_numbers = true)]
    Bless(bless::Args),
    /// Teacher-forced scoring of a token sequence: per position top-k logits and the next token's logit.
    #[command(allow_negative_numbers = true)]
    Score(score::Args),
    /// Measure an engine's rounding error against the oracle and write its tie budget τ.
    #[command(allow_negative_numbers = true, after_help = HTTP_ENGINE_HELP)]
    Calibrate(calibrate::Args),
    /// The four experiments for the first fork between two modes on one prompt, and a verdict.
    #[command(allow_negative_numbers = true, after_help = HTTP_ENGINE_HELP)]
    Explain(explain::Args),
    /// Build llama.cpp's llama-server (CPU) under target/ext and start it on a loopback port.
    #[command(allow_negative_numbers = true)]
    LlamaServer(llama_server::Args),
    /// Compare two saved conformance runs (labels or report.json), forks measured against the oracle.
    #[command(allow_negative_numbers = true)]
    Compare(compare::Args),
    /// The benchmarks: oracle criterion benches on CPU, the 12B-shaped GPU decode bench when a
    /// GPU is present (feature `cuda`); every figure with its ceiling measured in the same run.
    #[command(allow_negative_numbers = true)]
    Bench(bench::Args),
    /// Greedy generation with the CUDA engine, streaming tokens, then tokens/s (feature `cuda`).
    #[command(allow_negative_numbers = true)]
    #[cfg(feature = "cuda")]
    Run(run::Args),
    /// Greedy generation with the CUDA engine: not in this build, which lacks the `cuda` feature
    /// (`cargo run -p xtask --features cuda -- run …`).
    // Hidden from the verb list; any use is refused with exit 2 (`xtask help run` shows the
    // line above, exit 0).
    #[command(hide = true, disable_help_flag = true)]
    #[cfg(not(feature = "cuda"))]
    Run(Unbuilt),
}

/// The arguments of a verb this build lacks, taken unread (`--help` included), so that the verb
/// is refused by name instead of clap's `unrecognized subcommand`.
#[cfg(not(feature = "cuda"))]
#[derive(Debug, clap::Args)]
struct Unbuilt {
    /// Whatever followed the verb (not read).
    #[arg(num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<std::ffi::OsString>,
}

/// Why `run` stops in a build without the `cuda` feature (exit 2).
#[cfg(not(feature = "cuda"))]
const NO_CUDA_RUN: &str = "the run verb drives the CUDA engine, which this build leaves out: \
     build it with the cuda feature, `cargo run -p xtask --features cuda -- run --model M \
     --prompt TEXT` (`-- run --help` for its flags)";

/// The options of an HTTP engine (`--engine llama-server=URL,…` / `openai=URL,…`), shown after
/// the flags of the verbs that take `--engine` (`suites::http::HttpSpec::parse` reads them).
const HTTP_ENGINE_HELP: &str = "\
HTTP engine options (--engine llama-server=URL,OPTION,… or openai=URL,OPTION,…):
  top-k=K          log-probabilities asked per token (default 16; at least 2)
  spec=K           the server runs MTP speculative decoding drafting K tokens: only spec:K is judged
                   (a server without a draft model is refused before judging, exit 2, and so is
                   one whose /slots are off and whose drafter probes stop within 2 tokens)
  sha256=HEX       SHA-256 of the model file the server serves (when /props names no file, or one
                   not readable here)
  timeout=SECONDS  per request (default 600, at most 604800: a week; the first requests, /props,
                   /v1/models and /slots, give up after 30 s at most and say so after 5 s, a
                   /slots that gives up stopping the run; a request still waiting after 30 s
                   says so)
  retries=N        retries on connection errors (default 4)
  concurrency=N    largest batch:N, at most 256 (default: the server's slot count up to 256,
                   else 16)
  model=NAME       the OpenAI `model` field (default: the first of /v1/models)
  allow-remote     judge a server that is not on this machine (conformance: --allow-remote)";

/// The value parser of a flag whose value is text (an engine spec, modes, prompt ids, text to
/// score): a value that is not UTF-8 is refused naming the flag and showing the value with its
/// bad bytes escaped (clap's own message, `invalid UTF-8 was detected in one or more
/// arguments`, named neither). Flags that take a path take an `OsString`/`PathBuf` instead.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Text;

impl clap::builder::TypedValueParser for Text {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        value.to_str().map(str::to_owned).ok_or_else(|| {
            let flag = arg.map_or_else(|| "an argument".to_string(), |a| format!("'{a}'"));
            clap::Error::raw(
                clap::error::ErrorKind::InvalidUtf8,
                format!("invalid value {value:?} for {flag}: not UTF-8 (this option takes text)\n"),
            )
            .with_cmd(cmd)
        })
    }
}

/// The value parser of a count flag that must be at least 1 (`score --topk`, `run
/// --max-tokens`): `0` is refused as `must be at least 1` (clap's ranged parser said `0 is not in
/// 1..18446744073709551615`), a value that is no count with the parse error.
pub(crate) fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A GGUF named on the command line that cannot be opened, in one wording for every verb: the
/// flag (none for a verb's positional FILE) and the path once, then why
/// (`--model /nope.gguf: no such file`, `--model README.md: bad magic …`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileArgError {
    /// Not a regular file (missing, a folder, a device).
    #[error(transparent)]
    NotAFile(#[from] suites::conformance::NotAFile),
    /// A file that is not a readable GGUF (an I/O error on the file itself given by its cause
    /// alone, `suites::conformance::gguf_open_cause`: the path is already named).
    #[error(
        "{}{}: {}",
        flag.map_or(String::new(), |f| format!("--{f} ")),
        path.display(),
        suites::conformance::gguf_open_cause(path, error)
    )]
    Gguf {
        /// The flag without its dashes (`model`, `draft`); `None` for a positional FILE.
        flag: Option<&'static str>,
        /// The path given.
        path: std::path::PathBuf,
        /// Why it does not open.
        error: Box<reference::gguf::GgufError>,
    },
}

/// Opens the GGUF `path` named by `--flag` (`None`: a verb's positional FILE). Errors:
/// [`FileArgError`].
pub(crate) fn open_gguf(
    flag: Option<&'static str>,
    path: &std::path::Path,
) -> Result<reference::gguf::GgufFile, FileArgError> {
    suites::conformance::NotAFile::check(flag, path)?;
    reference::gguf::GgufFile::open(path).map_err(|error| FileArgError::Gguf {
        flag,
        path: path.to_path_buf(),
        error: Box::new(error),
    })
}

/// Exit status of every verb: 0 done (conformance: all pass), 1 a finding (conformance: an entry
/// fails; bless: a golden changed; compare: a side is wrong), 2 could not do it (bad arguments,
/// unreadable input; the cause is printed as one `error: …` line).
fn main() {
    let done = match Cli::parse().command {
        Command::Inspect(a) => inspect::run(&a),
        Command::Fixtures(a) => fixtures::run(&a),
        Command::Conformance(a) => std::process::exit(conformance::run(&a)),
        Command::Bless(a) => std::process::exit(bless::run(&a)),
        Command::LlamaServer(a) => llama_server::run(&a),
        Command::Compare(a) => std::process::exit(compare::run(&a)),
        Command::Score(a) => score::run(&a).map(|code| {
            if code != 0 {
                std::process::exit(code)
            }
        }),
        Command::Calibrate(a) => std::process::exit(calibrate::run(&a)),
        #[cfg(feature = "cuda")]
        Command::Run(a) => run::run(&a),
        #[cfg(not(feature = "cuda"))]
        Command::Run(_) => Err(anyhow::anyhow!(NO_CUDA_RUN)),
        Command::Explain(a) => std::process::exit(explain::run(&a)),
        Command::Bench(a) => bench::run(&a),
    };
    if let Err(e) = done {
        print_error(error_line(&e));
        std::process::exit(2);
    }
}

/// `n` and `noun`, plural unless `n` is 1 (`1 token`, `2 tokens`), for counts in messages.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Prints `error: MESSAGE` on one line ([`one_line`]): how every verb reports what stops it.
pub(crate) fn print_error(e: impl std::fmt::Display) {
    eprintln!("error: {}", one_line(&e.to_string()));
}

/// `text` on one line: its lines trimmed, empty ones dropped, joined with `; ` (a message from a
/// library that spans lines, e.g. a parser's source snippet, stays one `error: …` line).
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The error and its causes on one line, `a: b: c`, leaving out a cause whose text ends the
/// previous one's (errors that print their source in their own message, as `GgufError::Io`);
/// a cause spanning lines is folded onto one ([`one_line`]).
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut prev = String::new();
    for cause in e.chain() {
        let text = one_line(&cause.to_string());
        if !prev.ends_with(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        prev = text;
    }
    line
}

#[cfg(test)]
mod tests {
    /// `0` is refused as "must be at least 1", a count taken, and text or a negative number
    /// refused with the parse error.
    #[test]
    fn at_least_one_refuses_zero() {
        assert_eq!(super::at_least_one("0").unwrap_err(), "must be at least 1");
        assert_eq!(super::at_least_one("3"), Ok(3));
        assert_eq!(
            super::at_least_one("-1").unwrap_err(),
            "invalid digit found in string"
        );
    }

    /// A cause already printed by its wrapper is not repeated; others are joined with ": ".
    #[test]
    fn error_line_joins_causes_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let e = anyhow::Error::new(reference::gguf::GgufError::Io {
            path: Some("/nope.gguf".into()),
            source: io,
        })
        .context("opening /nope.gguf");
        assert_eq!(
            super::error_line(&e),
            "opening /nope.gguf: I/O error on /nope.gguf: No such file"
        );
        let e = anyhow::anyhow!("inner").context("middle").context("outer");
        assert_eq!(super::error_line(&e), "outer: middle: inner");
        // a cause that only occurs inside an earlier message (not at its end) is kept
        let e = anyhow::anyhow!("x").context("x marks the spot");
        assert_eq!(super::error_line(&e), "x marks the spot: x");
    }

    /// A cause spanning lines (the toml crate's source snippet) is one line in the
    /// `error: …` line.
    #[test]
    fn multi_line_causes_are_folded_onto_one_line() {
        let e =
            anyhow::anyhow!("TOML parse error at line 2, column 1\n  |\n2 | x = \n  | ^\nbad\n")
                .context("reading f.toml");
        assert_eq!(
            super::error_line(&e),
            "reading f.toml: TOML parse error at line 2, column 1; |; 2 | x =; | ^; bad"
        );
        assert_eq!(super::one_line("a\n\n  b  \n"), "a; b");
    }
}
