//! What the verbs print when they stop, run through the built binary: each stop is one
//! `error: …` line naming the option (or file), exit status 2, and nothing else on stdout.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the folder above `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `cargo xtask ARGS` (which need not be UTF-8) in the workspace root with `env` set:
/// (exit status, stdout, stderr).
fn xtask_env<S: AsRef<std::ffi::OsStr>>(
    args: &[S],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xtask"));
    c.args(args).current_dir(root());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn xtask(args: &[&str]) -> (Option<i32>, String, String) {
    xtask_env(args, &[])
}

/// A temporary folder for one test.
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-messages-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `calibrate --safety 1e300` is refused before anything is read, naming the option and the
/// bound budgets.toml enforces (with --dry-run it printed a 300-digit τ and exit 0; without,
/// the budgets.toml file was blamed).
#[test]
fn calibrate_safety_is_bounded_up_front() {
    for dry in [true, false] {
        let mut args = vec![
            "calibrate",
            "--model",
            "/nonexistent/cli-messages.gguf",
            "--safety",
            "1e300",
        ];
        if dry {
            args.push("--dry-run");
        }
        let (code, stdout, stderr) = xtask(&args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (
                Some(2),
                "",
                "error: --safety 1e300: must be a finite factor in [1, 1000] (τ = max error × \
                 safety, and budgets.toml takes τ <= 1000 logits)\n"
            ),
            "{args:?}"
        );
    }
}

/// Two runs that share no (model, suite, prompt): only the error (it printed the run names and
/// "no forks: every compared pair has token-identical outputs" first).
#[test]
fn compare_of_disjoint_runs_prints_only_the_error() {
    let d = scratch("compare");
    let report = serde_json::to_string(&suites::report::Report::new(Vec::new())).unwrap();
    let (a, b) = (d.join("a.json"), d.join("b.json"));
    std::fs::write(&a, &report).unwrap();
    std::fs::write(&b, &report).unwrap();
    let (code, stdout, stderr) = xtask(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            Some(2),
            "",
            "error: the two runs share no (model, suite, prompt)\n"
        )
    );
}

/// The HTTP engine options are in the `--help` of every verb that takes `--engine` (only
/// `top-k`, `spec` and `sha256` were in the README; `timeout`, `retries`, `concurrency` and
/// `model` only in suites/src/http.rs).
#[test]
fn http_engine_options_are_in_the_help() {
    for verb in ["conformance", "calibrate", "explain"] {
        let (code, stdout, _) = xtask(&[verb, "--help"]);
        assert_eq!(code, Some(0), "{verb}");
        for opt in [
            "top-k=K ",
            "spec=K ",
            "sha256=HEX ",
            "timeout=SECONDS ",
            "retries=N ",
            "concurrency=N ",
            "model=NAME ",
            "allow-remote ",
        ] {
            assert!(
                stdout.contains(&format!("\n  {opt}")),
                "{verb} --help lacks {opt}: {stdout}"
            );
        }
    }
}

/// `top-k=1` is refused as a suite's `top_k = 1` is, before any server is contacted (port 1
/// has none).
#[test]
fn http_engine_top_k_one_is_refused() {
    let fx = reference::fixtures_dir();
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    if !model.exists() {
        println!("skipped: fixtures not found at {}", fx.display());
        return;
    }
    let (code, stdout, stderr) = xtask(&[
        "conformance",
        "--engine",
        "llama-server=http://127.0.0.1:1,top-k=1",
        "--model",
        model.to_str().unwrap(),
    ]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (
            Some(2),
            "",
            "error: bad engine spec \"llama-server=http://127.0.0.1:1,top-k=1\": option top-k: \
             \"1\" must be >= 2 (as a suite's top_k: the rule needs the top-2)\n"
        )
    );
}

/// The fixtures folder (`GEMMA4_FIXTURES`, an empty value as unset, else `../shared/fixtures`
/// beside the workspace) if it holds `rel`.
fn fixture(rel: &str) -> Option<PathBuf> {
    let fx = reference::fixtures_dir();
    let p = fx.join(rel);
    if p.exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", fx.display());
        None
    }
}

/// One scored token is "1 token" (it printed "1 tokens").
#[test]
fn score_counts_one_token_in_the_singular() {
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    for (tokens, want) in [("2", "1 token\n"), ("2,818", "2 tokens\n")] {
        let (code, stdout, stderr) = xtask(&[
            "score",
            "--model",
            m.to_str().unwrap(),
            "--tokens",
            tokens,
            "--topk",
            "2",
        ]);
        assert_eq!(code, Some(0), "{stderr}");
        let first = stdout.lines().next().unwrap_or_default();
        assert_eq!(
            format!("{first}\n"),
            format!("model {} (f64), {want}", m.display())
        );
    }
}

/// `--topk` above the model's vocabulary (16384 ids, from the fixture's GGUF header read here)
/// is refused, as conformance refuses such a `[suite] top_k` (it printed `"top_k": 300000` over
/// rows of fewer entries, exit 0); the vocabulary itself is accepted.
#[test]
fn score_topk_above_the_vocabulary_is_refused() {
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let file = reference::gguf::GgufFile::open(&m).unwrap();
    let vocab = reference::config::Config::from_gguf(&file).unwrap().n_vocab;
    assert_eq!(vocab, 16384);
    let score = |k: &str| {
        xtask(&[
            "score",
            "--model",
            m.to_str().unwrap(),
            "--tokens",
            "2,818",
            "--topk",
            k,
            "--json",
        ])
    };
    let (code, stdout, stderr) = score("300000");
    assert_eq!(
        (code, stdout.as_str(), stderr),
        (
            Some(2),
            "",
            format!(
                "error: --topk 300000 exceeds the vocabulary of {} (16384 ids): give at most \
                 16384\n",
                m.display()
            )
        )
    );
    let (code, stdout, stderr) = score("16384");
    assert_eq!(code, Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["top_k"], 16384);
}

/// `GEMMA4_FIXTURES=""` is unset (the default folder beside the workspace), as `.ci/run` reads
/// it; it named the current folder (`models/…` relative to where xtask ran).
#[test]
fn empty_fixtures_variable_is_unset() {
    let default = root().join("../shared/fixtures");
    let (code, stdout, stderr) = xtask_env(
        &["score", "--tokens", "2", "--topk", "2"],
        &[("GEMMA4_FIXTURES", "")],
    );
    let want = default.join("models/dense-target.Q4_K_M.gguf");
    if want.exists() {
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            stdout.lines().next().unwrap_or_default(),
            format!("model {} (f64), 1 token", want.display())
        );
    } else {
        assert_eq!(code, Some(2));
        assert!(
            stderr.contains(&default.join("models").display().to_string()),
            "{stderr}"
        );
    }
}

/// `inspect` of a file whose key and tensor names hold terminal escape sequences (ESC, BEL)
/// prints them escaped, never raw: a hostile file cannot retitle or recolour the terminal.
#[test]
fn inspect_escapes_control_characters_in_names() {
    use reference::gguf::{GgufWriter, Value};
    use reference::quant::GgmlType;
    let d = scratch("escapes");
    let p = d.join("esc.gguf");
    let mut w = GgufWriter::new();
    w.set("x\u{1b}]0;pwned\u{7}", Value::U32(1));
    w.add_tensor("t\u{1b}[31m", &[4], GgmlType::F32, vec![0; 16])
        .unwrap();
    w.write_file(&p).unwrap();
    let (code, out, err) = xtask(&["inspect", p.to_str().unwrap(), "--no-scan"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("x\\u{1b}]0;pwned\\u{7}"), "{out}");
    assert!(out.contains("t\\u{1b}[31m"), "{out}");
}

/// `fixtures --out` and `bench --out` naming a file: the conformance wording (the folder, the
/// cause, `a file, not a folder`), not a bare `creating FILE: File exists`.
#[test]
fn an_out_folder_that_is_a_file_is_named_so() {
    let d = scratch("out-file");
    let f = d.join("plain-file");
    std::fs::write(&f, b"x").unwrap();
    for verb in ["fixtures", "bench"] {
        let (code, out, err) = xtask(&[verb, "--out", f.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (Some(2), ""), "{verb}: {err}");
        assert!(
            err.starts_with(&format!(
                "error: output folder {}: cannot write there: ",
                f.display()
            )) && err.trim_end().ends_with("(a file, not a folder)"),
            "{verb}: {err}"
        );
    }
}

/// Runs `cargo xtask ARGS` with arguments that need not be UTF-8: (exit status, stdout, stderr).
fn xtask_os(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    xtask_env(args, &[])
}

/// A value that is not UTF-8 where text is meant (a label, an engine spec, a run label) is
/// refused on one line naming the flag or argument, the bad byte escaped (clap said only
/// `invalid UTF-8 was detected in one or more arguments`).
#[test]
fn non_utf8_text_values_are_refused_naming_the_flag() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    fn os(s: &str) -> &OsStr {
        OsStr::new(s)
    }
    let bad = OsStr::from_bytes(b"a\xff");
    let (code, out, err) = xtask_os(&[os("conformance"), os("--label"), bad]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert_eq!(
        err,
        format!(
            "error: --label \"a\\xFF\": a label names a folder of {} and must be \
             [A-Za-z0-9_.-], not starting with '.' (as suite names)\n",
            root().join("target/conformance/runs").display()
        )
    );
    for verb in ["conformance", "calibrate", "explain"] {
        let (code, out, err) = xtask_os(&[os(verb), os("--engine"), bad]);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (
                Some(2),
                "",
                "error: invalid value \"a\\xFF\" for '--engine <ENGINE>': not UTF-8 (this \
                 option takes text)\n"
            ),
            "{verb}"
        );
    }
    let (code, out, err) = xtask_os(&[os("compare"), bad, os("b")]);
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            Some(2),
            "",
            "error: run \"a\\xFF\": no such file or folder, and not a label (labels are \
             [A-Za-z0-9_.-], not starting with '.')\n"
        )
    );
}

/// `--suite PATH` whose path is not UTF-8 is read and run (clap refused it before anything).
#[test]
fn non_utf8_suite_path_is_run() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let d = scratch("non-utf8-suite");
    let text = std::fs::read_to_string(root().join("suites/smoke.toml")).unwrap();
    let text = text.replacen("name = \"smoke\"", "name = \"smoke-copy\"", 1);
    let suite = d.join(OsStr::from_bytes(b"s\xff.toml"));
    std::fs::write(&suite, text).unwrap();
    let out = d.join("out");
    let (code, stdout, stderr) = xtask_os(&[
        OsStr::new("conformance"),
        OsStr::new("--suite"),
        suite.as_os_str(),
        OsStr::new("--model"),
        m.as_os_str(),
        OsStr::new("--modes"),
        OsStr::new("plain"),
        OsStr::new("--prompts"),
        OsStr::new("count_chat"),
        OsStr::new("--out"),
        out.as_os_str(),
        OsStr::new("--quiet"),
    ]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("dense-target.Q4_K_M · smoke-copy · reference-f32 · "),
        "{stdout}"
    );
    assert!(stdout.contains("1 pass, 0 fail"), "{stdout}");
    assert!(out.join("report.json").is_file());
}

/// `conformance --model M --suite smoke --modes plain --prompts P --out OUT --quiet`.
fn smoke_plain_into(m: &Path, out: &Path, prompts: &str) -> (Option<i32>, String, String) {
    xtask(&[
        "conformance",
        "--model",
        m.to_str().unwrap(),
        "--suite",
        "smoke",
        "--modes",
        "plain",
        "--prompts",
        prompts,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ])
}

/// A run into a folder that holds an earlier report removes that report's plots it does not
/// draw again (a prompt left out now), with a note naming them; its own plots and a file that
/// no report lists stay (the earlier plots stayed beside the new report as if current).
#[test]
fn a_new_run_removes_the_previous_reports_stale_plots() {
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let out = scratch("stale-plots").join("out");
    let run = |prompts: &str| smoke_plain_into(&m, &out, prompts);
    let plots = out.join("plots/dense-target.Q4_K_M/smoke");
    let (code, _, err) = run("story,count_chat");
    assert_eq!(code, Some(0), "{err}");
    assert!(plots.join("story.svg").is_file() && plots.join("count_chat.svg").is_file());
    std::fs::write(plots.join("mine.svg"), b"<svg/>").unwrap();
    let (code, _, err) = run("count_chat");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err,
        format!(
            "note: removed 1 plot of the previous report in {} (not drawn by this run): \
             plots/dense-target.Q4_K_M/smoke/story.svg\n",
            out.display()
        )
    );
    assert!(!plots.join("story.svg").exists());
    assert!(plots.join("count_chat.svg").is_file() && plots.join("mine.svg").is_file());
}

/// Plots in the layout before the per-suite folders (`plots/<model>/<prompt>.svg`, 0ca58da) of
/// the prompts the previous report lists are removed by the next run, with the stale new-layout
/// ones (they stayed beside the new plots until the folder was cleared by hand); an old-layout
/// file of a prompt no report lists stays.
#[test]
fn a_new_run_removes_the_previous_reports_old_layout_plots() {
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let out = scratch("legacy-plots").join("out");
    let run = |prompts: &str| smoke_plain_into(&m, &out, prompts);
    let (code, _, err) = run("story,count_chat");
    assert_eq!(code, Some(0), "{err}");
    // what a run before the upgrade drew for the same report
    let model_dir = out.join("plots/dense-target.Q4_K_M");
    for p in ["story", "count_chat", "mine"] {
        std::fs::write(model_dir.join(format!("{p}.svg")), b"<svg/>").unwrap();
    }
    let (code, _, err) = run("count_chat");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err,
        format!(
            "note: removed 3 plots of the previous report in {} (not drawn by this run): \
             plots/dense-target.Q4_K_M/count_chat.svg, plots/dense-target.Q4_K_M/smoke/story.svg, \
             plots/dense-target.Q4_K_M/story.svg\n",
            out.display()
        )
    );
    assert!(!model_dir.join("story.svg").exists() && !model_dir.join("count_chat.svg").exists());
    assert!(model_dir.join("mine.svg").is_file());
    assert!(model_dir.join("smoke/count_chat.svg").is_file());
    assert!(!model_dir.join("smoke/story.svg").exists());
}

/// Two suites that share a prompt id (`long_context` is in smoke, 24 tokens, and core, 48)
/// each get their plot, in a folder per suite, and report.md says where: there was one
/// `plots/<model>/long_context.svg`, the last suite's, for two report runs.
#[test]
fn suites_sharing_a_prompt_id_keep_a_plot_each() {
    let Some(m) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let out = scratch("shared-prompt").join("out");
    let (code, _, err) = xtask(&[
        "conformance",
        "--model",
        m.to_str().unwrap(),
        "--suite",
        "smoke",
        "--suite",
        "core",
        "--modes",
        "plain",
        "--prompts",
        "long_context",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let plots = out.join("plots/dense-target.Q4_K_M");
    let svg = |suite: &str| std::fs::read_to_string(plots.join(suite).join("long_context.svg"));
    let (smoke, core) = (svg("smoke").unwrap(), svg("core").unwrap());
    assert!(smoke.starts_with("<svg") && core.starts_with("<svg"));
    assert_ne!(smoke, core, "48 positions drawn in both");
    assert!(!plots.join("long_context.svg").exists());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for suite in ["smoke", "core"] {
        let line = format!("Margin plots: `plots/dense-target.Q4_K_M/{suite}/<prompt>.svg`.");
        assert!(md.contains(&line), "{md}");
    }
}

/// A model file that is not there is one wording in every verb, the path once (inspect said
/// `opening P: I/O error on P: …`, conformance/explain/bless `model not found: P`, calibrate
/// `cannot load P: I/O error on P: …`); a folder is named as one, and a file that is not a GGUF
/// names its path once before the cause.
#[test]
fn a_missing_model_file_is_one_message_in_every_verb() {
    let nope = "/nonexistent/cli-messages-model.gguf";
    let verbs: [&[&str]; 7] = [
        &["score", "--model", nope, "--tokens", "2"],
        &["conformance", "--model", nope],
        &["explain", "--model", nope, "--prompt", "count_300"],
        &["calibrate", "--model", nope, "--dry-run"],
        &["bless", "--model", nope],
        &["llama-server", "--model", nope],
        &["inspect", nope],
    ];
    for args in verbs {
        let flag = if args[0] == "inspect" { "" } else { "--model " };
        let (code, stdout, stderr) = xtask(args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (
                Some(2),
                "",
                format!("error: {flag}{nope}: no such file\n").as_str()
            ),
            "{args:?}"
        );
    }
    let d = scratch("missing-model");
    let dir = d.display().to_string();
    let (code, _, stderr) = xtask(&["conformance", "--model", &dir]);
    assert_eq!(
        (code, stderr),
        (
            Some(2),
            format!("error: --model {dir}: is a directory, not a file\n")
        )
    );
    let text = d.join("text.gguf");
    std::fs::write(&text, b"not a GGUF file").unwrap();
    let text = text.display().to_string();
    let magic = "bad magic 0x6e 0x6f 0x74 0x20 (\"not \"): not a GGUF file (expected 0x47 0x47 \
                 0x55 0x46, \"GGUF\")";
    for (args, want) in [
        (
            vec!["inspect", text.as_str()],
            format!("error: {text}: {magic}\n"),
        ),
        (
            vec!["score", "--model", &text, "--tokens", "2"],
            format!("error: --model {text}: {magic}\n"),
        ),
    ] {
        let (code, _, stderr) = xtask(&args);
        assert_eq!((code, stderr), (Some(2), want), "{args:?}");
    }
}

/// `run` (cuda build) names the model file of a GGUF error, as the other verbs do (it printed
/// `error: bad magic …` alone); checked before any GPU is looked for.
#[cfg(feature = "cuda")]
#[test]
fn run_names_the_model_file_of_a_gguf_error() {
    let d = scratch("run-magic");
    let text = d.join("text.gguf");
    std::fs::write(&text, b"# not a model").unwrap();
    let text = text.display().to_string();
    let (code, stdout, stderr) = xtask(&["run", "--model", &text, "--prompt", "hi"]);
    assert_eq!(
        (code, stdout.as_str(), stderr),
        (
            Some(2),
            "",
            format!(
                "error: --model {text}: bad magic 0x23 0x20 0x6e 0x6f (\"# no\"): not a GGUF \
                 file (expected 0x47 0x47 0x55 0x46, \"GGUF\")\n"
            )
        )
    );
    let cut = d.join("cut.gguf");
    // magic and version 3, then the tensor count cut after 2 of its 8 bytes
    std::fs::write(&cut, b"GGUF\x03\x00\x00\x00\x00\x00").unwrap();
    let (code, _, stderr) = xtask(&["run", "--model", cut.to_str().unwrap(), "--prompt", "hi"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: --model {}: truncated file: ",
            cut.display()
        )),
        "{stderr}"
    );
}

/// `run` in a build without `cuda` (`--help` included) says how to get it, exit 2 (it was
/// clap's `unrecognized subcommand 'run'`).
#[cfg(not(feature = "cuda"))]
#[test]
fn run_without_cuda_says_how_to_build_it() {
    for args in [
        &["run", "--help"][..],
        &["run", "--model", "m.gguf", "--prompt", "hi"],
        &["run"],
    ] {
        let (code, stdout, stderr) = xtask(args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (
                Some(2),
                "",
                "error: the run verb drives the CUDA engine, which this build leaves out: build \
                 it with the cuda feature, `cargo run -p xtask --features cuda -- run --model M \
                 --prompt TEXT` (`-- run --help` for its flags)\n"
            ),
            "{args:?}"
        );
    }
}

/// `compare` of a label with no saved run says so and how to make one (it was `…/report.json:
/// No such file or directory (os error 2)`).
#[test]
fn compare_of_an_unknown_label_says_how_to_make_it() {
    let label = format!("cli-messages-no-run-{}", std::process::id());
    let (code, stdout, stderr) = xtask(&["compare", &label, "b"]);
    let report = root()
        .join("target/conformance/runs")
        .join(&label)
        .join("report.json");
    assert_eq!(
        (code, stdout.as_str(), stderr),
        (
            Some(2),
            "",
            format!(
                "error: no conformance run is labelled \"{label}\" (expected {}): run `cargo \
                 xtask conformance --label {label}` first, or give a report.json or its folder\n",
                report.display()
            )
        )
    );
}

/// A prompt's mistyped value in a suite file is a `bad suite TOML` error placed at the value,
/// as the file's other errors are (it was `FILE: prompt "count_chat": max_tokens: …`, with
/// neither); the suite is read before the (missing) model.
#[test]
fn a_prompts_bad_value_is_placed_like_other_suite_errors() {
    let d = scratch("suite-value");
    let suite = d.join("neg.toml");
    std::fs::write(
        &suite,
        "[suite]\nname = \"neg\"\n[[prompt]]\nid = \"count_chat\"\ntext = \"1, 2\"\nmax_tokens = -5\n",
    )
    .unwrap();
    let (code, stdout, stderr) = xtask(&[
        "conformance",
        "--model",
        "/nonexistent/cli-messages-model.gguf",
        "--suite",
        suite.to_str().unwrap(),
        "--out",
        d.join("out").to_str().unwrap(),
    ]);
    assert_eq!(
        (code, stdout.as_str(), stderr),
        (
            Some(2),
            "",
            format!(
                "error: {}: bad suite TOML: line 6 column 14: prompt \"count_chat\": max_tokens: \
                 invalid value: integer `-5`, expected usize\n",
                suite.display()
            )
        )
    );
}

/// explain with a drafter loaded (the default model's) and a `spec:K` the engine does not
/// declare lists the declared modes without the `--draft` hint (it said `spec:K needs a
/// drafter: --draft` although one was loaded).
#[test]
fn explain_of_an_undeclared_spec_mode_with_a_drafter_gives_no_draft_hint() {
    let Some(_) = fixture("models/dense-target.Q4_K_M.gguf") else {
        return;
    };
    let (code, stdout, stderr) = xtask(&[
        "explain",
        "--prompt",
        "count_300",
        "--modes",
        "plain,spec:99",
    ]);
    assert_eq!(
        (code, stderr.as_str()),
        (
            Some(2),
            "error: engine reference-f32 cannot generate in mode spec:99 (it declares plain, \
             batch:4, spec:1, spec:2, spec:4)\n"
        )
    );
    // stdout: nothing, or (on a clean checkout) only the note and listing of the synthetic
    // fixtures being built first (`cargo xtask fixtures`, run by the default model list)
    assert!(
        stdout.is_empty() || stdout.starts_with("note: ") && stdout.contains("fixtures: 18 files"),
        "{stdout}"
    );
}
