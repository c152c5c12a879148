//! `cargo xtask fixtures` is byte-for-byte reproducible: the test rebuilds the synthetic models
//! into a temporary folder with the crate's own binary and compares every file's size and
//! SHA-256 with the committed `goldens/fixtures-manifest.json`. It also checks that the
//! synthetic vocabulary loads in `reference::tokenizer::GemmaTokenizer` with the Gemma-4 ids
//! of `spec/gemma4-chat.md` §1 and round-trips text.
//!
//! To re-bless after an intended recipe change: `cargo xtask fixtures --update-manifest`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use reference::gguf::GgufFile;
use reference::tokenizer::{ChatMessage, GemmaTokenizer};
use serde_json::Value;

/// Builds the fixtures once per test binary; returns the output folder.
fn built() -> &'static Path {
    static OUT: OnceLock<PathBuf> = OnceLock::new();
    OUT.get_or_init(|| {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures-reproducible");
        let _ = std::fs::remove_dir_all(&out);
        let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .arg("fixtures")
            .arg("--out")
            .arg(&out)
            .status()
            .expect("running xtask fixtures");
        assert!(status.success(), "xtask fixtures failed: {status}");
        out
    })
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

#[test]
fn rebuilt_fixtures_match_committed_manifest_hashes() {
    let committed_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../goldens/fixtures-manifest.json");
    let committed = read_json(&committed_path);
    let out = built();
    let rebuilt = read_json(&out.join("manifest.json"));
    let files = |m: &Value| m["files"].as_array().cloned().unwrap_or_default();
    let (c, r) = (files(&committed), files(&rebuilt));
    assert_eq!(c.len(), 18, "committed manifest should list 18 files");
    assert_eq!(c.len(), r.len(), "file count differs");
    for (a, b) in c.iter().zip(&r) {
        assert_eq!(a["file"], b["file"], "file order differs");
        assert_eq!(a["bytes"], b["bytes"], "{}: size differs", a["file"]);
        assert_eq!(a["sha256"], b["sha256"], "{}: SHA-256 differs", a["file"]);
        // The manifest's hash is the hash of the file actually written.
        let name = b["file"].as_str().unwrap_or_default();
        let sha = reference::gguf::sha256_file(&out.join(name)).expect("hashing");
        assert_eq!(
            Value::String(sha),
            b["sha256"],
            "{name}: manifest hash is not the file's"
        );
    }
    assert_eq!(committed, rebuilt, "manifest contents differ");
}

#[test]
fn synthetic_vocabulary_loads_with_gemma4_special_ids_and_round_trips() {
    let path = built().join("syn-dense-target.F32.gguf");
    let file = GgufFile::open(&path).expect("opening the dense target");
    let tok = GemmaTokenizer::from_gguf(&file).expect("building the tokenizer");
    assert_eq!(tok.vocab_size(), 1024);
    // spec/gemma4-chat.md §1 and §3: <bos> 2, <eos> 1, stop set {<eos>, <|tool_response>, <turn|>}.
    assert_eq!((tok.bos_id(), tok.eos_id()), (2, 1));
    assert_eq!(tok.stop_ids(), vec![1, 50, 106]);
    assert_eq!(tok.token_piece(105), Some("<|turn>"));
    assert_eq!(tok.token_piece(110), Some("<0x00>"));
    for text in [
        "The quick brown fox jumps over the lazy dog. Hello world!",
        "1, 2, 3, 4, 5, 6, 7, 8,",
        "  two spaces\tand a tab\n\nnew paragraph",
        "你好，世界！ مرحبا 😀 — unseen: ẞ ꙮ",
    ] {
        let ids = tok.encode(text, false).expect("encode");
        assert_eq!(
            tok.decode(&ids).expect("decode"),
            text,
            "round trip of {text:?}"
        );
    }
    // Digits are single tokens (as in the real vocabulary, spec/gguf-gemma4.md §7.2).
    let ids = tok.encode("3333", false).expect("encode");
    assert_eq!(ids.len(), 4);
    assert!(ids.iter().all(|&i| i == ids[0]));
    // The real chat template renders a user turn as <bos><|turn>user\n…<turn|>\n<|turn>model\n.
    let chat = tok
        .encode_chat(&[ChatMessage::new("user", "Hi there")], true, false)
        .expect("chat encoding");
    assert_eq!(&chat[..2], &[2, 105]);
    assert!(chat.contains(&106), "chat ids lack <turn|>: {chat:?}");
    let text = tok.decode(&chat).expect("decode chat");
    assert!(
        text.starts_with("<bos><|turn>user\nHi there<turn|>\n<|turn>model\n"),
        "{text:?}"
    );
}
