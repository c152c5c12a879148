//! Row invariance (`--strict-invariance`) and the speculative acceptance floor
//! (`design/conformance.md` §7) on the smallest real-toolchain fixture pair
//! (`dense-target.Q4_K_M` + `dense-assistant.F32`) and its committed smoke goldens.
//!
//! (a) The reference engine computes a row the same way in every mode (same generic forward,
//! row-independent matmuls), so prefill / batch:4 / spec:K rows equal the plain decode rows
//! bitwise: difference 0, no flips. (b) A wrapper whose `batch:4` rows have their top-2 ids
//! swapped at one output index (emitted token unchanged, so §3 still says `exact`) gives a flip
//! there; its oracle margin is the golden sidecar's top-2 margin at that position (the f64
//! oracle's stored logits, not the code under test), far above τ → the entry and the run fail.
//! (c) The oracle's own spec:K reproduces the golden (plain greedy) token for token; a floor of
//! 1.0 puts every spec mode below it → `slow-spec` notes, exit code 0, or 1 with
//! `--require-acceptance`; a second run answers the oracle's spec:K from the cache.

mod fixture_common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use suites::conformance::{conformance, ModelSpec, Options};
use suites::golden::{golden_dir, load_goldens, Golden, RowLimits};
use suites::oracle::{Oracle, ScoreCache};
use suites::reference_engine::{GemmaCodec, ReferenceEngine, ReferenceOracle};
use suites::report::{ModelRef, Report};
use suites::rule::Verdict;
use suites::runner::{run_suite_with, RunConfig, RunExtras};
use suites::suite::Suite;
use suites::{Engine, EngineError, Mode, Request, Scores, TopKRows, Trajectory};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> Option<PathBuf> {
    fixture_common::fixtures_with("models/dense-target.Q4_K_M.gguf")
}

/// The wrapped f32 engine with the top-2 ids of one `batch:N` row swapped.
struct SwapBatchRow {
    inner: ReferenceEngine<f32>,
    id: String,
    index: usize,
}

impl Engine for SwapBatchRow {
    fn name(&self) -> &str {
        "swap-batch-row"
    }
    fn modes(&self) -> Vec<Mode> {
        self.inner.modes()
    }
    fn generate(&mut self, reqs: &[Request], mode: &Mode) -> Result<Vec<Trajectory>, EngineError> {
        let mut out = self.inner.generate(reqs, mode)?;
        if matches!(mode, Mode::Batch { .. }) {
            for t in out.iter_mut().filter(|t| t.id == self.id) {
                if let Some(tk) = t.steps[self.index].top_k.as_mut() {
                    let (a, b) = (tk[0].0, tk[1].0);
                    tk[0].0 = b;
                    tk[1].0 = a;
                }
            }
        }
        Ok(out)
    }
    fn score(&mut self, seqs: &[Vec<u32>], top_k: usize) -> Result<Vec<Scores>, EngineError> {
        self.inner.score(seqs, top_k)
    }
    fn decode_rows(
        &mut self,
        prompt: &[u32],
        tokens: &[u32],
        top_k: usize,
    ) -> Result<Option<TopKRows>, EngineError> {
        Engine::decode_rows(&mut self.inner, prompt, tokens, top_k)
    }
}

struct Setup {
    model: PathBuf,
    draft: PathBuf,
    suite: Suite,
    goldens: BTreeMap<String, Golden>,
    oracle: ReferenceOracle,
    codec: GemmaCodec,
}

fn setup(fx: &Path) -> Setup {
    let model = fx.join("models/dense-target.Q4_K_M.gguf");
    let draft = fx.join("models/dense-assistant.F32.gguf");
    let suite = Suite::load(workspace().join("suites/smoke.toml")).unwrap();
    let oracle = ReferenceOracle::load(&model).unwrap();
    let dir = golden_dir(&workspace().join("goldens"), "dense-target.Q4_K_M", "smoke");
    let goldens = load_goldens(
        &dir,
        &suite.settings.name,
        &suite.prompts,
        &suite.settings.stop_ids,
        oracle.model_sha256(),
        RowLimits::new(
            oracle.vocab_size(),
            &oracle.suppressed_ids(),
            suite.settings.top_k,
        ),
    )
    .unwrap();
    let codec = GemmaCodec::load(&model).unwrap();
    Setup {
        model,
        draft,
        suite,
        goldens,
        oracle,
        codec,
    }
}

fn cfg(s: &Setup, modes: &[Mode], tau: f64) -> RunConfig {
    RunConfig {
        modes: modes.to_vec(),
        tau,
        tau_source: "test".into(),
        model: ModelRef {
            path: s.model.display().to_string(),
            path_bytes: None,
            stem: "dense-target.Q4_K_M".into(),
            sha256: s.oracle.model_sha256().into(),
        },
        draft: None,
        goldens_dir: None,
        progress: false,
    }
}

#[test]
fn reference_rows_equal_plain_decode_rows_bitwise() {
    let Some(fx) = fixtures() else { return };
    let mut s = setup(&fx);
    let modes = [
        Mode::Prefill,
        Mode::Plain,
        Mode::Batch { n: 4 },
        Mode::Spec { k: 1 },
        Mode::Spec { k: 4 },
    ];
    let mut engine = ReferenceEngine::<f32>::load(&s.model)
        .unwrap()
        .with_draft(Some(s.draft.clone()));
    let mut cache = ScoreCache::new(None);
    let c = cfg(&s, &modes, 2f64.powi(-9));
    let run = run_suite_with(
        &mut engine,
        &mut s.oracle,
        &s.codec,
        &mut cache,
        &s.suite,
        Some(&s.goldens),
        &c,
        &RunExtras {
            strict_invariance: true,
        },
    )
    .unwrap();
    assert!(run.strict_invariance);
    assert_eq!(run.entries.len(), 3 * modes.len());
    for e in &run.entries {
        assert!(e.passes, "{} {}", e.prompt, e.mode);
        if e.mode == "plain" {
            assert!(e.row_invariance.is_none());
            continue;
        }
        let inv = e.row_invariance.as_ref().expect("checked");
        assert_eq!(inv.unsupported, None, "{} {}", e.prompt, e.mode);
        assert_eq!(inv.compared, e.tokens.len(), "{} {}", e.prompt, e.mode);
        assert_eq!(inv.missing, 0);
        assert_eq!(inv.max_abs_diff, Some(0.0), "{} {}", e.prompt, e.mode);
        assert!(
            inv.flips.is_empty() && !inv.failed,
            "{} {}",
            e.prompt,
            e.mode
        );
    }
    let report = Report::new(vec![run]);
    assert_eq!(report.summary.invariance_failures, 0);
    assert_eq!(report.summary.exit_code, 0);
    assert!(report.markdown().contains("### Row invariance"));
}

#[test]
fn a_swapped_batch_row_fails_row_invariance_at_that_position() {
    let Some(fx) = fixtures() else { return };
    let mut s = setup(&fx);
    let tau = 2f64.powi(-9);
    // the output index of count_chat with the largest oracle top-2 margin (golden sidecar)
    let g = &s.goldens["count_chat"];
    let margin = |t: usize| g.top_k[t][0].1 - g.top_k[t][1].1;
    let index = (0..g.top_k.len())
        .max_by(|&a, &b| margin(a).total_cmp(&margin(b)))
        .unwrap();
    let expected = margin(index);
    assert!(expected > 1.0, "margin {expected}");
    let mut engine = SwapBatchRow {
        inner: ReferenceEngine::<f32>::load(&s.model).unwrap(),
        id: "count_chat".into(),
        index,
    };
    let mut cache = ScoreCache::new(None);
    let c = cfg(&s, &[Mode::Plain, Mode::Batch { n: 4 }], tau);
    let run = run_suite_with(
        &mut engine,
        &mut s.oracle,
        &s.codec,
        &mut cache,
        &s.suite,
        Some(&s.goldens),
        &c,
        &RunExtras {
            strict_invariance: true,
        },
    )
    .unwrap();
    let prompt_len = g.prompt.len();
    for e in &run.entries {
        // the emitted tokens are untouched: §3 alone says exact
        assert_eq!(e.verdict, Verdict::Exact, "{} {}", e.prompt, e.mode);
        let bad = e.prompt == "count_chat" && e.mode == "batch:4";
        assert_eq!(e.passes, !bad, "{} {}", e.prompt, e.mode);
        if e.mode != "batch:4" {
            continue;
        }
        let inv = e.row_invariance.as_ref().unwrap();
        if !bad {
            assert_eq!(inv.max_abs_diff, Some(0.0));
            assert!(inv.flips.is_empty());
            continue;
        }
        assert!(inv.failed);
        assert_eq!(inv.flips.len(), 1);
        let f = &inv.flips[0];
        assert_eq!(f.index, index);
        assert_eq!(f.position, prompt_len + index);
        assert_eq!(f.plain_top.id, g.top_k[index][0].0);
        assert_eq!(f.mode_top.id, g.top_k[index][1].0);
        assert!(f.exceeds_tau);
        // the oracle margin is the stored f64 top-2 margin (same prefix: the output is golden)
        assert!(
            (f.oracle_margin - expected).abs() <= 1e-12 * expected.abs().max(1.0),
            "{} vs {expected}",
            f.oracle_margin
        );
        // the swapped row differs from the plain row by the engine's own top-2 gap there
        assert!(inv.max_abs_diff.unwrap() > 1.0);
        assert_eq!(inv.max_diff_index, Some(index));
    }
    let report = Report::new(vec![run]);
    assert_eq!(report.summary.invariance_failures, 1);
    assert_eq!(report.summary.failed, 1);
    assert_eq!(report.summary.exit_code, 1);
    let md = report.markdown();
    assert!(md.contains("**FAIL**"), "{md}");
    let json = serde_json::to_value(&report).unwrap();
    let entry = json["runs"][0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["prompt"] == "count_chat" && e["mode"] == "batch:4")
        .unwrap();
    assert_eq!(entry["row_invariance"]["flips"][0]["index"], index);
    // entries without the check omit the field (schema conformance-report/1 unchanged)
    assert!(json["runs"][0]["entries"][0]
        .get("row_invariance")
        .is_none());
}

#[test]
fn oracle_spec_matches_plain_and_a_high_floor_gives_slow_spec() {
    let Some(fx) = fixtures() else { return };
    let s = setup(&fx);
    let dir = workspace().join("target/test-acceptance");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // the real smoke suite without its floor table and oracle switch, then a floor of 1.0
    let mut text = String::new();
    let mut skip = false;
    for line in std::fs::read_to_string(&s.suite.path).unwrap().lines() {
        if line.starts_with('[') {
            skip = line.starts_with("[suite.acceptance_floor]");
        }
        if !skip && !line.starts_with("oracle_acceptance") {
            text.push_str(line);
            text.push('\n');
        }
    }
    let text = text.replacen(
        "[suite]\n",
        "[suite]\noracle_acceptance = true\nacceptance_floor = { \"dense-assistant.F32\" = 1.0 }\n",
        1,
    );
    // a suite named smoke is suites/smoke.toml (conformance refuses another file with its
    // name): this variant gets a goldens root of its own, with suites/ beside it and the
    // committed smoke goldens and budgets of the model copied in
    let goldens = dir.join("goldens/dense-target.Q4_K_M");
    std::fs::create_dir_all(goldens.join("smoke")).unwrap();
    let committed = workspace().join("goldens/dense-target.Q4_K_M");
    std::fs::copy(committed.join("budgets.toml"), goldens.join("budgets.toml")).unwrap();
    for f in std::fs::read_dir(committed.join("smoke")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, goldens.join("smoke").join(f.file_name().unwrap())).unwrap();
    }
    std::fs::create_dir_all(dir.join("suites")).unwrap();
    let suite_path = dir.join("suites/smoke.toml");
    std::fs::write(&suite_path, text).unwrap();
    let mut opts = Options {
        models: vec![ModelSpec {
            path: s.model.clone(),
            draft: Some(s.draft.clone()),
            suites: None,
        }],
        suites: vec![suite_path],
        engine: "reference-f32".into(),
        modes: Some(vec![Mode::Plain, Mode::Spec { k: 1 }, Mode::Spec { k: 2 }]),
        prompts: vec![],
        goldens_root: dir.join("goldens"),
        out_dir: dir.join("out"),
        cache_dir: dir.join("out/cache"),
        progress: false,
        strict_invariance: false,
        require_acceptance: false,
        oracle_acceptance: false,
        load: Default::default(),
    };
    let r = conformance(&opts).unwrap();
    let run = &r.runs[0];
    assert_eq!(run.acceptance.len(), 2);
    for a in &run.acceptance {
        assert_eq!(a.drafter, "dense-assistant.F32");
        assert_eq!(a.floor, Some(1.0));
        // exact arithmetic: spec:K output is the plain greedy output (the golden)
        assert_eq!(a.oracle_matches_plain, Some(true), "{}", a.mode);
        let o = a.oracle.as_ref().unwrap();
        assert_eq!(o.prompts, 3);
        assert_eq!(a.oracle_cache, (0, 3));
        // engine counters are the entries' own
        let (d, acc) = run
            .entries
            .iter()
            .filter(|e| e.mode == a.mode)
            .map(|e| e.spec.as_ref().unwrap())
            .fold((0, 0), |x, s| (x.0 + s.drafted, x.1 + s.accepted));
        assert_eq!((a.engine.drafted, a.engine.accepted), (d, acc));
        assert!(a.engine.drafted > 0 && a.engine.accepted < a.engine.drafted);
        assert!(a.slow_spec, "{}", a.mode);
        assert!(a.note.as_deref().unwrap().starts_with("slow-spec"));
    }
    assert_eq!(r.summary.slow_spec, 2);
    assert_eq!(r.summary.failed, 0);
    assert_eq!(r.summary.exit_code, 0, "slow-spec alone does not fail");
    // second run: the oracle's spec:K comes from the cache; --require-acceptance fails it
    opts.require_acceptance = true;
    opts.modes = Some(vec![Mode::Spec { k: 2 }]);
    let r2 = conformance(&opts).unwrap();
    assert_eq!(r2.runs[0].acceptance[0].oracle_cache, (3, 0));
    assert_eq!(
        r2.runs[0].acceptance[0].oracle,
        run.acceptance
            .iter()
            .find(|a| a.mode == "spec:2")
            .unwrap()
            .oracle
    );
    assert_eq!(r2.summary.exit_code, 1);
    assert!(std::fs::read_to_string(dir.join("out/report.md"))
        .unwrap()
        .contains("### Speculative acceptance"));
}
