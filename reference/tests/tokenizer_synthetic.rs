//! Tokenizer behaviour on a toy vocabulary written in memory with `GgufWriter`.
//!
//! Every expected id is derived by hand from the toy vocabulary below (BPE: lowest merge rank
//! first; unknown characters as `<0xXX>` bytes; `spec/gguf-gemma4.md` §7.2), so these tests need
//! no fixtures. They cover what the real files do not: rank order, byte fallback, the stop set
//! rule, `tokenizer.ggml.suppress_tokens`, and the error paths.

use reference::gguf::{Array, GgufError, GgufFile, GgufWriter, Value};
use reference::tokenizer::{
    ChatMessage, GemmaTokenizer, TokenizerError, CHAT_TEMPLATE_FUEL, CHAT_TEMPLATE_MAX_OUTPUT,
};

/// Toy vocabulary: specials 0..=7, the 256 byte tokens 8..=263 (`<0xXX>` = 8 + XX), then
/// ordinary pieces from 264 on.
fn toy_tokens() -> (Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = [
        "<pad>",
        "<eos>",
        "<bos>",
        "<unk>",
        "<|turn>",
        "<turn|>",
        "<|tool_response>",
        "<|channel>",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut types = vec![3, 3, 3, 3, 3, 3, 4, 4];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for p in ["a", "b", "ab", "\u{2581}", "\u{2581}a", "\n", "\n\n"] {
        tokens.push(p.to_string());
        types.push(1);
    }
    (tokens, types)
}

const A: u32 = 264;
const B: u32 = 265;
const AB: u32 = 266;
const SPACE: u32 = 267;
const SPACE_A: u32 = 268;
const NL: u32 = 269;
const NL2: u32 = 270;
const fn byte(b: u8) -> u32 {
    8 + b as u32
}

fn toy_writer() -> GgufWriter {
    let (tokens, types) = toy_tokens();
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("gemma4".into()));
    w.set("tokenizer.ggml.model", Value::String("gemma4".into()));
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    // Rank 0 "a b" beats rank 1 "▁ a".
    let merges = ["a b", "\u{2581} a", "\n \n"].map(String::from).to_vec();
    w.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)));
    w.set("tokenizer.ggml.bos_token_id", Value::U32(2));
    w.set("tokenizer.ggml.eos_token_id", Value::U32(1));
    w.set("tokenizer.ggml.unknown_token_id", Value::U32(3));
    w.set("tokenizer.ggml.padding_token_id", Value::U32(0));
    w.set(
        "tokenizer.chat_template",
        Value::String(
            "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}:\
             {{ m['content'].split(',')[0] | trim }}]{% endfor %}\
             {% if add_generation_prompt %}G{% endif %}{% if enable_thinking %}T{% endif %}"
                .into(),
        ),
    );
    w
}

fn load(w: &GgufWriter) -> Result<GemmaTokenizer, TokenizerError> {
    let file = GgufFile::from_bytes(w.to_bytes().expect("write toy GGUF")).expect("read toy GGUF");
    GemmaTokenizer::from_gguf(&file)
}

#[test]
fn lowest_rank_merge_applies_first_and_spaces_become_u2581() {
    let tok = load(&toy_writer()).expect("toy tokenizer");
    // "a ab" -> a ▁ a b; pairs (▁,a) rank 1 and (a,b) rank 0: "a b" wins -> a ▁ ab.
    assert_eq!(tok.encode("a ab", false).unwrap(), vec![A, SPACE, AB]);
    // "a a" -> a ▁ a; only (▁,a) merges -> a ▁a.
    assert_eq!(tok.encode("a a", false).unwrap(), vec![A, SPACE_A]);
    assert_eq!(tok.encode("\n\n", false).unwrap(), vec![NL2]);
    assert_eq!(tok.encode("\n\n\na", true).unwrap(), vec![2, NL2, NL, A]);
    assert_eq!(tok.encode("", false).unwrap(), Vec::<u32>::new());
}

#[test]
fn unknown_characters_fall_back_to_utf8_bytes_and_decode_back() {
    let tok = load(&toy_writer()).expect("toy tokenizer");
    // 'é' = C3 A9, 'c' = 63.
    let ids = tok.encode("céab", false).unwrap();
    assert_eq!(ids, vec![byte(0x63), byte(0xC3), byte(0xA9), AB]);
    assert_eq!(tok.decode(&ids).unwrap(), "céab");
    assert_eq!(tok.decode(&[A, SPACE_A]).unwrap(), "a a");
}

#[test]
fn control_and_user_defined_texts_become_their_ids() {
    let tok = load(&toy_writer()).expect("toy tokenizer");
    let ids = tok.encode("<|turn>a<|channel>b<turn|>", false).unwrap();
    assert_eq!(ids, vec![4, A, 7, B, 5]);
    assert_eq!(tok.decode(&ids).unwrap(), "<|turn>a<|channel>b<turn|>");
}

#[test]
fn stop_set_is_eos_plus_gemma4_end_of_generation_texts() {
    let tok = load(&toy_writer()).expect("toy tokenizer");
    assert_eq!(tok.stop_ids(), vec![1, 5, 6]);
    assert!(tok.suppressed_ids().is_empty());
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.vocab_size()), (2, 1, 271));
}

#[test]
fn suppress_tokens_are_read_and_range_checked() {
    let mut w = toy_writer();
    w.set(
        "tokenizer.ggml.suppress_tokens",
        Value::Array(Array::I32(vec![4, 0])),
    );
    assert_eq!(load(&w).unwrap().suppressed_ids(), vec![4, 0]);
    w.set(
        "tokenizer.ggml.suppress_tokens",
        Value::Array(Array::I32(vec![271])),
    );
    let err = load(&w).unwrap_err();
    assert!(
        matches!(err, TokenizerError::IdOutOfRange { id: 271, .. }),
        "{err}"
    );
}

#[test]
fn chat_template_output_starts_with_exactly_one_bos() {
    let tok = load(&toy_writer()).expect("toy tokenizer");
    let msgs = [ChatMessage::new("user", " a , b")];
    // pycompat `split(',')` keeps " a ", `trim` gives "a".
    assert_eq!(
        tok.render_chat(&msgs, true, true).unwrap(),
        "<bos>[user:a]GT"
    );
    assert_eq!(
        tok.render_chat(&msgs, false, false).unwrap(),
        "<bos>[user:a]"
    );
    let ids = tok.encode_chat(&msgs, false, false).unwrap();
    // "[user:a]": '[' 5B, 'u' 75, 's' 73, 'e' 65, 'r' 72, ':' 3A are bytes; 'a'; ']' 5D.
    let want = [
        2,
        byte(0x5B),
        byte(0x75),
        byte(0x73),
        byte(0x65),
        byte(0x72),
        byte(0x3A),
        A,
        byte(0x5D),
    ];
    assert_eq!(ids, want);
    assert!(matches!(
        tok.render_chat(&[], true, false),
        Err(TokenizerError::EmptyChat)
    ));
}

#[test]
fn missing_template_is_an_error_only_when_rendering() {
    let mut w = GgufWriter::new();
    for (k, v) in GgufFile::from_bytes(toy_writer().to_bytes().unwrap())
        .unwrap()
        .metadata()
    {
        if k != "tokenizer.chat_template" {
            w.set(k, v.clone());
        }
    }
    let tok = load(&w).expect("tokenizer without template");
    assert_eq!(tok.encode("ab", false).unwrap(), vec![AB]);
    let msgs = [ChatMessage::new("user", "a")];
    assert!(matches!(
        tok.render_chat(&msgs, true, false),
        Err(TokenizerError::NoChatTemplate)
    ));
}

#[test]
fn malformed_metadata_gives_errors_naming_the_key() {
    let mut w = toy_writer();
    w.set("tokenizer.ggml.model", Value::String("llama".into()));
    assert!(matches!(
        load(&w),
        Err(TokenizerError::UnsupportedModel { .. })
    ));

    let mut w = toy_writer();
    w.set(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(vec!["ab".into()])),
    );
    assert!(matches!(
        load(&w),
        Err(TokenizerError::BadMerge { index: 0, .. })
    ));

    let mut w = toy_writer();
    w.set(
        "tokenizer.ggml.merges",
        Value::Array(Array::String(vec!["b a".into()])),
    );
    assert!(
        matches!(load(&w), Err(TokenizerError::Build { .. })),
        "merge result not a token"
    );

    let mut w = toy_writer();
    w.set(
        "tokenizer.ggml.token_type",
        Value::Array(Array::I32(vec![1; 3])),
    );
    assert!(matches!(
        load(&w),
        Err(TokenizerError::LengthMismatch { found: 3, .. })
    ));

    let mut w = toy_writer();
    w.set("tokenizer.ggml.bos_token_id", Value::U32(9999));
    assert!(matches!(
        load(&w),
        Err(TokenizerError::IdOutOfRange { id: 9999, .. })
    ));

    let mut w = toy_writer();
    w.set("tokenizer.ggml.eos_token_id", Value::String("1".into()));
    let err = load(&w).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::Gguf(GgufError::WrongType { key, .. }) if key == "tokenizer.ggml.eos_token_id"),
        "{err}"
    );

    let mut w = toy_writer();
    w.set("tokenizer.chat_template", Value::String("{% if %}".into()));
    assert!(matches!(load(&w), Err(TokenizerError::Template { .. })));

    let tok = load(&toy_writer()).unwrap();
    assert!(matches!(
        tok.decode(&[A, 271]),
        Err(TokenizerError::UnknownId {
            id: 271,
            position: 1,
            ..
        })
    ));
}

/// The toy tokenizer with `tokenizer.chat_template` = `source`.
fn with_template(source: &str) -> GemmaTokenizer {
    let mut w = toy_writer();
    w.set("tokenizer.chat_template", Value::String(source.into()));
    load(&w).expect("toy tokenizer")
}

/// One user message.
fn user(text: &str) -> [ChatMessage; 1] {
    [ChatMessage::new("user", text)]
}

/// A template that loops 10^10 times stops at its work budget (it ran without limit) with an
/// error naming the budget and the line; so does one that loops inside a macro. The budget is
/// per render: 3000 × 3000 empty loop steps (3 instructions each: iterate, bind the variable,
/// jump back; about 0.54 of the budget) render twice in a row.
#[test]
fn runaway_template_stops_at_its_work_budget() {
    let tok = with_template(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    );
    let err = tok.render_chat(&user("hi"), true, false).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::TemplateBudget {
                fuel: CHAT_TEMPLATE_FUEL,
                line: Some(1)
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "tokenizer.chat_template exceeded its work budget of {CHAT_TEMPLATE_FUEL} template \
             instructions (line 1) (a runaway loop: the real Gemma-4 template uses about 50 to \
             100 per message)"
        )
    );
    let tok = with_template(
        "{% macro spin() %}\n{% for i in range(100000) %}{% for j in range(100000) %}\
         {% endfor %}{% endfor %}\n{% endmacro %}\n{{ spin() }}",
    );
    let err = tok.render_chat(&user("hi"), true, false).unwrap_err();
    assert!(
        matches!(err, TokenizerError::TemplateBudget { line: Some(2), .. }),
        "{err:?}"
    );

    assert_eq!(CHAT_TEMPLATE_FUEL, 50_000_000);
    let tok = with_template(
        "{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}{% endfor %}\
         {{ messages[0].content }}",
    );
    for _ in 0..2 {
        assert_eq!(tok.render_chat(&user("hi"), true, false).unwrap(), "hi");
    }
}

/// A template that writes without end stops at its output limit
/// ([`CHAT_TEMPLATE_MAX_OUTPUT`] + 4 × the messages' text) with an error naming the limit,
/// whether it writes one 100 MB string (3 steps, far under the work budget) or many
/// 1000-byte ones; a chat with a 20 MiB message (over the fixed part of the limit) renders
/// whole. Limit for the one 2-byte message "hi": 16 777 216 + 8 bytes.
#[test]
fn runaway_output_stops_at_its_limit() {
    assert_eq!(CHAT_TEMPLATE_MAX_OUTPUT, 16 << 20);
    let limit = CHAT_TEMPLATE_MAX_OUTPUT + 8;
    for source in [
        "{{ messages[0].content }}\n{% for i in range(1000) %}{{ 'x' * 100000000 }}{% endfor %}",
        "{{ messages[0].content }}\n{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
    ] {
        let err = with_template(source)
            .render_chat(&user("hi"), true, false)
            .unwrap_err();
        assert!(
            matches!(
                err,
                TokenizerError::TemplateOutputTooLarge { limit: l } if l == limit
            ),
            "{source}: {err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "tokenizer.chat_template wrote more than {limit} bytes (a runaway template: a \
                 real chat is its messages' text plus under 100 bytes per message)"
            )
        );
    }
    let big = "z".repeat(20 << 20);
    let out = with_template("<{{ messages[0].content }}>")
        .render_chat(&user(&big), true, false)
        .unwrap();
    assert_eq!(out.len(), big.len() + 2);
}

/// Template errors read on one line: `raise_exception`'s own message, or minijinja's error
/// kind and detail, each with the template line; no source dump, no Rust path.
#[test]
fn template_errors_are_one_readable_line() {
    let tok = with_template(
        "{{ bos_token }}\n{% if messages[0]['role'] == 'user' %}\
         {{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}",
    );
    let err = tok.render_chat(&user("hi"), true, false).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::TemplateRaised { line: Some(2), message }
            if message == "Conversation roles must alternate user/assistant"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "tokenizer.chat_template refused the chat (line 2): Conversation roles must alternate \
         user/assistant"
    );

    let tok = with_template("{{ bos_token }}\n\n{{ messages[0]['content'] | nosuchfilter }}");
    let err = tok.render_chat(&user("hi"), true, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tokenizer.chat_template (line 3): unknown filter: filter nosuchfilter is unknown"
    );
    assert!(
        matches!(err, TokenizerError::Template { line: Some(3), .. }),
        "{err:?}"
    );

    // Compile errors come out the same way, when the tokenizer is built.
    let mut w = toy_writer();
    w.set(
        "tokenizer.chat_template",
        Value::String("ok\n{% if %}".into()),
    );
    let err = load(&w).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, TokenizerError::Template { line: Some(2), message } if message.starts_with("syntax error: ")),
        "{err:?}"
    );
    for e in [
        &err,
        &tok.render_chat(&user("hi"), true, false).unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(!text.contains('\n') && !text.contains("::"), "{text}");
    }
    assert!(
        text.starts_with("tokenizer.chat_template (line 2): syntax error: "),
        "{text}"
    );
}

/// A template that renders none of the messages' text (an empty one, or one that prints fixed
/// text) is refused at render time: the user's words would silently vanish from the prompt.
/// The tokenizer itself still loads and encodes plain text. A chat whose only text is blank
/// has nothing to lose; a template that prints one of two messages passes (the rule is
/// "none", the template decides what it keeps), and so does one that prints a transformed
/// text (the output depends on it).
#[test]
fn template_that_drops_every_message_is_refused() {
    let tok = with_template("");
    assert_eq!(tok.encode("ab", false).unwrap(), vec![AB]);
    let err = tok.render_chat(&user("hi"), true, false).unwrap_err();
    assert!(matches!(err, TokenizerError::EmptyChatTemplate), "{err:?}");
    assert_eq!(
        err.to_string(),
        "tokenizer.chat_template is empty: it renders none of the messages"
    );
    assert!(matches!(
        with_template(" \n\t").encode_chat(&user("hi"), true, false),
        Err(TokenizerError::EmptyChatTemplate)
    ));

    let tok = with_template("{{ bos_token }}[fixed]");
    let err = tok.encode_chat(&user(" hi "), true, false).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::TemplateDropsContent { messages: 1, output } if output == "<bos>[fixed]"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "tokenizer.chat_template renders none of the messages' text: the output is the same \
         whatever the 1 message(s) with text say (output \"<bos>[fixed]\")"
    );
    assert_eq!(
        tok.render_chat(&user(" \n"), true, false).unwrap(),
        "<bos>[fixed]"
    );
    let tok = with_template("{{ bos_token }}{{ messages[-1]['content'] }}");
    let two = [ChatMessage::new("user", "a"), ChatMessage::new("user", "b")];
    assert_eq!(tok.render_chat(&two, true, false).unwrap(), "<bos>b");
    let tok = with_template("{{ bos_token }}{{ messages[0]['content'] | upper }}");
    assert_eq!(
        tok.render_chat(&user("hi"), true, false).unwrap(),
        "<bos>HI"
    );
    // A long output is shown cut to 80 characters.
    let tok = with_template("{{ 'x' * 100 }}");
    match tok.render_chat(&user("hi"), true, false) {
        Err(TokenizerError::TemplateDropsContent { output, .. }) => {
            assert_eq!(output, format!("{}…", "x".repeat(80)))
        }
        other => panic!("{other:?}"),
    }
}

/// `tokenizer.ggml.scores` is optional, but when present it has one f32 per token, like
/// `token_type` (100 scores for 271 tokens used to be accepted).
#[test]
fn scores_of_the_wrong_length_are_refused() {
    let mut w = toy_writer();
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![-1000.0; 271])),
    );
    load(&w).expect("one score per token");
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(Array::F32(vec![-1000.0; 100])),
    );
    let err = load(&w).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.scores",
                expected: 271,
                found: 100
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "tokenizer.ggml.scores has 100 entries but tokenizer.ggml.tokens has 271"
    );
    w.set(
        "tokenizer.ggml.scores",
        Value::Array(Array::I32(vec![0; 271])),
    );
    let err = load(&w).unwrap_err();
    assert!(
        matches!(&err, TokenizerError::Gguf(GgufError::WrongType { key, .. }) if key == "tokenizer.ggml.scores"),
        "{err:?}"
    );
}

/// An empty token string is refused naming its id (it came out as a merge's token "out of
/// vocabulary", naming neither); id 264 is `a`, which the merge `a b` uses.
#[test]
fn empty_token_string_is_refused_naming_its_id() {
    let (mut tokens, types) = toy_tokens();
    tokens[A as usize] = String::new();
    let mut w = toy_writer();
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let err = load(&w).unwrap_err();
    assert!(
        matches!(err, TokenizerError::EmptyPiece { id: 264 }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "tokenizer.ggml.tokens[264] is the empty string: every token needs text"
    );
}
