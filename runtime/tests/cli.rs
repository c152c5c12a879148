//! The `runtime` binary checks its arguments before it probes CUDA: on any machine (this one
//! may have no GPU) a bad option, a missing model file or a drafter that does not fit its
//! target is one `error: …` line naming it, exit status 2; without a GPU, a valid command says
//! `error: CUDA unavailable: …` on one short line, also exit 2.

use std::path::PathBuf;
use std::process::Command;

/// Runs the binary with `args`: (exit status, stdout, stderr).
fn runtime(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_runtime"))
        .args(args)
        .env_remove("OUT")
        .output()
        .expect("running the runtime binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixtures() -> PathBuf {
    reference::fixtures_dir()
}

#[test]
fn bad_arguments_are_refused_before_cuda() {
    let nope = std::env::temp_dir().join("runtime-cli-nope.gguf");
    let nope = nope.to_str().unwrap();
    for (args, want) in [
        (
            vec!["model-check", nope],
            format!("error: model {nope}: no such file\n"),
        ),
        (
            vec!["spec-check", "x", "--prompts", "9"],
            "error: --prompts 9: must be in 1..=3 (the built-in prompts)\n".to_string(),
        ),
        (
            vec!["spec-check", "T=moe-assistant", "--ks", "0"],
            "error: --ks 0: every draft length K must be in 1..=16\n".to_string(),
        ),
        (
            vec!["spec-check", "x="],
            "error: PAIRS x=: the drafter path is empty (give TARGET.gguf=DRAFT.gguf or \
             TARGET.gguf)\n"
                .to_string(),
        ),
        (
            vec!["spec-check", "x"],
            "error: target x: no such file\n".to_string(),
        ),
        (
            vec!["bench", "--decode", "0"],
            "error: --decode 0: must be at least 1 (decode steps timed)\n".to_string(),
        ),
        (
            vec!["bench", "--format", "NOPE"],
            "error: --format NOPE: not Q2_K_MIX or a ggml type name (e.g. Q4_K, Q8_0, BF16)\n"
                .to_string(),
        ),
        (
            // panicked: 'attempt to add with overflow'
            vec!["bench", "--prompt", "18446744073709551615"],
            "error: --prompt 18446744073709551615 + --decode 32: must be at most 11936 (the \
             bench's context of 12000 positions, less 64)\n"
                .to_string(),
        ),
        (
            // panicked: 'attempt to multiply with overflow'
            vec!["bench", "--draft-width", "18446744073709551615"],
            "error: --draft-width 18446744073709551615: must be in 1..=3840 (the 12B target's \
             width)\n"
                .to_string(),
        ),
        (
            // aborted: 'memory allocation of 100000000000 bytes failed'
            vec!["bench", "--draft-layers", "100000000000"],
            "error: --draft-layers 100000000000: must be in 1..=48 (the 12B target's layer \
             count)\n"
                .to_string(),
        ),
        (
            vec!["mv-bench", "--iters", "0"],
            "error: --iters 0: must be at least 1\n".to_string(),
        ),
    ] {
        let (code, stdout, stderr) = runtime(&args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (2, "", want.as_str()),
            "{args:?}"
        );
    }
}

#[test]
fn a_drafter_of_another_target_is_refused_before_cuda() {
    let m = fixtures().join("models");
    let (t, d) = (
        m.join("dense-target.Q4_K_M.gguf"),
        m.join("moe-assistant.Q8_0.gguf"),
    );
    if !t.exists() || !d.exists() {
        println!("skipped: fixtures not found at {}", fixtures().display());
        return;
    }
    let pair = format!("{}={}", t.display(), d.display());
    let (code, _, stderr) = runtime(&["spec-check", &pair]);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "error: target {} with drafter {}: inconsistent metadata: assistant key_length 64 != \
             target key_length 128\n",
            t.display(),
            d.display()
        )
    );
}

/// An output folder that cannot be created is refused before CUDA is probed (its results were
/// lost after the run: the writes' errors were ignored), naming where it was given: `--out`
/// (a folder, or a file's folder for mv-bench) and `$OUT`. The folder here lies under a file.
#[test]
fn an_output_folder_that_cannot_be_created_is_refused() {
    let dir = std::env::temp_dir().join(format!("runtime-cli-outfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let bad = file.join("sub");
    let bad_s = bad.to_str().unwrap();
    let json = bad.join("mv.json");
    let why = "cannot create the output folder: Not a directory (os error 20)";
    for (args, want) in [
        (
            vec!["bench", "--out", bad_s],
            format!("error: --out {bad_s}: {why}\n"),
        ),
        (
            vec!["gpu-check", "--out", bad_s],
            format!("error: --out {bad_s}: {why}\n"),
        ),
        (
            vec!["mv-bench", "--out", json.to_str().unwrap()],
            format!("error: --out {bad_s}: {why}\n"),
        ),
    ] {
        let (code, stdout, stderr) = runtime(&args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (2, "", want.as_str()),
            "{args:?}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_runtime"))
        .args(["bench"])
        .env("OUT", &bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("error: $OUT {bad_s}: {why}\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model with a NaN weight is refused by the argument check, on any machine: one `error: …`
/// line naming the file, the tensor and the element, exit 2 (the engine and the oracle then
/// skip their own scan of the same open file).
#[test]
fn a_nonfinite_weight_is_refused_before_cuda() {
    let src = fixtures().join("models/dense-target.Q4_K_M.gguf");
    if !src.exists() {
        println!("skipped: fixtures not found at {}", fixtures().display());
        return;
    }
    let f = reference::gguf::GgufFile::open(&src).unwrap();
    let t = f
        .tensors()
        .iter()
        .find(|t| t.name == "output_norm.weight")
        .expect("output_norm.weight")
        .clone();
    assert_eq!(t.ggml_type, reference::quant::GgmlType::F32);
    let pos = f.tensor_file_offset(&t) as usize;
    drop(f);
    let mut b = std::fs::read(&src).unwrap();
    // element 3 = +Inf (0x7F800000: exponent all ones, mantissa zero)
    b[pos + 12..pos + 16].copy_from_slice(&0x7F80_0000u32.to_le_bytes());
    let dir = std::env::temp_dir().join(format!("runtime-cli-nan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("inf-target.gguf");
    std::fs::write(&bad, b).unwrap();
    let (code, stdout, stderr) = runtime(&["model-check", bad.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    let want = format!(
        "error: model {}: tensor 'output_norm.weight' (F32): element 3 (row 0) is inf (bits \
         0x7f800000, byte {} of its file)",
        bad.display(),
        pos + 12
    );
    assert!(stderr.starts_with(&want), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Without a GPU a valid command stops with one short `error: CUDA unavailable: …` line (it
/// printed `skipped: …`, 352 characters listing libcuda64_130_0.so three times).
#[test]
fn no_gpu_is_one_short_error_line() {
    if runtime::device::unavailable_reason().is_none() {
        println!("skipped: a GPU is present (this checks the no-GPU message)");
        return;
    }
    let out = std::env::temp_dir().join(format!("runtime-cli-out-{}", std::process::id()));
    let out_s = out.to_str().unwrap();
    let (code, stdout, stderr) = runtime(&["bench", "--draft-format", "none", "--out", out_s]);
    let _ = std::fs::remove_dir_all(&out);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.starts_with("error: CUDA unavailable: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.len() < 200, "{} characters: {stderr}", stderr.len());
    let names: Vec<&str> = stderr
        .split([' ', ',', '(', ')'])
        .filter(|w| w.starts_with("lib") && w.contains(".so"))
        .collect();
    let mut unique = names.clone();
    unique.dedup();
    unique.sort();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "a name listed twice: {stderr}");
}

/// A `GEMMA4_TC_DIGITS` other than 2 or 3 (`kernels::tc_digits`) is one `error: bad setting: …`
/// line, exit 2, before CUDA is probed, so on any machine (a valid value is not run here: on a
/// GPU machine this bench would then start).
#[test]
fn a_bad_digit_count_is_refused_before_cuda() {
    let run = |v: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_runtime"))
            .args(["bench", "--decode", "1"])
            .env_remove("OUT")
            .env("GEMMA4_TC_DIGITS", v)
            .output()
            .expect("running the runtime binary");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for v in ["4", "02", " 2", ""] {
        assert_eq!(
            run(v),
            (
                2,
                format!("error: bad setting: GEMMA4_TC_DIGITS={v:?}: must be 2 or 3\n")
            ),
            "{v:?}"
        );
    }
}

/// Each `GEMMA4_*` switch with a value it does not take is refused before CUDA, naming the
/// variable, the value and the accepted values (it fell back to the default without a word);
/// a documented value goes on (to `CUDA unavailable` here, or a GPU run).
#[test]
fn a_bad_switch_is_refused_before_cuda() {
    let run = |var: &str, v: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_runtime"))
            .args(["mv-bench", "--case", "ffn_gate", "--out"])
            .arg(std::env::temp_dir().join(format!("runtime-cli-env-{}.json", std::process::id())))
            .env_remove("OUT")
            .env(var, v)
            .output()
            .expect("running the runtime binary");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (var, bad, accepted) in [
        ("GEMMA4_PDL", "of", "off (or 0), mv or all (unset: all)"),
        ("GEMMA4_TC_SPREAD", "no", "0 (off) or 1 (on) (unset: on)"),
        (
            "GEMMA4_TC_WIDE",
            "",
            "0 (never the wide kernels) or 1 (wherever they exist) (unset: the measured rule)",
        ),
        ("GEMMA4_TC_WNST", "1", "0 or 2 … 8"),
        (
            "GEMMA4_TCX_BASE3",
            "2",
            "0 (the wide rule) or 1 (base kernel at three column groups) (unset: 0)",
        ),
    ] {
        assert_eq!(
            run(var, bad),
            (
                2,
                format!("error: bad setting: {var}={bad:?}: must be {accepted}\n")
            ),
            "{var}={bad:?}"
        );
    }
    let (code, e) = run("GEMMA4_KERNEL_SRC", "/nonexistent-kernels");
    assert_eq!(
        (code, e.as_str()),
        (
            2,
            "error: bad setting: GEMMA4_KERNEL_SRC=\"/nonexistent-kernels\": no such folder\n"
        )
    );
    for (var, good) in [
        ("GEMMA4_PDL", "0"),
        ("GEMMA4_ATT_HEADS", "2"),
        ("GEMMA4_TC_MIX", "1"),
        ("GEMMA4_TC_WNST", "4"),
        ("GEMMA4_TCX_BASE3", "1"),
    ] {
        let (code, e) = run(var, good);
        assert!(code != 2 || !e.contains("bad setting"), "{var}={good}: {e}");
    }
}

/// A FIFO as a model (the open waited forever), a negative count, an output folder that is a
/// file and mv-bench's output file that is a folder: one `error: …` line naming it, exit 2.
#[cfg(unix)]
#[test]
fn special_paths_and_negative_counts_are_refused() {
    let dir = std::env::temp_dir().join(format!("runtime-cli-special-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let (d, f) = (dir.to_str().unwrap(), file.to_str().unwrap());
    let mut cases = vec![
        (
            vec!["bench", "--out", f],
            format!("error: --out {f}: is a file, not a folder (the output folder)\n"),
        ),
        (
            vec!["mv-bench", "--out", d],
            format!("error: --out {d}: is a folder, not a file (the output file)\n"),
        ),
        (
            vec!["spec-check", "x", "--drafter-tol", "-inf"],
            "error: --drafter-tol -inf: must be a finite tolerance > 0 (logits)\n".to_string(),
        ),
    ];
    let fifo = dir.join("f.gguf");
    let fifo_s = fifo.to_str().unwrap().to_string();
    if Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success())
    {
        cases.push((
            vec!["model-check", fifo_s.as_str()],
            format!("error: model {fifo_s}: is a FIFO, not a regular file\n"),
        ));
    }
    for (args, want) in cases {
        let (code, stdout, stderr) = runtime(&args);
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (2, "", want.as_str()),
            "{args:?}"
        );
    }
    let (code, _, e) = runtime(&["bench", "--prompt", "-1"]);
    assert_eq!(code, 2);
    assert!(
        e.starts_with("error: invalid value '-1' for '--prompt <PROMPT>': not a count"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
