//! Speculative acceptance (`design/conformance.md` §7, "speculative invariance"): per `spec:K`
//! mode of a run, the engine's acceptance rate against the f64 oracle's own `spec:K` on the
//! same prompts (`reference::spec::spec_decode` with the real assistant, cached by
//! (target SHA-256, drafter SHA-256, K, prompt ids, budget, stop ids) under
//! `target/conformance/cache/spec-*.json`) and against the suite's acceptance floor for the
//! drafter (`[suite.acceptance_floor]`, keyed by drafter file stem).
//!
//! Acceptance rate = accepted drafts / drafted tokens, summed over the prompts of the mode
//! whose entries ran without `error`. Below the floor is a `slow-spec` note: speed, not
//! correctness, so it fails the run only under `--require-acceptance`. The oracle's `spec:K`
//! output is also compared with the golden (its plain greedy output): in exact arithmetic they
//! are token-for-token equal for every K.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reference::model::Model;
use reference::spec::{spec_decode, Assistant, SpecOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::{EngineError, Mode, Request};
use crate::golden::Golden;
use crate::report::Run;
use crate::rule::Verdict;

/// Drafted/accepted totals over a set of prompts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AcceptanceCount {
    /// Prompts counted.
    pub prompts: usize,
    /// Drafted tokens in total.
    pub drafted: usize,
    /// Accepted drafts in total.
    pub accepted: usize,
    /// `accepted / drafted` (`null` when nothing was drafted).
    pub rate: Option<f64>,
}

impl AcceptanceCount {
    fn add(&mut self, drafted: usize, accepted: usize) {
        self.prompts += 1;
        self.drafted += drafted;
        self.accepted += accepted;
        self.rate = (self.drafted > 0).then(|| self.accepted as f64 / self.drafted as f64);
    }
}

/// Acceptance of one `spec:K` mode of a run (report field `runs[].acceptance[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Acceptance {
    /// Mode string (`spec:K`).
    pub mode: String,
    /// Drafter file stem (the key of `[suite.acceptance_floor]`).
    pub drafter: String,
    /// Drafter SHA-256.
    pub drafter_sha256: String,
    /// The engine's acceptance over the mode's non-error entries.
    pub engine: AcceptanceCount,
    /// The f64 oracle's own `spec:K` acceptance on the same prompts (`null` if not computed).
    pub oracle: Option<AcceptanceCount>,
    /// The oracle's `spec:K` tokens equal the golden (plain greedy) on every prompt that has
    /// one (`null` without goldens).
    pub oracle_matches_plain: Option<bool>,
    /// Oracle `spec:K` runs answered from the cache / computed.
    pub oracle_cache: (usize, usize),
    /// The suite's floor for this drafter (`null`: none set).
    pub floor: Option<f64>,
    /// Engine acceptance below the floor (`slow-spec`).
    pub slow_spec: bool,
    /// Human-readable note (the `slow-spec` line, an oracle mismatch, why the oracle is missing).
    pub note: Option<String>,
}

/// A `[suite.acceptance_floor]` key that is meant for a drafter but does not name it exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{suite}: [suite.acceptance_floor] {key:?} does not name the drafter {drafter:?} (keys are \
     drafter file stems, exact to the letter): its floor would never apply; write {drafter:?}"
)]
pub struct FloorKeyError {
    /// Suite file.
    pub suite: String,
    /// The near-miss key.
    pub key: String,
    /// The drafter's file stem.
    pub drafter: String,
}

/// The floor for `drafter` (file stem) in `floors` (`[suite.acceptance_floor]` of the suite
/// file `suite`): the exact key's value, or `None` when no key names it.
///
/// Errors: [`FloorKeyError`] when no key is exact but one names the drafter in another case or
/// with `.gguf` (`"dense-assistant.f32"`, `"dense-assistant.F32.gguf"` for
/// `dense-assistant.F32`): a typo that would leave the drafter without its floor, silently.
pub fn floor_for(
    suite: &str,
    floors: &BTreeMap<String, f64>,
    drafter: &str,
) -> Result<Option<f64>, FloorKeyError> {
    if let Some(f) = floors.get(drafter) {
        return Ok(Some(*f));
    }
    let loose = |k: &str| {
        let k = k.strip_suffix(".gguf").unwrap_or(k);
        k.eq_ignore_ascii_case(drafter)
    };
    match floors.keys().find(|k| loose(k)) {
        Some(key) => Err(FloorKeyError {
            suite: suite.to_string(),
            key: key.clone(),
            drafter: drafter.to_string(),
        }),
        None => Ok(None),
    }
}

/// Under `--require-acceptance`, the warning for a drafter that `[suite.acceptance_floor]` (not
/// empty) has no floor for: its acceptance is measured but cannot fail the run, which the
/// option's user would otherwise not learn. `None` when a key names it or the table is empty.
pub fn no_floor_warning(
    suite: &str,
    floors: &BTreeMap<String, f64>,
    drafter: &str,
) -> Option<String> {
    (!floors.is_empty() && !floors.contains_key(drafter)).then(|| {
        format!(
            "{suite}: --require-acceptance: [suite.acceptance_floor] has no floor for drafter \
             {drafter:?} (keys: {}): its acceptance is reported but cannot fail the run",
            floors
                .keys()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// Whether `run` can be the oracle's greedy `spec:k` output for `req`: its tokens a greedy
/// output for the request's `max_tokens` and stop ids ([`Golden::length_problem`]: speculative
/// decoding emits what plain greedy decoding does), no more accepted drafts than drafted, no
/// more drafted than `k` per verify round, and no more rounds than tokens (each round emits
/// one at least).
fn plausible_run(run: &OracleSpecRun, req: &Request, k: usize) -> bool {
    Golden::length_problem(&run.tokens, req.max_tokens, &req.stop).is_none()
        && run.accepted <= run.drafted
        && run.drafted <= run.rounds.saturating_mul(k)
        && run.rounds <= run.tokens.len()
}

/// One f64 oracle `spec:K` run (cached).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleSpecRun {
    /// Emitted ids.
    pub tokens: Vec<u32>,
    /// Verify rounds.
    pub rounds: usize,
    /// Drafted tokens.
    pub drafted: usize,
    /// Accepted drafts.
    pub accepted: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct SpecCacheEntry {
    target_sha256: String,
    drafter_sha256: String,
    k: usize,
    prompt: Vec<u32>,
    max_tokens: usize,
    stop: Vec<u32>,
    run: OracleSpecRun,
}

/// The f64 oracle's `spec:K` with the real assistant, cached on disk.
pub struct OracleSpec<'a> {
    /// Target model (f64 oracle).
    pub target: &'a Model<f64>,
    /// The MTP assistant, in f64.
    pub assistant: &'a Assistant<f64>,
    /// Target SHA-256.
    pub target_sha256: String,
    /// Drafter SHA-256.
    pub drafter_sha256: String,
    /// Cache folder (`target/conformance/cache`); `None` disables caching.
    pub dir: Option<PathBuf>,
    /// Runs answered from the cache.
    pub hits: usize,
    /// Runs computed.
    pub misses: usize,
}

impl OracleSpec<'_> {
    fn key(&self, req: &Request, k: usize) -> String {
        let mut h = Sha256::new();
        h.update(b"spec\0");
        h.update(self.target_sha256.as_bytes());
        h.update(b"\0");
        h.update(self.drafter_sha256.as_bytes());
        h.update((k as u64).to_le_bytes());
        h.update((req.max_tokens as u64).to_le_bytes());
        h.update((req.stop.len() as u64).to_le_bytes());
        for s in &req.stop {
            h.update(s.to_le_bytes());
        }
        for id in &req.prompt {
            h.update(id.to_le_bytes());
        }
        hex::encode(h.finalize())
    }

    /// The cached run of `req` at `k`, or `None` (a miss: run again and the entry rewritten)
    /// when the file is missing, unreadable, for another key, or not what a `spec:k` run of
    /// `req` gives ([`plausible_run`]: a truncated or hand-edited entry was returned as the
    /// oracle's run, its acceptance reported and its tokens compared with the golden).
    fn load(&self, path: &Path, req: &Request, k: usize) -> Option<OracleSpecRun> {
        let e: SpecCacheEntry = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        (e.target_sha256 == self.target_sha256
            && e.drafter_sha256 == self.drafter_sha256
            && e.k == k
            && e.prompt == req.prompt
            && e.max_tokens == req.max_tokens
            && e.stop == req.stop
            && plausible_run(&e.run, req, k))
        .then_some(e.run)
    }

    /// The oracle's greedy `spec:k` on `req` (§4.1 defaults of `reference::spec`), from the
    /// cache when present. A cache write failure is reported once per process
    /// ([`crate::oracle::write_cache_entry`]); the run is returned all the same.
    ///
    /// Errors: the oracle's speculative decoder fails (named by request id).
    pub fn run(&mut self, req: &Request, k: usize) -> Result<OracleSpecRun, EngineError> {
        let path = self
            .dir
            .as_ref()
            .map(|d| d.join(format!("spec-{}.json", self.key(req, k))));
        if let Some(r) = path.as_deref().and_then(|p| self.load(p, req, k)) {
            self.hits += 1;
            return Ok(r);
        }
        let mut drafter = self.assistant;
        let out = spec_decode(
            self.target,
            &mut drafter,
            &req.prompt,
            SpecOptions::new(k, req.max_tokens, &req.stop),
        )
        .map_err(|e| EngineError::Request {
            id: req.id.clone(),
            message: format!("oracle spec:{k}: {e}"),
        })?;
        self.misses += 1;
        let run = OracleSpecRun {
            tokens: out.tokens,
            rounds: out.stats.rounds,
            drafted: out.stats.drafted,
            accepted: out.stats.accepted,
        };
        if let Some(p) = path {
            let e = SpecCacheEntry {
                target_sha256: self.target_sha256.clone(),
                drafter_sha256: self.drafter_sha256.clone(),
                k,
                prompt: req.prompt.clone(),
                max_tokens: req.max_tokens,
                stop: req.stop.clone(),
                run: run.clone(),
            };
            crate::oracle::write_cache_entry(&p, &serde_json::to_string(&e).unwrap_or_default());
        }
        Ok(run)
    }
}

/// The drafter as the run names it: file stem and SHA-256.
#[derive(Debug, Clone)]
pub struct DrafterRef {
    /// File stem (key of `[suite.acceptance_floor]`).
    pub stem: String,
    /// SHA-256.
    pub sha256: String,
}

/// Builds the acceptance rows of `run` (one per `spec:K` mode run): engine counters from the
/// entries, the oracle's own `spec:K` on the same prompts through `oracle` (when given), the
/// floor, and the `slow-spec` decision.
///
/// `reqs` are the run's requests (prompt ids by request id), `goldens` the plain greedy
/// outputs. Errors: the oracle fails.
pub fn acceptance_rows(
    run: &Run,
    reqs: &[Request],
    drafter: &DrafterRef,
    floor: Option<f64>,
    mut oracle: Option<&mut OracleSpec<'_>>,
    goldens: Option<&BTreeMap<String, Golden>>,
) -> Result<Vec<Acceptance>, EngineError> {
    let mut out = Vec::new();
    for mode in &run.modes {
        let Ok(Mode::Spec { k }) = Mode::parse(mode) else {
            continue;
        };
        let mut engine = AcceptanceCount::default();
        let mut prompts = Vec::new();
        for e in run.entries.iter().filter(|e| &e.mode == mode) {
            if let (Some(s), false) = (&e.spec, e.verdict == Verdict::Error) {
                engine.add(s.drafted, s.accepted);
                prompts.push(e.prompt.as_str());
            }
        }
        let mut notes = Vec::new();
        let (mut oracle_count, mut matches, mut cache) = (None, None, (0, 0));
        if let Some(o) = oracle.as_deref_mut() {
            let (h0, m0) = (o.hits, o.misses);
            let mut count = AcceptanceCount::default();
            let mut all_match: Option<bool> = None;
            for p in &prompts {
                let Some(req) = reqs.iter().find(|r| r.id == *p) else {
                    continue;
                };
                let r = o.run(req, k)?;
                count.add(r.drafted, r.accepted);
                if let Some(g) = goldens.and_then(|g| g.get(*p)) {
                    let same = r.tokens == g.tokens;
                    if !same {
                        let i = r
                            .tokens
                            .iter()
                            .zip(&g.tokens)
                            .position(|(a, b)| a != b)
                            .unwrap_or(r.tokens.len().min(g.tokens.len()));
                        notes.push(format!(
                            "oracle {mode} differs from plain greedy on {p} at output index {i}"
                        ));
                    }
                    all_match = Some(all_match.unwrap_or(true) && same);
                }
            }
            cache = (o.hits - h0, o.misses - m0);
            oracle_count = Some(count);
            matches = all_match;
        } else {
            notes.push(
                "oracle acceptance not computed (it runs for drafters with a floor on suites \
                 with oracle_acceptance = true, or with --oracle-acceptance)"
                    .into(),
            );
        }
        let slow = match (floor, engine.rate) {
            (Some(f), Some(r)) => r < f,
            _ => false,
        };
        if slow {
            notes.insert(
                0,
                format!(
                    "slow-spec: engine acceptance {:.3} < floor {:.3} (oracle {})",
                    engine.rate.unwrap_or(0.0),
                    floor.unwrap_or(0.0),
                    oracle_count
                        .as_ref()
                        .and_then(|c| c.rate)
                        .map_or("–".into(), |r| format!("{r:.3}"))
                ),
            );
        }
        out.push(Acceptance {
            mode: mode.clone(),
            drafter: drafter.stem.clone(),
            drafter_sha256: drafter.sha256.clone(),
            engine,
            oracle: oracle_count,
            oracle_matches_plain: matches,
            oracle_cache: cache,
            floor,
            slow_spec: slow,
            note: (!notes.is_empty()).then(|| notes.join("; ")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache entry that is not a `spec:k` run of its request (tokens cut short of max_tokens
    /// without a stop id, more accepted than drafted, more drafted than k per round) is a miss:
    /// run again, giving what a fresh run gives, and rewritten (the next read hits). Expected:
    /// the first run without a cache.
    #[test]
    fn a_damaged_spec_cache_entry_is_run_again() {
        let (Some(t), Some(d)) = (
            crate::test_fixture_model("dense-target.Q4_K_M.gguf"),
            crate::test_fixture_model("dense-assistant.F32.gguf"),
        ) else {
            return;
        };
        let target = Model::<f64>::load(&t).unwrap();
        let assistant = Assistant::<f64>::load(&d).unwrap();
        let dir = std::env::temp_dir().join(format!("spec-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spec = |dir: Option<PathBuf>| OracleSpec {
            target: &target,
            assistant: &assistant,
            target_sha256: "t".into(),
            drafter_sha256: "d".into(),
            dir,
            hits: 0,
            misses: 0,
        };
        let req = Request {
            id: "r".into(),
            prompt: vec![2, 818, 5279, 529],
            max_tokens: 6,
            stop: vec![1, 106],
        };
        let want = spec(None).run(&req, 2).unwrap();
        assert!(plausible_run(&want, &req, 2), "{want:?}");
        let mut o = spec(Some(dir.clone()));
        assert_eq!(o.run(&req, 2).unwrap(), want);
        assert_eq!((o.hits, o.misses), (0, 1));
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        type Damage = fn(&mut serde_json::Value);
        let damages: [Damage; 3] = [
            |v| {
                v["run"]["tokens"].as_array_mut().unwrap().pop();
            },
            |v| {
                let d = v["run"]["drafted"].as_u64().unwrap();
                v["run"]["accepted"] = serde_json::json!(d + 1);
            },
            |v| {
                let r = v["run"]["rounds"].as_u64().unwrap();
                v["run"]["drafted"] = serde_json::json!(2 * r + 1);
            },
        ];
        for damage in damages {
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            damage(&mut v);
            std::fs::write(&file, v.to_string()).unwrap();
            let mut o = spec(Some(dir.clone()));
            assert_eq!(o.run(&req, 2).unwrap(), want);
            assert_eq!((o.hits, o.misses), (0, 1));
            assert_eq!(o.run(&req, 2).unwrap(), want);
            assert_eq!((o.hits, o.misses), (1, 1));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The exact key gives the floor; a key naming the drafter in another case or with `.gguf`
    /// is an error naming both; no key for it is no floor, and under `--require-acceptance` a
    /// warning naming the drafter and the keys when the table has any.
    #[test]
    fn floors_are_found_by_the_exact_drafter_stem() {
        let floors: BTreeMap<String, f64> = [("dense-assistant.F32".to_string(), 0.85)].into();
        assert_eq!(
            floor_for("s.toml", &floors, "dense-assistant.F32"),
            Ok(Some(0.85))
        );
        assert_eq!(
            floor_for("s.toml", &floors, "syn-dense-assistant"),
            Ok(None)
        );
        let wrong: BTreeMap<String, f64> = [("dense-assistant.f32".to_string(), 1.0)].into();
        let e = floor_for("s.toml", &wrong, "dense-assistant.F32").unwrap_err();
        assert_eq!(e.key, "dense-assistant.f32");
        assert_eq!(
            no_floor_warning("s.toml", &floors, "syn-dense-assistant.UD-Q2_K_XL").unwrap(),
            "s.toml: --require-acceptance: [suite.acceptance_floor] has no floor for drafter \
             \"syn-dense-assistant.UD-Q2_K_XL\" (keys: \"dense-assistant.F32\"): its acceptance \
             is reported but cannot fail the run"
        );
        assert_eq!(
            no_floor_warning("s.toml", &floors, "dense-assistant.F32"),
            None
        );
        assert_eq!(no_floor_warning("s.toml", &BTreeMap::new(), "x"), None);
    }
}
