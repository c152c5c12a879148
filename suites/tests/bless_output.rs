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

/// The child's instructions: the golden folder and the golden's tokens (`7,8,9`).
const CHILD_DIR: &str = "GOLDEN_CHILD_DIR";
const CHILD_TOKENS: &str = "GOLDEN_CHILD_TOKENS";

fn golden(tokens: Vec<u32>) -> Golden {
    Golden {
        schema: "golden-oracle/1".into(),
        model_file: "m.gguf".into(),
        model_sha256: "abc".into(),
        oracle_version: "test".into(),
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
        .env(CHILD_TOKENS, tokens);
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
        let o = write_golden(Path::new(&dir), &golden(tokens), "text").unwrap();
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
