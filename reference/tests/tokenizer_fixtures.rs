//! Tokenizer and chat template against the real-toolchain fixtures.
//!
//! Expected values come from `fixtures/tokenizer/cases.json` (llama.cpp's 46 reference cases for
//! `ggml-vocab-gemma-4.gguf`), `fixtures/tokenizer/chat-cases.json` (transformers-rendered chats,
//! ids cross-checked with llama.cpp; `fixtures/README-tokenizer-dequant.md` §2–§3), the
//! `sequences` / `prompts` of `fixtures/oracle/*.json` (compact-vocab models,
//! `fixtures/README-models.md` §5–§6) and the spec tables (`spec/gguf-gemma4.md` §7.1,
//! `spec/gemma4-chat.md` §1, §3). Missing fixtures: the test prints `skipped: ...` and passes.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use reference::gguf::GgufFile;
use reference::tokenizer::{ChatMessage, GemmaTokenizer};
use serde::Deserialize;

fn fixtures_dir() -> PathBuf {
    reference::fixtures_dir()
}

/// The fixture file `rel`, or `None` after printing the skip line.
fn fixture(rel: &str) -> Option<PathBuf> {
    let p = fixtures_dir().join(rel);
    if p.exists() {
        Some(p)
    } else {
        println!("skipped: fixtures not found at {}", p.display());
        None
    }
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The full 262 144-token vocabulary, built once per test binary (load time printed).
fn full_vocab() -> Option<&'static GemmaTokenizer> {
    static TOK: OnceLock<Option<GemmaTokenizer>> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = fixture("tokenizer/ggml-vocab-gemma-4.gguf")?;
        let t0 = Instant::now();
        let file = GgufFile::open(&path).expect("open vocab GGUF");
        let t1 = Instant::now();
        let tok = GemmaTokenizer::from_gguf(&file).expect("build tokenizer");
        eprintln!(
            "full vocab: GGUF open {:.3} s, tokenizer build {:.3} s",
            (t1 - t0).as_secs_f64(),
            t1.elapsed().as_secs_f64()
        );
        Some(tok)
    })
    .as_ref()
}

#[derive(Deserialize)]
struct Case {
    text: String,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct ChatCase {
    name: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    template_kwargs: serde_json::Map<String, serde_json::Value>,
    rendered: String,
    ids: Vec<u32>,
}

#[test]
fn llama_cpp_reference_cases_encode_to_expected_ids() {
    let (Some(tok), Some(path)) = (full_vocab(), fixture("tokenizer/cases.json")) else {
        return;
    };
    let cases: Vec<Case> = read_json(&path);
    assert_eq!(cases.len(), 46, "cases.json holds llama.cpp's 46 cases");
    let mut bad = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        // test-tokenizer-0 encodes without BOS; no case contains special-token text, so
        // llama.cpp's parse_special = false and our parsing of specials agree.
        let got = tok.encode(&c.text, false).expect("encode");
        if got != c.ids {
            bad.push(format!(
                "case {i} {:?}: got {got:?}, want {:?}",
                c.text, c.ids
            ));
        }
        let with_bos = tok.encode(&c.text, true).expect("encode");
        assert_eq!(with_bos[0], 2, "case {i}: BOS first");
        assert_eq!(&with_bos[1..], &got[..], "case {i}: BOS only prepended");
    }
    assert!(
        bad.is_empty(),
        "{} of 46 cases differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn llama_cpp_reference_cases_decode_back_to_their_text() {
    let (Some(tok), Some(path)) = (full_vocab(), fixture("tokenizer/cases.json")) else {
        return;
    };
    let cases: Vec<Case> = read_json(&path);
    for (i, c) in cases.iter().enumerate() {
        assert_eq!(tok.decode(&c.ids).expect("decode"), c.text, "case {i}");
    }
}

#[test]
fn chat_cases_render_and_encode_as_transformers_and_llama_cpp() {
    let (Some(tok), Some(path)) = (full_vocab(), fixture("tokenizer/chat-cases.json")) else {
        return;
    };
    let cases: Vec<ChatCase> = read_json(&path);
    assert_eq!(cases.len(), 9);
    for c in &cases {
        let thinking = match c.template_kwargs.get("enable_thinking") {
            None => false,
            Some(v) => v.as_bool().expect("enable_thinking is a bool"),
        };
        assert!(
            c.template_kwargs.keys().all(|k| k == "enable_thinking"),
            "{}: unexpected kwargs",
            c.name
        );
        let rendered = tok
            .render_chat(&c.messages, c.add_generation_prompt, thinking)
            .expect("render");
        assert_eq!(rendered, c.rendered, "{}: rendered text", c.name);
        let ids = tok
            .encode_chat(&c.messages, c.add_generation_prompt, thinking)
            .expect("encode_chat");
        assert_eq!(ids, c.ids, "{}: encode_chat ids", c.name);
        // transformers' path: the rendered text (with its <bos>) tokenized without adding BOS.
        assert_eq!(
            tok.encode(&c.rendered, false).expect("encode"),
            c.ids,
            "{}",
            c.name
        );
        // The pitfall of gemma4-chat §4: rendered text plus an added BOS gives two BOS ids.
        assert_eq!(
            &tok.encode(&c.rendered, true).expect("encode")[..2],
            &[2, 2]
        );
        assert_eq!(
            tok.decode(&c.ids).expect("decode"),
            c.rendered,
            "{}: decode",
            c.name
        );
    }
}

#[test]
fn full_vocab_metadata_matches_spec_tables() {
    let Some(tok) = full_vocab() else { return };
    // spec/gguf-gemma4.md §7.1 and gemma4-chat.md §1, §3.
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!((tok.bos_id(), tok.eos_id()), (2, 1));
    assert_eq!(tok.stop_ids(), vec![1, 50, 106]);
    assert!(
        tok.suppressed_ids().is_empty(),
        "no suppress_tokens key in this file"
    );
    assert_eq!(tok.token_piece(105), Some("<|turn>"));
    assert_eq!(tok.token_piece(236743), Some("\u{2581}"));
    assert_eq!(tok.token_piece(238), Some("<0x00>"));
    assert_eq!(tok.token_piece(262_144), None);
    assert_eq!(tok.token_type(50), Some(4));
    assert_eq!(tok.chat_template().map(str::len), Some(12_045));
    assert!(
        tok.decode(&[262_144]).is_err(),
        "out-of-range id is an error"
    );
}

#[test]
fn control_tokens_are_parsed_as_specials_in_text() {
    let Some(tok) = full_vocab() else { return };
    // spec/gemma4-chat.md §1: CONTROL and USER_DEFINED token texts become their ids.
    let ids = tok.encode(
        "<|turn><turn|><|channel><channel|><|tool_response><|\"|>",
        false,
    );
    assert_eq!(ids.expect("encode"), vec![105, 106, 100, 101, 50, 52]);
}

#[derive(Deserialize)]
struct LogitsJson {
    file: String,
    sequences: Vec<Sequence>,
}

#[derive(Deserialize)]
struct Sequence {
    name: String,
    ids: Vec<u32>,
    text: String,
}

#[derive(Deserialize)]
struct GreedyJson {
    target_file: String,
    stop_ids: Vec<u32>,
    prompts: Vec<Prompt>,
}

#[derive(Deserialize)]
struct Prompt {
    name: String,
    prompt_text: String,
    prompt_ids: Vec<u32>,
}

/// (file and prompt name, text with a leading `<bos>`, ids) of every oracle prompt. The greedy
/// `plain` / `long_context` prompts are stored without `<bos>` (raw prompts tokenized with BOS
/// added, gemma4-chat §4); it is prepended here.
fn oracle_prompts(oracle: &Path) -> Vec<(String, String, Vec<u32>)> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(oracle)
        .expect("read oracle dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with(".logits.json") {
            let j: LogitsJson = read_json(&p);
            for s in j.sequences {
                out.push((format!("{} {}", j.file, s.name), s.text, s.ids));
            }
        } else if name.ends_with(".greedy.json") {
            let j: GreedyJson = read_json(&p);
            assert_eq!(j.stop_ids, vec![1, 50, 106], "{name}: stop ids");
            for s in j.prompts {
                let text = if s.prompt_text.starts_with("<bos>") {
                    s.prompt_text
                } else {
                    format!("<bos>{}", s.prompt_text)
                };
                out.push((format!("{} {}", j.target_file, s.name), text, s.prompt_ids));
            }
        }
    }
    out
}

#[test]
fn compact_vocab_models_tokenize_oracle_prompts() {
    let (Some(models), Some(oracle)) = (fixture("models"), fixture("oracle")) else {
        return;
    };
    let prompts = oracle_prompts(&oracle);
    assert!(prompts.len() >= 7 * 3, "3 logits sequences per target file");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&models)
        .expect("read models dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 10);
    let user = |text: &str| vec![ChatMessage::new("user", text)];
    for path in &files {
        let t0 = Instant::now();
        let file = GgufFile::open(path).expect("open model GGUF");
        let tok = GemmaTokenizer::from_gguf(&file).expect("build tokenizer");
        eprintln!(
            "{}: tokenizer {:.3} s",
            path.display(),
            t0.elapsed().as_secs_f64()
        );
        assert_eq!(tok.vocab_size(), 16_384, "{}", path.display());
        assert_eq!(tok.stop_ids(), vec![1, 50, 106], "{}", path.display());
        for (what, text, ids) in &prompts {
            let ctx = format!("{} / {what}", path.display());
            assert_eq!(&tok.encode(text, false).expect("encode"), ids, "{ctx}");
            let body = text
                .strip_prefix("<bos>")
                .expect("prompts start with <bos>");
            assert_eq!(&tok.encode(body, true).expect("encode"), ids, "{ctx}");
            assert_eq!(&tok.decode(ids).expect("decode"), text, "{ctx}");
        }
        // The chat prompts are the chat template applied to one user message
        // (README-models.md §5 "chat": "Hi there"; §6 count_chat).
        for (what, text, ids) in &prompts {
            let question = if what.ends_with(" chat") {
                "Hi there"
            } else if what.ends_with(" count_chat") {
                "Write the numbers from 1 to 300 in order, separated by commas, and nothing more."
            } else {
                continue;
            };
            let ctx = format!("{} / {what}", path.display());
            assert_eq!(
                &tok.render_chat(&user(question), true, false)
                    .expect("render"),
                text,
                "{ctx}"
            );
            assert_eq!(
                &tok.encode_chat(&user(question), true, false).expect("chat"),
                ids,
                "{ctx}"
            );
        }
    }
}
