//! Shared helpers of the `suites` tests that run on the real-toolchain fixtures
//! (`fixtures/README-models.md`): fixture lookup with the skip message, the counting chat prompt
//! of `context.md` and transformers' float64 greedy ids of a prompt (§6 greedy JSON).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use suites::oracle::Codec;
use suites::reference_engine::GemmaCodec;
use suites::suite::{Message, PromptInput};

/// The counting prompt of the fixtures' `count_chat` case (one user turn).
pub const COUNT_PROMPT: &str =
    "Write the numbers from 1 to 300 in order, separated by commas, and nothing more.";

/// The fixtures folder (`GEMMA4_FIXTURES`, default `<workspace>/../shared/fixtures`) when it
/// holds `rel` (e.g. `models/dense-target.Q4_K_M.gguf`), or `None` after printing the skip
/// message.
pub fn fixtures_with(rel: &str) -> Option<PathBuf> {
    let p = reference::fixtures_dir();
    if p.join(rel).exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", p.display());
        None
    }
}

/// [`COUNT_PROMPT`] as one user message through the model's chat template with the generation
/// prompt, thinking off (`enable_thinking = false`): the `count_chat` prompt of the greedy JSON.
pub fn count_chat(codec: &GemmaCodec) -> Vec<u32> {
    let m = vec![Message {
        role: "user".into(),
        content: COUNT_PROMPT.into(),
    }];
    codec.encode(&PromptInput::Messages(m), false).unwrap()
}

/// `greedy_ids` of prompt `name` in `oracle/<stem>.greedy.json` (transformers float64 greedy).
/// Panics with the file and prompt named when either is missing.
pub fn greedy_ids(fx: &Path, stem: &str, name: &str) -> Vec<u32> {
    let path = fx.join(format!("oracle/{stem}.greedy.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let p = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{}: no prompt {name}", path.display()));
    p["greedy_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}
