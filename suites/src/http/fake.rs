//! An in-process fake inference server for the HTTP engine's tests: a loopback listener whose
//! every request (method, path, JSON body) is answered by a closure with a status and a JSON
//! body, one request per connection (`Connection: close`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use serde_json::Value;

/// What the fake server answers: `(method, path, body)` → `(status, body)`.
pub(crate) type Handler = dyn Fn(&str, &str, &Value) -> (u16, Value) + Send + Sync;

/// Starts a fake server answering with `handler` on a free loopback port; its base URL
/// (`http://127.0.0.1:PORT`). The server lives until the test process ends.
pub(crate) fn serve(handler: Arc<Handler>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let url = format!("http://{}", l.local_addr().expect("local address"));
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            let handler = handler.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().expect("clone the stream"));
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or("").to_string();
                let path = parts.next().unwrap_or("").to_string();
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        if k.trim().eq_ignore_ascii_case("content-length") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0u8; len];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let (status, answer) = handler(&method, &path, &body);
                let text = answer.to_string();
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: \
                     {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
            });
        }
    });
    url
}

/// A llama-server `/completion` answer for a request `body`: `n_predict` tokens, each `token`
/// with top log-probs `top` (`(id, logprob)`), the prompt counted as sent.
pub(crate) fn completion(body: &Value, token: u32, top: &[(u32, f64)]) -> Value {
    let n = body["n_predict"].as_u64().unwrap_or(1) as usize;
    let prompt = body["prompt"].as_array().map_or(0, Vec::len);
    let lp = top.iter().find(|x| x.0 == token).map_or(-30.0, |x| x.1);
    let probs: Vec<Value> = (0..n)
        .map(|_| {
            serde_json::json!({
                "id": token,
                "logprob": lp,
                "top_logprobs": top
                    .iter()
                    .map(|&(id, logprob)| serde_json::json!({"id": id, "logprob": logprob}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "tokens": vec![token; n],
        "tokens_evaluated": prompt,
        "tokens_predicted": n,
        "completion_probabilities": probs,
        "timings": {},
    })
}
