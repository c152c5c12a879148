//! The oracle side of the rule (`design/conformance.md` §3): the [`Oracle`] interface (teacher-
//! forced scoring with exact chosen-token logits), the [`Codec`] interface (prompt → ids,
//! ids → text), and the scoring cache keyed by (model SHA-256, token ids) under
//! `target/conformance/cache/`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::EngineError;
use crate::rule::OracleRow;
use crate::suite::PromptInput;

/// The f64 arbiter: teacher-forced scoring of token sequences on the model under test.
pub trait Oracle {
    /// Lowercase hex SHA-256 of the model file the oracle runs.
    fn model_sha256(&self) -> &str;
    /// Vocabulary size V.
    fn vocab_size(&self) -> usize;
    /// Suppressed ids (`tokenizer.ggml.suppress_tokens`), excluded from argmax and top-k.
    fn suppressed_ids(&self) -> Vec<u32>;
    /// The model's context length (GGUF `context_length`): the most tokens, prompt and output
    /// together, a request may need. `None` (the default) when unknown: not checked.
    fn context_length(&self) -> Option<usize> {
        None
    }
    /// Teacher-forced scoring: for each sequence `s` and position `t` the top-`top_k` of the
    /// next-token logits after `s[..=t]` (suppressed ids excluded) and `chosen` = the logit of
    /// `s[t+1]` (`None` at the last position). Rows `[len(s)]` per sequence
    /// (`reference::score::score`).
    fn score(
        &mut self,
        seqs: &[Vec<u32>],
        top_k: usize,
    ) -> Result<Vec<Vec<OracleRow>>, EngineError>;
}

/// Turns suite prompts into token ids and ids into text (the model's tokenizer + chat template).
pub trait Codec {
    /// Prompt ids: `Text` is encoded with BOS; `Messages` through the chat template with the
    /// generation prompt (gemma4-chat §4 BOS rule).
    fn encode(&self, input: &PromptInput, enable_thinking: bool) -> Result<Vec<u32>, String>;
    /// Decoded text (special tokens kept); never fails (unknown ids shown as `<id:N>`).
    fn decode(&self, ids: &[u32]) -> String;
}

/// One cached scoring (file `target/conformance/cache/<key>.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CacheEntry {
    model_sha256: String,
    top_k: usize,
    ids: Vec<u32>,
    rows: Vec<OracleRow>,
}

/// Whether `rows` can be [`Oracle::score`]'s answer for `ids` with `top_k`: one row per id,
/// each with 1..=`top_k` candidates, ids once per row, logits descending (finite or −∞), and
/// `chosen` (the next id's logit) known at every position but the last and not NaN/+∞.
fn plausible_rows(rows: &[OracleRow], ids: &[u32], top_k: usize) -> bool {
    let ok_logit = |l: f64| !l.is_nan() && l != f64::INFINITY;
    rows.len() == ids.len()
        && rows.iter().enumerate().all(|(t, r)| {
            let mut seen: Vec<u32> = r.top_k.iter().map(|x| x.0).collect();
            seen.sort_unstable();
            (1..=top_k).contains(&r.top_k.len())
                && seen.windows(2).all(|w| w[0] != w[1])
                && r.top_k.iter().all(|x| ok_logit(x.1))
                && r.top_k.windows(2).all(|w| w[1].1 <= w[0].1)
                && (t + 1 == ids.len() || r.chosen.is_some_and(ok_logit))
        })
}

/// Whether a failed cache write has been reported ([`write_cache_entry`]): once per process.
static CACHE_WRITE_WARNED: AtomicBool = AtomicBool::new(false);

/// Writes one cache entry `text` to `path` (its folder created). The cache only saves time, so
/// a failure does not stop the run: the first one of the process is reported on stderr as one
/// `warning: …` line naming the file and the cause (a read-only `target/` was silent, and every
/// later run scored everything again); later ones only return `false`.
pub fn write_cache_entry(path: &Path, text: &str) -> bool {
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, text));
    match written {
        Ok(()) => true,
        Err(e) => {
            if !CACHE_WRITE_WARNED.swap(true, Ordering::SeqCst) {
                eprintln!(
                    "warning: oracle cache not written: {}: {e} (the run goes on; what is not \
                     cached is computed again next time; this warning is printed once)",
                    path.display()
                );
            }
            false
        }
    }
}

/// Oracle scorings cached on disk by (model SHA-256, top-k, token ids).
#[derive(Debug, Clone)]
pub struct ScoreCache {
    dir: Option<PathBuf>,
    /// Number of scorings answered from the cache.
    pub hits: usize,
    /// Number of scorings computed by the oracle.
    pub misses: usize,
    /// Number of computed scorings whose cache entry could not be written
    /// ([`write_cache_entry`] warns once).
    pub write_failures: usize,
}

impl ScoreCache {
    /// A cache in `dir` (created on first write); `None` disables caching.
    pub fn new(dir: Option<PathBuf>) -> ScoreCache {
        ScoreCache {
            dir,
            hits: 0,
            misses: 0,
            write_failures: 0,
        }
    }

    fn key(sha: &str, top_k: usize, ids: &[u32]) -> String {
        let mut h = Sha256::new();
        h.update(sha.as_bytes());
        h.update((top_k as u64).to_le_bytes());
        for id in ids {
            h.update(id.to_le_bytes());
        }
        hex::encode(h.finalize())
    }

    fn path(&self, key: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{key}.json")))
    }

    /// The cached rows of `ids`, or `None` (a miss: scored again and the entry rewritten) when
    /// the file is missing, unreadable, for another key, or not what [`Oracle::score`] gives
    /// ([`plausible_rows`]: a truncated or hand-edited entry was returned as the oracle's rows).
    fn load(&self, path: &Path, sha: &str, top_k: usize, ids: &[u32]) -> Option<Vec<OracleRow>> {
        let text = std::fs::read_to_string(path).ok()?;
        let e: CacheEntry = serde_json::from_str(&text).ok()?;
        (e.model_sha256 == sha
            && e.top_k == top_k
            && e.ids == ids
            && plausible_rows(&e.rows, ids, top_k))
        .then_some(e.rows)
    }

    /// Scores `seqs` with the oracle, answering from the cache where possible; rows as
    /// [`Oracle::score`]. A cache write failure is counted ([`ScoreCache::write_failures`]) and
    /// reported once per process ([`write_cache_entry`]); the scoring is returned all the same.
    pub fn score(
        &mut self,
        oracle: &mut dyn Oracle,
        seqs: &[Vec<u32>],
        top_k: usize,
    ) -> Result<Vec<Vec<OracleRow>>, EngineError> {
        let sha = oracle.model_sha256().to_string();
        let mut out: Vec<Option<Vec<OracleRow>>> = vec![None; seqs.len()];
        let mut todo = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            let key = Self::key(&sha, top_k, s);
            match self.path(&key).and_then(|p| self.load(&p, &sha, top_k, s)) {
                Some(rows) => {
                    self.hits += 1;
                    out[i] = Some(rows);
                }
                None => todo.push(i),
            }
        }
        if !todo.is_empty() {
            let batch: Vec<Vec<u32>> = todo.iter().map(|&i| seqs[i].clone()).collect();
            let scored = oracle.score(&batch, top_k)?;
            if scored.len() != batch.len() {
                return Err(EngineError::Other(format!(
                    "oracle returned {} scorings for {} sequences",
                    scored.len(),
                    batch.len()
                )));
            }
            for (&i, rows) in todo.iter().zip(scored) {
                self.misses += 1;
                if let Some(p) = self.path(&Self::key(&sha, top_k, &seqs[i])) {
                    let e = CacheEntry {
                        model_sha256: sha.clone(),
                        top_k,
                        ids: seqs[i].clone(),
                        rows: rows.clone(),
                    };
                    let text = serde_json::to_string(&e).unwrap_or_default();
                    if !write_cache_entry(&p, &text) {
                        self.write_failures += 1;
                    }
                }
                out[i] = Some(rows);
            }
        }
        Ok(out.into_iter().map(|r| r.unwrap_or_default()).collect())
    }

    /// Oracle rows on the engine's own prefix for every output index of a trajectory: scores
    /// `prompt ‖ output` and returns rows `[output.len()]`, row `t` = position `P − 1 + t` with
    /// `chosen` = the oracle logit of `output[t]`.
    pub fn score_trajectory(
        &mut self,
        oracle: &mut dyn Oracle,
        prompt: &[u32],
        output: &[u32],
        top_k: usize,
    ) -> Result<Vec<OracleRow>, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::Other("empty prompt cannot be scored".into()));
        }
        if output.is_empty() {
            return Ok(Vec::new());
        }
        let mut seq = prompt.to_vec();
        seq.extend_from_slice(output);
        // The last token's own row is not needed: score up to y_{n-1}, with y_n as `chosen`
        // of the row before it (the oracle gives `chosen` from the sequence itself).
        let rows = self.score(oracle, &[seq], top_k)?.pop().unwrap_or_default();
        let p = prompt.len();
        if rows.len() < p + output.len() - 1 {
            return Err(EngineError::Other(format!(
                "oracle returned {} rows for a sequence of {}",
                rows.len(),
                p + output.len()
            )));
        }
        Ok(rows[p - 1..p - 1 + output.len()].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::ToyModel;

    /// A cache entry that is not a scoring of its key (one row dropped, or the top-2 ids
    /// swapped so the row is no longer descending) is a miss: scored again by the oracle,
    /// giving what a fresh scoring gives, and rewritten (the next read hits). Expected rows: the
    /// toy oracle's own scoring without a cache; the row count is the sequence's length.
    #[test]
    fn a_damaged_cache_entry_is_scored_again() {
        let dir = std::env::temp_dir().join(format!("score-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let seq = vec![2u32, 10, 11, 12];
        let want = ScoreCache::new(None)
            .score(&mut ToyModel::new(64), std::slice::from_ref(&seq), 4)
            .unwrap();
        assert_eq!(want[0].len(), seq.len());
        let mut c = ScoreCache::new(Some(dir.clone()));
        assert_eq!(
            c.score(&mut ToyModel::new(64), std::slice::from_ref(&seq), 4)
                .unwrap(),
            want
        );
        assert_eq!((c.hits, c.misses), (0, 1));
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        type Damage = fn(&mut serde_json::Value);
        let damages: [Damage; 2] = [
            |v| {
                v["rows"].as_array_mut().unwrap().pop();
            },
            |v| {
                let row = &mut v["rows"][1]["top_k"];
                let (a, b) = (row[0][0].clone(), row[1][0].clone());
                row[0][0] = b;
                row[1][0] = a;
                let (a, b) = (row[0][1].clone(), row[1][1].clone());
                row[0][1] = b;
                row[1][1] = a;
            },
        ];
        for damage in damages {
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
            damage(&mut v);
            std::fs::write(&file, v.to_string()).unwrap();
            let mut c = ScoreCache::new(Some(dir.clone()));
            let got = c.score(&mut ToyModel::new(64), std::slice::from_ref(&seq), 4);
            assert_eq!(got.unwrap(), want);
            assert_eq!((c.hits, c.misses), (0, 1));
            let got = c.score(&mut ToyModel::new(64), std::slice::from_ref(&seq), 4);
            assert_eq!(got.unwrap(), want);
            assert_eq!((c.hits, c.misses), (1, 1));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cache folder that cannot be made (its path is a file) does not stop scoring: the rows
    /// are the oracle's, each failed write is counted, and nothing is answered from the cache.
    #[test]
    fn an_unwritable_cache_is_counted_not_fatal() {
        let file = std::env::temp_dir().join(format!("score-cache-file-{}", std::process::id()));
        std::fs::write(&file, b"not a folder").unwrap();
        let seqs = vec![vec![2u32, 10, 11], vec![2, 12]];
        let want = ScoreCache::new(None)
            .score(&mut ToyModel::new(64), &seqs, 4)
            .unwrap();
        let mut c = ScoreCache::new(Some(file.join("cache")));
        assert_eq!(c.score(&mut ToyModel::new(64), &seqs, 4).unwrap(), want);
        assert_eq!((c.hits, c.misses, c.write_failures), (0, 2, 2));
        assert_eq!(c.score(&mut ToyModel::new(64), &seqs, 4).unwrap(), want);
        assert_eq!((c.hits, c.misses, c.write_failures), (0, 4, 4));
        std::fs::remove_file(&file).unwrap();
    }
}
