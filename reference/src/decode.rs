//! KV cache, chunked prefill and greedy decoding of the oracle (`spec/gemma4-text.md` §4.8 for
//! the store/reuse layout of the cache, §13.6 for the suppressed-token rule of greedy decoding).
//!
//! **Cache design (the simplest exactly-correct one).** Every layer that computes K/V owns a slot
//! holding the post-norm, post-RoPE `k` and post-norm `v` of **every** position `0 … len−1`
//! (`[U, nkv_l, d_l]` each, row-major), sliding layers included; a sliding layer simply attends
//! to the last `W` of them. Reuse layers own no slot and read their store layer's slot. Hence:
//! - rollback is exact and trivial: [`KvCache::truncate`] cuts every slot to a length, for any
//!   length, with no window bookkeeping (a ring buffer would need `W + max_rollback` entries);
//! - a drafter reads any target layer's K/V by layer index and position ([`KvCache::k`],
//!   [`KvCache::v`]; a reuse layer resolves to its store layer);
//! - memory is `O(len)` on sliding layers too; acceptable for an oracle (its job is exactness,
//!   engines trim the window).

use crate::model::logits::{argmax, top_k};
use crate::model::{Float, Model, ModelError};

/// K/V of one layer that computes its own K/V.
#[derive(Debug, Clone)]
struct Slot<F> {
    n_kv: usize,
    head_dim: usize,
    /// `[rows, n_kv, head_dim]`.
    k: Vec<F>,
    /// `[rows, n_kv, head_dim]`.
    v: Vec<F>,
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
}

impl<F: Float> KvCache<F> {
    /// An empty cache. `source[l]` = the layer whose K/V layer `l` reads (`l` itself when it
    /// computes K/V); `dims[l]` = `(nkv_l, d_l)`. Made by `Model::new_cache`.
    pub fn new(source: Vec<usize>, dims: Vec<(usize, usize)>) -> KvCache<F> {
        let slots = dims
            .iter()
            .enumerate()
            .map(|(l, &(n_kv, head_dim))| {
                (source[l] == l).then(|| Slot {
                    n_kv,
                    head_dim,
                    k: Vec::new(),
                    v: Vec::new(),
                })
            })
            .collect();
        KvCache {
            len: 0,
            source,
            slots,
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

    /// Post-norm, post-RoPE keys layer `layer` attends to at position `pos` (`< len`):
    /// `[nkv_l, d_l]`. Panics if `pos ≥ len` or `layer ≥ L`.
    pub fn k(&self, layer: usize, pos: usize) -> &[F] {
        assert!(
            pos < self.len,
            "position {pos} not cached (len {})",
            self.len
        );
        let s = self.slot(layer);
        let w = s.n_kv * s.head_dim;
        &s.k[pos * w..(pos + 1) * w]
    }

    /// Post-norm values layer `layer` attends to at position `pos` (`< len`): `[nkv_l, d_l]`.
    pub fn v(&self, layer: usize, pos: usize) -> &[F] {
        assert!(
            pos < self.len,
            "position {pos} not cached (len {})",
            self.len
        );
        let s = self.slot(layer);
        let w = s.n_kv * s.head_dim;
        &s.v[pos * w..(pos + 1) * w]
    }

    /// All committed keys of layer `layer`'s source: `[len, nkv_l, d_l]`.
    pub fn keys(&self, layer: usize) -> &[F] {
        let s = self.slot(layer);
        &s.k[..self.len * s.n_kv * s.head_dim]
    }

    /// All committed values of layer `layer`'s source: `[len, nkv_l, d_l]`.
    pub fn values(&self, layer: usize) -> &[F] {
        let s = self.slot(layer);
        &s.v[..self.len * s.n_kv * s.head_dim]
    }

    /// Rolls back to the first `len` positions (no-op if `len ≥ self.len()`). Exact: later
    /// forwards compute what they would have computed had the dropped tokens never been run.
    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        self.len = len;
        self.drop_uncommitted();
    }

    /// Drops rows past `len` in every slot.
    fn drop_uncommitted(&mut self) {
        let len = self.len;
        for s in self.slots.iter_mut().flatten() {
            let w = s.n_kv * s.head_dim;
            s.k.truncate(len * w);
            s.v.truncate(len * w);
        }
    }

    /// Appends rows `k`, `v` (`[n, nkv, d]`) to `layer`'s own slot (during a forward; they become
    /// visible to [`KvCache::k`] after [`KvCache::commit`]).
    pub(crate) fn append(&mut self, layer: usize, k: &[F], v: &[F]) {
        let s = self.slots[layer]
            .as_mut()
            .expect("append to a layer with own K/V");
        s.k.extend_from_slice(k);
        s.v.extend_from_slice(v);
    }

    /// All rows of the slot layer `layer` reads, including rows appended by the running forward:
    /// `(k, v)`, each `[rows, nkv, d]`.
    pub(crate) fn slot_rows(&self, layer: usize) -> (&[F], &[F]) {
        let s = self.slot(layer);
        (&s.k, &s.v)
    }

    /// Marks the first `len` rows as committed (end of a forward).
    pub(crate) fn commit(&mut self, len: usize) {
        self.len = len;
        self.drop_uncommitted();
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
    pub fn greedy(
        &self,
        prompt: &[u32],
        max_tokens: usize,
        stop: &[u32],
    ) -> Result<Generation, ModelError> {
        let mut cache = self.new_cache();
        let mut gen = Generation {
            tokens: Vec::new(),
            top_k: Vec::new(),
        };
        if max_tokens == 0 || prompt.is_empty() {
            return Ok(gen);
        }
        let mut row = self.prefill(&mut cache, prompt, prompt.len())?;
        loop {
            let suppressed = self.suppressed_ids();
            let Some(next) = argmax(&row, suppressed) else {
                break;
            };
            gen.tokens.push(next);
            gen.top_k.push(top_k(&row, GREEDY_TOP_K, suppressed));
            if stop.contains(&next) || gen.tokens.len() >= max_tokens {
                break;
            }
            row = self.prefill(&mut cache, &[next], 1)?;
        }
        Ok(gen)
    }
}
