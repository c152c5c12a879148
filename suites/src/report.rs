//! The conformance report (`design/conformance.md` §8): `report.json` (schema
//! `"conformance-report/1"`, documented in `suites/REPORT_SCHEMA.md`) and `report.md`
//! (prompt × mode table of verdicts, then every non-exact entry with its §3 details).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::acceptance::Acceptance;
use crate::engine::SpecStats;
use crate::invariance::RowInvariance;
use crate::rule::{Fork, PositionVerdict, Verdict};

/// Schema name of `report.json`.
pub const REPORT_SCHEMA: &str = "conformance-report/1";

/// A token with its decoded text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRef {
    /// Token id.
    pub id: u32,
    /// Decoded text of the single token.
    pub text: String,
}

/// One candidate of a top-k list: id, logit, text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit (raw, after final soft-capping).
    pub logit: f64,
    /// Decoded text.
    pub text: String,
}

/// One non-agreeing position (tie-flip, oracle tie or divergence), with the §3 details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position verdict.
    pub kind: PositionVerdict,
    /// 0-based output index.
    pub index: usize,
    /// Absolute position in the sequence (prompt length + index).
    pub position: usize,
    /// The engine's token.
    pub token: TokenRef,
    /// The oracle's argmax.
    pub oracle_top: TokenRef,
    /// `m_t` in logits (a lower bound when `margin_is_bound`; `null` = infinite).
    pub margin: Option<f64>,
    /// Margin is the top-k lower bound.
    pub margin_is_bound: bool,
    /// τ used.
    pub tau: f64,
    /// The oracle's top-5 at this position.
    pub oracle_top5: Vec<Candidate>,
    /// The engine's own top-5, if it exposes logits.
    pub engine_top5: Option<Vec<Candidate>>,
    /// Decoded output before the position (up to 12 tokens).
    pub context_before: String,
    /// Decoded output after the position (up to 6 tokens).
    pub context_after: String,
}

/// One (model, suite, prompt, mode) entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Prompt id.
    pub prompt: String,
    /// Mode string.
    pub mode: String,
    /// Verdict (§3).
    pub verdict: Verdict,
    /// Whether it passes.
    pub passes: bool,
    /// Prompt length P.
    pub prompt_tokens: usize,
    /// What identifies the prompt the run judged: [`prompt_sha256`] of its token ids, so that a
    /// later reader (`cargo xtask compare`) can tell whether the suite file in hand still
    /// encodes it. Absent in reports written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sha256: Option<String>,
    /// Output ids.
    pub tokens: Vec<u32>,
    /// Decoded output.
    pub text: String,
    /// Token-identical to the golden (`null` without goldens).
    pub identical_to_golden: Option<bool>,
    /// First output index that differs from the golden.
    pub golden_fork: Option<usize>,
    /// Whether the oracle re-scored the engine's own continuation.
    pub rescored: bool,
    /// Number of output positions judged.
    pub judged: usize,
    /// Tie-flips counted.
    pub tie_flips: usize,
    /// Differences explained by exact oracle ties (not counted).
    pub oracle_tie_flips: usize,
    /// First divergence, if any.
    pub first_divergence: Option<Event>,
    /// Every tie-flip, oracle tie and divergence (at most 50).
    pub events: Vec<Event>,
    /// Oracle top-2 margin per judged position (`null` = infinite).
    pub margins: Vec<Option<f64>>,
    /// Engine wall time in seconds (batch modes: the batch call).
    pub wall_s: f64,
    /// Speculative counters.
    pub spec: Option<SpecStats>,
    /// Error message for the `error` verdict.
    pub error: Option<String>,
    /// Row invariance against plain decode rows (`--strict-invariance`, §7); absent when not
    /// checked (plain mode, `error` entries, or the flag off). `passes` is false when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_invariance: Option<RowInvariance>,
}

/// SHA-256 of prompt token ids `[P]` (each id as 4 little-endian bytes, in order), lowercase
/// hex: [`Entry::prompt_sha256`].
pub fn prompt_sha256(ids: &[u32]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for id in ids {
        h.update(id.to_le_bytes());
    }
    hex::encode(h.finalize())
}

/// A cross-mode fork (§4) with decoded tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkReport {
    /// Prompt id.
    pub prompt: String,
    /// Absolute position of the fork.
    pub position: usize,
    /// The fork.
    #[serde(flatten)]
    pub fork: Fork,
    /// Decoded tokens (a, b).
    pub texts: (String, String),
}

/// The model a run judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRef {
    /// Path as given, for people to read: a path that is not UTF-8 is written lossily (each
    /// invalid byte sequence as U+FFFD), and `path_bytes` then holds it exactly.
    pub path: String,
    /// The path's bytes (Unix `OsStr` bytes) in lowercase hex, only where the path is not
    /// UTF-8 (`path` is then not the file's name): [`ModelRef::file_path`] reads the path back
    /// from it. Absent from every report of a UTF-8 path, and from reports written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<String>,
    /// File stem (golden folder name, [`crate::golden::model_stem`]).
    pub stem: String,
    /// SHA-256.
    pub sha256: String,
}

/// A report's model path that cannot be read back: its `path_bytes` are not the hex of a
/// path's bytes (a report edited by hand), or they are and this platform has no byte paths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model path {path:?}: path_bytes {bytes:?} cannot be read back: {why}")]
pub struct ModelPathError {
    /// The recorded human-readable path.
    pub path: String,
    /// The recorded `path_bytes`.
    pub bytes: String,
    /// What is wrong.
    pub why: String,
}

impl ModelRef {
    /// The reference to the model file at `path` (as given) with its SHA-256: the stem is
    /// [`crate::golden::model_stem`]'s, and a path that is not UTF-8 keeps its exact bytes in
    /// `path_bytes` (on Unix), so that [`ModelRef::file_path`] names the same file.
    pub fn new(path: &Path, sha256: &str) -> ModelRef {
        ModelRef {
            path: path.display().to_string(),
            path_bytes: path_bytes(path),
            stem: crate::golden::model_stem(path),
            sha256: sha256.to_string(),
        }
    }

    /// The model file's path as the run was given it: from `path_bytes` when present (a path
    /// that is not UTF-8), else `path`.
    ///
    /// Errors: [`ModelPathError`] when `path_bytes` are not an even number of hex digits, or
    /// (not on Unix) are present at all.
    pub fn file_path(&self) -> Result<PathBuf, ModelPathError> {
        let Some(hex) = &self.path_bytes else {
            return Ok(PathBuf::from(&self.path));
        };
        let err = |why: String| ModelPathError {
            path: self.path.clone(),
            bytes: hex.clone(),
            why,
        };
        let bytes = hex::decode(hex).map_err(|e| err(e.to_string()))?;
        path_from_bytes(bytes).ok_or_else(|| err("this platform has no byte paths".into()))
    }
}

/// `path`'s bytes in lowercase hex when it is not UTF-8 ([`ModelRef::path_bytes`]); `None` for
/// a UTF-8 path, and off Unix.
fn path_bytes(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.to_str()
            .is_none()
            .then(|| hex::encode(path.as_os_str().as_bytes()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// The path of `bytes` (Unix); `None` off Unix.
fn path_from_bytes(bytes: Vec<u8>) -> Option<PathBuf> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
    }
    #[cfg(not(unix))]
    {
        let _ = bytes;
        None
    }
}

/// One (model, suite, engine) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Target model.
    pub model: ModelRef,
    /// Draft model, if any.
    pub draft: Option<ModelRef>,
    /// Suite name.
    pub suite: String,
    /// Engine name.
    pub engine: String,
    /// τ used.
    pub tau: f64,
    /// Where τ came from (`goldens/<model>/budgets.toml [engine]` or `suite default`).
    pub tau_source: String,
    /// `max_tie_flips`.
    pub max_tie_flips: usize,
    /// Golden folder, if goldens were used.
    pub goldens: Option<String>,
    /// Modes run.
    pub modes: Vec<String>,
    /// Modes skipped with the reason.
    pub skipped_modes: Vec<(String, String)>,
    /// Entries in (prompt, mode) order.
    pub entries: Vec<Entry>,
    /// Cross-mode forks.
    pub forks: Vec<ForkReport>,
    /// Seconds spent in the engine.
    pub engine_s: f64,
    /// Seconds spent in the oracle (scoring, including cache look-ups).
    pub oracle_s: f64,
    /// Oracle scorings answered from the cache / computed.
    pub cache: (usize, usize),
    /// Whether row invariance was checked (`--strict-invariance`).
    #[serde(default)]
    pub strict_invariance: bool,
    /// Seconds spent on row invariance (plain decode rows and oracle look-ups).
    #[serde(default)]
    pub invariance_s: f64,
    /// Speculative acceptance per `spec:K` mode (§7); empty without a drafter.
    #[serde(default)]
    pub acceptance: Vec<Acceptance>,
}

/// Summary over all runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of entries.
    pub entries: usize,
    /// Entries that pass.
    pub passed: usize,
    /// Entries that fail.
    pub failed: usize,
    /// Count per verdict.
    pub by_verdict: BTreeMap<String, usize>,
    /// Entries whose row invariance failed (counted in `failed` too).
    #[serde(default)]
    pub invariance_failures: usize,
    /// `spec:K` acceptance rows below their floor (`slow-spec` notes).
    #[serde(default)]
    pub slow_spec: usize,
    /// Whether `slow-spec` fails the run (`--require-acceptance`).
    #[serde(default)]
    pub require_acceptance: bool,
    /// 0 all pass, 1 some fail (or `slow-spec` under `--require-acceptance`).
    pub exit_code: i32,
}

/// `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: String,
    /// Seconds since the Unix epoch when written.
    pub created_unix: u64,
    /// Runs.
    pub runs: Vec<Run>,
    /// Summary.
    pub summary: Summary,
}

impl Report {
    /// Builds a report with its summary (`slow-spec` does not fail the run).
    pub fn new(runs: Vec<Run>) -> Report {
        Report::with_acceptance(runs, false)
    }

    /// Builds a report with its summary; `require_acceptance`: a `slow-spec` row fails the run
    /// (exit code 1).
    pub fn with_acceptance(runs: Vec<Run>, require_acceptance: bool) -> Report {
        let mut by_verdict = BTreeMap::new();
        let (mut passed, mut failed) = (0, 0);
        for e in runs.iter().flat_map(|r| &r.entries) {
            *by_verdict
                .entry(e.verdict.as_str().to_string())
                .or_insert(0) += 1;
            if e.passes {
                passed += 1
            } else {
                failed += 1
            }
        }
        let invariance_failures = runs
            .iter()
            .flat_map(|r| &r.entries)
            .filter(|e| e.row_invariance.as_ref().is_some_and(|i| i.failed))
            .count();
        let slow_spec = runs
            .iter()
            .flat_map(|r| &r.acceptance)
            .filter(|a| a.slow_spec)
            .count();
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Report {
            schema: REPORT_SCHEMA.into(),
            created_unix,
            summary: Summary {
                entries: passed + failed,
                passed,
                failed,
                by_verdict,
                invariance_failures,
                slow_spec,
                require_acceptance,
                exit_code: i32::from(failed > 0 || (require_acceptance && slow_spec > 0)),
            },
            runs,
        }
    }

    /// Writes `report.json` and `report.md` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("report.json"), json + "\n")?;
        std::fs::write(dir.join("report.md"), self.markdown())
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let sm = &self.summary;
        let _ = writeln!(s, "# Conformance report\n");
        let _ = writeln!(
            s,
            "{} entries: {} pass, {} fail ({}){}{}. Exit code {}.\n",
            sm.entries,
            sm.passed,
            sm.failed,
            sm.by_verdict
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            if sm.invariance_failures > 0 {
                format!("; {} row-invariance failure(s)", sm.invariance_failures)
            } else {
                String::new()
            },
            if sm.slow_spec > 0 {
                format!(
                    "; {} slow-spec note(s){}",
                    sm.slow_spec,
                    if sm.require_acceptance {
                        " (--require-acceptance: failing)"
                    } else {
                        ""
                    }
                )
            } else {
                String::new()
            },
            sm.exit_code
        );
        for run in &self.runs {
            markdown_run(&mut s, run);
        }
        s
    }
}

fn fmt_margin(m: Option<f64>) -> String {
    m.map_or("∞".into(), |m| format!("{m:.6}"))
}

fn md_escape(t: &str) -> String {
    t.replace('|', "\\|").replace('\n', "\\n").replace('`', "'")
}

fn markdown_run(s: &mut String, run: &Run) {
    let _ = writeln!(
        s,
        "## {} · suite {} · engine {}\n\nmodel SHA-256 `{}`; τ = {} ({}); max tie-flips {}; goldens: {}; engine {:.1} s, oracle {:.1} s (oracle scorings: {} from the cache, {} computed{}).\n",
        run.model.stem,
        run.suite,
        run.engine,
        run.model.sha256,
        run.tau,
        run.tau_source,
        run.max_tie_flips,
        run.goldens.as_deref().unwrap_or("none"),
        run.engine_s,
        run.oracle_s,
        run.cache.0,
        run.cache.1,
        if run.goldens.is_some() {
            "; other positions from the goldens"
        } else {
            ""
        }
    );
    // where `conformance` draws this run's plots (`plot::plot_path`), relative to the report
    let _ = writeln!(
        s,
        "Margin plots: `plots/{}/{}/<prompt>.svg`.\n",
        run.model.stem, run.suite
    );
    for (m, why) in &run.skipped_modes {
        let _ = writeln!(s, "- mode `{m}` skipped: {why}");
    }
    if !run.skipped_modes.is_empty() {
        s.push('\n');
    }
    let mut prompts: Vec<&str> = Vec::new();
    for e in &run.entries {
        if !prompts.contains(&e.prompt.as_str()) {
            prompts.push(&e.prompt);
        }
    }
    let _ = writeln!(s, "| prompt | {} |", run.modes.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(run.modes.len()));
    for p in &prompts {
        let cells: Vec<String> = run
            .modes
            .iter()
            .map(|m| {
                run.entries
                    .iter()
                    .find(|e| e.prompt == *p && &e.mode == m)
                    .map_or("–".into(), |e| {
                        let mark = if e.passes { "" } else { " ✗" };
                        let inv = if e.row_invariance.as_ref().is_some_and(|i| i.failed) {
                            " (rows)"
                        } else {
                            ""
                        };
                        format!("{}{inv}{mark}", e.verdict.as_str())
                    })
            })
            .collect();
        let _ = writeln!(s, "| {p} | {} |", cells.join(" | "));
    }
    s.push('\n');
    markdown_invariance(s, run);
    markdown_acceptance(s, run);
    for e in run.entries.iter().filter(|e| e.verdict != Verdict::Exact) {
        let _ = writeln!(
            s,
            "### {} / {}: {}\n\n{} output tokens, {} judged, {} tie-flip(s), {} oracle tie(s){}{}.\n",
            e.prompt,
            e.mode,
            e.verdict.as_str(),
            e.tokens.len(),
            e.judged,
            e.tie_flips,
            e.oracle_tie_flips,
            e.golden_fork
                .map_or(String::new(), |f| format!(", first difference from the golden at output index {f}")),
            if e.rescored { ", continuation re-scored by the oracle" } else { "" }
        );
        if let Some(err) = &e.error {
            let _ = writeln!(s, "error: {err}\n");
        }
        for ev in &e.events {
            let _ = writeln!(
                s,
                "- **{:?}** at position {} (output index {}): engine `{}` ({}) vs oracle `{}` ({}), m = {}{} logits, τ = {}",
                ev.kind,
                ev.position,
                ev.index,
                md_escape(&ev.token.text),
                ev.token.id,
                md_escape(&ev.oracle_top.text),
                ev.oracle_top.id,
                if ev.margin_is_bound { "≥ " } else { "" },
                fmt_margin(ev.margin),
                ev.tau
            );
            let top = |c: &[Candidate]| {
                c.iter()
                    .map(|c| format!("`{}` {} {:.6}", md_escape(&c.text), c.id, c.logit))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(s, "  - oracle top-5: {}", top(&ev.oracle_top5));
            if let Some(et) = &ev.engine_top5 {
                let _ = writeln!(s, "  - engine top-5: {}", top(et));
            }
            let _ = writeln!(
                s,
                "  - context: `…{}⟦{}⟧{}…`",
                md_escape(&ev.context_before),
                md_escape(&ev.token.text),
                md_escape(&ev.context_after)
            );
        }
        s.push('\n');
    }
    if !run.forks.is_empty() {
        let _ = writeln!(s, "### Cross-mode forks\n");
        let _ = writeln!(
            s,
            "| prompt | modes | position | tokens | oracle m | engine gaps | class |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for f in &run.forks {
            let tok = |t: Option<u32>, x: &str| {
                t.map_or("end".into(), |t| format!("{t} `{}`", md_escape(x)))
            };
            let _ = writeln!(
                s,
                "| {} | {} vs {} | {} | {} / {} | {} / {} | {} / {} | {} |",
                f.prompt,
                f.fork.modes.0,
                f.fork.modes.1,
                f.position,
                tok(f.fork.tokens.0, &f.texts.0),
                tok(f.fork.tokens.1, &f.texts.1),
                f.fork.margins.0.map_or("?".into(), |m| format!("{m:.6}")),
                f.fork.margins.1.map_or("?".into(), |m| format!("{m:.6}")),
                f.fork
                    .engine_gaps
                    .0
                    .map_or("–".into(), |m| format!("{m:.6}")),
                f.fork
                    .engine_gaps
                    .1
                    .map_or("–".into(), |m| format!("{m:.6}")),
                f.fork.class
            );
        }
        s.push('\n');
    }
}

fn fmt_opt(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.6}"))
}

/// The row-invariance table (§7): one line per checked entry, then every flip.
fn markdown_invariance(s: &mut String, run: &Run) {
    if !run.strict_invariance {
        return;
    }
    let _ = writeln!(
        s,
        "### Row invariance (vs plain decode rows, {:.1} s)\n",
        run.invariance_s
    );
    let _ = writeln!(
        s,
        "| prompt | mode | rows | max \\|Δ logit\\| (at index) | flips | result |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let mut flips = Vec::new();
    for e in &run.entries {
        let Some(inv) = &e.row_invariance else {
            continue;
        };
        let result = match (&inv.unsupported, inv.failed) {
            (Some(why), _) => format!("unsupported: {}", md_escape(why)),
            (None, true) => "**fail**".into(),
            (None, false) => "ok".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {}{} | {}{} | {} | {} |",
            e.prompt,
            e.mode,
            inv.compared,
            if inv.missing > 0 {
                format!(" ({} without logits)", inv.missing)
            } else {
                String::new()
            },
            fmt_opt(inv.max_abs_diff),
            inv.max_diff_index
                .map_or(String::new(), |i| format!(" ({i})")),
            inv.flips.len(),
            result
        );
        for f in &inv.flips {
            flips.push((e, f));
        }
    }
    s.push('\n');
    for (e, f) in flips {
        let _ = writeln!(
            s,
            "- {} / {} at position {} (output index {}): {} row argmax `{}` ({}) vs plain row `{}` ({}); oracle margin {:.6} {} τ = {}; own top-2 gaps {} / {}",
            e.prompt,
            e.mode,
            f.position,
            f.index,
            e.mode,
            md_escape(&f.mode_top.text),
            f.mode_top.id,
            md_escape(&f.plain_top.text),
            f.plain_top.id,
            f.oracle_margin,
            if f.exceeds_tau { "> **FAIL**" } else { "≤" },
            run.tau,
            fmt_opt(f.mode_gap),
            fmt_opt(f.plain_gap)
        );
    }
    s.push('\n');
}

/// The speculative acceptance table (§7).
fn markdown_acceptance(s: &mut String, run: &Run) {
    if run.acceptance.is_empty() {
        return;
    }
    let _ = writeln!(s, "### Speculative acceptance\n");
    let _ = writeln!(
        s,
        "| mode | drafter | engine (accepted/drafted) | oracle | floor | oracle = plain | note |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let rate = |c: &crate::acceptance::AcceptanceCount| {
        format!(
            "{} ({}/{})",
            c.rate.map_or("–".into(), |r| format!("{r:.3}")),
            c.accepted,
            c.drafted
        )
    };
    for a in &run.acceptance {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            a.mode,
            a.drafter,
            rate(&a.engine),
            a.oracle.as_ref().map_or("–".into(), rate),
            a.floor.map_or("–".into(), |f| format!("{f:.3}")),
            a.oracle_matches_plain
                .map_or("–", |m| if m { "yes" } else { "**no**" }),
            a.note.as_deref().map(md_escape).unwrap_or_default()
        );
    }
    s.push('\n');
}
