//! Parsing of completion responses into token ids and per-token top-k log-probabilities
//! (pure functions over `serde_json::Value`, tested against recorded responses in
//! `suites/tests/data/`).
//!
//! Two wire formats:
//!
//! - llama.cpp server, native `POST /completion` (`tools/server/README.md` of the vendored
//!   llama.cpp): `tokens` (with `"return_tokens": true`), `completion_probabilities[i]` =
//!   `{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}` (with
//!   `n_probs > 0` and `post_sampling_probs` false), `tokens_evaluated` (prompt tokens),
//!   `timings.draft_n` / `timings.draft_n_accepted` (speculative decoding).
//! - OpenAI-compatible `POST /v1/completions`: `choices[0].logprobs` either in llama.cpp's form
//!   (`{content: [{id, logprob, top_logprobs: [{id, logprob}]}]}`) or in the OpenAI form
//!   (`{tokens, token_logprobs, top_logprobs: [{token: logprob}]}`) where ids come from
//!   `choices[0].token_ids` (vLLM `return_token_ids`) or from tokens spelled `token_id:N`
//!   (vLLM `return_tokens_as_token_ids`); `usage.prompt_tokens`; `timings.draft_n` /
//!   `timings.draft_n_accepted` where the server adds them (llama-server does).
//!
//! Log-probabilities are `logit − logsumexp(logits)`: per position they differ from the logits
//! by one constant, so differences (margins, top-2 gaps) are logit differences up to the
//! server's rounding of the softmax. A probability that underflowed to 0 (llama.cpp writes
//! `-3.4e38`, the most negative `f32`) is dropped from the top-k. A list no softmax gives is a
//! response error naming the entry: a log-probability above 0 (a probability above 1), an id
//! listed twice in one top-k (it read as a top-2 tie of gap 0).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A response body as a [`Value`], refusing an object with the same key twice
/// (`serde_json::from_str::<Value>` keeps the last one silently: a top-k object
/// `{"token_id:5": -0.1, "token_id:5": -0.2}` would lose an entry instead of failing as an id
/// listed twice). Errors: not JSON, or a duplicate key (serde_json's message with the line and
/// column just after the repeated key).
pub fn json_without_duplicate_keys(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|s| s.0)
}

/// A [`Value`] whose objects were checked for duplicate keys ([`json_without_duplicate_keys`]).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

/// Builds a [`Value`] like serde_json's own visitor, failing on a repeated object key.
struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict::deserialize(d).map(|s| s.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            let Strict(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// One completion: generated ids with the server's top-k `(id, logprob)` per generated token.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Generated token ids `[n]`.
    pub tokens: Vec<u32>,
    /// Per generated token, the top-k `(id, logprob)`, descending.
    pub top_k: Vec<Vec<(u32, f64)>>,
    /// Per generated token, its own log-probability when the server gives it
    /// (`completion_probabilities[i].logprob`, `logprobs.content[i].logprob`,
    /// `token_logprobs[i]`), `[n]`.
    pub token_logprobs: Vec<Option<f64>>,
    /// Prompt tokens as counted by the server (`tokens_evaluated` / `usage.prompt_tokens`).
    pub prompt_tokens: Option<usize>,
    /// Draft tokens proposed (`timings.draft_n`; absent = none).
    pub drafted: Option<usize>,
    /// Draft tokens accepted (`timings.draft_n_accepted`).
    pub accepted: Option<usize>,
    /// Per prompt position `t ≥ 1`, the top-k of the distribution that predicted prompt token
    /// `t` (OpenAI `echo` responses only; `[P − 1]`).
    pub prompt_top_k: Option<Vec<Vec<(u32, f64)>>>,
}

/// One generated (or echoed prompt) token as the server describes it.
#[derive(Debug, Clone, PartialEq)]
struct TokenProb {
    /// Its id.
    id: u32,
    /// Its own log-probability, if given.
    logprob: Option<f64>,
    /// The server's top-k `(id, logprob)`, descending.
    top: Vec<(u32, f64)>,
}

/// Per generated token, [`TokenProb`].
type TokenProbs = Vec<TokenProb>;

/// A log-probability no softmax gives (above 0, i.e. a probability above 1), or `None`.
fn impossible_logprob(what: &str, lp: f64) -> Option<String> {
    (lp > 0.0).then(|| {
        format!("{what} is {lp}, above 0: a log-probability is at most 0 (a probability at most 1)")
    })
}

/// The top-k `row` of `what` sorted descending (stable); an id listed twice is an error naming
/// it (a server's top-k lists each candidate once; a repeat read as a top-2 tie of gap 0).
fn finish_row(mut row: Vec<(u32, f64)>, what: &str) -> Result<Vec<(u32, f64)>, String> {
    let mut ids: Vec<u32> = row.iter().map(|x| x.0).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!(
            "{what} lists id {} twice (a top-k lists each candidate once)",
            w[0]
        ));
    }
    row.sort_by(|a, b| b.1.total_cmp(&a.1));
    Ok(row)
}

/// Below this a log-probability is llama.cpp's stand-in for `log(0)`.
const LOG_ZERO: f64 = -1e30;

fn as_id(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}

fn token_id_from_str(s: &str) -> Option<u32> {
    s.strip_prefix("token_id:")?.parse().ok()
}

fn usize_at(v: &Value, path: &[&str]) -> Option<usize> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_u64().map(|x| x as usize)
}

/// Top-k list of llama.cpp's `[{id, logprob}]`, sorted descending (stable: server order among
/// equal values), log(0) entries dropped.
fn llama_top(list: &Value, what: &str) -> Result<Vec<(u32, f64)>, String> {
    let arr = list
        .as_array()
        .ok_or_else(|| format!("{what}: top_logprobs is not an array"))?;
    let mut out = Vec::with_capacity(arr.len());
    for (j, e) in arr.iter().enumerate() {
        let id = e
            .get("id")
            .and_then(as_id)
            .ok_or_else(|| format!("{what}: top_logprobs[{j}] has no integer id"))?;
        let lp = match e.get("logprob") {
            Some(v) => v.as_f64(),
            None if e.get("prob").is_some() => {
                return Err(format!(
                    "{what}: got post-sampling probabilities (`prob`), need raw log-probabilities \
                     (`post_sampling_probs` must be false)"
                ))
            }
            None => None,
        }
        .ok_or_else(|| format!("{what}: top_logprobs[{j}] has no logprob"))?;
        if let Some(e) = impossible_logprob(&format!("{what}: top_logprobs[{j}].logprob"), lp) {
            return Err(e);
        }
        if lp > LOG_ZERO {
            out.push((id, lp));
        }
    }
    finish_row(out, &format!("{what}: top_logprobs"))
}

/// Parses llama.cpp's per-token probability list (`completion_probabilities` or OpenAI-mode
/// `logprobs.content`): `(id, top-k)` per generated token.
fn llama_probs(list: &Value, field: &str) -> Result<TokenProbs, String> {
    let arr = list
        .as_array()
        .ok_or_else(|| format!("{field} is not an array"))?;
    arr.iter()
        .enumerate()
        .map(|(i, e)| {
            let what = format!("{field}[{i}]");
            let id = e
                .get("id")
                .and_then(as_id)
                .ok_or_else(|| format!("{what} has no integer id"))?;
            let top = e.get("top_logprobs").ok_or_else(|| {
                if e.get("top_probs").is_some() {
                    format!("{what}: got post-sampling `top_probs`, need `top_logprobs`")
                } else {
                    format!("{what} has no top_logprobs")
                }
            })?;
            let logprob = e.get("logprob").and_then(Value::as_f64);
            if let Some(err) =
                logprob.and_then(|lp| impossible_logprob(&format!("{what}.logprob"), lp))
            {
                return Err(err);
            }
            Ok(TokenProb {
                id,
                logprob,
                top: llama_top(top, &what)?,
            })
        })
        .collect()
}

/// Parses a llama.cpp server `POST /completion` response (non-streaming).
///
/// Errors (message for the `error` verdict): no token ids (neither `tokens` nor ids in
/// `completion_probabilities` — the server needs `"return_tokens": true`), no log-probabilities
/// (`n_probs` ignored or `post_sampling_probs` set), or `tokens` and the probability list
/// disagreeing in length or ids.
pub fn parse_llama_completion(v: &Value) -> Result<Completion, String> {
    let tokens: Option<Vec<u32>> = match v.get("tokens") {
        Some(Value::Array(a)) if !a.is_empty() => Some(
            a.iter()
                .enumerate()
                .map(|(i, t)| as_id(t).ok_or_else(|| format!("tokens[{i}] is not a token id")))
                .collect::<Result<_, _>>()?,
        ),
        _ => None,
    };
    let probs = match v.get("completion_probabilities") {
        Some(p) => Some(llama_probs(p, "completion_probabilities")?),
        None => None,
    };
    let predicted = usize_at(v, &["tokens_predicted"]);
    let (tokens, probs) = match (tokens, probs) {
        (_, None) if predicted == Some(0) => (Vec::new(), Vec::new()),
        (_, None) => {
            return Err(
                "the server returned no log-probabilities (no `completion_probabilities`: it \
                 ignored `n_probs`)"
                    .into(),
            )
        }
        (None, Some(p)) if p.is_empty() && predicted.unwrap_or(0) > 0 => {
            return Err(
                "the server returned no token ids (empty `tokens`: it ignored `return_tokens`)"
                    .into(),
            )
        }
        (None, Some(p)) => (p.iter().map(|x| x.id).collect(), p),
        (Some(t), Some(p)) => {
            if t.len() != p.len() {
                return Err(format!(
                    "`tokens` has {} ids but `completion_probabilities` {} entries",
                    t.len(),
                    p.len()
                ));
            }
            if let Some(i) = (0..t.len()).find(|&i| t[i] != p[i].id) {
                return Err(format!(
                    "tokens[{i}] = {} but completion_probabilities[{i}].id = {}",
                    t[i], p[i].id
                ));
            }
            (t, p)
        }
    };
    let (top_k, token_logprobs) = probs.into_iter().map(|x| (x.top, x.logprob)).unzip();
    Ok(Completion {
        tokens,
        top_k,
        token_logprobs,
        prompt_tokens: usize_at(v, &["tokens_evaluated"]),
        drafted: usize_at(v, &["timings", "draft_n"]),
        accepted: usize_at(v, &["timings", "draft_n_accepted"]),
        prompt_top_k: None,
    })
}

/// Parses an OpenAI-compatible `POST /v1/completions` response (non-streaming, `n = 1`).
/// With `echo_len = Some(P)` the request had `echo: true`: the first `P` logprob entries belong
/// to the prompt and become [`Completion::prompt_top_k`] (entry 0, which has no distribution,
/// is skipped).
///
/// Errors: no `choices[0]`, no `logprobs` (the server ignores `logprobs`), token strings without
/// ids (name the vLLM flags that give ids), top-logprob lists missing.
pub fn parse_openai_completion(v: &Value, echo_len: Option<usize>) -> Result<Completion, String> {
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("no choices[0] in the response")?;
    let lp = choice.get("logprobs").filter(|l| !l.is_null()).ok_or(
        "the server returned no log-probabilities (choices[0].logprobs is missing or null: it \
         ignores `logprobs`)",
    )?;
    let mut entries: TokenProbs = if let Some(content) = lp.get("content") {
        llama_probs(content, "choices[0].logprobs.content")?
    } else {
        openai_classic(choice, lp)?
    };
    let prompt_top_k = match echo_len {
        None => None,
        Some(p) => {
            if entries.len() < p {
                return Err(format!(
                    "echo: {} logprob entries for a {p}-token prompt",
                    entries.len()
                ));
            }
            let prompt: Vec<_> = entries.drain(..p).collect();
            Some(prompt.into_iter().skip(1).map(|x| x.top).collect())
        }
    };
    let tokens = entries.iter().map(|x| x.id).collect();
    let (top_k, token_logprobs) = entries.into_iter().map(|x| (x.top, x.logprob)).unzip();
    Ok(Completion {
        tokens,
        top_k,
        token_logprobs,
        prompt_tokens: usize_at(v, &["usage", "prompt_tokens"]),
        // llama-server's OpenAI-compatible endpoint reports its drafts as /completion does
        drafted: usize_at(v, &["timings", "draft_n"]),
        accepted: usize_at(v, &["timings", "draft_n_accepted"]),
        prompt_top_k,
    })
}

/// The OpenAI `{tokens, token_logprobs, top_logprobs}` form.
fn openai_classic(choice: &Value, lp: &Value) -> Result<TokenProbs, String> {
    let toks = lp
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or("choices[0].logprobs has neither `content` (llama.cpp) nor `tokens` (OpenAI)")?;
    let explicit: Option<Vec<u32>> = choice
        .get("prompt_token_ids")
        .and_then(Value::as_array)
        .zip(choice.get("token_ids").and_then(Value::as_array))
        .map(|(p, t)| p.iter().chain(t).filter_map(as_id).collect())
        .filter(|ids: &Vec<u32>| ids.len() == toks.len())
        .or_else(|| {
            choice
                .get("token_ids")
                .and_then(Value::as_array)
                .map(|t| t.iter().filter_map(as_id).collect())
                .filter(|ids: &Vec<u32>| ids.len() == toks.len())
        });
    let ids: Vec<u32> = match explicit {
        Some(ids) => ids,
        None => toks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.as_str().and_then(token_id_from_str).ok_or_else(|| {
                    format!(
                        "choices[0].logprobs.tokens[{i}] = {t} is a token string, not an id: the \
                         server must return ids (vLLM: `return_tokens_as_token_ids` or \
                         `return_token_ids`; llama.cpp: `logprobs.content[].id`)"
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let tops = lp
        .get("top_logprobs")
        .and_then(Value::as_array)
        .ok_or("choices[0].logprobs.top_logprobs is missing")?;
    if tops.len() != ids.len() {
        return Err(format!(
            "{} tokens but {} top_logprobs entries",
            ids.len(),
            tops.len()
        ));
    }
    let own = lp.get("token_logprobs").and_then(Value::as_array);
    let mut out = Vec::with_capacity(ids.len());
    for (i, (id, top)) in ids.into_iter().zip(tops).enumerate() {
        let logprob = own.and_then(|o| o.get(i)).and_then(Value::as_f64);
        if let Some(e) =
            logprob.and_then(|x| impossible_logprob(&format!("token_logprobs[{i}]"), x))
        {
            return Err(e);
        }
        let mut row = Vec::new();
        if let Some(obj) = top.as_object() {
            for (k, lpv) in obj {
                let tid = token_id_from_str(k).ok_or_else(|| {
                    format!(
                        "top_logprobs[{i}] key {k:?} is a token string, not `token_id:N` (vLLM: \
                         `return_tokens_as_token_ids`)"
                    )
                })?;
                let x = lpv
                    .as_f64()
                    .ok_or_else(|| format!("top_logprobs[{i}][{k:?}] is not a number"))?;
                if let Some(e) = impossible_logprob(&format!("top_logprobs[{i}][{k:?}]"), x) {
                    return Err(e);
                }
                if x > LOG_ZERO {
                    row.push((tid, x));
                }
            }
        } else if !top.is_null() {
            return Err(format!("top_logprobs[{i}] is not an object"));
        }
        // descending, ties by id (a JSON object has no order of its own)
        row.sort_by_key(|x| x.0);
        out.push(TokenProb {
            id,
            logprob,
            top: finish_row(row, &format!("top_logprobs[{i}]"))?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A repeated key fails with serde_json's position just after it (column 39: the closing
    /// quote of the second "token_id:5", counted by hand); nested objects and arrays are checked too, and a body without repeats reads as
    /// `serde_json::from_str` reads it.
    #[test]
    fn duplicate_keys_are_refused() {
        let e = json_without_duplicate_keys(r#"{"a": {"token_id:5": -0.1, "token_id:5": -0.2}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(r#"the key "token_id:5" appears twice in one object"#),
            "{e}"
        );
        assert!(e.ends_with("at line 1 column 39"), "{e}");
        let e = json_without_duplicate_keys(r#"[1, [{"x": 1, "y": 2, "x": 3}]]"#).unwrap_err();
        assert!(e.to_string().contains(r#""x" appears twice"#), "{e}");
        let text = r#"{"choices": [{"text": "a", "logprobs": null, "n": -3, "f": 1.5e300,
            "u": 18446744073709551615, "b": true}], "usage": {"prompt_tokens": 4}}"#;
        assert_eq!(
            json_without_duplicate_keys(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(json_without_duplicate_keys("{\"a\": 1").is_err());
    }

    #[test]
    fn llama_native_minimal() {
        let v = json!({
            "tokens": [5, 7], "tokens_evaluated": 3, "tokens_predicted": 2,
            "timings": {"draft_n": 4, "draft_n_accepted": 3},
            "completion_probabilities": [
                {"id": 5, "logprob": -0.1, "top_logprobs": [{"id": 5, "logprob": -0.1}, {"id": 9, "logprob": -2.5}]},
                {"id": 7, "logprob": -0.2, "top_logprobs": [{"id": 3, "logprob": -3.0e38}, {"id": 7, "logprob": -0.2}]}
            ]
        });
        let c = parse_llama_completion(&v).unwrap();
        assert_eq!(c.tokens, vec![5, 7]);
        assert_eq!(c.top_k[0], vec![(5, -0.1), (9, -2.5)]);
        assert_eq!(c.top_k[1], vec![(7, -0.2)]); // log(0) dropped
        assert_eq!(
            (c.prompt_tokens, c.drafted, c.accepted),
            (Some(3), Some(4), Some(3))
        );
    }

    #[test]
    fn llama_native_errors_are_named() {
        let no_probs = json!({"tokens": [1], "tokens_predicted": 1});
        assert!(parse_llama_completion(&no_probs)
            .unwrap_err()
            .contains("no log-probabilities"));
        let mismatch =
            json!({"tokens": [1], "completion_probabilities": [{"id": 2, "top_logprobs": []}]});
        assert!(parse_llama_completion(&mismatch)
            .unwrap_err()
            .contains("tokens[0] = 1"));
        let post = json!({"tokens": [1], "completion_probabilities": [{"id": 1, "prob": 1.0, "top_probs": []}]});
        assert!(parse_llama_completion(&post)
            .unwrap_err()
            .contains("top_probs"));
    }

    /// Lists no softmax gives are refused naming the entry: a log-probability above 0 in a
    /// top-k or as the token's own, an id twice in one top-k (llama.cpp's list, or two OpenAI
    /// keys naming one id); 0 itself (a probability of 1) is taken.
    #[test]
    fn impossible_log_probabilities_are_refused() {
        let one = |own: f64, top: serde_json::Value| {
            json!({"tokens": [5], "tokens_predicted": 1, "completion_probabilities": [
                {"id": 5, "logprob": own, "top_logprobs": top}
            ]})
        };
        let e = parse_llama_completion(&one(
            -0.1,
            json!([{"id": 5, "logprob": -0.1}, {"id": 9, "logprob": 0.25}]),
        ))
        .unwrap_err();
        assert_eq!(
            e,
            "completion_probabilities[0]: top_logprobs[1].logprob is 0.25, above 0: a \
             log-probability is at most 0 (a probability at most 1)"
        );
        let e = parse_llama_completion(&one(0.5, json!([{"id": 5, "logprob": -0.1}]))).unwrap_err();
        assert_eq!(
            e,
            "completion_probabilities[0].logprob is 0.5, above 0: a log-probability is at most 0 \
             (a probability at most 1)"
        );
        let e = parse_llama_completion(&one(
            -0.1,
            json!([{"id": 5, "logprob": -0.1}, {"id": 9, "logprob": -1.0}, {"id": 5, "logprob": -2.0}]),
        ))
        .unwrap_err();
        assert_eq!(
            e,
            "completion_probabilities[0]: top_logprobs lists id 5 twice (a top-k lists each \
             candidate once)"
        );
        let c = parse_llama_completion(&one(0.0, json!([{"id": 5, "logprob": 0.0}]))).unwrap();
        assert_eq!(
            (c.top_k[0].clone(), c.token_logprobs),
            (vec![(5, 0.0)], vec![Some(0.0)])
        );
        let classic = json!({"choices": [{"logprobs": {
            "tokens": ["token_id:5"], "token_logprobs": [-0.1],
            "top_logprobs": [{"token_id:5": -0.1, "token_id:05": -0.3}]
        }}]});
        assert_eq!(
            parse_openai_completion(&classic, None).unwrap_err(),
            "top_logprobs[0] lists id 5 twice (a top-k lists each candidate once)"
        );
    }

    #[test]
    fn openai_classic_with_token_id_strings_and_echo() {
        let v = json!({
            "usage": {"prompt_tokens": 2},
            "choices": [{"logprobs": {
                "tokens": ["token_id:2", "token_id:10", "token_id:11"],
                "token_logprobs": [null, -1.0, -0.5],
                "top_logprobs": [null, {"token_id:10": -1.0, "token_id:12": -0.7}, {"token_id:11": -0.5}]
            }}]
        });
        let c = parse_openai_completion(&v, Some(2)).unwrap();
        assert_eq!(c.tokens, vec![11]);
        assert_eq!(c.prompt_top_k.unwrap(), vec![vec![(12, -0.7), (10, -1.0)]]);
        assert_eq!(c.prompt_tokens, Some(2));
        // no timings (a server that does not say): no drafts known
        assert_eq!((c.drafted, c.accepted), (None, None));
        // llama-server's OpenAI-compatible endpoint adds its timings, drafts included
        let mut t = v.clone();
        t["timings"] = json!({"draft_n": 6, "draft_n_accepted": 4});
        let c = parse_openai_completion(&t, Some(2)).unwrap();
        assert_eq!((c.drafted, c.accepted), (Some(6), Some(4)));
        let strings = json!({"choices": [{"logprobs": {"tokens": ["Hello"], "top_logprobs": [{"Hello": -0.1}]}}]});
        let e = parse_openai_completion(&strings, None).unwrap_err();
        assert!(e.contains("return_tokens_as_token_ids"), "{e}");
        let none = json!({"choices": [{"text": "x", "logprobs": null}]});
        assert!(parse_openai_completion(&none, None)
            .unwrap_err()
            .contains("no log-probabilities"));
    }
}
