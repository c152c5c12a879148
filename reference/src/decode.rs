//! KV cache, chunked prefill and greedy decoding of the oracle (`spec/gemma4-text.md` §4.6 for
//! the sliding window, §4.8 for the store/reuse layout of the cache, §13.6 for the
//! suppressed-token rule of greedy decoding; `spec/gemma4-assistant-mtp.md` §6 for rollback).
//!
//! **Cache design.** Every layer that computes K/V owns a *slot* holding post-norm, post-RoPE
//! `k` and post-norm `v` rows (`[nkv_l, d_l]` each); reuse layers own no slot and read their
//! store layer's (§4.8).
//! - *Full-attention slots* are linear: every position `0 … len−1`.
//! - *Sliding slots* are rings of capacity `C = W + R` rows, position `u` at row `u mod C`
//!   (`W` = the window, query included, §4.6; `R` = the *rollback reserve* of the cache). They
//!   hold the positions `oldest … len−1` ([`KvCache::held`]), never more than `C`.
//! - *Chunks (attend, then write).* A forward over `n` rows at positions `len … len+n−1` puts
//!   their K/V in a per-slot *pending* buffer; every query reads keys `< len` from the slot's
//!   storage and keys `≥ len` from the pending rows. Only at the end of the forward
//!   (`KvCache::commit`, crate-internal) are the pending rows written into the slot (on a ring
//!   only the last `C` of them) and the buffer freed. A chunk of any length thus needs exactly
//!   the `W−1` held rows before it plus itself (peak `C + n` rows on a sliding slot during the
//!   forward, `C` after it); a failed forward discards the pending rows and leaves the cache as
//!   it was.
//! - *Rollback* ([`KvCache::truncate`]) to `len'` is exact iff every ring still holds the
//!   positions `len'+1−W … len'−1` that the next query (position `len'`) and the drafter's
//!   §2.5 set can see. After a forward ending at `e ≥ C` a ring holds `e−C … e−1`, so removing up
//!   to `R + 1` positions always works (§6.2: `C ≥ W + K_max − 1` for attend-then-write); the
//!   documented promise is `R`. Going further back fails with
//!   [`KvCacheError::RollbackPastWindow`] (layer and positions named); the cache keeps its
//!   contents and length but refuses forwards ([`KvCacheError::Unusable`]) until a later
//!   `truncate` succeeds, so a caller that drops the error cannot silently continue at the
//!   wrong length.
//! - *Reserve.* [`Model::new_cache`] uses [`DEFAULT_ROLLBACK_RESERVE`] (8 rows: `spec:K` up to
//!   `K = 8` and small test rollbacks); [`Model::new_cache_with_reserve`] sets it, e.g. `R = 0`
//!   (`C = W`, the minimum) for plain decoding or `R = K` for `spec:K`, whose rollback removes at
//!   most `K_r ≤ K` rows (`crate::spec::SpecDecoder` does this).
//! - *Memory* of a slot: `2 · rows · nkv_l · d_l` values with `rows = min(len, W + R)` on sliding
//!   slots and `len` on full slots ([`KvCache::bytes`]).
//! - The arithmetic is unchanged by the layout: a query reads the same key and value rows in the
//!   same order from the ring as from a linear cache, so logits are bitwise those of a cache
//!   that keeps everything.

use std::borrow::Cow;
use std::ops::Range;

use crate::model::logits::{argmax, top_k};
use crate::model::{Float, Model, ModelError};

/// Rollback reserve `R` of [`Model::new_cache`]: removing up to this many of the newest positions
/// with [`KvCache::truncate`] always succeeds (sliding rings hold `W + 8` rows).
pub const DEFAULT_ROLLBACK_RESERVE: usize = 8;

/// Errors of [`KvCache`] reads and rollbacks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KvCacheError {
    /// `truncate(len)` would need rows a sliding ring has already overwritten.
    #[error(
        "cannot roll back to {len} positions: sliding layer {layer} (window {window}) needs \
         positions {needed_from}…{last} but its ring of {capacity} rows holds only {oldest_held}…{held_last}",
        last = .len.saturating_sub(1),
        held_last = .cached.saturating_sub(1)
    )]
    RollbackPastWindow {
        /// The (slot-owning) sliding layer that lacks the rows.
        layer: usize,
        /// Requested length.
        len: usize,
        /// Length before the call.
        cached: usize,
        /// `W` of that layer.
        window: usize,
        /// Ring capacity `W + R`.
        capacity: usize,
        /// First position the requested length needs (`len + 1 − W`, at least 0).
        needed_from: usize,
        /// Oldest position the ring still holds.
        oldest_held: usize,
    },
    /// Rows asked for are not in the cache (never computed, rolled back, or overwritten by the
    /// ring of a sliding layer).
    #[error("layer {layer}: positions {}…{} asked, cache holds {}…{}", .asked.start, .asked.end.saturating_sub(1), .held.start, .held.end.saturating_sub(1))]
    NotHeld {
        /// Layer asked for (a reuse layer reads its store layer's slot).
        layer: usize,
        /// Positions asked.
        asked: Range<usize>,
        /// Positions held.
        held: Range<usize>,
    },
    /// A forward on a cache whose last rollback failed.
    #[error(
        "KV cache unusable after a failed rollback ({0}); truncate to a reachable length first"
    )]
    Unusable(Box<KvCacheError>),
}

/// K/V of one layer that computes its own K/V (see the module doc).
#[derive(Debug, Clone)]
struct Slot<F> {
    n_kv: usize,
    head_dim: usize,
    /// `Some(W)` on sliding slots.
    window: Option<usize>,
    /// Ring capacity `W + R` rows on sliding slots; `None` = linear.
    capacity: Option<usize>,
    /// Linear: rows `0 … len−1` (`[len, nkv, d]`). Ring: `[min(C, written), nkv, d]`, position
    /// `u` at row `u mod C`.
    k: Vec<F>,
    /// Same layout as `k`.
    v: Vec<F>,
    /// Oldest position held (0 on linear slots).
    oldest: usize,
    /// Rows appended by the running forward, positions `len …` (`[n, nkv, d]`).
    pending_k: Vec<F>,
    /// Same layout as `pending_k`.
    pending_v: Vec<F>,
}

impl<F: Float> Slot<F> {
    fn width(&self) -> usize {
        self.n_kv * self.head_dim
    }

    /// Storage row of position `pos`.
    #[inline]
    fn row(&self, pos: usize) -> usize {
        self.capacity.map_or(pos, |c| pos % c)
    }

    /// Writes the pending rows (positions `s0 … e−1`) into the storage and frees them.
    fn commit(&mut self, s0: usize, e: usize) {
        let w = self.width();
        let pk = std::mem::take(&mut self.pending_k);
        let pv = std::mem::take(&mut self.pending_v);
        debug_assert_eq!(pk.len(), (e - s0) * w);
        match self.capacity {
            None => {
                self.k.truncate(s0 * w);
                self.v.truncate(s0 * w);
                self.k.extend_from_slice(&pk);
                self.v.extend_from_slice(&pv);
            }
            Some(c) => {
                let rows = c.min(e);
                if self.k.len() < rows * w {
                    // Grow by doubling, never past `C` rows.
                    let target = rows.max(2 * self.k.capacity() / w).min(c) * w;
                    for buf in [&mut self.k, &mut self.v] {
                        buf.reserve_exact(target - buf.len());
                        buf.resize(rows * w, F::ZERO);
                    }
                }
                for u in s0.max(e.saturating_sub(c))..e {
                    let (src, dst) = ((u - s0) * w, (u % c) * w);
                    self.k[dst..dst + w].copy_from_slice(&pk[src..src + w]);
                    self.v[dst..dst + w].copy_from_slice(&pv[src..src + w]);
                }
                self.oldest = self.oldest.max(e.saturating_sub(c));
            }
        }
    }
}

/// Read access to the rows one layer attends to during a forward: held positions `< len` from
/// the slot, positions `≥ len` from the rows the running forward appended.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotView<'a, F> {
    slot: &'a Slot<F>,
    len: usize,
}

impl<'a, F: Float> SlotView<'a, F> {
    /// Keys `[nkv, d]` at position `pos` (held, or appended by this forward).
    #[inline]
    pub(crate) fn k(&self, pos: usize) -> &'a [F] {
        let w = self.slot.width();
        if pos >= self.len {
            let i = (pos - self.len) * w;
            &self.slot.pending_k[i..i + w]
        } else {
            let i = self.slot.row(pos) * w;
            &self.slot.k[i..i + w]
        }
    }

    /// Values `[nkv, d]` at position `pos` (held, or appended by this forward).
    #[inline]
    pub(crate) fn v(&self, pos: usize) -> &'a [F] {
        let w = self.slot.width();
        if pos >= self.len {
            let i = (pos - self.len) * w;
            &self.slot.pending_v[i..i + w]
        } else {
            let i = self.slot.row(pos) * w;
            &self.slot.v[i..i + w]
        }
    }
}

/// The KV cache of one sequence (see the module doc for the layout).
#[derive(Debug, Clone)]
pub struct KvCache<F> {
    /// Committed positions.
    len: usize,
    /// Per layer: the slot it reads (itself for layers with own K/V).
    source: Vec<usize>,
    /// Per layer: its slot, `None` for reuse layers.
    slots: Vec<Option<Slot<F>>>,
    /// Rollback reserve `R`.
    reserve: usize,
    /// Set by a failed [`KvCache::truncate`], cleared by a successful one.
    failed_rollback: Option<KvCacheError>,
}

impl<F: Float> KvCache<F> {
    /// An empty cache. `source[l]` = the layer whose K/V layer `l` reads (`l` itself when it
    /// computes K/V); `dims[l]` = `(nkv_l, d_l)`; `window[l]` = `Some(W)` when slot `l` serves
    /// sliding attention with window `W` (query included), `None` for full attention;
    /// `reserve` = `R` (sliding rings hold `W + R` rows). Made by [`Model::new_cache`].
    pub fn new(
        source: Vec<usize>,
        dims: Vec<(usize, usize)>,
        window: Vec<Option<usize>>,
        reserve: usize,
    ) -> KvCache<F> {
        let slots = dims
            .iter()
            .zip(&window)
            .enumerate()
            .map(|(l, (&(n_kv, head_dim), &window))| {
                (source[l] == l).then(|| Slot {
                    n_kv,
                    head_dim,
                    window,
                    capacity: window.map(|w| w.saturating_add(reserve)),
                    k: Vec::new(),
                    v: Vec::new(),
                    oldest: 0,
                    pending_k: Vec::new(),
                    pending_v: Vec::new(),
                })
            })
            .collect();
        KvCache {
            len: 0,
            source,
            slots,
            reserve,
            failed_rollback: None,
        }
    }

    /// Number of cached positions `U` (the position of the next token).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of layers.
    pub fn n_layer(&self) -> usize {
        self.source.len()
    }

    /// Per layer: the layer whose K/V it reads (store layer for reuse layers, §4.8).
    pub fn source_layers(&self) -> &[usize] {
        &self.source
    }

    /// The rollback reserve `R` this cache was made with.
    pub fn reserve(&self) -> usize {
        self.reserve
    }

    fn slot(&self, layer: usize) -> &Slot<F> {
        self.slots[self.source[layer]]
            .as_ref()
            .expect("source layers own a slot (KvCache::new)")
    }

    /// `(nkv_l, d_l)` of the K/V that layer `layer` attends to.
    pub fn kv_dims(&self, layer: usize) -> (usize, usize) {
        let s = self.slot(layer);
        (s.n_kv, s.head_dim)
    }

    /// `Some(W)` when the slot layer `layer` reads is a sliding ring, `None` when it is linear.
    pub fn window(&self, layer: usize) -> Option<usize> {
        self.slot(layer).window
    }

    /// Ring capacity `W + R` in rows of the slot layer `layer` reads (`None` when linear).
    pub fn capacity(&self, layer: usize) -> Option<usize> {
        self.slot(layer).capacity
    }

    /// Positions whose K/V layer `layer` can read: `oldest … len−1` on a ring (at most `W + R`),
    /// `0 … len−1` on a linear slot.
    pub fn held(&self, layer: usize) -> Range<usize> {
        self.slot(layer).oldest..self.len
    }

    /// Positions a query at position `len` reads from the cache for layer `layer`:
    /// `max(0, len+1−W) … len−1` on sliding slots, `0 … len−1` on full ones (§4.6; for the
    /// drafter, §2.5's `S_τ(len)`). Always inside [`KvCache::held`].
    pub fn needed(&self, layer: usize) -> Range<usize> {
        let lo = self
            .slot(layer)
            .window
            .map_or(0, |w| (self.len + 1).saturating_sub(w));
        lo..self.len
    }

    /// Rows in storage of the slot layer `layer` reads (`min(written, W + R)` on a ring, `len`
    /// on a linear slot; the ring may also hold stale rows beyond [`KvCache::held`]).
    pub fn stored_rows(&self, layer: usize) -> usize {
        let s = self.slot(layer);
        s.k.len() / s.width()
    }

    /// Bytes of K/V rows in storage, all slots, K and V: `Σ_slots 2 · stored_rows · nkv · d ·
    /// size_of::<F>()` (the allocation of a full slot may be up to twice that: `Vec` growth).
    pub fn bytes(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .map(|s| (s.k.len() + s.v.len()) * std::mem::size_of::<F>())
            .sum()
    }

    fn check_held(&self, layer: usize, asked: Range<usize>) -> Result<(), KvCacheError> {
        let held = self.held(layer);
        if asked.start < held.start || asked.end > held.end || asked.start > asked.end {
            return Err(KvCacheError::NotHeld { layer, asked, held });
        }
        Ok(())
    }

    /// Post-norm, post-RoPE keys layer `layer` attends to at position `pos`: `[nkv_l, d_l]`.
    /// Errors: `pos` not held ([`KvCacheError::NotHeld`]).
    pub fn k(&self, layer: usize, pos: usize) -> Result<&[F], KvCacheError> {
        self.check_held(layer, pos..pos + 1)?;
        Ok(self.view(layer).k(pos))
    }

    /// Post-norm values layer `layer` attends to at position `pos`: `[nkv_l, d_l]`.
    /// Errors: `pos` not held ([`KvCacheError::NotHeld`]).
    pub fn v(&self, layer: usize, pos: usize) -> Result<&[F], KvCacheError> {
        self.check_held(layer, pos..pos + 1)?;
        Ok(self.view(layer).v(pos))
    }

    /// Keys and values of layer `layer` at `positions`, in position order: `(k, v)`, each
    /// `[n, nkv_l, d_l]`; borrowed when the rows are contiguous in storage, copied when they
    /// wrap around the ring. Errors: a position not held ([`KvCacheError::NotHeld`]).
    #[allow(clippy::type_complexity)]
    pub fn rows(
        &self,
        layer: usize,
        positions: Range<usize>,
    ) -> Result<(Cow<'_, [F]>, Cow<'_, [F]>), KvCacheError> {
        self.check_held(layer, positions.clone())?;
        let s = self.slot(layer);
        let w = s.width();
        if positions.is_empty() {
            return Ok((Cow::Borrowed(&[]), Cow::Borrowed(&[])));
        }
        let (a, b) = (s.row(positions.start), s.row(positions.end - 1));
        if a <= b && b - a + 1 == positions.len() {
            let r = a * w..(b + 1) * w;
            return Ok((Cow::Borrowed(&s.k[r.clone()]), Cow::Borrowed(&s.v[r])));
        }
        let view = self.view(layer);
        let mut k = Vec::with_capacity(positions.len() * w);
        let mut v = Vec::with_capacity(positions.len() * w);
        for u in positions {
            k.extend_from_slice(view.k(u));
            v.extend_from_slice(view.v(u));
        }
        Ok((Cow::Owned(k), Cow::Owned(v)))
    }

    /// Rolls back to the first `len` positions (no-op if `len ≥ self.len()`). Exact: later
    /// forwards compute what they would have computed had the dropped tokens never been run.
    ///
    /// Errors: [`KvCacheError::RollbackPastWindow`] when a sliding ring no longer holds the
    /// positions `len+1−W … len−1` (more than `R + 1` positions removed since they were
    /// written; see the module doc). The cache then keeps its length and contents but refuses
    /// forwards until a later `truncate` succeeds.
    pub fn truncate(&mut self, len: usize) -> Result<(), KvCacheError> {
        if len < self.len {
            for (l, s) in self.slots.iter().enumerate() {
                let Some(s) = s else { continue };
                let (Some(window), Some(capacity)) = (s.window, s.capacity) else {
                    continue;
                };
                let needed_from = (len + 1).saturating_sub(window);
                if s.oldest > needed_from && needed_from < len {
                    let e = KvCacheError::RollbackPastWindow {
                        layer: l,
                        len,
                        cached: self.len,
                        window,
                        capacity,
                        needed_from,
                        oldest_held: s.oldest,
                    };
                    self.failed_rollback = Some(e.clone());
                    return Err(e);
                }
            }
            self.len = len;
            for s in self.slots.iter_mut().flatten() {
                s.oldest = s.oldest.min(len);
                if s.capacity.is_none() {
                    let w = s.width();
                    s.k.truncate(len * w);
                    s.v.truncate(len * w);
                }
            }
        }
        self.failed_rollback = None;
        Ok(())
    }

    /// Errors with [`KvCacheError::Unusable`] after a failed rollback (checked by every forward).
    pub fn check_usable(&self) -> Result<(), KvCacheError> {
        match &self.failed_rollback {
            Some(e) => Err(KvCacheError::Unusable(Box::new(e.clone()))),
            None => Ok(()),
        }
    }

    /// Appends rows `k`, `v` (`[n, nkv, d]`) to `layer`'s pending rows (during a forward; they
    /// are visible to this forward's queries through [`KvCache::view`] and become part of the
    /// cache at [`KvCache::commit`]).
    pub(crate) fn append(&mut self, layer: usize, k: &[F], v: &[F]) {
        let s = self.slots[layer]
            .as_mut()
            .expect("append to a layer with own K/V");
        s.pending_k.extend_from_slice(k);
        s.pending_v.extend_from_slice(v);
    }

    /// The rows layer `layer` attends to during a forward (held rows and this forward's rows).
    pub(crate) fn view(&self, layer: usize) -> SlotView<'_, F> {
        SlotView {
            slot: self.slot(layer),
            len: self.len,
        }
    }

    /// Makes the pending rows positions `len … new_len−1` of the cache (end of a forward).
    pub(crate) fn commit(&mut self, new_len: usize) {
        let s0 = self.len;
        for s in self.slots.iter_mut().flatten() {
            s.commit(s0, new_len);
        }
        self.len = new_len;
    }

    /// Drops the pending rows of a failed forward (the cache is as before it).
    pub(crate) fn discard_pending(&mut self) {
        for s in self.slots.iter_mut().flatten() {
            s.pending_k = Vec::new();
            s.pending_v = Vec::new();
        }
    }
}

/// Result of [`Model::greedy`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Emitted ids, the stop id included when one ended the run.
    pub tokens: Vec<u32>,
    /// Per emitted token: the oracle's top-16 of the row that chose it (descending logit, lower
    /// id first on ties, suppressed ids excluded).
    pub top_k: Vec<Vec<(u32, f64)>>,
    /// The first row with a NaN/±Inf logit (possible only in a model loaded with
    /// `LoadOptions::allow_nonfinite`): `(output index, non-finite logits in the row)`. The
    /// run stops at a row whose every allowed logit is NaN (no argmax), so that row may have
    /// emitted no token.
    pub nonfinite: Option<(usize, usize)>,
}

/// Top-k width reported with every greedy token.
pub const GREEDY_TOP_K: usize = 16;

impl<F: Float> Model<F> {
    /// Prefill in chunks: runs `tokens` after `cache` in forwards of at most `chunk` tokens
    /// (`chunk ≥ 1`) and returns the logits of the last token (`[V]`, f64). Every row's numbers
    /// are independent of the chunking (`model::linear` determinism).
    pub fn prefill(
        &self,
        cache: &mut crate::decode::KvCache<F>,
        tokens: &[u32],
        chunk: usize,
    ) -> Result<Vec<f64>, ModelError> {
        let mut last = Vec::new();
        for part in tokens.chunks(chunk.max(1)) {
            let hn = self.forward_hidden_batch(&mut [&mut *cache], &[part])?;
            let h = self.config().n_embd;
            let z = self.logits_of_hidden(&hn[hn.len() - h..])?;
            last = z.iter().map(|x| x.to_f64()).collect();
        }
        Ok(last)
    }

    /// Plain greedy decoding (§13.6 rule 3): prefill `prompt` in one forward, then repeatedly
    /// emit `argmax` over the non-suppressed ids (lowest id on exact ties) and feed it back,
    /// until a token in `stop` is emitted (it is included) or `max_tokens` tokens are emitted.
    /// Each token's row is reported with [`GREEDY_TOP_K`] candidates.
    pub fn greedy(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        stop: &[u32],
    ) -> Result<Generation, ModelError> {
        self.greedy_top_k(prompt, max_tokens, stop, GREEDY_TOP_K)
    }

    /// [`Model::greedy`] reporting `k` candidates per row (fewer when fewer ids are not
    /// suppressed): the same tokens for every `k`.
    pub fn greedy_top_k(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        stop: &[u32],
        k: usize,
    ) -> Result<Generation, ModelError> {
        let mut cache = self.new_cache();
        let mut gen = Generation {
            tokens: Vec::new(),
            top_k: Vec::new(),
            nonfinite: None,
        };
        if max_tokens == 0 || prompt.is_empty() {
            return Ok(gen);
        }
        let mut row = self.prefill(&mut cache, prompt, prompt.len())?;
        loop {
            let suppressed = self.suppressed_ids();
            let bad = row.iter().filter(|z| !z.is_finite()).count();
            if bad > 0 && gen.nonfinite.is_none() {
                gen.nonfinite = Some((gen.tokens.len(), bad));
            }
            let Some(next) = argmax(&row, suppressed) else {
                break;
            };
            gen.tokens.push(next);
            gen.top_k.push(top_k(&row, k, suppressed));
            if stop.contains(&next) || gen.tokens.len() >= max_tokens {
                break;
            }
            row = self.prefill(&mut cache, &[next], 1)?;
        }
        Ok(gen)
    }
}
