//! The MTP assistant (drafter) and greedy speculative decoding `spec:K` of the oracle:
//! `spec/gemma4-assistant-mtp.md` §2–§3 ([`assistant`]), §4.1 (the normative loop,
//! [`SpecDecoder`]), §4.2 (llama.cpp's first round and transformers' visible rows, as switches),
//! §6 (rollback), §7 (counters, [`SpecStats`]).
//!
//! **Rollback.** The target cache keeps every position on full-attention layers and a ring of
//! `W + R` rows on sliding layers, written only after a forward's queries attended (option 1 of
//! §6.2, `crate::decode`); [`SpecDecoder`] makes it with reserve `R = K`, and a round removes
//! at most `K_r ≤ K` rows, so truncating to `p + n' + 1` positions always finds the `W − 1`
//! rows the next query needs and restores exactly the cache a plain run holds (the
//! transformers emulation also reads the row before them: `R ≥ 1`). The oracle's arithmetic
//! does not depend on the number of rows of a forward (`model::linear`), so a verify row and
//! the plain decode row for the same prefix are bit-identical and `spec:K` emits the plain
//! greedy ids token for token.

pub mod assistant;
pub mod drafter;

use std::borrow::Cow;
use std::ops::Range;

pub use assistant::{Assistant, DraftStep, DrafterKv, Head, KvRows, StoreLayers};
pub use drafter::{CorruptionRule, Draft, Drafter, RoundContext, ScriptStep, ScriptedDrafter};

use crate::config::ConfigError;
use crate::decode::{KvCache, KvCacheError};
use crate::gguf::GgufError;
use crate::model::logits::argmax;
use crate::model::{Float, Model, ModelError};

/// Errors of the drafter and of speculative decoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The target or the drafter failed (forward, weights).
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The assistant's metadata is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The assistant GGUF could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Drafter and target do not fit together (§1.1), or a head is unavailable.
    #[error("assistant/target mismatch: {0}")]
    Pairing(String),
    /// A drafter tensor has an unusable layout.
    #[error("tensor '{tensor}': {problem}")]
    BadTensor {
        /// GGUF tensor name.
        tensor: String,
        /// What is wrong.
        problem: String,
    },
    /// An option is out of range (named).
    #[error("bad option: {0}")]
    Option(String),
    /// A drafter returned a draft of the wrong length or with an id `≥ V`.
    #[error("drafter returned {got:?} for round {round}, expected {expected} ids below {vocab}")]
    BadDraft {
        /// 1-based round.
        round: usize,
        /// Drafts returned.
        got: Vec<u32>,
        /// `K_r`.
        expected: usize,
        /// `V`.
        vocab: usize,
    },
    /// Internal state does not hold what the loop expects (named).
    #[error("speculative state: {0}")]
    State(String),
    /// The target cache could not be read or rolled back (layer and positions named).
    #[error(transparent)]
    Cache(#[from] KvCacheError),
}

/// Where the first round starts (§4.1 prefill vs §4.2 llama.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FirstRound {
    /// §4.1 (transformers' code): prefill the whole prompt, emit its argmax, draft from it.
    #[default]
    Spec41,
    /// llama.cpp (`lc:simple` 126–148): prefill `P−1` tokens, emit nothing, draft from the last
    /// prompt token with the hidden state of row `P−2`; needs `P ≥ 2`.
    LlamaCpp,
}

/// Which target rows the drafter sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Visibility {
    /// §2.5 (normative; what llama.cpp does): full rows `0 … p−1`, sliding rows
    /// `max(0, p−W+1) … p−1`.
    #[default]
    Intended,
    /// transformers 5.23.0 emulation (§4.2, README-models §7): full rows `0 … p` of the last
    /// target forward (row `p` = a rejected draft after a partial rejection); sliding rows = that
    /// forward's sliding tensor (the `W−1` rows cached before it plus its own rows), cut to the
    /// first `p+1` entries, of which the last `W+1` are visible (rejected drafts included).
    Transformers,
}

/// Options of one speculative run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecOptions {
    /// `K ≥ 1`: drafts per round (constant, `spec:K`).
    pub k: usize,
    /// Emission budget.
    pub max_new_tokens: usize,
    /// End-of-generation ids: emission stops after the first one (it is emitted).
    pub stop: Vec<u32>,
    /// First-round convention.
    pub first_round: FirstRound,
    /// Drafter visibility.
    pub visibility: Visibility,
    /// Prefill chunk size (`None` = one forward over the whole prefill).
    pub prefill_chunk: Option<usize>,
}

impl SpecOptions {
    /// §4.1 defaults: `K`, budget and stop ids given, first round §4.1, intended visibility,
    /// one prefill chunk.
    pub fn new(k: usize, max_new_tokens: usize, stop: &[u32]) -> SpecOptions {
        SpecOptions {
            k,
            max_new_tokens,
            stop: stop.to_vec(),
            first_round: FirstRound::Spec41,
            visibility: Visibility::Intended,
            prefill_chunk: None,
        }
    }
}

/// One verify round of the trajectory (§7): `(p, K_r, drafts, n', bonus)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundLog {
    /// Round position `p` (position of the token fed first, `t_p`).
    pub p: usize,
    /// `K_r`.
    pub k: usize,
    /// `d_1 … d_{K_r}`.
    pub drafted: Vec<u32>,
    /// `n'`: accepted drafts after EOS/budget truncation.
    pub accepted: usize,
    /// Last emitted id of the round (the bonus `b`, or the truncating EOS / budget end).
    pub bonus: u32,
}

/// Counters of §7 for one run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpecStats {
    /// Verify forwards (`K_r ≥ 1`).
    pub rounds: usize,
    /// `D` calls.
    pub drafter_forwards: usize,
    /// `prefill_chunks + rounds + plain_steps`.
    pub target_forwards: usize,
    /// Target forwards spent on the prefill.
    pub prefill_chunks: usize,
    /// `Σ K_r`.
    pub drafted: usize,
    /// `Σ n'`.
    pub accepted: usize,
    /// Single-row target steps taken when the budget left no room to draft (`K_r = 0`).
    pub plain_steps: usize,
    /// `n'` per round.
    pub accepted_per_round: Vec<usize>,
    /// The trajectory.
    pub round_log: Vec<RoundLog>,
    /// Tokens emitted.
    pub emitted: usize,
}

impl SpecStats {
    /// `accepted / drafted` (0 when nothing was drafted).
    pub fn acceptance_rate(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    /// `(accepted + rounds) / rounds`: tokens emitted per verify forward (0 without rounds).
    pub fn mean_accepted_length(&self) -> f64 {
        if self.rounds == 0 {
            0.0
        } else {
            (self.accepted + self.rounds) as f64 / self.rounds as f64
        }
    }
}

/// Result of a speculative run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecOutput {
    /// Emitted ids (stop id included when one ended the run).
    pub tokens: Vec<u32>,
    /// Counters and trajectory.
    pub stats: SpecStats,
}

/// Rows of rejected drafts kept for the transformers emulation, per store layer.
#[derive(Debug, Clone)]
struct TfState<F> {
    /// Positions covered by the last target forward's sliding tensor (cached rows before it and
    /// its own rows).
    sliding_tensor: Range<usize>,
    /// Last position written by the last target forward.
    last_written: usize,
    /// `(layer, k, v)` of the rejected rows, positions `cache.len() …`.
    saved: Vec<(usize, Vec<F>, Vec<F>)>,
}

/// The §4.1 loop as a state machine: [`SpecDecoder::new`] runs the prefill, each
/// [`SpecDecoder::step`] one round (or plain step), so tests can inspect the cache between rounds.
pub struct SpecDecoder<'m, F: Float> {
    target: &'m Model<F>,
    opts: SpecOptions,
    store: StoreLayers,
    cache: KvCache<F>,
    /// `t_0 … t_p`.
    committed: Vec<u32>,
    /// Emitted ids.
    emitted: Vec<u32>,
    /// `h` `[H_T]`.
    hidden: Vec<F>,
    stats: SpecStats,
    done: bool,
    tf: Option<TfState<F>>,
}

impl<'m, F: Float> SpecDecoder<'m, F> {
    /// Validates the options and runs the prefill (§4.1 "Prefill", or llama.cpp's first round).
    /// Errors: `K = 0`, empty prompt, llama.cpp first round with `P < 2`, ids `≥ V`, forward
    /// failures.
    pub fn new(
        target: &'m Model<F>,
        prompt: &[u32],
        opts: SpecOptions,
    ) -> Result<SpecDecoder<'m, F>, SpecError> {
        if opts.k == 0 {
            return Err(SpecError::Option("K must be at least 1".into()));
        }
        if prompt.is_empty() {
            return Err(SpecError::Option("empty prompt".into()));
        }
        if opts.first_round == FirstRound::LlamaCpp && prompt.len() < 2 {
            return Err(SpecError::Option(
                "llama.cpp's first round needs a prompt of at least 2 tokens".into(),
            ));
        }
        let mut d = SpecDecoder {
            target,
            store: StoreLayers::of(target.config()),
            cache: target.new_cache_with_reserve(opts.k),
            committed: prompt.to_vec(),
            emitted: Vec::new(),
            hidden: Vec::new(),
            stats: SpecStats::default(),
            done: opts.max_new_tokens == 0,
            tf: None,
            opts,
        };
        if d.done {
            return Ok(d);
        }
        let pre = match d.opts.first_round {
            FirstRound::Spec41 => prompt.len(),
            FirstRound::LlamaCpp => prompt.len() - 1,
        };
        let chunk = d.opts.prefill_chunk.unwrap_or(pre).max(1);
        let h_n = target.config().n_embd;
        let mut last = Vec::new();
        for part in prompt[..pre].chunks(chunk) {
            let hn = target.forward_hidden_batch(&mut [&mut d.cache], &[part])?;
            d.stats.prefill_chunks += 1;
            d.stats.target_forwards += 1;
            last = hn[hn.len() - h_n..].to_vec();
        }
        if d.opts.visibility == Visibility::Transformers {
            d.tf = Some(TfState {
                sliding_tensor: 0..pre,
                last_written: pre - 1,
                saved: Vec::new(),
            });
        }
        if d.opts.first_round == FirstRound::Spec41 {
            let z = target.logits_of_hidden(&last)?;
            let t = d.argmax_target(&z)?;
            d.emit(&[t]);
        }
        d.hidden = last;
        Ok(d)
    }

    /// Whether the run has ended (stop id emitted or budget reached).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The target cache (holds exactly positions `0 … p−1` between rounds).
    pub fn cache(&self) -> &KvCache<F> {
        &self.cache
    }

    /// Committed tokens `t_0 … t_p`.
    pub fn committed(&self) -> &[u32] {
        &self.committed
    }

    /// Emitted ids so far.
    pub fn emitted(&self) -> &[u32] {
        &self.emitted
    }

    /// Carried hidden `h` `[H_T]` (final-normed target state of row `p−1`).
    pub fn hidden(&self) -> &[F] {
        &self.hidden
    }

    /// The current round position `p`.
    pub fn position(&self) -> usize {
        self.committed.len() - 1
    }

    /// Counters so far.
    pub fn stats(&self) -> &SpecStats {
        &self.stats
    }

    /// The target store layers the drafter reads (§2.3).
    pub fn store_layers(&self) -> &StoreLayers {
        &self.store
    }

    /// The rows the drafter sees in the next round, per [`SpecOptions::visibility`].
    pub fn drafter_kv(&self) -> Result<DrafterKv<'_, F>, SpecError> {
        let p = self.position();
        let Some(tf) = &self.tf else {
            return DrafterKv::intended(
                &self.cache,
                &self.store,
                p,
                self.target.config().sliding_window,
            );
        };
        let w = self.target.config().sliding_window;
        let full = 0..(p.min(tf.last_written) + 1);
        let lo = tf.sliding_tensor.start;
        let end = tf.sliding_tensor.end.min(lo + p + 1);
        let sliding = end.saturating_sub(w.saturating_add(1)).max(lo)..end;
        Ok(DrafterKv {
            sliding: self
                .store
                .sliding
                .map(|l| self.rows_with_saved(l, sliding.clone()))
                .transpose()?,
            full: self
                .store
                .full
                .map(|l| self.rows_with_saved(l, full.clone()))
                .transpose()?,
        })
    }

    /// Rows `range` of store layer `l`: committed ones from the cache, later ones from the rows
    /// saved before the last rollback (transformers emulation).
    fn rows_with_saved(&self, l: usize, range: Range<usize>) -> Result<KvRows<'_, F>, SpecError> {
        let len = self.cache.len();
        if range.end <= len {
            return Ok(KvRows::from_cache(&self.cache, l, range)?);
        }
        let (n_kv, head_dim) = self.cache.kv_dims(l);
        let w = n_kv * head_dim;
        let (k, v) = self.cache.rows(l, range.start.min(len)..len)?;
        let (mut k, mut v) = (k.into_owned(), v.into_owned());
        if let Some((_, sk, sv)) = self
            .tf
            .as_ref()
            .and_then(|t| t.saved.iter().find(|s| s.0 == l))
        {
            let skip = range.start.saturating_sub(len);
            let n = range.end - len.max(range.start);
            k.extend_from_slice(&sk[skip * w..(skip + n) * w]);
            v.extend_from_slice(&sv[skip * w..(skip + n) * w]);
        }
        let n = k.len() / w;
        Ok(KvRows {
            layer: l,
            positions: range.start..range.start + n,
            n_kv,
            head_dim,
            k: Cow::Owned(k),
            v: Cow::Owned(v),
        })
    }

    /// Greedy choice of the target on a logits row (suppressed ids excluded, §4.1 step 3).
    fn argmax_target(&self, row: &[F]) -> Result<u32, SpecError> {
        let r: Vec<f64> = row.iter().map(|x| x.to_f64()).collect();
        argmax(&r, self.target.suppressed_ids())
            .ok_or_else(|| SpecError::State("every target id is suppressed or NaN".into()))
    }

    /// Appends emitted ids and updates `done`.
    fn emit(&mut self, ids: &[u32]) {
        self.committed.extend_from_slice(ids);
        self.emitted.extend_from_slice(ids);
        self.stats.emitted += ids.len();
        let stopped = ids.last().is_some_and(|t| self.opts.stop.contains(t));
        if stopped || self.emitted.len() >= self.opts.max_new_tokens {
            self.done = true;
        }
    }

    /// One round of §4.1 (budget, draft, verify, accept, rollback, carry), or a plain decode
    /// step when the budget leaves no room for a draft. No-op once [`Self::is_done`].
    pub fn step(&mut self, drafter: &mut dyn Drafter<F>) -> Result<(), SpecError> {
        if self.done {
            return Ok(());
        }
        let p = self.position();
        let remaining = self.opts.max_new_tokens - self.emitted.len();
        let k_r = self.opts.k.min(remaining - 1);
        let h_n = self.target.config().n_embd;
        if k_r == 0 {
            let t_p = self.committed[p];
            let hn = self
                .target
                .forward_hidden_batch(&mut [&mut self.cache], &[&[t_p]])?;
            self.stats.target_forwards += 1;
            self.stats.plain_steps += 1;
            if let Some(tf) = &mut self.tf {
                tf.sliding_tensor =
                    (p + 1).saturating_sub(self.target.config().sliding_window)..p + 1;
                tf.last_written = p;
                tf.saved.clear();
            }
            let z = self.target.logits_of_hidden(&hn)?;
            let t = self.argmax_target(&z)?;
            self.hidden = hn;
            self.emit(&[t]);
            return Ok(());
        }
        let round = self.stats.rounds + 1;
        let draft = {
            let ctx = RoundContext {
                target: self.target,
                committed: &self.committed,
                p,
                hidden: &self.hidden,
                round,
                kv: self.drafter_kv()?,
            };
            drafter.draft(&ctx, k_r)?
        };
        let vocab = self.target.vocab_size();
        if draft.tokens.len() != k_r || draft.tokens.iter().any(|&t| t as usize >= vocab) {
            return Err(SpecError::BadDraft {
                round,
                got: draft.tokens,
                expected: k_r,
                vocab,
            });
        }
        // Verify: one target forward over [t_p, d_1 … d_{K_r}] at positions p … p+K_r.
        let mut rows = Vec::with_capacity(k_r + 1);
        rows.push(self.committed[p]);
        rows.extend_from_slice(&draft.tokens);
        let hn = self
            .target
            .forward_hidden_batch(&mut [&mut self.cache], &[&rows])?;
        let z = self.target.logits_of_hidden(&hn)?;
        let a: Vec<u32> = z
            .chunks_exact(vocab)
            .map(|r| self.argmax_target(r))
            .collect::<Result<_, _>>()?;
        // Accept: longest agreeing prefix, then the bonus a_n; truncate after the first stop id
        // and to the budget.
        let n = draft
            .tokens
            .iter()
            .zip(&a)
            .take_while(|(d, a)| d == a)
            .count();
        let mut v: Vec<u32> = draft.tokens[..n].to_vec();
        v.push(a[n]);
        if let Some(i) = v.iter().position(|t| self.opts.stop.contains(t)) {
            v.truncate(i + 1);
        }
        v.truncate(remaining);
        let n_acc = v.len() - 1;
        // Rollback: keep positions 0 … p+n'.
        let keep = p + n_acc + 1;
        if let Some(tf) = &mut self.tf {
            let w = self.target.config().sliding_window;
            tf.sliding_tensor = (p + 1).saturating_sub(w)..p + k_r + 1;
            tf.last_written = p + k_r;
            let end = self.cache.len();
            tf.saved = [self.store.sliding, self.store.full]
                .into_iter()
                .flatten()
                .map(|l| {
                    let (k, v) = self.cache.rows(l, keep..end)?;
                    Ok((l, k.into_owned(), v.into_owned()))
                })
                .collect::<Result<_, KvCacheError>>()?;
        }
        self.cache.truncate(keep)?;
        self.hidden = hn[n_acc * h_n..(n_acc + 1) * h_n].to_vec();
        self.stats.rounds += 1;
        self.stats.target_forwards += 1;
        self.stats.drafter_forwards += draft.forwards;
        self.stats.drafted += k_r;
        self.stats.accepted += n_acc;
        self.stats.accepted_per_round.push(n_acc);
        self.stats.round_log.push(RoundLog {
            p,
            k: k_r,
            drafted: draft.tokens,
            accepted: n_acc,
            bonus: *v.last().unwrap_or(&0),
        });
        self.emit(&v);
        Ok(())
    }

    /// Runs rounds until done and returns the emitted ids and counters.
    pub fn run(mut self, drafter: &mut dyn Drafter<F>) -> Result<SpecOutput, SpecError> {
        while !self.done {
            self.step(drafter)?;
        }
        Ok(self.finish())
    }

    /// The emitted ids and counters so far.
    pub fn finish(self) -> SpecOutput {
        SpecOutput {
            tokens: self.emitted,
            stats: self.stats,
        }
    }
}

/// Greedy speculative decoding `spec:K` (§4.1): prefill, then rounds until a stop id or the
/// budget. In the oracle the emitted ids equal [`Model::greedy`]'s for any drafter.
pub fn spec_decode<F: Float>(
    target: &Model<F>,
    drafter: &mut dyn Drafter<F>,
    prompt: &[u32],
    opts: SpecOptions,
) -> Result<SpecOutput, SpecError> {
    SpecDecoder::new(target, prompt, opts)?.run(drafter)
}
