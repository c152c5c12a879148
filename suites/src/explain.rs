//! `cargo xtask explain` (`design/conformance.md` §5): for one prompt and two modes of one
//! engine, find the first fork and run the four experiments of `context.md` — batch-width probe,
//! truncated-prefix continuation, `spec:1` vs `spec:K`, top-2 gap at the fork (engine and
//! oracle) — then print one verdict line. Without a fork it says so and reports the top-2 gaps at
//! the position of the smallest oracle margin.

use std::fmt::Write as _;

use crate::budgets::Budgets;
use crate::conformance::{
    check_drafter, check_engine, file_name, make_engine, open_model, Fatal, ModelSpec, OpenedModel,
};
use crate::engine::{Engine, Mode, Request, Step, Trajectory};
use crate::golden;
use crate::oracle::{Codec, ScoreCache};
use crate::reference_engine::{GemmaCodec, ReferenceOracle};
use crate::rule::OracleRow;
use crate::runner::{suite_requests, ModelLimits};
use crate::suite::Suite;

/// Options of one `explain` run.
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// Target (and drafter).
    pub model: ModelSpec,
    /// Suite file holding the prompt.
    pub suite: std::path::PathBuf,
    /// Prompt id.
    pub prompt: String,
    /// The two modes compared (`plain`, `spec:4` by default).
    pub modes: (Mode, Mode),
    /// Engine name.
    pub engine: String,
    /// `goldens/` root (for τ from `budgets.toml`).
    pub goldens_root: std::path::PathBuf,
    /// Scoring cache folder.
    pub cache_dir: Option<std::path::PathBuf>,
    /// Tokens generated after the truncated prefix (experiment 2), `1..=` the prompt's
    /// `max_tokens` ([`continuation_tokens`]); `None`: [`DEFAULT_CONTINUATION`], at most that.
    pub continuation: Option<usize>,
    /// How the model is loaded (`--allow-nonfinite`: `allow_nonfinite`).
    pub load: reference::model::LoadOptions,
}

/// Tokens generated after the truncated prefix when `--continuation` is not given (at most the
/// prompt's `max_tokens`).
pub const DEFAULT_CONTINUATION: usize = 8;

/// The tokens experiment 2 generates after the truncated prefix: `asked` (`--continuation`),
/// or [`DEFAULT_CONTINUATION`] capped at the prompt's `max_tokens`. Errors: `0` (it generated
/// one token anyway and printed `then ""`) and more than the prompt's `max_tokens` (it was cut
/// there silently: `--continuation 1000000000` ran as 8), naming the flag, the prompt and the
/// suite file.
pub fn continuation_tokens(
    asked: Option<usize>,
    prompt: &crate::suite::Prompt,
    suite: &std::path::Path,
) -> Result<usize, Fatal> {
    let max = prompt.max_tokens;
    match asked {
        None => Ok(DEFAULT_CONTINUATION.min(max).max(1)),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(Fatal(format!(
            "--continuation {n}: give 1..={max} (tokens generated after the fork, within max_tokens \
             {max} of prompt {:?} in {})",
            prompt.id,
            suite.display()
        ))),
    }
}

fn f(e: impl std::fmt::Display) -> Fatal {
    Fatal(e.to_string())
}

/// First index where two token lists differ (`None` if identical).
fn first_diff(a: &[u32], b: &[u32]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

fn gap(step: Option<&Step>) -> Option<f64> {
    let tk = step?.top_k.as_ref()?;
    Some(tk.first()?.1 - tk.get(1)?.1)
}

/// Logit of `id` in a top-k row, if listed.
fn logit_in(tk: &[(u32, f64)], id: u32) -> Option<f64> {
    tk.iter().find(|x| x.0 == id).map(|x| x.1)
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |x| format!("{x:.6}"))
}

struct Ctx<'a> {
    engine: &'a mut dyn Engine,
    oracle: &'a mut ReferenceOracle,
    codec: &'a GemmaCodec,
    cache: ScoreCache,
    req: Request,
    top_k: usize,
}

impl Ctx<'_> {
    /// The engine's trajectories; a failed request (the call's error or one of
    /// [`Engine::request_errors`], e.g. NaN logits) stops explain naming the mode and request.
    fn gen(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, Fatal> {
        let out = self
            .engine
            .generate(reqs, mode)
            .map_err(|e| Fatal(format!("{mode}: {e}")))?;
        match self.engine.request_errors().into_iter().next() {
            Some((id, message)) => {
                let e = crate::engine::EngineError::Request { id, message };
                Err(Fatal(format!("{mode}: {e}")))
            }
            None => Ok(out),
        }
    }

    fn one(&mut self, mode: &Mode) -> Result<Trajectory, Fatal> {
        let r = self.req.clone();
        self.gen(&[r], mode)?
            .pop()
            .ok_or_else(|| Fatal(format!("{mode}: no trajectory")))
    }

    fn rows(&mut self, tokens: &[u32]) -> Result<Vec<OracleRow>, Fatal> {
        self.cache
            .score_trajectory(self.oracle, &self.req.prompt, tokens, self.top_k)
            .map_err(f)
    }

    fn tok(&self, id: Option<u32>) -> String {
        id.map_or("(end)".into(), |id| {
            format!("{id} {:?}", self.codec.decode(&[id]))
        })
    }
}

/// Whether the `--engine` value names an HTTP engine (`llama-server=…`, `openai=…`).
fn is_http(engine: &str) -> bool {
    #[cfg(feature = "http")]
    return crate::http::is_http_spec(engine);
    #[cfg(not(feature = "http"))]
    return {
        let _ = engine;
        false
    };
}

/// What explain adds when the engine does not declare `md` (the engine declares `declared`):
/// a reference or CUDA engine runs `spec:K` with a drafter (`--draft`), said only when it
/// declares no `spec:K` (with a drafter, `spec:99` is just not among the declared modes, which
/// the message lists); an HTTP engine runs
/// `spec:K` only with `,spec=K` in `--engine` (its server drafting), and then nothing else, so
/// explain cannot compare it with a non-speculative mode of the same engine: each server is
/// judged in its own labelled run and the runs compared (`cargo xtask compare`). Empty for a
/// mode no option adds (a batch width beyond an HTTP engine's concurrency).
fn undeclared_hint(http: bool, md: Mode, declared: &[Mode]) -> &'static str {
    let spec_declared = declared.iter().any(|d| matches!(d, Mode::Spec { .. }));
    match (http, matches!(md, Mode::Spec { .. }), spec_declared) {
        (false, true, false) => "; spec:K needs a drafter: --draft",
        (true, true, false) => {
            "; an HTTP engine runs spec:K when its server drafts and --engine ends in ,spec=K, \
             and then only spec:K: to compare with plain, judge each server in its own \
             `conformance --label` run and use `cargo xtask compare`"
        }
        (true, false, true) => {
            "; with ,spec=K in --engine an HTTP engine runs only spec:K: to compare with plain, \
             judge each server in its own `conformance --label` run and use `cargo xtask compare`"
        }
        _ => "",
    }
}

/// Runs the four experiments and returns the text report (ending with the verdict line).
///
/// Errors ([`Fatal`], exit 2), all but the last found before anything runs: `prefill` among the
/// modes, a bad engine spec ([`check_engine`], before any model file is read), unreadable suite, unknown prompt, a bad `budgets.toml`, unreadable model, the suite
/// against the model as conformance checks it ([`suite_requests`]: stop ids, top_k, context
/// length), an unreadable or unpaired drafter, an engine without one of the modes; engine or
/// oracle failure.
pub fn explain(o: &ExplainOptions) -> Result<String, Fatal> {
    let m = &o.model;
    let (ma, mb) = o.modes;
    if let Some(md) = [ma, mb].into_iter().find(|md| *md == Mode::Prefill) {
        return Err(Fatal(format!(
            "explain compares the outputs of two generating modes; {md} generates nothing (it \
             scores the golden teacher-forced): use plain, batch:N or spec:K"
        )));
    }
    // everything that can be checked without running is checked first, in the order
    // conformance checks it: engine spec, suite and prompt, budgets, the suite against the
    // model, drafter
    check_engine(&o.engine)?;
    let suite = Suite::load(&o.suite).map_err(f)?;
    let p = suite.prompt(&o.prompt).map_err(f)?.clone();
    let continuation = continuation_tokens(o.continuation, &p, &o.suite)?;
    let stem = golden::model_stem(&m.path);
    let budgets = Budgets::load(
        &o.goldens_root
            .join(&stem)
            .join(crate::budgets::BUDGETS_FILE),
    )
    .map_err(f)?;
    // the model file is opened once: its config and codec now, the oracle's model later
    let OpenedModel {
        file,
        config,
        codec,
    } = open_model(&m.path)?;
    let mut one = suite.clone();
    one.prompts.retain(|q| q.id == p.id);
    let req = suite_requests(&one, &codec, ModelLimits::from_config(&config))
        .map_err(|e| f(e.for_model(&file_name(&m.path))))?
        .pop()
        .ok_or_else(|| Fatal(format!("prompt {}: no request", p.id)))?;
    if let Some(d) = &m.draft {
        check_drafter(&config, &m.path, d)?;
    }
    let mut oracle = ReferenceOracle::from_gguf_with(&m.path, file, o.load).map_err(f)?;
    let mut engine = make_engine(&o.engine, m, o.load)?;
    let (tau, tau_src) = match budgets.0.get(engine.name()) {
        Some(b) => (
            b.tau,
            format!("budgets.toml [{}], {}", engine.name(), b.date),
        ),
        None => (suite.settings.tie_budget, "suite default".to_string()),
    };
    let declared = engine.modes();
    for md in [ma, mb] {
        if !declared.contains(&md) {
            let generating: Vec<Mode> = declared
                .iter()
                .copied()
                .filter(|d| *d != Mode::Prefill)
                .collect();
            return Err(Fatal(format!(
                "engine {} cannot generate in mode {md} (it declares {}{})",
                engine.name(),
                crate::engine::mode_list(&generating),
                undeclared_hint(is_http(&o.engine), md, &declared)
            )));
        }
    }
    let plen = req.prompt.len();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "explain {} · model {} · engine {} · {ma} vs {mb}\nprompt {} tokens, max_tokens {}; τ = {tau} ({tau_src})\n",
        p.id,
        stem,
        engine.name(),
        plen,
        p.max_tokens
    );
    let mut cx = Ctx {
        engine: engine.as_mut(),
        oracle: &mut oracle,
        codec: &codec,
        cache: ScoreCache::new(o.cache_dir.clone()),
        req,
        top_k: suite.settings.top_k,
    };
    let ta = cx.one(&ma)?;
    let tb = cx.one(&mb)?;
    let (ya, yb) = (ta.tokens(), tb.tokens());
    let fork = first_diff(&ya, &yb);
    let ra = cx.rows(&ya)?;
    match fork {
        Some(i) => {
            let _ = writeln!(
                s,
                "first fork: output index {i} (absolute position {}): {ma} emits {}, {mb} emits {}",
                plen + i,
                cx.tok(ya.get(i).copied()),
                cx.tok(yb.get(i).copied())
            );
            let lo = i.saturating_sub(12);
            let _ = writeln!(s, "context before: {:?}\n", codec.decode(&ya[lo..i]));
        }
        None => {
            let _ = writeln!(
                s,
                "no fork: {ma} and {mb} emit the same {} tokens\n",
                ya.len()
            );
        }
    }

    // 1. batch-width probe: four copies of the prompt in one running batch vs plain
    let plain = if ma == Mode::Plain {
        ta.clone()
    } else if mb == Mode::Plain {
        tb.clone()
    } else {
        cx.one(&Mode::Plain)?
    };
    let _ = writeln!(
        s,
        "1. batch-width probe (4 copies of the prompt, batch:4, vs plain):"
    );
    if declared.contains(&Mode::Batch { n: 4 }) {
        let copies: Vec<Request> = (0..4)
            .map(|c| Request {
                id: format!("{}#copy{c}", cx.req.id),
                ..cx.req.clone()
            })
            .collect();
        let out = cx.gen(&copies, &Mode::Batch { n: 4 })?;
        for (c, t) in out.iter().enumerate() {
            match first_diff(&plain.tokens(), &t.tokens()) {
                None => {
                    let _ = writeln!(
                        s,
                        "   copy {c}: identical to plain ({} tokens)",
                        t.steps.len()
                    );
                }
                Some(d) => {
                    let _ = writeln!(
                        s,
                        "   copy {c}: differs from plain at index {d}: {} vs plain {}",
                        cx.tok(t.tokens().get(d).copied()),
                        cx.tok(plain.tokens().get(d).copied())
                    );
                }
            }
        }
    } else {
        let _ = writeln!(s, "   skipped: engine does not declare batch:4");
    }

    // 2. truncated-prefix continuation at the fork, in both modes
    let _ = writeln!(s, "2. truncated-prefix continuation:");
    let cut = fork.unwrap_or(0);
    let mut ids = cx.req.prompt.clone();
    ids.extend_from_slice(&ya[..cut]);
    let text = codec.decode(&ids);
    let retok = codec.tokenizer().encode(&text, false).map_err(f)?;
    if retok == ids {
        let _ = writeln!(
            s,
            "   prefix of {cut} generated tokens re-tokenizes to the same {} ids",
            ids.len()
        );
    } else {
        let d = first_diff(&retok, &ids).unwrap_or(0);
        let _ = writeln!(
            s,
            "   WARNING: decoded prefix re-tokenizes differently ({} vs {} ids, first difference at {d}); continuing from the original ids",
            retok.len(),
            ids.len()
        );
    }
    if fork.is_none() {
        let _ = writeln!(s, "   (no fork: continuation from the prompt itself)");
    }
    let creq = Request {
        id: format!("{}#cut{cut}", cx.req.id),
        prompt: ids.clone(),
        max_tokens: continuation.min(cx.req.max_tokens - cut).max(1),
        stop: cx.req.stop.clone(),
    };
    let mut cont_first = Vec::new();
    for md in [ma, mb] {
        let t = cx
            .gen(std::slice::from_ref(&creq), &md)?
            .pop()
            .ok_or_else(|| Fatal("no trajectory".into()))?;
        let first = t.tokens().first().copied();
        cont_first.push(first);
        let _ = writeln!(
            s,
            "   {md}: picks {} then {:?} (top-2 gap {})",
            cx.tok(first),
            codec.decode(&t.tokens()[1.min(t.steps.len())..]),
            fmt_opt(gap(t.steps.first()))
        );
    }
    if let Some(i) = fork {
        let same = |x: Option<u32>, y: Option<u32>| x == y;
        let _ = writeln!(
            s,
            "   restarted at the fork: {ma} {} its own run, {mb} {} its own run",
            if same(cont_first[0], ya.get(i).copied()) {
                "repeats"
            } else {
                "does NOT repeat"
            },
            if same(cont_first[1], yb.get(i).copied()) {
                "repeats"
            } else {
                "does NOT repeat"
            },
        );
    }

    // 3. spec:1 vs spec:K
    let k = [ma, mb]
        .iter()
        .find_map(|m| match m {
            Mode::Spec { k } => Some(*k),
            _ => None,
        })
        .unwrap_or(4);
    let _ = writeln!(s, "3. spec:1 vs spec:{k} (each vs plain):");
    if declared.contains(&Mode::Spec { k: 1 }) && declared.contains(&Mode::Spec { k }) {
        for kk in [1, k] {
            let mk = Mode::Spec { k: kk };
            let t = if mk == ma {
                ta.clone()
            } else if mk == mb {
                tb.clone()
            } else {
                cx.one(&mk)?
            };
            let st = t.spec.clone().unwrap_or_default();
            let d = first_diff(&plain.tokens(), &t.tokens());
            let _ = writeln!(
                s,
                "   spec:{kk}: {} ({} rounds, {} drafted, {} accepted)",
                d.map_or("identical to plain".to_string(), |d| format!(
                    "differs from plain at index {d}: {} vs {}",
                    cx.tok(t.tokens().get(d).copied()),
                    cx.tok(plain.tokens().get(d).copied())
                )),
                st.rounds,
                st.drafted,
                st.accepted
            );
        }
    } else {
        let _ = writeln!(s, "   skipped: engine has no spec modes (give a drafter)");
    }

    // 4. top-2 gap at the fork (or at the smallest oracle margin)
    let (at, why) = match fork {
        Some(i) => (i, "at the fork"),
        None => {
            let i = ra
                .iter()
                .enumerate()
                .min_by(|x, y| x.1.top2_margin().total_cmp(&y.1.top2_margin()))
                .map_or(0, |x| x.0);
            (i, "at the smallest oracle top-2 margin")
        }
    };
    let _ = writeln!(
        s,
        "4. top-2 gap {why} (output index {at}, absolute position {}):",
        plen + at
    );
    let _ = writeln!(s, "   {ma} engine gap {}", fmt_opt(gap(ta.steps.get(at))));
    let _ = writeln!(s, "   {mb} engine gap {}", fmt_opt(gap(tb.steps.get(at))));
    let row = ra.get(at).cloned();
    let verdict;
    if let Some(row) = &row {
        let top: Vec<String> = row
            .top_k
            .iter()
            .take(5)
            .map(|(id, l)| format!("{id} {:?} {l}", codec.decode(&[*id])))
            .collect();
        let _ = writeln!(
            s,
            "   oracle top-2 gap {:.6}; oracle top-5: {}",
            row.top2_margin(),
            top.join(", ")
        );
        let a_top = row.top_k[0].1;
        let la = ya
            .get(at)
            .and_then(|&y| logit_in(&row.top_k, y).or(row.chosen));
        let lb = match yb.get(at) {
            Some(&y) if Some(&y) == ya.get(at) => la,
            Some(&y) => match logit_in(&row.top_k, y) {
                Some(l) => Some(l),
                None => cx.rows(&yb)?.get(at).and_then(|r| r.chosen),
            },
            None => None,
        };
        let (mar_a, mar_b) = (la.map(|l| a_top - l), lb.map(|l| a_top - l));
        if let Some(i) = fork {
            let _ = writeln!(
                s,
                "   oracle margin m of {ma}'s token {}, of {mb}'s token {}; |ℓ_a − ℓ_b| = {}",
                fmt_opt(mar_a),
                fmt_opt(mar_b),
                fmt_opt(la.zip(lb).map(|(x, y)| (x - y).abs()))
            );
            let ok = |m: Option<f64>| m.is_some_and(|m| m <= tau);
            let d = la.zip(lb).map_or(f64::NAN, |(x, y)| (x - y).abs());
            verdict = match (ok(mar_a), ok(mar_b)) {
                (true, true) => format!(
                    "verdict: tie-split at position {} — oracle margin {d:.6} ≤ τ {tau}; both outputs conform",
                    plen + i
                ),
                (true, false) => format!(
                    "verdict: {mb} wrong at position {} — oracle margin {} > τ {tau}; {ma} agrees with exact arithmetic",
                    plen + i,
                    fmt_opt(mar_b)
                ),
                (false, true) => format!(
                    "verdict: {ma} wrong at position {} — oracle margin {} > τ {tau}; {mb} agrees with exact arithmetic",
                    plen + i,
                    fmt_opt(mar_a)
                ),
                (false, false) => format!(
                    "verdict: both wrong at position {} — oracle margins {} and {} > τ {tau}",
                    plen + i,
                    fmt_opt(mar_a),
                    fmt_opt(mar_b)
                ),
            };
        } else {
            verdict = format!(
                "verdict: no fork between {ma} and {mb} ({} tokens); smallest oracle top-2 margin {:.6} at position {} ({} τ {tau})",
                ya.len(),
                row.top2_margin(),
                plen + at,
                if row.top2_margin() <= tau { "≤" } else { ">" }
            );
        }
    } else {
        verdict = "verdict: nothing generated".to_string();
    }
    let _ = writeln!(s, "\n{verdict}");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An engine spec [`check_engine`] accepts whose server is not there.
    const UNREACHABLE: &str = "llama-server=http://127.0.0.1:1,retries=0";

    /// An HTTP engine asked for the default `plain,spec:4` is told how an HTTP engine gets
    /// spec:K (`,spec=K` in --engine) and that it then runs nothing else (it was told `spec:K
    /// needs a drafter: --draft`, which an HTTP engine does not take); with `,spec=4` plain is
    /// the missing mode, with the same advice. A fake llama-server with 4 slots, which says it
    /// speculates, serves the dense fixture.
    #[cfg(feature = "http")]
    #[test]
    fn an_http_engine_without_spec_is_told_how_to_get_it() {
        use crate::http::fake;
        use serde_json::{json, Value};
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let m = model.display().to_string();
        let url = fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match path {
                "/props" => (200, json!({"model_path": m, "total_slots": 4})),
                // a drafting server (spec=4 is refused up front on one without a drafter)
                "/slots" => (200, json!([{"id": 0, "speculative": true}])),
                "/completion" => (
                    200,
                    fake::completion(body, 236, &[(236, -0.1), (237, -2.5)]),
                ),
                _ => (404, json!({})),
            },
        ));
        let smoke = Path::new(env!("CARGO_MANIFEST_DIR")).join("smoke.toml");
        let mut o = options(&model, &smoke, (Mode::Plain, Mode::Spec { k: 4 }));
        o.prompt = "story".into();
        o.engine = format!("llama-server={url}");
        assert_eq!(
            explain(&o).unwrap_err().0,
            "engine llama-server cannot generate in mode spec:4 (it declares plain, batch:1..4; \
             an HTTP engine runs spec:K when its server drafts and --engine ends in ,spec=K, and \
             then only spec:K: to compare with plain, judge each server in its own \
             `conformance --label` run and use `cargo xtask compare`)"
        );
        o.engine = format!("llama-server={url},spec=4");
        assert_eq!(
            explain(&o).unwrap_err().0,
            "engine llama-server cannot generate in mode plain (it declares spec:4; with ,spec=K \
             in --engine an HTTP engine runs only spec:K: to compare with plain, judge each \
             server in its own `conformance --label` run and use `cargo xtask compare`)"
        );
    }

    /// The `--draft` hint is given for a spec mode only when the engine declares none (no
    /// drafter loaded); with a drafter an undeclared `spec:99` gets no hint (the message lists
    /// the declared modes); a batch mode never gets it.
    #[test]
    fn the_drafter_hint_only_without_a_drafter() {
        let (plain, b4) = (Mode::Plain, Mode::Batch { n: 4 });
        let with = [plain, b4, Mode::Spec { k: 1 }, Mode::Spec { k: 4 }];
        assert_eq!(
            undeclared_hint(false, Mode::Spec { k: 99 }, &[plain, b4]),
            "; spec:K needs a drafter: --draft"
        );
        assert_eq!(undeclared_hint(false, Mode::Spec { k: 99 }, &with), "");
        assert_eq!(
            undeclared_hint(false, Mode::Batch { n: 8 }, &[plain, b4]),
            ""
        );
    }

    /// Options for `prompt` of the suite file `suite` on `model`, with an HTTP engine spec that
    /// passes [`check_engine`] but whose server is not there (port 1, no retries): a check
    /// that passes reaches `make_engine` and stops there, so a run never starts.
    fn options(model: &Path, suite: &Path, modes: (Mode, Mode)) -> ExplainOptions {
        ExplainOptions {
            model: ModelSpec {
                path: model.to_path_buf(),
                draft: None,
                suites: None,
            },
            suite: suite.to_path_buf(),
            prompt: "a".into(),
            modes,
            engine: UNREACHABLE.into(),
            goldens_root: std::env::temp_dir().join("gemma4-explain-no-goldens"),
            cache_dir: None,
            continuation: None,
            load: Default::default(),
        }
    }

    /// `--continuation 0` (it generated one token and printed `then ""`) and beyond the
    /// prompt's max_tokens (silently cut) are refused naming the flag, prompt and suite; the
    /// default is 8, at most max_tokens.
    #[test]
    fn continuation_is_within_the_prompt_output() {
        let p = |max_tokens| crate::suite::Prompt {
            id: "a".into(),
            input: crate::suite::PromptInput::Text("x".into()),
            max_tokens,
        };
        let suite = Path::new("s.toml");
        assert_eq!(continuation_tokens(None, &p(32), suite).unwrap(), 8);
        assert_eq!(continuation_tokens(None, &p(3), suite).unwrap(), 3);
        assert_eq!(continuation_tokens(Some(32), &p(32), suite).unwrap(), 32);
        assert_eq!(continuation_tokens(Some(1), &p(32), suite).unwrap(), 1);
        for n in [0, 33, 1_000_000_000] {
            assert_eq!(
                continuation_tokens(Some(n), &p(32), suite).unwrap_err().0,
                format!(
                    "--continuation {n}: give 1..=32 (tokens generated after the fork, within \
                     max_tokens 32 of prompt \"a\" in s.toml)"
                )
            );
        }
    }

    /// `prefill` among the modes is refused first, saying why (it was "cannot generate in mode
    /// prefill (declares [\"prefill\", …])", which contradicted itself).
    #[test]
    fn prefill_is_refused_saying_why() {
        let o = options(
            Path::new("no-such-model.gguf"),
            Path::new("no-such-suite.toml"),
            (Mode::Prefill, Mode::Plain),
        );
        assert_eq!(
            explain(&o).unwrap_err().0,
            "explain compares the outputs of two generating modes; prefill generates nothing (it \
             scores the golden teacher-forced): use plain, batch:N or spec:K"
        );
    }

    /// explain checks the suite against the model as conformance and bless do, before anything
    /// runs, naming the model file: a stop id outside the vocabulary, a prompt + max_tokens
    /// beyond the context length (it ran for 39 s); a drafter that does not read is named
    /// before the engine is built (it failed only when spec:K ran, after plain).
    #[test]
    fn suite_against_model_is_checked_before_anything_runs() {
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("gemma4-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let suite = dir.join("s.toml");
        let modes = (Mode::Plain, Mode::Batch { n: 4 });
        let o = options(&model, &suite, modes);
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\n";
        std::fs::write(
            &suite,
            format!("[suite]\nstop_ids = [1, 16384]\n{p}max_tokens = 4\n"),
        )
        .unwrap();
        assert_eq!(
            explain(&o).unwrap_err().0,
            format!(
                "{}: [suite] stop_ids: 16384 is outside the vocabulary of \
                 dense-target.Q4_K_M.gguf (16384 ids, 0..=16383)",
                suite.display()
            )
        );
        std::fs::write(&suite, format!("{p}max_tokens = 4095\n")).unwrap();
        let e = explain(&o).unwrap_err().0;
        assert!(
            e.starts_with(&format!("{}: prompt \"a\": ", suite.display()))
                && e.contains("exceed the context length 4096 of dense-target.Q4_K_M.gguf"),
            "{e}"
        );
        std::fs::write(&suite, format!("{p}max_tokens = 4\n")).unwrap();
        let mut o = options(&model, &suite, modes);
        let missing = dir.join("no-such-assistant.gguf");
        o.model.draft = Some(missing.clone());
        let e = explain(&o).unwrap_err().0;
        assert_eq!(e, format!("--draft {}: no such file", missing.display()));
        o.model.draft = None;
        let e = explain(&o).unwrap_err().0;
        assert!(
            e.contains("127.0.0.1:1") && e.contains("cannot connect"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
