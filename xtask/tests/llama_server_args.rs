//! `cargo xtask llama-server` through the built binary: every argument is checked before
//! anything is built or started (one `error: …` line, exit 2, nothing else printed). No
//! llama.cpp build is needed: the refusals come before the build.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workspace root (the folder above `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `$GEMMA4_FIXTURES/models/NAME`, or `None` (after printing the skip) without the fixtures.
fn fixture(name: &str) -> Option<PathBuf> {
    let fx = reference::fixtures_dir();
    let p = fx.join("models").join(name);
    if p.exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", fx.display());
        None
    }
}

/// Runs `cargo xtask llama-server ARGS`: (exit status, stdout, stderr, seconds).
fn llama_server(args: &[&str]) -> (Option<i32>, String, String, f64) {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("llama-server")
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed().as_secs_f64(),
    )
}

/// Asserts a refusal: exit 2, nothing on stdout, exactly `error: {expected}` on stderr (no
/// build or fetch line before it), within seconds.
fn assert_refused(args: &[&str], expected: &str) {
    let (code, stdout, stderr, secs) = llama_server(args);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(2), "", format!("error: {expected}\n").as_str()),
        "{args:?}"
    );
    assert!(secs < 60.0, "{args:?}: {secs} s");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A missing model is refused before the build (it built llama.cpp for 472 s first).
#[test]
fn a_missing_model_is_refused_before_the_build() {
    assert_refused(
        &["--model", "/nonexistent.gguf"],
        "--model /nonexistent.gguf: no such file",
    );
    assert_refused(
        &["--build-only", "--model", "/nonexistent.gguf"],
        "--model /nonexistent.gguf: no such file",
    );
    // a folder is no model file either
    assert_refused(&["--model", "/"], "--model /: no such file");
}

/// The counts: `--spec-k 0` (it started the server with `--spec-draft-n-max 0` and printed a
/// judge command with `spec=0`, which conformance refuses), `--parallel 0`, a context smaller
/// than the slots, `--jobs 0`, `--port 0`, and values beyond a C int. Checked before the model
/// (which does not exist here), so each names its flag.
#[test]
fn counts_out_of_range_are_refused() {
    let no = "/nonexistent/llama-server-args.gguf";
    let cases: [(&[&str], &str); 8] = [
        (
            &["--spec-k", "0", "--draft", no, "--model", no],
            "--spec-k 0: must be in 1..=2147483647 (draft tokens per round; the judge's engine \
             option spec=K takes 1 or more)",
        ),
        (
            &["--spec-k", "2147483648", "--draft", no, "--model", no],
            "--spec-k 2147483648: must be in 1..=2147483647 (draft tokens per round; the judge's \
             engine option spec=K takes 1 or more)",
        ),
        (
            &["--parallel", "0", "--model", no],
            "--parallel 0: must be in 1..=2147483647 (server slots)",
        ),
        (
            &["--ctx", "0", "--model", no],
            "--ctx 0: must be in 1..=2147483647 (context tokens, all slots together)",
        ),
        (
            &["--ctx", "3", "--parallel", "4", "--model", no],
            "--ctx 3 is smaller than --parallel 4: each of the 4 slots gets ctx / parallel \
             tokens, which would be 0",
        ),
        (
            &["--jobs", "0", "--model", no],
            "--jobs 0: must be in 1..=1024 (compile jobs)",
        ),
        (
            &["--port", "0", "--model", no],
            "--port 0: give a port from 1 to 65535, or leave --port out for a free one",
        ),
        (
            &["--server-bin", "/nonexistent/llama-server", "--model", no],
            "--server-bin /nonexistent/llama-server: no such file",
        ),
    ];
    for (args, expected) in cases {
        assert_refused(args, expected);
    }
}

/// A port that is taken is refused naming it (the server would fail to bind after the build).
#[test]
fn a_taken_port_is_refused() {
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let (code, stdout, stderr, _) = llama_server(&["--port", &port, "--model", "/nonexistent"]);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: --port {port}: cannot listen on 127.0.0.1:{port}: "
        )) && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// `--spec-k` without `--draft`, and `--build-only` with a flag that only a started server
/// uses, are usage errors (they were ignored).
#[test]
fn flags_without_effect_are_refused() {
    for args in [
        &["--spec-k", "2"][..],
        &["--build-only", "--detach"][..],
        &["--build-only", "--port", "8080"][..],
    ] {
        let (code, stdout, stderr, _) = llama_server(args);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

/// The model must be a Gemma-4 target and the drafter an MTP assistant that pairs with it,
/// `--build-only` included (a target given as `--draft` with `--build-only` exited 0).
#[test]
fn model_and_drafter_kinds_are_checked() {
    let (Some(target), Some(assistant), Some(other)) = (
        fixture("dense-target.F32.gguf"),
        fixture("dense-assistant.F32.gguf"),
        fixture("e2b-assistant.Q8_0.gguf"),
    ) else {
        return;
    };
    let (t, a, o) = (s(&target), s(&assistant), s(&other));
    for build_only in [false, true] {
        let with = |args: &[&str]| {
            let mut v: Vec<String> = args.iter().map(|x| x.to_string()).collect();
            if build_only {
                v.insert(0, "--build-only".into());
            }
            v
        };
        let run = |args: Vec<String>| {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            llama_server(&refs)
        };
        // a target as the drafter
        let (code, stdout, stderr, _) = run(with(&["--model", t, "--draft", t]));
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: --draft {t}: not an MTP drafter (gemma4-assistant): \
                 general.architecture is 'gemma4', expected 'gemma4-assistant'\n"
            )
        );
        // an assistant as the model
        let (code, _, stderr, _) = run(with(&["--model", a]));
        assert_eq!(code, Some(2), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: --model {a}: not a Gemma-4 target model (gemma4): \
                 general.architecture is 'gemma4-assistant', expected 'gemma4'\n"
            )
        );
        // another target's assistant
        let (code, _, stderr, _) = run(with(&["--model", t, "--draft", o]));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: --draft {o} does not pair with --model {t}: "
            )) && stderr.lines().count() == 1,
            "{stderr}"
        );
        // not a GGUF at all
        let (code, _, stderr, _) = run(with(&["--model", t, "--draft", "/etc/hostname"]));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.starts_with("error: --draft /etc/hostname: ") && stderr.lines().count() == 1,
            "{stderr}"
        );
    }
}
