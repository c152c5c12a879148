//! `cargo xtask conformance`: run an engine on the conformance suites and judge it against the
//! f64 oracle (`design/conformance.md` §3, §8). Exit code 0 all pass, 1 some fail, 2 the run
//! could not be judged.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use suites::conformance::{conformance, ModelSpec, Options};
use suites::Mode;

/// Flags of `conformance`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Target model GGUF (default: the fixture models in $GEMMA4_FIXTURES/models).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// MTP drafter GGUF (declares spec:K modes) of `--model`; without `--model` the default
    /// models come with their own assistants.
    #[arg(long, requires = "model")]
    pub draft: Option<PathBuf>,
    /// Suite name (suites/<NAME>.toml) or path; repeatable (default: smoke and core).
    #[arg(long = "suite")]
    pub suites: Vec<OsString>,
    /// Engine: reference-f32 (default), reference-f64, cuda (built with the `cuda` feature), or an HTTP
    /// server: `llama-server=URL` or `openai=URL` (options below).
    #[arg(long, default_value = "reference-f32", value_parser = crate::Text)]
    pub engine: String,
    /// Comma-separated modes (default: the suite's), e.g. `plain,batch:4,spec:4`.
    #[arg(long, value_parser = crate::Text)]
    pub modes: Option<String>,
    /// Only these prompt ids (comma-separated).
    #[arg(long, value_parser = crate::Text)]
    pub prompts: Option<String>,
    /// Output folder (default target/conformance).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Name this run: the report goes to target/conformance/runs/LABEL (for `cargo xtask compare`;
    /// not with --out).
    #[arg(long, conflicts_with = "out")]
    pub label: Option<OsString>,
    /// Allow an HTTP engine on a non-loopback address (only with `--engine NAME=URL`).
    #[arg(long)]
    pub allow_remote: bool,
    /// Row invariance (conformance §7): compare every prefill / batch:N / spec:K row with the
    /// engine's plain decode row on the same prefix; a flip with oracle margin > τ fails.
    #[arg(long)]
    pub strict_invariance: bool,
    /// A spec:K acceptance below the suite's floor (`slow-spec`) fails the run (exit 1).
    #[arg(long)]
    pub require_acceptance: bool,
    /// Run the f64 oracle's own spec:K (cached) on every suite and report its acceptance beside
    /// the engine's (default: only suites with `oracle_acceptance = true`, i.e. smoke).
    #[arg(long)]
    pub oracle_acceptance: bool,
    /// Load a model with NaN/Inf weights anyway, for forensic use (conformance §9): by
    /// default loading stops at the first one, naming tensor, block and field (exit 2).
    /// Non-finite logits are then reported, never judged, blessed or passed.
    #[arg(long)]
    pub allow_nonfinite: bool,
}

/// The load options of `--allow-nonfinite` (`allow`): the oracle's and engines' loaders skip
/// the non-finite check (conformance contract §9) only when it is given.
pub fn load_options(allow: bool) -> reference::model::LoadOptions {
    reference::model::LoadOptions::default().with_allow_nonfinite(allow)
}

/// The workspace root (the folder above `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `$GEMMA4_FIXTURES` (unset or empty: `../shared/fixtures` beside the workspace root):
/// [`reference::fixtures_dir`].
pub fn fixtures_dir() -> PathBuf {
    reference::fixtures_dir()
}

/// What a verb that takes `--model` adds to a missing-fixtures message.
const OR_MODEL: &str = ", or pass --model";

/// Why the default models cannot be used: the real-toolchain fixtures folder
/// `$GEMMA4_FIXTURES/models` (default `../shared/fixtures/models` beside the workspace) is missing.
/// The message names the folder and what to do; `None` when it exists.
pub fn missing_fixtures() -> Option<String> {
    missing_models_in(&fixtures_dir(), OR_MODEL)
}

/// `rel` under the fixtures folder (a verb's default model), or why it cannot be used
/// ([`fixture_file`] for a verb that takes `--model`).
pub fn default_fixture(rel: &str) -> Result<PathBuf, String> {
    fixture_file(rel, OR_MODEL)
}

/// The fixture path rule of every verb: `rel` under the fixtures folder ([`fixtures_dir`]) when
/// that file exists. Errors: the message naming the missing `models/` folder and
/// `GEMMA4_FIXTURES` ([`missing_fixtures`]), or else the missing file; `or` ends it with what
/// else the verb takes (`", or pass --model"`, `""` for a verb without a model flag).
pub fn fixture_file(rel: &str, or: &str) -> Result<PathBuf, String> {
    fixture_in(&fixtures_dir(), rel, or)
}

/// [`missing_fixtures`] for the fixtures folder `dir`.
fn missing_models_in(dir: &Path, or: &str) -> Option<String> {
    let m = dir.join("models");
    (!m.is_dir()).then(|| {
        format!(
            "the default models are the real-toolchain fixtures, expected in {} (not found): set \
             GEMMA4_FIXTURES to the fixtures folder (the one holding models/){or}",
            m.display()
        )
    })
}

/// [`fixture_file`] for the fixtures folder `dir`.
fn fixture_in(dir: &Path, rel: &str, or: &str) -> Result<PathBuf, String> {
    if let Some(why) = missing_models_in(dir, or) {
        return Err(why);
    }
    let p = dir.join(rel);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: the fixtures folder lacks it (set GEMMA4_FIXTURES to a complete \
             one{or})",
            p.display()
        ))
    }
}

/// The default models (README "main job"):
/// the real-toolchain fixtures (b) first, then (a) the synthetic fixtures of `cargo xtask fixtures` (`target/fixtures/manifest.json`, built
/// when it or a file it lists is missing; skipped with a note when that fails): every `UD-Q2_K_XL` target with its
/// `UD-Q2_K_XL` assistant, on the smoke suite;
/// (b) the real-toolchain fixtures in `$GEMMA4_FIXTURES/models`: `dense-target.Q4_K_M` +
/// `dense-assistant.F32`, `e2b-target.Q4_0` + `e2b-assistant.Q8_0`, `moe-target.Q4_K_M` +
/// `moe-assistant.Q8_0`, on the suites given (smoke and core by default).
///
/// Errors: a synthetic fixture changed since it was built ([`synthetic_in`]).
pub fn default_models() -> Result<Vec<ModelSpec>, String> {
    let mut out = Vec::new();
    let m = fixtures_dir().join("models");
    for (t, d) in [
        ("dense-target.Q4_K_M", "dense-assistant.F32"),
        ("e2b-target.Q4_0", "e2b-assistant.Q8_0"),
        ("moe-target.Q4_K_M", "moe-assistant.Q8_0"),
    ] {
        out.push(ModelSpec {
            path: m.join(format!("{t}.gguf")),
            draft: Some(m.join(format!("{d}.gguf"))),
            suites: None,
        });
    }
    let root = workspace_root();
    out.extend(synthetic_in(
        &root.join("target/fixtures"),
        &root.join("goldens/fixtures-manifest.json"),
        |dir| {
            let args = crate::fixtures::Args {
                out: Some(dir.to_path_buf()),
                twelve_b: false,
                vocab_gguf: None,
                update_manifest: false,
            };
            crate::fixtures::run(&args).map_err(|e| format!("{e:#}"))
        },
    )?);
    Ok(out)
}

/// Why the synthetic fixtures in `dir` must be built: its `manifest.json` or a file the
/// manifest lists is missing (a deleted fixture was reported as `model not found`), or the
/// manifest is unreadable; `None` when all are there.
fn synthetic_missing(dir: &Path) -> Option<String> {
    let manifest = dir.join("manifest.json");
    let Ok(text) = std::fs::read_to_string(&manifest) else {
        return Some(format!("{} missing", manifest.display()));
    };
    let Ok(m) = serde_json::from_str::<crate::fixtures::Manifest>(&text) else {
        return Some(format!("{} unreadable", manifest.display()));
    };
    m.files
        .iter()
        .map(|f| dir.join(&f.file))
        .find(|p| !p.is_file())
        .map(|p| format!("{} missing", p.display()))
}

/// The synthetic `UD-Q2_K_XL` target/assistant pairs of the fixtures folder `dir` (its
/// `manifest.json`), each on the smoke suite; `build(dir)` (`cargo xtask fixtures`) runs first
/// when [`synthetic_missing`] says so. A target whose manifest SHA-256 is not the one pinned in
/// `committed` (`goldens/fixtures-manifest.json`: the recipe changed) is skipped with a note.
///
/// Errors: a fixture to be run (target or assistant) whose file no longer has its manifest
/// SHA-256 (edited or damaged after it was built: its goldens would stop the run as "pinned
/// to another SHA-256"), naming the file and `cargo xtask fixtures`.
fn synthetic_in(
    dir: &Path,
    committed: &Path,
    build: impl FnOnce(&Path) -> Result<(), String>,
) -> Result<Vec<ModelSpec>, String> {
    let manifest = dir.join("manifest.json");
    if let Some(why) = synthetic_missing(dir) {
        println!("note: {why}, running `cargo xtask fixtures`");
        if let Err(e) = build(dir) {
            println!("note: synthetic fixtures skipped (`cargo xtask fixtures` failed: {e})");
            return Ok(Vec::new());
        }
    }
    let parsed: Option<crate::fixtures::Manifest> = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(m) = parsed else {
        println!(
            "note: synthetic fixtures skipped ({} unreadable)",
            manifest.display()
        );
        return Ok(Vec::new());
    };
    // a fixture rebuilt from a changed recipe no longer matches its goldens: skip it, loudly
    let committed: Option<crate::fixtures::Manifest> = std::fs::read_to_string(committed)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let pinned = |file: &str, sha: &str| {
        committed
            .as_ref()
            .is_some_and(|c| c.files.iter().any(|f| f.file == file && f.sha256 == sha))
    };
    let unchanged = |f: &crate::fixtures::ManifestEntry| -> Result<PathBuf, String> {
        let path = dir.join(&f.file);
        let sha =
            reference::gguf::sha256_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if sha == f.sha256 {
            Ok(path)
        } else {
            Err(format!(
                "synthetic fixture {} has SHA-256 {sha}, not the {} it was built with ({}): it \
                 changed since; rebuild it with `cargo xtask fixtures`",
                path.display(),
                f.sha256,
                manifest.display()
            ))
        }
    };
    let variant = "UD-Q2_K_XL";
    let mut out = Vec::new();
    for t in m
        .files
        .iter()
        .filter(|f| f.role == "target" && f.variant == variant)
    {
        if !pinned(&t.file, &t.sha256) {
            println!(
                "note: synthetic fixture {} differs from goldens/fixtures-manifest.json (recipe changed?): skipped",
                t.file
            );
            continue;
        }
        let family = t.name.trim_end_matches("-target");
        let draft = m.files.iter().find(|f| {
            f.role == "assistant"
                && f.variant == variant
                && f.name.trim_end_matches("-assistant") == family
        });
        out.push(ModelSpec {
            path: unchanged(t)?,
            draft: draft.map(unchanged).transpose()?,
            suites: Some(vec![suite_path("smoke")]),
        });
    }
    Ok(out)
}

/// Resolves a suite name to `suites/<name>.toml` (a path with `/` or `.toml` is taken as is,
/// UTF-8 or not).
pub fn suite_path(name: impl AsRef<OsStr>) -> PathBuf {
    let name = name.as_ref();
    let bytes = name.as_encoded_bytes();
    if bytes.contains(&b'/') || bytes.ends_with(b".toml") {
        PathBuf::from(name)
    } else {
        let mut file = name.to_os_string();
        file.push(".toml");
        workspace_root().join("suites").join(file)
    }
}

/// Builds the library options from common flags. Errors: no `--model` and no fixtures folder
/// ([`missing_fixtures`]).
pub fn options(
    model: &Option<PathBuf>,
    draft: &Option<PathBuf>,
    suites: &[OsString],
    default_suites: &[impl AsRef<OsStr>],
    prompts: &Option<String>,
) -> Result<Options, String> {
    if model.is_none() {
        if let Some(why) = missing_fixtures() {
            return Err(why);
        }
    }
    let models = match model {
        Some(p) => vec![ModelSpec {
            path: p.clone(),
            draft: draft.clone(),
            suites: None,
        }],
        None => default_models()?
            .into_iter()
            .map(|mut m| {
                // explicit --suite flags apply to every model
                if !suites.is_empty() {
                    m.suites = None;
                }
                m
            })
            .collect(),
    };
    let names: Vec<OsString> = if suites.is_empty() {
        default_suites
            .iter()
            .map(|s| s.as_ref().to_os_string())
            .collect()
    } else {
        suites.to_vec()
    };
    let prompts = match prompts.as_deref() {
        Some(p) => prompts_flag(p)?,
        None => Vec::new(),
    };
    Ok(Options {
        models,
        suites: names.iter().map(suite_path).collect(),
        engine: "reference-f32".into(),
        modes: None,
        prompts,
        goldens_root: workspace_root().join("goldens"),
        out_dir: workspace_root().join("target/conformance"),
        cache_dir: workspace_root().join("target/conformance/cache"),
        progress: true,
        strict_invariance: false,
        require_acceptance: false,
        oracle_acceptance: false,
        load: Default::default(),
    })
}

/// [`options`] for a verb that returns its exit code: on an error it prints the `error: …` line
/// and gives `None` (the verb then returns 2).
pub fn verb_options(
    model: &Option<PathBuf>,
    draft: &Option<PathBuf>,
    suites: &[OsString],
    default_suites: &[impl AsRef<OsStr>],
    prompts: &Option<String>,
) -> Option<Options> {
    options(model, draft, suites, default_suites, prompts)
        .map_err(crate::print_error)
        .ok()
}

/// The prompt ids of a `--prompts` flag, comma-separated (empty entries skipped). Errors: a
/// flag naming no id (`--prompts ""`, `--prompts ","`: it ran every prompt, as if absent), an
/// id listed twice (as `--modes` refuses a mode twice).
pub fn prompts_flag(text: &str) -> Result<Vec<String>, String> {
    let ids: Vec<String> = text
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(id) = ids
        .iter()
        .enumerate()
        .find_map(|(i, id)| ids[..i].contains(id).then_some(id))
    {
        return Err(format!(
            "--prompts {text:?}: prompt {id} is listed twice (each prompt runs once)"
        ));
    }
    if ids.is_empty() {
        Err(format!(
            "--prompts {text:?} names no prompt id (give ids separated by commas, or leave \
             --prompts out for every prompt)"
        ))
    } else {
        Ok(ids)
    }
}

/// The modes of a `--modes` flag: at least one, each once. Errors: the message, naming the flag
/// and the bad or repeated mode; an empty list is answered with `example`, a list the verb
/// takes (`plain,batch:4,spec:4`; explain's two modes `plain,spec:4`).
pub fn modes_flag(text: &str, example: &str) -> Result<Vec<Mode>, String> {
    match Mode::parse_list(text) {
        Ok(list) if list.is_empty() => {
            Err(format!("--modes {text:?} names no mode (e.g. {example})"))
        }
        Ok(list) => Ok(list),
        Err(e) => Err(format!("--modes {text:?}: {e}")),
    }
}

/// The run folder of a `--label`: `target/conformance/runs/LABEL` ([`runs_dir`]). Errors: a
/// label that is not one plain folder name ([`suites::suite::is_safe_name`], the rule of suite
/// names): `--label "../../etc"` wrote the report outside `runs/`, `--label ""` into `runs/`
/// itself, and a label that is not UTF-8 (shown with its bad bytes escaped) is not one either.
pub fn label_flag(label: &OsStr) -> Result<PathBuf, String> {
    if label.to_str().is_some_and(suites::suite::is_safe_name) {
        Ok(runs_dir().join(label))
    } else {
        Err(format!(
            "--label {label:?}: a label names a folder of {} and must be {} (as suite names)",
            runs_dir().display(),
            suites::suite::SAFE_NAME_RULE
        ))
    }
}

/// Where labelled runs go: `target/conformance/runs` of the workspace.
pub fn runs_dir() -> PathBuf {
    workspace_root().join("target/conformance/runs")
}

/// What the terminal's last line adds for `slow-spec` notes: `, N slow-spec` and, when
/// `--require-acceptance` makes them fail the run, that they are why it exits 1 (the line read
/// `3 pass, 0 fail` while the exit status was 1).
fn slow_spec_clause(s: &suites::report::Summary) -> String {
    match (s.slow_spec, s.require_acceptance) {
        (0, _) => String::new(),
        (n, true) => format!(", {n} slow-spec (--require-acceptance: exit 1)"),
        (n, false) => format!(", {n} slow-spec (a note; --require-acceptance makes it fail)"),
    }
}

/// Runs the verb; returns the process exit code.
pub fn run(a: &Args) -> i32 {
    let label_dir = match a.label.as_deref().map(label_flag).transpose() {
        Ok(d) => d,
        Err(e) => {
            crate::print_error(e);
            return 2;
        }
    };
    if a.allow_remote && !a.engine.contains('=') {
        // it was ignored: the reference and cuda engines open no connection
        crate::print_error(format!(
            "--allow-remote is for an HTTP engine (--engine llama-server=URL or openai=URL); \
             --engine {} is not one",
            a.engine
        ));
        return 2;
    }
    let mut engine = a.engine.clone();
    if a.allow_remote {
        engine.push_str(",allow-remote");
    }
    // the whole engine spec before any model file (or the fixtures folder) is looked at: a bad
    // spec was reported only after a missing model had been fixed
    if let Err(e) = suites::conformance::check_engine(&engine) {
        crate::print_error(&e);
        return 2;
    }
    let Some(mut o) = verb_options(
        &a.model,
        &a.draft,
        &a.suites,
        &["smoke", "core"],
        &a.prompts,
    ) else {
        return 2;
    };
    o.engine = engine;
    o.progress = !a.quiet;
    o.strict_invariance = a.strict_invariance;
    o.require_acceptance = a.require_acceptance;
    o.oracle_acceptance = a.oracle_acceptance;
    o.load = load_options(a.allow_nonfinite);
    if let Some(out) = &a.out {
        o.out_dir.clone_from(out);
    }
    if let Some(dir) = label_dir {
        o.out_dir = dir;
    }
    // checked before the run, not after it (a file given as --out, or a read-only folder,
    // failed only at the end): created and written to
    if let Err(e) = suites::conformance::check_out_dir(&o.out_dir) {
        crate::print_error(&e);
        return 2;
    }
    if let Some(m) = &a.modes {
        match modes_flag(m, "plain,batch:4,spec:4") {
            Ok(m) => o.modes = Some(m),
            Err(e) => {
                crate::print_error(&e);
                return 2;
            }
        }
    }
    let t0 = std::time::Instant::now();
    match conformance(&o) {
        Ok(r) => {
            for run in &r.runs {
                let fails: Vec<String> = run
                    .entries
                    .iter()
                    .filter(|e| !e.passes)
                    .map(|e| format!("{}/{}: {}", e.prompt, e.mode, e.verdict.as_str()))
                    .collect();
                println!(
                    "{} · {} · {} · τ = {} ({}) — {} entries, {} fail{}",
                    run.model.stem,
                    run.suite,
                    run.engine,
                    run.tau,
                    run.tau_source,
                    run.entries.len(),
                    fails.len(),
                    if fails.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", fails.join(", "))
                    }
                );
                for (m, why) in &run.skipped_modes {
                    println!("  skipped {m}: {why}");
                }
                println!(
                    "  engine {:.1} s, oracle {:.1} s (oracle scorings: {} from the cache, {} computed{})",
                    run.engine_s,
                    run.oracle_s,
                    run.cache.0,
                    run.cache.1,
                    if run.goldens.is_some() {
                        "; other positions from the goldens"
                    } else {
                        ""
                    }
                );
                if run.strict_invariance {
                    let checked: Vec<_> = run
                        .entries
                        .iter()
                        .filter_map(|e| e.row_invariance.as_ref().map(|i| (e, i)))
                        .collect();
                    let max = checked
                        .iter()
                        .filter_map(|(_, i)| i.max_abs_diff)
                        .fold(0.0f64, f64::max);
                    let flips: usize = checked.iter().map(|(_, i)| i.flips.len()).sum();
                    let failed: Vec<String> = checked
                        .iter()
                        .filter(|(_, i)| i.failed)
                        .map(|(e, _)| format!("{}/{}", e.prompt, e.mode))
                        .collect();
                    println!(
                        "  row invariance: {} entries, max |Δ logit| {max:.3e}, {flips} flip(s), {} failed{} ({:.1} s)",
                        checked.len(),
                        failed.len(),
                        if failed.is_empty() { String::new() } else { format!(": {}", failed.join(", ")) },
                        run.invariance_s
                    );
                }
                if let Some(first) = run.acceptance.first() {
                    let rate = |r: Option<f64>| r.map_or("–".into(), |r| format!("{r:.3}"));
                    let cells: Vec<String> = run
                        .acceptance
                        .iter()
                        .map(|a| {
                            format!(
                                "{} {}{}",
                                a.mode,
                                rate(a.engine.rate),
                                a.oracle.as_ref().map_or(String::new(), |o| format!(
                                    " (oracle {})",
                                    rate(o.rate)
                                ))
                            )
                        })
                        .collect();
                    println!(
                        "  acceptance, drafter {} (floor {}): {}",
                        first.drafter,
                        first.floor.map_or("none".into(), |f| format!("{f:.3}")),
                        cells.join(", ")
                    );
                    for a in run
                        .acceptance
                        .iter()
                        .filter(|a| a.slow_spec || a.oracle_matches_plain == Some(false))
                    {
                        println!("  {}: {}", a.mode, a.note.as_deref().unwrap_or(""));
                    }
                }
            }
            println!(
                "{} pass, {} fail{} in {:.1} s. Report: {}",
                r.summary.passed,
                r.summary.failed,
                slow_spec_clause(&r.summary),
                t0.elapsed().as_secs_f64(),
                o.out_dir.join("report.md").display()
            );
            if r.summary.entries == 0 {
                // e.g. every asked mode skipped by the engine, or `--modes` naming none
                eprintln!("error: nothing was scored (see the skipped modes above)");
                return 2;
            }
            r.summary.exit_code
        }
        Err(e) => {
            crate::print_error(&e);
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture path rule: a missing `models/` folder is named with GEMMA4_FIXTURES and the
    /// verb's alternative; with the folder, a missing file is named; a present file is its path.
    #[test]
    fn fixture_rule_names_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("xtask-fixture-rule-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let e = fixture_in(&dir, "models/a.gguf", OR_MODEL).unwrap_err();
        assert_eq!(
            e,
            format!(
                "the default models are the real-toolchain fixtures, expected in {} (not found): \
                 set GEMMA4_FIXTURES to the fixtures folder (the one holding models/), or pass \
                 --model",
                dir.join("models").display()
            )
        );
        assert!(fixture_in(&dir, "models/a.gguf", "")
            .unwrap_err()
            .ends_with("models/)"));
        std::fs::create_dir_all(dir.join("models")).unwrap();
        assert_eq!(missing_models_in(&dir, OR_MODEL), None);
        assert_eq!(
            fixture_in(&dir, "models/a.gguf", "").unwrap_err(),
            format!(
                "{} not found: the fixtures folder lacks it (set GEMMA4_FIXTURES to a complete one)",
                dir.join("models/a.gguf").display()
            )
        );
        std::fs::write(dir.join("models/a.gguf"), b"x").unwrap();
        assert_eq!(
            fixture_in(&dir, "models/a.gguf", OR_MODEL).unwrap(),
            dir.join("models/a.gguf")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--prompts ""` and `--prompts ","` are refused (they ran every prompt); ids are trimmed
    /// and empty entries skipped.
    #[test]
    fn prompts_flag_naming_no_id_is_refused() {
        for text in ["", ",", " , "] {
            assert_eq!(
                prompts_flag(text).unwrap_err(),
                format!(
                    "--prompts {text:?} names no prompt id (give ids separated by commas, or \
                     leave --prompts out for every prompt)"
                )
            );
        }
        assert_eq!(
            prompts_flag("story, count_chat,").unwrap(),
            ["story", "count_chat"]
        );
        let e = options(
            &Some("m.gguf".into()),
            &None,
            &[],
            &["smoke"],
            &Some(",".into()),
        )
        .unwrap_err();
        assert!(e.starts_with("--prompts \",\" names no prompt id"), "{e}");
    }

    /// A label is one folder under target/conformance/runs; `..`, `""` and separators are
    /// refused naming the option.
    #[test]
    fn labels_stay_inside_the_runs_folder() {
        assert_eq!(
            label_flag(OsStr::new("mtp-4.b")).unwrap(),
            runs_dir().join("mtp-4.b")
        );
        for bad in ["", "..", "../../etc", "a/b", "/abs", ".x"] {
            let e = label_flag(OsStr::new(bad)).unwrap_err();
            assert!(e.starts_with(&format!("--label {bad:?}: ")), "{e}");
        }
    }

    /// A label that is not UTF-8 is refused by the label rule, naming the flag and showing the
    /// bad byte escaped (clap refused it naming nothing); a suite path that is not UTF-8 is a
    /// path, and a plain name is a file of suites/.
    #[test]
    fn non_utf8_labels_are_named_and_suite_paths_taken() {
        use std::os::unix::ffi::OsStrExt;
        let e = label_flag(OsStr::from_bytes(b"a\xff")).unwrap_err();
        assert!(
            e.starts_with("--label \"a\\xFF\": a label names a folder of "),
            "{e}"
        );
        let p = OsStr::from_bytes(b"/tmp/s\xff.toml");
        assert_eq!(suite_path(p), Path::new(p));
        assert_eq!(
            suite_path(OsStr::from_bytes(b"d\xff/s")),
            Path::new(OsStr::from_bytes(b"d\xff/s"))
        );
        assert_eq!(
            suite_path("smoke"),
            workspace_root().join("suites/smoke.toml")
        );
    }

    /// The synthetic fixtures are built when any file of the manifest is missing (a deleted
    /// fixture was `model not found`, since only a missing manifest.json rebuilt them), and a
    /// fixture changed since it was built stops the run saying to run `cargo xtask fixtures`.
    #[test]
    fn synthetic_fixtures_are_rebuilt_or_named() {
        use crate::fixtures::{Manifest, ManifestEntry};
        let dir = std::env::temp_dir().join(format!("xtask-synthetic-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let entry = |role: &str, name: &str, bytes: &[u8]| ManifestEntry {
            name: name.into(),
            variant: "UD-Q2_K_XL".into(),
            role: role.into(),
            file: format!("{name}.UD-Q2_K_XL.gguf"),
            bytes: bytes.len() as u64,
            sha256: {
                let p = dir.join("hash-me");
                std::fs::write(&p, bytes).unwrap();
                reference::gguf::sha256_file(&p).unwrap()
            },
        };
        let m = Manifest {
            generator: "test".into(),
            n_vocab: 8,
            files: vec![
                entry("target", "syn-x-target", b"target"),
                entry("assistant", "syn-x-assistant", b"assistant"),
            ],
        };
        let json = serde_json::to_string(&m).unwrap();
        std::fs::write(dir.join("manifest.json"), &json).unwrap();
        let committed = dir.join("committed.json");
        std::fs::write(&committed, &json).unwrap();
        // the target file is missing (deleted): built first
        std::fs::write(dir.join("syn-x-assistant.UD-Q2_K_XL.gguf"), b"assistant").unwrap();
        assert_eq!(
            synthetic_missing(&dir),
            Some(format!(
                "{} missing",
                dir.join("syn-x-target.UD-Q2_K_XL.gguf").display()
            ))
        );
        let mut built = false;
        let models = synthetic_in(&dir, &committed, |d| {
            built = true;
            std::fs::write(d.join("syn-x-target.UD-Q2_K_XL.gguf"), b"target")
                .map_err(|e| e.to_string())
        })
        .unwrap();
        assert!(built);
        assert_eq!(models.len(), 1);
        assert_eq!(models[0].path, dir.join("syn-x-target.UD-Q2_K_XL.gguf"));
        assert_eq!(
            models[0].draft.as_deref(),
            Some(dir.join("syn-x-assistant.UD-Q2_K_XL.gguf").as_path())
        );
        // all present: not built again
        synthetic_in(&dir, &committed, |_| panic!("built again")).unwrap();
        // the assistant changed after it was built: named, with the command that rebuilds it
        std::fs::write(dir.join("syn-x-assistant.UD-Q2_K_XL.gguf"), b"edited").unwrap();
        let e = synthetic_in(&dir, &committed, |_| panic!("built again")).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "synthetic fixture {} has SHA-256 ",
                dir.join("syn-x-assistant.UD-Q2_K_XL.gguf").display()
            )) && e.ends_with("it changed since; rebuild it with `cargo xtask fixtures`"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--prompts story,story` is refused naming the id, as `--modes plain,plain` is (the
    /// prompt was accepted and run once).
    #[test]
    fn prompts_flag_refuses_repeats() {
        assert_eq!(
            prompts_flag("story,count_chat, story").unwrap_err(),
            "--prompts \"story,count_chat, story\": prompt story is listed twice (each prompt \
             runs once)"
        );
    }

    /// The last line says when slow-spec notes make the exit status 1 (`--require-acceptance`)
    /// and counts them otherwise; nothing without any.
    #[test]
    fn last_line_says_why_slow_spec_exits_1() {
        let mut s = suites::report::Report::with_acceptance(vec![], true).summary;
        assert_eq!(slow_spec_clause(&s), "");
        s.slow_spec = 2;
        assert_eq!(
            slow_spec_clause(&s),
            ", 2 slow-spec (--require-acceptance: exit 1)"
        );
        s.require_acceptance = false;
        assert_eq!(
            slow_spec_clause(&s),
            ", 2 slow-spec (a note; --require-acceptance makes it fail)"
        );
    }

    /// `--modes` with a mode twice is refused naming it (it ran, and was reported, twice); an
    /// empty list and a bad mode are named too.
    #[test]
    fn modes_flag_refuses_repeats_and_names_them() {
        assert_eq!(
            modes_flag("plain,plain", "x").unwrap_err(),
            "--modes \"plain,plain\": mode plain is listed twice (each mode runs once)"
        );
        assert_eq!(
            modes_flag("spec:4,plain,spec:4", "x").unwrap_err(),
            "--modes \"spec:4,plain,spec:4\": mode spec:4 is listed twice (each mode runs once)"
        );
        assert_eq!(
            modes_flag(",", "plain,batch:4,spec:4").unwrap_err(),
            "--modes \",\" names no mode (e.g. plain,batch:4,spec:4)"
        );
        assert!(modes_flag("plain,greedy", "x")
            .unwrap_err()
            .starts_with("--modes \"plain,greedy\": bad mode \"greedy\""),);
        assert_eq!(
            modes_flag("plain,spec:4", "x").unwrap(),
            [Mode::Plain, Mode::Spec { k: 4 }]
        );
    }
}
