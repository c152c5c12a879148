//! The library side of `cargo xtask conformance` and `cargo xtask bless`
//! (`design/conformance.md` §8, §9): load model, oracle, codec, suite, goldens and budget; run;
//! write the report and plots. Fatal problems are [`Fatal`] (exit code 2).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reference::config::{AssistantConfig, Config};
use reference::gguf::GgufFile;
use reference::model::{Faults, LoadOptions, Model};

use crate::acceptance::{acceptance_rows, DrafterRef, OracleSpec};
use crate::budgets::Budgets;
use crate::engine::{Engine, Mode, Request};
use crate::golden::{self, Golden, GoldenError, SnapshotOutcome, ORACLE_VERSION, SIDECAR_SCHEMA};
use crate::oracle::{Codec, Oracle, ScoreCache};
use crate::reference_engine::{GemmaCodec, ReferenceEngine, ReferenceOracle};
use crate::report::{ModelRef, Report, Run};
use crate::runner::{run_requests, suite_requests, ModelLimits, RunConfig, RunExtras};
use crate::suite::Suite;

/// A run that cannot be judged (exit code 2): bad arguments, unreadable model or suite, golden
/// pinned to another SHA-256, missing goldens, oracle failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Fatal(pub String);

fn fatal(e: impl std::fmt::Display) -> Fatal {
    Fatal(e.to_string())
}

/// One model to judge, with its optional MTP drafter.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    /// Target GGUF.
    pub path: PathBuf,
    /// Drafter GGUF.
    pub draft: Option<PathBuf>,
    /// Suites for this model (overrides [`Options::suites`] when set).
    pub suites: Option<Vec<PathBuf>>,
}

/// Options of a conformance run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Models to judge.
    pub models: Vec<ModelSpec>,
    /// Suite files.
    pub suites: Vec<PathBuf>,
    /// Engine name (`reference-f32`, `reference-f64`).
    pub engine: String,
    /// Modes (default: the suite's).
    pub modes: Option<Vec<Mode>>,
    /// Only these prompt ids (all if empty).
    pub prompts: Vec<String>,
    /// `goldens/` root. The `suites/` folder beside it holds the suite files whose names own
    /// their goldens folders (`suites/<name>.toml` is the suite named `<name>`:
    /// [`crate::suite::check_names_owned`]).
    pub goldens_root: PathBuf,
    /// Output folder (`target/conformance`, or `target/conformance/runs/LABEL`).
    pub out_dir: PathBuf,
    /// Scoring cache (§3: `target/conformance/cache`, shared by every labelled run).
    pub cache_dir: PathBuf,
    /// Progress bars.
    pub progress: bool,
    /// Row invariance (`--strict-invariance`, §7).
    pub strict_invariance: bool,
    /// A `slow-spec` acceptance note fails the run (`--require-acceptance`, §7).
    pub require_acceptance: bool,
    /// Run the oracle's own `spec:K` on every suite, not only those with
    /// `[suite] oracle_acceptance = true` (`--oracle-acceptance`, §7).
    pub oracle_acceptance: bool,
    /// How the models (oracle, reference engines, drafters) are loaded: by default a
    /// non-finite weight stops the run (§9); `allow_nonfinite` (`--allow-nonfinite`) loads it,
    /// and then the oracle's rows are checked instead: a NaN/Inf oracle logit stops the run
    /// (exit 2), never judged.
    pub load: LoadOptions,
}

/// Builds the engine named `name` for `model`, loading its files with `load` (the CPU and
/// CUDA engines; an HTTP engine loads nothing here).
pub fn make_engine(
    name: &str,
    model: &ModelSpec,
    load: LoadOptions,
) -> Result<Box<dyn Engine>, Fatal> {
    match name {
        "reference-f32" => Ok(Box::new(
            ReferenceEngine::<f32>::load_with(&model.path, load)
                .map_err(fatal)?
                .with_draft(model.draft.clone()),
        )),
        "reference-f64" => Ok(Box::new(
            ReferenceEngine::<f64>::load_with(&model.path, load)
                .map_err(fatal)?
                .with_draft(model.draft.clone()),
        )),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Box::new(
            crate::cuda_engine::CudaEngineAdapter::load_with_options(
                &model.path,
                model.draft.as_deref(),
                load,
            )
            .map_err(fatal)?,
        )),
        #[cfg(feature = "http")]
        other if crate::http::is_http_spec(other) => {
            crate::http::engine_from_spec(other, &model.path).map_err(fatal)
        }
        other => Err(unknown_engine(other)),
    }
}

/// The error for an engine name this build does not know, listing those it knows.
fn unknown_engine(name: &str) -> Fatal {
    Fatal(
        format!(
            "unknown engine {name:?} (this build knows reference-f32, reference-f64{}{})",
            if cfg!(feature = "http") {
                ", llama-server=URL, openai=URL"
            } else {
                ""
            },
            if cfg!(feature = "cuda") {
                ", cuda"
            } else {
                "; cuda needs the `cuda` feature"
            }
        ) + if name == "cuda-fast" {
            "; cuda-fast is `--engine cuda` run with GEMMA4_TC_DIGITS=2"
        } else {
            ""
        },
    )
}

/// Checks an `--engine` value without loading a model or connecting: a name this build knows
/// ([`make_engine`]'s), or an HTTP engine spec whose URL and every option parse and whose host
/// is allowed (`crate::http::check_spec`). Conformance, calibrate and explain call it before
/// they read any model file, so a bad spec is reported first, not after the models are fixed.
///
/// Errors: [`Fatal`] with the message [`make_engine`] gives for the same value (`unknown
/// engine …`, `bad engine spec …`, the loopback rule).
pub fn check_engine(name: &str) -> Result<(), Fatal> {
    match name {
        "reference-f32" | "reference-f64" => Ok(()),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(()),
        #[cfg(feature = "http")]
        other if crate::http::is_http_spec(other) => {
            crate::http::check_spec(other).map(|_| ()).map_err(fatal)
        }
        other => Err(unknown_engine(other)),
    }
}

/// Keeps the asked prompt ids of `suite`; returns false when the suite has none of them (it is
/// then skipped). Errors when no suite would have any: checked by the caller's ids being
/// non-empty and every suite skipped is not an error here (a prompt id belongs to one suite).
fn retain_prompts(suite: &mut Suite, ids: &[String]) -> Result<bool, Fatal> {
    if ids.is_empty() {
        return Ok(true);
    }
    let have: Vec<String> = ids
        .iter()
        .filter(|id| suite.prompts.iter().any(|p| &p.id == *id))
        .cloned()
        .collect();
    if have.is_empty() {
        return Ok(false);
    }
    suite.retain_ids(&have).map_err(fatal)?;
    Ok(true)
}

/// The suite files model `m` runs: its own, or `opts.suites`.
pub(crate) fn model_suites<'a>(opts: &'a Options, m: &'a ModelSpec) -> &'a [PathBuf] {
    m.suites.as_deref().unwrap_or(&opts.suites)
}

/// The folder of the named suites: `suites/` beside the goldens root (`goldens/`), where
/// `--suite <name>` finds `<name>.toml`.
fn named_suites_dir(goldens_root: &Path) -> PathBuf {
    goldens_root
        .parent()
        .unwrap_or_else(|| Path::new(""))
        .join("suites")
}

/// Every suite file the run reads (each model's suites, or `opts.suites`), each read once, in
/// first-use order, files compared canonically ([`crate::suite::same_file`]). Errors: the first
/// suite that does not load ([`crate::suite::SuiteError`]), one file given twice to a model or
/// two files with one `[suite] name` ([`crate::suite::check_distinct`]), a file with the name of
/// another file in `suites/` ([`crate::suite::check_names_owned`]: it would share its goldens).
pub(crate) fn load_suites(opts: &Options) -> Result<Vec<Suite>, Fatal> {
    let mut out: Vec<Suite> = Vec::new();
    for m in &opts.models {
        for p in model_suites(opts, m) {
            if !out.iter().any(|s| crate::suite::same_file(&s.path, p)) {
                out.push(Suite::load(p).map_err(fatal)?);
            }
        }
    }
    let lists: Vec<&[PathBuf]> = opts.models.iter().map(|m| model_suites(opts, m)).collect();
    crate::suite::check_distinct(&lists, &out).map_err(fatal)?;
    crate::suite::check_names_owned(&named_suites_dir(&opts.goldens_root), &out).map_err(fatal)?;
    Ok(out)
}

/// The suite of `loaded` ([`load_suites`]) read from `path`, with only the asked prompt ids
/// kept ([`retain_prompts`]); `None` when it has none of them (the suite is skipped).
pub(crate) fn suite_for(
    loaded: &[Suite],
    path: &Path,
    ids: &[String],
) -> Result<Option<Suite>, Fatal> {
    let mut suite = loaded
        .iter()
        .find(|s| crate::suite::same_file(&s.path, path))
        .cloned()
        .ok_or_else(|| Fatal(format!("{}: suite not loaded", path.display())))?;
    Ok(retain_prompts(&mut suite, ids)?.then_some(suite))
}

/// Every asked prompt id (`opts.prompts`) must name a prompt of at least one suite the run
/// reads (`suites`, from [`load_suites`]): a mistyped id is an error naming it and the suites
/// searched, not a run that scores nothing and passes.
fn check_prompt_ids(opts: &Options, suites: &[Suite]) -> Result<(), Fatal> {
    if opts.prompts.is_empty() {
        return Ok(());
    }
    let unknown: Vec<&str> = opts
        .prompts
        .iter()
        .filter(|id| {
            !suites
                .iter()
                .any(|s| s.prompts.iter().any(|p| &p.id == *id))
        })
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let searched: Vec<String> = suites
        .iter()
        .map(|s| s.path.display().to_string())
        .collect();
    Err(Fatal(format!(
        "unknown prompt id(s) {} (not in {})",
        unknown.join(", "),
        searched.join(", ")
    )))
}

/// A model's file name (`dense-target.Q4_K_M.gguf`), as errors name it.
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// One suite as a model runs it, built by the up-front check ([`check_models`]): the suite
/// with only the asked prompts kept ([`suite_for`]) and its requests, encoded and checked
/// against the model ([`suite_requests`]). The run judges exactly these requests
/// ([`crate::runner::run_requests`]): each prompt is encoded once per (suite, model).
struct PreparedSuite {
    /// The suite (asked prompts only).
    suite: Suite,
    /// Its requests for the model, in prompt order.
    reqs: Vec<Request>,
}

/// A model file opened once ([`open_model`]): the GGUF, its configuration and its codec.
pub(crate) struct OpenedModel {
    /// The GGUF: memory-mapped, metadata and tensor table parsed, no weight read or decoded.
    pub(crate) file: GgufFile,
    /// Its Gemma-4 configuration.
    pub(crate) config: Config,
    /// Its tokenizer and chat template.
    pub(crate) codec: GemmaCodec,
}

/// A file named by a command-line flag that is not a regular file: one wording for every verb
/// (`--model /nope.gguf: no such file`, `--draft DIR: is a directory, not a file`; a verb's
/// positional FILE without the flag, `/nope.gguf: no such file`), the path once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {why}", flag.map_or(String::new(), |f| format!("--{f} ")), path.display())]
pub struct NotAFile {
    /// The flag without its dashes (`model`, `draft`); `None` for a positional argument.
    pub flag: Option<&'static str>,
    /// The path given.
    pub path: PathBuf,
    /// `no such file`, `is a directory, not a file` or `not a regular file`.
    pub why: &'static str,
}

impl NotAFile {
    /// `Ok` when `path` is a regular file (links followed); else what it is instead, for
    /// `--flag` (`None`: a positional argument).
    pub fn check(flag: Option<&'static str>, path: &Path) -> Result<(), NotAFile> {
        if path.is_file() {
            return Ok(());
        }
        let why = if path.is_dir() {
            "is a directory, not a file"
        } else if path.exists() {
            "not a regular file"
        } else {
            "no such file"
        };
        Err(NotAFile {
            flag,
            path: path.to_path_buf(),
            why,
        })
    }
}

/// The message of `e`, an error opening the GGUF `path`, for a line that names `path` already:
/// an I/O error on `path` itself is its cause alone (`Permission denied (os error 13)`, not `I/O
/// error on PATH: …` after the path); any other error (one on another shard of a split file
/// included) in full.
pub fn gguf_open_cause(path: &Path, e: &reference::gguf::GgufError) -> String {
    match e {
        reference::gguf::GgufError::Io {
            path: Some(p),
            source,
        } if p == path => source.to_string(),
        e => e.to_string(),
    }
}

/// Opens the model file `path` once for the up-front check and the run: its configuration and
/// tokenizer read from that one open file, which the caller keeps to build the oracle's model
/// (`ReferenceOracle::from_gguf`) instead of opening the file again. Errors: the file is not a
/// regular file ([`NotAFile`], `--model PATH: no such file`), or its GGUF, configuration or
/// tokenizer does not read (the cause, naming the path).
pub(crate) fn open_model(path: &Path) -> Result<OpenedModel, Fatal> {
    NotAFile::check(Some("model"), path).map_err(fatal)?;
    let cannot = |message: String| {
        fatal(crate::engine::EngineError::Load {
            path: path.to_path_buf(),
            message,
        })
    };
    let file = GgufFile::open(path).map_err(|e| cannot(gguf_open_cause(path, &e)))?;
    let config = Config::from_gguf(&file).map_err(|e| cannot(e.to_string()))?;
    let codec = GemmaCodec::from_gguf(&file, path).map_err(Fatal)?;
    Ok(OpenedModel {
        file,
        config,
        codec,
    })
}

/// A model after the up-front check ([`check_models`]): the GGUF it opened, its codec and the
/// suites it runs, in the order it runs them (a suite with none of the asked prompts left out).
///
/// The open file is kept, not the oracle: a model is prepared from it (norm vectors decoded)
/// and hashed only when its turn comes, so the check holds no model for every model of the
/// run — the file's parsed metadata (~28 MB heap for a 262 144-id Gemma-4 vocabulary, ~2 MB
/// for the fixtures; weights stay on disk, memory-mapped) beside the codec it already kept
/// (~68 MB for that vocabulary).
struct CheckedModel {
    /// The model file, opened once by the check; the run's oracle (conformance) or f64 engine
    /// (bless) is made from it.
    file: GgufFile,
    /// The model's tokenizer and chat template.
    codec: GemmaCodec,
    /// Its suites with their requests.
    suites: Vec<PreparedSuite>,
}

/// Every model against its suites, before anything runs: the model file exists and its
/// configuration and tokenizer read, and in every suite it runs the asked prompts fit its
/// context length, the stop ids lie in its vocabulary and top_k does not exceed it
/// ([`suite_requests`], the error naming the model file); with `drafters`, each model's drafter
/// reads and pairs with it ([`check_drafter`]). Returns, in `opts.models` order, each model's
/// codec and the requests it was checked with ([`CheckedModel`]), which the run then uses.
fn check_models(
    opts: &Options,
    suites: &[Suite],
    drafters: bool,
) -> Result<Vec<CheckedModel>, Fatal> {
    let mut out = Vec::new();
    for m in &opts.models {
        let OpenedModel {
            file,
            config,
            codec,
        } = open_model(&m.path)?;
        let limits = ModelLimits::from_config(&config);
        let mut prepared = Vec::new();
        for p in model_suites(opts, m) {
            if let Some(suite) = suite_for(suites, p, &opts.prompts)? {
                let reqs = suite_requests(&suite, &codec, limits)
                    .map_err(|e| fatal(e.for_model(&file_name(&m.path))))?;
                prepared.push(PreparedSuite { suite, reqs });
            }
        }
        if let (true, Some(d)) = (drafters, &m.draft) {
            check_drafter(&config, &m.path, d)?;
        }
        out.push(CheckedModel {
            file,
            codec,
            suites: prepared,
        });
    }
    Ok(out)
}

/// Every `[suite.acceptance_floor]` key meant for a drafter of the run names it exactly
/// ([`crate::acceptance::floor_for`]): a key in another case (`"dense-assistant.f32"`) left
/// the drafter without a floor, and `--require-acceptance` passed a slow drafter.
fn check_floor_keys(opts: &Options, suites: &[Suite]) -> Result<(), Fatal> {
    for m in &opts.models {
        let Some(d) = &m.draft else { continue };
        for p in model_suites(opts, m) {
            if let Some(s) = suites.iter().find(|s| crate::suite::same_file(&s.path, p)) {
                crate::acceptance::floor_for(
                    &s.path.display().to_string(),
                    &s.settings.acceptance_floor,
                    &golden::model_stem(d),
                )
                .map_err(fatal)?;
            }
        }
    }
    Ok(())
}

/// Every model's `goldens/<stem>/budgets.toml` ([`Budgets::load`]), in `opts.models` order:
/// read before any model runs, so that a bad file for a later model stops the run before the
/// earlier models have spent their time (and written nothing).
fn load_budgets(opts: &Options) -> Result<Vec<Budgets>, Fatal> {
    opts.models
        .iter()
        .map(|m| {
            let stem = golden::model_stem(&m.path);
            Budgets::load(
                &opts
                    .goldens_root
                    .join(stem)
                    .join(crate::budgets::BUDGETS_FILE),
            )
            .map_err(fatal)
        })
        .collect()
}

/// The drafter `draft` is a readable assistant GGUF that pairs with the target `model` (config
/// `target`, the loaded oracle's; `AssistantConfig::check_pairing`): checked once up front, so a
/// truncated or mismatched drafter stops the run with its cause instead of failing every spec:K
/// entry with "error"; a missing one is [`NotAFile`] (`--draft PATH: no such file`).
pub(crate) fn check_drafter(target: &Config, model: &Path, draft: &Path) -> Result<(), Fatal> {
    NotAFile::check(Some("draft"), draft).map_err(fatal)?;
    let bad = |e: &dyn std::fmt::Display| Fatal(format!("drafter {}: {e}", draft.display()));
    let a = reference::gguf::GgufFile::open(draft)
        .map_err(|e| bad(&gguf_open_cause(draft, &e)))
        .and_then(|f| AssistantConfig::from_gguf(&f).map_err(|e| bad(&e)))?;
    a.check_pairing(target).map_err(|e| {
        Fatal(format!(
            "drafter {} does not pair with {}: {e}",
            draft.display(),
            model.display()
        ))
    })
}

/// The output folder `dir` of a run, checked before anything runs: created if missing, and a
/// probe file written in it and removed. A read-only or otherwise unwritable folder was found
/// only after the whole run (one `plot not written` warning per prompt, then the report's
/// error).
///
/// Errors: [`Fatal`], one line naming the folder and the cause (`a file, not a folder` when it
/// is one).
pub fn check_out_dir(dir: &Path) -> Result<(), Fatal> {
    let cannot = |e: std::io::Error| {
        Fatal(format!(
            "output folder {}: cannot write there: {e}{}",
            dir.display(),
            if dir.is_file() {
                " (a file, not a folder)"
            } else {
                ""
            }
        ))
    };
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let probe = dir.join(format!(".write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe").map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)
}

/// The lock file of an output folder ([`lock_out_dir`]).
pub const OUT_LOCK_FILE: &str = ".conformance.lock";

/// Takes the output folder `dir` (made and probed by [`check_out_dir`]) for one run: an
/// exclusive OS file lock (`flock` on Unix, `LockFileEx` on Windows) on `dir/.conformance.lock`,
/// held while the returned file is open. Two runs writing one folder mixed their outputs (the
/// report the last writer's, the other's plots removed by it as stale). The lock goes with the
/// process, so a run that crashed or was killed leaves a lock file that blocks nobody.
///
/// Errors: [`Fatal`] when another process holds the lock (naming the folder and the lock file)
/// or the lock file cannot be opened or locked.
pub fn lock_out_dir(dir: &Path) -> Result<std::fs::File, Fatal> {
    let path = dir.join(OUT_LOCK_FILE);
    let cannot = |e: std::io::Error| {
        Fatal(format!(
            "output folder {}: cannot lock {}: {e}",
            dir.display(),
            path.display()
        ))
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(cannot)?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Fatal(format!(
            "output folder {}: another conformance run is writing there (it holds the lock on \
             {}): wait for it to end, or give this run another --out or --label",
            dir.display(),
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => Err(cannot(e)),
    }
}

/// Runs the conformance suite(s) on every model and writes `report.json`, `report.md` and the
/// plots under `opts.out_dir`, holding the folder's lock ([`lock_out_dir`]) from the start. Returns the report (its `summary.exit_code` is 0 or 1).
///
/// Checked before anything is read, in this order: the engine spec ([`check_engine`]: a bad
/// HTTP spec is reported before a missing model file), the output folder ([`check_out_dir`],
/// then its lock: another run writing there is an error), the suites, prompt ids, floor keys, budgets, then the models. (The cache folder is not
/// checked: a failed cache write is a warning, [`crate::oracle::write_cache_entry`].)
pub fn conformance(opts: &Options) -> Result<Report, Fatal> {
    check_engine(&opts.engine)?;
    check_out_dir(&opts.out_dir)?;
    // held until the report and plots are written (dropped when this function returns)
    let _lock = lock_out_dir(&opts.out_dir)?;
    let suites = load_suites(opts)?;
    check_prompt_ids(opts, &suites)?;
    check_floor_keys(opts, &suites)?;
    let all_budgets = load_budgets(opts)?;
    let models = check_models(opts, &suites, true)?;
    run_models(opts, models, &all_budgets)
}

/// The run of [`conformance`] once everything is checked: every model of `opts` (with its
/// [`CheckedModel`] and budgets, in `opts.models` order) on the suites and requests of its
/// check; writes the report.
fn run_models(
    opts: &Options,
    models: Vec<CheckedModel>,
    all_budgets: &[Budgets],
) -> Result<Report, Fatal> {
    let mut runs: Vec<Run> = Vec::new();
    for ((m, checked), budgets) in opts.models.iter().zip(models).zip(all_budgets) {
        let mut oracle =
            ReferenceOracle::from_gguf_with(&m.path, checked.file, opts.load).map_err(fatal)?;
        if opts.load.allow_nonfinite {
            for PreparedSuite { reqs, .. } in &checked.suites {
                check_oracle_prompts(&mut oracle, &m.path, reqs)?;
            }
        }
        let codec = &checked.codec;
        let mut engine = make_engine(&opts.engine, m, opts.load)?;
        let sha = oracle.model_sha256().to_string();
        let stem = golden::model_stem(&m.path);
        let drafter = match &m.draft {
            Some(d) => Some(DrafterRef {
                stem: golden::model_stem(d),
                sha256: reference::gguf::sha256_file(d)
                    .map_err(|e| Fatal(format!("{}: {e}", d.display())))?,
            }),
            None => None,
        };
        // the f64 assistant for the oracle's own spec:K, loaded on first use
        let mut assistant: Option<Result<reference::spec::Assistant<f64>, String>> = None;
        for PreparedSuite { suite, reqs } in &checked.suites {
            let gdir = golden::golden_dir(&opts.goldens_root, &stem, &suite.settings.name);
            let goldens = if gdir.exists() {
                Some(
                    golden::load_goldens(
                        &gdir,
                        &suite.settings.name,
                        &suite.prompts,
                        &suite.settings.stop_ids,
                        &sha,
                        golden::RowLimits::new(
                            oracle.vocab_size(),
                            &oracle.suppressed_ids(),
                            suite.settings.top_k,
                        ),
                    )
                    .map_err(fatal)?,
                )
            } else {
                None
            };
            let (tau, tau_source) = match budgets.0.get(engine.name()) {
                Some(b) => (
                    b.tau,
                    format!(
                        "goldens/{stem}/budgets.toml [{}] (calibrated {} on {})",
                        engine.name(),
                        b.date,
                        b.suite
                    ),
                ),
                None => (
                    suite.settings.tie_budget,
                    "suite default (no calibration for this engine)".to_string(),
                ),
            };
            let cfg = RunConfig {
                modes: opts
                    .modes
                    .clone()
                    .unwrap_or_else(|| suite.settings.modes.clone()),
                tau,
                tau_source,
                model: ModelRef::new(&m.path, &sha),
                draft: m
                    .draft
                    .as_ref()
                    .zip(drafter.as_ref())
                    .map(|(d, r)| ModelRef::new(d, &r.sha256)),
                goldens_dir: goldens.as_ref().map(|_| gdir.display().to_string()),
                progress: opts.progress,
            };
            let mut cache = ScoreCache::new(Some(opts.cache_dir.clone()));
            let mut run = run_requests(
                engine.as_mut(),
                &mut oracle,
                codec,
                &mut cache,
                suite,
                reqs,
                goldens.as_ref(),
                &cfg,
                &RunExtras {
                    strict_invariance: opts.strict_invariance,
                },
            )
            .map_err(fatal)?;
            if let (Some(d), Some(path)) = (&drafter, &m.draft) {
                let has_spec = run.modes.iter().any(|x| x.starts_with("spec:"));
                // the oracle's spec:K is an f64 generation per prompt and K: run by default
                // only for a drafter the suite sets a floor for, on a suite that asks for it
                let suite_file = suite.path.display().to_string();
                let floors = &suite.settings.acceptance_floor;
                let floor =
                    crate::acceptance::floor_for(&suite_file, floors, &d.stem).map_err(fatal)?;
                if let (true, true, Some(w)) = (
                    has_spec,
                    opts.require_acceptance,
                    crate::acceptance::no_floor_warning(&suite_file, floors, &d.stem),
                ) {
                    eprintln!("warning: {w}");
                }
                let want_oracle =
                    opts.oracle_acceptance || (suite.settings.oracle_acceptance && floor.is_some());
                if has_spec && want_oracle && assistant.is_none() {
                    assistant = Some(
                        reference::spec::Assistant::<f64>::load_with(path, opts.load)
                            .and_then(|a| a.check_target(oracle.model().config()).map(|_| a))
                            .map_err(|e| format!("{}: {e}", path.display())),
                    );
                }
                let mut os = match assistant.as_ref().filter(|_| want_oracle) {
                    Some(Ok(a)) => Some(OracleSpec {
                        target: oracle.model(),
                        assistant: a,
                        target_sha256: sha.clone(),
                        drafter_sha256: d.sha256.clone(),
                        dir: Some(opts.cache_dir.clone()),
                        hits: 0,
                        misses: 0,
                    }),
                    _ => None,
                };
                let t0 = std::time::Instant::now();
                run.acceptance =
                    acceptance_rows(&run, reqs, d, floor, os.as_mut(), goldens.as_ref())
                        .map_err(fatal)?;
                run.oracle_s += t0.elapsed().as_secs_f64();
                if let (Some(Err(e)), true) = (&assistant, want_oracle) {
                    for a in &mut run.acceptance {
                        a.note = Some(format!("oracle acceptance not computed: {e}"));
                    }
                }
            }
            write_plots(&opts.out_dir, &run);
            runs.push(run);
        }
    }
    let report = Report::with_acceptance(runs, opts.require_acceptance);
    // the previous report's plots, read before it is replaced: those this run does not draw
    // again are removed once the new report is written
    let previous = crate::plot::previous_plots(&opts.out_dir);
    report
        .write(&opts.out_dir)
        .map_err(|e| Fatal(format!("{}: {e}", opts.out_dir.display())))?;
    let current = crate::plot::report_plots(&opts.out_dir, &report);
    let (removed, failed) = crate::plot::remove_stale_plots(&previous, &current);
    if !removed.is_empty() {
        eprintln!(
            "note: removed {} of the previous report in {} (not drawn by this run): {}",
            match removed.len() {
                1 => "1 plot".to_string(),
                n => format!("{n} plots"),
            },
            opts.out_dir.display(),
            removed
                .iter()
                .map(|p| p
                    .strip_prefix(&opts.out_dir)
                    .unwrap_or(p)
                    .display()
                    .to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for (p, e) in failed {
        eprintln!(
            "warning: stale plot {} (of the previous report) not removed: {e}",
            p.display()
        );
    }
    Ok(report)
}

/// With `--allow-nonfinite` the oracle may give NaN/Inf logits: every prompt of `reqs` is
/// scored by the oracle before the engine runs, and a non-finite row stops the run naming
/// model, prompt and position (a row past the prompt is caught when the oracle scores it:
/// `ReferenceOracle`'s `score` refuses it). Errors: [`Fatal`].
fn check_oracle_prompts(
    oracle: &mut ReferenceOracle,
    model: &Path,
    reqs: &[Request],
) -> Result<(), Fatal> {
    for r in reqs.iter().filter(|r| !r.prompt.is_empty()) {
        let rows = reference::score::score(oracle.model(), std::slice::from_ref(&r.prompt), 1)
            .map_err(fatal)?;
        let bad = rows
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, p)| p.nonfinite > 0);
        if let Some((t, p)) = bad {
            return Err(Fatal(format!(
                "model {}: prompt {:?}: the oracle's logits are non-finite at prompt position \
                 {t} ({} NaN/Inf logits in that row): the run cannot be judged",
                model.display(),
                r.id,
                p.nonfinite
            )));
        }
    }
    Ok(())
}

fn write_plots(out_dir: &Path, run: &Run) {
    let mut by_prompt: BTreeMap<&str, Vec<&crate::report::Entry>> = BTreeMap::new();
    for e in &run.entries {
        by_prompt.entry(&e.prompt).or_default().push(e);
    }
    for (p, entries) in by_prompt {
        let path = crate::plot::plot_path(out_dir, &run.model.stem, &run.suite, p);
        if let Err(e) = crate::plot::margin_plot(&path, p, &entries, run.tau) {
            eprintln!("warning: plot not written: {e}");
            // an earlier run's plot there (or a partial one) is not this run's
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Result of blessing one suite on one model.
#[derive(Debug, Clone, Default)]
pub struct BlessSummary {
    /// Snapshots unchanged.
    pub unchanged: usize,
    /// Snapshots written as `.snap` (or their sidecar repaired).
    pub written: usize,
    /// Snapshots new or changed and written as `.snap.new`, pending `cargo insta review`.
    pub pending: usize,
    /// Snapshots that differ and were not written (INSTA_UPDATE=no): the caller exits 1.
    pub mismatched: Vec<String>,
    /// Golden folders touched.
    pub dirs: Vec<PathBuf>,
}

/// `cargo xtask bless`: runs the f64 oracle greedily on every prompt and writes snapshot +
/// sidecar under `goldens/<model-stem>/<suite>/`. Existing goldens pinned to another SHA-256
/// stop the run ([`Fatal`], exit 2) unless `force` is set.
pub fn bless(opts: &Options, force: bool) -> Result<BlessSummary, Fatal> {
    let suites = load_suites(opts)?;
    check_prompt_ids(opts, &suites)?;
    // bless runs the f64 oracle alone: drafters are not read
    let models = check_models(opts, &suites, false)?;
    let mut summary = BlessSummary::default();
    for (m, checked) in opts.models.iter().zip(models) {
        let sha = reference::gguf::sha256_file(&m.path)
            .map_err(|e| Fatal(format!("{}: {e}", m.path.display())))?;
        let stem = golden::model_stem(&m.path);
        let file = file_name(&m.path);
        let model = Model::<f64>::from_gguf_with(checked.file, Faults::default(), opts.load)
            .map_err(|e| {
                fatal(crate::engine::EngineError::Load {
                    path: m.path.clone(),
                    message: crate::reference_engine::load_message(&e),
                })
            })?;
        let codec = &checked.codec;
        let vocab = ModelLimits::from_config(model.config()).vocab_size;
        for PreparedSuite { suite, reqs } in &checked.suites {
            let dir = golden::golden_dir(&opts.goldens_root, &stem, &suite.settings.name);
            if !force {
                // only a golden pinned to another model stops bless: a missing or impossible
                // one is what it replaces
                for p in &suite.prompts {
                    let one = std::slice::from_ref(p);
                    match golden::load_goldens(
                        &dir,
                        &suite.settings.name,
                        one,
                        &suite.settings.stop_ids,
                        &sha,
                        golden::RowLimits::new(vocab, model.suppressed_ids(), suite.settings.top_k),
                    ) {
                        Err(e @ GoldenError::ShaMismatch { .. }) => {
                            return Err(Fatal(format!(
                                "{e}: the model changed since these goldens were blessed; \
                                 `cargo xtask bless --force` overwrites them (review the diff)"
                            )))
                        }
                        _ => continue,
                    }
                }
            }
            let bar = indicatif::ProgressBar::new(reqs.len() as u64);
            if !opts.progress {
                bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
            }
            for req in reqs {
                bar.set_message(req.id.clone());
                // the plain mode of the f64 reference engine, with its non-finite rows named
                let gen = model
                    .greedy_top_k(
                        &req.prompt,
                        req.max_tokens,
                        &req.stop,
                        golden::bless_width(suite.settings.top_k),
                    )
                    .map_err(fatal)?;
                if let Some((i, bad)) = gen.nonfinite {
                    return Err(Fatal(format!(
                        "model {}: prompt {:?}: the oracle's logits are non-finite at output \
                         position {i} ({bad} NaN/Inf logits in that row): no golden written",
                        m.path.display(),
                        req.id
                    )));
                }
                let g = Golden {
                    schema: SIDECAR_SCHEMA.into(),
                    model_file: file.clone(),
                    model_sha256: sha.clone(),
                    oracle_version: ORACLE_VERSION.into(),
                    suite: suite.settings.name.clone(),
                    prompt_id: req.id.clone(),
                    prompt: req.prompt.clone(),
                    tokens: gen.tokens,
                    top_k: gen.top_k,
                };
                match golden::write_golden(&dir, &g, &codec.decode(&g.tokens)).map_err(fatal)? {
                    SnapshotOutcome::Unchanged => summary.unchanged += 1,
                    SnapshotOutcome::Written => summary.written += 1,
                    SnapshotOutcome::Pending => summary.pending += 1,
                    SnapshotOutcome::Mismatch => summary
                        .mismatched
                        .push(format!("{stem}/{}/{}", suite.settings.name, req.id)),
                }
                bar.inc(1);
            }
            bar.finish_and_clear();
            summary.dirs.push(dir);
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second run into an output folder whose lock another run holds stops before reading
    /// anything, naming the folder and the lock file (both runs wrote the folder, the last
    /// writer's report winning); once the holder is gone — its file closed, as when a process
    /// ends or crashes — the lock file left behind blocks nobody.
    #[test]
    fn an_output_folder_is_written_by_one_run_at_a_time() {
        let dir = std::env::temp_dir().join(format!("gemma4-out-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        check_out_dir(&dir).unwrap();
        let held = lock_out_dir(&dir).unwrap();
        let lock = dir.join(".conformance.lock");
        let want = format!(
            "output folder {}: another conformance run is writing there (it holds the lock on \
             {}): wait for it to end, or give this run another --out or --label",
            dir.display(),
            lock.display()
        );
        assert_eq!(lock_out_dir(&dir).unwrap_err().0, want);
        let mut o = smoke_options(&[]);
        o.out_dir = dir.clone();
        assert_eq!(conformance(&o).unwrap_err().0, want);
        assert!(!dir.join("report.json").exists());
        drop(held);
        assert!(lock.is_file(), "the lock file stays");
        let again = lock_out_dir(&dir).unwrap();
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The output folder is made (nested) and written to, leaving nothing behind; a file, or
    /// a folder below a file, is refused naming the folder (and `a file, not a folder`).
    #[test]
    fn output_folders_are_made_and_probed() {
        let dir = std::env::temp_dir().join(format!("gemma4-out-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let nested = dir.join("a/b");
        check_out_dir(&nested).unwrap();
        assert_eq!(std::fs::read_dir(&nested).unwrap().count(), 0);
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = check_out_dir(&file).unwrap_err().0;
        assert!(
            e.starts_with(&format!(
                "output folder {}: cannot write there: ",
                file.display()
            )) && e.ends_with(" (a file, not a folder)"),
            "{e}"
        );
        let e = check_out_dir(&file.join("x")).unwrap_err().0;
        assert!(
            e.starts_with(&format!(
                "output folder {}: cannot write there: ",
                file.join("x").display()
            )) && !e.ends_with("folder)"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Options reading the repository's smoke suite (ids `count_chat`, `story`, …) for one model
    /// that does not exist: the prompt-id check must answer before any model is opened.
    /// The error of a run whose first model is [`smoke_options`]' missing one.
    fn no_model_error() -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        format!(
            "--model {}: no such file",
            root.join("no-such-model.gguf").display()
        )
    }

    fn smoke_options(prompts: &[&str]) -> Options {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        Options {
            models: vec![ModelSpec {
                path: root.join("no-such-model.gguf"),
                draft: None,
                suites: None,
            }],
            suites: vec![root.join("smoke.toml")],
            engine: "reference-f32".into(),
            modes: None,
            prompts: prompts.iter().map(|s| s.to_string()).collect(),
            goldens_root: root.join("../goldens"),
            out_dir: std::env::temp_dir().join("gemma4-prompt-id-check"),
            cache_dir: std::env::temp_dir().join("gemma4-prompt-id-check/cache"),
            progress: false,
            strict_invariance: false,
            require_acceptance: false,
            oracle_acceptance: false,
            load: Default::default(),
        }
    }

    /// A model with a NaN weight (conformance §9): without `allow_nonfinite` bless and
    /// conformance stop naming the tensor, with the `--allow-nonfinite` hint; with it, bless
    /// refuses to write a golden naming prompt and position (it wrote goldens with no tokens,
    /// exit 0), and conformance stops naming model, prompt and position (prefill was judged
    /// against those goldens and passed).
    #[test]
    fn nonfinite_oracle_logits_are_never_blessed_or_judged() {
        let dir = std::env::temp_dir().join(format!("gemma4-nan-bless-{}", std::process::id()));
        let Some(model) = crate::test_nan_copy("dense-target.Q4_K_M.gguf", &dir, "nanw") else {
            return;
        };
        let mut o = smoke_options(&["count_chat"]);
        o.models[0].path = model.clone();
        o.goldens_root = dir.join("goldens");
        o.out_dir = dir.join("out");
        o.cache_dir = dir.join("cache");
        let e = bless(&o, false).unwrap_err().0;
        assert!(
            e.contains("'output_norm.weight'") && e.contains("--allow-nonfinite"),
            "{e}"
        );
        let e = conformance(&o).unwrap_err().0;
        assert!(
            e.contains("'output_norm.weight'") && e.contains("--allow-nonfinite"),
            "{e}"
        );
        o.load = LoadOptions::default().with_allow_nonfinite(true);
        let e = bless(&o, false).unwrap_err().0;
        assert_eq!(
            e,
            format!(
                "model {}: prompt \"count_chat\": the oracle's logits are non-finite at output \
                 position 0 (16384 NaN/Inf logits in that row): no golden written",
                model.display()
            )
        );
        assert!(
            !o.goldens_root.join("nanw").exists(),
            "a golden was written"
        );
        let e = conformance(&o).unwrap_err().0;
        assert!(
            e.starts_with(&format!(
                "model {}: prompt \"count_chat\": the oracle's logits are non-finite at prompt \
                 position 0 (",
                model.display()
            )),
            "{e}"
        );
        assert!(!o.out_dir.join("report.json").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// bless on a model whose SHA-256 is not the goldens' stops (exit 2) and says `--force`
    /// overwrites them (it named only the two SHA-256s).
    #[test]
    fn bless_on_a_changed_model_names_force() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let root = std::env::temp_dir().join(format!("bless-force-{}", std::process::id()));
        let dir = root.join("dense-target.Q4_K_M/smoke");
        std::fs::create_dir_all(&dir).unwrap();
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../goldens/dense-target.Q4_K_M/smoke");
        for f in ["story.snap", "story.oracle.json"] {
            let text = std::fs::read_to_string(src.join(f)).unwrap();
            let sha = "ffc2c4a721d6dc0d8768fabe49cb4cb518fa136fa043751dcf9086bae99dde41";
            assert!(text.contains(sha), "{f}");
            std::fs::write(dir.join(f), text.replace(sha, &"0".repeat(64))).unwrap();
        }
        let mut o = smoke_options(&["story"]);
        o.models[0].path = model;
        o.goldens_root = root.clone();
        let e = bless(&o, false).unwrap_err().0;
        assert!(
            e.contains(&format!(
                "golden pinned to model SHA-256 {}",
                "0".repeat(64)
            )) && e.ends_with(
                ": the model changed since these goldens were blessed; `cargo xtask bless \
                     --force` overwrites them (review the diff)"
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A drafter is checked before the run: the fixture pair passes; the MoE drafter against the
    /// dense target (head dims 64 vs 128, fixtures README) and a truncated copy stop it with the
    /// cause named.
    #[test]
    fn drafter_is_checked_up_front() {
        let Some(target) = crate::test_fixture_model("dense-target.F32.gguf") else {
            return;
        };
        let m = target.parent().unwrap().to_path_buf();
        let t = Config::from_gguf(&reference::gguf::GgufFile::open(&target).unwrap()).unwrap();
        check_drafter(&t, &target, &m.join("dense-assistant.F32.gguf")).unwrap();
        let e = check_drafter(&t, &target, &m.join("moe-assistant.Q8_0.gguf"))
            .unwrap_err()
            .0;
        assert!(
            e.contains("does not pair") && e.contains("key_length 64"),
            "{e}"
        );
        let bytes = std::fs::read(m.join("dense-assistant.F32.gguf")).unwrap();
        let cut = std::env::temp_dir().join(format!("trunc-drafter-{}.gguf", std::process::id()));
        std::fs::write(&cut, &bytes[..100_000]).unwrap();
        let e = check_drafter(&t, &target, &cut).unwrap_err().0;
        assert!(
            e.starts_with(&format!("drafter {}: ", cut.display())),
            "{e}"
        );
        std::fs::remove_file(&cut).unwrap();
    }

    /// The run judges the requests built and checked up front (it encoded every prompt again,
    /// and the oracle's spec:K a third time): the check gives the smoke prompt "story" as its
    /// golden has it (11 tokens), and a prompt changed after the check is what the run gets —
    /// its golden (made from 11 tokens) is then stale, which the run says before anything runs.
    #[test]
    fn the_run_judges_the_requests_checked_up_front() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("gemma4-checked-reqs-{}", std::process::id()));
        let mut o = smoke_options(&["story"]);
        o.models[0].path = model;
        o.modes = Some(vec![Mode::Plain]);
        o.out_dir = dir.join("out");
        o.cache_dir = dir.join("cache");
        let suites = load_suites(&o).unwrap();
        let mut models = check_models(&o, &suites, true).unwrap();
        let prepared = &mut models[0].suites;
        assert_eq!(prepared.len(), 1);
        assert_eq!(prepared[0].suite.settings.name, "smoke");
        let req = &mut prepared[0].reqs[0];
        assert_eq!((req.id.as_str(), req.prompt.len()), ("story", 11));
        assert_eq!(req.prompt[0], 2, "BOS first");
        let again = req.prompt[10];
        req.prompt.push(again);
        let e = run_models(&o, models, &load_budgets(&o).unwrap())
            .unwrap_err()
            .0;
        // named with the suite file (a suite edited to `text = ""` gave the mismatch alone)
        assert!(
            e.starts_with(&format!(
                "{}: prompt \"story\": its golden was made from a different prompt (11 tokens, \
                 the suite gives 12; first difference at token 11)",
                o.suites[0].display()
            )),
            "{e}"
        );
        assert!(!o.out_dir.join("report.json").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file flag that names no regular file is one line naming flag and path once: missing,
    /// a folder; a positional argument without a flag; an I/O error on the file itself is its
    /// cause alone after the path, one on another file (a split's shard) in full.
    #[test]
    fn not_a_file_names_the_flag_and_the_path_once() {
        let dir = std::env::temp_dir().join(format!("gemma4-not-a-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let nope = dir.join("nope.gguf");
        let shown = |flag, p: &Path| NotAFile::check(flag, p).unwrap_err().to_string();
        assert_eq!(
            shown(Some("model"), &nope),
            format!("--model {}: no such file", nope.display())
        );
        assert_eq!(
            shown(Some("draft"), &dir),
            format!("--draft {}: is a directory, not a file", dir.display())
        );
        assert_eq!(
            shown(None, &nope),
            format!("{}: no such file", nope.display())
        );
        assert_eq!(
            open_model(&dir).err().unwrap().0,
            format!("--model {}: is a directory, not a file", dir.display())
        );
        let file = dir.join("x.gguf");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(NotAFile::check(Some("model"), &file), Ok(()));
        let io = |p: &Path| reference::gguf::GgufError::Io {
            path: Some(p.to_path_buf()),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        };
        assert_eq!(gguf_open_cause(&file, &io(&file)), "denied");
        assert_eq!(
            gguf_open_cause(&file, &io(&nope)),
            format!("I/O error on {}: denied", nope.display())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One open of the model file gives the check its configuration and codec and the run its
    /// oracle ([`open_model`], `ReferenceOracle::from_gguf`): the same as opening it for each
    /// (`GemmaCodec::load`, `ReferenceOracle::load`) — prompt ids, SHA-256 (the goldens' pin),
    /// vocabulary and scores bit for bit. A missing file and one that is no GGUF are named.
    #[test]
    fn one_open_gives_the_codec_and_oracle_of_separate_opens() {
        let Some(path) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let opened = open_model(&path).unwrap();
        assert_eq!(opened.config.n_vocab, 16384);
        let text = crate::suite::PromptInput::Text("Once upon a time".into());
        let ids = opened.codec.encode(&text, false).unwrap();
        assert_eq!(
            ids,
            GemmaCodec::load(&path)
                .unwrap()
                .encode(&text, false)
                .unwrap()
        );
        assert_eq!(ids.len(), 5);
        let mut once = ReferenceOracle::from_gguf(&path, opened.file).unwrap();
        let mut twice = ReferenceOracle::load(&path).unwrap();
        assert_eq!(
            once.model_sha256(),
            "ffc2c4a721d6dc0d8768fabe49cb4cb518fa136fa043751dcf9086bae99dde41"
        );
        assert_eq!(once.model_sha256(), twice.model_sha256());
        assert_eq!(once.vocab_size(), 16384);
        let a = once.score(std::slice::from_ref(&ids), 4).unwrap();
        let b = twice.score(std::slice::from_ref(&ids), 4).unwrap();
        assert_eq!(a[0].len(), 5);
        assert_eq!(a, b);
        let missing = path.with_file_name("no-such.gguf");
        assert_eq!(
            open_model(&missing).err().unwrap().0,
            format!("--model {}: no such file", missing.display())
        );
        let not_gguf = std::env::temp_dir().join(format!("not-gguf-{}.gguf", std::process::id()));
        std::fs::write(&not_gguf, b"not a gguf file at all").unwrap();
        let e = open_model(&not_gguf).err().unwrap().0;
        std::fs::remove_file(&not_gguf).unwrap();
        assert!(e.contains(&not_gguf.display().to_string()), "{e}");
    }

    /// Two models whose file names are not UTF-8 and read the same lossily (`caf\xE9.gguf`,
    /// `caf\xE8.gguf`, both `caf\u{FFFD}.gguf`): report.json names each exactly (its path read
    /// back is the file, where the lossy path named no file), and each has its own plot folder
    /// (`caf%E9`, `caf%E8`; both were `caf\u{FFFD}`, the second run's plot over the first's).
    #[cfg(unix)]
    #[test]
    fn non_utf8_model_paths_round_trip_through_the_report() {
        use std::os::unix::ffi::OsStrExt;
        let Some(src) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("gemma4-non-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<PathBuf> = [b"caf\xE9.gguf", b"caf\xE8.gguf"]
            .iter()
            .map(|name| dir.join(std::ffi::OsStr::from_bytes(*name)))
            .collect();
        assert_eq!(
            paths[0].display().to_string(),
            paths[1].display().to_string()
        );
        let mut o = smoke_options(&["story"]);
        o.models.clear();
        for p in &paths {
            std::fs::copy(&src, p).unwrap();
            o.models.push(ModelSpec {
                path: p.clone(),
                draft: None,
                suites: None,
            });
        }
        o.modes = Some(vec![Mode::Plain]);
        o.goldens_root = dir.join("goldens");
        o.out_dir = dir.join("out");
        o.cache_dir = dir.join("cache");
        let report = conformance(&o).unwrap();
        let json = std::fs::read_to_string(o.out_dir.join("report.json")).unwrap();
        let read: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(read, report);
        assert_eq!(read.runs.len(), 2);
        for (run, path) in read.runs.iter().zip(&paths) {
            assert_eq!(run.model.path, path.display().to_string());
            assert_eq!(run.model.file_path().unwrap(), *path);
            assert!(!Path::new(&run.model.path).exists());
        }
        let stems: Vec<&str> = read.runs.iter().map(|r| r.model.stem.as_str()).collect();
        assert_eq!(stems, ["caf%E9", "caf%E8"]);
        let plots = crate::plot::report_plots(&o.out_dir, &read);
        assert_eq!(
            plots.into_iter().collect::<Vec<_>>(),
            [
                o.out_dir.join("plots/caf%E8/smoke/story.svg"),
                o.out_dir.join("plots/caf%E9/smoke/story.svg"),
            ]
        );
        for p in crate::plot::report_plots(&o.out_dir, &read) {
            assert!(p.is_file(), "{}", p.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// [`check_prompt_ids`] on the options' suites, read as the run reads them.
    fn check_ids(o: &Options) -> Result<(), Fatal> {
        check_prompt_ids(o, &load_suites(o)?)
    }

    #[test]
    fn unknown_prompt_ids_are_an_error_naming_them() {
        assert!(check_ids(&smoke_options(&[])).is_ok());
        assert!(check_ids(&smoke_options(&["count_chat", "story"])).is_ok());
        let e = check_ids(&smoke_options(&["count_chat", "nosuch", "cuont_chat"]))
            .unwrap_err()
            .0;
        assert!(
            e.contains("nosuch, cuont_chat")
                && e.contains("smoke.toml")
                && !e.contains("count_chat,"),
            "{e}"
        );
        // conformance and bless stop on it (before the missing model is even looked at)
        let e = conformance(&smoke_options(&["nosuch"])).unwrap_err().0;
        assert!(e.contains("unknown prompt id(s) nosuch"), "{e}");
        let e = bless(&smoke_options(&["nosuch"]), false).unwrap_err().0;
        assert!(e.contains("unknown prompt id(s) nosuch"), "{e}");
        // a known id reaches the model check
        let e = conformance(&smoke_options(&["story"])).unwrap_err().0;
        assert_eq!(e, no_model_error());
    }

    /// Each suite file is read once per run (the prompt-id check read every suite, then each
    /// model read its suites again): [`load_suites`] reads each distinct file once, in first-use
    /// order, and the prompt-id check and the runs use that copy (the file may be gone).
    #[test]
    fn suites_are_read_once() {
        let dir = std::env::temp_dir().join(format!("gemma4-suites-once-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = dir.join("own.toml");
        std::fs::write(
            &own,
            "[[prompt]]\nid = \"mine\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap();
        let mut o = smoke_options(&["mine", "story"]);
        o.suites = vec![own.clone()];
        let smoke = o.models[0].path.with_file_name("smoke.toml");
        let mut second = o.models[0].clone();
        second.suites = Some(vec![smoke.clone(), own.clone()]);
        o.models.push(second);
        let loaded = load_suites(&o).unwrap();
        let paths: Vec<&Path> = loaded.iter().map(|s| s.path.as_path()).collect();
        assert_eq!(paths, [own.as_path(), smoke.as_path()]);
        std::fs::remove_dir_all(&dir).unwrap();
        check_prompt_ids(&o, &loaded).unwrap();
        let mine = suite_for(&loaded, &own, &o.prompts).unwrap().unwrap();
        assert_eq!(mine.prompts[0].id, "mine");
        let story = suite_for(&loaded, &smoke, &o.prompts).unwrap().unwrap();
        assert_eq!(story.prompts.len(), 1);
        let e = check_prompt_ids(&smoke_options(&["mine"]), &loaded[1..])
            .unwrap_err()
            .0;
        assert!(e.starts_with("unknown prompt id(s) mine (not in "), "{e}");
    }

    /// A suite that does not fit a model (a prompt's tokens + max_tokens beyond its context
    /// length, a stop id outside its vocabulary) is refused by conformance and bless before
    /// anything runs: before the first model's run (whose engine name is unknown here, so a
    /// run that started would fail on that instead), naming the suite file, the prompt and the
    /// numbers.
    #[test]
    fn suite_beyond_the_model_is_refused_before_anything_runs() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("gemma4-beyond-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fits = dir.join("fits.toml");
        std::fs::write(
            &fits,
            "[[prompt]]\nid = \"ok\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap();
        let long = dir.join("long.toml");
        let text = "Count to ten.";
        std::fs::write(
            &long,
            format!("[[prompt]]\nid = \"ok\"\ntext = \"x\"\nmax_tokens = 4\n[[prompt]]\nid = \"long\"\ntext = \"{text}\"\nmax_tokens = 5000\n"),
        )
        .unwrap();
        let n = GemmaCodec::load(&model)
            .unwrap()
            .encode(&crate::suite::PromptInput::Text(text.into()), false)
            .unwrap()
            .len();
        let mut o = smoke_options(&[]);
        // a spec check_engine accepts, whose server is not there: reached only after the checks
        o.engine = "llama-server=http://127.0.0.1:1,retries=0".into();
        o.goldens_root = dir.join("goldens");
        o.out_dir = dir.join("out");
        o.models = vec![
            ModelSpec {
                path: model.clone(),
                draft: None,
                suites: Some(vec![fits.clone()]),
            },
            ModelSpec {
                path: model.clone(),
                draft: None,
                suites: Some(vec![long.clone()]),
            },
        ];
        let want = format!(
            "{}: prompt \"long\": {n} prompt tokens + max_tokens 5000 = {} exceed the context \
             length 4096 of dense-target.Q4_K_M.gguf: lower max_tokens to at most {} or shorten \
             the prompt",
            long.display(),
            n + 5000,
            4096 - n
        );
        assert_eq!(conformance(&o).unwrap_err().0, want);
        assert_eq!(bless(&o, false).unwrap_err().0, want);
        assert!(
            !o.goldens_root.exists(),
            "bless wrote goldens before refusing"
        );
        // only the asked prompts are checked
        o.prompts = vec!["ok".into()];
        let e = conformance(&o).unwrap_err().0;
        assert!(
            e.contains("127.0.0.1:1") && e.contains("cannot connect"),
            "{e}"
        );
        // a stop id outside the 16384-id vocabulary
        let stops = dir.join("stops.toml");
        std::fs::write(
            &stops,
            "[suite]\nstop_ids = [1, 106, 16384]\n[[prompt]]\nid = \"ok\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap();
        o.models[1].suites = Some(vec![stops.clone()]);
        assert_eq!(
            conformance(&o).unwrap_err().0,
            format!(
                "{}: [suite] stop_ids: 16384 is outside the vocabulary of \
                 dense-target.Q4_K_M.gguf (16384 ids, 0..=16383)",
                stops.display()
            )
        );
        // a drafter that does not read stops the run before the first model runs too
        o.models[1].suites = Some(vec![fits.clone()]);
        let missing = dir.join("no-such-assistant.gguf");
        o.models[1].draft = Some(missing.clone());
        let e = conformance(&o).unwrap_err().0;
        assert_eq!(e, format!("--draft {}: no such file", missing.display()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every model's budgets.toml is read before anything runs: a bad file for the second
    /// model stops the run naming it, before the first model is even opened (these models do
    /// not exist, so a run that started would stop on that instead).
    #[test]
    fn budgets_are_read_before_any_model_runs() {
        let dir = std::env::temp_dir().join(format!("gemma4-budgets-first-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut o = smoke_options(&[]);
        o.goldens_root = dir.join("goldens");
        let mut second = o.models[0].clone();
        second.path = second.path.with_file_name("later-model.gguf");
        o.models.push(second);
        let bad = o.goldens_root.join("later-model/budgets.toml");
        std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
        std::fs::write(&bad, "[reference-f23]\ntau = 0.5\n").unwrap();
        let want = format!(
            "{}: bad budgets TOML: [reference-f23] is not an engine name (known: reference-f32, \
             reference-f64, cuda, cuda-fast, llama-server, openai): its τ would never be used",
            bad.display()
        );
        assert_eq!(conformance(&o).unwrap_err().0, want);
        std::fs::remove_file(&bad).unwrap();
        let e = conformance(&o).unwrap_err().0;
        assert_eq!(e, no_model_error());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One suite file given twice (by name, by path, by a path through `..`) is refused naming
    /// both (it ran, and was reported, twice); two files with one `[suite] name` are refused
    /// naming both (they shared one goldens folder: the second was judged against, or blessed
    /// over, the first's goldens); conformance and bless refuse before any model is opened.
    /// One file shared by two models is fine.
    #[test]
    fn a_suite_given_twice_or_two_with_one_name_are_refused() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let smoke = root.join("smoke.toml");
        let dir = std::env::temp_dir().join(format!("gemma4-suite-dup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for again in [smoke.clone(), root.join("../suites/smoke.toml")] {
            let mut o = smoke_options(&[]);
            o.suites = vec![smoke.clone(), root.join("core.toml"), again.clone()];
            let want = format!(
                "suite file given twice: {} and {} are the same file (each suite runs once)",
                smoke.display(),
                again.display()
            );
            assert_eq!(conformance(&o).unwrap_err().0, want);
            assert_eq!(bless(&o, false).unwrap_err().0, want);
        }
        let other = dir.join("namedup.toml");
        std::fs::write(
            &other,
            "[suite]\nname = \"smoke\"\n[[prompt]]\nid = \"story\"\ntext = \"other\"\nmax_tokens = 4\n",
        )
        .unwrap();
        let mut o = smoke_options(&[]);
        o.suites = vec![smoke.clone(), other.clone()];
        let want = format!(
            "{} and {} both have [suite] name = \"smoke\": they would share the goldens folder \
             goldens/<model>/smoke/ and one name in the report (rename one)",
            smoke.display(),
            other.display()
        );
        assert_eq!(conformance(&o).unwrap_err().0, want);
        assert_eq!(bless(&o, false).unwrap_err().0, want);
        // across models too: each model's own list
        let mut o = smoke_options(&[]);
        let mut second = o.models[0].clone();
        second.suites = Some(vec![other.clone()]);
        o.models.push(second);
        assert_eq!(conformance(&o).unwrap_err().0, want);
        // one file for two models is one suite
        let mut o = smoke_options(&[]);
        let mut second = o.models[0].clone();
        second.suites = Some(vec![root.join("../suites/smoke.toml")]);
        o.models.push(second);
        assert_eq!(load_suites(&o).unwrap().len(), 1);
        let e = conformance(&o).unwrap_err().0;
        assert_eq!(e, no_model_error());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A suite file with the name of a file in suites/ that it is not — `[suite] name =
    /// "smoke"`, or a file called smoke.toml without a name — is refused by conformance, bless
    /// and calibrate before any model is opened, naming both files (bless wrote its goldens into
    /// the committed goldens/<model>/smoke/ and conformance judged it against them); the
    /// committed suites/smoke.toml itself, edited or not and by any path, and a name no file in
    /// suites/ has are fine.
    #[test]
    fn a_suite_with_the_name_of_another_file_in_suites_is_refused() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let owner = std::fs::canonicalize(root.join("smoke.toml")).unwrap();
        let dir = std::env::temp_dir().join(format!("gemma4-name-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prompt = "[[prompt]]\nid = \"story\"\ntext = \"other\"\nmax_tokens = 4\n";
        let other = dir.join("other.toml");
        std::fs::write(&other, format!("[suite]\nname = \"smoke\"\n{prompt}")).unwrap();
        let unnamed = dir.join("smoke.toml");
        std::fs::write(&unnamed, prompt).unwrap();
        // the name from the key: rename the key; from the file name: say so, and what to do
        // (it said "rename [suite] name" of a file without that key)
        let by_key = format!(
            "{}: the suite name \"smoke\" is taken by {} (goldens/<model>/smoke/ holds that \
             file's goldens): rename [suite] name in {}",
            other.display(),
            owner.display(),
            other.display()
        );
        let by_file_name = format!(
            "{}: the suite name \"smoke\" (from the file name: it has no [suite] name) is taken \
             by {} (goldens/<model>/smoke/ holds that file's goldens): set [suite] name in {} to \
             another name, or rename the file",
            unnamed.display(),
            owner.display(),
            unnamed.display()
        );
        for (file, want) in [(&other, by_key), (&unnamed, by_file_name)] {
            let mut o = smoke_options(&[]);
            o.suites = vec![file.clone()];
            assert_eq!(conformance(&o).unwrap_err().0, want);
            assert_eq!(bless(&o, false).unwrap_err().0, want);
            let e = crate::calibrate::calibrate_models(&o, 2.0, false).unwrap_err();
            assert_eq!(e.0, want);
        }
        // the committed file by another path, and a free name, reach the model check
        let free = dir.join("free.toml");
        std::fs::write(&free, format!("[suite]\nname = \"smoke-mine\"\n{prompt}")).unwrap();
        for file in [root.join("../suites/smoke.toml"), free] {
            let mut o = smoke_options(&[]);
            o.suites = vec![file];
            let e = bless(&o, false).unwrap_err().0;
            assert_eq!(e, no_model_error());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A `[suite.acceptance_floor]` key that names a drafter of the run in another case is
    /// refused before anything runs, naming key and drafter (the floor was never applied and
    /// `--require-acceptance` passed, `(floor none)`); the exact key and an unrelated key are
    /// fine.
    #[test]
    fn a_floor_key_in_another_case_is_refused() {
        let dir = std::env::temp_dir().join(format!("gemma4-floor-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let suite = dir.join("floor.toml");
        let mut o = smoke_options(&[]);
        o.suites = vec![suite.clone()];
        o.models[0].draft = Some(dir.join("dense-assistant.F32.gguf"));
        for key in ["dense-assistant.f32", "Dense-Assistant.F32.gguf"] {
            std::fs::write(
                &suite,
                format!("[suite.acceptance_floor]\n\"{key}\" = 1.0\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n"),
            )
            .unwrap();
            assert_eq!(
                conformance(&o).unwrap_err().0,
                format!(
                    "{}: [suite.acceptance_floor] \"{key}\" does not name the drafter \
                     \"dense-assistant.F32\" (keys are drafter file stems, exact to the letter): \
                     its floor would never apply; write \"dense-assistant.F32\"",
                    suite.display()
                )
            );
        }
        for key in ["dense-assistant.F32", "moe-assistant.Q8_0"] {
            std::fs::write(
                &suite,
                format!("[suite.acceptance_floor]\n\"{key}\" = 1.0\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n"),
            )
            .unwrap();
            let e = conformance(&o).unwrap_err().0;
            assert_eq!(e, no_model_error(), "{key}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
