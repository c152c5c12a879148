//! `cargo xtask compare` through the built binary on a real run: the reports are not trusted
//! where the oracle can check them. A run of the f64 reference engine (`conformance --out`) is
//! edited the way a wrong or corrupt report would be, and compared with the original.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The workspace root (the folder above `xtask/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `cargo xtask ARGS`: (exit status, stdout, stderr).
fn xtask(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The model of the run.
const MODEL: &str = "dense-target.Q4_K_M.gguf";
/// The `story` prompt of `suites/smoke.toml` (a text prompt: BOS + its tokens).
const STORY: &str = "Once upon a time there was a little model that";

/// A saved run (reference-f64, smoke, plain) of the fixture model in a scratch folder, and its
/// report as JSON; `None` (after printing the skip) without the fixtures.
fn saved_run(name: &str) -> Option<(PathBuf, PathBuf, Value)> {
    let fx = reference::fixtures_dir();
    let model = fx.join("models").join(MODEL);
    if !model.exists() {
        println!("skipped: fixtures not found at {}", fx.display());
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("compare-checks-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, err) = xtask(&[
        "conformance",
        "--engine",
        "reference-f64",
        "--suite",
        "smoke",
        "--modes",
        "plain",
        "--model",
        model.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let report = dir.join("report.json");
    let json = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    Some((model, report, json))
}

/// The `story` entry of the (only) run.
fn story(json: &mut Value) -> &mut Value {
    json["runs"][0]["entries"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|e| e["prompt"] == "story")
        .unwrap()
}

/// Writes `json` beside `report` as `name` and returns its path.
fn write(report: &Path, name: &str, json: &Value) -> PathBuf {
    let p = report.with_file_name(name);
    std::fs::write(&p, json.to_string()).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The f64 logits after `STORY` (BOS added), computed here with the reference scorer over the
/// whole vocabulary: (argmax id, its logit, the logit of `id`).
fn story_logits(model: &Path, id: u32) -> (u32, f64, f64) {
    let file = reference::gguf::GgufFile::open(model).unwrap();
    let tok = reference::tokenizer::GemmaTokenizer::from_gguf(&file).unwrap();
    let ids = tok.encode(STORY, true).unwrap();
    let m = reference::model::Model::<f64>::from_gguf(file, Default::default()).unwrap();
    let v = m.config().n_vocab;
    let rows = reference::score::score(&m, &[ids], v).unwrap();
    let last = rows[0].last().unwrap();
    let (top, top_logit) = last.top_k[0];
    let l = last.top_k.iter().find(|c| c.0 == id).unwrap().1;
    (top, top_logit, l)
}

/// The token ids of `STORY` (BOS added) and their SHA-256 (each id as 4 little-endian bytes),
/// computed here with the tokenizer and the file hasher of `reference`.
fn story_prompt(model: &Path, name: &str) -> (Vec<u32>, String) {
    let file = reference::gguf::GgufFile::open(model).unwrap();
    let tok = reference::tokenizer::GemmaTokenizer::from_gguf(&file).unwrap();
    let ids = tok.encode(STORY, true).unwrap();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("story-ids-{name}"));
    std::fs::write(&path, bytes).unwrap();
    let sha = reference::gguf::sha256_file(&path).unwrap();
    (ids, sha)
}

/// The error `compare` stops with when `suites/smoke.toml` encodes `story` to `(n, sha)` and
/// the two sides recorded `(report, tokens, SHA-256 or none)`.
fn prompt_changed((n, sha): (usize, &str), sides: [(&Path, usize, Option<&str>); 2]) -> String {
    let side = |(p, k, h): (&Path, usize, Option<&str>)| {
        format!(
            "({}, mode plain) recorded {k} tokens, {}",
            p.display(),
            match h {
                Some(h) => format!("SHA-256 {h}"),
                None => "no SHA-256 (a report written before prompt_sha256 was recorded)".into(),
            }
        )
    };
    format!(
        "error: dense-target.Q4_K_M / smoke / prompt story: {} now encodes the prompt to {n} \
         tokens (SHA-256 {sha}), not the prompt the runs judged: A {}; B {} (the suite or the \
         tokenizer changed since the runs; compare them with the suite file they ran)\n",
        root().join("suites/smoke.toml").display(),
        side(sides[0]),
        side(sides[1])
    )
}

/// `xtask ARGS`, which must be refused: exit 2, nothing on stdout. Returns its stderr.
fn refused(args: &[&str]) -> String {
    let (code, out, err) = xtask(args);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    err
}

/// A report that says `exact` for an output whose first token the oracle ranks far below its
/// argmax: compare classified the fork `tie-split` (0 with a side wrong), exit 0, from the
/// report's own margins. Now the oracle's logits on the prefix decide: B wrong, with the margin
/// computed here independently, exit 1.
#[test]
fn a_fork_is_judged_by_the_oracle_not_the_report() {
    let Some((model, report, mut json)) = saved_run("wrong") else {
        return;
    };
    let (top, top_logit, l683) = story_logits(&model, 683);
    let e = story(&mut json);
    assert_eq!(e["verdict"], "exact");
    assert_eq!(e["tokens"][0], top, "the engine took the oracle's argmax");
    e["tokens"][0] = 683.into();
    let edited = write(&report, "wrong.json", &json);
    let (code, out, err) = xtask(&["compare", s(&report), s(&edited)]);
    assert_eq!(code, Some(1), "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.contains("| story |"))
        .unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    // | model | suite | prompt | A | B | verdicts | fork at | tokens | argmax | m | gap | class |
    assert_eq!(cells[6], "exact / exact", "{row}");
    assert!(cells[7].ends_with("(index 0)"), "{row}");
    assert!(cells[9].starts_with(&top.to_string()), "{row}");
    assert_eq!(
        cells[10],
        format!("0.0000 / {:.4}", top_logit - l683),
        "{row}"
    );
    assert!(
        top_logit - l683 > 1.0,
        "the edit must be a clear divergence"
    );
    assert_eq!(cells[12], "B:plain wrong", "{row}");
    assert!(out.contains("1 forks (1 with a side wrong)"), "{out}");
}

/// A token id outside the vocabulary is an error naming the report, the entry and the output
/// index (it was a `tie-split`, exit 0), before anything is printed.
#[test]
fn an_out_of_vocabulary_id_is_refused() {
    let Some((_, report, mut json)) = saved_run("oov") else {
        return;
    };
    story(&mut json)["tokens"][2] = 99_999_999.into();
    let edited = write(&report, "oov.json", &json);
    assert_eq!(
        refused(&["compare", s(&report), s(&edited)]),
        format!(
            "error: {}: dense-target.Q4_K_M / smoke / prompt story / mode plain: output \
             index 2: token id 99999999 is outside the vocabulary of dense-target.Q4_K_M \
             (V = 16384)\n",
            edited.display()
        )
    );
}

/// A report of another schema (`conformance-report/2` was read as if it were this version's)
/// is refused naming the file and both schemas.
#[test]
fn another_schema_is_refused() {
    let Some((_, report, mut json)) = saved_run("schema") else {
        return;
    };
    json["schema"] = "conformance-report/2".into();
    let edited = write(&report, "schema2.json", &json);
    assert_eq!(
        refused(&["compare", s(&edited), s(&report)]),
        format!(
            "error: {}: schema \"conformance-report/2\", but this version reads \
             \"conformance-report/1\" only (suites/REPORT_SCHEMA.md)\n",
            edited.display()
        )
    );
}

/// The model file is found by its recorded path or a `--model` file with the recorded
/// SHA-256; a prompt whose token count is not the recorded one is refused (the suite changed).
#[test]
fn the_model_file_and_the_prompt_are_checked() {
    let Some((model, report, mut json)) = saved_run("files") else {
        return;
    };
    story(&mut json)["tokens"][0] = 683.into();
    json["runs"][0]["model"]["path"] = "/nonexistent/moved.gguf".into();
    let moved = write(&report, "moved.json", &json);
    let (code, _, err) = xtask(&["compare", s(&moved), s(&moved)]);
    // identical runs: nothing to score, but the file is still looked for
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("error: model dense-target.Q4_K_M (SHA-256 ")
            && err.contains("no file with that SHA-256 among /nonexistent/moved.gguf")
            && err.trim_end().ends_with("(pass the file with --model)"),
        "{err}"
    );
    let (code, out, err) = xtask(&["compare", s(&report), s(&moved), "--model", s(&model)]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("B:plain wrong"), "{out}");

    let (ids, sha) = story_prompt(&model, "files");
    story(&mut json)["prompt_tokens"] = 12.into();
    let longer = write(&report, "longer.json", &json);
    assert_eq!(
        refused(&["compare", s(&report), s(&longer), "--model", s(&model)]),
        prompt_changed(
            (ids.len(), &sha),
            [(&report, 11, Some(&sha)), (&longer, 12, Some(&sha))]
        )
    );
}

/// A run whose prompt was another one of the same length (the suite edited since: only its
/// `prompt_sha256` tells) is refused, naming the prompt and both reports (compare scored the
/// suite's current prompt, which neither run used). A report written before `prompt_sha256`
/// existed is compared with a warning that its prompts were checked by count only.
#[test]
fn a_prompt_the_runs_did_not_judge_is_refused() {
    let Some((model, report, mut json)) = saved_run("prompt-sha") else {
        return;
    };
    let (ids, sha) = story_prompt(&model, "prompt-sha");
    assert_eq!(ids.len(), 11);
    // the report records the SHA-256 computed here
    assert_eq!(story(&mut json)["prompt_sha256"], sha.as_str());
    let mut other = json.clone();
    let fake = "0".repeat(64);
    story(&mut other)["prompt_sha256"] = fake.as_str().into();
    let edited = write(&report, "other-prompt.json", &other);
    assert_eq!(
        refused(&["compare", s(&report), s(&edited)]),
        prompt_changed(
            (11, &sha),
            [(&report, 11, Some(&sha)), (&edited, 11, Some(&fake))]
        )
    );

    // an old report (no prompt_sha256 anywhere): compared, with one warning for that report
    let mut old = json.clone();
    for e in old["runs"][0]["entries"].as_array_mut().unwrap() {
        e.as_object_mut().unwrap().remove("prompt_sha256");
    }
    let old_path = write(&report, "old.json", &old);
    let (code, out, err) = xtask(&["compare", s(&report), s(&old_path)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        err,
        format!(
            "warning: {}: written before reports recorded each prompt's SHA-256 \
             (prompt_sha256): its prompts were checked by token count only, so a prompt changed \
             since that run to one of the same length is not noticed (run it again to check)\n",
            old_path.display()
        )
    );
    assert!(out.contains("no forks"), "{out}");
    // and its count still checked: refused, saying it recorded no SHA-256
    story(&mut old)["prompt_tokens"] = 10.into();
    let shorter = write(&report, "old-shorter.json", &old);
    assert_eq!(
        refused(&["compare", s(&report), s(&shorter)]),
        prompt_changed(
            (11, &sha),
            [(&report, 11, Some(&sha)), (&shorter, 10, None)]
        )
    );
}

/// Values no conformance run writes are refused before anything is judged, naming the report
/// and the run or entry: a τ of −1 (it made the oracle's own argmax, margin 0 > −1, "wrong":
/// exit 1), an unknown mode, a (prompt, mode) recorded twice, and a recorded prompt length
/// that the prompt no longer encodes to where the outputs do not fork (checked only at forks
/// before, exit 0).
#[test]
fn report_values_are_checked_before_judging() {
    let Some((model, report, json)) = saved_run("values") else {
        return;
    };
    let m = s(&model);
    let refused_edit = |name: &str, edit: &dyn Fn(&mut Value), expect: &str| {
        let mut j = json.clone();
        edit(&mut j);
        let p = write(&report, name, &j);
        assert_eq!(
            refused(&["compare", s(&report), s(&p), "--model", m]),
            format!("error: {}: {expect}\n", p.display()),
            "{name}"
        );
    };
    refused_edit(
        "tau.json",
        &|j| {
            j["runs"][0]["tau"] = (-1.0).into();
            story(j)["tokens"][0] = 683.into();
        },
        "dense-target.Q4_K_M / smoke: tau = -1 (must be in [0, 1000] logits)",
    );
    refused_edit(
        "mode.json",
        &|j| story(j)["mode"] = "bogus".into(),
        &format!(
            "dense-target.Q4_K_M / smoke / prompt story / mode bogus: {}",
            suites::engine::Mode::parse("bogus").unwrap_err()
        ),
    );
    refused_edit(
        "twice.json",
        &|j| {
            let e = story(j).clone();
            j["runs"][0]["entries"].as_array_mut().unwrap().push(e);
        },
        "dense-target.Q4_K_M / smoke / prompt story / mode plain: recorded twice in this run",
    );
    // identical outputs, a wrong recorded length: refused all the same
    let mut j = json.clone();
    story(&mut j)["prompt_tokens"] = 12.into();
    let p = write(&report, "length.json", &j);
    let err = refused(&["compare", s(&report), s(&p), "--model", m]);
    assert!(
        err.contains("prompt story: ")
            && err.contains("now encodes the prompt to 11 tokens")
            && err.contains(&format!("{}, mode plain) recorded 12 tokens", p.display())),
        "{err}"
    );
}
