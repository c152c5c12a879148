//! Flags the verbs refuse before anything runs: each refusal is one `error: …` line (or clap's
//! usage error) naming the option, exit status 2, and nothing written. The model paths given do
//! not exist: the refusal must come first.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (the folder above `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `cargo xtask ARGS`; returns (exit status, stderr).
fn xtask(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A model path that does not exist.
const NO_MODEL: &str = "/nonexistent/cli-refusals-model.gguf";

/// `--label` is a folder name under target/conformance/runs: `../..` (it wrote the report to
/// target/…), an empty label (report.md straight into runs/) and a separator are refused
/// before the report folder is made.
#[test]
fn labels_that_leave_the_runs_folder_are_refused() {
    let escape = format!("cli-refusals-escape-{}", std::process::id());
    let outside = root().join("target").join(&escape);
    for label in [format!("../../{escape}"), String::new(), "a/b".into()] {
        let (code, err) = xtask(&["conformance", "--model", NO_MODEL, "--label", &label]);
        assert_eq!(code, Some(2), "{label:?}: {err}");
        assert!(
            err.starts_with(&format!(
                "error: --label {label:?}: a label names a folder of "
            )) && err.contains("must be [A-Za-z0-9_.-], not starting with '.'")
                && err.lines().count() == 1,
            "{label:?}: {err}"
        );
    }
    assert!(!outside.exists(), "{} was made", outside.display());
    // compare reads runs by label: the same rule
    let (code, err) = xtask(&["compare", &format!("../../{escape}"), "plain"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: run \"../../{escape}\": no such file or folder, and not a label (labels are \
             [A-Za-z0-9_.-], not starting with '.')"
        )
    );
}

/// Flags that were accepted and ignored: each refused, exit 2, naming the flag(s).
#[test]
fn ignored_flags_are_refused() {
    let out = std::env::temp_dir().join(format!("cli-refusals-fixtures-{}", std::process::id()));
    let out_s = out.display().to_string();
    let cases: [(&[&str], &[&str]); 7] = [
        // --topk 0 printed no candidates and exited 0
        (
            &["score", "--model", NO_MODEL, "--tokens", "2", "--topk", "0"],
            &["error: invalid value '0' for '--topk <TOPK>': must be at least 1\n"],
        ),
        // a negative value is a bad value of the flag, not an unknown flag '-1'
        (
            &[
                "score", "--model", NO_MODEL, "--tokens", "2", "--topk", "-1",
            ],
            &["invalid value '-1' for '--topk <TOPK>'"],
        ),
        // --chat applies to --text; with --tokens it was ignored
        (
            &["score", "--model", NO_MODEL, "--tokens", "2", "--chat"],
            &["'--chat'", "'--tokens <TOKENS>'"],
        ),
        // the vocabulary is the 12B target's; without --12b it was ignored
        (
            &["fixtures", "--out", &out_s, "--vocab-gguf", "/tmp/v.gguf"],
            &["--12b", "--vocab-gguf"],
        ),
        (
            &[
                "conformance",
                "--model",
                NO_MODEL,
                "--engine",
                "reference-f32",
                "--allow-remote",
            ],
            &[
                "error: --allow-remote is for an HTTP engine (--engine llama-server=URL or \
               openai=URL); --engine reference-f32 is not one",
            ],
        ),
        (
            &[
                "conformance",
                "--model",
                NO_MODEL,
                "--prompts",
                "story,story",
            ],
            &["error: --prompts \"story,story\": prompt story is listed twice"],
        ),
        (
            &[
                "explain",
                "--model",
                NO_MODEL,
                "--prompt",
                "count_300",
                "--continuation",
                "0",
            ],
            &[
                "error: --continuation 0: give 1..=1024 (tokens generated after the fork, within \
               max_tokens 1024 of prompt \"count_300\" in ",
            ],
        ),
    ];
    for (args, needles) in cases {
        let (code, err) = xtask(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        for n in needles {
            assert!(err.contains(n), "{args:?}: {n:?} not in {err}");
        }
    }
    let (code, err) = xtask(&[
        "explain",
        "--model",
        NO_MODEL,
        "--prompt",
        "count_300",
        "--continuation",
        "1000000000",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("error: --continuation 1000000000: give 1..=1024"),
        "{err}"
    );
    assert!(!out.exists(), "fixtures wrote {}", out.display());
}

/// `fixtures --12b` reads its vocabulary GGUF before writing anything (a missing one wrote all
/// 18 small fixtures, 101 MiB, first); the default one missing is named with GEMMA4_FIXTURES
/// and --vocab-gguf (it was a bare I/O error).
#[test]
fn fixtures_12b_checks_its_vocabulary_first() {
    let out = std::env::temp_dir().join(format!("cli-refusals-12b-{}", std::process::id()));
    let out_s = out.display().to_string();
    let (code, err) = xtask(&[
        "fixtures",
        "--out",
        &out_s,
        "--12b",
        "--vocab-gguf",
        "/nonexistent/nope.gguf",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("error: opening the vocabulary GGUF /nonexistent/nope.gguf: "),
        "{err}"
    );
    assert!(!out.exists(), "fixtures wrote {}", out.display());
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["fixtures", "--out", &out_s, "--12b"])
        .env("GEMMA4_FIXTURES", "/nonexistent/fixtures")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&status.stderr);
    assert_eq!(status.status.code(), Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "error: the 12B target's vocabulary \
         /nonexistent/fixtures/tokenizer/ggml-vocab-gemma-4.gguf not found: set GEMMA4_FIXTURES \
         to the fixtures folder (the one holding tokenizer/), or pass --vocab-gguf FILE"
    );
    assert!(!out.exists(), "fixtures wrote {}", out.display());
}

/// A bad HTTP engine spec is refused before any model file is looked at: with a model that
/// does not exist and `top-k=1` (below the rule's top-2), conformance, calibrate and explain
/// report the spec (it was reported second, after the user had fixed the model), exit 2, one
/// `error: …` line. The expected text is the spec parser's rule as the README states it
/// (`top-k=K`, at least 2); a non-loopback URL without `allow-remote` is refused the same way.
#[test]
fn a_bad_engine_spec_is_refused_before_the_model() {
    let spec = "llama-server=http://127.0.0.1:1,top-k=1";
    let want = format!(
        "error: bad engine spec {spec:?}: option top-k: \"1\" must be >= 2 (as a suite's top_k: \
         the rule needs the top-2)"
    );
    let explain = [
        "explain", "--model", NO_MODEL, "--prompt", "story", "--suite", "smoke", "--engine", spec,
    ];
    let cases: [&[&str]; 3] = [
        &["conformance", "--model", NO_MODEL, "--engine", spec],
        &[
            "calibrate",
            "--model",
            NO_MODEL,
            "--engine",
            spec,
            "--dry-run",
        ],
        &explain,
    ];
    for args in cases {
        let (code, err) = xtask(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end(), want, "{args:?}");
    }
    // the loopback rule is part of the spec check too
    let remote = "openai=http://192.0.2.1:8080/v1";
    let (code, err) = xtask(&["conformance", "--model", NO_MODEL, "--engine", remote]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(
        err.trim_end(),
        "error: http://192.0.2.1:8080/v1 is not a loopback address: pass --allow-remote (engine \
         option `allow-remote`) to judge a remote server"
    );
}

/// The output folder is checked before anything runs (a read-only `target/` was found after
/// the whole run): `--out` naming a file, or a folder below a file, is one `error: output folder
/// …: cannot write there: …` line, exit 2, with a model that does not exist (so nothing ran).
#[test]
fn an_unwritable_output_folder_is_refused_first() {
    let file = std::env::temp_dir().join(format!("cli-refusals-out-file-{}", std::process::id()));
    std::fs::write(&file, b"a file").unwrap();
    let below = file.join("report");
    for (out, tail) in [(&file, " (a file, not a folder)"), (&below, "")] {
        let out_s = out.display().to_string();
        let (code, err) = xtask(&["conformance", "--model", NO_MODEL, "--out", &out_s]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.starts_with(&format!(
                "error: output folder {out_s}: cannot write there: "
            )) && err.trim_end().ends_with(tail)
                && err.lines().count() == 1,
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"a file");
    std::fs::remove_file(&file).unwrap();
}
