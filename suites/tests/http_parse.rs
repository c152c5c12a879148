//! `suites::http::parse` against responses recorded from the real llama.cpp server built by
//! `cargo xtask llama-server` (llama-cpp-python 0.3.36's vendored llama.cpp, build b1-0c1e570),
//! serving `dense-target.F32.gguf`, prompt `[2, 818, 5279, 529]` (BOS "Once upon a"):
//!
//! - `llama_server_completion.json`: native `/completion`, greedy, `n_probs` 4;
//! - `llama_server_completion_mtp.json`: the same on a server with the dense MTP assistant
//!   (`--spec-type draft-mtp --spec-draft-n-max 4`), 8 tokens, `n_probs` 2;
//! - `llama_server_v1_completions.json`: OpenAI-compatible `/v1/completions`, `logprobs` 4;
//! - `llama_server_v1_echo_ignored.json`: `/v1/completions` with `echo: true`, which this server
//!   ignores (no prompt log-probs).
//!
//! Expected values were read from the recorded JSON by hand (`python3 -m json.tool`), not from
//! the parser.

use std::path::Path;

use suites::http::parse::{parse_llama_completion, parse_openai_completion};

fn load(name: &str) -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

#[test]
fn native_completion() {
    let c = parse_llama_completion(&load("llama_server_completion.json")).unwrap();
    assert_eq!(c.tokens, vec![436, 6565, 529]);
    assert_eq!(c.prompt_tokens, Some(4));
    assert_eq!(c.drafted, None);
    assert_eq!(c.top_k.len(), 3);
    assert!(c.top_k.iter().all(|r| r.len() == 4));
    assert_eq!(c.top_k[0][0], (436, -1.95670485496521));
    assert_eq!(c.top_k[0][1], (4182, -2.7252233028411865));
    // greedy: the emitted token is the top of its own row
    for (t, row) in c.tokens.iter().zip(&c.top_k) {
        assert_eq!(row[0].0, *t);
    }
}

#[test]
fn native_completion_with_mtp_counters() {
    let c = parse_llama_completion(&load("llama_server_completion_mtp.json")).unwrap();
    assert_eq!(c.tokens, vec![436, 6565, 529, 436, 529, 6565, 529, 436]);
    assert_eq!((c.drafted, c.accepted), (Some(17), Some(2)));
    // this llama-server gives log-probs only for the first (prefill) token: tokens emitted by
    // speculative verify batches come with an empty `top_logprobs`
    assert_eq!(
        c.top_k[0],
        vec![(436, -1.95670485496521), (4182, -2.7252233028411865)]
    );
    assert!(c.top_k[1..].iter().all(Vec::is_empty));
}

#[test]
fn openai_completion_from_llama_server_matches_native() {
    let o = parse_openai_completion(&load("llama_server_v1_completions.json"), None).unwrap();
    let n = parse_llama_completion(&load("llama_server_completion.json")).unwrap();
    assert_eq!(o.tokens, n.tokens);
    assert_eq!(o.top_k, n.top_k);
    assert_eq!(o.prompt_tokens, Some(4));
}

#[test]
fn ignored_echo_is_detected() {
    let v = load("llama_server_v1_echo_ignored.json");
    let e = parse_openai_completion(&v, Some(4)).unwrap_err();
    assert!(e.contains("echo"), "{e}");
}

/// Every recorded response of the real server passes the greedy check (each emitted token tops
/// its row; the speculative server's verify tokens carry no row), and the tokens' own
/// log-probabilities are the recorded `logprob` fields (read from the JSON by hand: the
/// speculative server writes 0 for verify tokens, which is not above 0 and so is taken).
#[test]
fn recorded_responses_are_greedy() {
    use suites::http::greedy_problem;
    let n = parse_llama_completion(&load("llama_server_completion.json")).unwrap();
    assert_eq!(
        n.token_logprobs,
        [
            Some(-1.95670485496521),
            Some(-1.1963714361190796),
            Some(-0.01572050340473652)
        ]
    );
    let mtp = parse_llama_completion(&load("llama_server_completion_mtp.json")).unwrap();
    assert_eq!(mtp.token_logprobs[0], Some(-1.95670485496521));
    assert!(mtp.token_logprobs[1..].iter().all(|x| *x == Some(0.0)));
    let o = parse_openai_completion(&load("llama_server_v1_completions.json"), None).unwrap();
    assert_eq!(o.token_logprobs, n.token_logprobs);
    for c in [&n, &mtp, &o] {
        assert_eq!(greedy_problem(c, &[]), None);
    }
}
