//! What a bless that changes a golden prints (`cargo xtask bless`, insta under
//! `golden::bless_insta_env`): insta's diff, but not its "Stopped on the first failure. Run
//! `cargo insta test` to run all snapshots." line, which is false for bless (it writes every
//! prompt's golden); and `write_golden` still tells a change from an unchanged snapshot, in
//! each `INSTA_UPDATE` mode. insta reads its settings once per process, so each write runs in
//! a child process of this test binary (this same test, told by `GOLDEN_CHILD_DIR`), whose
//! standard output is read here. Expected values are the goldens written by the test itself.

use std::path::Path;
use std::process::Command;

use suites::golden::{bless_insta_env, write_golden, Golden};

/// The child's instructions: the golden folder, the golden's tokens (`7,8,9`) and the model
/// SHA-256 it is pinned to (`abc` when unset).
const CHILD_DIR: &str = "GOLDEN_CHILD_DIR";
const CHILD_TOKENS: &str = "GOLDEN_CHILD_TOKENS";
const CHILD_SHA: &str = "GOLDEN_CHILD_SHA";

fn golden_of(sha: &str, tokens: Vec<u32>) -> Golden {
    Golden {
        schema: "golden-oracle/1".into(),
        model_file: "m.gguf".into(),
        model_sha256: sha.into(),
        oracle_version: suites::golden::ORACLE_VERSION.into(),
        suite: "t".into(),
        prompt_id: "p".into(),
        prompt: vec![2, 5],
        top_k: tokens
            .iter()
            .map(|&t| vec![(t, 1.5), (t + 1, 1.25)])
            .collect(),
        tokens,
    }
}

/// Runs this test as a child writing the golden of `tokens` into `dir` under bless's insta
/// environment (with `accept`) plus `update` as `INSTA_UPDATE`; returns its standard output.
fn bless_child(dir: &Path, tokens: &str, accept: bool, update: Option<&str>) -> String {
    bless_child_pinned(dir, "abc", tokens, accept, update)
}

/// [`bless_child`] with the golden pinned to the model SHA-256 `sha`.
fn bless_child_pinned(
    dir: &Path,
    sha: &str,
    tokens: &str,
    accept: bool,
    update: Option<&str>,
) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "a_changed_golden_shows_its_diff_and_no_stop_line",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    for key in ["INSTA_FORCE_PASS", "INSTA_UPDATE", "INSTA_OUTPUT", "CI"] {
        cmd.env_remove(key);
    }
    cmd.envs(bless_insta_env(accept))
        .env(CHILD_DIR, dir)
        .env(CHILD_TOKENS, tokens)
        .env(CHILD_SHA, sha);
    if let Some(u) = update {
        cmd.env("INSTA_UPDATE", u);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The outcome line the child printed.
fn outcome(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("outcome: "))
        .unwrap_or("none")
}

const STOP_LINE: &str = "Stopped on the first failure";

#[test]
fn a_changed_golden_shows_its_diff_and_no_stop_line() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        let tokens: Vec<u32> = std::env::var(CHILD_TOKENS)
            .unwrap()
            .split(',')
            .map(|t| t.parse().unwrap())
            .collect();
        let sha = std::env::var(CHILD_SHA).unwrap_or_else(|_| "abc".into());
        let o = write_golden(Path::new(&dir), &golden_of(&sha, tokens), "text").unwrap();
        // on a line of its own (the harness may have begun one)
        println!("\noutcome: {o:?}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("golden-bless-output-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // the first golden, accepted
    let out = bless_child(&dir, "7,8,9", true, None);
    assert_eq!(outcome(&out), "Written");
    assert!(dir.join("p.snap").exists() && !dir.join("p.snap.new").exists());

    // changed, for review: the diff, the .snap.new, no stop line; pending, not written
    let out = bless_child(&dir, "7,8,10", false, Some("new"));
    assert_eq!(outcome(&out), "Pending");
    assert!(out.contains("│-  - 9") && out.contains("│+  - 10"), "{out}");
    assert!(!out.contains(STOP_LINE), "{out}");
    assert!(dir.join("p.snap.new").exists() && dir.join("p.oracle.json.new").exists());
    let sidecar = || std::fs::read_to_string(dir.join("p.oracle.json")).unwrap();
    let side: Golden = serde_json::from_str(&sidecar()).unwrap();
    assert_eq!(side.tokens, [7, 8, 9], "the sidecar of the reviewed .snap");

    // then accepted with `bless --accept`: written as .snap and .oracle.json; the pending
    // files of the plain bless are gone (they stayed, and the sidecar went to .oracle.json.new)
    let out = bless_child(&dir, "7,8,10", true, None);
    assert_eq!(outcome(&out), "Written");
    assert!(!dir.join("p.snap.new").exists());
    assert!(!dir.join("p.oracle.json.new").exists());
    assert!(std::fs::read_to_string(dir.join("p.snap"))
        .unwrap()
        .contains("- 10"));
    let side: Golden = serde_json::from_str(&sidecar()).unwrap();
    assert_eq!(side.tokens, [7, 8, 10]);

    // changed under INSTA_UPDATE=no (CI): a mismatch, nothing written, no stop line
    let out = bless_child(&dir, "7,8,9", false, Some("no"));
    assert_eq!(outcome(&out), "Mismatch");
    assert!(out.contains("│+  - 9") && !out.contains(STOP_LINE), "{out}");
    assert!(!dir.join("p.snap.new").exists());

    // unchanged: nothing printed but the outcome
    let out = bless_child(&dir, "7,8,10", false, Some("no"));
    assert_eq!(outcome(&out), "Unchanged");
    assert!(!out.contains("Snapshot"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bless --force` on another model (SHA-256 `def` instead of `abc`) with the same output:
/// insta compares bodies only, yet the pin changed, so it is a change like any other, and the
/// committed `.snap` and sidecar are never removed before a reviewer accepts the new ones
/// (they were: `no` left nothing, `new` left only the `.snap.new`). Under `no` a mismatch
/// writes and removes nothing (an earlier bless's pending files included); under `new` the old
/// pair stays beside the pending pair, and accepting the `.snap.new` loads the new sidecar;
/// `--accept` rewrites the pin in place.
#[test]
fn a_golden_pinned_to_another_model_stays_until_its_change_is_accepted() {
    use suites::golden::{load_goldens, RowLimits};
    use suites::suite::{Prompt, PromptInput};
    let dir = std::env::temp_dir().join(format!("golden-bless-repin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let sha_of = |name: &str| {
        serde_json::from_str::<Golden>(&read(name))
            .unwrap()
            .model_sha256
    };
    let out = bless_child_pinned(&dir, "abc", "7,8,9", true, None);
    assert_eq!(outcome(&out), "Written");
    let (snap, side) = (read("p.snap"), read("p.oracle.json"));
    assert!(snap.contains("model_sha256: abc\n"), "{snap}");

    // `no`: the same body pinned to `def` is a mismatch; both files are as they were
    let out = bless_child_pinned(&dir, "def", "7,8,9", false, Some("no"));
    assert_eq!(outcome(&out), "Mismatch");
    assert_eq!(
        (read("p.snap"), read("p.oracle.json")),
        (snap.clone(), side.clone())
    );
    assert!(!dir.join("p.snap.new").exists() && !dir.join("p.oracle.json.new").exists());

    // `new`: pending review; the reviewed pair is untouched
    let out = bless_child_pinned(&dir, "def", "7,8,9", false, Some("new"));
    assert_eq!(outcome(&out), "Pending");
    assert_eq!(
        (read("p.snap"), read("p.oracle.json")),
        (snap.clone(), side.clone())
    );
    assert!(read("p.snap.new").contains("model_sha256: def\n"));
    assert_eq!(sha_of("p.oracle.json.new"), "def");

    // `no` again, with a changed body: a mismatch that keeps the pending pair too
    let pending = (read("p.snap.new"), read("p.oracle.json.new"));
    let out = bless_child_pinned(&dir, "def", "7,8,10", false, Some("no"));
    assert_eq!(outcome(&out), "Mismatch");
    assert_eq!(
        (read("p.snap"), read("p.oracle.json")),
        (snap.clone(), side.clone())
    );
    assert_eq!((read("p.snap.new"), read("p.oracle.json.new")), pending);

    // the reviewer accepts (insta renames the .snap.new): loading for model `def` takes the
    // pending sidecar, though the old one holds the same tokens and margins
    let prompts = [Prompt {
        id: "p".into(),
        input: PromptInput::Text("x".into()),
        max_tokens: 3,
    }];
    let e = load_goldens(&dir, "t", &prompts, &[], "def", RowLimits::new(32, &[], 2)).unwrap_err();
    assert!(
        e.to_string().contains("golden pinned to model SHA-256 abc"),
        "{e}"
    );
    std::fs::rename(dir.join("p.snap.new"), dir.join("p.snap")).unwrap();
    let g = load_goldens(&dir, "t", &prompts, &[], "def", RowLimits::new(32, &[], 2)).unwrap();
    assert_eq!(g["p"].model_sha256, "def");
    assert_eq!(sha_of("p.oracle.json"), "def");
    assert!(!dir.join("p.oracle.json.new").exists());

    // `--accept` back to `abc`: written in place, no pending files
    let out = bless_child_pinned(&dir, "abc", "7,8,9", true, None);
    assert_eq!(outcome(&out), "Written");
    assert_eq!((read("p.snap"), read("p.oracle.json")), (snap, side));
    assert!(!dir.join("p.snap.new").exists() && !dir.join("p.oracle.json.new").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
