//! The blocking HTTP transport of the external engines (`design/conformance.md` §9, "a wrapped
//! external engine"): one `ureq` agent with a per-request timeout, retries with exponential
//! backoff on connection errors only (never on HTTP errors or timeouts, which would repeat a
//! generation), and the loopback-only rule for base URLs.

use std::net::IpAddr;
use std::sync::mpsc::{self, RecvTimeoutError};
#[cfg(test)]
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::HttpError;

/// Largest response body read (bytes). A 1024-token completion with 16 top log-probs per token
/// is about 2 MB of JSON; prompt log-probs of a long prefill a few times that.
pub const MAX_BODY: u64 = 256 << 20;

/// How long a request waits before the client says so ([`Client::call`]): a server that accepts
/// connections but never answers is otherwise silent until the timeout (600 s by default). The
/// next notices come at twice the wait each time (30, 60, 120, … s).
pub const NOTICE_AFTER: Duration = Duration::from_secs(30);

/// Where a client's waiting notices go.
#[derive(Debug, Clone)]
enum Notices {
    /// One line each on stderr.
    Stderr,
    /// Kept (tests).
    #[cfg(test)]
    Kept(Arc<Mutex<Vec<String>>>),
}

/// A blocking JSON-over-HTTP client (cheap to clone; clones share the connection pool).
#[derive(Debug, Clone)]
pub struct Client {
    agent: ureq::Agent,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
    notice_after: Duration,
    notices: Notices,
}

impl Client {
    /// A client whose requests time out after `timeout` (whole request, connect to last byte)
    /// and are retried `retries` times on connection errors, waiting `backoff`, `2·backoff`, …
    /// A request still waiting after [`NOTICE_AFTER`] prints a line on stderr saying so.
    pub fn new(timeout: Duration, retries: u32, backoff: Duration) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            agent,
            timeout,
            retries,
            backoff,
            notice_after: NOTICE_AFTER,
            notices: Notices::Stderr,
        }
    }

    /// This client saying a request is still waiting after `after` (then twice that, …)
    /// instead of after [`NOTICE_AFTER`]: a request with a short limit (the first requests of
    /// an HTTP engine, 30 s at most) says so before it gives up, not never.
    pub fn with_notice_after(mut self, after: Duration) -> Client {
        self.notice_after = after;
        self
    }

    /// This client with its waiting notices after `after` kept in `sink` instead of printed.
    #[cfg(test)]
    fn keeping_notices(self, after: Duration, sink: Arc<Mutex<Vec<String>>>) -> Client {
        self.with_notice_after(after).notices_kept(sink)
    }

    /// How long a request waits before it says so.
    #[cfg(test)]
    pub(crate) fn notice_after(&self) -> Duration {
        self.notice_after
    }

    /// This client with its waiting notices kept in `sink` instead of printed.
    #[cfg(test)]
    pub(crate) fn notices_kept(mut self, sink: Arc<Mutex<Vec<String>>>) -> Client {
        self.notices = Notices::Kept(sink);
        self
    }

    /// Runs `f` (one request to `url`), saying on stderr when it has been waiting
    /// `notice_after`, then twice that, and so on, until it returns — never at or after the
    /// timeout, when the request gives up instead (a request whose limit is the notice time
    /// said "still waiting" the moment it gave up).
    fn waiting<T>(&self, url: &str, f: impl FnOnce() -> T) -> T {
        let (done, wait) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let t0 = Instant::now();
                let mut next = self.notice_after;
                while next < self.timeout
                    && matches!(
                        wait.recv_timeout(next.saturating_sub(t0.elapsed())),
                        Err(RecvTimeoutError::Timeout)
                    )
                {
                    let line = format!(
                        "{url}: no response after {} s, still waiting (gives up after {} s: \
                         engine option timeout=SECONDS)",
                        seconds(next),
                        seconds(self.timeout)
                    );
                    match &self.notices {
                        Notices::Stderr => eprintln!("{line}"),
                        #[cfg(test)]
                        Notices::Kept(v) => v.lock().unwrap_or_else(|p| p.into_inner()).push(line),
                    }
                    next = next.saturating_mul(2);
                }
            });
            let out = f();
            drop(done);
            out
        })
    }

    /// `GET url` → JSON. `Ok(None)` for HTTP 404 (endpoint not offered by this server).
    ///
    /// Errors: [`HttpError::Connect`], [`HttpError::Timeout`], [`HttpError::Status`] (other
    /// non-2xx), [`HttpError::Response`] (body is not JSON).
    pub fn get_json(&self, url: &str) -> Result<Option<Value>, HttpError> {
        match self.call(url, None) {
            Ok(v) => Ok(Some(v)),
            Err(HttpError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST url` with a JSON body → JSON. Errors as [`Client::get_json`] (404 included).
    pub fn post_json(&self, url: &str, body: &Value) -> Result<Value, HttpError> {
        self.call(url, Some(body))
    }

    fn call(&self, url: &str, body: Option<&Value>) -> Result<Value, HttpError> {
        self.waiting(url, || self.call_now(url, body))
    }

    /// [`Client::call`] without the waiting notices.
    fn call_now(&self, url: &str, body: Option<&Value>) -> Result<Value, HttpError> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let result = match body {
                None => self.agent.get(url).call(),
                Some(b) => self
                    .agent
                    .post(url)
                    .header("content-type", "application/json")
                    .send(b.to_string()),
            };
            let mut resp = match result {
                Ok(r) => r,
                Err(e) if is_connection_error(&e) && attempt <= self.retries => {
                    std::thread::sleep(self.backoff * 2u32.saturating_pow(attempt - 1));
                    continue;
                }
                Err(ureq::Error::Timeout(_)) => {
                    return Err(HttpError::Timeout {
                        url: url.to_string(),
                        secs: self.timeout.as_secs_f64(),
                    })
                }
                Err(e) => {
                    return Err(HttpError::Connect {
                        url: url.to_string(),
                        attempts: attempt,
                        message: e.to_string(),
                    })
                }
            };
            let status = resp.status().as_u16();
            let text = resp
                .body_mut()
                .with_config()
                .limit(MAX_BODY)
                .read_to_string()
                .map_err(|e| match e {
                    ureq::Error::Timeout(_) => HttpError::Timeout {
                        url: url.to_string(),
                        secs: self.timeout.as_secs_f64(),
                    },
                    e => HttpError::Response {
                        url: url.to_string(),
                        message: format!("reading the body: {e}"),
                    },
                })?;
            if !(200..300).contains(&status) {
                let mut body = text;
                body.truncate(2000);
                return Err(HttpError::Status {
                    url: url.to_string(),
                    status,
                    body,
                });
            }
            return super::parse::json_without_duplicate_keys(&text).map_err(|e| {
                HttpError::Response {
                    url: url.to_string(),
                    message: format!(
                        "{} ({e}): {}",
                        if e.is_data() {
                            "JSON with a repeated object key"
                        } else {
                            "not JSON"
                        },
                        text.chars().take(200).collect::<String>()
                    ),
                }
            });
        }
    }
}

/// `d` in seconds for a message: whole seconds as an integer (`30`), else one decimal (`0.5`).
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// Connection-level failures worth a retry: refused/reset/aborted connections and failed
/// connects. A timeout or an HTTP status is never retried.
fn is_connection_error(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionRefused
                | K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::NotConnected
                | K::UnexpectedEof
        ),
        _ => false,
    }
}

/// The host part of an `http://host[:port][/path]` URL (IPv6 without brackets).
///
/// Errors: [`HttpError::Spec`] for another scheme (no TLS in this build) or an empty host.
pub fn url_host(url: &str) -> Result<String, HttpError> {
    let bad = |message: &str| HttpError::Spec {
        spec: url.to_string(),
        message: message.to_string(),
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("the URL must start with http:// (this client has no TLS)"))?;
    let authority = rest.split('/').next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or("");
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    if host.is_empty() {
        return Err(bad("no host in the URL"));
    }
    Ok(host.to_string())
}

/// Whether `url` names this machine: `localhost` or a loopback IP (127.0.0.0/8, ::1).
pub fn is_loopback(url: &str) -> Result<bool, HttpError> {
    let host = url_host(url)?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(true);
    }
    Ok(host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A loopback server that accepts connections and never answers; its URL.
    pub(crate) fn silent_server() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in l.incoming() {
                held.push(c);
            }
        });
        url
    }

    /// A request to a server that never answers says it is waiting (it was silent until the
    /// timeout, 10 minutes by default), at the notice time and twice it, and then times out.
    #[test]
    fn a_long_wait_is_reported() {
        let url = format!("{}/props", silent_server());
        let sink = Arc::new(Mutex::new(Vec::new()));
        let c = Client::new(Duration::from_millis(1700), 0, Duration::from_millis(10))
            .keeping_notices(Duration::from_millis(500), sink.clone());
        let t0 = Instant::now();
        let e = c.get_json(&url).unwrap_err();
        assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
        let lines = sink.lock().unwrap().clone();
        assert_eq!(
            lines,
            [
                format!(
                    "{url}: no response after 0.5 s, still waiting (gives up after 1.7 s: \
                     engine option timeout=SECONDS)"
                ),
                format!(
                    "{url}: no response after 1 s, still waiting (gives up after 1.7 s: engine \
                     option timeout=SECONDS)"
                ),
            ]
        );
    }

    /// A request whose timeout is the notice time (the first request: both 30 s) gives up
    /// without saying it is still waiting; one whose timeout is past the notice says so once.
    #[test]
    fn no_waiting_notice_when_the_request_gives_up_then() {
        let url = format!("{}/props", silent_server());
        for (timeout_ms, lines) in [(400, 0), (700, 1)] {
            let sink = Arc::new(Mutex::new(Vec::new()));
            let c = Client::new(
                Duration::from_millis(timeout_ms),
                0,
                Duration::from_millis(10),
            )
            .keeping_notices(Duration::from_millis(400), sink.clone());
            let e = c.get_json(&url).unwrap_err();
            assert!(matches!(e, HttpError::Timeout { .. }), "{e}");
            assert_eq!(sink.lock().unwrap().len(), lines, "timeout {timeout_ms} ms");
        }
    }

    #[test]
    fn loopback_hosts() {
        for (url, lo) in [
            ("http://127.0.0.1:8080", true),
            ("http://127.1.2.3:1/x", true),
            ("http://localhost:8080/v1", true),
            ("http://[::1]:8080/v1", true),
            ("http://10.0.0.5:8080", false),
            ("http://example.com/v1", false),
            ("http://user@192.168.1.2:80", false),
        ] {
            assert_eq!(is_loopback(url).unwrap(), lo, "{url}");
        }
        assert!(is_loopback("https://127.0.0.1:8080").is_err());
        assert!(is_loopback("http://:8080").is_err());
    }
}
