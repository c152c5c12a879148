//! Calibration of the tie budget τ (`design/conformance.md` §6): teacher-force the engine and the
//! oracle on the same sequences (the suite's goldens, prompt ‖ continuation) and measure, per
//! position and for every pair `i, j` of the oracle's top-8 candidates, the error of the logit
//! *difference* `|(e_i − e_j) − (ℓ_i − ℓ_j)|`. τ = max error × safety factor, rounded up to a
//! power of two ([`crate::budgets::propose_tau`]).

use serde::{Deserialize, Serialize};

use crate::budgets::{propose_tau, quantile, Budget};
use crate::engine::{Engine, EngineError};
use crate::oracle::Oracle;

/// Oracle candidates per position whose pairwise differences are measured (§6).
pub const CANDIDATES: usize = 8;

/// Engine top-k asked for, so that the oracle's top-8 are found among the engine's candidates.
pub const ENGINE_TOP_K: usize = 64;

/// The quantiles printed and stored.
pub const QUANTILES: [f64; 5] = [0.5, 0.9, 0.99, 0.999, 0.9999];

/// The fewest measured pairs from which τ is proposed ([`Calibration::refusal`]). τ is the
/// largest error seen × the safety factor; of `n` errors drawn alike, the share of the engine's
/// errors above the largest is `1/(n+1)` on average, so at 100 pairs the largest stands for
/// about the 99th percentile, the least the safety factor (2 by default) is sized for. One
/// position gives up to 28 pairs (the oracle's top-8), so a prompt of a few tokens is enough
/// when the engine's top-k holds the oracle's candidates.
pub const MIN_PAIRS: usize = 100;

/// Where the largest error was seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Worst {
    /// Sequence index (in the order given).
    pub seq: usize,
    /// Position in the sequence (row `t` predicts `seq[t+1]`).
    pub position: usize,
    /// Candidate ids `(i, j)`.
    pub pair: (u32, u32),
    /// Oracle difference `ℓ_i − ℓ_j`.
    pub oracle_diff: f64,
    /// Engine difference `e_i − e_j`.
    pub engine_diff: f64,
}

/// Result of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Engine name.
    pub engine: String,
    /// Sequences scored.
    pub sequences: usize,
    /// Positions measured.
    pub positions: usize,
    /// Candidate pairs measured.
    pub pairs: usize,
    /// Pairs whose candidate was missing from the engine's top-[`ENGINE_TOP_K`] (not measured;
    /// a non-zero count means the engine is far from the oracle and τ is not trustworthy).
    pub missing: usize,
    /// Positions where the engine's top-k holds at least one of the oracle's top-8 candidates.
    pub shared_positions: usize,
    /// The longest engine top-k row seen (the engine's effective top-k).
    pub engine_top_k: usize,
    /// `(q, error quantile)` for [`QUANTILES`].
    pub quantiles: Vec<(f64, f64)>,
    /// Largest error in logits.
    pub max_error: f64,
    /// Largest absolute error of a single logit `|e_i − ℓ_i|` (for comparison).
    pub max_logit_error: f64,
    /// Where the largest pair error was seen.
    pub worst: Option<Worst>,
    /// Safety factor.
    pub safety_factor: f64,
    /// Proposed τ.
    pub tau: f64,
}

impl Calibration {
    /// Why no τ may be proposed from this measurement, or `None`: no pair measured (the
    /// engine's top-k rows share no id with the oracle's top-8 at any position — another model
    /// or tokenizer? — or never two of them — a top-k too small), or fewer than [`MIN_PAIRS`].
    /// A τ from no data was the floor 2⁻⁴⁰ and was written to `budgets.toml`, passing nothing
    /// but exact output.
    pub fn refusal(&self) -> Option<String> {
        let what = format!(
            "{} pairs measured at {} positions ({} missing from the engine's top-k)",
            self.pairs, self.positions, self.missing
        );
        if self.positions == 0 {
            return Some("no positions to measure (no golden sequences)".into());
        }
        if self.pairs == 0 && self.shared_positions == 0 {
            return Some(format!(
                "{what}: the engine's top-k rows (up to {} ids) share no id with the oracle's \
                 top-{CANDIDATES} at any position: does the engine serve another model or \
                 tokenizer?",
                self.engine_top_k
            ));
        }
        if self.pairs == 0 {
            return Some(format!(
                "{what}: the engine's top-k rows (up to {} ids) never hold two of the oracle's \
                 top-{CANDIDATES}: ask for a larger top-k (llama-server/openai: engine option \
                 top-k={ENGINE_TOP_K})",
                self.engine_top_k
            ));
        }
        if self.pairs < MIN_PAIRS {
            return Some(format!(
                "{what}: fewer than {MIN_PAIRS}, too few to propose τ: calibrate on more \
                 positions (more prompts or suites) or with a larger engine top-k (engine \
                 option top-k={ENGINE_TOP_K})"
            ));
        }
        None
    }

    /// The `budgets.toml` entry for this calibration (`date` UTC `YYYY-MM-DD`, `suite` as given).
    pub fn budget(&self, suite: &str, date: &str) -> Budget {
        Budget {
            tau: self.tau,
            date: date.to_string(),
            suite: suite.to_string(),
            positions: self.positions,
            pairs: self.pairs,
            max_error: self.max_error,
            quantile_999: self
                .quantiles
                .iter()
                .find(|(q, _)| *q == 0.999)
                .map_or(self.max_error, |x| x.1),
            safety_factor: self.safety_factor,
        }
    }
}

/// Teacher-forces `engine` and `oracle` on `seqs` and measures the errors of logit differences
/// over the oracle's top-8 at every position (§6); proposes τ with `safety`.
///
/// Errors: an engine or oracle failure, or a row count that does not match the sequence.
pub fn calibrate(
    engine: &mut dyn Engine,
    oracle: &mut dyn Oracle,
    seqs: &[Vec<u32>],
    safety: f64,
) -> Result<Calibration, EngineError> {
    let mut errors = Vec::new();
    let (mut positions, mut missing, mut shared_positions, mut engine_top_k) = (0, 0, 0, 0);
    let mut max_logit_error = 0f64;
    let mut worst: Option<Worst> = None;
    // one sequence at a time bounds memory (the f64 forward over 1000+ tokens is large)
    for (s, seq) in seqs.iter().enumerate() {
        let e = engine.score(std::slice::from_ref(seq), ENGINE_TOP_K)?;
        let o = oracle.score(std::slice::from_ref(seq), CANDIDATES)?;
        let (Some(e), Some(o)) = (e.first(), o.first()) else {
            return Err(EngineError::Other(format!("sequence {s}: no scores")));
        };
        if e.rows.len() != seq.len() || o.len() != seq.len() {
            return Err(EngineError::Other(format!(
                "sequence {s}: {} engine rows and {} oracle rows for {} tokens",
                e.rows.len(),
                o.len(),
                seq.len()
            )));
        }
        for (t, (er, or)) in e.rows.iter().zip(o).enumerate() {
            positions += 1;
            engine_top_k = engine_top_k.max(er.len());
            let cand: Vec<(u32, f64, Option<f64>)> = or
                .top_k
                .iter()
                .take(CANDIDATES)
                .map(|&(id, l)| (id, l, er.iter().find(|x| x.0 == id).map(|x| x.1)))
                .collect();
            if cand.iter().any(|c| c.2.is_some()) {
                shared_positions += 1;
            }
            for &(_, l, e) in &cand {
                if let Some(e) = e {
                    max_logit_error = max_logit_error.max((e - l).abs());
                }
            }
            for a in 0..cand.len() {
                for b in a + 1..cand.len() {
                    let (i, li, ei) = cand[a];
                    let (j, lj, ej) = cand[b];
                    let (Some(ei), Some(ej)) = (ei, ej) else {
                        missing += 1;
                        continue;
                    };
                    let err = ((ei - ej) - (li - lj)).abs();
                    if worst
                        .as_ref()
                        .is_none_or(|w| err > (w.engine_diff - w.oracle_diff).abs())
                    {
                        worst = Some(Worst {
                            seq: s,
                            position: t,
                            pair: (i, j),
                            oracle_diff: li - lj,
                            engine_diff: ei - ej,
                        });
                    }
                    errors.push(err);
                }
            }
        }
    }
    let max_error = errors.iter().copied().fold(0.0, f64::max);
    Ok(Calibration {
        engine: engine.name().to_string(),
        sequences: seqs.len(),
        positions,
        pairs: errors.len(),
        missing,
        shared_positions,
        engine_top_k,
        quantiles: QUANTILES
            .iter()
            .map(|&q| (q, quantile(&errors, q)))
            .collect(),
        max_error,
        max_logit_error,
        worst,
        safety_factor: safety,
        tau: propose_tau(max_error, safety),
    })
}

/// Today's UTC date as `YYYY-MM-DD` (civil-from-days, H. Hinnant's algorithm).
pub fn utc_date_today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date((secs / 86_400) as i64)
}

/// `YYYY-MM-DD` of the day `days` after 1970-01-01.
pub fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The `budgets.toml` table an engine spec's engine reads ([`crate::Engine::name`]):
/// `llama-server` for `llama-server=URL,…`, `openai` for `openai=URL`, the spec itself otherwise.
fn engine_budget_name(spec: &str) -> &str {
    spec.split_once('=').map_or(spec, |(kind, _)| kind)
}

/// One model's calibration as run by `cargo xtask calibrate`.
#[derive(Debug, Clone)]
pub struct ModelCalibration {
    /// Model file stem (golden folder).
    pub stem: String,
    /// Suites whose goldens were used, joined with `+`.
    pub suites: String,
    /// The measurement.
    pub calibration: Calibration,
    /// `budgets.toml` written (when asked).
    pub written: Option<std::path::PathBuf>,
}

/// `cargo xtask calibrate`: for every model of `opts`, teacher-forces `opts.engine` and the f64
/// oracle on the golden sequences (prompt ‖ golden continuation) of every suite, proposes τ and,
/// when `write`, stores it in `goldens/<model>/budgets.toml` under the engine's name.
///
/// Errors ([`crate::conformance::Fatal`]), the first four before anything is measured or any
/// model file read: a bad engine spec ([`crate::conformance::check_engine`]), a
/// `budgets.toml` the result could not be written into (when `write`), a suite that does not
/// load, a suite file given twice or two with one name; a model that is not a file
/// ([`crate::conformance::NotAFile`]) or does not read, missing goldens (run
/// `bless`), golden pinned to another SHA-256, engine or oracle failure; a measurement τ may
/// not be proposed from ([`Calibration::refusal`]: no pair, or fewer than [`MIN_PAIRS`]),
/// naming model and engine — that model's `budgets.toml` is not written (a model calibrated
/// before it in the same run keeps what was written for it).
pub fn calibrate_models(
    opts: &crate::conformance::Options,
    safety: f64,
    write: bool,
) -> Result<Vec<ModelCalibration>, crate::conformance::Fatal> {
    use crate::conformance::{
        check_engine, load_suites, make_engine, model_suites, suite_for, Fatal,
    };
    check_engine(&opts.engine)?;
    use crate::golden;
    use crate::reference_engine::ReferenceOracle;
    let fatal = |e: &dyn std::fmt::Display| Fatal(e.to_string());
    let budgets_path = |m: &crate::conformance::ModelSpec| {
        opts.goldens_root
            .join(golden::model_stem(&m.path))
            .join("budgets.toml")
    };
    if write {
        // before anything is measured: a file the result could not be written into (one that
        // conformance would refuse) stops the run here, not after it
        let name = engine_budget_name(&opts.engine);
        if crate::budgets::ENGINE_NAMES.contains(&name) {
            for m in &opts.models {
                crate::budgets::Budgets::check_save(&budgets_path(m), name)
                    .map_err(|e| fatal(&e))?;
            }
        }
    }
    // every suite read once, up front: a file given twice (it was measured twice) or two files
    // with one name are refused before anything is measured
    let loaded = load_suites(opts)?;
    let mut out = Vec::new();
    for m in &opts.models {
        // a missing file in the wording of the other verbs (`--model PATH: no such file`)
        crate::conformance::NotAFile::check(Some("model"), &m.path).map_err(|e| fatal(&e))?;
        let mut oracle = ReferenceOracle::load_with(&m.path, opts.load).map_err(|e| fatal(&e))?;
        let sha = oracle.model_sha256().to_string();
        let stem = golden::model_stem(&m.path);
        let mut engine = make_engine(&opts.engine, m, opts.load)?;
        let mut seqs = Vec::new();
        let mut names = Vec::new();
        for suite_path in model_suites(opts, m) {
            let Some(suite) = suite_for(&loaded, suite_path, &opts.prompts)? else {
                continue;
            };
            let dir = golden::golden_dir(&opts.goldens_root, &stem, &suite.settings.name);
            let goldens = golden::load_goldens(
                &dir,
                &suite.settings.name,
                &suite.prompts,
                &suite.settings.stop_ids,
                &sha,
                golden::RowLimits::new(
                    oracle.vocab_size(),
                    &oracle.suppressed_ids(),
                    suite.settings.top_k,
                ),
            )
            .map_err(|e| fatal(&e))?;
            // `load_goldens` refused a golden no greedy run of this model writes, naming its file
            for g in goldens.values() {
                let mut s = g.prompt.clone();
                s.extend_from_slice(&g.tokens);
                seqs.push(s);
            }
            names.push(suite.settings.name.clone());
        }
        let calibration =
            calibrate(engine.as_mut(), &mut oracle, &seqs, safety).map_err(|e| fatal(&e))?;
        let suites = names.join("+");
        if let Some(why) = calibration.refusal() {
            return Err(Fatal(format!(
                "{stem} · {} · suites {suites}: no τ proposed: {why}{}",
                calibration.engine,
                if write {
                    "; budgets.toml not written"
                } else {
                    ""
                }
            )));
        }
        let written = if write {
            let path = budgets_path(m);
            crate::budgets::Budgets::save_engine(
                &path,
                &calibration.engine,
                &calibration.budget(&suites, &utc_date_today()),
            )
            .map_err(|e| fatal(&e))?;
            Some(path)
        } else {
            None
        };
        out.push(ModelCalibration {
            stem,
            suites,
            calibration,
            written,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::{Perturbation, Perturbed, ToyModel};
    use std::path::Path;

    /// Run options of the calibrate tests: `models`, `suites` and `engine`, every folder under
    /// `dir`, every flag off.
    fn test_options(
        dir: &Path,
        models: Vec<crate::conformance::ModelSpec>,
        suites: Vec<std::path::PathBuf>,
        engine: String,
    ) -> crate::conformance::Options {
        crate::conformance::Options {
            models,
            suites,
            engine,
            modes: None,
            prompts: vec![],
            goldens_root: dir.join("goldens"),
            out_dir: dir.join("out"),
            cache_dir: dir.join("cache"),
            progress: false,
            strict_invariance: false,
            require_acceptance: false,
            oracle_acceptance: false,
            load: Default::default(),
        }
    }

    #[test]
    fn civil_dates_match_known_days() {
        // 1970-01-01 is day 0; 2000-03-01 is day 11017; 2024-02-29 is day 19782 (date -d)
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_017), "2000-03-01");
        assert_eq!(civil_date(19_782), "2024-02-29");
    }

    #[test]
    fn exact_engine_has_zero_error_and_the_floor_tau() {
        let toy = ToyModel::new(50);
        let mut engine = toy.clone();
        let mut oracle = toy;
        let c = calibrate(&mut engine, &mut oracle, &[vec![1, 2, 3, 9]], 2.0).unwrap();
        assert_eq!(c.positions, 4);
        assert_eq!(c.pairs, 4 * 28);
        assert_eq!(c.max_error, 0.0);
        assert_eq!(c.tau, 2f64.powi(-40));
    }

    /// The toy model as an engine whose score rows keep `keep` candidates with every id moved
    /// by `shift` (ids the oracle never ranks when the shift is past the vocabulary).
    struct Moved {
        toy: ToyModel,
        shift: u32,
        keep: usize,
    }

    impl Engine for Moved {
        fn name(&self) -> &str {
            "moved"
        }
        fn modes(&self) -> Vec<crate::engine::Mode> {
            Vec::new()
        }
        fn generate(
            &mut self,
            _: &[crate::engine::Request],
            mode: &crate::engine::Mode,
        ) -> Result<Vec<crate::engine::Trajectory>, EngineError> {
            Err(EngineError::UnsupportedMode {
                engine: "moved".into(),
                mode: *mode,
            })
        }
        fn score(
            &mut self,
            seqs: &[Vec<u32>],
            top_k: usize,
        ) -> Result<Vec<crate::engine::Scores>, EngineError> {
            let mut out = Engine::score(&mut self.toy, seqs, top_k)?;
            for s in &mut out {
                for r in &mut s.rows {
                    r.truncate(self.keep);
                    for x in r.iter_mut() {
                        x.0 += self.shift;
                    }
                }
            }
            Ok(out)
        }
    }

    /// No τ from no data: an engine whose top-k shares no id with the oracle's top-8 (4
    /// positions × 28 pairs, all missing), one whose rows hold only the top-1 (each position
    /// shares one id: no pair), and an exact engine on 3 positions (84 pairs < 100) are refused,
    /// each saying why; the exact engine on 4 positions (112 pairs) is not.
    #[test]
    fn no_tau_from_too_few_pairs() {
        let toy = ToyModel::new(50);
        let seq = [vec![1, 2, 3, 9]];
        let mut far = Moved {
            toy: toy.clone(),
            shift: 1000,
            keep: 16,
        };
        let c = calibrate(&mut far, &mut toy.clone(), &seq, 2.0).unwrap();
        assert_eq!((c.positions, c.pairs, c.missing), (4, 0, 4 * 28));
        assert_eq!(
            c.refusal().unwrap(),
            "0 pairs measured at 4 positions (112 missing from the engine's top-k): the engine's \
             top-k rows (up to 16 ids) share no id with the oracle's top-8 at any position: does \
             the engine serve another model or tokenizer?"
        );
        let mut top1 = Moved {
            toy: toy.clone(),
            shift: 0,
            keep: 1,
        };
        let c = calibrate(&mut top1, &mut toy.clone(), &seq, 2.0).unwrap();
        assert_eq!((c.pairs, c.shared_positions, c.engine_top_k), (0, 4, 1));
        assert_eq!(
            c.refusal().unwrap(),
            "0 pairs measured at 4 positions (112 missing from the engine's top-k): the engine's \
             top-k rows (up to 1 ids) never hold two of the oracle's top-8: ask for a larger \
             top-k (llama-server/openai: engine option top-k=64)"
        );
        let c = calibrate(&mut toy.clone(), &mut toy.clone(), &[vec![1, 2, 3]], 2.0).unwrap();
        assert_eq!(c.pairs, 3 * 28);
        assert!(c
            .refusal()
            .unwrap()
            .starts_with("84 pairs measured at 3 positions (0 missing from the engine's top-k): fewer than 100, too few to propose τ"));
        let c = calibrate(&mut toy.clone(), &mut toy.clone(), &seq, 2.0).unwrap();
        assert_eq!(c.refusal(), None);
    }

    /// `calibrate` against a llama-server whose top-k shares no id with the oracle's (a fake
    /// answering ids 9000..9015 at every position) stops naming model, engine and why, and
    /// leaves budgets.toml as it was (it wrote `pairs = 0`, τ = 2⁻⁴⁰, exit 0); a dry run stops
    /// the same way.
    #[cfg(feature = "http")]
    #[test]
    fn calibrate_writes_no_tau_measured_from_nothing() {
        use crate::conformance::ModelSpec;
        use crate::http::fake;
        use serde_json::{json, Value};
        let Some(model) = crate::test_fixture_model("dense-target.Q4_K_M.gguf") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("gemma4-cal-nothing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let gdir = dir.join("goldens/dense-target.Q4_K_M/smoke");
        std::fs::create_dir_all(&gdir).unwrap();
        let src = repo.join("goldens/dense-target.Q4_K_M/smoke");
        for f in std::fs::read_dir(&src).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, gdir.join(f.file_name().unwrap())).unwrap();
        }
        let budgets = dir.join("goldens/dense-target.Q4_K_M/budgets.toml");
        let before =
            std::fs::read_to_string(repo.join("goldens/dense-target.Q4_K_M/budgets.toml")).unwrap();
        std::fs::write(&budgets, &before).unwrap();
        let m = model.display().to_string();
        let far: Vec<(u32, f64)> = (0..16).map(|j| (9000 + j, -0.1 - f64::from(j))).collect();
        let url = fake::serve(std::sync::Arc::new(
            move |_: &str, path: &str, body: &Value| match path {
                "/props" => (200, json!({"model_path": m, "total_slots": 1})),
                "/completion" => (200, fake::completion(body, 9000, &far)),
                _ => (404, json!({})),
            },
        ));
        let o = test_options(
            &dir,
            vec![ModelSpec {
                path: model,
                draft: None,
                suites: None,
            }],
            vec![repo.join("suites/smoke.toml")],
            format!("llama-server={url}"),
        );
        let want = "dense-target.Q4_K_M · llama-server · suites smoke: no τ proposed: 0 pairs \
                    measured at 157 positions (4396 missing from the engine's top-k): the \
                    engine's top-k rows (up to 16 ids) share no id with the oracle's top-8 at any \
                    position: does the engine serve another model or tokenizer?";
        let e = calibrate_models(&o, 2.0, true).unwrap_err().0;
        assert_eq!(e, format!("{want}; budgets.toml not written"));
        assert_eq!(std::fs::read_to_string(&budgets).unwrap(), before);
        assert_eq!(calibrate_models(&o, 2.0, false).unwrap_err().0, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn noisy_engine_error_is_bounded_by_twice_the_noise() {
        // each logit moves by at most `amp`, so a difference moves by at most 2·amp
        let amp = 1e-4;
        let toy = ToyModel::new(50);
        let mut engine = Perturbed::new(toy.clone(), Perturbation::Noise { amp });
        let mut oracle = toy;
        let c = calibrate(&mut engine, &mut oracle, &[vec![1, 2, 3, 9, 4, 4]], 2.0).unwrap();
        assert!(
            c.max_error > 0.0 && c.max_error <= 2.0 * amp,
            "{}",
            c.max_error
        );
        assert!(
            c.tau >= 2.0 * c.max_error && c.tau <= 4.0 * c.max_error,
            "{}",
            c.tau
        );
    }

    /// calibrate checks every model's budgets.toml before it measures anything: a file the
    /// result could not be written into (one conformance would refuse) stops it naming the
    /// problem (these models do not exist: a run that started would stop on that instead); a
    /// dry run writes nothing and does not check.
    #[test]
    fn calibrate_refuses_an_unwritable_budgets_file_first() {
        use crate::conformance::ModelSpec;
        let dir = std::env::temp_dir().join(format!("gemma4-cal-first-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let model = |name: &str| ModelSpec {
            path: dir.join(format!("{name}.gguf")),
            draft: None,
            suites: None,
        };
        let o = test_options(
            &dir,
            vec![model("first"), model("second")],
            vec![],
            "llama-server=http://127.0.0.1:1".into(),
        );
        let bad = dir.join("goldens/second/budgets.toml");
        std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
        let text = "[llama-server]\nnote = \"hand-tuned\"\n";
        std::fs::write(&bad, text).unwrap();
        let e = calibrate_models(&o, 2.0, true).unwrap_err().0;
        assert_eq!(
            e,
            format!(
                "{}: bad budgets TOML: [llama-server] unknown field `note`, expected one of \
                 `tau`, `date`, `suite`, `positions`, `pairs`, `max_error`, `quantile_999`, \
                 `safety_factor`; [llama-server] not written (conformance would refuse the \
                 file: fix it first)",
                bad.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&bad).unwrap(), text);
        let e = calibrate_models(&o, 2.0, false).unwrap_err().0;
        assert!(!e.contains("budgets"), "{e}");
        // a suite given twice was measured twice (--dry-run counted its positions twice)
        let smoke = Path::new(env!("CARGO_MANIFEST_DIR")).join("smoke.toml");
        let again = Path::new(env!("CARGO_MANIFEST_DIR")).join("../suites/smoke.toml");
        let mut o = o;
        o.suites = vec![smoke.clone(), again.clone()];
        assert_eq!(
            calibrate_models(&o, 2.0, false).unwrap_err().0,
            format!(
                "suite file given twice: {} and {} are the same file (each suite runs once)",
                smoke.display(),
                again.display()
            )
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
