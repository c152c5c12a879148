//! Argument checks of the `runtime` binary, run before CUDA is probed: a typo in an option, a
//! missing or unreadable model file, a non-finite weight, a number out of range or a drafter
//! that does not fit its target is reported on any machine (exit 2), not only on the GPU
//! machine. Everything here reads files and metadata on the CPU; nothing touches the GPU.
//!
//! The model files are opened here once per run: [`model_check`] and [`spec_check`] return
//! what they opened and derived ([`TargetFile`], [`DraftFile`]: the open GGUF, its config, the
//! target's tokenizer and prompt ids, the weights checked for NaN/±Inf), and the GPU checks
//! build the engine and the oracle from those ([`crate::CudaEngine::from_gguf_with`] with
//! [`checked_load`]) instead of opening the files and building the tokenizer again.

use std::path::{Path, PathBuf};

use reference::config::{AssistantConfig, Config};
use reference::gguf::GgufFile;
use reference::model::LoadOptions;
use reference::quant::WeightMix;
use reference::tokenizer::GemmaTokenizer;

use crate::bench::DraftOptions;
use crate::draft::MAX_DRAFT;
use crate::forward::{CHUNK_ROWS, MAX_CTX};
use crate::modelcheck::PROMPTS;
use crate::speccheck::SpecCheckOptions;

/// A command-line argument of the `runtime` binary that cannot be used; each names the option
/// or the file.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// An option's value is out of range or names nothing known (`--decode 0`, `--format NOPE`).
    #[error("{option} {value}: {why}")]
    Option {
        /// The option, e.g. `--decode`.
        option: &'static str,
        /// The value as given.
        value: String,
        /// The rule it breaks.
        why: String,
    },
    /// Options that are each in range but do not fit together (`--prompt 20000 --decode 32`):
    /// every one named with its value, whichever of them the user gave.
    #[error("{given}: {why}")]
    Together {
        /// The options and values, e.g. `--prompt 20000 + --decode 32`.
        given: String,
        /// The rule they break.
        why: String,
    },
    /// A model file that cannot be used: missing, unreadable, not GGUF, no Gemma-4 config.
    #[error("{role} {}: {why}", path.display())]
    File {
        /// What the file is for (`model`, `target`, `drafter`).
        role: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A target and a drafter that do not pair (`spec/gemma4-assistant-mtp.md` §1.1).
    #[error("target {} with drafter {}: {why}", target.display(), draft.display())]
    Pairing {
        /// The target file.
        target: PathBuf,
        /// The drafter file.
        draft: PathBuf,
        /// What differs.
        why: String,
    },
}

fn option(option: &'static str, value: impl ToString, why: impl Into<String>) -> ArgError {
    ArgError::Option {
        option,
        value: value.to_string(),
        why: why.into(),
    }
}

/// The first item of `items` that names the same file (or pair of files) as an earlier one,
/// by `key` (paths canonicalized where they exist, so `./m.gguf` and `m.gguf` are one file),
/// as `(earlier index, index)` (0-based). A model or pair given twice would be checked twice
/// and its results reported twice, one indistinguishable from the other.
fn repeated<T>(items: &[T], key: impl Fn(&T) -> Vec<PathBuf>) -> Option<(usize, usize)> {
    let canon = |p: PathBuf| std::fs::canonicalize(&p).unwrap_or(p);
    let keys: Vec<Vec<PathBuf>> = items
        .iter()
        .map(|i| key(i).into_iter().map(canon).collect())
        .collect();
    (1..keys.len()).find_map(|j| (0..j).find(|&i| keys[i] == keys[j]).map(|i| (i, j)))
}

fn file(role: &'static str, path: &Path, why: impl Into<String>) -> ArgError {
    ArgError::File {
        role,
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// Opens the GGUF at `path` (all shards of a split model) after checking that it is a
/// readable regular file (or a link to one). The file type is checked from the metadata before
/// anything is opened: opening a FIFO waits for a writer, forever (`reference::gguf`'s
/// [`special_file_check`](reference::gguf::special_file_check) names what it is instead).
/// Errors: [`ArgError::File`] (no such file, a folder, a FIFO, socket or device, unreadable,
/// not GGUF).
fn open_gguf(role: &'static str, path: &Path) -> Result<GgufFile, ArgError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(file(role, path, "no such file"))
        }
        Err(e) => return Err(file(role, path, format!("cannot be read: {e}"))),
        Ok(m) if m.is_dir() => return Err(file(role, path, "is a folder, not a GGUF file")),
        Ok(m) if !m.is_file() => {
            let why = reference::gguf::special_file_check(path)
                .err()
                .map_or_else(|| "is not a regular file".to_string(), |e| e.to_string());
            return Err(file(role, path, why));
        }
        Ok(_) => {}
    }
    if let Err(e) = std::fs::File::open(path) {
        return Err(file(role, path, format!("cannot be read: {e}")));
    }
    GgufFile::open(path).map_err(|e| file(role, path, e.to_string()))
}

/// A target model as checked here: the file opened once, its Gemma-4 configuration, its
/// tokenizer and the built-in prompts ([`PROMPTS`]) encoded with BOS. Returned by
/// [`model_check`] and [`spec_check`] (its weights then checked for NaN/±Inf) for the GPU
/// checks, which build the engine and the oracle from it.
#[derive(Debug)]
pub struct TargetFile {
    /// The path as given.
    pub path: PathBuf,
    /// The open GGUF (all shards of a split model).
    pub file: GgufFile,
    /// Its Gemma-4 configuration (`Config::from_gguf`).
    pub config: Config,
    /// Its tokenizer (`GemmaTokenizer::from_gguf`).
    pub tokenizer: GemmaTokenizer,
    /// [`PROMPTS`] encoded with BOS, in order.
    pub prompts: Vec<Vec<u32>>,
}

/// A drafter (MTP assistant) as checked by [`spec_check`]: the file opened once, its
/// assistant configuration (paired with its target), its weights checked for NaN/±Inf.
#[derive(Debug)]
pub struct DraftFile {
    /// The path as given.
    pub path: PathBuf,
    /// The open GGUF.
    pub file: GgufFile,
    /// Its assistant configuration (`AssistantConfig::from_gguf`).
    pub config: AssistantConfig,
}

/// One checked `spec-check` pair ([`spec_check`]).
#[derive(Debug)]
pub struct SpecPair {
    /// The argument as given (`TARGET.gguf=DRAFT.gguf` or `TARGET.gguf`).
    pub arg: String,
    /// The target.
    pub target: TargetFile,
    /// The drafter, if the pair names one.
    pub draft: Option<DraftFile>,
}

/// The [`LoadOptions`] under which the GPU checks upload (and the oracle reads) files returned
/// by [`model_check`] and [`spec_check`]: their weights were checked here with the loaders' own
/// check (`reference::quant::check_finite`), so the loaders skip it rather than read every
/// block a second time.
pub fn checked_load() -> LoadOptions {
    LoadOptions::default().with_allow_nonfinite(true)
}

/// Opens the target model at `path`, reads its Gemma-4 configuration and tokenizer, encodes
/// [`PROMPTS`] and checks its tensors' types ([`check_types`]). Errors: [`ArgError::File`] naming the file and the failing step.
fn read_target(role: &'static str, path: &Path) -> Result<TargetFile, ArgError> {
    let f = open_gguf(role, path)?;
    let config =
        Config::from_gguf(&f).map_err(|e| file(role, path, format!("Gemma-4 config: {e}")))?;
    let tokenizer =
        GemmaTokenizer::from_gguf(&f).map_err(|e| file(role, path, format!("tokenizer: {e}")))?;
    let prompts = PROMPTS
        .iter()
        .map(|t| tokenizer.encode(t, true))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(role, path, format!("tokenizer: {e}")))?;
    check_types(role, path, &f)?;
    Ok(TargetFile {
        path: path.to_path_buf(),
        file: f,
        config,
        tokenizer,
        prompts,
    })
}

/// The longest of `prompts` in tokens (BOS included).
fn longest(prompts: &[Vec<u32>]) -> usize {
    prompts.iter().map(Vec::len).max().unwrap_or(0)
}

/// Checks that every tensor of `f` (the file at `path`, used as `role`) has a type the GPU
/// loader takes as it reads it: the loader's own rule, [`crate::loader::check_types`] (a matrix
/// needs a GPU kernel for its type, a vector a type the host decodes).
/// Errors: [`ArgError::File`] naming the file, the tensor and its type.
fn check_types(role: &'static str, path: &Path, f: &GgufFile) -> Result<(), ArgError> {
    crate::loader::check_types(f).map_err(|e| file(role, path, e.to_string()))
}

/// Checks every weight of `f` (the file at `path`, used as `role`) for NaN/±Inf, as the
/// engine's and the oracle's loaders do by default ([`crate::loader::check_weights`]).
/// Errors: [`ArgError::File`] naming the file and the first non-finite field (tensor, block,
/// field).
fn check_finite(role: &'static str, path: &Path, f: &GgufFile) -> Result<(), ArgError> {
    crate::loader::check_weights(f, LoadOptions::default())
        .map_err(|e| file(role, path, e.to_string()))
}

/// Positions one sequence of a check may use: the engine's context `ctx` ([`MAX_CTX`] at most)
/// and the model's trained context.
fn usable_ctx(ctx: usize, config: &Config) -> usize {
    let mut c = ctx.min(MAX_CTX);
    if config.n_ctx_train > 0 {
        c = c.min(config.n_ctx_train);
    }
    c
}

/// `runtime model-check MODELS… --gen N`: every model a readable GGUF with a Gemma-4 config and
/// tokenizer and every tensor of a type the GPU loader takes ([`check_types`]), each built-in prompt plus `gen` oracle tokens within the check's context
/// ([`crate::modelcheck::CHECK_CTX`] and the model's trained context), and, once all that holds
/// for every model, every weight finite. Returns the models in order, each opened once
/// ([`TargetFile`]), for [`crate::modelcheck::check_model`].
///
/// Errors: [`ArgError::File`] for a model given twice (named two ways or not) or the first
/// unusable model, [`ArgError::Option`] for `--gen`.
pub fn model_check(models: &[PathBuf], gen: usize) -> Result<Vec<TargetFile>, ArgError> {
    if let Some((i, j)) = repeated(models, |m| vec![m.clone()]) {
        return Err(file(
            "model",
            &models[j],
            format!(
                "given twice (models {} and {}): each model is checked once",
                i + 1,
                j + 1
            ),
        ));
    }
    let mut out = Vec::with_capacity(models.len());
    for m in models {
        let t = read_target("model", m)?;
        let longest = longest(&t.prompts);
        let ctx = usable_ctx(crate::modelcheck::CHECK_CTX, &t.config);
        if longest > ctx {
            // no `--gen` helps (`--gen 0` passed, and the check then ran its prompts past the
            // positions the model was trained for)
            return Err(file(
                "model",
                m,
                format!(
                    "its longest built-in prompt has {longest} tokens, more than the check's \
                     context of {ctx} positions (its trained context_length is {})",
                    t.config.n_ctx_train
                ),
            ));
        }
        let most = ctx - longest;
        if gen > most {
            return Err(option(
                "--gen",
                gen,
                format!(
                    "must be at most {most} for {}: its longest built-in prompt has {longest} \
                     tokens and the check's context is {ctx} positions",
                    m.display()
                ),
            ));
        }
        out.push(t);
    }
    for t in &out {
        check_finite("model", &t.path, &t.file)?;
    }
    Ok(out)
}

/// One `spec-check` pair: `TARGET.gguf=DRAFT.gguf`, or `TARGET.gguf` alone (split at the first
/// `=`).
///
/// Errors: [`ArgError::Option`] (`PAIRS`) when the target or the drafter path is empty (`=D`,
/// `T=`; it read as `target : no such file`).
pub fn split_pair(pair: &str) -> Result<(PathBuf, Option<PathBuf>), ArgError> {
    let (t, d) = match pair.split_once('=') {
        Some((t, d)) => (t, Some(d)),
        None => (pair, None),
    };
    let empty = if t.is_empty() {
        Some("target")
    } else if d == Some("") {
        Some("drafter")
    } else {
        None
    };
    if let Some(which) = empty {
        return Err(option(
            "PAIRS",
            pair,
            format!("the {which} path is empty (give TARGET.gguf=DRAFT.gguf or TARGET.gguf)"),
        ));
    }
    Ok((PathBuf::from(t), d.map(PathBuf::from)))
}

/// `runtime spec-check PAIRS… [options]`: the numeric options in range (`--ks` each in
/// `1 ..= MAX_DRAFT`, each once; `--prompts` 1..=3, `--max-tokens` ≥ 1, `--drafter-steps` ≤ `MAX_DRAFT`,
/// `--drafter-tol` finite and > 0, `--batch` ≤ 16), no pair given twice (paths compared
/// canonicalized), every target and drafter a readable GGUF
/// with its configuration and tensors of types the GPU loader takes ([`check_types`]), each drafter paired with its target ([`crate::draft::check_pairing`])
/// and every run within the check's context ([`crate::speccheck::CHECK_CTX`]): the longest
/// prompt + `--max-tokens` (or `--rollback-tokens`) + the largest K + 1. A target alone needs
/// `--rollback-tokens` > 0 (it runs nothing else). Once all that holds for every pair, every
/// weight of every file is checked for NaN/±Inf. Returns the pairs in order, each file opened
/// once ([`SpecPair`]), for [`crate::speccheck::check_pair`].
///
/// Errors: [`ArgError::Option`], [`ArgError::File`] or [`ArgError::Pairing`], the first found.
pub fn spec_check(pairs: &[String], opts: &SpecCheckOptions) -> Result<Vec<SpecPair>, ArgError> {
    let ks = opts
        .ks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if opts.ks.is_empty() || opts.ks.iter().any(|&k| k == 0 || k > MAX_DRAFT) {
        return Err(option(
            "--ks",
            ks,
            format!("every draft length K must be in 1..={MAX_DRAFT}"),
        ));
    }
    if let Some(k) =
        (1..opts.ks.len()).find_map(|j| opts.ks[..j].contains(&opts.ks[j]).then_some(opts.ks[j]))
    {
        return Err(option(
            "--ks",
            ks,
            format!("K = {k} is given twice: each draft length once"),
        ));
    }
    if !(1..=PROMPTS.len()).contains(&opts.prompts) {
        return Err(option(
            "--prompts",
            opts.prompts,
            format!("must be in 1..={} (the built-in prompts)", PROMPTS.len()),
        ));
    }
    if opts.max_tokens == 0 {
        return Err(option("--max-tokens", 0, "must be at least 1"));
    }
    if opts.drafter_steps > MAX_DRAFT {
        return Err(option(
            "--drafter-steps",
            opts.drafter_steps,
            format!("must be at most {MAX_DRAFT} (the longest draft; 0 skips the check)"),
        ));
    }
    if !(opts.drafter_tol.is_finite() && opts.drafter_tol > 0.0) {
        return Err(option(
            "--drafter-tol",
            opts.drafter_tol,
            "must be a finite tolerance > 0 (logits)",
        ));
    }
    let max_batch = CHUNK_ROWS / 2;
    if opts.batch > max_batch {
        return Err(option(
            "--batch",
            opts.batch,
            format!(
                "must be at most {max_batch}: one verify forward holds {CHUNK_ROWS} rows, K + 1 \
                 ≥ 2 per sequence (0 or 1 skips the check)"
            ),
        ));
    }
    let k_max = opts.ks.iter().copied().max().unwrap_or(1);
    let split = pairs
        .iter()
        .map(|p| split_pair(p))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((i, j)) = repeated(&split, |(t, d)| {
        std::iter::once(t.clone()).chain(d.clone()).collect()
    }) {
        return Err(option(
            "PAIRS",
            &pairs[j],
            format!(
                "given twice (pairs {} and {}, {} and {}): each pair is checked once",
                i + 1,
                j + 1,
                pairs[i],
                pairs[j]
            ),
        ));
    }
    let mut out = Vec::with_capacity(pairs.len());
    for (pair, (target, draft)) in pairs.iter().zip(split) {
        if draft.is_none() && opts.rollback_tokens == 0 {
            return Err(option(
                "--rollback-tokens",
                0,
                format!(
                    "{pair} has no drafter, so only the scripted-rollback check would run, and \
                     --rollback-tokens 0 skips it: give TARGET=DRAFT or --rollback-tokens N > 0"
                ),
            ));
        }
        let t = read_target("target", &target)?;
        let ctx = usable_ctx(crate::speccheck::CHECK_CTX, &t.config);
        let fits = |name: &'static str, tokens: usize, prompt: usize| {
            let most = ctx.saturating_sub(prompt + k_max + 1);
            if tokens > most {
                Err(option(
                    name,
                    tokens,
                    format!(
                        "must be at most {most} for {}: its prompt of {prompt} tokens, the \
                         tokens and K + 1 = {} verify rows fit the check's context of {ctx} \
                         positions",
                        target.display(),
                        k_max + 1
                    ),
                ))
            } else {
                Ok(())
            }
        };
        if draft.is_some() {
            fits(
                "--max-tokens",
                opts.max_tokens,
                longest(&t.prompts[..opts.prompts]),
            )?;
        }
        if opts.rollback_tokens > 0 {
            // the scripted-rollback check runs on a prefix of PROMPTS[1] and on PROMPTS[2]
            fits(
                "--rollback-tokens",
                opts.rollback_tokens,
                longest(&t.prompts[1..]),
            )?;
        }
        let draft = match draft {
            Some(d) => {
                let f = open_gguf("drafter", &d)?;
                let a = AssistantConfig::from_gguf(&f)
                    .map_err(|e| file("drafter", &d, format!("assistant config: {e}")))?;
                check_types("drafter", &d, &f)?;
                crate::draft::check_pairing(&a, &t.config).map_err(|e| ArgError::Pairing {
                    target: target.clone(),
                    draft: d.clone(),
                    why: match e {
                        crate::RuntimeError::Model { detail, .. } => detail,
                        e => e.to_string(),
                    },
                })?;
                Some(DraftFile {
                    path: d,
                    file: f,
                    config: a,
                })
            }
            None => None,
        };
        out.push(SpecPair {
            arg: pair.clone(),
            target: t,
            draft,
        });
    }
    for p in &out {
        check_finite("target", &p.target.path, &p.target.file)?;
        if let Some(d) = &p.draft {
            check_finite("drafter", &d.path, &d.file)?;
        }
    }
    Ok(out)
}

/// Parses a `--format` / `--draft-format` value: `Q2_K_MIX` or a ggml type name with a GPU
/// kernel ([`crate::ops::format_suffix`]).
///
/// Errors: [`ArgError::Option`] naming `name` (the option) and the value.
pub fn weight_mix(name: &'static str, text: &str) -> Result<WeightMix, ArgError> {
    let mix = WeightMix::parse(text).ok_or_else(|| {
        option(
            name,
            text,
            "not Q2_K_MIX or a ggml type name (e.g. Q4_K, Q8_0, BF16)",
        )
    })?;
    if let WeightMix::Uniform(ty) = mix {
        crate::ops::format_suffix(ty, name).map_err(|_| {
            let with: Vec<String> = kernels::FORMATS
                .iter()
                .map(|f| f.to_ascii_uppercase())
                .collect();
            option(
                name,
                text,
                format!(
                    "the GPU has no kernel for {ty} (formats with one: {})",
                    with.join(", ")
                ),
            )
        })?;
    }
    Ok(mix)
}

/// `runtime bench`: `--prompt` and `--decode` ≥ 1 with `prompt + decode + 64` ≤ [`MAX_CTX`]
/// (the bench's context) and the 12B shapes whole blocks of `mix`'s formats. The drafter's
/// options are [`bench_drafter`]'s.
///
/// Errors: [`ArgError::Option`] naming the option.
pub fn bench(mix: WeightMix, prompt: usize, decode: usize) -> Result<(), ArgError> {
    if prompt == 0 {
        return Err(option("--prompt", 0, "must be at least 1"));
    }
    if decode == 0 {
        return Err(option(
            "--decode",
            0,
            "must be at least 1 (decode steps timed)",
        ));
    }
    let most = MAX_CTX - 64;
    if prompt.saturating_add(decode) > most {
        // both named: either may be the one the user gave (the other its default)
        return Err(ArgError::Together {
            given: format!("--prompt {prompt} + --decode {decode}"),
            why: format!(
                "must be at most {most} (the bench's context of {MAX_CTX} positions, less 64)"
            ),
        });
    }
    let target = crate::bench::config_12b();
    crate::bench::check_mix(&target, mix)
        .map_err(|e| option("--format", mix.name(), e.to_string()))?;
    Ok(())
}

/// `runtime bench --draft-format F --draft-width W --draft-layers L`: the synthetic drafter of
/// `W` wide `L` layers in `mix`'s formats ([`crate::bench::AssistantShape::with_size`]), `W` in
/// `1 ..=` the 12B target's width and `L` in `1 ..=` its layer count (a drafter no larger than
/// the target it drafts for), a valid shape for that target in those formats
/// ([`DraftOptions::check`]). Returns the drafter's options.
///
/// Errors: [`ArgError::Option`] naming the option.
pub fn bench_drafter(
    mix: WeightMix,
    width: usize,
    layers: usize,
) -> Result<DraftOptions, ArgError> {
    let target = crate::bench::config_12b();
    if !(1..=target.n_embd).contains(&width) {
        return Err(option(
            "--draft-width",
            width,
            format!("must be in 1..={} (the 12B target's width)", target.n_embd),
        ));
    }
    if !(1..=target.n_layer).contains(&layers) {
        return Err(option(
            "--draft-layers",
            layers,
            format!(
                "must be in 1..={} (the 12B target's layer count)",
                target.n_layer
            ),
        ));
    }
    let d = DraftOptions {
        shape: crate::bench::AssistantShape::with_size(width, layers),
        mix,
    };
    d.check(&target).map_err(|e| {
        option(
            "--draft-width",
            width,
            format!("drafter in {}: {e}", mix.name()),
        )
    })?;
    Ok(d)
}

/// Creates the output folder `dir` of a verb (`source`: where it was given, `--out` or `$OUT`)
/// and writes and removes a probe file in it, before CUDA is probed: a folder that cannot be
/// created or written (a path that is a file, a read-only folder) is reported at once, not after
/// the run, whose results it would lose. The probe tests what the run will do, whatever the
/// permission bits say (root writes into a folder without `w`; a read-only mount refuses root).
///
/// Errors: [`ArgError::Option`] naming `source`, the folder and the cause (`is a file, not a
/// folder`, or the I/O error).
pub fn out_dir(source: &'static str, dir: &Path) -> Result<(), ArgError> {
    if let Ok(m) = std::fs::metadata(dir) {
        if !m.is_dir() {
            let what = if m.is_file() {
                "a file"
            } else {
                "not a regular file"
            };
            return Err(option(
                source,
                dir.display(),
                format!("is {what}, not a folder (the output folder)"),
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        option(
            source,
            dir.display(),
            format!("cannot create the output folder: {e}"),
        )
    })?;
    let probe = dir.join(format!(".write-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|e| {
            option(
                source,
                dir.display(),
                format!("cannot write in the output folder: {e}"),
            )
        })
}

/// The output file `file` of a verb (`source`: where it was given), before CUDA is probed: not a
/// folder or another non-regular file (a FIFO would block the write), an existing file opened
/// for appending (nothing is changed), and its folder created and probed as [`out_dir`] does.
///
/// Errors: [`ArgError::Option`] naming `source`, the path and the cause.
pub fn out_file(source: &'static str, file: &Path) -> Result<(), ArgError> {
    match std::fs::metadata(file) {
        Ok(m) if m.is_dir() => {
            return Err(option(
                source,
                file.display(),
                "is a folder, not a file (the output file)",
            ))
        }
        Ok(m) if !m.is_file() => {
            return Err(option(
                source,
                file.display(),
                "is not a regular file (the output file)",
            ))
        }
        Ok(_) => {
            std::fs::OpenOptions::new()
                .append(true)
                .open(file)
                .map_err(|e| option(source, file.display(), format!("cannot be written: {e}")))?;
        }
        Err(_) => {}
    }
    match file.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => out_dir(source, d),
        None => out_dir(source, Path::new(".")),
    }
}

/// `runtime mv-bench`: `--iters` ≥ 1 and `--case` naming at least one case
/// ([`crate::mvbench::case_names`]).
///
/// Errors: [`ArgError::Option`] (an unknown case lists the names).
pub fn mv_bench(iters: usize, case: Option<&str>) -> Result<(), ArgError> {
    if iters == 0 {
        return Err(option("--iters", 0, "must be at least 1"));
    }
    if let Some(c) = case {
        let names = crate::mvbench::case_names();
        if !names.iter().any(|n| n.contains(c)) {
            return Err(option(
                "--case",
                c,
                format!("no case name contains it (cases: {})", names.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SpecCheckOptions {
        SpecCheckOptions {
            ks: vec![1, 2, 4, 8],
            max_tokens: 64,
            prompts: 3,
            oracle: true,
            rollback_tokens: 96,
            drafter_steps: 4,
            drafter_tol: 1e-3,
            batch: 2,
        }
    }

    fn fixture(name: &str) -> Option<PathBuf> {
        let fx = reference::fixtures_dir();
        let p = fx.join(format!("models/{name}.gguf"));
        if p.exists() {
            Some(p)
        } else {
            println!("skipped: fixtures not found at {}", fx.display());
            None
        }
    }

    /// A copy of `src` in `dir` with a quiet NaN (0x7FC00000) as element 0 of its first F32
    /// norm weight (a tensor the config does not read); returns the copy's path and that
    /// tensor's name.
    fn nan_copy(src: &Path, dir: &Path) -> (PathBuf, String) {
        let f = GgufFile::open(src).unwrap();
        let t = f
            .tensors()
            .iter()
            .find(|t| t.ggml_type == reference::quant::GgmlType::F32 && t.name.contains("norm"))
            .expect("an F32 norm weight")
            .clone();
        let pos = f.tensor_file_offset(&t) as usize;
        drop(f);
        let mut b = std::fs::read(src).unwrap();
        b[pos..pos + 4].copy_from_slice(&0x7FC0_0000u32.to_le_bytes());
        let bad = dir.join(format!(
            "nan-{}",
            src.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&bad, b).unwrap();
        (bad, t.name)
    }

    /// A copy of `src` in `dir` named `name` with tensor `tensor`'s ggml type id (in its tensor
    /// info: length-prefixed name, `n_dims`, dims, type) changed from `from` to `to`.
    fn retyped_copy(
        src: &Path,
        dir: &Path,
        name: &str,
        tensor: &str,
        from: u32,
        to: u32,
    ) -> PathBuf {
        let mut b = std::fs::read(src).unwrap();
        let mut key = (tensor.len() as u64).to_le_bytes().to_vec();
        key.extend_from_slice(tensor.as_bytes());
        let at = b
            .windows(key.len())
            .position(|w| w == key)
            .expect("the tensor's info")
            + key.len();
        let n_dims = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let ty = at + 4 + 8 * n_dims;
        assert_eq!(b[ty..ty + 4], from.to_le_bytes(), "{tensor}'s type id");
        b[ty..ty + 4].copy_from_slice(&to.to_le_bytes());
        let out = dir.join(name);
        std::fs::write(&out, b).unwrap();
        out
    }

    /// A tensor of a type the GPU loader cannot take is refused before CUDA, naming the file, the
    /// tensor and the type: a matrix (`blk.0.proj.weight` of the e2b Q4_0 target, F16 → I16, the
    /// same bytes) has no GPU kernel; a norm (F32 → I32) does not decode on the host. The
    /// unpatched file passes.
    #[test]
    fn a_tensor_type_without_a_gpu_path_is_refused() {
        let Some(m) = fixture("e2b-target.Q4_0") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("runtime-args-type-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // ggml type ids: F32 0, F16 1, I16 25, I32 26
        let mat = retyped_copy(&m, &dir, "i16.gguf", "blk.0.proj.weight", 1, 25);
        let e = model_check(std::slice::from_ref(&mat), 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "model {}: no GPU kernel for tensor type I16 (in blk.0.proj.weight)",
                mat.display()
            )
        );
        let norm = retyped_copy(&m, &dir, "i32.gguf", "blk.0.attn_norm.weight", 0, 26);
        let e = model_check(std::slice::from_ref(&norm), 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "model {}: tensor blk.0.attn_norm.weight: unsupported tensor type I32 (ggml type \
                 id 26)",
                norm.display()
            )
        );
        let e = spec_check(&[mat.display().to_string()], &opts()).unwrap_err();
        assert!(e
            .to_string()
            .starts_with(&format!("target {}: no GPU kernel", mat.display())));
        model_check(std::slice::from_ref(&m), 16).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// What [`model_check`] returns is the model it checked, opened once: the file at the path
    /// given, the config matching the tensor table (`V` = `token_embd.weight`'s second
    /// dimension, `H` its first), and each built-in prompt encoded with the file's BOS id
    /// (read from the metadata) first and decoding back to the prompt's text.
    #[test]
    fn model_check_returns_what_it_opened() {
        let Some(m) = fixture("dense-target.Q4_K_M") else {
            return;
        };
        let mut got = model_check(std::slice::from_ref(&m), 16).unwrap();
        assert_eq!(got.len(), 1);
        let t = got.remove(0);
        assert_eq!(t.path, m);
        assert_eq!(t.file.shard_paths(), vec![Some(m.as_path())]);
        let embd = t.file.tensor("token_embd.weight").unwrap();
        assert_eq!(
            (t.config.n_embd as u64, t.config.n_vocab as u64),
            (embd.dims[0], embd.dims[1])
        );
        let bos = t
            .file
            .get("tokenizer.ggml.bos_token_id")
            .and_then(|v| v.as_int())
            .expect("a BOS id");
        assert_eq!(t.prompts.len(), PROMPTS.len());
        for (ids, text) in t.prompts.iter().zip(PROMPTS) {
            assert_eq!(i128::from(ids[0]), bos, "{text}");
            assert_eq!(t.tokenizer.decode(&ids[1..]).unwrap(), text);
        }
    }

    /// A NaN weight is refused by the argument check, naming the role, the file, the tensor
    /// and the element, for a model, a target and a drafter; the cheap checks (`--gen`) come
    /// before the scan.
    #[test]
    fn a_nonfinite_weight_is_refused_before_cuda() {
        let (Some(t), Some(d)) = (
            fixture("dense-target.Q4_K_M"),
            fixture("dense-assistant.F32"),
        ) else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("runtime-args-nan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (bad_t, t_name) = nan_copy(&t, &dir);
        let (bad_d, d_name) = nan_copy(&d, &dir);
        let want = |role: &str, path: &Path, tensor: &str| {
            format!(
                "{role} {}: tensor '{tensor}' (F32): element 0 (row 0) is NaN",
                path.display()
            )
        };
        let e = model_check(std::slice::from_ref(&bad_t), 16).unwrap_err();
        assert!(matches!(e, ArgError::File { role: "model", .. }), "{e}");
        assert!(
            e.to_string().starts_with(&want("model", &bad_t, &t_name)),
            "{e}"
        );
        let e = model_check(std::slice::from_ref(&bad_t), 600)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--gen 600: must be at most "), "{e}");
        let pair = |t: &Path, d: &Path| format!("{}={}", t.display(), d.display());
        let e = spec_check(&[pair(&bad_t, &d)], &opts())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&want("target", &bad_t, &t_name)), "{e}");
        let e = spec_check(&[pair(&t, &bad_d)], &opts())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(&want("drafter", &bad_d, &d_name)), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A model whose trained context is shorter than a built-in prompt is refused naming the
    /// file and both lengths, whatever `--gen` (`--gen 0` passed): a copy of the dense target
    /// with `gemma4.context_length` set to 8 (its longest prompt has more tokens).
    #[test]
    fn a_context_shorter_than_the_prompts_is_refused() {
        let Some(m) = fixture("dense-target.Q4_K_M") else {
            return;
        };
        let mut b = std::fs::read(&m).unwrap();
        let key = b"gemma4.context_length";
        let at = b
            .windows(key.len())
            .position(|w| w == key)
            .expect("the context_length key")
            + key.len();
        // value type 4 = UINT32, then the value
        assert_eq!(b[at..at + 4], 4u32.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&8u32.to_le_bytes());
        let dir = std::env::temp_dir().join(format!("runtime-args-ctx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let short = dir.join("ctx8.gguf");
        std::fs::write(&short, b).unwrap();
        let tok = GemmaTokenizer::from_gguf(&GgufFile::open(&m).unwrap()).unwrap();
        let longest = PROMPTS
            .iter()
            .map(|p| tok.encode(p, true).unwrap().len())
            .max()
            .unwrap();
        assert!(longest > 8, "{longest}");
        for gen in [0, 16] {
            let e = model_check(std::slice::from_ref(&short), gen)
                .unwrap_err()
                .to_string();
            assert_eq!(
                e,
                format!(
                    "model {}: its longest built-in prompt has {longest} tokens, more than the \
                     check's context of 8 positions (its trained context_length is 8)",
                    short.display()
                )
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Numeric options are refused by name, before any file is read (`x` does not exist); so is
    /// a pair with an empty target or drafter path, naming the pair.
    #[test]
    fn spec_check_options_are_refused_by_name() {
        let pairs = ["x".to_string()];
        type Edit = fn(&mut SpecCheckOptions);
        let cases: [(Edit, &str); 6] = [
            (
                |o| o.prompts = 9,
                "--prompts 9: must be in 1..=3 (the built-in prompts)",
            ),
            (
                |o| o.ks = vec![0],
                "--ks 0: every draft length K must be in 1..=16",
            ),
            (
                |o| o.ks = vec![2, 17],
                "--ks 2,17: every draft length K must be in 1..=16",
            ),
            (|o| o.max_tokens = 0, "--max-tokens 0: must be at least 1"),
            (
                |o| o.drafter_tol = f64::NAN,
                "--drafter-tol NaN: must be a finite tolerance > 0 (logits)",
            ),
            (
                |o| o.batch = 17,
                "--batch 17: must be at most 16: one verify forward holds 32 rows, K + 1 ≥ 2 \
                 per sequence (0 or 1 skips the check)",
            ),
        ];
        for (edit, want) in cases {
            let mut o = opts();
            edit(&mut o);
            assert_eq!(spec_check(&pairs, &o).unwrap_err().to_string(), want);
        }
        assert_eq!(
            spec_check(&pairs, &opts()).unwrap_err().to_string(),
            "target x: no such file"
        );
        for (pair, want) in [
            (
                "x=",
                "PAIRS x=: the drafter path is empty (give TARGET.gguf=DRAFT.gguf or TARGET.gguf)",
            ),
            (
                "=x",
                "PAIRS =x: the target path is empty (give TARGET.gguf=DRAFT.gguf or TARGET.gguf)",
            ),
            (
                "",
                "PAIRS : the target path is empty (give TARGET.gguf=DRAFT.gguf or TARGET.gguf)",
            ),
        ] {
            assert_eq!(
                spec_check(&[pair.to_string()], &opts())
                    .unwrap_err()
                    .to_string(),
                want
            );
        }
        assert_eq!(
            split_pair("a=b=c").unwrap(),
            (PathBuf::from("a"), Some(PathBuf::from("b=c")))
        );
        let mut o = opts();
        o.rollback_tokens = 0;
        assert!(spec_check(&pairs, &o)
            .unwrap_err()
            .to_string()
            .starts_with("--rollback-tokens 0: x has no drafter"));
    }

    /// A model, pair or draft length given twice is refused before any file is read, naming
    /// both places: a file named two ways (`DIR/m.gguf`, `DIR/./m.gguf`) is one file; the same
    /// target with another drafter, or alone, is another pair. (The files are empty: nothing is
    /// opened before the repeat is found, else the error would be the file's.)
    #[test]
    fn a_model_pair_or_draft_length_given_twice_is_refused() {
        let dir = std::env::temp_dir().join(format!("runtime-args-twice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (m, a) = (dir.join("m.gguf"), dir.join("a.gguf"));
        std::fs::write(&m, b"").unwrap();
        std::fs::write(&a, b"").unwrap();
        let m2 = dir.join(".").join("m.gguf");
        let e = model_check(&[m.clone(), a.clone(), m2.clone()], 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "model {}: given twice (models 1 and 3): each model is checked once",
                m2.display()
            )
        );
        let p = |t: &Path, d: Option<&Path>| match d {
            Some(d) => format!("{}={}", t.display(), d.display()),
            None => t.display().to_string(),
        };
        let pairs = [p(&m, Some(&a)), p(&m, None), p(&m2, Some(&a))];
        assert_eq!(
            spec_check(&pairs, &opts()).unwrap_err().to_string(),
            format!(
                "PAIRS {}: given twice (pairs 1 and 3, {} and {}): each pair is checked once",
                pairs[2], pairs[0], pairs[2]
            )
        );
        // the same target alone and with a drafter are two pairs: no repeat, so the check
        // goes on to the (empty) target file
        let e = spec_check(&pairs[..2], &opts()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("target {}: ", m.display())) && e.contains("not a GGUF file"),
            "{e}"
        );
        let mut o = opts();
        o.ks = vec![1, 4, 2, 4];
        assert_eq!(
            spec_check(&pairs[..1], &o).unwrap_err().to_string(),
            "--ks 1,4,2,4: K = 4 is given twice: each draft length once"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Missing, folder and non-GGUF files are named with their role.
    #[test]
    fn model_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("runtime-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.gguf");
        std::fs::write(&junk, b"GGU").unwrap();
        let e = model_check(&[dir.join("nope.gguf")], 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("model {}: no such file", dir.join("nope.gguf").display())
        );
        let e = model_check(std::slice::from_ref(&dir), 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("model {}: is a folder, not a GGUF file", dir.display())
        );
        let e = model_check(std::slice::from_ref(&junk), 16).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "model {}: bad magic 0x47 0x47 0x55",
                junk.display()
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A FIFO given as a model or drafter is refused naming what it is, without opening it (an
    /// open waited for a writer forever); so is a device.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_opening_it() {
        let dir = std::env::temp_dir().join(format!("runtime-args-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("f.gguf");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if made {
            let e = model_check(std::slice::from_ref(&fifo), 16).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("model {}: is a FIFO, not a regular file", fifo.display())
            );
            let e = spec_check(&[format!("{}=x", fifo.display())], &opts()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("target {}: is a FIFO, not a regular file", fifo.display())
            );
            let e = open_gguf("drafter", &fifo).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("drafter {}: is a FIFO, not a regular file", fifo.display())
            );
        } else {
            println!("skipped the FIFO case: mkfifo unavailable");
        }
        let e = model_check(&[PathBuf::from("/dev/null")], 16).unwrap_err();
        assert_eq!(
            e.to_string(),
            "model /dev/null: is a device, not a regular file"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// On the fixtures: a dense target with the MoE drafter is refused (pairing), the dense
    /// pair passes, and `--gen` / `--max-tokens` beyond the context are refused naming the
    /// bound.
    #[test]
    fn pairing_and_context_on_the_fixtures() {
        let (Some(t), Some(d), Some(moe_d)) = (
            fixture("dense-target.Q4_K_M"),
            fixture("dense-assistant.F32"),
            fixture("moe-assistant.Q8_0"),
        ) else {
            return;
        };
        let pair = |d: &Path| format!("{}={}", t.display(), d.display());
        let checked = spec_check(&[pair(&d), t.display().to_string()], &opts()).unwrap();
        assert_eq!(checked.len(), 2);
        assert_eq!(checked[0].arg, pair(&d));
        assert_eq!(checked[0].target.path, t);
        let drafter = checked[0].draft.as_ref().expect("the pair's drafter");
        assert_eq!(drafter.path, d);
        assert_eq!(drafter.file.shard_paths(), vec![Some(d.as_path())]);
        assert_eq!(drafter.config.n_embd_out, checked[0].target.config.n_embd);
        assert!(checked[1].draft.is_none());
        let e = spec_check(&[pair(&moe_d)], &opts()).unwrap_err();
        assert!(matches!(e, ArgError::Pairing { .. }), "{e}");
        assert!(
            e.to_string()
                == format!(
                    "target {} with drafter {}: inconsistent metadata: assistant key_length 64 != \
                 target key_length 128",
                    t.display(),
                    moe_d.display()
                ),
            "{e}"
        );
        let mut o = opts();
        o.max_tokens = 5000;
        let e = spec_check(&[pair(&d)], &o).unwrap_err().to_string();
        assert!(e.starts_with("--max-tokens 5000: must be at most "), "{e}");
        model_check(std::slice::from_ref(&t), 16).unwrap();
        let e = model_check(std::slice::from_ref(&t), 600)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--gen 600: must be at most "), "{e}");
    }

    /// An output folder that is a file, or where nothing can be written (`/proc/self`, whatever
    /// the user: root writes into read-only-mode folders), is refused naming the option; so is
    /// an output file that is a folder. A new folder is created and left empty (the probe
    /// removed); an existing output file is left as it was.
    #[test]
    fn unwritable_outputs_are_refused() {
        let dir = std::env::temp_dir().join(format!("runtime-args-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let sub = dir.join("a/b");
        out_dir("--out", &sub).unwrap();
        assert_eq!(std::fs::read_dir(&sub).unwrap().count(), 0);
        let f = dir.join("file");
        std::fs::write(&f, b"kept").unwrap();
        assert_eq!(
            out_dir("--out", &f).unwrap_err().to_string(),
            format!(
                "--out {}: is a file, not a folder (the output folder)",
                f.display()
            )
        );
        let e = out_dir("$OUT", Path::new("/proc/self"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("$OUT /proc/self: cannot write in the output folder: "),
            "{e}"
        );
        assert_eq!(
            out_file("--out", &sub).unwrap_err().to_string(),
            format!(
                "--out {}: is a folder, not a file (the output file)",
                sub.display()
            )
        );
        out_file("--out", &f).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"kept");
        out_file("--out", &dir.join("c/mv.json")).unwrap();
        assert!(dir.join("c").is_dir());
        let e = out_file("--out", &f.join("mv.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "--out {}: is a file, not a folder (the output folder)",
                f.display()
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bench_options() {
        let mix = WeightMix::Q2KMix;
        assert_eq!(
            bench(mix, 32, 0).unwrap_err().to_string(),
            "--decode 0: must be at least 1 (decode steps timed)"
        );
        assert_eq!(
            bench(mix, 0, 32).unwrap_err().to_string(),
            "--prompt 0: must be at least 1"
        );
        // both options named, neither blamed (`--prompt 20000` alone blamed --decode)
        assert_eq!(
            bench(mix, 20_000, 32).unwrap_err().to_string(),
            "--prompt 20000 + --decode 32: must be at most 11936 (the bench's context of 12000 \
             positions, less 64)"
        );
        assert!(bench(mix, 11_000, 1000)
            .unwrap_err()
            .to_string()
            .starts_with("--prompt 11000 + --decode 1000: must be at most 11936"));
        // a sum beyond usize::MAX is refused as too long (it panicked with an overflow)
        assert!(bench(mix, usize::MAX, 1)
            .unwrap_err()
            .to_string()
            .starts_with("--prompt 18446744073709551615 + --decode 1: must be at most"));
        bench(mix, 32, 32).unwrap();
        assert_eq!(
            weight_mix("--format", "NOPE").unwrap_err().to_string(),
            "--format NOPE: not Q2_K_MIX or a ggml type name (e.g. Q4_K, Q8_0, BF16)"
        );
        assert_eq!(
            weight_mix("--format", "IQ2_XXS").unwrap_err().to_string(),
            "--format IQ2_XXS: the GPU has no kernel for IQ2_XXS (formats with one: F32, F16, \
             BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, \
             IQ4_XS)"
        );
        // the JSON's file name spells the format canonically, however it was typed
        for (typed, file) in [
            ("q4_k", "bench-Q4_K.json"),
            ("Q2_K_MIX", "bench-Q2_K_MIX.json"),
            ("bf16", "bench-BF16.json"),
        ] {
            let mix = weight_mix("--format", typed).unwrap();
            assert_eq!(crate::bench::json_file_name(mix), file, "{typed}");
        }
        let bf16 = weight_mix("--draft-format", "BF16").unwrap();
        let d = bench_drafter(bf16, 1024, 4).unwrap();
        assert_eq!(
            (d.shape.n_embd, d.shape.n_ff, d.shape.pattern()),
            (1024, 4096, "sssf".to_string())
        );
        bench_drafter(bf16, 3840, 48).unwrap();
        for (w, l, want) in [
            (
                0,
                4,
                "--draft-width 0: must be in 1..=3840 (the 12B target's width)",
            ),
            (
                3841,
                4,
                "--draft-width 3841: must be in 1..=3840 (the 12B target's width)",
            ),
            (
                usize::MAX,
                4,
                "--draft-width 18446744073709551615: must be in 1..=3840 (the 12B target's width)",
            ),
            (
                1024,
                0,
                "--draft-layers 0: must be in 1..=48 (the 12B target's layer count)",
            ),
            (
                1024,
                100_000_000_000,
                "--draft-layers 100000000000: must be in 1..=48 (the 12B target's layer count)",
            ),
        ] {
            assert_eq!(bench_drafter(bf16, w, l).unwrap_err().to_string(), want);
        }
        let q4 = weight_mix("--draft-format", "Q4_K").unwrap();
        let e = bench_drafter(q4, 1000, 4).unwrap_err().to_string();
        assert!(
            e.starts_with("--draft-width 1000: drafter in Q4_K: ")
                && e.contains(
                    "row length 1000 must be a multiple of 32 and of the Q4_K block size 256"
                ),
            "{e}"
        );
        assert_eq!(
            mv_bench(0, None).unwrap_err().to_string(),
            "--iters 0: must be at least 1"
        );
        assert!(mv_bench(50, Some("nope"))
            .unwrap_err()
            .to_string()
            .starts_with("--case nope: no case name contains it (cases: attn_q+attn_k+attn_v, "));
        mv_bench(50, Some("ffn")).unwrap();
    }
}
