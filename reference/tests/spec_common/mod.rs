//! Shared helpers of the `spec_*` tests: fixture lookup and the greedy-JSON fields of
//! `fixtures/README-models.md` §6 and §10.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use reference::model::Model;
use reference::spec::{Assistant, RoundLog, SpecStats};

/// The fixtures folder (`GEMMA4_FIXTURES`, default `<workspace>/../shared/fixtures`), or `None`
/// after printing the skip message when it is absent.
pub fn fixtures() -> Option<PathBuf> {
    let dir = reference::fixtures_dir();
    if dir.join("models").is_dir() && dir.join("oracle").is_dir() {
        Some(dir)
    } else {
        println!("skipped: fixtures not found at {}", dir.display());
        None
    }
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A JSON array of integers as token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// A JSON unsigned integer as usize.
pub fn uint(v: &serde_json::Value) -> usize {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}")) as usize
}

/// Stems of the targets that have a greedy JSON, sorted.
pub fn greedy_stems(fix: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fix.join("oracle"))
        .expect("oracle dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".greedy.json").map(str::to_string))
        .collect();
    v.sort();
    v
}

/// A target/assistant pair of one greedy JSON, with the SHA-256s checked.
pub struct Pair {
    pub json: serde_json::Value,
    pub target: Model<f64>,
    pub assistant: Assistant<f64>,
    pub stop: Vec<u32>,
    pub max_new: usize,
}

/// Loads the pair named by `oracle/<stem>.greedy.json`.
pub fn load_pair(fix: &Path, stem: &str) -> Pair {
    let json = read_json(&fix.join("oracle").join(format!("{stem}.greedy.json")));
    let tpath = fix.join(json["target_file"].as_str().expect("target_file"));
    let apath = fix.join(json["assistant_file"].as_str().expect("assistant_file"));
    for (p, key) in [(&tpath, "target_sha256"), (&apath, "assistant_sha256")] {
        let sha = reference::gguf::sha256_file(p).expect("sha256");
        assert_eq!(json[key].as_str(), Some(sha.as_str()), "{stem}: {key}");
    }
    Pair {
        target: Model::load(&tpath).expect("target"),
        assistant: Assistant::load(&apath).expect("assistant"),
        stop: ids(&json["stop_ids"]),
        max_new: uint(&json["max_new_tokens"]),
        json,
    }
}

/// The fixture's `round_log` entries.
pub fn round_log(v: &serde_json::Value) -> Vec<RoundLog> {
    v.as_array()
        .expect("round_log")
        .iter()
        .map(|r| RoundLog {
            p: uint(&r["p"]),
            k: uint(&r["k"]),
            drafted: ids(&r["drafted"]),
            accepted: uint(&r["accepted"]),
            bonus: r["bonus"].as_u64().expect("bonus") as u32,
        })
        .collect()
}

/// Asserts every §7 counter of a `spec41_*` / `scripted_drafter` record (fields present in it).
pub fn assert_counts(what: &str, got: &SpecStats, want: &serde_json::Value) {
    let pairs = [
        ("rounds", got.rounds),
        ("drafter_forwards", got.drafter_forwards),
        ("target_forwards", got.target_forwards),
        ("drafted_tokens", got.drafted),
        ("accepted_drafts", got.accepted),
        ("plain_steps", got.plain_steps),
        ("prefill_chunks", got.prefill_chunks),
        ("emitted", got.emitted),
    ];
    for (key, value) in pairs {
        if !want[key].is_null() {
            assert_eq!(value, uint(&want[key]), "{what}: {key}");
        }
    }
    let apr: Vec<usize> = want["accepted_per_round"]
        .as_array()
        .expect("accepted_per_round")
        .iter()
        .map(uint)
        .collect();
    assert_eq!(got.accepted_per_round, apr, "{what}: accepted_per_round");
    assert_eq!(
        got.round_log,
        round_log(&want["round_log"]),
        "{what}: round_log"
    );
}
