//! The Gemma-4 forward pass on the GPU (`spec/gemma4-text.md` §2–§9, §13), op by op as the
//! oracle (`reference/src/model/`), over a set of rows (token, KV slot, position) that may
//! belong to several sequences (chunked prefill, decode and running batches are all this).
//!
//! Precision: f32 activations, f32 accumulation everywhere (matvec, norms, attention softmax);
//! RoPE angles and rotation in f64 rounded once to f32; weights decoded bit-exactly from their
//! GGUF blocks. The tensor-core matvec (`mvtc`, `kernels/matvec.cu`) keeps that for Q4_K,
//! Q5_K and Q4_0: weights as exact bf16 integers, activations split exactly into three
//! bf16 pieces (each its own mma column), every product exact and summed in f32 by `mma.sync`.
//! Q2_K, Q3_K and Q6_K take the integer mma instead: their activations are rounded to 22 significant bits of
//! their 256-element block's (weight super-block's) largest magnitude (three int8 digits per
//! element, [`kernels::tc_int8_digits`]), every integer product and sum exact (Q6_K's
//! per-super-block sums, up to 2^27, are rounded once to f32). Measured on an H100 (2026-12-05,
//! `runtime model-check`, 120–130 rows per model): logits within 2.9e-5 of the f64 oracle on the
//! real fixture models, 4.0e-5 on the synthetic UD-Q2_K_XL ones; calibrated τ 2⁻¹³–2⁻¹⁶. The fast
//! mode (`GEMMA4_TC_DIGITS=2`, [`kernels::tc_digits`]) keeps two digits, 14 significant bits:
//! logits up to 2.0e-2 from the oracle (dense Q4_K_M fixture; 2.4e-5–5.7e-3 on the others,
//! `xtask calibrate` on an H100, 2026-12-06), τ up to 2⁻⁴, its own `cuda-fast` budgets. Every
//! row's numbers are independent of the other rows of the call and of the chunking (each output
//! element is one fixed-order sum), so prefill rows, decode rows and batch rows of the same
//! prefix are bitwise identical.
//!
//! KV cache ([`KvCache`]): per layer that computes K/V, `K`, `V` f32 `[S, rows, nkv, d]` (S
//! sequence slots). Full-attention storage keeps every position (`rows = ctx`); sliding storage
//! is a ring of `rows = W + CHUNK_ROWS` (position `p` at row `p mod rows`,
//! `spec/gemma4-assistant-mtp.md` §6.2, option 1). Reuse layers read their store layer's
//! buffers with its geometry (§4.8). The host bookkeeping ([`KvBook`]) knows which positions
//! each ring still holds and turns every forward, draft or rollback that would need a lost
//! position into a typed error. Rows are only *placed* differently: every query reads the same
//! keys in the same order as from a linear cache, so results are bitwise unchanged.
#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet};

use cudarc::driver::{CudaFunction, CudaGraph, CudaSlice, DevicePtr, LaunchConfig};
use kernels::{matvec_rows_per_block, Family, MATVEC_MAX_COLS, MATVEC_THREADS};

use crate::error::{drv, RuntimeError};
use crate::loader::{DeviceModel, ExpertsGateUp, Mat};
use crate::Gpu;

/// Rows processed per internal chunk of a forward (buffers are sized for this many rows).
pub const CHUNK_ROWS: usize = 32;

/// Largest `k` of the on-device top-k (`TOPK_MAX` in `reduce.cu`).
pub const TOPK_MAX: usize = 16;
/// i32 words per row of the top-k output (`2·TOPK_MAX + 1`, see `topk_f32` in `reduce.cu`).
pub(crate) const TK_STRIDE: usize = 2 * TOPK_MAX + 1;

/// The first `k` `(id, value)` entries of one `topk_f32` output row (`[TK_STRIDE]` i32: ids,
/// value bits, non-finite count), best first; missing entries (id −1) left out.
pub(crate) fn topk_entries(row: &[i32], k: usize) -> Vec<(u32, f32)> {
    (0..k)
        .filter(|&j| row[j] >= 0)
        .map(|j| (row[j] as u32, f32::from_bits(row[TOPK_MAX + j] as u32)))
        .collect()
}
/// Widest all-logits chunk whose forward is captured in a CUDA graph and replayed.
pub const GRAPH_MAX_ROWS: usize = 16;

/// A captured chunk forward (one per `(rows, k)`), replayed with new ids/slots/positions.
struct Graph(CudaGraph);
// SAFETY: a graph is only launched through `&mut Workspace` (one thread at a time); its raw
// CUDA handles are not tied to the creating thread (the context is bound before each launch).
#[allow(unsafe_code)]
unsafe impl Send for Graph {}

/// Largest context per slot (the attention kernel keeps one score per visible key in 48 KiB of
/// shared memory).
pub const MAX_CTX: usize = 12_000;

/// Rows per slot of a KV storage in a cache of `ctx` positions per slot, given the widest
/// window `W` among the layers that read it (`None` when a full-attention layer reads it):
/// `ctx` (linear, row = position) or `min(ctx, W + CHUNK_ROWS)` (a ring).
///
/// Why `W + CHUNK_ROWS` (`spec/gemma4-assistant-mtp.md` §6.2). Let `high` be one past the
/// highest position ever written into the slot since it was emptied. A ring of `rows` rows then
/// holds the positions `max(0, high − rows) … len − 1` ([`held`]): position `q < len` sits at row
/// `q mod rows`, which only a write of `q + k·rows ≤ high − 1` (k ≥ 1) can have replaced, since
/// positions below `q` are never rewritten after `q` while `q < len` (writes after a rollback
/// restart at `len` and go up). A query at position `p` needs `p − W + 1 … p`:
/// - *Forward chunk (write, then attend).* A chunk writes its rows (≤ `CHUNK_ROWS` of one slot,
///   positions `a … b`, `b − a < CHUNK_ROWS`) before attending; it replaces positions up to
///   `b − rows ≤ a + CHUNK_ROWS − 1 − W − CHUNK_ROWS = a − W − 1`, below the oldest key any of
///   its rows needs (`a − W + 1`). So any sequence of chunks is exact.
/// - *Rollback.* Truncating to `len` needs `len − W + 1 … len − 1` (the next query at `len`
///   and the drafter's §2.5 set at round position `len`); the ring holds from
///   `high − rows = high − W − CHUNK_ROWS`, so the truncate is exact iff
///   `high − len ≤ CHUNK_ROWS + 1`: up to `CHUNK_ROWS + 1` positions below the furthest write
///   can always be removed (in one or several truncates), further back is
///   [`RuntimeError::RollbackPastWindow`]. `spec:K` (`K + 1 ≤ CHUNK_ROWS`) never gets there:
///   by induction `high − len ≤ K` between rounds (after the prefill `high = len`; a round at
///   `p = len` writes `p … p + K_r` and keeps `p + n' + 1` positions, so afterwards
///   `high − len ≤ max(K − 1, K_r − n') ≤ K`).
///   Positions below `high − rows` are really gone (no accepted rollback reaches them except
///   one to length 0, which empties the slot, so they are never rewritten), so this
///   bookkeeping is exact, not just safe.
pub fn kv_rows(window: Option<usize>, ctx: usize) -> usize {
    match window {
        Some(w) => w.saturating_add(CHUNK_ROWS).min(ctx),
        None => ctx,
    }
}

/// Row (within its slot) of position `pos` in a storage of `rows` rows per slot: `pos mod rows`
/// (the identity on linear storage, where `pos < ctx = rows`). Mirrors `qkv_post_f32` and
/// `attention.cu`.
pub fn ring_row(pos: usize, rows: usize) -> usize {
    pos % rows
}

/// Positions a storage of `rows` rows per slot holds for a slot of length `len` whose highest
/// write ended at `high` (one past the position, `high ≥ len`): `max(0, high − rows) … len − 1`
/// (see [`kv_rows`] for why). Empty when `len ≤ high − rows`.
pub fn held(len: usize, high: usize, rows: usize) -> std::ops::Range<usize> {
    let from = high.saturating_sub(rows);
    from.min(len)..len
}

/// Positions a query at position `len` (the next row of a slot of length `len`) reads from the
/// cache on a layer with window `W` (`None`: full attention): `max(0, len + 1 − W) … len − 1`
/// (`spec/gemma4-text.md` §4.6; also the drafter's §2.5 set at round position `len`).
pub fn needed(len: usize, window: Option<usize>) -> std::ops::Range<usize> {
    let from = window.map_or(0, |w| (len + 1).saturating_sub(w));
    from.min(len)..len
}

/// Geometry of one layer's own K/V storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGeom {
    /// Rows per slot ([`kv_rows`]).
    pub rows: usize,
    /// Widest window among the layers reading this storage (itself and its reuse layers, §4.8);
    /// `None` when one of them is a full-attention layer.
    pub window: Option<usize>,
}

/// One layer as the KV bookkeeping sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayerSpec {
    /// `Some(W)` on sliding layers.
    pub window: Option<usize>,
    /// The layer whose storage it attends to (itself unless a reuse layer, §4.8).
    pub source: usize,
    /// Whether the layer computes and stores K/V.
    pub owns: bool,
}

/// Host bookkeeping of the KV cache (no device memory, testable without a GPU): per-layer
/// storage geometry and, per slot, the committed length, the write high-water mark and a failed
/// rollback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvBook {
    ctx: usize,
    /// Per layer: the storage it owns (`None` for reuse layers).
    geom: Vec<Option<KvGeom>>,
    /// Per layer: the layer whose storage it reads.
    source: Vec<usize>,
    /// Committed positions per slot.
    len: Vec<usize>,
    /// Per slot: one past the highest position written since the slot was emptied (`≥ len`).
    high: Vec<usize>,
    /// Per slot: the length asked by a failed rollback (forwards refused until cleared).
    refused: Vec<Option<usize>>,
}

impl KvBook {
    /// Geometry for `layers` with `slots` slots of `ctx` positions. Each owning layer's storage
    /// is sized for the widest reader ([`KvGeom::window`]), so a reuse layer of another type or
    /// window than its source still finds every key it needs.
    ///
    /// Errors: [`RuntimeError::Capacity`] for `slots = 0`, `ctx = 0` or `ctx >` [`MAX_CTX`];
    /// [`RuntimeError::Model`] when a layer's source is out of range or owns no storage, or a
    /// sliding layer has window 0.
    pub fn new(layers: &[KvLayerSpec], slots: usize, ctx: usize) -> Result<KvBook, RuntimeError> {
        if ctx > MAX_CTX || slots == 0 || ctx == 0 {
            return Err(RuntimeError::Capacity(format!(
                "{slots} slots × {ctx} positions (1 ≤ ctx ≤ {MAX_CTX})"
            )));
        }
        let bad = |l: usize, detail: String| RuntimeError::Model {
            what: format!("layer {l} KV"),
            detail,
        };
        // Widest reader window per owner: Some(Some(w)) sliding readers only, Some(None) a full
        // reader, None not an owner.
        let mut widest: Vec<Option<Option<usize>>> =
            layers.iter().map(|l| l.owns.then_some(Some(0))).collect();
        for (i, l) in layers.iter().enumerate() {
            if l.window == Some(0) {
                return Err(bad(i, "sliding window 0".into()));
            }
            let w = widest
                .get_mut(l.source)
                .and_then(|w| w.as_mut())
                .ok_or_else(|| bad(i, format!("reads layer {}, which stores no K/V", l.source)))?;
            *w = match (*w, l.window) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
        let geom = widest
            .into_iter()
            .map(|w| {
                w.map(|window| KvGeom {
                    rows: kv_rows(window, ctx),
                    window,
                })
            })
            .collect();
        Ok(KvBook {
            ctx,
            geom,
            source: layers.iter().map(|l| l.source).collect(),
            len: vec![0; slots],
            high: vec![0; slots],
            refused: vec![None; slots],
        })
    }

    /// Positions per slot.
    pub fn ctx(&self) -> usize {
        self.ctx
    }

    /// Slots.
    pub fn slots(&self) -> usize {
        self.len.len()
    }

    /// Committed length of slot `s` (0 for a slot that does not exist).
    pub fn len(&self, s: usize) -> usize {
        self.len.get(s).copied().unwrap_or(0)
    }

    /// Whether every slot is empty.
    pub fn is_empty(&self) -> bool {
        self.len.iter().all(|&l| l == 0)
    }

    /// Geometry of the storage owned by layer `l` (`None` for reuse layers).
    pub fn own(&self, l: usize) -> Option<KvGeom> {
        self.geom.get(l).copied().flatten()
    }

    /// Geometry of the storage layer `l` reads (its own, or its source's), with the source.
    pub fn read(&self, l: usize) -> Option<(usize, KvGeom)> {
        let src = *self.source.get(l)?;
        Some((src, self.own(src)?))
    }

    /// Positions of slot `s` the storage owned by layer `l` holds ([`held`]).
    pub fn held(&self, s: usize, l: usize) -> std::ops::Range<usize> {
        match (self.own(l), self.len.get(s), self.high.get(s)) {
            (Some(g), Some(&len), Some(&high)) => held(len, high, g.rows),
            _ => 0..0,
        }
    }

    /// Empties slot `s` (no effect on a slot that does not exist).
    pub fn reset_slot(&mut self, s: usize) {
        if s < self.len.len() {
            self.len[s] = 0;
            self.high[s] = 0;
            self.refused[s] = None;
        }
    }

    /// Empties every slot.
    pub fn reset(&mut self) {
        (0..self.len.len()).for_each(|s| self.reset_slot(s));
    }

    /// Records that positions below `end` of slot `s` may have been written (called before the
    /// writes are queued, so a failed forward still counts).
    pub fn note_written(&mut self, s: usize, end: usize) {
        if let Some(h) = self.high.get_mut(s) {
            *h = (*h).max(end);
        }
    }

    /// Sets the committed length of slot `s` after a successful forward (`len ≤ high`).
    pub fn set_len(&mut self, s: usize, len: usize) {
        if let (Some(l), Some(h)) = (self.len.get_mut(s), self.high.get(s)) {
            *l = len.min(*h);
        }
    }

    /// Checks that every storage holds what a query at position `len(s)` needs ([`needed`]
    /// with the storage's widest window): the condition for the next forward on slot `s` to be
    /// exact. Errors: [`RuntimeError::KvRefused`] after a failed rollback,
    /// [`RuntimeError::KvNotHeld`] naming the layer and positions.
    pub fn check_usable(&self, s: usize) -> Result<(), RuntimeError> {
        let len = self.len(s);
        if let Some(Some(asked)) = self.refused.get(s) {
            return Err(RuntimeError::KvRefused {
                slot: s,
                asked: *asked,
                len,
            });
        }
        for (l, g) in self.geom.iter().enumerate() {
            if let Some(g) = g {
                self.check_rows(s, l, needed(len, g.window))?;
            }
        }
        Ok(())
    }

    /// Checks that the storage read by layer `l` holds positions `asked` of slot `s` (the
    /// drafter's visible rows). Errors: [`RuntimeError::KvRefused`] after a failed rollback,
    /// [`RuntimeError::KvNotHeld`], or [`RuntimeError::Model`] for a layer without storage.
    pub fn check_rows(
        &self,
        s: usize,
        l: usize,
        asked: std::ops::Range<usize>,
    ) -> Result<(), RuntimeError> {
        if let Some(Some(a)) = self.refused.get(s) {
            return Err(RuntimeError::KvRefused {
                slot: s,
                asked: *a,
                len: self.len(s),
            });
        }
        let (src, g) = self.read(l).ok_or_else(|| RuntimeError::Model {
            what: format!("layer {l} KV"),
            detail: "reads no storage".into(),
        })?;
        let h = self.held(s, src);
        if asked.is_empty() || (h.start <= asked.start && asked.end <= h.end) {
            return Ok(());
        }
        Err(RuntimeError::KvNotHeld {
            slot: s,
            layer: src,
            asked,
            held: h,
            rows: g.rows,
        })
    }

    /// Rolls slot `s` back to `len` positions (`spec/gemma4-assistant-mtp.md` §6): exact iff
    /// every ring still holds `len + 1 − W … len − 1` ([`kv_rows`] derives when that holds).
    /// On success the slot is usable again (a failed rollback is forgotten).
    ///
    /// Errors: [`RuntimeError::Capacity`] for a bad slot or `len > len(s)`;
    /// [`RuntimeError::RollbackPastWindow`] naming the first layer and the positions it lacks
    /// (the slot then keeps its length but refuses forwards, [`RuntimeError::KvRefused`], until
    /// a truncate succeeds or it is reset).
    pub fn truncate(&mut self, s: usize, len: usize) -> Result<(), RuntimeError> {
        let cached = match self.len.get(s) {
            Some(&c) if len <= c => c,
            _ => {
                return Err(RuntimeError::Capacity(format!(
                    "cannot truncate slot {s} to {len} positions"
                )))
            }
        };
        if len == 0 {
            // Nothing is needed: the slot is empty again (also forgets the high-water mark, so
            // the rows rewritten from position 0 on count as held).
            self.reset_slot(s);
            return Ok(());
        }
        let high = self.high[s];
        for (layer, g) in self.geom.iter().enumerate() {
            let Some(g) = g else { continue };
            let need = needed(len, g.window);
            let from = high.saturating_sub(g.rows);
            if !need.is_empty() && from > need.start {
                self.refused[s] = Some(len);
                return Err(RuntimeError::RollbackPastWindow {
                    slot: s,
                    layer,
                    len,
                    cached,
                    window: g.window.unwrap_or(self.ctx),
                    rows: g.rows,
                    needed_from: need.start,
                    oldest_held: from,
                });
            }
        }
        self.len[s] = len;
        self.refused[s] = None;
        Ok(())
    }
}

/// The per-layer KV cache of `slots` sequences of up to `ctx` positions each: device buffers
/// shaped by [`KvBook`] plus that bookkeeping.
pub struct KvCache {
    /// Per layer: `(K, V)` `[S, rows, nkv, d]` for layers with own K/V (`rows` from
    /// [`KvBook::own`]), `None` for reuse layers.
    pub layers: Vec<Option<(CudaSlice<f32>, CudaSlice<f32>)>>,
    /// Slots `S`.
    pub slots: usize,
    /// Positions per slot `C`.
    pub ctx: usize,
    /// Geometry and per-slot lengths.
    book: KvBook,
}

impl KvCache {
    /// The bookkeeping specs of `model`'s layers.
    pub fn layer_specs(model: &DeviceModel) -> Vec<KvLayerSpec> {
        model
            .layers
            .iter()
            .map(|l| KvLayerSpec {
                window: l.window,
                source: l.kv_source,
                owns: l.kv.is_some(),
            })
            .collect()
    }

    /// Allocates the cache for `model` (zeroed): `[S, rows, nkv, d]` per owning layer,
    /// `rows` = `ctx` on full-attention storage and `min(ctx, W + CHUNK_ROWS)` on sliding
    /// storage ([`kv_rows`]). Errors: those of [`KvBook::new`], allocation failure.
    pub fn new(
        gpu: &Gpu,
        model: &DeviceModel,
        slots: usize,
        ctx: usize,
    ) -> Result<KvCache, RuntimeError> {
        let book = KvBook::new(&Self::layer_specs(model), slots, ctx)?;
        let mut layers = Vec::new();
        for (li, l) in model.layers.iter().enumerate() {
            match book.own(li) {
                Some(g) => {
                    let n = slots * g.rows * l.n_kv * l.head_dim;
                    let k = gpu
                        .stream
                        .alloc_zeros::<f32>(n)
                        .map_err(drv(format!("alloc K cache of layer {li}")))?;
                    let v = gpu
                        .stream
                        .alloc_zeros::<f32>(n)
                        .map_err(drv(format!("alloc V cache of layer {li}")))?;
                    layers.push(Some((k, v)));
                }
                None => layers.push(None),
            }
        }
        Ok(KvCache {
            layers,
            slots,
            ctx,
            book,
        })
    }

    /// The bookkeeping (geometry, lengths, held positions).
    pub fn book(&self) -> &KvBook {
        &self.book
    }

    /// Committed length of slot `s`.
    pub fn len(&self, s: usize) -> usize {
        self.book.len(s)
    }

    /// Whether every slot is empty.
    pub fn is_empty(&self) -> bool {
        self.book.is_empty()
    }

    /// Rows per slot of the storage layer `l` reads (its source's, §4.8). Errors:
    /// [`RuntimeError::Capacity`] when that layer has no storage.
    pub fn rows(&self, l: usize) -> Result<usize, RuntimeError> {
        self.book
            .read(l)
            .map(|(_, g)| g.rows)
            .ok_or_else(|| RuntimeError::Capacity(format!("layer {l} reads no KV storage")))
    }

    /// Empties slot `s`.
    pub fn reset_slot(&mut self, s: usize) {
        self.book.reset_slot(s);
    }

    /// Empties every slot.
    pub fn reset(&mut self) {
        self.book.reset();
    }

    /// Rollback of slot `s` to `len` positions: [`KvBook::truncate`].
    pub fn truncate(&mut self, s: usize, len: usize) -> Result<(), RuntimeError> {
        self.book.truncate(s, len)
    }

    /// Bytes of device memory held.
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|(k, v)| (k.len() + v.len()) * 4)
            .sum()
    }
}

/// Device scratch buffers for [`CHUNK_ROWS`] rows.
pub struct Workspace {
    x: CudaSlice<f32>,
    h: CudaSlice<f32>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    att: CudaSlice<f32>,
    a: CudaSlice<f32>,
    g: CudaSlice<f32>,
    u: CudaSlice<f32>,
    f: CudaSlice<f32>,
    rl: CudaSlice<f32>,
    mids: CudaSlice<i32>,
    mw: CudaSlice<f32>,
    gu: CudaSlice<f32>,
    ue: CudaSlice<f32>,
    act: CudaSlice<f32>,
    ye: CudaSlice<f32>,
    mo: CudaSlice<f32>,
    ple: CudaSlice<f32>,
    ptok: CudaSlice<f32>,
    pg: CudaSlice<f32>,
    hs: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    slot: CudaSlice<i32>,
    pos: CudaSlice<i32>,
    sel: CudaSlice<i32>,
    /// Suppressed-id mask u8 `[V]` (1 = excluded from greedy choice and top-k).
    mask: CudaSlice<u8>,
    /// `topk_f32` per-block partials i32 `[CHUNK_ROWS, kernels::TOPK_BLOCKS_MAX, TK_STRIDE]`.
    tk_part: CudaSlice<i32>,
    /// `topk_f32` per-row block counts u32 `[CHUNK_ROWS]`, zero between launches.
    tk_cnt: CudaSlice<u32>,
    /// Top-k output i32 `[CHUNK_ROWS, TK_STRIDE]`.
    tk: CudaSlice<i32>,
    /// Attention split partials f32 `[CHUNK_ROWS, max n_head, ATT_SPLIT_MAX, max head_dim + 2]`
    /// (`attention.cu`).
    att_part: CudaSlice<f32>,
    /// Attention split counters u32 `[CHUNK_ROWS, max n_head]`, zero between launches.
    att_cnt: CudaSlice<u32>,
    /// Captured decode/verify forwards by `(rows, k, two-heads attention)`.
    graphs: HashMap<(usize, usize, bool), Graph>,
    /// Shapes run once eagerly (kernels compiled): captured on their next use.
    seen: HashSet<(usize, usize, bool)>,
}

impl Workspace {
    /// Forgets the captured graphs and the shapes seen ([`crate::CudaEngine::drop_graphs`]).
    pub(crate) fn drop_graphs(&mut self) {
        self.graphs.clear();
        self.seen.clear();
    }

    /// Device address of row `r` of the final-normed hidden states of the rows that returned
    /// logits in the last chunk of the last [`Forward::run`] (`[sel, H]` f32; `spec/gemma4-
    /// assistant-mtp.md` §2.1: the drafter's carried `h`).
    pub(crate) fn hidden_row_ptr(&self, gpu: &Gpu, r: usize, h: usize) -> u64 {
        ptr(gpu, &self.hs) + (r * h * 4) as u64
    }

    /// Copies hidden row `r` (see [`Workspace::hidden_row_ptr`], `h` floats) into row `at` of
    /// `dst` (`[·, h]` f32), on the stream: keeps a carried hidden state past later forwards.
    ///
    /// Errors: `r ≥ CHUNK_ROWS` or `dst` too short ([`RuntimeError::Shape`]), driver errors.
    pub(crate) fn copy_hidden_row(
        &self,
        gpu: &Gpu,
        r: usize,
        h: usize,
        dst: &mut CudaSlice<f32>,
        at: usize,
    ) -> Result<(), RuntimeError> {
        if (r + 1) * h > self.hs.len() || (at + 1) * h > dst.len() {
            return Err(RuntimeError::Shape {
                what: "copy_hidden_row".into(),
                detail: format!(
                    "row {r} of {} floats into row {at} of {}",
                    self.hs.len(),
                    dst.len()
                ),
            });
        }
        gpu.stream
            .memcpy_dtod(
                &self.hs.slice(r * h..(r + 1) * h),
                &mut dst.slice_mut(at * h..(at + 1) * h),
            )
            .map_err(drv("copy hidden row"))
    }

    /// Buffers sized for `model` and [`CHUNK_ROWS`] rows.
    pub fn new(gpu: &Gpu, model: &DeviceModel) -> Result<Workspace, RuntimeError> {
        let c = &model.config;
        let t = CHUNK_ROWS;
        let h = c.n_embd;
        let qw = model
            .layers
            .iter()
            .map(|l| l.n_head * l.head_dim)
            .max()
            .unwrap_or(1);
        let kw = model
            .layers
            .iter()
            .map(|l| l.n_kv * l.head_dim)
            .max()
            .unwrap_or(1);
        let nhm = model.layers.iter().map(|l| l.n_head).max().unwrap_or(1);
        let dm = model.layers.iter().map(|l| l.head_dim).max().unwrap_or(1);
        let ff = c.n_ff.iter().copied().max().unwrap_or(1);
        // MoE buffers only on MoE models: a dense model's expert keys are checked against no
        // tensor (`expert_feed_forward_length` could be any number), so nothing is sized by them.
        let (e, k, ie) = if c.moe {
            (c.n_expert.max(1), c.n_expert_used.max(1), c.n_ff_exp.max(1))
        } else {
            (1, 1, 1)
        };
        let lp = (c.n_layer * c.n_embd_per_layer).max(1);
        let p = c.n_embd_per_layer.max(1);
        let f32s = |n: usize| {
            gpu.stream
                .alloc_zeros::<f32>(n)
                .map_err(drv("alloc workspace"))
        };
        let i32s = |n: usize| {
            gpu.stream
                .alloc_zeros::<i32>(n)
                .map_err(drv("alloc workspace"))
        };
        Ok(Workspace {
            x: f32s(t * h)?,
            h: f32s(t * h)?,
            q: f32s(t * qw)?,
            k: f32s(t * kw)?,
            v: f32s(t * kw)?,
            att: f32s(t * qw)?,
            a: f32s(t * h)?,
            g: f32s(t * ff)?,
            u: f32s(t * ff)?,
            f: f32s(t * h)?,
            rl: f32s(t * e)?,
            mids: i32s(t * k)?,
            mw: f32s(t * k)?,
            gu: f32s(t * k * 2 * ie)?,
            ue: f32s(t * k * ie)?,
            act: f32s(t * k * ie)?,
            ye: f32s(t * k * h)?,
            mo: f32s(t * h)?,
            ple: f32s(t * lp)?,
            ptok: f32s(t * lp)?,
            pg: f32s(t * p)?,
            hs: f32s(t * h)?,
            logits: f32s(t * c.n_vocab)?,
            ids: i32s(t)?,
            slot: i32s(t)?,
            pos: i32s(t)?,
            sel: i32s(t)?,
            mask: {
                let mut m = vec![0u8; c.n_vocab];
                for &id in &c.suppress_tokens {
                    if let Some(b) = m.get_mut(id as usize) {
                        *b = 1;
                    }
                }
                gpu.stream.clone_htod(&m).map_err(drv("upload mask"))?
            },
            tk_part: i32s(t * kernels::TOPK_BLOCKS_MAX * TK_STRIDE)?,
            tk_cnt: gpu
                .stream
                .alloc_zeros::<u32>(t)
                .map_err(drv("alloc workspace"))?,
            tk: i32s(t * TK_STRIDE)?,
            att_part: f32s(t * nhm * kernels::ATT_SPLIT_MAX * (dm + 2))?,
            att_cnt: gpu
                .stream
                .alloc_zeros::<u32>(t * nhm)
                .map_err(drv("alloc workspace"))?,
            graphs: HashMap::new(),
            seen: HashSet::new(),
        })
    }
}

/// One row of a forward: which slot it extends and the token fed at the slot's next position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// KV slot (sequence).
    pub slot: usize,
    /// Token id.
    pub token: u32,
    /// Whether the logits of this row are returned.
    pub logits: bool,
}

impl Row {
    /// The rows of a prompt fed to `slot` in one forward: every token in order, logits only on
    /// the last row (the prefill of greedy, spec and `decode_rows`).
    pub fn prompt(slot: usize, tokens: &[u32]) -> Vec<Row> {
        let n = tokens.len();
        tokens
            .iter()
            .enumerate()
            .map(|(i, &token)| Row {
                slot,
                token,
                logits: i + 1 == n,
            })
            .collect()
    }
}

/// A kernel argument (pointers are raw device addresses).
pub(crate) enum Arg {
    P(u64),
    I(i32),
    U(u64),
    F(f32),
}

impl Arg {
    /// The size in bytes of the kernel parameter it fills: 8 for a pointer or u64, 4 for an
    /// i32 or f32.
    fn bytes(&self) -> usize {
        match self {
            Arg::P(_) | Arg::U(_) => 8,
            Arg::I(_) | Arg::F(_) => 4,
        }
    }
}

pub(crate) fn ptr<T>(gpu: &Gpu, s: &CudaSlice<T>) -> u64 {
    let (p, _sync) = s.device_ptr(&gpu.stream);
    p
}

fn lc(grid: (u32, u32, u32), block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem,
    }
}

/// Which forward launches use programmatic dependent launch (`GEMMA4_PDL`, read once per
/// process): `all` (default) every kernel, `mv` the tensor-core matvecs only (they stage their
/// first weights before waiting for the previous kernel), `off` none. The sums are the same
/// either way: only when a kernel starts changes.
///
/// Measured on the H200 (12B Q2_K mix, graph decode, `runtime bench`):
/// - at commit 4afb3bc (one run each, same call): `mv` 192.6 tok/s at batch 1 against 188.3 off
///   and 188.8 `all`; batch 4 639.5 / 624.8 / 600.7 tok/s, batch 8 1034.1 / 1007.7 / 1036.0; a
///   verify of K = 4 drafts 6.35 / 6.42 / 6.72 ms;
/// - at 2be0510 (alternating runs, same call): `all` against `mv` 216.5 / 215.9 against
///   212.4 / 212.1 tok/s at batch 1, but 1273.7 against 1281.9 at batch 8 (first runs);
/// - once the matvecs allowed the next launch only after their main loop (`matvec.cu`) and
///   attention prefetched its keys before waiting (`attention.cu`), `all` lost nowhere: against
///   every kernel in forwards of ≤ 4 rows and the matvecs only above, 234.6 / 232.7 against
///   234.0 / 233.3 tok/s at batch 1, 1348.4 / 1350.7 against 1337.1 / 1330.3 at batch 8, and a
///   verify of 9 rows 10.00 / 9.98 against 10.21 / 10.23 ms.
///
/// Again at ffbcb59 (H100, one binary, `all` / `mv` / `off` alternating, three runs of `all` and
/// `mv`, two of `off`): batch 1 313.2 / 312.9 / 312.6 tok/s against 286.7 / 287.0 / 286.8 and
/// 264.4 / 264.7, batch 8 1830.2 / 1823.2 / 1823.1 against 1735.3 / 1732.3 / 1735.5 and
/// 1633.3 / 1632.5 — `all` the fastest at both (the batch-8 ratio of the others is higher only
/// because their batch 1 is slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdlPolicy {
    /// No programmatic dependencies (`GEMMA4_PDL=off`).
    Off,
    /// Every forward kernel (the default).
    All,
    /// `mvtc_<fmt>_<NG>` launches only (`GEMMA4_PDL=mv`).
    Matvec,
}

/// `GEMMA4_PDL` ([`pdl_policy`]): `off` (or `0`), `mv`, `all`; unset: `all`.
pub const PDL_ENV: EnvSwitch<PdlPolicy> = EnvSwitch {
    var: "GEMMA4_PDL",
    values: &[
        ("off", PdlPolicy::Off),
        ("0", PdlPolicy::Off),
        ("mv", PdlPolicy::Matvec),
        ("all", PdlPolicy::All),
    ],
    accepted: "off (or 0), mv or all (unset: all)",
};

/// The process's [`PdlPolicy`] from `GEMMA4_PDL` ([`PDL_ENV`]; read once).
pub fn pdl_policy() -> PdlPolicy {
    static P: std::sync::OnceLock<PdlPolicy> = std::sync::OnceLock::new();
    *P.get_or_init(|| PDL_ENV.get().unwrap_or(PdlPolicy::All))
}

/// A runtime switch read from the environment (for A/B timing): the variable, the values it
/// takes and what each selects, and the accepted values in words for the message that refuses
/// any other. [`settings_problem`] checks every switch before a GPU is opened, so the readers
/// ([`pdl_policy`], [`tc_third`], …) see only listed values or none.
#[derive(Debug, Clone, Copy)]
pub struct EnvSwitch<T: 'static> {
    /// The variable, e.g. `GEMMA4_PDL`.
    pub var: &'static str,
    /// Each accepted value (exact text) and what it selects.
    pub values: &'static [(&'static str, T)],
    /// The accepted values in words (the message's tail).
    pub accepted: &'static str,
}

impl<T: Copy> EnvSwitch<T> {
    /// What a lookup of the variable selects: `Ok(None)` when unset, `Ok(Some(v))` for a
    /// listed value, else why it is refused (`GEMMA4_PDL="of": must be off (or 0), mv or all
    /// (unset: all)`; an empty value is refused too).
    pub fn parse(&self, v: Result<String, std::env::VarError>) -> Result<Option<T>, String> {
        match v {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Ok(v) => match self.values.iter().find(|(text, _)| *text == v) {
                Some(&(_, x)) => Ok(Some(x)),
                None => Err(format!("{}={v:?}: must be {}", self.var, self.accepted)),
            },
            Err(e) => Err(format!("{}: {e}", self.var)),
        }
    }

    /// [`EnvSwitch::parse`] of this process's environment.
    pub fn read(&self) -> Result<Option<T>, String> {
        self.parse(std::env::var(self.var))
    }

    /// The listed value the variable selects, or `None` (unset, or a value
    /// [`settings_problem`] refuses).
    fn get(&self) -> Option<T> {
        self.read().ok().flatten()
    }

    /// Why the variable's value is refused, if it is.
    fn problem(&self) -> Option<String> {
        self.read().err()
    }
}

/// `Some(why)` for the first runtime setting in the environment the runtime refuses: every
/// [`EnvSwitch`] (`GEMMA4_PDL`, `GEMMA4_TC_WIDE`, `GEMMA4_ATT_GENERIC`, `GEMMA4_ATT_HEADS`,
/// `GEMMA4_TC_SPREAD`, `GEMMA4_TC_MIX`), `GEMMA4_TC_DIGITS`
/// ([`kernels::tc_digits_env_problem`]), `GEMMA4_TC_WNST` ([`kernels::tc_wnst_env_problem`]) and
/// `GEMMA4_KERNEL_SRC`
/// ([`kernels::source_dir_problem`]). A typo in one of them made an A/B timing compare the
/// default with itself; the `runtime` binary and [`crate::Gpu::new`] refuse to go on instead.
pub fn settings_problem() -> Option<String> {
    kernels::tc_digits_env_problem()
        .or_else(|| PDL_ENV.problem())
        .or_else(|| TC_WIDE_ENV.problem())
        .or_else(|| ATT_GENERIC_ENV.problem())
        .or_else(|| ATT_HEADS_ENV.problem())
        .or_else(|| TC_SPREAD_ENV.problem())
        .or_else(|| TC_MIX_ENV.problem())
        .or_else(|| TCX_BASE3_ENV.problem())
        .or_else(kernels::tc_wnst_env_problem)
        .or_else(kernels::source_dir_problem)
}

/// Name of the tensor-core matvec kernel for a launch of `rows` + `rows2` matrix rows (a paired
/// launch; `rows2 = 0` for one matrix) with `nc` inputs: the base or wide variant
/// ([`kernels::mvtc_kernel`]) as [`kernels::mvtc_wide`]'s measured rule says for its 16-row
/// tiles, unless `GEMMA4_TC_WIDE` (read once per process) is `0` (never wide) or `1` (wide
/// wherever the NG has a variant) — for timing A/B runs and for checking the wide kernels on
/// shapes the rule gives the base kernel (`runtime gpu-check`). Either kernel gives the same bits.
pub fn tc_kernel(fmt: &str, nc: usize, rows: usize, rows2: usize, sms: u32) -> String {
    kernels::mvtc_kernel(fmt, nc, tc_wide(fmt, nc, tc_tiles(&[rows, rows2]), sms))
}

/// Name of the three-matrix tensor-core kernel ([`kernels::mvtcx_kernel`], `W`, `W2` of format
/// `fmt` and `W3` of format `g`) for a launch over `rows` = the three matrices' row counts with
/// `nc` inputs: base or wide by the same rule as [`tc_kernel`], over all three matrices' tiles.
pub fn tcx_kernel(fmt: &str, g: &str, nc: usize, rows: [usize; 3], sms: u32) -> String {
    // the wide rule reads `fmt`'s group count; the launch takes the pair's (TC_THIRD's first
    // formats pack at least as many columns as their third)
    debug_assert_eq!(
        kernels::tc_col_groups(fmt, nc),
        kernels::tcx_col_groups(fmt, g, nc)
    );
    let wide = tc_wide(fmt, nc, tc_tiles(&rows), sms)
        && !(tcx_base3() && kernels::tcx_col_groups(fmt, g, nc) == 3);
    kernels::mvtcx_kernel(fmt, g, nc, wide)
}

/// `GEMMA4_TCX_BASE3` ([`tcx_kernel`]): `1` takes the base kernel for three-matrix launches of
/// three column groups (where the wide rule would pick the wide one), `0` or unset: the rule.
/// The same bits either way. An opt-in for timing the candidate in [`kernels::mvtc_wide`]'s doc
/// (attn_q+attn_k+attn_v at n = 8 faster alone with the base kernel), not yet timed in the decode.
pub const TCX_BASE3_ENV: EnvSwitch<bool> = EnvSwitch {
    var: "GEMMA4_TCX_BASE3",
    values: &[("0", false), ("1", true)],
    accepted: "0 (the wide rule) or 1 (base kernel at three column groups) (unset: 0)",
};

/// [`TCX_BASE3_ENV`], read once per process.
fn tcx_base3() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| TCX_BASE3_ENV.get().unwrap_or(false))
}

/// 16-row tiles (one block each) of a launch over matrices of these row counts.
fn tc_tiles(rows: &[usize]) -> usize {
    rows.iter()
        .map(|r| r.div_ceil(kernels::TC_ROWS as usize))
        .sum()
}

/// `GEMMA4_TC_WIDE` ([`tc_kernel`]): `0` never wide, `1` wide wherever the NG has a variant;
/// unset: the measured rule.
pub const TC_WIDE_ENV: EnvSwitch<bool> = EnvSwitch {
    var: "GEMMA4_TC_WIDE",
    values: &[("0", false), ("1", true)],
    accepted: "0 (never the wide kernels) or 1 (wherever they exist) (unset: the measured rule)",
};

/// Whether a tensor-core launch of `tiles` tiles takes the wide variant: [`kernels::mvtc_wide`]
/// unless `GEMMA4_TC_WIDE` forces it ([`tc_kernel`]).
fn tc_wide(fmt: &str, nc: usize, tiles: usize, sms: u32) -> bool {
    static W: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *W.get_or_init(|| TC_WIDE_ENV.get());
    forced.unwrap_or_else(|| kernels::mvtc_wide(fmt, nc, tiles, sms as usize))
}

/// The decode / prefill attention kernel for head dim `d`: [`kernels::attention_kernel`] (the
/// d = 256 / 512 entry points), unless `GEMMA4_ATT_GENERIC` (read once per process) is `1`: then
/// the generic `attention_f32` for every `d` — the same bits, for A/B timing (and for kernel
/// sources from before the entry points, `GEMMA4_KERNEL_SRC`).
pub fn attention_kernel(d: usize) -> &'static str {
    if att_generic() {
        "attention_f32"
    } else {
        kernels::attention_kernel(d)
    }
}

/// `GEMMA4_ATT_GENERIC=1` (read once per process): the generic `attention_f32`, one head per
/// block, at every head dim ([`attention_kernel`], [`attention_launch`]).
fn att_generic() -> bool {
    static G: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *G.get_or_init(|| ATT_GENERIC_ENV.get().unwrap_or(false))
}

/// `GEMMA4_ATT_GENERIC` ([`att_generic`]): `1` the generic kernel at every head dim, `0` the
/// default (the entry points per head dim).
pub const ATT_GENERIC_ENV: EnvSwitch<bool> = EnvSwitch {
    var: "GEMMA4_ATT_GENERIC",
    values: &[("0", false), ("1", true)],
    accepted: "1 (the generic attention_f32 at every head dim) or 0 (unset: the entry points \
               per head dim)",
};

/// Fewest query rows of a chunk for which [`attention_launch`]'s automatic rule takes the
/// two-heads kernels: with fewer, their grid of `nh / 2` blocks per row and split leaves SMs
/// idle. Measured (H100, 2026-12-06, `runtime bench --draft-format none`, one binary,
/// `GEMMA4_ATT_HEADS` 1 against 2, 12B Q2_K-mix decode, tok/s): prompt 2048 batch 1 249.9 → 233.6,
/// batch 2 439.1 → 442.5, batch 4 651.0 → 675.1, batch 8 922.0 → 1017.9.
pub const ATT_PAIRS_MIN_ROWS: usize = 4;

/// Fewest visible keys (of the chunk's latest row) for which [`attention_launch`]'s automatic
/// rule takes the two-heads kernels: with fewer, a split holds so few keys that the halved grid
/// costs more than the shared K/V loads save. Measured as above: prompt 32 (≤ 65 keys) batch 8
/// 1760.2 → 1726.9 / 1734.7 tok/s, attention 279 → 413 / 419 µs per step (graph attribution);
/// prompt 512 with the rule at 512 keys, batch 4 796.6 → 776.3 (batch 8 1239.4 → 1236.1);
/// prompt 1024 with the rule at 1024 keys, batch 8 1001.1 / 1004.0 → 1045.9 / 1048.0, batch 4
/// 687.9 / 689.9 → 696.7 / 695.1, verify of 9 rows 11183 / 11158 → 10461 / 10419 µs.
pub const ATT_PAIRS_MIN_KEYS: usize = 1024;

/// Most dynamic shared memory (bytes) of a two-heads attention launch: 40 KiB, leaving the
/// kernel's static arrays (two heads' outputs at d = 512, 4 KiB, and the split sums) within the
/// 48 KiB a block gets without an opt-in.
pub const ATT_PAIRS_SMEM_MAX: u64 = 40 * 1024;

/// Whether a chunk of `t` query rows whose latest position is `max_pos` takes the two-heads
/// attention kernels where they exist ([`attention_launch`]): `GEMMA4_ATT_HEADS` (read once per
/// process) `1` never, `2` always, otherwise (the default) when `t ≥` [`ATT_PAIRS_MIN_ROWS`]
/// and `max_pos + 1 ≥` [`ATT_PAIRS_MIN_KEYS`]. Every choice gives the same bits (each head's
/// sums are the one-head kernel's), so the rule changes only the speed.
pub fn attention_pairs(t: usize, max_pos: usize) -> bool {
    att_heads_forced().unwrap_or(t >= ATT_PAIRS_MIN_ROWS && max_pos + 1 >= ATT_PAIRS_MIN_KEYS)
}

/// [`attention_pairs`] of a chunk with positions `pos` (its rows and latest position).
fn chunk_pairs(pos: &[i32]) -> bool {
    let max_pos = pos.iter().map(|&p| p.max(0) as usize).max().unwrap_or(0);
    attention_pairs(pos.len(), max_pos)
}

/// `GEMMA4_ATT_HEADS` (read once per process, [`ATT_HEADS_ENV`]): `1` → `Some(false)`, `2` →
/// `Some(true)`, unset → `None` (the automatic rule of [`attention_pairs`]; other values are
/// refused before a GPU opens, [`settings_problem`]).
fn att_heads_forced() -> Option<bool> {
    static H: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *H.get_or_init(|| ATT_HEADS_ENV.get())
}

/// `GEMMA4_ATT_HEADS` ([`att_heads_forced`]): `1` never, `2` always the two-heads kernels.
pub const ATT_HEADS_ENV: EnvSwitch<bool> = EnvSwitch {
    var: "GEMMA4_ATT_HEADS",
    values: &[("1", false), ("2", true)],
    accepted: "1 (one query head per block) or 2 (two where the shapes allow) (unset: the \
               automatic rule)",
};

/// The attention launch for head dim `d` with `nh` query and `nkv` KV heads on a layer with
/// sliding window `window` (0 = full) whose rows see at most `span` keys: the kernel and its
/// query heads per block. With `pairs` ([`attention_pairs`] of the chunk) it takes
/// [`kernels::attention_heads_kernel`] (two query heads of one KV head per block, each key and
/// value row loaded once for both; the same bits) where that exists, `(nh / nkv) % 2 == 0`, two
/// heads' scores fit [`ATT_PAIRS_SMEM_MAX`] (spans up to 163 712 keys) and the layer's rows can
/// see [`ATT_PAIRS_MIN_KEYS`] keys (`window` 0 or at least that; `GEMMA4_ATT_HEADS=2` waives
/// this one); otherwise, and always under `GEMMA4_ATT_GENERIC=1`, [`attention_kernel`] with one
/// head per block. A captured graph passes the cache's context as `span` (a launch valid at any
/// position), so past 163 712 tokens of context its full layers keep one head per block where
/// an eager run of a shorter span takes two (the same bits either way).
pub fn attention_launch(
    d: usize,
    (nh, nkv): (usize, usize),
    window: usize,
    span: usize,
    pairs: bool,
) -> (&'static str, usize) {
    let qh = kernels::ATT_HEADS_PER_BLOCK;
    if att_generic() {
        return (attention_kernel(d), 1);
    }
    let long = window == 0 || window >= ATT_PAIRS_MIN_KEYS || att_heads_forced() == Some(true);
    // the pair kernels' scores take twice the dynamic shared memory: kept within the default
    // 48 KiB per block with room for their static arrays (spans up to ~160 K keys)
    let smem_ok = qh as u64 * kernels::attention_smem_bytes(kernels::att_chunk_bound(span)) as u64
        <= ATT_PAIRS_SMEM_MAX;
    match kernels::attention_heads_kernel(d) {
        Some(k)
            if pairs
                && long
                && smem_ok
                && nkv > 0
                && nh.is_multiple_of(nkv)
                && (nh / nkv).is_multiple_of(qh) =>
        {
            (k, qh)
        }
        _ => (attention_kernel(d), 1),
    }
}

/// Whether tensor-core launches are spread ([`tc_spread_smem`]): `GEMMA4_TC_SPREAD` (read once
/// per process, [`TC_SPREAD_ENV`]) `0` turns it off, for A/B timing; `1` or unset leaves it on.
fn tc_spread_on() -> bool {
    static S: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *S.get_or_init(|| TC_SPREAD_ENV.get().unwrap_or(true))
}

/// `GEMMA4_TC_SPREAD` ([`tc_spread_on`]): `0` off, `1` on (the default).
pub const TC_SPREAD_ENV: EnvSwitch<bool> = EnvSwitch {
    var: "GEMMA4_TC_SPREAD",
    values: &[("0", false), ("1", true)],
    accepted: "0 (off) or 1 (on) (unset: on)",
};

/// Dynamic shared memory (bytes, unused by the kernel) for a tensor-core launch of `tiles` blocks
/// of kernel `f`: when the launch fits in one wave (`tiles ≤` resident blocks per SM × SMs) with
/// fewer than that bound per SM on average, enough to cap the SM at `⌈tiles / SMs⌉` resident
/// blocks of it, so that the blocks spread over at least `tiles / cap` SMs whatever else is
/// resident when they start (under programmatic dependent launch the block scheduler places them
/// while the previous kernel still runs, and may fill some SMs to the kernel's bound — 3 blocks of
/// ffn_down's 240 per SM against 2 — leaving one SM's ALU to do the work of several); 0 otherwise
/// or when the driver's occupancy for the padded launch is not exactly the cap. The sums are the
/// same (only where blocks run changes). Cached per (function, tiles) in [`Gpu::tc_spread`]; the
/// first padded launch of a kernel raises its `MAX_DYNAMIC_SHARED_SIZE_BYTES` attribute.
/// Measured (H100, 2026-12-06, `scripts/gpu/run.sh ab`, same binary, `GEMMA4_TC_SPREAD=0` against
/// unset, every `runtime mv-bench` output hash the same; first with each block padded to
/// `per_sm / cap`, then [`spread_bytes`]' smaller padding, which was faster again): 12B Q2_K-mix
/// decode at batch 1 281.4 / 281.7 → 285.1 / 285.3 tok/s (attn_output's 240 tiles of the
/// 4-blocks-per-SM wide kernel now at most 2 per SM), and 269.3 / 269.5 → 288.4 / 288.9 with
/// ffn_down's Q3_K kernel at 78 registers (matvec.cu, `Tc<FmtQ3_K>::quad8`; 268.4 / 268.9 →
/// 287.2 / 287.5 in a second call); alone, attn_v (128 tiles) at n = 8 6.27 → 5.37 µs — even with
/// no other kernel resident, two blocks of a launch smaller than the GPU shared SMs.
///
/// Measured and not kept: the L1/shared-memory split of these launches. With the driver's choice
/// the unpadded mvtc launches profiled ran in the 132 KiB shared-memory configuration (Nsight Compute
/// `launch__shared_mem_config_size` 135.17 KB, H200, 2026-12-07), leaving 124 KiB of L1 for the
/// activations' fragments that every tile reads: at n = 8 mvtc_q2_k_3w (ffn_gate+ffn_up) hits
/// L1 for 75.0 % of its global-load sectors, mvtc_q6_k_3w (tied head) 63.7 %, mvtc_q3_k_3
/// (ffn_down, 360 KiB of digits per tile) 13.7 %; L2 throughput 27.5 / 59.5 / 33.9 % of peak.
/// Less L1 is slower: the largest carveout for every launch (attribute 100 %, same call) took
/// ffn_gate+ffn_up at n = 8 from 27.98 / 28.04 to 31.69 / 31.66 µs, ffn_down at n = 8 18.86 /
/// 19.00 → 20.46 / 20.40, and the 12B decode at batch 8 from 1832.8 / 1827.7 to 1689.4 / 1685.8
/// tok/s (batch 1 318.7 / 318.2 → 314.7 / 313.6); 50 % ran as the default. More L1 was not to be
/// had: a per-launch preferred carveout of just the resident blocks' shared memory
/// (`CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT`, about 30 % for mvtc_q2_k_3w's three
/// blocks of 22.0 KB + the reserve) left the configuration at 135.17 KB and the hit rate at 75.0 % (H100, 2026-12-07,
/// same binary, every `runtime mv-bench` output hash the same): ffn_gate+ffn_up n = 8 29.13 /
/// 28.97 → 29.42 / 29.35 µs, decode batch 1 307.9 / 307.5 → 305.9 / 308.3 tok/s, batch 8 1815.0
/// / 1818.3 → 1806.9 / 1818.6. Nor did the per-kernel attribute
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` at 44 % on the NG = 3 kernels help (H100,
/// 2026-12-07, same binary): ffn_gate+ffn_up n = 8 28.82 → 28.93 µs, tied head n = 8 377.0 →
/// 379.7, decode batch 8 1823.5 / 1814.3 → 1824.5 / 1815.1 tok/s.
///
/// `need` > 0: the kernel's own dynamic shared memory ([`kernels::tc_dyn_smem`]); the result is
/// then at least `need` (the padding counted on top of it) and the kernel's limit is raised to it.
///
/// Errors: a failing driver query or attribute call, named after the kernel.
fn tc_spread_smem(
    gpu: &Gpu,
    f: &cudarc::driver::CudaFunction,
    name: &str,
    tiles: u32,
    need: u32,
) -> Result<u32, RuntimeError> {
    use cudarc::driver::sys::{CUdevice_attribute as D, CUfunction_attribute as A};
    if (!tc_spread_on() && need == 0) || tiles == 0 {
        return Ok(0);
    }
    // keyed by the loaded function (no allocation per launch)
    let key = (f.cu_function() as usize, tiles);
    let mut cache = gpu.tc_spread.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(&v) = cache.get(&key) {
        return Ok(v);
    }
    let e = |what: &str| drv(format!("{name}: {what}"));
    if need > 0 {
        raise_dyn_smem(f, name, need)?;
    }
    let occ = f
        .occupancy_max_active_blocks_per_multiprocessor(kernels::TC_THREADS, need as usize, None)
        .map_err(e("occupancy"))?;
    let mut smem = need;
    if let Some(cap) = spread_cap(tiles, gpu.sm_count, occ).filter(|_| tc_spread_on()) {
        let attr = |a: D| gpu.ctx.attribute(a).map_err(e("device attribute"));
        let per_sm = attr(D::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
        let reserved = attr(D::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK)?;
        let optin = attr(D::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
        let stat = f
            .get_attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            .map_err(e("static shared memory"))?;
        // the kernel's own dynamic bytes count as its fixed footprint, the padding goes on top
        if let Some(pad) = spread_bytes(per_sm, reserved, optin, stat + need as i32, cap) {
            let want = pad + need as i32;
            raise_dyn_smem(f, name, want as u32)?;
            // The driver's own count decides (allocation granularity, carveout): padded only
            // when it gives exactly the cap.
            let got = f
                .occupancy_max_active_blocks_per_multiprocessor(
                    kernels::TC_THREADS,
                    want as usize,
                    None,
                )
                .map_err(e("occupancy"))?;
            if got == cap {
                smem = want as u32;
            }
        }
    }
    cache.insert(key, smem);
    Ok(smem)
}

/// Raises kernel `f`'s limit of dynamic shared memory (`MAX_DYNAMIC_SHARED_SIZE_BYTES`) to
/// `bytes` when it is lower (launches asking for more than 48 KiB with static need it).
///
/// Errors: a failing attribute query or call, named after the kernel.
pub(crate) fn raise_dyn_smem(
    f: &cudarc::driver::CudaFunction,
    name: &str,
    bytes: u32,
) -> Result<(), RuntimeError> {
    use cudarc::driver::sys::CUfunction_attribute as A;
    let e = |what: &str| drv(format!("{name}: {what}"));
    // (beyond i32 the driver refuses the attribute, with its error)
    let want = i32::try_from(bytes).unwrap_or(i32::MAX);
    let cur = f
        .get_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        .map_err(e("dynamic shared memory limit"))?;
    if want > cur {
        f.set_attribute(A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, want)
            .map_err(e("raise the dynamic shared memory limit"))?;
    }
    Ok(())
}

/// One matrix of a tensor-core matvec launch, as [`tc_args`] passes it: device addresses of the
/// weights (`w`, GGUF blocks) and the output (`y`, f32 `[nc, rows]`), its rows and bytes per row.
/// A missing second matrix is all zeros (null pointers, 0 rows: no block takes it).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TcMatArgs {
    pub(crate) w: u64,
    pub(crate) y: u64,
    pub(crate) rows: usize,
    pub(crate) row_bytes: usize,
}

/// The argument list of a tensor-core matvec launch, in the kernels' parameter order
/// (`matvec.cu`): `mvtc_<fmt>_<NG>[w](W, xp, xs, y, rows, K, row_bytes, nc, W2, y2, rows2, cap)`
/// when `third` is `None`, `mvtcx_<fmt>_<g>_<NG>[w](W, xp, xs, y, rows, K, row_bytes, nc, W2, y2,
/// rows2, W3, y3, rows3, row_bytes3)` otherwise (no cap: the three-matrix kernels take none).
/// `scratch` = the addresses of the prep buffers `[tc_xp, tc_xs]`; `k` the row length; the
/// second matrix shares the first's row bytes (its own `row_bytes` is not passed). The one
/// builder of these lists, for the forward ([`Forward::tc_matvec`], [`Forward::tc_matvec3`])
/// and `Gpu::matvec_tc`; a test compares it with the kernels' PTX parameter lists.
pub(crate) fn tc_args(
    first: TcMatArgs,
    k: usize,
    nc: usize,
    scratch: [u64; 2],
    second: TcMatArgs,
    third: Option<TcMatArgs>,
    cap: f32,
) -> Vec<Arg> {
    let mut args = vec![
        Arg::P(first.w),
        Arg::P(scratch[0]),
        Arg::P(scratch[1]),
        Arg::P(first.y),
        Arg::I(first.rows as i32),
        Arg::I(k as i32),
        Arg::U(first.row_bytes as u64),
        Arg::I(nc as i32),
        Arg::P(second.w),
        Arg::P(second.y),
        Arg::I(second.rows as i32),
    ];
    match third {
        Some(t) => args.extend([
            Arg::P(t.w),
            Arg::P(t.y),
            Arg::I(t.rows as i32),
            Arg::U(t.row_bytes as u64),
        ]),
        None => args.push(Arg::F(cap)),
    }
    args
}

/// The blocks per SM that [`tc_spread_smem`] caps a launch of `tiles` blocks at on `sms` SMs,
/// where the kernel alone allows `occ`: `⌈tiles / sms⌉` when the launch fits in one wave
/// (`tiles ≤ occ · sms`) and that is below `occ`; `None` (no cap) otherwise.
///
/// Measured and not kept (H100, 2026-12-06, `run.sh ab`, same binary, two runs each): also
/// evening out the waves of larger launches (w = ⌈tiles / (occ · sms)⌉ waves capped at
/// ⌈tiles / (w · sms)⌉ per SM; of the 12B launches only batch 8's attn_q+attn_k+attn_v, 512
/// tiles at 3 per SM, changes: 2 waves of at most 2) — that launch alone 13.6 → 12.3–12.5 µs,
/// yet the 12B decode at batch 8 1688–1704 → 1650–1663 tok/s (two calls).
fn spread_cap(tiles: u32, sms: u32, occ: u32) -> Option<u32> {
    let cap = tiles.div_ceil(sms.max(1));
    (tiles > 0 && tiles <= occ.saturating_mul(sms) && cap < occ).then_some(cap)
}

/// Dynamic shared memory (bytes) that makes `cap` blocks of a kernel with `stat` bytes of static
/// shared memory fit in an SM's `per_sm` bytes and `cap + 1` not, counting the driver's
/// `reserved` bytes per block, with each block's footprint the least that keeps `cap + 1` out:
/// the multiple of 256 just above `per_sm / (cap + 1)`. The rest of the SM's shared memory stays
/// free for other kernels' blocks and for L1. `None` when that needs no padding or a block may
/// not be that large (`optin`, static included).
///
/// Measured against padding each block to `per_sm / cap` (H100, 2026-12-06, `run.sh ab`, same
/// binary, two runs each): ffn_down at n = 1 16.08 / 16.05 → 15.48 / 15.47 µs (the unpadded
/// kernel's 15.5: less L1 left at the larger padding); 12B decode at batch 1 285.8 / 287.1 →
/// 287.9 / 287.8 tok/s, batch 8 1693.4 / 1693.1 → 1700.7 / 1703.9.
fn spread_bytes(per_sm: i32, reserved: i32, optin: i32, stat: i32, cap: u32) -> Option<i32> {
    let cap = i32::try_from(cap).ok().filter(|&c| c > 0)?;
    let foot = ((per_sm / (cap + 1)) & !255) + 256;
    let want = foot - reserved - stat;
    (want > 0 && want + stat <= optin && cap * foot <= per_sm).then_some(want)
}

/// Whether a tensor-core launch of `nc` inputs over two matrices of format `fmt` takes a third
/// matrix of format `g` ([`Forward::tc_matvec3`], `mvtcx`): the pair is in
/// [`kernels::TC_THIRD`] and `GEMMA4_TC_MIX` (read once per process) allows the column-group
/// count — unset: every NG; `0`: never; `1`: NG = 1 only (for A/B timing).
pub fn tc_third(fmt: &str, g: &str, nc: usize) -> bool {
    static M: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    let mode = *M.get_or_init(|| TC_MIX_ENV.get().unwrap_or(2));
    let ng_ok = match mode {
        0 => false,
        1 => kernels::tcx_col_groups(fmt, g, nc) == 1,
        _ => true,
    };
    ng_ok && kernels::TC_THIRD.contains(&(fmt, g))
}

/// `GEMMA4_TC_MIX` ([`tc_third`]): `0` never a third matrix, `1` at one column group only;
/// unset (mode 2): at every column-group count.
pub const TC_MIX_ENV: EnvSwitch<u8> = EnvSwitch {
    var: "GEMMA4_TC_MIX",
    values: &[("0", 0), ("1", 1)],
    accepted: "0 (attn_v apart) or 1 (one launch of three only at one column group) (unset: \
               one launch of three wherever the formats allow)",
};

/// Which launches [`set_skipped_kernels`] leaves out: kernel-name prefixes, and whether the
/// launches matching them are the ones skipped (`false`) or the only ones kept (`true`).
static SKIPPED: std::sync::RwLock<(Vec<String>, bool)> =
    std::sync::RwLock::new((Vec::new(), false));

/// Leaves launches out of every forward queued from now on: with `all_but = false` those whose
/// kernel name starts with one of `prefixes`, with `all_but = true` every other one (an empty
/// list with `all_but = false` restores them all). **A timing diagnostic only**: the outputs of
/// a forward with skipped kernels are wrong. `runtime bench` uses it to attribute a captured
/// decode step's time to kernel families (the step time with a family left out, against the
/// full step); graphs captured before the call keep their launches
/// ([`crate::CudaEngine::drop_graphs`]).
pub fn set_skipped_kernels(prefixes: &[&str], all_but: bool) {
    let mut s = SKIPPED.write().unwrap_or_else(|p| p.into_inner());
    *s = (prefixes.iter().map(|p| (*p).to_string()).collect(), all_but);
    SKIPPING.store(
        all_but || !prefixes.is_empty(),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether [`SKIPPED`] leaves anything out (so a launch normally reads one atomic, not the lock).
static SKIPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn skipped(name: &str) -> bool {
    if !SKIPPING.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    let s = SKIPPED.read().unwrap_or_else(|p| p.into_inner());
    let (prefixes, all_but) = &*s;
    prefixes.iter().any(|p| name.starts_with(p.as_str())) != *all_but
}

/// Checks that `args` match kernel `name`'s parameter list, count and sizes in bytes (8 for
/// P/U, 4 for I/F) as compiled in this process ([`kernels::kernel_param_sizes`], from the PTX
/// every loaded module comes from), so that a launch with a missing, extra or wrong-size
/// argument is a typed error, not a driver read past the argument array.
///
/// Errors: [`RuntimeError::Params`] on a mismatch, with an empty `takes` when no module compiled
/// in this process holds `name`.
pub(crate) fn check_params(name: &str, args: &[Arg]) -> Result<(), RuntimeError> {
    let takes = kernels::kernel_param_sizes(name).unwrap_or_else(|| Vec::new().into());
    if args.len() != takes.len() || args.iter().zip(takes.iter()).any(|(a, &t)| a.bytes() != t) {
        return Err(RuntimeError::Params {
            kernel: name.to_string(),
            passed: args.iter().map(Arg::bytes).collect(),
            takes: takes.to_vec(),
        });
    }
    Ok(())
}

/// Launches kernel `f` on the GPU's stream with programmatic stream serialization (the kernel
/// may start before the previous one ends; every kernel waits for it with
/// `griddepcontrol.wait` before touching activations: `common.cuh`) as [`pdl_policy`] says. `args` are the kernel's parameters in order (8-byte pointers / u64, 4-byte i32 / f32).
///
/// Errors: [`RuntimeError::Params`] when `args` do not match the kernel's parameters
/// ([`check_params`]); driver errors of the launch.
pub(crate) fn launch(
    gpu: &Gpu,
    f: &CudaFunction,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), RuntimeError> {
    if skipped(name) {
        return Ok(());
    }
    let pdl = match pdl_policy() {
        PdlPolicy::Off => false,
        PdlPolicy::All => true,
        PdlPolicy::Matvec => name.starts_with("mvtc_") && name != "mvtc_prep",
    };
    launch_with(gpu, f, name, cfg, args, pdl)
}

/// [`launch`] without programmatic stream serialization and never skipped: the kernel starts
/// after the previous stream work ends, as a plain launch does (the single-kernel wrappers of
/// [`crate::ops`] that `gpu-check` and the benchmarks call, e.g. `spin_ns`, which has no
/// `griddepcontrol.wait`). The same argument check.
///
/// Errors: as [`launch`].
pub(crate) fn launch_plain(
    gpu: &Gpu,
    f: &CudaFunction,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), RuntimeError> {
    launch_with(gpu, f, name, cfg, args, false)
}

fn launch_with(
    gpu: &Gpu,
    f: &CudaFunction,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
    pdl: bool,
) -> Result<(), RuntimeError> {
    use cudarc::driver::sys;
    check_params(name, args)?;
    // One 8-byte slot per parameter; the driver copies the parameter's size (4 or 8 bytes)
    // from the slot's start (little-endian, so the low half for 4-byte values).
    let vals: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::P(p) | Arg::U(p) => p,
            Arg::I(i) => u64::from(i as u32),
            Arg::F(x) => u64::from(x.to_bits()),
        })
        .collect();
    let mut params: Vec<*mut std::ffi::c_void> = vals
        .iter()
        .map(|v| v as *const u64 as *mut std::ffi::c_void)
        .collect();
    // SAFETY: a plain-data C union; zeroed is a valid value, then the one field the attribute
    // id names is set.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: gpu.stream.cu_stream(),
        attrs: if pdl { &mut attr } else { std::ptr::null_mut() },
        numAttrs: u32::from(pdl),
    };
    gpu.ctx.bind_to_thread().map_err(drv(name.to_string()))?;
    // SAFETY: every call site passes the argument list of the named kernel's signature (stated
    // in its .cu file; count and sizes checked against its PTX above) with
    // device addresses of live buffers sized by the forward's shapes (or, for `launch_plain`,
    // by the shape checks of its `ops.rs` wrapper, whose borrows of those buffers last across
    // the call);
    // `params` points into `vals`, and `attr`, both alive until the call returns (the driver
    // copies the parameters at launch).
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(drv(name.to_string()))?;
    if let Some(v) = gpu.prof.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        let e = gpu
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("profile event"))?;
        e.record(&gpu.stream).map_err(drv("profile event"))?;
        v.push((name.to_string(), e));
    }
    Ok(())
}

pub(crate) fn n1d(n: usize) -> (u32, u32, u32) {
    ((n.div_ceil(256)) as u32, 1, 1)
}

/// The forward executor: model, cache and workspace.
pub struct Forward<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    /// Weights.
    pub model: &'a DeviceModel,
}

impl Forward<'_> {
    fn fl(&self, name: &str) -> Result<CudaFunction, RuntimeError> {
        // every `attention.cu` kernel, and no other, is named attention_* (Family::Attention)
        let fam = match name {
            _ if name.starts_with("attention_") => Family::Attention,
            "add_norm_prep_f32" | "geglu_prep_f32" => Family::Layer,
            "rmsnorm_f32" => Family::Norm,
            "rope_neox_f32" => Family::Rope,
            "geglu_f32" | "softcap_f32" => Family::Activation,
            "argmax_f32" | "topk_f32" | "topk1_f32" => Family::Reduce,
            _ => Family::Layer,
        };
        Ok(self.gpu.modules.function(fam, name)?)
    }

    pub(crate) fn call(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), RuntimeError> {
        let f = self.fl(name)?;
        launch(self.gpu, &f, name, lc(grid, block, smem), args)
    }

    /// `y[c, :] = W · x[c, :]` for `t` columns (groups of ≤ 8 per launch).
    pub(crate) fn mv(&self, w: &Mat, x: u64, t: usize, y: u64) -> Result<(), RuntimeError> {
        self.mvs(&[(w, y)], x, t)
    }

    /// `y_i[c, :] = W_i · x[c, :]` for every `(W_i, y_i)` of `outs` (all with `x`'s length as
    /// their row length) and `t` columns: per group of ≤ 8 columns the activations are split
    /// once (`mvtc_prep`) and shared by every tensor-core matvec of the group; other formats
    /// use the CUDA-core `matvec_<fmt>_<nc>`.
    pub(crate) fn mvs(&self, outs: &[(&Mat, u64)], x: u64, t: usize) -> Result<(), RuntimeError> {
        self.mvs_pre(outs, x, t, None)
    }

    /// [`Forward::mvs`] where `pre = Some(k)` says the tensor-core prep buffers already hold the
    /// first ≤ 8 columns of `x` (row length `k`), written by a fused producer kernel
    /// (`add_norm_prep_f32`, `geglu_prep_f32`).
    pub(crate) fn mvs_pre(
        &self,
        outs: &[(&Mat, u64)],
        x: u64,
        t: usize,
        pre: Option<usize>,
    ) -> Result<(), RuntimeError> {
        self.mvs_cap(outs, x, t, pre, 0.0)
    }

    /// [`Forward::mvs_pre`] with the tensor-core outputs soft-capped in the matvec's epilogue
    /// when `cap > 0` (`y = cap·tanh(v / cap)`, the bits of `softcap_f32` after the launch; spec
    /// §9) — for the [`kernels::tc_softcap_fused`] formats only: the other formats' kernels and
    /// the CUDA-core matvecs ([`Forward::tc_ok`] false) ignore `cap`, and their caller caps.
    fn mvs_cap(
        &self,
        outs: &[(&Mat, u64)],
        x: u64,
        t: usize,
        pre: Option<usize>,
        cap: f32,
    ) -> Result<(), RuntimeError> {
        let tc = |w: &Mat| self.tc_ok(w);
        let mut c0 = 0;
        while c0 < t {
            let nc = (t - c0).min(MATVEC_MAX_COLS);
            let mut prepped = if c0 == 0 { pre } else { None };
            let mut i = 0;
            while i < outs.len() {
                let (w, y) = outs[i];
                let xc = x + (c0 * w.cols * 4) as u64;
                let yc = |w: &Mat, y: u64| y + (c0 * w.rows * 4) as u64;
                if !tc(w) {
                    self.cuda_core_matvec(w, xc, nc, yc(w, y))?;
                    i += 1;
                    continue;
                }
                if prepped != Some(w.cols) {
                    self.tc_prep(w.fmt, xc, nc, w.cols, self.prep_kinds(outs))?;
                    prepped = Some(w.cols);
                }
                // Two matrices of one format and row length share a launch, and a third one of
                // a `TC_THIRD` format after them joins it (`mvtcx`).
                let second = outs.get(i + 1).filter(|(w2, _)| {
                    w2.fmt == w.fmt && w2.cols == w.cols && w2.row_bytes == w.row_bytes
                });
                let third = second
                    .and_then(|_| outs.get(i + 2))
                    .filter(|(w3, _)| w3.cols == w.cols && tc(w3) && tc_third(w.fmt, w3.fmt, nc));
                match (second, third) {
                    (Some(&(w2, y2)), Some(&(w3, y3))) if cap <= 0.0 => {
                        self.tc_matvec3(w, nc, yc(w, y), (w2, yc(w2, y2)), (w3, yc(w3, y3)))?;
                        i += 3;
                    }
                    _ => {
                        let second = second.map(|&(w2, y2)| (w2, yc(w2, y2)));
                        self.tc_launch(w, nc, yc(w, y), second, None, cap)?;
                        i += if second.is_some() { 2 } else { 1 };
                    }
                }
            }
            c0 += nc;
        }
        Ok(())
    }

    /// Whether `w` takes the tensor-core matvec ([`crate::device::tc_serves`]).
    fn tc_ok(&self, w: &Mat) -> bool {
        crate::device::tc_serves(w.fmt, w.cols, w.rows * w.row_bytes, self.gpu.cc)
    }

    /// The `prep_kinds` argument of a prep producer (fused, or `mvtc_prep` in
    /// [`Forward::mvs_pre`]) whose output the matvecs `outs` read through [`Forward::mvs_pre`]
    /// (the same list: [`kernels::tc_prep_kinds`] of those taking the tensor-core matvec).
    fn prep_kinds(&self, outs: &[(&Mat, u64)]) -> i32 {
        kernels::tc_prep_kinds(outs.iter().filter(|o| self.tc_ok(o.0)).map(|o| o.0.fmt))
    }

    /// `mvtc_prep`: splits `nc ≤ 8` columns of `k` f32 at `x` into the GPU's tensor-core scratch
    /// (the kernel from `fmt`'s per-format module, which every format's module carries), writing
    /// the bf16 pieces and/or int8 digits of `kinds` ([`kernels::tc_prep_kinds`]).
    pub(crate) fn tc_prep(
        &self,
        fmt: &str,
        x: u64,
        nc: usize,
        k: usize,
        kinds: i32,
    ) -> Result<(), RuntimeError> {
        let gpu = self.gpu;
        let f = gpu.modules.function_fmt(Family::Matvec, fmt, "mvtc_prep")?;
        let n = 8 * (k / 16);
        launch(
            gpu,
            &f,
            "mvtc_prep",
            lc(((n.div_ceil(128)) as u32, 1, 1), 128, 0),
            &[
                Arg::P(x),
                Arg::I(nc as i32),
                Arg::I(k as i32),
                Arg::P(ptr(gpu, &gpu.tc_xp)),
                Arg::P(ptr(gpu, &gpu.tc_xs)),
                Arg::I(kinds),
            ],
        )
    }

    /// `mvtc_<fmt>_<NG>` over the activations last split by [`Forward::tc_prep`] (`nc` columns):
    /// `y = W·x` and, when given, `y2 = W2·x` in the same launch (`W2` of `w`'s format, row length
    /// and row bytes).
    pub(crate) fn tc_matvec(
        &self,
        w: &Mat,
        nc: usize,
        y: u64,
        second: Option<(&Mat, u64)>,
    ) -> Result<(), RuntimeError> {
        self.tc_launch(w, nc, y, second, None, 0.0)
    }

    /// `mvtcx_<fmt>_<g>_<NG>` over the activations last split by [`Forward::tc_prep`] (`nc`
    /// columns): `y = W·x`, `y2 = W2·x` (`W2` of `w`'s format, row length and row bytes) and
    /// `y3 = W3·x` (`W3` of a format `g` with `(w.fmt, g)` in [`kernels::TC_THIRD`], same row
    /// length) in one launch, each tile's sums bit for bit those of its own format's kernel. The
    /// base or wide variant follows `w.fmt`'s rule ([`tc_kernel`]) for all three matrices' tiles.
    pub(crate) fn tc_matvec3(
        &self,
        w: &Mat,
        nc: usize,
        y: u64,
        second: (&Mat, u64),
        third: (&Mat, u64),
    ) -> Result<(), RuntimeError> {
        self.tc_launch(w, nc, y, Some(second), Some(third), 0.0)
    }

    /// The launch behind [`Forward::tc_matvec`] (`third` = `None`: `mvtc_*`) and
    /// [`Forward::tc_matvec3`] (`mvtcx_*`): one block per 16-row tile of every matrix (the
    /// kernel maps blocks to tiles: `W3`'s first in `mvtcx`, then `W`'s, then `W2`'s). `cap > 0`:
    /// the outputs soft-capped in the epilogue (`mvtc_*` only, which has the argument;
    /// [`Forward::mvs_cap`]).
    ///
    /// Errors: [`RuntimeError::Driver`] from the launch.
    fn tc_launch(
        &self,
        w: &Mat,
        nc: usize,
        y: u64,
        second: Option<(&Mat, u64)>,
        third: Option<(&Mat, u64)>,
        cap: f32,
    ) -> Result<(), RuntimeError> {
        let gpu = self.gpu;
        let (w2, y2, rows2) = match second {
            Some((w2, y2)) => (ptr(gpu, &w2.data), y2, w2.rows),
            None => (0, 0, 0),
        };
        let rows3 = third.map_or(0, |(w3, _)| w3.rows);
        let name = match third {
            Some((w3, _)) => tcx_kernel(w.fmt, w3.fmt, nc, [w.rows, rows2, rows3], gpu.sm_count),
            None => tc_kernel(w.fmt, nc, w.rows, rows2, gpu.sm_count),
        };
        let f = gpu.modules.function_fmt(Family::Matvec, w.fmt, &name)?;
        if third.is_some() {
            // Callers pass no cap here (tc_matvec3: 0; mvs_cap takes mvtcx only without one).
            debug_assert!(
                cap <= 0.0,
                "{name}: a three-matrix launch takes no soft-cap"
            );
        }
        let args = tc_args(
            TcMatArgs {
                w: ptr(gpu, &w.data),
                y,
                rows: w.rows,
                row_bytes: w.row_bytes,
            },
            w.cols,
            nc,
            [ptr(gpu, &gpu.tc_xp), ptr(gpu, &gpu.tc_xs)],
            TcMatArgs {
                w: w2,
                y: y2,
                rows: rows2,
                row_bytes: w.row_bytes,
            },
            third.map(|(w3, y3)| TcMatArgs {
                w: ptr(gpu, &w3.data),
                y: y3,
                rows: w3.rows,
                row_bytes: w3.row_bytes,
            }),
            cap,
        );
        let grid = tc_tiles(&[w.rows, rows2, rows3]) as u32;
        let need = match third {
            Some(_) => 0,
            None => kernels::tc_dyn_smem(w.fmt, nc) as u32,
        };
        let smem = tc_spread_smem(gpu, &f, &name, grid, need)?;
        launch(
            gpu,
            &f,
            &name,
            lc((grid, 1, 1), kernels::TC_THREADS, smem),
            &args,
        )
    }

    /// `matvec_<fmt>_<nc>` (CUDA cores, f32 products) for `nc ≤ 8` columns.
    fn cuda_core_matvec(&self, w: &Mat, x: u64, nc: usize, y: u64) -> Result<(), RuntimeError> {
        let name = kernels::matvec_kernel(w.fmt, nc);
        let f = self
            .gpu
            .modules
            .function_fmt(Family::Matvec, w.fmt, &name)?;
        let grid = (
            (w.rows as u32).div_ceil(matvec_rows_per_block(w.fmt, nc)),
            1,
            1,
        );
        launch(
            self.gpu,
            &f,
            &name,
            lc(grid, MATVEC_THREADS, 0),
            &[
                Arg::P(ptr(self.gpu, &w.data)),
                Arg::P(x),
                Arg::P(y),
                Arg::I(w.rows as i32),
                Arg::I(w.cols as i32),
                Arg::U(w.row_bytes as u64),
            ],
        )
    }

    /// Expert matvec: pair `j < pairs` uses expert `ids[j]` (`rows_e` rows per expert) of `w`
    /// and input column `j / x_div`.
    #[allow(clippy::too_many_arguments)]
    fn mv_ids(
        &self,
        w: &Mat,
        rows_e: usize,
        ids: u64,
        x: u64,
        x_div: usize,
        pairs: usize,
        y: u64,
    ) -> Result<(), RuntimeError> {
        let name = format!("matvec_ids_{}", w.fmt);
        let f = self
            .gpu
            .modules
            .function_fmt(Family::Matvec, w.fmt, &name)?;
        let grid = ((rows_e as u32).div_ceil(4), pairs as u32, 1);
        launch(
            self.gpu,
            &f,
            &name,
            lc(grid, MATVEC_THREADS, 0),
            &[
                Arg::P(ptr(self.gpu, &w.data)),
                Arg::U((rows_e * w.row_bytes) as u64),
                Arg::P(ids),
                Arg::P(x),
                Arg::I(x_div as i32),
                Arg::P(y),
                Arg::I(rows_e as i32),
                Arg::I(w.cols as i32),
                Arg::U(w.row_bytes as u64),
            ],
        )
    }

    fn rmsnorm(
        &self,
        x: u64,
        w: Option<u64>,
        y: u64,
        rows: usize,
        n: usize,
    ) -> Result<(), RuntimeError> {
        self.rmsnorm_eps(x, w, y, rows, n, self.model.config.rms_eps as f32)
    }

    /// `y[r] = RMSNorm_w(x[r])` over `rows` rows of `n` with an explicit `eps` (the drafter's).
    pub(crate) fn rmsnorm_eps(
        &self,
        x: u64,
        w: Option<u64>,
        y: u64,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), RuntimeError> {
        self.call(
            "rmsnorm_f32",
            (rows as u32, 1, 1),
            kernels::norm_threads(n),
            0,
            &[
                Arg::P(x),
                Arg::P(w.unwrap_or(0)),
                Arg::P(y),
                Arg::I(n as i32),
                Arg::F(eps),
            ],
        )
    }

    /// `x[r] = (x[r] + RMSNorm_wy(y[r]))·s` (when `y = Some((y, wy, s))`: a residual step and,
    /// at a layer's end, its `layer_scalar`), then `h[r] = RMSNorm_w(x[r])`
    /// over `t` rows of `n`, in one `add_norm_prep_f32` launch that also fills the tensor-core
    /// prep buffers with `h` when `t ≤ 8` — what the matvecs `outs` (the list then given to
    /// [`Forward::mvs_pre`]) read; returns `Some(n)` when it did. Rows the fused kernel does not serve (`n % 16 ≠ 0`, `n > 16384`)
    /// take `rmsnorm_add_f32` + `rmsnorm_f32`.
    #[allow(clippy::too_many_arguments)]
    fn add_norm_prep(
        &self,
        y: Option<(u64, u64, f32)>,
        x: u64,
        w: u64,
        h: u64,
        t: usize,
        n: usize,
        outs: &[(&Mat, u64)],
    ) -> Result<Option<usize>, RuntimeError> {
        let gpu = self.gpu;
        let eps = self.model.config.rms_eps as f32;
        let Some(threads) = kernels::norm_prep_threads(n) else {
            if let Some((y, wy, s)) = y {
                self.rmsnorm_add(y, wy, x, t, n)?;
                self.scale(x, t * n, s)?;
            }
            self.rmsnorm(x, Some(w), h, t, n)?;
            return Ok(None);
        };
        let prep_rows = if t <= MATVEC_MAX_COLS { t } else { 0 };
        let (yp, wyp, post_scale) = y.unwrap_or((0, 0, 1.0));
        self.call(
            "add_norm_prep_f32",
            (t as u32, 1, 1),
            threads,
            0,
            &[
                Arg::P(yp),
                Arg::P(wyp),
                Arg::P(x),
                Arg::P(w),
                Arg::P(h),
                Arg::I(n as i32),
                Arg::F(eps),
                Arg::P(ptr(gpu, &gpu.tc_xp)),
                Arg::P(ptr(gpu, &gpu.tc_xs)),
                Arg::I(prep_rows as i32),
                Arg::F(post_scale),
                Arg::I(self.prep_kinds(outs)),
            ],
        )?;
        Ok((prep_rows > 0).then_some(n))
    }

    /// `x[0 .. n] *= s` (`scale_f32`: §8 step 8 `layer_scalar`, §7 PLE projection scale);
    /// nothing when `s == 1`.
    fn scale(&self, x: u64, n: usize, s: f32) -> Result<(), RuntimeError> {
        if s == 1.0 {
            return Ok(());
        }
        self.call(
            "scale_f32",
            n1d(n),
            256,
            0,
            &[Arg::P(x), Arg::U(n as u64), Arg::F(s)],
        )
    }

    /// `g[r] = gelu(g[r]) ⊙ u[r]` over `t` rows of `n` (`geglu_prep_f32`, which also fills the
    /// tensor-core prep buffers with the result for the matvecs `outs` when `t ≤ 8`; returns
    /// `Some(n)` then), or
    /// `geglu_f32` when `n % 16 ≠ 0`.
    fn geglu_prep(
        &self,
        g: u64,
        u: u64,
        t: usize,
        n: usize,
        outs: &[(&Mat, u64)],
    ) -> Result<Option<usize>, RuntimeError> {
        let gpu = self.gpu;
        if !n.is_multiple_of(16) {
            let len = t * n;
            self.call(
                "geglu_f32",
                n1d(len),
                256,
                0,
                &[Arg::P(g), Arg::P(u), Arg::P(g), Arg::U(len as u64)],
            )?;
            return Ok(None);
        }
        let prep_rows = if t <= MATVEC_MAX_COLS { t } else { 0 };
        self.call(
            "geglu_prep_f32",
            (
                ((n / 4) as u32).div_ceil(kernels::GEGLU_PREP_THREADS),
                t as u32,
                1,
            ),
            kernels::GEGLU_PREP_THREADS,
            0,
            &[
                Arg::P(g),
                Arg::P(u),
                Arg::P(g),
                Arg::I(n as i32),
                Arg::P(ptr(gpu, &gpu.tc_xp)),
                Arg::P(ptr(gpu, &gpu.tc_xs)),
                Arg::I(prep_rows as i32),
                Arg::I(self.prep_kinds(outs)),
            ],
        )?;
        Ok((prep_rows > 0).then_some(n))
    }

    fn rmsnorm_add(
        &self,
        y: u64,
        w: u64,
        x: u64,
        rows: usize,
        n: usize,
    ) -> Result<(), RuntimeError> {
        self.rmsnorm_add_eps(y, w, x, rows, n, self.model.config.rms_eps as f32)
    }

    /// `x[r] += RMSNorm_w(y[r])` with an explicit `eps` (the drafter's).
    pub(crate) fn rmsnorm_add_eps(
        &self,
        y: u64,
        w: u64,
        x: u64,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), RuntimeError> {
        self.call(
            "rmsnorm_add_f32",
            (rows as u32, 1, 1),
            kernels::norm_threads(n),
            0,
            &[
                Arg::P(y),
                Arg::P(w),
                Arg::P(x),
                Arg::I(n as i32),
                Arg::F(eps),
            ],
        )
    }

    pub(crate) fn rope(
        &self,
        x: u64,
        pos: u64,
        inv: u64,
        t: usize,
        heads: usize,
        d: usize,
    ) -> Result<(), RuntimeError> {
        let n = t * heads * d / 2;
        self.call(
            "rope_neox_f32",
            n1d(n),
            256,
            0,
            &[
                Arg::P(x),
                Arg::P(x),
                Arg::P(pos),
                Arg::P(inv),
                Arg::I(t as i32),
                Arg::I(heads as i32),
                Arg::I(d as i32),
            ],
        )
    }

    pub(crate) fn embed(
        &self,
        w: &Mat,
        ids: u64,
        t: usize,
        out: u64,
        scale: f32,
    ) -> Result<(), RuntimeError> {
        let name = format!("embed_{}", w.fmt);
        let f = self.gpu.modules.function_fmt(Family::Embed, w.fmt, &name)?;
        launch(
            self.gpu,
            &f,
            &name,
            lc((t as u32, 1, 1), 256, 0),
            &[
                Arg::P(ptr(self.gpu, &w.data)),
                Arg::U(w.row_bytes as u64),
                Arg::P(ids),
                Arg::P(out),
                Arg::I(w.cols as i32),
                Arg::F(scale),
            ],
        )
    }

    /// Runs one chunk (≤ [`CHUNK_ROWS`] rows, positions given) and returns the logits of the
    /// selected rows (`sel`, indices into the chunk) as `[sel.len(), V]` row-major on the host.
    fn chunk(
        &self,
        ws: &mut Workspace,
        cache: &KvCache,
        ids: &[i32],
        slots: &[i32],
        pos: &[i32],
        sel: &[i32],
    ) -> Result<Vec<f32>, RuntimeError> {
        self.upload(ws, ids, slots, pos, sel)?;
        self.launch_chunk(
            ws,
            cache,
            ids.len(),
            Some(pos),
            (sel.len(), None),
            chunk_pairs(pos),
        )?;
        if sel.is_empty() {
            return Ok(Vec::new());
        }
        let vocab = self.model.config.n_vocab;
        self.gpu
            .stream
            .clone_dtoh(&ws.logits.slice(0..sel.len() * vocab))
            .map_err(drv("download logits"))
    }

    /// Runs one chunk like [`Forward::chunk`] but returns, per selected row, the top-`k`
    /// `(id, logit)` computed on the device (`topk_f32`, `topk1_f32` for k = 1: suppressed ids
    /// masked); all-logits
    /// chunks of ≤ [`GRAPH_MAX_ROWS`] rows are replayed from a captured CUDA graph after their
    /// first (eager) run. Errors: [`RuntimeError::NonFinite`] naming the chunk row.
    #[allow(clippy::too_many_arguments)]
    fn chunk_topk(
        &self,
        ws: &mut Workspace,
        cache: &KvCache,
        ids: &[i32],
        slots: &[i32],
        pos: &[i32],
        sel: &[i32],
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, RuntimeError> {
        let t = ids.len();
        let r = sel.len();
        self.upload(ws, ids, slots, pos, sel)?;
        let pairs = chunk_pairs(pos);
        if r == 0 {
            self.launch_chunk(ws, cache, t, Some(pos), (0, None), pairs)?;
            return Ok(Vec::new());
        }
        // the attention kernels' choice is fixed in a captured graph: one graph per choice
        let key = (t, k, pairs);
        let graphable = r == t && t <= GRAPH_MAX_ROWS;
        if graphable && ws.graphs.contains_key(&key) {
            if let Some(g) = ws.graphs.get(&key) {
                g.0.launch().map_err(drv("graph launch"))?;
            }
        } else if graphable && ws.seen.contains(&key) {
            let s = &self.gpu.stream;
            s.begin_capture(
                cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
            .map_err(drv("begin capture"))?;
            let res = self.launch_chunk(ws, cache, t, None, (r, Some(k)), pairs);
            let g = s
                .end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0))
                .map_err(drv("end capture"))?;
            res?;
            let g = g.ok_or_else(|| RuntimeError::Capacity("empty graph captured".into()))?;
            g.launch().map_err(drv("graph launch"))?;
            ws.graphs.insert(key, Graph(g));
        } else {
            self.launch_chunk(ws, cache, t, Some(pos), (r, Some(k)), pairs)?;
            ws.seen.insert(key);
        }
        let raw = self
            .gpu
            .stream
            .clone_dtoh(&ws.tk.slice(0..r * TK_STRIDE))
            .map_err(drv("download top-k"))?;
        let mut out = Vec::with_capacity(r);
        for (i, row) in raw.chunks_exact(TK_STRIDE).enumerate() {
            if row[2 * TOPK_MAX] != 0 {
                return Err(RuntimeError::NonFinite { row: i });
            }
            out.push(topk_entries(row, k));
        }
        Ok(out)
    }

    fn upload(
        &self,
        ws: &mut Workspace,
        ids: &[i32],
        slots: &[i32],
        pos: &[i32],
        sel: &[i32],
    ) -> Result<(), RuntimeError> {
        let t = ids.len();
        let s = &self.gpu.stream;
        s.memcpy_htod(ids, &mut ws.ids.slice_mut(0..t))
            .map_err(drv("upload ids"))?;
        s.memcpy_htod(slots, &mut ws.slot.slice_mut(0..t))
            .map_err(drv("upload slots"))?;
        s.memcpy_htod(pos, &mut ws.pos.slice_mut(0..t))
            .map_err(drv("upload pos"))?;
        if !sel.is_empty() {
            s.memcpy_htod(sel, &mut ws.sel.slice_mut(0..sel.len()))
                .map_err(drv("upload sel"))?;
        }
        Ok(())
    }

    /// Queues the forward of a chunk of `t` rows whose ids/slots/positions/selection are
    /// already on the device, ending with the logits of `r` selected rows in `ws.logits` and,
    /// with `topk = Some(k)`, their top-`k` in `ws.tk`. `pos`: the host positions (attention
    /// shared memory sized to the widest row), or `None` (sized for the whole slot / window:
    /// a launch sequence valid for any positions, so it can be captured and replayed). Only
    /// kernel launches and device copies: capturable.
    fn launch_chunk(
        &self,
        ws: &Workspace,
        cache: &KvCache,
        t: usize,
        pos: Option<&[i32]>,
        (r, topk): (usize, Option<usize>),
        pairs: bool,
    ) -> Result<(), RuntimeError> {
        let gpu = self.gpu;
        let m = self.model;
        let c = &m.config;
        let hh = c.n_embd;
        let p = |b: &CudaSlice<f32>| ptr(gpu, b);
        let (x, h, q, k, v, att, a) = (
            p(&ws.x),
            p(&ws.h),
            p(&ws.q),
            p(&ws.k),
            p(&ws.v),
            p(&ws.att),
            p(&ws.a),
        );
        let (g, u, f) = (p(&ws.g), p(&ws.u), p(&ws.f));
        let (idsp, slotp, posp) = (ptr(gpu, &ws.ids), ptr(gpu, &ws.slot), ptr(gpu, &ws.pos));

        // §2 embedding, §7 PLE inputs.
        self.embed(&m.token_embd, idsp, t, x, (hh as f32).sqrt())?;
        if let Some(pl) = &m.ple {
            let pp = c.n_embd_per_layer;
            let lp = c.n_layer * pp;
            let (ple, ptok) = (p(&ws.ple), p(&ws.ptok));
            self.embed(&pl.token_embd, idsp, t, ptok, (pp as f32).sqrt())?;
            self.mv(&pl.model_proj, x, t, ple)?;
            let n = t * lp;
            self.scale(ple, n, (hh as f64).powf(-0.5) as f32)?;
            self.rmsnorm(ple, Some(ptr(gpu, &pl.proj_norm)), ple, t * c.n_layer, pp)?;
            self.call(
                "add_scale_f32",
                n1d(n),
                256,
                0,
                &[
                    Arg::P(ple),
                    Arg::P(ptok),
                    Arg::P(ple),
                    Arg::U(n as u64),
                    Arg::F(0.5f64.sqrt() as f32),
                ],
            )?;
        }

        // A layer's last residual step (§8: x += RMSNorm_post(f), then layer_scalar) is left to
        // the next layer's first `add_norm_prep` launch when nothing reads x in between.
        let mut pending: Option<(u64, u64, f32)> = None;
        for (li, l) in m.layers.iter().enumerate() {
            let (nh, nkv, d) = (l.n_head, l.n_kv, l.head_dim);
            let inv = ptr(gpu, &l.inv_freq);
            // §4 attention.
            let outs: &[(&Mat, u64)] = match &l.kv {
                Some((wk, _, Some(wv))) => &[(&l.attn_q, q), (wk, k), (wv, v)],
                Some((wk, _, None)) => &[(&l.attn_q, q), (wk, k)],
                None => &[(&l.attn_q, q)],
            };
            let pre =
                self.add_norm_prep(pending.take(), x, ptr(gpu, &l.attn_norm), h, t, hh, outs)?;
            self.mvs_pre(outs, h, t, pre)?;
            // §4.2–§4.4 q/k/v norms and RoPE, §4.8 KV store: one launch (`qkv_post_f32`).
            // Measured and not kept (H100, 2026-12-06, `scripts/gpu/run.sh ab`, one binary,
            // two rounds): for decode rows (distinct slots) this launch fused into the attention
            // launch — each block forming its query head, and the blocks of the split holding the
            // row's own key forming that key and value in shared memory (three block reductions
            // in turn) and storing them; outputs, caches and prep bitwise those of the two
            // launches (gpu-check), every `run.sh all` check passed. 12B decode at batch 1 289.5 /
            // 289.0 → 276.5 / 277.5 tok/s, batch 8 1696 / 1689 → 1667 / 1667; graph attribution
            // at batch 1: attention 429 / 426 + qkv_post 126 / 127 µs → 702 / 683 fused, and the
            // Q2_K matvecs (the qkv projection before it among them) 1334 / 1336 → 1433 / 1383.
            let (nkv_post, kc, vc, kn, k_eq_v, rows) = match &l.kv {
                Some((_, kn, wv)) => {
                    let (kc, vc) = cache.layers[li].as_ref().ok_or_else(|| {
                        RuntimeError::Capacity(format!("layer {li} has no cache"))
                    })?;
                    // Position p goes to row p mod rows of its slot (a ring on sliding storage).
                    let rows = cache.rows(li)?;
                    (
                        nkv,
                        ptr(gpu, kc),
                        ptr(gpu, vc),
                        ptr(gpu, kn),
                        wv.is_none(),
                        rows,
                    )
                }
                None => (0, 0, 0, 0, false, 1),
            };
            self.call(
                "qkv_post_f32",
                ((nh + 2 * nkv_post) as u32, t as u32, 1),
                kernels::norm_threads(d),
                (d * 4) as u32,
                &[
                    Arg::P(q),
                    Arg::P(k),
                    Arg::P(v),
                    Arg::P(kc),
                    Arg::P(vc),
                    Arg::P(ptr(gpu, &l.attn_q_norm)),
                    Arg::P(kn),
                    Arg::P(slotp),
                    Arg::P(posp),
                    Arg::P(inv),
                    Arg::I(nh as i32),
                    Arg::I(nkv_post as i32),
                    Arg::I(d as i32),
                    Arg::I(rows as i32),
                    Arg::F(self.model.config.rms_eps as f32),
                    Arg::I(i32::from(k_eq_v)),
                ],
            )?;
            let src = l.kv_source;
            let (kc, vc) = cache.layers[src].as_ref().ok_or_else(|| {
                RuntimeError::Capacity(format!("layer {li} reads layer {src}, which has no cache"))
            })?;
            let src_kv = m.layers[src].n_kv;
            // The source's geometry (§4.8: a reuse layer reads its store layer's storage); the
            // mask is this layer's own window.
            let src_rows = cache.rows(li)?;
            let window = l.window.unwrap_or(0);
            let span = match pos {
                Some(pos) => pos
                    .iter()
                    .map(|&pp| {
                        let pp = pp as usize;
                        let lo = if window > 0 {
                            (pp + 1).saturating_sub(window)
                        } else {
                            0
                        };
                        pp + 1 - lo
                    })
                    .max()
                    .unwrap_or(1),
                None if window > 0 => window.min(cache.ctx),
                None => cache.ctx,
            };
            // The o projection's tensor-core prep is written by the attention's combining
            // blocks when it can be (≤ 8 rows, whole 16-groups per head and, for int8 digits,
            // whole 256-element blocks per head: their shared exponent is one block's own).
            let o_outs: &[(&Mat, u64)] = &[(&l.attn_output, a)];
            let o_kinds = self.prep_kinds(o_outs);
            let o_prep = t <= MATVEC_MAX_COLS
                && d % 16 == 0
                && (o_kinds & kernels::TC_PREP_DIGITS == 0 || d % 256 == 0)
                && self.tc_ok(&l.attn_output);
            let prep_rows = if o_prep { t } else { 0 };
            let (att_kernel, att_qh) = attention_launch(d, (nh, src_kv), window, span, pairs);
            self.call(
                att_kernel,
                (
                    (nh / att_qh) as u32,
                    t as u32,
                    kernels::att_splits(span) as u32,
                ),
                128,
                att_qh as u32 * kernels::attention_smem_bytes(kernels::att_chunk_bound(span)),
                &[
                    Arg::P(q),
                    Arg::P(ptr(gpu, kc)),
                    Arg::P(ptr(gpu, vc)),
                    Arg::P(slotp),
                    Arg::P(posp),
                    Arg::P(att),
                    Arg::I(nh as i32),
                    Arg::I(src_kv as i32),
                    Arg::I(d as i32),
                    Arg::I(src_rows as i32),
                    // a window beyond every position is full attention: clamped, not truncated
                    Arg::I(window.min(i32::MAX as usize) as i32),
                    Arg::P(ptr(gpu, &ws.att_part)),
                    Arg::P(ptr(gpu, &ws.att_cnt)),
                    Arg::P(ptr(gpu, &gpu.tc_xp)),
                    Arg::P(ptr(gpu, &gpu.tc_xs)),
                    Arg::I(prep_rows as i32),
                    Arg::I(o_kinds),
                ],
            )?;
            self.mvs_pre(o_outs, att, t, o_prep.then_some(nh * d))?;
            // §8 residual, then §5 dense MLP (one launch for the add and the next norm).
            let gate_up: &[(&Mat, u64)] = &[(&l.ffn_gate, g), (&l.ffn_up, u)];
            let pre = self.add_norm_prep(
                Some((a, ptr(gpu, &l.post_attention_norm), 1.0)),
                x,
                ptr(gpu, &l.ffn_norm),
                h,
                t,
                hh,
                gate_up,
            )?;
            self.mvs_pre(gate_up, h, t, pre)?;
            // Measured and not kept (H100, 2026-12-07, `scripts/gpu/run.sh ab`, one binary, two
            // rounds): the GEGLU and the down projection's prep fused into the gate/up launch
            // (`mvtcg_*`: the last of a 256-row group's 32 tiles to finish, by an atomic counter
            // per group, wrote the group's gelu(g)·u and its prep into a second scratch, as the
            // launch's other blocks still read the first). Outputs and prep bitwise those of the
            // separate launches (gpu-check: Q2_K, Q4_K, Q6_K at 1, 3, 5, 8 columns, a partial
            // group; model-check of three fixture models the same figures), yet the 12B decode at
            // batch 1 311.4 / 311.2 → 288.9 / 288.3 tok/s, batch 8 1828 / 1852 → 1645 / 1641;
            // graph attribution: the Q2_K matvecs 1302 → 1663 µs per step at batch 1 (2032 →
            // 2665 at batch 8) against 19–72 µs per step (35–49 at batch 8; four runs) for the
            // geglu_prep launches themselves: under programmatic dependent launch the small
            // launch costs little. Why the fused launch lost 7.5 µs per layer was not examined;
            // not occupancy (mvtcg_q2_k_1w 63 registers, 26244 B shared memory: 4 blocks per SM,
            // as mvtc_q2_k_1w's 64 and 26112 B).
            let down: &[(&Mat, u64)] = &[(&l.ffn_down, f)];
            let pre = self.geglu_prep(g, u, t, l.n_ff, down)?;
            self.mvs_pre(down, g, t, pre)?;

            // §6 MoE.
            if let Some(me) = &l.moe {
                let (kk, ie, e) = (me.top_k, me.ie, me.n_expert);
                let (rl, mids, mw) = (p(&ws.rl), ptr(gpu, &ws.mids), p(&ws.mw));
                let (gu, ue, act, ye, mo) =
                    (p(&ws.gu), p(&ws.ue), p(&ws.act), p(&ws.ye), p(&ws.mo));
                self.rmsnorm(f, Some(ptr(gpu, &me.post_ffw_norm_1)), f, t, hh)?;
                self.rmsnorm(x, Some(ptr(gpu, &me.router_w)), h, t, hh)?;
                self.mv(&me.gate_inp, h, t, rl)?;
                self.call(
                    "moe_route_f32",
                    ((t as u32).div_ceil(64), 1, 1),
                    64,
                    0,
                    &[
                        Arg::P(rl),
                        Arg::I(t as i32),
                        Arg::I(e as i32),
                        Arg::I(kk as i32),
                        Arg::P(ptr(gpu, &me.down_scale)),
                        Arg::P(mids),
                        Arg::P(mw),
                    ],
                )?;
                self.rmsnorm(x, Some(ptr(gpu, &me.pre_ffw_norm_2)), h, t, hh)?;
                let pairs = t * kk;
                match &me.gate_up {
                    ExpertsGateUp::Fused(w) => {
                        self.mv_ids(w, 2 * ie, mids, h, kk, pairs, gu)?;
                        let n = pairs * ie;
                        self.call(
                            "geglu_split_f32",
                            n1d(n),
                            256,
                            0,
                            &[
                                Arg::P(gu),
                                Arg::P(act),
                                Arg::I(pairs as i32),
                                Arg::I(ie as i32),
                            ],
                        )?;
                    }
                    ExpertsGateUp::Split(wg, wu) => {
                        self.mv_ids(wg, ie, mids, h, kk, pairs, gu)?;
                        self.mv_ids(wu, ie, mids, h, kk, pairs, ue)?;
                        let n = pairs * ie;
                        self.call(
                            "geglu_f32",
                            n1d(n),
                            256,
                            0,
                            &[Arg::P(gu), Arg::P(ue), Arg::P(act), Arg::U(n as u64)],
                        )?;
                    }
                }
                self.mv_ids(&me.down, hh, mids, act, 1, pairs, ye)?;
                self.call(
                    "moe_combine_f32",
                    n1d(t * hh),
                    256,
                    0,
                    &[
                        Arg::P(ye),
                        Arg::P(mw),
                        Arg::P(mo),
                        Arg::I(t as i32),
                        Arg::I(kk as i32),
                        Arg::I(hh as i32),
                    ],
                )?;
                self.rmsnorm_add(mo, ptr(gpu, &me.post_ffw_norm_2), f, t, hh)?;
            }
            if l.ple.is_none()
                && li + 1 < m.layers.len()
                && kernels::norm_prep_threads(hh).is_some()
            {
                pending = Some((f, ptr(gpu, &l.post_ffw_norm), l.layer_scalar));
                continue;
            }
            self.rmsnorm_add(f, ptr(gpu, &l.post_ffw_norm), x, t, hh)?;

            // §7 PLE branch.
            if let Some(pl) = &l.ple {
                let pp = c.n_embd_per_layer;
                let (pg, ple) = (p(&ws.pg), p(&ws.ple));
                self.mv(&pl.inp_gate, x, t, pg)?;
                self.call(
                    "gelu_mul_ple_f32",
                    n1d(t * pp),
                    256,
                    0,
                    &[
                        Arg::P(pg),
                        Arg::P(ple),
                        Arg::I(t as i32),
                        Arg::I(pp as i32),
                        Arg::I(c.n_layer as i32),
                        Arg::I(li as i32),
                    ],
                )?;
                self.mv(&pl.proj, pg, t, a)?;
                self.rmsnorm_add(a, ptr(gpu, &pl.post_norm), x, t, hh)?;
            }
            // §8 step 8.
            self.scale(x, t * hh, l.layer_scalar)?;
        }
        if r == 0 {
            return Ok(());
        }
        // §9 final norm, tied head, soft-cap — only for the selected rows.
        let hs = p(&ws.hs);
        self.rmsnorm(x, Some(ptr(gpu, &m.output_norm)), h, t, hh)?;
        self.call(
            "gather_rows_f32",
            (r as u32, 1, 1),
            256,
            0,
            &[
                Arg::P(h),
                Arg::P(ptr(gpu, &ws.sel)),
                Arg::P(hs),
                Arg::I(hh as i32),
            ],
        )?;
        let vocab = c.n_vocab;
        let lg = p(&ws.logits);
        // The soft-cap goes into the tensor-core head's epilogue where its format's kernel has
        // it (kernels::tc_softcap_fused: the same bits, one launch and two passes over the
        // logits fewer); any other head is capped by its own launch. Measured with the epilogue
        // in every format's kernel (H100, 2026-12-07, old and new binaries alternating): the
        // model-check JSON of dense-target.Q4_K_M and syn-dense-target.UD-Q2_K_XL identical to
        // the separate launch's (timings aside); mv-bench tied head n = 8 376.97 → 372.60 µs
        // (mvtc_q6_k_3w's spill 64 → 8 B), every mv-bench output hash (no cap) the same; the
        // 12B decode at batch 8 1823.5 / 1814.3 → 1847.0 / 1846.6 tok/s, but at batch 1 310.1 /
        // 309.3 → 307.3 / 306.8
        // (matvec.cu TcCapFused: hence Q6_K's kernels only, the other modules' SASS unchanged).
        let fused = c.final_softcap.filter(|&cap| {
            cap as f32 > 0.0
                && self.tc_ok(&m.token_embd)
                && kernels::tc_softcap_fused(m.token_embd.fmt)
        });
        self.mvs_cap(
            &[(&m.token_embd, lg)],
            hs,
            r,
            None,
            fused.map_or(0.0, |cap| cap as f32),
        )?;
        if let (Some(cap), None) = (c.final_softcap, fused) {
            let n = r * vocab;
            self.call(
                "softcap_f32",
                n1d(n),
                256,
                0,
                &[Arg::P(lg), Arg::P(lg), Arg::U(n as u64), Arg::F(cap as f32)],
            )?;
        }
        if let Some(k) = topk {
            self.call(
                kernels::topk_kernel(k.min(TOPK_MAX)),
                (r as u32, kernels::topk_blocks(vocab) as u32, 1),
                kernels::TOPK_THREADS,
                0,
                &[
                    Arg::P(lg),
                    Arg::I(vocab as i32),
                    Arg::P(ptr(gpu, &ws.mask)),
                    Arg::I(k.min(TOPK_MAX) as i32),
                    Arg::P(ptr(gpu, &ws.tk_part)),
                    Arg::P(ptr(gpu, &ws.tk_cnt)),
                    Arg::P(ptr(gpu, &ws.tk)),
                ],
            )?;
        }
        Ok(())
    }

    /// Runs `rows` (in order; each extends its slot by one position) and returns the logits
    /// `[V]` of every row with `logits == true`, in row order. Rows are processed in chunks of
    /// [`CHUNK_ROWS`]; the cache lengths advance only when the whole call succeeds (on error
    /// they are left unchanged, so the written K/V rows are ignored).
    ///
    /// Errors: [`RuntimeError::TokenOutOfRange`], [`RuntimeError::Capacity`] (slot or context),
    /// driver/kernel errors.
    pub fn run(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        rows: &[Row],
    ) -> Result<Vec<Vec<f32>>, RuntimeError> {
        let vocab = self.model.config.n_vocab;
        let (planned, next) = self.plan(cache, rows)?;
        let mut out = Vec::new();
        for ch in planned.chunks(CHUNK_ROWS) {
            let (ids, slots, pos, sel) = split_chunk(ch);
            note_chunk(cache, &slots, &pos);
            let lg = self.chunk(ws, cache, &ids, &slots, &pos, &sel)?;
            out.extend(lg.chunks_exact(vocab).map(|r| r.to_vec()));
        }
        commit(cache, &next);
        Ok(out)
    }

    /// Runs `rows` like [`Forward::run`] but returns, for every row with `logits == true`, the
    /// top-`k` (`1 ≤ k ≤` [`TOPK_MAX`]) `(id, logit)` computed on the device over the
    /// non-suppressed ids (descending, lower id first on ties): only `k` pairs per row are
    /// copied to the host. Same errors as [`Forward::run`], plus [`RuntimeError::NonFinite`].
    pub fn run_topk(
        &self,
        ws: &mut Workspace,
        cache: &mut KvCache,
        rows: &[Row],
        k: usize,
    ) -> Result<Vec<Vec<(u32, f32)>>, RuntimeError> {
        if k == 0 || k > TOPK_MAX {
            return Err(RuntimeError::Capacity(format!(
                "top-{k} on the device (1 ≤ k ≤ {TOPK_MAX})"
            )));
        }
        let (planned, next) = self.plan(cache, rows)?;
        let mut out = Vec::new();
        for ch in planned.chunks(CHUNK_ROWS) {
            let (ids, slots, pos, sel) = split_chunk(ch);
            note_chunk(cache, &slots, &pos);
            out.extend(self.chunk_topk(ws, cache, &ids, &slots, &pos, &sel, k)?);
        }
        commit(cache, &next);
        Ok(out)
    }

    /// Checks `rows` and assigns positions: `(token, slot, pos, logits)` per row and the slot
    /// lengths after the call. Every slot the rows extend must be usable
    /// ([`KvBook::check_usable`]: its rings hold what its next query needs).
    #[allow(clippy::type_complexity)]
    fn plan(
        &self,
        cache: &KvCache,
        rows: &[Row],
    ) -> Result<(Vec<(i32, i32, i32, bool)>, Vec<usize>), RuntimeError> {
        let vocab = self.model.config.n_vocab;
        let mut next: Vec<usize> = (0..cache.slots).map(|s| cache.len(s)).collect();
        let mut checked = vec![false; cache.slots];
        let mut planned = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            if r.token as usize >= vocab {
                return Err(RuntimeError::TokenOutOfRange {
                    row: i,
                    token: r.token,
                    vocab,
                });
            }
            if r.slot >= cache.slots {
                return Err(RuntimeError::Capacity(format!(
                    "slot {} ≥ {} slots",
                    r.slot, cache.slots
                )));
            }
            if !checked[r.slot] {
                cache.book.check_usable(r.slot)?;
                checked[r.slot] = true;
            }
            let p = next[r.slot];
            if p >= cache.ctx {
                return Err(RuntimeError::Capacity(format!(
                    "slot {} is full ({} positions)",
                    r.slot, cache.ctx
                )));
            }
            next[r.slot] += 1;
            planned.push((r.token as i32, r.slot as i32, p as i32, r.logits));
        }
        Ok((planned, next))
    }
}

/// Records the positions a chunk is about to write (before its launches, so that a forward
/// that fails afterwards still counts them: ring rows may have been overwritten). A chunk holds
/// at most [`CHUNK_ROWS`] rows, the bound [`kv_rows`] relies on.
fn note_chunk(cache: &mut KvCache, slots: &[i32], pos: &[i32]) {
    debug_assert!(slots.len() <= CHUNK_ROWS);
    for (&s, &p) in slots.iter().zip(pos) {
        cache.book.note_written(s as usize, p as usize + 1);
    }
}

/// Sets the slot lengths after a successful forward.
fn commit(cache: &mut KvCache, next: &[usize]) {
    for (s, &n) in next.iter().enumerate() {
        cache.book.set_len(s, n);
    }
}

/// `(ids, slots, positions, selected chunk rows)` of one planned chunk.
#[allow(clippy::type_complexity)]
fn split_chunk(ch: &[(i32, i32, i32, bool)]) -> (Vec<i32>, Vec<i32>, Vec<i32>, Vec<i32>) {
    let ids = ch.iter().map(|c| c.0).collect();
    let slots = ch.iter().map(|c| c.1).collect();
    let pos = ch.iter().map(|c| c.2).collect();
    let sel = ch
        .iter()
        .enumerate()
        .filter(|(_, c)| c.3)
        .map(|(i, _)| i as i32)
        .collect();
    (ids, slots, pos, sel)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each environment switch takes exactly its documented values, each selecting what it did
    /// before the switches were checked (unset: the default), and refuses any other value —
    /// empty, a typo, padded — naming the variable, the value and the accepted values.
    #[test]
    fn env_switches_take_their_values_and_refuse_the_rest() {
        use std::env::VarError::NotPresent;
        let set = |v: &str| Ok(v.to_string());
        assert_eq!(PDL_ENV.parse(Err(NotPresent)), Ok(None));
        for (v, want) in [
            ("off", PdlPolicy::Off),
            ("0", PdlPolicy::Off),
            ("mv", PdlPolicy::Matvec),
            ("all", PdlPolicy::All),
        ] {
            assert_eq!(PDL_ENV.parse(set(v)), Ok(Some(want)), "{v}");
        }
        assert_eq!(
            PDL_ENV.parse(set("of")),
            Err(r#"GEMMA4_PDL="of": must be off (or 0), mv or all (unset: all)"#.to_string())
        );
        type Values = [(&'static str, bool); 2];
        let bools: [(&EnvSwitch<bool>, Values); 4] = [
            (&TC_WIDE_ENV, [("0", false), ("1", true)]),
            (&ATT_GENERIC_ENV, [("0", false), ("1", true)]),
            (&ATT_HEADS_ENV, [("1", false), ("2", true)]),
            (&TC_SPREAD_ENV, [("0", false), ("1", true)]),
        ];
        for (sw, vals) in bools {
            assert_eq!(sw.parse(Err(NotPresent)), Ok(None), "{}", sw.var);
            for (v, want) in vals {
                assert_eq!(sw.parse(set(v)), Ok(Some(want)), "{}={v}", sw.var);
            }
            for bad in ["", "yes", " 1", "3", "off"] {
                assert_eq!(
                    sw.parse(set(bad)),
                    Err(format!("{}={bad:?}: must be {}", sw.var, sw.accepted))
                );
            }
        }
        assert_eq!(TC_MIX_ENV.parse(set("0")), Ok(Some(0)));
        assert_eq!(TC_MIX_ENV.parse(set("1")), Ok(Some(1)));
        assert_eq!(
            TC_MIX_ENV.parse(set("2")),
            Err(
                "GEMMA4_TC_MIX=\"2\": must be 0 (attn_v apart) or 1 (one launch of three only at \
                 one column group) (unset: one launch of three wherever the formats allow)"
                    .to_string()
            )
        );
        assert_eq!(
            TC_SPREAD_ENV.parse(set("false")),
            Err(r#"GEMMA4_TC_SPREAD="false": must be 0 (off) or 1 (on) (unset: on)"#.to_string())
        );
        assert_eq!(
            ATT_HEADS_ENV.parse(set("0")),
            Err(
                "GEMMA4_ATT_HEADS=\"0\": must be 1 (one query head per block) or 2 (two where \
                 the shapes allow) (unset: the automatic rule)"
                    .to_string()
            )
        );
        // the process's own environment (tests run without these set): nothing to refuse
        if [
            "GEMMA4_PDL",
            "GEMMA4_TC_WIDE",
            "GEMMA4_ATT_GENERIC",
            "GEMMA4_ATT_HEADS",
            "GEMMA4_TC_SPREAD",
            "GEMMA4_TC_MIX",
            "GEMMA4_TC_DIGITS",
            "GEMMA4_KERNEL_SRC",
        ]
        .iter()
        .all(|v| std::env::var_os(v).is_none())
        {
            assert_eq!(settings_problem(), None);
        }
    }

    /// [`tc_args`]'s values in the kernels' order (by hand), and its sizes against the kernels
    /// themselves, no GPU needed: every `mvtc_*` entry (but
    /// `mvtc_prep`) and every `mvtcx_*` entry of the per-format matvec PTX (NVRTC, sm_90) of the
    /// formats with a tensor-core kernel takes exactly the sizes of the list `tc_args` builds
    /// without and with a third matrix (a kernel signature changed without its host list fails
    /// here, in CI, before a GPU run). Without NVRTC: skipped.
    #[test]
    fn tc_args_match_the_kernels_ptx() {
        if let Err(why) = kernels::nvrtc_available() {
            println!("skipped: {why}");
            return;
        }
        let m = TcMatArgs::default();
        let two: Vec<usize> = tc_args(m, 256, 1, [0, 0], m, None, 0.0)
            .iter()
            .map(Arg::bytes)
            .collect();
        let three: Vec<usize> = tc_args(m, 256, 1, [0, 0], m, Some(m), 0.0)
            .iter()
            .map(Arg::bytes)
            .collect();
        // The values in the kernels' order (matvec.cu MVTC_ENTRY_V / MVTCX_ENTRY_V), by hand:
        // W, xp, xs, y, rows, K, row_bytes, nc, W2, y2, rows2, then cap or W3, y3, rows3,
        // row_bytes3 (the second matrix's own row_bytes, 99, is not passed).
        let val = |a: &Arg| match *a {
            Arg::P(v) => ('P', v),
            Arg::U(v) => ('U', v),
            Arg::I(v) => ('I', v as u64),
            Arg::F(v) => ('F', v.to_bits() as u64),
        };
        let mat = |w, y, rows, row_bytes| TcMatArgs {
            w,
            y,
            rows,
            row_bytes,
        };
        let list = |third, cap| -> Vec<_> {
            let (first, second) = (mat(1, 2, 3, 4), mat(9, 10, 11, 99));
            tc_args(first, 5, 6, [7, 8], second, third, cap)
                .iter()
                .map(val)
                .collect()
        };
        let head = [
            ('P', 1),
            ('P', 7),
            ('P', 8),
            ('P', 2),
            ('I', 3),
            ('I', 5),
            ('U', 4),
            ('I', 6),
            ('P', 9),
            ('P', 10),
            ('I', 11),
        ];
        let got = list(None, 30.0);
        assert_eq!(got[..11], head);
        assert_eq!(got[11..], [('F', 30f32.to_bits() as u64)]);
        let got = list(Some(mat(12, 13, 14, 15)), 0.0);
        assert_eq!(got[..11], head);
        assert_eq!(got[11..], [('P', 12), ('P', 13), ('I', 14), ('U', 15)]);
        let (mut n2, mut n3) = (0, 0);
        for fmt in kernels::TC_FORMATS {
            let ptx = kernels::compile_ptx_format(Family::Matvec, fmt, (9, 0)).unwrap();
            for (name, sizes) in kernels::ptx_param_sizes(&ptx) {
                if name.starts_with("mvtcx_") {
                    assert_eq!(sizes, three, "{name}");
                    n3 += 1;
                } else if name.starts_with("mvtc_") && name != "mvtc_prep" {
                    assert_eq!(sizes, two, "{name}");
                    n2 += 1;
                }
            }
        }
        println!("{n2} mvtc and {n3} mvtcx kernels checked");
        assert!(n2 >= kernels::TC_FORMATS.len() && n3 > 0, "{n2} / {n3}");
    }

    /// [`check_params`] without a GPU, after reduce.cu's PTX is compiled (NVRTC):
    /// `fill_u32(uint32_t*, uint64_t, uint32_t)` takes 8, 8, 4 bytes (by hand from the
    /// signature); a missing, an extra and a wrong-size argument are refused naming both lists,
    /// a kernel no compiled module holds is refused with an empty list, the right list passes.
    /// Without NVRTC: skipped.
    #[test]
    fn check_params_against_the_compiled_ptx() {
        if let Err(why) = kernels::nvrtc_available() {
            println!("skipped: {why}");
            return;
        }
        kernels::compile_ptx(Family::Reduce, (9, 0)).unwrap();
        let refused = |name: &str, args: &[Arg]| match check_params(name, args) {
            Err(RuntimeError::Params {
                kernel,
                passed,
                takes,
            }) => {
                assert_eq!(kernel, name);
                (passed, takes)
            }
            other => panic!("{name}: expected a Params error, got {other:?}"),
        };
        let ok = [Arg::P(1), Arg::U(2), Arg::I(3)];
        check_params("fill_u32", &ok).unwrap();
        let short = [Arg::P(1), Arg::U(2)];
        assert_eq!(refused("fill_u32", &short), (vec![8, 8], vec![8, 8, 4]));
        let long = [Arg::P(1), Arg::U(2), Arg::I(3), Arg::I(4)];
        assert_eq!(
            refused("fill_u32", &long),
            (vec![8, 8, 4, 4], vec![8, 8, 4])
        );
        let narrow = [Arg::P(1), Arg::I(2), Arg::I(3)];
        assert_eq!(refused("fill_u32", &narrow), (vec![8, 4, 4], vec![8, 8, 4]));
        assert_eq!(refused("no_such_kernel", &ok), (vec![8, 8, 4], vec![]));
    }

    /// On a GPU: `fill_u32(uint32_t*, uint64_t, uint32_t)` (reduce.cu) reports parameter sizes
    /// [8, 8, 4]; through both launchers ([`launch`], [`launch_plain`]), a launch of it with the
    /// last argument missing, or with a 4-byte value where the u64 goes, is refused as
    /// [`RuntimeError::Params`] naming both lists (the explicit match: the second list would
    /// fill correctly if it were launched), and the right list launches and fills (read back).
    /// Without a GPU: skipped.
    #[test]
    fn launch_refuses_a_wrong_parameter_list() {
        if let Some(why) = crate::device::unavailable_reason() {
            println!("skipped: {why}");
            return;
        }
        let gpu = Gpu::new(0).unwrap();
        let f = gpu.modules.function(Family::Reduce, "fill_u32").unwrap();
        let cfg = lc((1, 1, 1), 32, 0);
        type Launcher =
            fn(&Gpu, &CudaFunction, &str, LaunchConfig, &[Arg]) -> Result<(), RuntimeError>;
        let launchers: [(&str, Launcher); 2] = [("launch", launch), ("launch_plain", launch_plain)];
        for (which, run) in launchers {
            let buf = gpu.stream.alloc_zeros::<u32>(4).unwrap();
            let p = ptr(&gpu, &buf);
            for (args, passed) in [
                (vec![Arg::P(p), Arg::U(4)], vec![8, 8]),
                (vec![Arg::P(p), Arg::I(4), Arg::I(7)], vec![8, 4, 4]),
            ] {
                match run(&gpu, &f, "fill_u32", cfg, &args) {
                    Err(RuntimeError::Params {
                        kernel,
                        passed: got,
                        takes,
                    }) => {
                        assert_eq!(kernel, "fill_u32", "{which}");
                        assert_eq!(got, passed, "{which}");
                        assert_eq!(takes, vec![8, 8, 4], "{which}");
                    }
                    other => panic!("{which}: expected a Params error, got {other:?}"),
                }
            }
            assert_eq!(
                gpu.stream.clone_dtoh(&buf).unwrap(),
                vec![0u32; 4],
                "{which}"
            );
            run(
                &gpu,
                &f,
                "fill_u32",
                cfg,
                &[Arg::P(p), Arg::U(4), Arg::I(7)],
            )
            .unwrap();
            assert_eq!(
                gpu.stream.clone_dtoh(&buf).unwrap(),
                vec![7u32; 4],
                "{which}"
            );
        }
    }

    /// The cap: one-wave launches below the kernel's bound only. Hand-derived from the 12B
    /// shapes on 132 SMs: attn_output's 240 tiles of the 4-per-SM kernel → 2 per SM; attn_v's
    /// 128 tiles at 2 per SM → 1; qkv's 512 tiles at 4 → ⌈512 / 132⌉ = 4, the bound (none);
    /// ffn_gate+ffn_up's 1920 tiles at 4 → more than one wave (none).
    #[test]
    fn spread_cap_one_wave_only() {
        assert_eq!(spread_cap(240, 132, 4), Some(2));
        assert_eq!(spread_cap(240, 132, 3), Some(2));
        assert_eq!(spread_cap(240, 132, 2), None);
        assert_eq!(spread_cap(128, 132, 2), Some(1));
        assert_eq!(spread_cap(512, 132, 4), None);
        assert_eq!(spread_cap(1920, 132, 4), None);
        assert_eq!(spread_cap(0, 132, 4), None);
        assert_eq!(spread_cap(5, 132, 0), None);
        assert_eq!(spread_cap(5, 0, 4), None); // 5 blocks on "1" SM at a bound of 4: two waves
    }

    /// The padding's defining property, checked over SM sizes of sm_80/86/90 (164, 99, 228 KiB),
    /// static sizes and caps: cap blocks of (static + padding + reserve), a multiple of 256, fit
    /// in the SM, cap + 1 do not, 256 bytes less would let cap + 1 in, and a block stays within
    /// the opt-in limit.
    #[test]
    fn spread_bytes_fits_cap_not_more() {
        let mut padded = 0;
        for per_sm in [167_936, 101_376, 233_472] {
            let (reserved, optin) = (1024, per_sm - 1024);
            for stat in [0, 1000, 20_000, 46_080, 49_152] {
                for cap in 1..=8u32 {
                    let Some(b) = spread_bytes(per_sm, reserved, optin, stat, cap) else {
                        continue;
                    };
                    padded += 1;
                    let (block, c) = (b + stat + reserved, cap as i32);
                    assert!(b > 0 && block % 256 == 0, "{per_sm} {stat} {cap}: {b}");
                    assert!(c * block <= per_sm, "{per_sm} {stat} {cap}: {b}");
                    assert!((c + 1) * block > per_sm, "{per_sm} {stat} {cap}: {b}");
                    assert!(
                        (c + 1) * (block - 256) <= per_sm,
                        "{per_sm} {stat} {cap}: {b}"
                    );
                    assert!(b + stat <= optin);
                }
            }
        }
        assert!(padded > 70, "{padded}");
        // H100/H200 (228 KiB, 1 KiB reserve), a 46 080-byte static kernel at 2 per SM:
        // 233 472 / 3 = 77 824 (a multiple of 256), + 256 − 1024 − 46 080 = 30 976.
        assert_eq!(
            spread_bytes(233_472, 1024, 232_448, 46_080, 2),
            Some(30_976)
        );
        assert_eq!(spread_bytes(233_472, 1024, 232_448, 46_080, 0), None);
        // The kernel alone keeps cap + 1 out: 101 376 / 3 = 33 792 < 49 152 + 1024 (no padding).
        assert_eq!(spread_bytes(101_376, 1024, 100_352, 49_152, 2), None);
    }

    /// The automatic two-heads rule and its guards, by hand on the 12B shapes (16 query heads;
    /// 8 KV heads at d = 256 on sliding layers of W = 1024, 1 at d = 512 on full ones): 4 rows
    /// whose latest position is 1023 see 1024 keys (pairs), 3 rows or position 1022 do not. The
    /// shared-memory guard: a span s has chunks of max(16, ⌈s / 32⌉) keys and the pair kernels
    /// 2·(round_up(chunk, 4) + 4)·4 bytes, ≤ 40 960 up to chunk 5116, i.e. s = 32·5116 = 163 712;
    /// s = 163 713 gives chunk 5117 → 2·5124·4 = 40 992 bytes (one head).
    #[test]
    fn attention_pairs_rule_and_guards() {
        if att_heads_forced().is_some() || att_generic() {
            eprintln!(
                "skipped: GEMMA4_ATT_HEADS / GEMMA4_ATT_GENERIC override the rule under test"
            );
            return;
        }
        assert!(attention_pairs(4, 1023));
        assert!(attention_pairs(8, 5000));
        assert!(!attention_pairs(3, 5000));
        assert!(!attention_pairs(8, 1022));
        assert!(!attention_pairs(1, 100_000));
        let one = |d| (attention_kernel(d), 1);
        // sliding d = 256 (nh / nkv = 2) and full d = 512 (16): the pair kernels
        assert_eq!(
            attention_launch(256, (16, 8), 1024, 1024, true),
            ("attention_d256_h2_f32", 2)
        );
        assert_eq!(
            attention_launch(512, (16, 1), 0, 2100, true),
            ("attention_d512_h2_f32", 2)
        );
        // not asked for; a window below the key threshold; an odd group; no pair kernel for d
        assert_eq!(attention_launch(256, (16, 8), 1024, 1024, false), one(256));
        assert_eq!(attention_launch(256, (16, 8), 512, 512, true), one(256));
        assert_eq!(attention_launch(256, (12, 4), 1024, 1024, true), one(256));
        assert_eq!(attention_launch(256, (16, 16), 1024, 1024, true), one(256));
        assert_eq!(attention_launch(128, (16, 8), 0, 4096, true), one(128));
        assert_eq!(attention_launch(256, (16, 0), 1024, 1024, true), one(256));
        // the shared-memory guard at its boundary, and the 12B's 262 144-token context
        assert_eq!(
            attention_launch(512, (16, 1), 0, 163_712, true),
            ("attention_d512_h2_f32", 2)
        );
        assert_eq!(attention_launch(512, (16, 1), 0, 163_713, true), one(512));
        assert_eq!(attention_launch(512, (16, 1), 0, 262_144, true), one(512));
    }

    fn sliding(w: usize, source: usize, owns: bool) -> KvLayerSpec {
        KvLayerSpec {
            window: Some(w),
            source,
            owns,
        }
    }

    fn full(source: usize, owns: bool) -> KvLayerSpec {
        KvLayerSpec {
            window: None,
            source,
            owns,
        }
    }

    /// Hand-derived: W = 1024 → 1024 + 32 = 1056 ring rows (capped at ctx); full → ctx.
    /// Position 1056 wraps to row 0, 2113 = 2·1056 + 1 to row 1.
    #[test]
    fn topk_entries_reads_ids_and_value_bits() {
        // By hand: ids at [0, 16), value bits at [16, 32), count at 32; id −1 = missing.
        let mut row = vec![0i32; TK_STRIDE];
        row[0] = 7;
        row[TOPK_MAX] = 2.5f32.to_bits() as i32;
        row[1] = 3;
        row[TOPK_MAX + 1] = (-1.0f32).to_bits() as i32;
        row[2] = -1;
        assert_eq!(topk_entries(&row, 3), vec![(7, 2.5), (3, -1.0)]);
        assert_eq!(topk_entries(&row, 1), vec![(7, 2.5)]);
    }

    #[test]
    fn rows_and_ring_row() {
        assert_eq!(kv_rows(Some(1024), 12_000), 1056);
        assert_eq!(kv_rows(Some(1024), 500), 500);
        assert_eq!(kv_rows(None, 12_000), 12_000);
        // A window beyond every position (a u64 key of 2^64 − 1) is full attention: the ring is
        // the whole context, no `W + 32` overflow.
        assert_eq!(kv_rows(Some(usize::MAX), 12_000), 12_000);
        assert_eq!(ring_row(0, 1056), 0);
        assert_eq!(ring_row(1055, 1056), 1055);
        assert_eq!(ring_row(1056, 1056), 0);
        assert_eq!(ring_row(2113, 1056), 1);
        assert_eq!(ring_row(11_999, 12_000), 11_999);
    }

    /// Hand-derived from §4.6: a query at 10 with W = 4 sees 7, 8, 9 (and itself); at 3 it sees
    /// 0, 1, 2; full attention sees 0 … 9. A ring of 36 rows after writes up to 99 holds 64 … 99.
    #[test]
    fn needed_and_held_positions() {
        assert_eq!(needed(0, Some(4)), 0..0);
        assert_eq!(needed(3, Some(4)), 0..3);
        assert_eq!(needed(10, Some(4)), 7..10);
        assert_eq!(needed(10, Some(1)), 10..10);
        assert_eq!(needed(10, None), 0..10);
        assert_eq!(held(10, 10, 36), 0..10);
        assert_eq!(held(100, 100, 36), 64..100);
        assert_eq!(held(50, 100, 36), 50..50);
    }

    /// Gemma-4 12B shapes (`spec/gemma4-text.md` §13): 40 sliding layers 8 × 256, 8 full layers
    /// 1 × 512, W = 1024, ctx 12 000, K and V f32. By hand, per slot:
    /// before (every position): 12 000 · (40·2048 + 8·512) · 2 · 4 B = 8 257 536 000 B;
    /// after: 40 · 1056 · 2048 · 8 B + 8 · 12 000 · 512 · 8 B = 692 060 160 + 393 216 000
    /// = 1 085 276 160 B.
    #[test]
    fn twelve_b_bytes_per_slot() {
        let ctx = 12_000;
        let mut layers = Vec::new();
        for i in 0..48 {
            layers.push(if i % 6 == 5 {
                full(i, true)
            } else {
                sliding(1024, i, true)
            });
        }
        let book = KvBook::new(&layers, 1, ctx).unwrap();
        let bytes: usize = (0..48)
            .map(|l| {
                let g = book.own(l).unwrap();
                let w = if g.window.is_some() { 8 * 256 } else { 512 };
                2 * 4 * g.rows * w
            })
            .sum();
        assert_eq!(bytes, 1_085_276_160);
        let before: usize = 2 * 4 * ctx * (40 * 2048 + 8 * 512);
        assert_eq!(before, 8_257_536_000);
    }

    /// §4.8: reuse layers read their source's storage and geometry; a storage is sized for its
    /// widest reader (a wider sliding reader widens the ring, a full reader makes it linear).
    #[test]
    fn kv_sharing_geometry() {
        let ctx = 100;
        let b = KvBook::new(
            &[
                sliding(4, 0, true),
                full(1, true),
                sliding(4, 0, false),
                full(1, false),
            ],
            2,
            ctx,
        )
        .unwrap();
        let g0 = KvGeom {
            rows: 36,
            window: Some(4),
        };
        let g1 = KvGeom {
            rows: 100,
            window: None,
        };
        assert_eq!(b.own(0), Some(g0));
        assert_eq!(b.own(1), Some(g1));
        assert_eq!(b.own(2), None);
        assert_eq!(b.read(2), Some((0, g0)));
        assert_eq!(b.read(3), Some((1, g1)));

        let wide = KvBook::new(&[sliding(4, 0, true), sliding(8, 0, false)], 1, ctx).unwrap();
        assert_eq!(
            wide.own(0),
            Some(KvGeom {
                rows: 40,
                window: Some(8)
            })
        );
        let lin = KvBook::new(&[sliding(4, 0, true), full(0, false)], 1, ctx).unwrap();
        assert_eq!(
            lin.own(0),
            Some(KvGeom {
                rows: 100,
                window: None
            })
        );
        assert!(matches!(
            KvBook::new(
                &[sliding(4, 0, true), full(2, false), full(2, false)],
                1,
                ctx
            ),
            Err(RuntimeError::Model { .. })
        ));
        assert!(matches!(
            KvBook::new(&[sliding(4, 0, true)], 1, MAX_CTX + 1),
            Err(RuntimeError::Capacity(_))
        ));
    }

    /// Hand-derived rollback case: W = 4, ring rows 36, 50 positions written (held 14 … 49).
    /// Truncating to 17 needs 14 … 16 (held: 50 − 17 = 33 = CHUNK_ROWS + 1 removed); to 16
    /// needs 13 … 15 but 13 is gone → RollbackPastWindow, then forwards are refused until a
    /// reachable truncate (back to 17) succeeds. A reset makes the slot usable from 0.
    #[test]
    fn rollback_bound_and_typed_error() {
        let mut b = KvBook::new(&[sliding(4, 0, true), full(1, true)], 2, 100).unwrap();
        b.note_written(0, 50);
        b.set_len(0, 50);
        assert_eq!(b.held(0, 0), 14..50);
        assert_eq!(b.held(0, 1), 0..50);
        b.check_usable(0).unwrap();
        b.truncate(0, 17).unwrap();
        b.check_usable(0).unwrap();
        match b.truncate(0, 16) {
            Err(RuntimeError::RollbackPastWindow {
                slot: 0,
                layer: 0,
                len: 16,
                cached: 17,
                window: 4,
                rows: 36,
                needed_from: 13,
                oldest_held: 14,
            }) => {}
            other => panic!("expected RollbackPastWindow, got {other:?}"),
        }
        assert_eq!(b.len(0), 17);
        assert!(matches!(
            b.check_usable(0),
            Err(RuntimeError::KvRefused {
                slot: 0,
                asked: 16,
                len: 17
            })
        ));
        assert!(matches!(
            b.check_rows(0, 0, 14..17),
            Err(RuntimeError::KvRefused { .. })
        ));
        b.truncate(0, 17).unwrap();
        b.check_usable(0).unwrap();
        b.check_rows(0, 0, 14..17).unwrap();
        assert!(matches!(
            b.check_rows(0, 0, 13..17),
            Err(RuntimeError::KvNotHeld {
                slot: 0,
                layer: 0,
                asked: std::ops::Range { start: 13, end: 17 },
                held: std::ops::Range { start: 14, end: 17 },
                rows: 36,
            })
        ));
        // Slot 1 is untouched; a bad truncate is a capacity error.
        b.check_usable(1).unwrap();
        assert!(matches!(b.truncate(1, 1), Err(RuntimeError::Capacity(_))));
        // A forward that failed after writing 40 rows past 17 (high = 57, len still 17): the
        // ring holds 21 … and the next query at 17 needs 14 …: refused by position.
        b.note_written(0, 57);
        assert!(matches!(
            b.check_usable(0),
            Err(RuntimeError::KvNotHeld { layer: 0, .. })
        ));
        b.reset_slot(0);
        b.check_usable(0).unwrap();
        assert_eq!(b.held(0, 0), 0..0);
    }

    /// An independent model of the device storage: a ring of `rows` entries recording which
    /// position each row holds, written exactly as `qkv_post_f32` places rows (`p mod rows`,
    /// chunks of ≤ CHUNK_ROWS written before they attend). Over pseudo-random chunked forwards
    /// and rollbacks: whenever the bookkeeping accepts a forward, every key each row attends
    /// to is in the ring; whenever it accepts a rollback or a draft read, the needed rows are
    /// there; and rolling back up to CHUNK_ROWS positions after a forward is always accepted.
    #[test]
    fn bookkeeping_matches_a_simulated_ring() {
        let (w, ctx) = (5usize, 400usize);
        let mut b = KvBook::new(&[sliding(w, 0, true)], 1, ctx).unwrap();
        let rows = b.own(0).unwrap().rows;
        assert_eq!(rows, w + CHUNK_ROWS);
        let mut ring: Vec<Option<usize>> = vec![None; rows];
        let has = |ring: &[Option<usize>], r: std::ops::Range<usize>| {
            r.clone().all(|q| ring[q % rows] == Some(q))
        };
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut accepted_rollbacks = 0;
        let mut refused_rollbacks = 0;
        // One past the furthest position written since the slot was emptied (as the test sees
        // it, independently of the bookkeeping).
        let mut hi = 0usize;
        for _ in 0..4000 {
            let len = b.len(0);
            if rnd(3) > 0 && len + 3 * CHUNK_ROWS < ctx {
                // A forward of up to 3 chunks (as Forward::run plans them).
                assert!(has(&ring, needed(len, Some(w))));
                b.check_usable(0).unwrap();
                let n = 1 + rnd(3 * CHUNK_ROWS);
                let mut p = len;
                while p < len + n {
                    let e = (p + CHUNK_ROWS).min(len + n);
                    b.note_written(0, e);
                    for q in p..e {
                        ring[q % rows] = Some(q);
                    }
                    hi = hi.max(e);
                    for q in p..e {
                        assert!(has(&ring, (q + 1).saturating_sub(w)..q + 1), "key of {q}");
                    }
                    p = e;
                }
                b.set_len(0, len + n);
                // Any length ≥ hi − CHUNK_ROWS − 1 can be rolled back to.
                let lo = hi.saturating_sub(CHUNK_ROWS + 1);
                assert!(lo <= len + n);
                let to = (len + n).saturating_sub(rnd(CHUNK_ROWS + 2)).max(lo);
                b.truncate(0, to).unwrap();
                assert!(has(&ring, needed(to, Some(w))));
            } else {
                let to = len - rnd(3 * CHUNK_ROWS).min(len);
                let ok = has(&ring, needed(to, Some(w)));
                match b.truncate(0, to) {
                    Ok(()) => {
                        assert!(ok, "accepted rollback to {to} lacks rows");
                        accepted_rollbacks += 1;
                        if to == 0 {
                            hi = 0;
                        } else {
                            b.check_rows(0, 0, (to + 1).saturating_sub(w)..to).unwrap();
                        }
                    }
                    Err(RuntimeError::RollbackPastWindow { .. }) => {
                        // Exact: refused only when a needed row is really gone.
                        assert!(!ok, "refused rollback to {to} had every row");
                        refused_rollbacks += 1;
                        assert!(b.check_usable(0).is_err());
                        b.truncate(0, len).unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            if b.len(0) + 4 * CHUNK_ROWS >= ctx {
                b.reset_slot(0);
                ring.iter_mut().for_each(|r| *r = None);
                hi = 0;
            }
        }
        assert!(accepted_rollbacks > 100 && refused_rollbacks > 100);
    }
}
