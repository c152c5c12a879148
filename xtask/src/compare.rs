//! `cargo xtask compare RUN_A RUN_B`: compares two saved conformance runs (`report.json` of
//! two `cargo xtask conformance --label …` runs, e.g. a server in plain mode and the same server
//! with MTP speculative decoding) with every fork measured against the oracle
//! (`design/conformance.md` §4, through `suites::rule::compare_modes`).
//!
//! For each (model, suite, prompt) present in both runs and each pair of modes (one from A, one
//! from B), the first differing output index is found; each side's oracle margin there is the
//! one its own run measured on the shared prefix (0 where that run agreed with the oracle's
//! argmax), and the fork is classified `tie-split`, `<side> wrong` or `both wrong`.
//! Only forks and pairs with an `error` side are listed; identical outputs are counted in the
//! closing summary line. Exit code 0: no side wrong; 1: some side diverges from the oracle at a
//! fork; 2: unreadable or incompatible runs.

use std::path::{Path, PathBuf};

use suites::report::{Entry, Report, Run, REPORT_SCHEMA};
use suites::rule::{
    compare_modes, Fork, ForkClass, Judgement, PositionJudgement, PositionVerdict, Verdict,
};
use suites::{Step, StepKind};

use crate::conformance::workspace_root;

/// Flags of `compare`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run A: a label (target/conformance/runs/LABEL), a folder with report.json, or a file.
    pub run_a: String,
    /// Run B: as run A.
    pub run_b: String,
}

/// Where a run label or path points: `report.json` inside.
pub fn report_path(run: &str) -> PathBuf {
    let p = Path::new(run);
    if p.is_file() {
        return p.to_path_buf();
    }
    if p.is_dir() {
        return p.join("report.json");
    }
    workspace_root()
        .join("target/conformance/runs")
        .join(run)
        .join("report.json")
}

/// Reads a run's report. Errors: a run that is neither a file, a folder nor a label
/// ([`crate::conformance::label_flag`]: `../../etc` read outside `runs/`), or
/// [`read_report`]'s.
fn load(run: &str) -> Result<Report, String> {
    if !Path::new(run).exists() && !suites::suite::is_safe_name(run) {
        return Err(format!(
            "run {run:?}: no such file or folder, and not a label (labels are {})",
            suites::suite::SAFE_NAME_RULE
        ));
    }
    read_report(&report_path(run))
}

/// Reads a report of schema [`REPORT_SCHEMA`] from `path`. Errors (naming the file):
/// unreadable, not JSON, another schema — checked before the rest is parsed, so a later
/// schema's report is named as such, not as a missing field (`conformance-report/2` was read
/// as this version's) —, or not a report.
pub fn read_report(path: &Path) -> Result<Report, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(&e))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| at(&e))?;
    let schema = value.get("schema").unwrap_or(&serde_json::Value::Null);
    if schema.as_str() != Some(REPORT_SCHEMA) {
        return Err(at(&format!(
            "schema {schema}, but this version reads {REPORT_SCHEMA:?} only (suites/REPORT_SCHEMA.md)"
        )));
    }
    serde_json::from_value(value).map_err(|e| at(&e))
}

/// Rebuilds the steps and the per-position judgement of a saved entry: positions listed in its
/// events carry their verdict and margin, every other judged position agreed (margin 0).
pub fn entry_judgement(e: &Entry) -> (Vec<Step>, Judgement) {
    let mut steps: Vec<Step> = e
        .tokens
        .iter()
        .map(|&token| Step {
            token,
            top_k: None,
            kind: StepKind::Decode,
        })
        .collect();
    let mut positions: Vec<PositionJudgement> = (0..e.judged.min(e.tokens.len()))
        .map(|i| PositionJudgement {
            index: i,
            token: e.tokens[i],
            oracle_top: e.tokens[i],
            margin: 0.0,
            margin_is_bound: false,
            oracle_top2: e.margins.get(i).copied().flatten().unwrap_or(f64::INFINITY),
            oracle_tie: false,
            verdict: PositionVerdict::Agree,
        })
        .collect();
    for ev in e.events.iter().chain(e.first_divergence.iter()) {
        if let Some(p) = positions.get_mut(ev.index) {
            p.oracle_top = ev.oracle_top.id;
            p.margin = ev.margin.unwrap_or(f64::INFINITY);
            p.margin_is_bound = ev.margin_is_bound;
            p.verdict = ev.kind;
        }
        if let (Some(s), Some(top)) = (steps.get_mut(ev.index), &ev.engine_top5) {
            s.top_k = Some(top.iter().map(|c| (c.id, c.logit)).collect());
        }
    }
    let j = Judgement {
        verdict: e.verdict,
        first_divergence: e.first_divergence.as_ref().map(|d| d.index),
        tie_flips: e.tie_flips,
        oracle_tie_flips: e.oracle_tie_flips,
        needs_rescore: None,
        error: e.error.clone(),
        positions,
    };
    (steps, j)
}

/// One compared pair.
#[derive(Debug, Clone)]
pub struct Row {
    /// Prompt id.
    pub prompt: String,
    /// `A:<mode>`, `B:<mode>`.
    pub modes: (String, String),
    /// Verdicts of each side.
    pub verdicts: (Verdict, Verdict),
    /// The fork (`None`: identical outputs).
    pub fork: Option<Fork>,
    /// Absolute position of the fork.
    pub position: Option<usize>,
}

/// Compares every (prompt, mode of A, mode of B) of two runs of the same model and suite.
pub fn compare_runs(a: &Run, b: &Run) -> Vec<Row> {
    let mut rows = Vec::new();
    for ea in &a.entries {
        for eb in b.entries.iter().filter(|e| e.prompt == ea.prompt) {
            let (sa, ja) = entry_judgement(ea);
            let (sb, jb) = entry_judgement(eb);
            let (ma, mb) = (format!("A:{}", ea.mode), format!("B:{}", eb.mode));
            let tau = a.tau.min(b.tau);
            let fork = if ea.verdict == Verdict::Error || eb.verdict == Verdict::Error {
                None
            } else {
                compare_modes((&ma, &sa, &ja), (&mb, &sb, &jb), tau)
            };
            rows.push(Row {
                prompt: ea.prompt.clone(),
                position: fork.as_ref().map(|f| ea.prompt_tokens + f.index),
                modes: (ma, mb),
                verdicts: (ea.verdict, eb.verdict),
                fork,
            });
        }
    }
    rows
}

fn fmt_m(m: Option<f64>) -> String {
    match m {
        None => "–".into(),
        Some(x) if x.is_infinite() => "∞".into(),
        Some(x) => format!("{x:.4}"),
    }
}

/// Runs the verb; returns the exit code.
pub fn run(a: &Args) -> i32 {
    let (ra, rb) = match (load(&a.run_a), load(&a.run_b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            crate::print_error(&e);
            return 2;
        }
    };
    let mut any_wrong = false;
    let mut compared = 0;
    let (mut identical, mut forks, mut wrong, mut errors) = (0usize, 0usize, 0usize, 0usize);
    let mut lines: Vec<String> = Vec::new();
    for run_a in &ra.runs {
        for run_b in rb
            .runs
            .iter()
            .filter(|r| r.suite == run_a.suite && r.model.stem == run_a.model.stem)
        {
            if run_a.model.sha256 != run_b.model.sha256 {
                eprintln!(
                    "error: {} / {}: runs judged different model files ({} vs {})",
                    run_a.model.stem, run_a.suite, run_a.model.sha256, run_b.model.sha256
                );
                return 2;
            }
            for row in compare_runs(run_a, run_b) {
                compared += 1;
                if row.verdicts.0 == Verdict::Error || row.verdicts.1 == Verdict::Error {
                    errors += 1;
                } else if row.fork.is_none() {
                    // identical outputs: counted in the summary line, not listed
                    identical += 1;
                    continue;
                } else {
                    forks += 1;
                }
                let (fork_at, toks, margins, gaps, class) = match &row.fork {
                    None => (
                        "– (an error side)".to_string(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ),
                    Some(f) => {
                        // a token's text: from any event at the fork index of either side
                        // (its own token, the oracle's top or a top-5 candidate)
                        let prompt = row.prompt.as_str();
                        let events: Vec<&suites::report::Event> =
                            [(run_a, &row.modes.0[2..]), (run_b, &row.modes.1[2..])]
                                .into_iter()
                                .flat_map(|(r, mode)| {
                                    r.entries
                                        .iter()
                                        .filter(move |e| e.prompt == prompt && e.mode == mode)
                                })
                                .flat_map(|e| e.events.iter().chain(e.first_divergence.iter()))
                                .filter(|ev| ev.index == f.index)
                                .collect();
                        let text = |t: Option<u32>| match t {
                            Some(id) => {
                                let piece = events.iter().find_map(|ev| {
                                    [&ev.token, &ev.oracle_top]
                                        .into_iter()
                                        .find(|tr| tr.id == id)
                                        .map(|tr| tr.text.clone())
                                        .or_else(|| {
                                            ev.oracle_top5
                                                .iter()
                                                .find(|c| c.id == id)
                                                .map(|c| c.text.clone())
                                        })
                                });
                                match piece {
                                    Some(p) => format!("{id} {p:?}"),
                                    None => id.to_string(),
                                }
                            }
                            None => "(end)".into(),
                        };
                        if matches!(f.class, ForkClass::Wrong(_) | ForkClass::BothWrong) {
                            any_wrong = true;
                            wrong += 1;
                        }
                        (
                            format!("{} (index {})", row.position.unwrap_or(0), f.index),
                            format!("{} / {}", text(f.tokens.0), text(f.tokens.1)),
                            format!("{} / {}", fmt_m(f.margins.0), fmt_m(f.margins.1)),
                            format!("{} / {}", fmt_m(f.engine_gaps.0), fmt_m(f.engine_gaps.1)),
                            f.class.to_string(),
                        )
                    }
                };
                lines.push(format!(
                    "| {} | {} | {} | {} | {} | {} / {} | {fork_at} | {toks} | {margins} | {gaps} | {class} |",
                    run_a.model.stem,
                    run_a.suite,
                    row.prompt,
                    &row.modes.0[2..],
                    &row.modes.1[2..],
                    row.verdicts.0.as_str(),
                    row.verdicts.1.as_str(),
                ));
            }
        }
    }
    if compared == 0 {
        // only the error: "no forks: every compared pair …" before it claimed a comparison
        crate::print_error("the two runs share no (model, suite, prompt)");
        return 2;
    }
    println!("A = {} · B = {}\n", a.run_a, a.run_b);
    if lines.is_empty() {
        println!("no forks: every compared pair has token-identical outputs");
    } else {
        println!("| model | suite | prompt | A | B | verdicts | fork at | tokens (A / B) | oracle m (A / B) | engine gap (A / B) | class |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for l in &lines {
            println!("{l}");
        }
    }
    println!(
        "\n{compared} (prompt, mode A, mode B) pairs: {identical} identical outputs (not listed), \
         {forks} forks ({wrong} with a side wrong), {errors} with an error side."
    );
    println!(
        "τ = {} (A) / {} (B); oracle m = ℓ[argmax] − ℓ[token] on the shared prefix (0: that side took the oracle's argmax).",
        ra.runs.first().map_or(f64::NAN, |r| r.tau),
        rb.runs.first().map_or(f64::NAN, |r| r.tau)
    );
    i32::from(any_wrong)
}

#[cfg(test)]
mod tests {
    use super::read_report;
    use suites::report::Report;

    /// Only the schema this version writes is read: `conformance-report/2` (accepted before),
    /// a missing schema and a number are refused naming the file and both schemas.
    #[test]
    fn other_schemas_are_refused() {
        let d = std::env::temp_dir().join(format!("xtask-compare-schema-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.json");
        let mut v = serde_json::to_value(Report::new(Vec::new())).unwrap();
        assert_eq!(v["schema"], suites::report::REPORT_SCHEMA);
        std::fs::write(&p, v.to_string()).unwrap();
        assert!(read_report(&p).is_ok());
        for (schema, shown) in [
            (
                serde_json::json!("conformance-report/2"),
                "\"conformance-report/2\"",
            ),
            (serde_json::Value::Null, "null"),
            (serde_json::json!(1), "1"),
        ] {
            v["schema"] = schema;
            std::fs::write(&p, v.to_string()).unwrap();
            assert_eq!(
                read_report(&p).unwrap_err(),
                format!(
                    "{}: schema {shown}, but this version reads \"conformance-report/1\" only \
                     (suites/REPORT_SCHEMA.md)",
                    p.display()
                )
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
