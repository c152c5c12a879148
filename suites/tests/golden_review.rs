//! The `cargo insta review` path of goldens (`design/conformance.md` §9, style R11): a changed
//! golden blessed without `--accept` goes to `<prompt>.snap.new` with its sidecar pending as
//! `<prompt>.oracle.json.new`; conformance keeps reading the reviewed `.snap` and its sidecar;
//! once the `.snap.new` is accepted (insta renames it to `.snap`), loading promotes the pending
//! sidecar; a sidecar of another oracle version is stale until blessed again. Expected values
//! are the goldens written by the test itself.

use suites::golden::{
    load_goldens, write_golden, Golden, RowLimits, SnapshotOutcome, ORACLE_VERSION,
};
use suites::suite::{Prompt, PromptInput};

/// The vocabulary size of the model the goldens below are pinned to (every id they hold is
/// below it).
const VOCAB: usize = 32;

/// The vocabulary above, no suppressed ids, a suite of top_k 2 (the goldens' rows list 2 ids).
fn limits() -> RowLimits {
    RowLimits::new(VOCAB, &[], 2)
}

fn golden(tokens: Vec<u32>) -> Golden {
    Golden {
        schema: "golden-oracle/1".into(),
        model_file: "m.gguf".into(),
        model_sha256: "abc".into(),
        oracle_version: ORACLE_VERSION.into(),
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

#[test]
fn unreviewed_changes_stay_pending_until_accepted() {
    let dir = std::env::temp_dir().join(format!("golden-review-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // the prompt the goldens below answer: 3 output tokens of max_tokens 3, no stop id
    let prompts = [Prompt {
        id: "p".into(),
        input: PromptInput::Text("x".into()),
        max_tokens: 3,
    }];
    let stop: [u32; 0] = [];
    // insta reads INSTA_UPDATE once per process; this binary has only this test
    std::env::set_var("INSTA_FORCE_PASS", "0");
    std::env::set_var("INSTA_UPDATE", "new");
    let old = golden(vec![7, 8, 9]);
    assert_eq!(
        write_golden(&dir, &old, "abc").unwrap(),
        SnapshotOutcome::Pending
    );
    // nothing reviewed yet: no golden to judge against
    assert!(load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).is_err());
    std::fs::rename(dir.join("p.snap.new"), dir.join("p.snap")).unwrap();
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].tokens,
        [7, 8, 9]
    );

    let new = golden(vec![7, 8, 10]);
    assert_eq!(
        write_golden(&dir, &new, "abd").unwrap(),
        SnapshotOutcome::Pending
    );
    assert!(dir.join("p.snap.new").exists());
    assert!(dir.join("p.oracle.json.new").exists());
    // conformance still judges against the reviewed golden
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].tokens,
        [7, 8, 9]
    );

    // `cargo insta review` accepting = renaming .snap.new over .snap
    std::fs::rename(dir.join("p.snap.new"), dir.join("p.snap")).unwrap();
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].tokens,
        [7, 8, 10]
    );
    assert!(!dir.join("p.oracle.json.new").exists());

    // a sidecar that disagrees with the reviewed snapshot stops the run
    std::fs::write(
        dir.join("p.oracle.json"),
        serde_json::to_string(&old).unwrap(),
    )
    .unwrap();
    let e = load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap_err();
    assert!(e.to_string().contains("disagrees"), "{e}");
    // blessing again repairs that sidecar and says so (the snapshot itself is unchanged);
    // once repaired, a second bless changes nothing
    assert_eq!(
        write_golden(&dir, &new, "abd").unwrap(),
        SnapshotOutcome::Written
    );
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].tokens,
        [7, 8, 10]
    );
    assert_eq!(
        write_golden(&dir, &new, "abd").unwrap(),
        SnapshotOutcome::Unchanged
    );

    // a sidecar of another oracle version is stale; blessing again (no --force: the model is
    // the same) rewrites it, and it loads
    let mut stale = new.clone();
    stale.oracle_version = "reference-f64 0.0.9".into();
    std::fs::write(
        dir.join("p.oracle.json"),
        serde_json::to_string(&stale).unwrap(),
    )
    .unwrap();
    let e = load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap_err();
    assert!(e.to_string().contains("stale golden"), "{e}");
    assert_eq!(
        write_golden(&dir, &new, "abd").unwrap(),
        SnapshotOutcome::Written
    );
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].oracle_version,
        ORACLE_VERSION
    );

    // a margin-only change (same tokens; the runner-up of output 1 moves from 1.25 to 1.0, so
    // the snapshot's margin goes from 0.25 to 0.5) is a review like any other: pending until
    // accepted, then its sidecar is promoted (the old one agrees on tokens, not on margins)
    let mut moved = new.clone();
    moved.top_k[1][1].1 = 1.0;
    assert_eq!(
        write_golden(&dir, &moved, "abd").unwrap(),
        SnapshotOutcome::Pending
    );
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].top_k[1][1].1,
        1.25
    );
    std::fs::rename(dir.join("p.snap.new"), dir.join("p.snap")).unwrap();
    assert_eq!(
        load_goldens(&dir, "t", &prompts, &stop, "abc", limits()).unwrap()["p"].top_k[1][1].1,
        1.0
    );
    assert!(!dir.join("p.oracle.json.new").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
