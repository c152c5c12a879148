//! `cargo xtask compare RUN_A RUN_B`: compares two saved conformance runs (`report.json` of
//! two `cargo xtask conformance --label …` runs, e.g. a server in plain mode and the same server
//! with MTP speculative decoding) with every fork measured against the f64 oracle
//! (`design/conformance.md` §4, classified by `suites::rule::compare_modes`).
//!
//! For each (model, suite, prompt) present in both runs and each pair of modes (one from A, one
//! from B), the first differing output index is found (the fork). The reports are not trusted
//! there: the oracle — the model file both runs judged, SHA-256 checked — scores the shared
//! prefix (the prompt encoded again from its suite file, then the output tokens both sides
//! share) and each side's token gets its margin to the oracle's argmax from those logits
//! ([`suites::rule::judge_position`]): 0 (the argmax), within τ (a tie) or beyond (wrong). The
//! fork is then `tie-split`, `<side> wrong`, `both wrong` or `length` (a prefix; a longer side
//! beyond τ there is that side's `wrong`).
//!
//! Refused before anything is printed (exit 2): a report of another schema than
//! [`REPORT_SCHEMA`], a token id outside the model's vocabulary in a compared entry (naming
//! the report, the entry and the output index), a prompt that the suite file now encodes to
//! other token ids than a run recorded (`prompt_sha256`, or for a report written before that
//! field the token count only, with a warning; naming the prompt and both reports), runs of one
//! model stem with different files.
//!
//! Only forks and pairs with an `error` side are listed; identical outputs are counted in the
//! closing summary line. Exit code 0: no side wrong; 1: some side diverges from the oracle at a
//! fork; 2: unreadable, incompatible or uncheckable runs.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use reference::config::Config;
use reference::gguf::GgufFile;
use suites::engine::EngineError;
use suites::oracle::{Codec, Oracle, ScoreCache};
use suites::reference_engine::{GemmaCodec, ReferenceOracle};
use suites::report::{Entry, Report, Run, REPORT_SCHEMA};
use suites::rule::{
    compare_modes, judge_position, Fork, ForkClass, Judgement, PositionJudgement, RuleParams,
    Verdict,
};
use suites::runner::ModelLimits;
use suites::suite::Suite;
use suites::{Step, StepKind};

use crate::conformance::{suite_path, workspace_root};

/// What `compare --help` says is measured against the oracle, and what is taken from the
/// reports as they are.
const MEASURED_HELP: &str = "\
Measured against the f64 oracle, at the fork (the first output index where A's and B's tokens
differ) of each (model, suite, prompt, mode of A, mode of B):
  The oracle is the model file both runs judged (the recorded path, or a --model file; its
  SHA-256 must be the recorded one). It scores the shared prefix: the prompt, encoded again from
  the suite file (suites/<suite>.toml, or a --suite file; its token ids must be the ones each
  run recorded: prompt_sha256, or the token count alone for a report written before that field,
  with a warning), then the output tokens both sides share. Each side's token y there gets
  m = l[a] - l[y] from those logits, a = the oracle's argmax (suppressed ids excluded; a
  suppressed y: m = inf): m = 0 it is the argmax, m <= tau a tie, m > tau wrong.
  tau = the smaller of the two runs' tau. Class: tie-split (both sides within tau),
  '<side> wrong', 'both wrong', length (one output is a prefix of the other and the longer
  side's token there is within tau; beyond tau it is '<longer side> wrong').
Checked before anything is printed (exit 2, one error line): the report schema
(conformance-report/1), every token id of a compared entry against the model's vocabulary
(naming the report, the entry and the output index; entries whose verdict is error are not
compared and not checked), the prompts (SHA-256 of the token ids), the model files.
Taken from the reports as written: the output tokens, each run's tau, the verdicts column (the
runs' own verdicts, not judged again) and the engine gaps (each engine's own top-2 logit gap at
the fork, where the run recorded its top-5 there).
Exit code: 0 no side wrong, 1 some side wrong at a fork, 2 not compared.";

/// Flags of `compare`.
#[derive(Debug, clap::Args)]
#[command(after_help = MEASURED_HELP)]
pub struct Args {
    /// Run A: a label (target/conformance/runs/LABEL), a folder with report.json, or a file.
    pub run_a: OsString,
    /// Run B: as run A.
    pub run_b: OsString,
    /// A model file the runs judged, for a run whose recorded model path is not readable here
    /// (used when its SHA-256 is the recorded one); repeatable.
    #[arg(long)]
    pub model: Vec<PathBuf>,
    /// A suite file for a suite that is not suites/<name>.toml (matched by its `[suite] name`);
    /// repeatable.
    #[arg(long)]
    pub suite: Vec<PathBuf>,
}

/// One entry of a report, as errors name it: `REPORT: STEM / SUITE / prompt P / mode M`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryRef {
    /// The report file.
    pub report: PathBuf,
    /// Model stem.
    pub stem: String,
    /// Suite name.
    pub suite: String,
    /// Prompt id.
    pub prompt: String,
    /// Mode.
    pub mode: String,
}

impl EntryRef {
    /// Entry `e` of `run` in `report`.
    fn new(report: &Path, run: &Run, e: &Entry) -> Box<EntryRef> {
        Box::new(EntryRef {
            report: report.to_path_buf(),
            stem: run.model.stem.clone(),
            suite: run.suite.clone(),
            prompt: e.prompt.clone(),
            mode: e.mode.clone(),
        })
    }
}

impl std::fmt::Display for EntryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} / {} / prompt {} / mode {}",
            self.report.display(),
            self.stem,
            self.suite,
            self.prompt,
            self.mode
        )
    }
}

/// What one run's entry recorded of its prompt (`prompt_tokens`, `prompt_sha256`), as
/// [`CompareError::PromptChanged`] names it: `(REPORT, mode M) recorded N tokens, SHA-256 H`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPrompt {
    /// The report file.
    pub report: PathBuf,
    /// The entry's mode.
    pub mode: String,
    /// Recorded `prompt_tokens`.
    pub tokens: usize,
    /// Recorded `prompt_sha256` (`None`: a report written before it was recorded).
    pub sha256: Option<String>,
}

impl RecordedPrompt {
    /// What entry `e` of `report` recorded.
    fn of(report: &Path, e: &Entry) -> RecordedPrompt {
        RecordedPrompt {
            report: report.to_path_buf(),
            mode: e.mode.clone(),
            tokens: e.prompt_tokens,
            sha256: e.prompt_sha256.clone(),
        }
    }

    /// Whether it is (as far as it tells) the prompt of `ids`, whose SHA-256 is `sha256`.
    fn matches(&self, ids: &[u32], sha256: &str) -> bool {
        self.tokens == ids.len() && self.sha256.as_deref().is_none_or(|h| h == sha256)
    }
}

impl std::fmt::Display for RecordedPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "({}, mode {}) recorded {} tokens, ",
            self.report.display(),
            self.mode,
            self.tokens
        )?;
        match &self.sha256 {
            Some(h) => write!(f, "SHA-256 {h}"),
            None => write!(
                f,
                "no SHA-256 (a report written before prompt_sha256 was recorded)"
            ),
        }
    }
}

/// Why two runs cannot be compared (exit 2). Each names the report, run or file involved.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A run argument that is neither a file, a folder nor a label
    /// ([`crate::conformance::label_flag`]: `../../etc` read outside `runs/`).
    #[error("run {run:?}: no such file or folder, and not a label (labels are {rule})")]
    NotARun {
        /// The argument (a path need not be UTF-8; a label is).
        run: OsString,
        /// The label rule.
        rule: &'static str,
    },
    /// A label (an argument that is no file or folder) with no saved run: the folder
    /// `target/conformance/runs/LABEL` holds no `report.json`.
    #[error(
        "no conformance run is labelled {label:?} (expected {}): run `cargo xtask conformance \
         --label {label}` first, or give a report.json or its folder",
        path.display()
    )]
    NoRun {
        /// The label.
        label: String,
        /// The report it would be ([`report_path`]).
        path: PathBuf,
    },
    /// A run or entry of a report holds a value no conformance run writes: a τ outside
    /// `[0, TAU_MAX]`, an unknown mode, or a (prompt, mode) recorded twice.
    #[error("{}: {at}: {what}", report.display())]
    BadReport {
        /// The report.
        report: PathBuf,
        /// `STEM / SUITE` or `STEM / SUITE / prompt P / mode M`.
        at: String,
        /// What is wrong.
        what: String,
    },
    /// The report cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The report.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The report is not JSON of the schema.
    #[error("{}: {source}", path.display())]
    Json {
        /// The report.
        path: PathBuf,
        /// Cause.
        source: serde_json::Error,
    },
    /// The report's `"schema"` is not the one this version writes and reads.
    #[error(
        "{}: schema {found}, but this version reads {expected:?} only (suites/REPORT_SCHEMA.md)",
        path.display()
    )]
    Schema {
        /// The report.
        path: PathBuf,
        /// What it says (`"conformance-report/2"`, `null`, …), as JSON.
        found: String,
        /// [`REPORT_SCHEMA`].
        expected: &'static str,
    },
    /// Two runs of one model stem and suite judged different files.
    #[error("{stem} / {suite}: runs judged different model files ({a} vs {b})")]
    ModelsDiffer {
        /// Model stem.
        stem: String,
        /// Suite name.
        suite: String,
        /// SHA-256 in A.
        a: String,
        /// SHA-256 in B.
        b: String,
    },
    /// No (model, suite, prompt) in both runs.
    #[error("the two runs share no (model, suite, prompt)")]
    NothingShared,
    /// No readable file with the recorded SHA-256 for a model the runs judged.
    #[error(
        "model {stem} (SHA-256 {sha256}), judged by both runs: no file with that SHA-256 among \
         {tried} (pass the file with --model)"
    )]
    NoModelFile {
        /// Model stem.
        stem: String,
        /// The recorded SHA-256.
        sha256: String,
        /// The paths looked at, comma-separated.
        tried: String,
    },
    /// The model file cannot be read, or its config, tokenizer or weights loaded.
    #[error("model {}: {message}", path.display())]
    Model {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// A token id that is not in the model's vocabulary.
    #[error("{entry}: output index {index}: token id {id} is outside the vocabulary of {} (V = {vocab})", entry.stem)]
    TokenOutOfVocab {
        /// The entry.
        entry: Box<EntryRef>,
        /// Output index.
        index: usize,
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab: usize,
    },
    /// The suite file of a compared run cannot be read, or lacks the prompt.
    #[error("suite {name}: {message} (pass the suite file with --suite)")]
    Suite {
        /// Suite name as recorded.
        name: String,
        /// What failed.
        message: String,
    },
    /// The suite file in hand encodes a prompt to other token ids than a run judged (another
    /// SHA-256 of the ids, or another count): the oracle would score a prompt neither run used.
    #[error(
        "{at}: {} now encodes the prompt to {encoded} tokens \
         (SHA-256 {sha256}), not the prompt the runs judged: A {}; B {} (the suite or the \
         tokenizer changed since the runs; compare them with the suite file they ran)",
        suite_file.display(),
        sides[0],
        sides[1]
    )]
    PromptChanged {
        /// `STEM / SUITE / prompt P`.
        at: String,
        /// The suite file read.
        suite_file: PathBuf,
        /// Token count now.
        encoded: usize,
        /// [`suites::report::prompt_sha256`] of the ids now.
        sha256: String,
        /// What run A and run B recorded.
        sides: Box<[RecordedPrompt; 2]>,
    },
    /// The oracle could not score a fork.
    #[error("{at}: oracle at output index {index}: {source}")]
    Oracle {
        /// `STEM / SUITE / prompt P`.
        at: String,
        /// Fork index.
        index: usize,
        /// Cause.
        source: Box<EngineError>,
    },
}

/// Where a run label or path points: `report.json` inside.
pub fn report_path(run: &OsStr) -> PathBuf {
    let p = Path::new(run);
    if p.is_file() {
        return p.to_path_buf();
    }
    if p.is_dir() {
        return p.join("report.json");
    }
    workspace_root()
        .join("target/conformance/runs")
        .join(run)
        .join("report.json")
}

/// Reads a report of schema [`REPORT_SCHEMA`] from `path`. Errors: unreadable, not JSON,
/// another schema (checked before the rest is parsed: a later schema's report is named as
/// such, not as a missing field), or not a report.
pub fn read_report(path: &Path) -> Result<Report, CompareError> {
    let text = std::fs::read_to_string(path).map_err(|source| CompareError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let json = |source| CompareError::Json {
        path: path.to_path_buf(),
        source,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(json)?;
    let schema = value.get("schema").unwrap_or(&serde_json::Value::Null);
    if schema.as_str() != Some(REPORT_SCHEMA) {
        return Err(CompareError::Schema {
            path: path.to_path_buf(),
            found: schema.to_string(),
            expected: REPORT_SCHEMA,
        });
    }
    // parsed again from the text (not from `value`): serde's errors then name the line and
    // column of the bad value
    serde_json::from_str(&text).map_err(json)
}

/// Reads a run's report: its path and contents. Errors: a run that is neither a file, a folder
/// nor a label, a label with no saved run ([`CompareError::NoRun`]), or [`read_report`]'s.
fn load(run: &OsStr) -> Result<(PathBuf, Report), CompareError> {
    if !Path::new(run).exists() && !run.to_str().is_some_and(suites::suite::is_safe_name) {
        return Err(CompareError::NotARun {
            run: run.to_os_string(),
            rule: suites::suite::SAFE_NAME_RULE,
        });
    }
    let path = report_path(run);
    if let (false, Some(label)) = (Path::new(run).exists(), run.to_str()) {
        if !path.exists() {
            return Err(CompareError::NoRun {
                label: label.to_string(),
                path,
            });
        }
    }
    let report = read_report(&path)?;
    check_report(&path, &report)?;
    Ok((path, report))
}

/// The values of `report` (read from `path`) that compare relies on, checked before anything
/// is judged: each run's τ is a usable tie budget (`suites::budgets::tau_problem`, the rule
/// of `budgets.toml` and the suite files: a τ of −1 would call the oracle's own argmax wrong),
/// each entry's mode is one [`suites::engine::Mode::parse`] reads, no (prompt, mode)
/// appears twice in a run (its rows would be counted twice), and the model path reads back
/// (`path_bytes`, [`suites::report::ModelRef::file_path`]).
///
/// Errors: [`CompareError::BadReport`], the first found.
fn check_report(path: &Path, report: &Report) -> Result<(), CompareError> {
    for run in &report.runs {
        let bad = |at: String, what: String| CompareError::BadReport {
            report: path.to_path_buf(),
            at,
            what,
        };
        let at_run = format!("{} / {}", run.model.stem, run.suite);
        if let Some(why) = suites::budgets::tau_problem(run.tau) {
            return Err(bad(at_run, format!("tau = {why}")));
        }
        if let Err(e) = run.model.file_path() {
            return Err(bad(at_run, e.to_string()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for e in &run.entries {
            let at = || format!("{at_run} / prompt {} / mode {}", e.prompt, e.mode);
            if let Err(err) = suites::engine::Mode::parse(&e.mode) {
                return Err(bad(at(), err.to_string()));
            }
            if !seen.insert((e.prompt.as_str(), e.mode.as_str())) {
                return Err(bad(at(), "recorded twice in this run".into()));
            }
        }
    }
    Ok(())
}

/// The steps of a saved entry, with the engine's own top-5 where an event recorded it (for the
/// engine gap at a fork).
pub fn entry_steps(e: &Entry) -> Vec<Step> {
    let mut steps: Vec<Step> = e
        .tokens
        .iter()
        .map(|&token| Step {
            token,
            top_k: None,
            kind: StepKind::Decode,
        })
        .collect();
    for ev in e.events.iter().chain(e.first_divergence.iter()) {
        if let (Some(s), Some(top)) = (steps.get_mut(ev.index), &ev.engine_top5) {
            s.top_k = Some(top.iter().map(|c| (c.id, c.logit)).collect());
        }
    }
    steps
}

/// The first output index where `a` and `b` differ (one ending first counts), `None` when
/// they are identical.
pub fn first_fork(a: &[u32], b: &[u32]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

/// A judgement that holds only `at` (at its index): what [`compare_modes`] reads of a side.
fn judgement_at(at: Option<PositionJudgement>) -> Judgement {
    let mut positions = Vec::new();
    if let Some(p) = at {
        // indices before the fork are not read by compare_modes: the shared prefix
        positions = vec![p.clone(); p.index + 1];
    }
    Judgement {
        verdict: Verdict::Exact,
        positions,
        first_divergence: None,
        tie_flips: 0,
        oracle_tie_flips: 0,
        needs_rescore: None,
        error: None,
    }
}

/// The fork between two entries of one prompt, each side's token judged by `judge(index,
/// token)` — the oracle on the shared prefix `tokens[..index]` — and not by the reports
/// ([`compare_modes`] classifies the margins with `tau`). `None`: identical outputs.
///
/// Errors: `judge`'s.
pub fn fork_of<E>(
    (mode_a, ea): (&str, &Entry),
    (mode_b, eb): (&str, &Entry),
    tau: f64,
    mut judge: impl FnMut(usize, u32) -> Result<PositionJudgement, E>,
) -> Result<Option<Fork>, E> {
    let Some(index) = first_fork(&ea.tokens, &eb.tokens) else {
        return Ok(None);
    };
    let ja = match ea.tokens.get(index) {
        Some(&t) => Some(judge(index, t)?),
        None => None,
    };
    let jb = match eb.tokens.get(index) {
        Some(&t) => Some(judge(index, t)?),
        None => None,
    };
    Ok(compare_modes(
        (mode_a, &entry_steps(ea), &judgement_at(ja)),
        (mode_b, &entry_steps(eb), &judgement_at(jb)),
        tau,
    ))
}

/// One compared pair.
#[derive(Debug, Clone)]
pub struct Row {
    /// Model stem.
    pub model: String,
    /// Suite name.
    pub suite: String,
    /// Prompt id.
    pub prompt: String,
    /// Modes of A and B (without the `A:`/`B:` prefix).
    pub modes: (String, String),
    /// Verdicts of each side, as the runs recorded them.
    pub verdicts: (Verdict, Verdict),
    /// The fork (`None`: identical outputs, or an `error` side).
    pub fork: Option<Fork>,
    /// Absolute position of the fork.
    pub position: Option<usize>,
    /// The oracle's argmax at the fork (`None`: no fork).
    pub oracle_top: Option<u32>,
    /// The texts of the fork's tokens: A's, B's, the oracle's argmax.
    pub texts: [String; 3],
}

/// One model's file, opened and checked against the recorded SHA-256; its tokenizer is built
/// on the first shared prompt (every recorded prompt length is checked), its oracle on the
/// first fork that needs it.
struct ModelCtx {
    path: PathBuf,
    sha256: String,
    config: Config,
    file: Option<GgufFile>,
    codec: Option<GemmaCodec>,
    oracle: Option<ReferenceOracle>,
}

impl ModelCtx {
    /// The first of `candidates` (existing files) whose SHA-256 is `run`'s.
    fn find(run: &Run, candidates: &[PathBuf]) -> Result<ModelCtx, CompareError> {
        let model_err = |path: &Path, message: String| CompareError::Model {
            path: path.to_path_buf(),
            message,
        };
        for path in candidates.iter().filter(|p| p.is_file()) {
            let sha =
                reference::gguf::sha256_file(path).map_err(|e| model_err(path, e.to_string()))?;
            if sha != run.model.sha256 {
                continue;
            }
            let file = GgufFile::open(path).map_err(|e| model_err(path, e.to_string()))?;
            let config = Config::from_gguf(&file).map_err(|e| model_err(path, e.to_string()))?;
            return Ok(ModelCtx {
                path: path.clone(),
                sha256: sha,
                config,
                file: Some(file),
                codec: None,
                oracle: None,
            });
        }
        Err(CompareError::NoModelFile {
            stem: run.model.stem.clone(),
            sha256: run.model.sha256.clone(),
            tried: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// The error of a model that cannot be loaded.
    fn err(&self) -> impl Fn(String) -> CompareError + '_ {
        |message| CompareError::Model {
            path: self.path.clone(),
            message,
        }
    }

    /// The tokenizer (built once, from the open file).
    fn codec(&mut self) -> Result<&GemmaCodec, CompareError> {
        if self.codec.is_none() {
            let file = self
                .file
                .as_ref()
                .ok_or_else(|| (self.err())("the file was not opened".into()))?;
            let codec = GemmaCodec::from_gguf(file, &self.path).map_err(self.err())?;
            self.codec = Some(codec);
        }
        Ok(self.codec.as_ref().expect("built above"))
    }

    /// The oracle and the tokenizer (each built once; the oracle takes the open file).
    fn loaded(&mut self) -> Result<(&mut ReferenceOracle, &GemmaCodec), CompareError> {
        self.codec()?;
        if self.oracle.is_none() {
            let file = self
                .file
                .take()
                .ok_or_else(|| (self.err())("the file was not opened".into()))?;
            let model = reference::model::Model::<f64>::from_gguf_with(
                file,
                reference::model::Faults::default(),
                reference::model::LoadOptions::default(),
            )
            .map_err(|e| (self.err())(suites::reference_engine::load_message(&e)))?;
            self.oracle = Some(ReferenceOracle::from_model(model, self.sha256.clone()));
        }
        Ok((
            self.oracle.as_mut().expect("built above"),
            self.codec.as_ref().expect("built above"),
        ))
    }
}

/// Where a run's model file may be: the recorded path (exact, from `path_bytes`, when it is not
/// UTF-8: [`suites::report::ModelRef::file_path`]), that path under the workspace root when
/// relative, then the `--model` files.
fn model_candidates(run: &Run, extra: &[PathBuf]) -> Vec<PathBuf> {
    // readable: check_report refused the report otherwise
    let recorded = run
        .model
        .file_path()
        .unwrap_or_else(|_| PathBuf::from(&run.model.path));
    let mut c = vec![recorded.clone()];
    if recorded.is_relative() {
        c.push(workspace_root().join(&recorded));
    }
    c.extend(extra.iter().cloned());
    c
}

/// Every token id of the compared (non-`error`) entries of `run` (from `report`) is below
/// `vocab`. Errors: [`CompareError::TokenOutOfVocab`] for the first that is not.
pub fn check_vocab(report: &Path, run: &Run, vocab: usize) -> Result<(), CompareError> {
    for e in run.entries.iter().filter(|e| e.verdict != Verdict::Error) {
        if let Some((index, &id)) = e
            .tokens
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= vocab)
        {
            return Err(CompareError::TokenOutOfVocab {
                entry: EntryRef::new(report, run, e),
                index,
                id,
                vocab,
            });
        }
    }
    Ok(())
}

/// A comparison: both reports, the files given, the models and suites read so far.
struct Comparison<'a> {
    args: &'a Args,
    models: BTreeMap<String, ModelCtx>,
    suites: BTreeMap<String, Suite>,
    /// Each shared prompt encoded once: (model SHA-256, suite, prompt) → token ids and their
    /// [`suites::report::prompt_sha256`].
    prompt_ids: BTreeMap<(String, String, String), (Vec<u32>, String)>,
    cache: ScoreCache,
    /// Reports with a compared entry that has no `prompt_sha256` (written before it was
    /// recorded): their prompts are checked by token count only, with a warning.
    unhashed: std::collections::BTreeSet<PathBuf>,
}

impl Comparison<'_> {
    /// The suite named `name`: a `--suite` file with that `[suite] name`, else
    /// `suites/<name>.toml`.
    fn suite(&mut self, name: &str) -> Result<&Suite, CompareError> {
        if !self.suites.contains_key(name) {
            let err = |message: String| CompareError::Suite {
                name: name.to_string(),
                message,
            };
            let mut found = None;
            for p in &self.args.suite {
                let s = Suite::load(p).map_err(|e| err(e.to_string()))?;
                if s.settings.name == name {
                    found = Some(s);
                    break;
                }
            }
            let suite = match found {
                Some(s) => s,
                None => Suite::load(suite_path(name)).map_err(|e| err(e.to_string()))?,
            };
            self.suites.insert(name.to_string(), suite);
        }
        Ok(&self.suites[name])
    }

    /// Compares `run_a` (of report `pa`) with `run_b` (of `pb`), one model and suite.
    fn runs(
        &mut self,
        (pa, run_a): (&Path, &Run),
        (pb, run_b): (&Path, &Run),
    ) -> Result<Vec<Row>, CompareError> {
        if run_a.model.sha256 != run_b.model.sha256 {
            return Err(CompareError::ModelsDiffer {
                stem: run_a.model.stem.clone(),
                suite: run_a.suite.clone(),
                a: run_a.model.sha256.clone(),
                b: run_b.model.sha256.clone(),
            });
        }
        let shared = run_a
            .entries
            .iter()
            .any(|ea| run_b.entries.iter().any(|eb| eb.prompt == ea.prompt));
        if !shared {
            return Ok(Vec::new());
        }
        let sha = run_a.model.sha256.clone();
        if !self.models.contains_key(&sha) {
            let mut candidates = model_candidates(run_a, &[]);
            candidates.extend(model_candidates(run_b, &self.args.model));
            candidates.dedup();
            self.models
                .insert(sha.clone(), ModelCtx::find(run_a, &candidates)?);
        }
        let vocab = ModelLimits::from_config(&self.models[&sha].config).vocab_size;
        check_vocab(pa, run_a, vocab)?;
        check_vocab(pb, run_b, vocab)?;
        let tau = run_a.tau.min(run_b.tau);
        let mut rows = Vec::new();
        for ea in &run_a.entries {
            for eb in run_b.entries.iter().filter(|e| e.prompt == ea.prompt) {
                rows.push(self.pair((pa, run_a, ea), (pb, eb), tau)?);
            }
        }
        Ok(rows)
    }

    /// One (prompt, mode of A, mode of B).
    fn pair(
        &mut self,
        (pa, run, ea): (&Path, &Run, &Entry),
        (pb, eb): (&Path, &Entry),
        tau: f64,
    ) -> Result<Row, CompareError> {
        let mut row = Row {
            model: run.model.stem.clone(),
            suite: run.suite.clone(),
            prompt: ea.prompt.clone(),
            modes: (ea.mode.clone(), eb.mode.clone()),
            verdicts: (ea.verdict, eb.verdict),
            fork: None,
            position: None,
            oracle_top: None,
            texts: Default::default(),
        };
        if ea.verdict == Verdict::Error || eb.verdict == Verdict::Error {
            return Ok(row);
        }
        // the prompt, encoded again, must be the one the runs recorded (every shared entry, fork
        // or not: a changed suite or tokenizer makes the runs incomparable)
        self.suite(&run.suite)?;
        let suite = &self.suites[&run.suite];
        let prompt = suite.prompt(&ea.prompt).map_err(|e| CompareError::Suite {
            name: run.suite.clone(),
            message: e.to_string(),
        })?;
        let ctx = self
            .models
            .get_mut(&run.model.sha256)
            .expect("the model was found for this run");
        let key = (
            run.model.sha256.clone(),
            run.suite.clone(),
            ea.prompt.clone(),
        );
        if !self.prompt_ids.contains_key(&key) {
            let ids = ctx
                .codec()?
                .encode(&prompt.input, suite.settings.enable_thinking)
                .map_err(|message| CompareError::Suite {
                    name: run.suite.clone(),
                    message: format!("prompt {}: {message}", ea.prompt),
                })?;
            let sha = suites::report::prompt_sha256(&ids);
            self.prompt_ids.insert(key.clone(), (ids, sha));
        }
        let (ids, sha) = &self.prompt_ids[&key];
        let sides = [RecordedPrompt::of(pa, ea), RecordedPrompt::of(pb, eb)];
        if !sides.iter().all(|r| r.matches(ids, sha)) {
            return Err(CompareError::PromptChanged {
                at: format!("{} / {} / prompt {}", run.model.stem, run.suite, ea.prompt),
                suite_file: suite.path.clone(),
                encoded: ids.len(),
                sha256: sha.clone(),
                sides: Box::new(sides),
            });
        }
        for r in sides.iter().filter(|r| r.sha256.is_none()) {
            self.unhashed.insert(r.report.clone());
        }
        if first_fork(&ea.tokens, &eb.tokens).is_none() {
            return Ok(row);
        }
        let (oracle, codec) = ctx.loaded()?;
        let params = RuleParams {
            tau,
            max_tie_flips: run.max_tie_flips,
            suppressed: oracle.suppressed_ids(),
            oracle_tie_rel: suite.settings.oracle_tie_rel,
            vocab_size: oracle.vocab_size(),
        };
        let cache = &mut self.cache;
        let mut oracle_top = None;
        let oracle_err = |index: usize, source: EngineError| CompareError::Oracle {
            at: format!("{} / {} / prompt {}", run.model.stem, run.suite, ea.prompt),
            index,
            source: Box::new(source),
        };
        let fork = fork_of(
            (&format!("A:{}", ea.mode), ea),
            (&format!("B:{}", eb.mode), eb),
            tau,
            |index, token| {
                // prompt ‖ shared output ‖ token: the row before the token holds the logits on
                // the shared prefix, with `chosen` = ℓ[token]
                let mut seq = ids.clone();
                seq.extend_from_slice(&ea.tokens[..index]);
                seq.push(token);
                let rows = cache
                    .score(oracle, std::slice::from_ref(&seq), 5)
                    .map_err(|e| oracle_err(index, e))?;
                let row = rows
                    .first()
                    .and_then(|r| r.get(seq.len() - 2))
                    .filter(|r| !r.top_k.is_empty())
                    .ok_or_else(|| oracle_err(index, EngineError::Other("no oracle row".into())))?;
                let pj = judge_position(index, token, row, &params);
                oracle_top = Some(pj.oracle_top);
                Ok::<_, CompareError>(pj)
            },
        )?;
        let text = |t: Option<u32>| match t {
            Some(id) => format!("{id} {:?}", codec.decode(&[id])),
            None => "(end)".into(),
        };
        if let Some(f) = &fork {
            row.position = Some(ea.prompt_tokens + f.index);
            row.texts = [text(f.tokens.0), text(f.tokens.1), text(oracle_top)];
        }
        row.oracle_top = oracle_top;
        row.fork = fork;
        Ok(row)
    }
}

fn fmt_m(m: Option<f64>) -> String {
    match m {
        None => "–".into(),
        Some(x) if x.is_infinite() => "∞".into(),
        Some(x) => format!("{x:.4}"),
    }
}

/// What [`compare`] found: the rows, each run's τ, and the warnings to print (one per report
/// whose prompts could be checked by token count only).
type Compared = (Vec<Row>, (f64, f64), Vec<String>);

/// Every row of the two reports' shared (model, suite) runs, forks judged by the oracle.
///
/// Errors: [`CompareError`], the first found.
fn compare(a: &Args) -> Result<Compared, CompareError> {
    let (pa, ra) = load(&a.run_a)?;
    let (pb, rb) = load(&a.run_b)?;
    let mut cmp = Comparison {
        args: a,
        models: BTreeMap::new(),
        suites: BTreeMap::new(),
        prompt_ids: BTreeMap::new(),
        cache: ScoreCache::new(Some(workspace_root().join("target/conformance/cache"))),
        unhashed: Default::default(),
    };
    let mut rows = Vec::new();
    for run_a in &ra.runs {
        for run_b in rb
            .runs
            .iter()
            .filter(|r| r.suite == run_a.suite && r.model.stem == run_a.model.stem)
        {
            rows.extend(cmp.runs((&pa, run_a), (&pb, run_b))?);
        }
    }
    if rows.is_empty() {
        return Err(CompareError::NothingShared);
    }
    let taus = (
        ra.runs.first().map_or(f64::NAN, |r| r.tau),
        rb.runs.first().map_or(f64::NAN, |r| r.tau),
    );
    let warnings = cmp
        .unhashed
        .iter()
        .map(|p| {
            format!(
                "warning: {}: written before reports recorded each prompt's SHA-256 \
                 (prompt_sha256): its prompts were checked by token count only, so a prompt \
                 changed since that run to one of the same length is not noticed (run it again \
                 to check)",
                p.display()
            )
        })
        .collect();
    Ok((rows, taus, warnings))
}

/// Runs the verb; returns the exit code.
pub fn run(a: &Args) -> i32 {
    let (rows, taus, warnings) = match compare(a) {
        Ok(x) => x,
        Err(e) => {
            crate::print_error(e);
            return 2;
        }
    };
    for w in &warnings {
        eprintln!("{w}");
    }
    let (mut identical, mut forks, mut wrong, mut errors) = (0usize, 0usize, 0usize, 0usize);
    let mut lines: Vec<String> = Vec::new();
    for row in &rows {
        let error_side = row.verdicts.0 == Verdict::Error || row.verdicts.1 == Verdict::Error;
        let cells = match &row.fork {
            None if error_side => {
                errors += 1;
                ["– (an error side)", "", "", "", "", ""].map(String::from)
            }
            None => {
                // identical outputs: counted in the summary line, not listed
                identical += 1;
                continue;
            }
            Some(f) => {
                forks += 1;
                if matches!(f.class, ForkClass::Wrong(_) | ForkClass::BothWrong) {
                    wrong += 1;
                }
                let [ta, tb, top] = &row.texts;
                [
                    format!("{} (index {})", row.position.unwrap_or(0), f.index),
                    format!("{ta} / {tb}"),
                    top.clone(),
                    format!("{} / {}", fmt_m(f.margins.0), fmt_m(f.margins.1)),
                    format!("{} / {}", fmt_m(f.engine_gaps.0), fmt_m(f.engine_gaps.1)),
                    f.class.to_string(),
                ]
            }
        };
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} / {} | {} |",
            row.model,
            row.suite,
            row.prompt,
            row.modes.0,
            row.modes.1,
            row.verdicts.0.as_str(),
            row.verdicts.1.as_str(),
            cells.join(" | "),
        ));
    }
    println!(
        "A = {} · B = {}\n",
        a.run_a.to_string_lossy(),
        a.run_b.to_string_lossy()
    );
    if lines.is_empty() {
        println!("no forks: every compared pair has token-identical outputs");
    } else {
        println!(
            "| model | suite | prompt | A | B | verdicts (as recorded) | fork at | tokens (A / B) | \
             oracle argmax | oracle m (A / B) | engine gap (A / B) | class |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for l in &lines {
            println!("{l}");
        }
    }
    println!(
        "\n{} (prompt, mode A, mode B) pairs: {identical} identical outputs (not listed), \
         {forks} forks ({wrong} with a side wrong), {errors} with an error side.",
        rows.len()
    );
    println!(
        "τ = {} (A) / {} (B); at each fork the oracle scored the shared prefix: oracle m = \
         ℓ[argmax] − ℓ[token] (0: that side took the oracle's argmax; ≤ τ: a tie; > τ: wrong).",
        taus.0, taus.1
    );
    i32::from(wrong > 0)
}

#[cfg(test)]
mod tests {
    use super::{
        check_report, check_vocab, first_fork, fork_of, model_candidates, read_report, CompareError,
    };
    use std::path::{Path, PathBuf};
    use suites::report::{Entry, Report, Run};
    use suites::rule::{judge_position, ForkClass, OracleRow, RuleParams, Verdict};

    /// An `exact` entry with these tokens (what a report says, nothing checked).
    fn entry(mode: &str, tokens: &[u32]) -> Entry {
        serde_json::from_value(serde_json::json!({
            "prompt": "p", "mode": mode, "verdict": "exact", "passes": true,
            "prompt_tokens": 3, "tokens": tokens, "text": "", "identical_to_golden": null,
            "golden_fork": null, "rescored": false, "judged": tokens.len(), "tie_flips": 0,
            "oracle_tie_flips": 0, "first_divergence": null, "events": [], "margins": [],
            "wall_s": 0.0, "spec": null, "error": null
        }))
        .unwrap()
    }

    /// An oracle whose logits at every prefix are: id 7 → 5.0, id 8 → 4.9995 (a near-tie,
    /// 5e-4 below), id 9 → 2.0, every other id → 0.0 (ids < 100).
    fn judge(index: usize, token: u32) -> Result<suites::rule::PositionJudgement, String> {
        let logit = |id: u32| match id {
            7 => 5.0,
            8 => 4.9995,
            9 => 2.0,
            _ => 0.0,
        };
        let row = OracleRow {
            top_k: vec![(7, 5.0), (8, 4.9995), (9, 2.0)],
            chosen: Some(logit(token)),
            max_abs: None,
        };
        let p = RuleParams {
            tau: 1e-3,
            max_tie_flips: 3,
            suppressed: vec![],
            oracle_tie_rel: 1e-9,
            vocab_size: 100,
        };
        Ok(judge_position(index, token, &row, &p))
    }

    /// The fork is classified by the oracle's logits, whatever the reports claim: both entries
    /// say `exact` with no events (before, every such fork was a `tie-split` with margins 0).
    /// Argmax 7 vs near-tie 8 (5e-4 ≤ τ = 1e-3): tie-split; 7 vs 9 (3.0 > τ): B wrong; 9 vs
    /// 0 (3.0 and 5.0): both wrong; a prefix: length.
    #[test]
    fn forks_are_classified_by_the_oracle_not_the_report() {
        let a = entry("plain", &[1, 2, 7, 4]);
        let cases: [(&[u32], ForkClass, (f64, f64)); 3] = [
            (&[1, 2, 8, 4], ForkClass::TieSplit, (0.0, 5e-4)),
            (&[1, 2, 9], ForkClass::Wrong("B:batch:4".into()), (0.0, 3.0)),
            (&[1, 2, 0], ForkClass::Wrong("B:batch:4".into()), (0.0, 5.0)),
        ];
        for (b, class, (ma, mb)) in cases {
            let b = entry("batch:4", b);
            let f = fork_of(("A:plain", &a), ("B:batch:4", &b), 1e-3, judge)
                .unwrap()
                .unwrap();
            assert_eq!((f.index, &f.class), (2, &class), "{f:?}");
            let (ga, gb) = (f.margins.0.unwrap(), f.margins.1.unwrap());
            assert!((ga - ma).abs() < 1e-12 && (gb - mb).abs() < 1e-9, "{f:?}");
        }
        let both = fork_of(
            ("A:plain", &entry("plain", &[9])),
            ("B:plain", &entry("plain", &[0])),
            1e-3,
            judge,
        )
        .unwrap()
        .unwrap();
        assert_eq!(both.class, ForkClass::BothWrong);
        let length = fork_of(
            ("A:plain", &a),
            ("B:plain", &entry("plain", &[1, 2])),
            1e-3,
            judge,
        )
        .unwrap()
        .unwrap();
        assert_eq!(length.class, ForkClass::Length);
        assert_eq!(length.margins.0, Some(0.0), "the longer side is scored");
        // the longer side's token 9 is 3.0 below the argmax 7 (> τ): that side is wrong
        let longer_wrong = fork_of(
            ("A:plain", &entry("plain", &[1, 2, 9])),
            ("B:plain", &entry("plain", &[1, 2])),
            1e-3,
            judge,
        )
        .unwrap()
        .unwrap();
        assert_eq!(longer_wrong.class, ForkClass::Wrong("A:plain".into()));
        let same = fork_of(("A:plain", &a), ("B:plain", &a), 1e-3, judge).unwrap();
        assert!(same.is_none());
    }

    #[test]
    fn first_fork_index() {
        assert_eq!(first_fork(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_fork(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(first_fork(&[1, 2], &[1, 2, 3]), Some(2));
        assert_eq!(first_fork(&[], &[4]), Some(0));
    }

    /// A run with one entry per (mode, tokens, verdict).
    fn run(entries: Vec<Entry>) -> Run {
        let mut r: Run = serde_json::from_value(serde_json::json!({
            "model": {"path": "m.gguf", "stem": "m", "sha256": "00"}, "draft": null,
            "suite": "smoke", "engine": "e", "tau": 1e-3, "tau_source": "t",
            "max_tie_flips": 3, "goldens": null, "modes": [], "skipped_modes": [],
            "entries": [], "forks": [], "engine_s": 0.0, "oracle_s": 0.0, "cache": [0, 0]
        }))
        .unwrap();
        r.entries = entries;
        r
    }

    /// A run whose model path is not UTF-8 (`m\xE9.gguf`, written as `m\u{FFFD}.gguf` with
    /// `path_bytes` beside it) is looked up at that exact file, which exists (the lossy path
    /// was looked up, and named no file); a report without `path_bytes` reads as before, and
    /// one whose `path_bytes` are not hex is refused naming the report, the run and the field.
    #[cfg(unix)]
    #[test]
    fn a_non_utf8_model_path_is_looked_up_exactly() {
        use std::os::unix::ffi::OsStrExt;
        let d = std::env::temp_dir().join(format!("xtask-compare-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let model = d.join(std::ffi::OsStr::from_bytes(b"m\xE9.gguf"));
        std::fs::write(&model, b"model").unwrap();
        let mut r = run(vec![]);
        r.model = suites::report::ModelRef::new(&model, "00");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["model"]["path"],
            format!("{}/m\u{FFFD}.gguf", d.display())
        );
        assert_eq!(v["model"]["stem"], "m%E9");
        let bytes = model.as_os_str().as_bytes();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(v["model"]["path_bytes"], hex);
        let back: Run = serde_json::from_value(v.clone()).unwrap();
        let c = model_candidates(&back, &[]);
        assert_eq!(c[0], model);
        assert!(c[0].is_file());
        // a UTF-8 path: no path_bytes written, the path as it is
        let plain = run(vec![]);
        assert!(serde_json::to_value(&plain).unwrap()["model"]
            .get("path_bytes")
            .is_none());
        assert_eq!(model_candidates(&plain, &[])[0], PathBuf::from("m.gguf"));
        let mut bad = v;
        bad["model"]["path_bytes"] = serde_json::json!("6d0");
        let report = Report::new(vec![serde_json::from_value(bad).unwrap()]);
        let e = check_report(Path::new("/r/a.json"), &report).unwrap_err();
        assert!(matches!(e, CompareError::BadReport { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "/r/a.json: m%E9 / smoke: model path \"{}/m\u{FFFD}.gguf\": path_bytes \"6d0\" \
                 cannot be read back: Odd number of digits",
                d.display()
            )
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A token id ≥ V in a compared entry is an error naming the report, the entry and the
    /// index; an `error` entry (conformance records an engine's out-of-vocabulary id so) is
    /// not compared and not checked.
    #[test]
    fn out_of_vocabulary_ids_are_refused() {
        let r = run(vec![
            entry("plain", &[1, 99, 2]),
            entry("batch:4", &[1, 100, 2]),
        ]);
        let err = check_vocab(std::path::Path::new("/r/b.json"), &r, 100).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/r/b.json: m / smoke / prompt p / mode batch:4: output index 1: token id 100 is \
             outside the vocabulary of m (V = 100)"
        );
        let mut bad = entry("batch:4", &[1, 99_999_999]);
        bad.verdict = Verdict::Error;
        assert!(check_vocab(std::path::Path::new("b"), &run(vec![bad]), 100).is_ok());
    }

    /// Only the schema this version writes is read: `conformance-report/2` (accepted before),
    /// a missing schema and a number are refused naming the file and both schemas.
    #[test]
    fn other_schemas_are_refused() {
        let d = std::env::temp_dir().join(format!("xtask-compare-schema-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.json");
        let mut v = serde_json::to_value(Report::new(Vec::new())).unwrap();
        assert_eq!(v["schema"], suites::report::REPORT_SCHEMA);
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(read_report(&p).is_ok());
        for (schema, shown) in [
            (
                serde_json::json!("conformance-report/2"),
                "\"conformance-report/2\"",
            ),
            (serde_json::Value::Null, "null"),
            (serde_json::json!(1), "1"),
        ] {
            v["schema"] = schema;
            std::fs::write(&p, v.to_string()).unwrap();
            let err = read_report(&p).unwrap_err();
            assert!(matches!(err, CompareError::Schema { .. }), "{err:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "{}: schema {shown}, but this version reads \"conformance-report/1\" only \
                     (suites/REPORT_SCHEMA.md)",
                    p.display()
                )
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The help names what the oracle measures and the schema read.
    #[test]
    fn the_help_says_what_is_measured() {
        for needle in [
            "shared prefix",
            "m = l[a] - l[y]",
            "tie-split",
            suites::report::REPORT_SCHEMA,
            "Taken from the reports as written",
        ] {
            assert!(super::MEASURED_HELP.contains(needle), "{needle}");
        }
    }
}
