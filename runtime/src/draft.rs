//! The Gemma-4 assistant (MTP drafter) on the GPU: `spec/gemma4-assistant-mtp.md` §1.2
//! (weights), §2 (one drafter forward over the target's cached K/V), §3 (centroid head), as the
//! oracle computes it (`reference::spec::Assistant::forward`), op by op with the target's kernels.
//!
//! One draft step `D(x, g, p, KV)`: `u = [E_T[x]·√H_T ‖ g]`, `z = W_pre·u`, per layer the
//! query-only attention (queries rotated at the round's constant position `p`, keys/values = the
//! target store layer's cache rows `S_τ(p)`: full `0 … p−1`, sliding `max(0, p−W+1) … p−1`,
//! §2.3, §2.5; read with the store layer's storage geometry — a ring of `W + 32` rows on
//! sliding storage — after checking that every visible row is still held) and the GeGLU MLP,
//! final norm `n`, `g' = W_post·n` written straight into the second half of `u` for the next
//! step, logits `E_A·n` (no soft-cap), greedy id by the `argmax_f32` kernel into a device array
//! (the next step embeds it from there). A round of `K` steps copies `K` ids to the host once.
//! The centroid head (§3.1) is applied on the host to the full logits and the cluster scores
//! (§3.3 allows computing the full head and masking).
//!
//! The drafter computes no K/V and writes no cache (§2.2 "query-only").
#![allow(unsafe_code)]

use cudarc::driver::CudaSlice;
use reference::config::{blk, AssistantConfig, Config};
use reference::gguf::GgufFile;
use reference::spec::StoreLayers;

use crate::error::{drv, RuntimeError};
use crate::forward::{n1d, ptr, Arg, Forward, KvCache};
use crate::loader::{check_weights, model_err, DeviceModel, Loader, Mat};
use crate::Gpu;
use reference::model::LoadOptions;

mod synthetic;

/// One query-only drafter layer on the device (§1.2; GGUF suffix names).
pub struct DraftLayer {
    /// Sliding (`true`) or full layer.
    pub sliding: bool,
    /// Query heads.
    pub n_head: usize,
    /// KV heads of the target cache read.
    pub n_kv: usize,
    /// Head dim.
    pub head_dim: usize,
    /// MLP width.
    pub n_ff: usize,
    attn_norm: CudaSlice<f32>,
    attn_q: Mat,
    attn_q_norm: CudaSlice<f32>,
    attn_output: Mat,
    post_attention_norm: CudaSlice<f32>,
    ffn_norm: CudaSlice<f32>,
    ffn_gate: Mat,
    ffn_up: Mat,
    ffn_down: Mat,
    post_ffw_norm: CudaSlice<f32>,
    layer_scalar: f32,
    inv_freq: CudaSlice<f64>,
}

/// The centroid head's parameters (§3.1): `Cw` `[C, H_A]` on the device, the ordering
/// (`C × M` table of canonical ids) and `k_c` on the host.
pub struct CentroidHead {
    centroids: Mat,
    ordering: Vec<u32>,
    top_k: usize,
}

/// Which head the drafter runs (§3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DraftHead {
    /// `E_A · n` over all ids.
    Full,
    /// §3.1 centroid head.
    Centroid,
}

/// One teacher-forced drafter step copied back from the device
/// ([`DeviceAssistant::draft_forced`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DraftStepRow {
    /// Full-head logits `E_A · n` `[V]` f32 (never soft-capped, §2.6; for the centroid head
    /// these are the values before the §3.1 selection, which equal the selected ids' logits).
    pub logits: Vec<f32>,
    /// `g' = W_post · n` `[H_T]` f32 (§2.6).
    pub hidden: Vec<f32>,
    /// The drafter's own pick at this step by its current head (the argmax kernel: lowest id on
    /// ties; or the §3.1 centroid selection).
    pub token: u32,
}

/// The uploaded weights of a drafter (§1.2), before its scratch buffers exist.
struct DraftWeights {
    layers: Vec<DraftLayer>,
    token_embd: Mat,
    pre_projection: Mat,
    post_projection: Mat,
    output_norm: CudaSlice<f32>,
    centroid: Option<CentroidHead>,
    weight_bytes: usize,
}

/// A drafter on the device plus its scratch buffers.
pub struct DeviceAssistant {
    /// Assistant configuration (GGUF metadata).
    pub config: AssistantConfig,
    /// Target store layers read (§2.3).
    pub store: StoreLayers,
    /// Head in use.
    pub head: DraftHead,
    /// Target sliding window `W`.
    pub window: usize,
    layers: Vec<DraftLayer>,
    token_embd: Mat,
    pre_projection: Mat,
    post_projection: Mat,
    output_norm: CudaSlice<f32>,
    centroid: Option<CentroidHead>,
    /// Bytes of drafter weights uploaded.
    pub weight_bytes: usize,
    // scratch (one row)
    u: CudaSlice<f32>,
    z: CudaSlice<f32>,
    a: CudaSlice<f32>,
    q: CudaSlice<f32>,
    att: CudaSlice<f32>,
    r: CudaSlice<f32>,
    g: CudaSlice<f32>,
    up: CudaSlice<f32>,
    n: CudaSlice<f32>,
    logits: CudaSlice<f32>,
    cscore: CudaSlice<f32>,
    ids: CudaSlice<i32>,
    vals: CudaSlice<f32>,
    /// `[slot, pos, lo_sliding, cnt_sliding, lo_full, cnt_full]`.
    meta: CudaSlice<i32>,
}

/// Longest draft a round may request (size of the id buffer).
pub const MAX_DRAFT: usize = 16;

fn pairing(detail: String) -> RuntimeError {
    RuntimeError::Model {
        what: "assistant/target pairing".into(),
        detail,
    }
}

/// Whether the assistant of `config` can draft for the target of `tc` on the GPU
/// (`spec/gemma4-assistant-mtp.md` §1.1 pairing: backbone width, vocabulary, RoPE and window of
/// the layer types it uses; per layer a target store layer of its type with the same KV heads
/// and head dim, a head dim the attention kernel takes). Reads no weights and needs no GPU, so
/// the `runtime` binary checks its arguments with it before probing CUDA. Returns the store
/// layers.
///
/// Errors: [`RuntimeError::Model`] (`assistant/target pairing`) naming what differs;
/// [`RuntimeError::Shape`] for a head dim beyond the attention kernel's limit.
pub fn check_pairing(config: &AssistantConfig, tc: &Config) -> Result<StoreLayers, RuntimeError> {
    config
        .check_pairing(tc)
        .map_err(|e| pairing(e.to_string()))?;
    let store = StoreLayers::of(tc);
    let uses = |swa: bool| config.is_swa.contains(&swa);
    if uses(true)
        && (config.rope_base_swa != tc.rope_base_swa || config.sliding_window != tc.sliding_window)
    {
        return Err(pairing(
            "sliding RoPE θ or window differs from the target".into(),
        ));
    }
    if uses(false)
        && (config.rope_base_full != tc.rope_base_full
            || config.rope_pairs_full != tc.rope_pairs_full)
    {
        return Err(pairing("full-layer RoPE differs from the target".into()));
    }
    for l in 0..config.n_layer {
        let d = config.head_dim(l);
        crate::loader::check_head_dim(l, d)?;
        let src = store.of_type(config.is_swa[l]).ok_or_else(|| {
            pairing(format!(
                "drafter layer {l}: the target has no store layer of its type"
            ))
        })?;
        let (tkv, td) = (tc.n_head_kv[src], tc.head_dim(src));
        let (nh, nkv) = (config.n_head[l], config.n_head_kv[l]);
        if tkv != nkv || td != d || nkv == 0 || nh % nkv != 0 {
            return Err(pairing(format!(
                "drafter layer {l}: {nh} heads over {nkv} KV heads of dim {d}, target layer {src} has {tkv} of dim {td}"
            )));
        }
    }
    Ok(store)
}

/// The CPU side of [`DeviceAssistant::load_with`]: opens the assistant GGUF at `path`, reads
/// its metadata, then checks its weights as `opts` asks ([`check_weights`], conformance
/// contract §9). Errors: unreadable file or bad metadata ([`RuntimeError::Model`] naming the
/// path), [`RuntimeError::NonFiniteWeight`] naming tensor, block and field.
pub fn open_checked(
    path: &std::path::Path,
    opts: LoadOptions,
) -> Result<(GgufFile, AssistantConfig), RuntimeError> {
    let p = path.display().to_string();
    let file = GgufFile::open(path).map_err(|e| model_err(&p, e))?;
    let config = AssistantConfig::from_gguf(&file).map_err(|e| model_err(&p, e))?;
    check_weights(&file, opts)?;
    Ok((file, config))
}

impl DeviceAssistant {
    /// Loads the assistant GGUF at `path` for `target` (checks §1.1 pairing: backbone width,
    /// vocabulary, per-type head dims and KV heads of the store layers, RoPE, window).
    ///
    /// Every weight is checked for NaN/±Inf before any upload (default [`LoadOptions`]).
    ///
    /// Errors: unreadable file, bad metadata, [`RuntimeError::NonFiniteWeight`], missing
    /// tensor, pairing mismatch, driver errors.
    pub fn load(
        gpu: &Gpu,
        path: &std::path::Path,
        target: &DeviceModel,
    ) -> Result<DeviceAssistant, RuntimeError> {
        Self::load_with(gpu, path, target, LoadOptions::default())
    }

    /// [`DeviceAssistant::load`] with `opts`: the file is opened once, its metadata read,
    /// its weights checked as `opts` asks ([`open_checked`]; `allow_nonfinite` skips the
    /// check), then the drafter is uploaded. Errors as [`DeviceAssistant::load`].
    pub fn load_with(
        gpu: &Gpu,
        path: &std::path::Path,
        target: &DeviceModel,
        opts: LoadOptions,
    ) -> Result<DeviceAssistant, RuntimeError> {
        let (file, config) = open_checked(path, opts)?;
        Self::from_gguf(gpu, &file, config, &target.config)
    }

    /// [`DeviceAssistant::load_with`] from an assistant file opened by the caller and its
    /// parsed config: the weights are checked as `opts` asks ([`check_weights`]), then the
    /// drafter is uploaded; the file is not opened again. Errors as [`DeviceAssistant::load`],
    /// less the file's opening and metadata.
    pub fn from_gguf_with(
        gpu: &Gpu,
        file: &GgufFile,
        config: AssistantConfig,
        target: &DeviceModel,
        opts: LoadOptions,
    ) -> Result<DeviceAssistant, RuntimeError> {
        check_weights(file, opts)?;
        Self::from_gguf(gpu, file, config, &target.config)
    }

    fn from_gguf(
        gpu: &Gpu,
        file: &GgufFile,
        config: AssistantConfig,
        tc: &Config,
    ) -> Result<DeviceAssistant, RuntimeError> {
        let store = check_pairing(&config, tc)?;
        let mut ld = Loader {
            gpu,
            file,
            bytes: 0,
        };
        let mut layers = Vec::new();
        for l in 0..config.n_layer {
            let name = |s: &str| blk(l, s);
            let sliding = config.is_swa[l];
            let d = config.head_dim(l);
            let (nh, nkv) = (config.n_head[l], config.n_head_kv[l]);
            let (theta, pairs) = if sliding {
                (config.rope_base_swa, d / 2)
            } else {
                (config.rope_base_full, config.rope_pairs_full)
            };
            let inv: Vec<f64> = reference::model::rope::inv_freq::<f64>(theta, d, pairs);
            let layer_scalar = ld.layer_scalar(l)?;
            layers.push(DraftLayer {
                sliding,
                n_head: nh,
                n_kv: nkv,
                head_dim: d,
                n_ff: config.n_ff[l],
                attn_norm: ld.vec(&name("attn_norm.weight"))?,
                attn_q: ld.mat(&name("attn_q.weight"))?,
                attn_q_norm: ld.vec(&name("attn_q_norm.weight"))?,
                attn_output: ld.mat(&name("attn_output.weight"))?,
                post_attention_norm: ld.vec(&name("post_attention_norm.weight"))?,
                ffn_norm: ld.vec(&name("ffn_norm.weight"))?,
                ffn_gate: ld.mat(&name("ffn_gate.weight"))?,
                ffn_up: ld.mat(&name("ffn_up.weight"))?,
                ffn_down: ld.mat(&name("ffn_down.weight"))?,
                post_ffw_norm: ld.vec(&name("post_ffw_norm.weight"))?,
                layer_scalar,
                inv_freq: gpu.stream.clone_htod(&inv).map_err(drv("upload rope"))?,
            });
        }
        let centroid = load_centroid(&mut ld, &config)?;
        let head = if config.use_ordered_embeddings && centroid.is_some() {
            DraftHead::Centroid
        } else {
            DraftHead::Full
        };
        let token_embd = ld.mat("token_embd.weight")?;
        let pre_projection = ld.mat("nextn.pre_projection.weight")?;
        let post_projection = ld.mat("nextn.post_projection.weight")?;
        let output_norm = ld.vec("output_norm.weight")?;
        let weights = DraftWeights {
            layers,
            token_embd,
            pre_projection,
            post_projection,
            output_norm,
            centroid,
            weight_bytes: ld.bytes,
        };
        Self::assemble(gpu, config, store, tc.sliding_window, head, weights)
    }

    /// A drafter from uploaded weights: allocates the one-row scratch buffers for `config`'s
    /// widths (widest layer's `n_head·head_dim` and `n_ff`, the vocabulary, the centroid count).
    ///
    /// Errors: driver errors (allocation).
    fn assemble(
        gpu: &Gpu,
        config: AssistantConfig,
        store: StoreLayers,
        window: usize,
        head: DraftHead,
        w: DraftWeights,
    ) -> Result<DeviceAssistant, RuntimeError> {
        let (ht, ha) = (config.n_embd_out, config.n_embd);
        let qw = w
            .layers
            .iter()
            .map(|l| l.n_head * l.head_dim)
            .max()
            .unwrap_or(1);
        let ff = w.layers.iter().map(|l| l.n_ff).max().unwrap_or(1);
        let f32s = |n: usize| {
            gpu.stream
                .alloc_zeros::<f32>(n.max(1))
                .map_err(drv("alloc drafter"))
        };
        let i32s = |n: usize| {
            gpu.stream
                .alloc_zeros::<i32>(n)
                .map_err(drv("alloc drafter"))
        };
        let cn = w.centroid.as_ref().map_or(1, |c| c.centroids.rows);
        Ok(DeviceAssistant {
            u: f32s(2 * ht)?,
            z: f32s(ha)?,
            a: f32s(ha)?,
            q: f32s(qw)?,
            att: f32s(qw)?,
            r: f32s(ha)?,
            g: f32s(ff)?,
            up: f32s(ff)?,
            n: f32s(ha)?,
            logits: f32s(config.n_vocab)?,
            cscore: f32s(cn)?,
            vals: f32s(MAX_DRAFT)?,
            ids: i32s(MAX_DRAFT + 1)?,
            meta: i32s(6)?,
            window,
            config,
            store,
            head,
            layers: w.layers,
            token_embd: w.token_embd,
            pre_projection: w.pre_projection,
            post_projection: w.post_projection,
            output_norm: w.output_norm,
            centroid: w.centroid,
            weight_bytes: w.weight_bytes,
        })
    }

    /// Whether the GGUF carried the centroid tensors.
    pub fn has_centroid_head(&self) -> bool {
        self.centroid.is_some()
    }

    /// Selects the head (§3.4). Errors: centroid head without its tensors.
    pub fn set_head(&mut self, head: DraftHead) -> Result<(), RuntimeError> {
        if head == DraftHead::Centroid && self.centroid.is_none() {
            return Err(pairing(
                "centroid head requested but absent from the GGUF".into(),
            ));
        }
        self.head = head;
        Ok(())
    }

    /// One round of drafting (§4.1 step 2): `k` steps from token `x` (= `t_p`) and the carried
    /// hidden state at device address `hidden` (`[H_T]` f32, the target's final-normed row
    /// `p−1`), all at position `p`, over the target cache `cache` (slot `slot`, rows `< p` only).
    /// Returns the `k` draft ids.
    ///
    /// Errors: `k` outside `1 ..= MAX_DRAFT`, `p = 0`, `x ≥ V`, kernel/driver errors.
    #[allow(clippy::too_many_arguments)]
    pub fn draft(
        &mut self,
        fw: &Forward<'_>,
        cache: &KvCache,
        slot: usize,
        x: u32,
        hidden: u64,
        p: usize,
        k: usize,
    ) -> Result<Vec<u32>, RuntimeError> {
        self.run_steps(fw, cache, slot, x, hidden, p, k, None)
            .map(|(ids, _)| ids)
    }

    /// Teacher-forced drafter steps (drafter check against the oracle's
    /// `reference::spec::Assistant::forward`, `spec/gemma4-assistant-mtp.md` §6.3 item 5): as
    /// [`DeviceAssistant::draft`] with `k = inputs.len()`, `x = inputs[0]`, except that step
    /// `i + 1` embeds `inputs[i]` instead of the previous step's pick (step 1 embeds `x`; `g`
    /// is still the drafter's own `g'`). After each step its full-head logits `E_A · n` `[V]` and
    /// `g'` `[H_T]` are copied to the host (one synchronisation per step), with the pick of the
    /// current head.
    ///
    /// Errors: as [`DeviceAssistant::draft`] (empty `inputs`, more than `MAX_DRAFT`, an id
    /// `≥ V` at any step).
    pub fn draft_forced(
        &mut self,
        fw: &Forward<'_>,
        cache: &KvCache,
        slot: usize,
        inputs: &[u32],
        hidden: u64,
        p: usize,
    ) -> Result<Vec<DraftStepRow>, RuntimeError> {
        let v = self.config.n_vocab;
        if let Some(&bad) = inputs.iter().find(|&&t| t as usize >= v) {
            return Err(RuntimeError::Capacity(format!(
                "teacher-forced draft input {bad} ≥ V = {v}"
            )));
        }
        let x = inputs.first().copied().unwrap_or(0);
        self.run_steps(fw, cache, slot, x, hidden, p, inputs.len(), Some(inputs))
            .map(|(_, kept)| kept)
    }

    /// The draft loop of [`DeviceAssistant::draft`]; with `forced` the teacher-forced variant of
    /// [`DeviceAssistant::draft_forced`] (`forced[i]` embedded at step `i + 1`, rows returned).
    #[allow(clippy::too_many_arguments)]
    fn run_steps(
        &mut self,
        fw: &Forward<'_>,
        cache: &KvCache,
        slot: usize,
        x: u32,
        hidden: u64,
        p: usize,
        k: usize,
        forced: Option<&[u32]>,
    ) -> Result<(Vec<u32>, Vec<DraftStepRow>), RuntimeError> {
        let gpu = fw.gpu;
        let s = &gpu.stream;
        let (ht, ha, v) = (
            self.config.n_embd_out,
            self.config.n_embd,
            self.config.n_vocab,
        );
        if k == 0 || k > MAX_DRAFT || p == 0 || x as usize >= v {
            return Err(RuntimeError::Capacity(format!(
                "draft of {k} tokens (1..={MAX_DRAFT}) at position {p} from token {x}"
            )));
        }
        let lo_s = (p + 1).saturating_sub(self.window);
        let meta = [
            slot as i32,
            p as i32,
            lo_s as i32,
            (p - lo_s) as i32,
            0,
            p as i32,
        ];
        s.memcpy_htod(&meta, &mut self.meta)
            .map_err(drv("upload draft meta"))?;
        s.memcpy_htod(&[x as i32], &mut self.ids.slice_mut(0..1))
            .map_err(drv("upload draft token"))?;
        let u = ptr(gpu, &self.u);
        let g_in = u + (ht * 4) as u64;
        // SAFETY: both are device buffers of ≥ H_T floats (u holds 2·H_T; `hidden` is a row of
        // the target workspace's hidden states, H_T floats).
        unsafe { cudarc::driver::result::memcpy_dtod_async(g_in, hidden, ht * 4, s.cu_stream()) }
            .map_err(drv("copy carried hidden"))?;
        let eps = self.config.rms_eps as f32;
        let (z, a, q, att, r) = (
            ptr(gpu, &self.z),
            ptr(gpu, &self.a),
            ptr(gpu, &self.q),
            ptr(gpu, &self.att),
            ptr(gpu, &self.r),
        );
        let (gp, upp, np, lg) = (
            ptr(gpu, &self.g),
            ptr(gpu, &self.up),
            ptr(gpu, &self.n),
            ptr(gpu, &self.logits),
        );
        let (idsp, valsp, metap) = (
            ptr(gpu, &self.ids),
            ptr(gpu, &self.vals),
            ptr(gpu, &self.meta),
        );
        let slotp = metap;
        let posp = metap + 4;
        // The target store layers' storage (§2.3) with its geometry: rows per slot (a ring on
        // sliding storage, position j at row j mod rows) and a check that the visible rows
        // S_τ(p) (§2.5) are all still held — never read a ring row that holds another position.
        let mut rows_of = [0usize; 2];
        for (i, sliding) in [false, true].into_iter().enumerate() {
            if let Some(src) = self.store.of_type(sliding) {
                let lo = if sliding { lo_s } else { 0 };
                cache.book().check_rows(slot, src, lo..p)?;
                rows_of[i] = cache.rows(src)?;
            }
        }
        let mut out = Vec::with_capacity(k);
        let mut kept = Vec::new();
        for i in 0..k {
            // §2.1: u = [E_T[x]·√H_T ‖ g]; z = W_pre · u.
            fw.embed(
                &fw.model.token_embd,
                idsp + (i * 4) as u64,
                1,
                u,
                (ht as f32).sqrt(),
            )?;
            fw.mv(&self.pre_projection, u, 1, z)?;
            for l in &self.layers {
                let (nh, nkv, d) = (l.n_head, l.n_kv, l.head_dim);
                let src = self
                    .store
                    .of_type(l.sliding)
                    .ok_or_else(|| pairing("no store layer".into()))?;
                let rows = rows_of[usize::from(l.sliding)];
                let (kc, vc) = cache.layers[src].as_ref().ok_or_else(|| {
                    RuntimeError::Capacity(format!("target layer {src} has no cache"))
                })?;
                fw.rmsnorm_eps(z, Some(ptr(gpu, &l.attn_norm)), a, 1, ha, eps)?;
                fw.mv(&l.attn_q, a, 1, q)?;
                fw.rmsnorm_eps(q, Some(ptr(gpu, &l.attn_q_norm)), q, nh, d, eps)?;
                fw.rope(q, posp, ptr(gpu, &l.inv_freq), 1, nh, d)?;
                let (lop, cntp, span) = if l.sliding {
                    (metap + 8, metap + 12, p - lo_s)
                } else {
                    (metap + 16, metap + 20, p)
                };
                fw.call(
                    "attention_rows_f32",
                    (nh as u32, 1, 1),
                    128,
                    kernels::attention_smem_bytes(span),
                    &[
                        Arg::P(q),
                        Arg::P(ptr(gpu, kc)),
                        Arg::P(ptr(gpu, vc)),
                        Arg::P(slotp),
                        Arg::P(lop),
                        Arg::P(cntp),
                        Arg::P(att),
                        Arg::I(nh as i32),
                        Arg::I(nkv as i32),
                        Arg::I(d as i32),
                        Arg::I(rows as i32),
                    ],
                )?;
                fw.mv(&l.attn_output, att, 1, r)?;
                fw.rmsnorm_add_eps(r, ptr(gpu, &l.post_attention_norm), z, 1, ha, eps)?;
                fw.rmsnorm_eps(z, Some(ptr(gpu, &l.ffn_norm)), a, 1, ha, eps)?;
                fw.mv(&l.ffn_gate, a, 1, gp)?;
                fw.mv(&l.ffn_up, a, 1, upp)?;
                fw.call(
                    "geglu_f32",
                    n1d(l.n_ff),
                    256,
                    0,
                    &[Arg::P(gp), Arg::P(upp), Arg::P(gp), Arg::U(l.n_ff as u64)],
                )?;
                fw.mv(&l.ffn_down, gp, 1, r)?;
                fw.rmsnorm_add_eps(r, ptr(gpu, &l.post_ffw_norm), z, 1, ha, eps)?;
                if l.layer_scalar != 1.0 {
                    fw.call(
                        "scale_f32",
                        n1d(ha),
                        256,
                        0,
                        &[Arg::P(z), Arg::U(ha as u64), Arg::F(l.layer_scalar)],
                    )?;
                }
            }
            // §2.6: n = rms(z); g' = W_post · n (into u's second half); logits = E_A · n.
            fw.rmsnorm_eps(z, Some(ptr(gpu, &self.output_norm)), np, 1, ha, eps)?;
            fw.mv(&self.post_projection, np, 1, g_in)?;
            fw.mv(&self.token_embd, np, 1, lg)?;
            match self.head {
                DraftHead::Full => {
                    fw.call(
                        "argmax_f32",
                        (1, 1, 1),
                        1024,
                        0,
                        &[
                            Arg::P(lg),
                            Arg::P(idsp + ((i + 1) * 4) as u64),
                            Arg::P(valsp + (i * 4) as u64),
                            Arg::I(v as i32),
                        ],
                    )?;
                }
                DraftHead::Centroid => {
                    let t = self.centroid_pick(fw, np)?;
                    out.push(t);
                    s.memcpy_htod(&[t as i32], &mut self.ids.slice_mut(i + 1..i + 2))
                        .map_err(drv("upload draft id"))?;
                }
            }
            if let Some(inputs) = forced {
                // Copy this step out (logits, g', pick), then replace the next input by the
                // forced one (stream order: after the argmax kernel wrote it).
                let logits = s
                    .clone_dtoh(&self.logits)
                    .map_err(drv("download drafter logits"))?;
                let g_out = s
                    .clone_dtoh(&self.u.slice(ht..2 * ht))
                    .map_err(drv("download drafter g'"))?;
                let token = match self.head {
                    DraftHead::Full => s
                        .clone_dtoh(&self.ids.slice(i + 1..i + 2))
                        .map_err(drv("download draft id"))?
                        .first()
                        .map_or(0, |&t| t as u32),
                    DraftHead::Centroid => out.last().copied().unwrap_or(0),
                };
                kept.push(DraftStepRow {
                    logits,
                    hidden: g_out,
                    token,
                });
                if let Some(&nx) = inputs.get(i + 1) {
                    s.memcpy_htod(&[nx as i32], &mut self.ids.slice_mut(i + 1..i + 2))
                        .map_err(drv("upload forced draft input"))?;
                }
            }
        }
        if forced.is_some() {
            out = kept.iter().map(|r| r.token).collect();
        } else if self.head == DraftHead::Full {
            let ids = s
                .clone_dtoh(&self.ids.slice(1..k + 1))
                .map_err(drv("download drafts"))?;
            out = ids.into_iter().map(|t| t as u32).collect();
        }
        Ok((out, kept))
    }

    /// §3.1 on the host: cluster scores `Cw·n` (device matvec), the `k_c` best clusters (lowest
    /// index first on ties), argmax of the full logits over their tokens (lowest id on ties).
    fn centroid_pick(&self, fw: &Forward<'_>, np: u64) -> Result<u32, RuntimeError> {
        let gpu = fw.gpu;
        let c = self
            .centroid
            .as_ref()
            .ok_or_else(|| pairing("no centroid head".into()))?;
        fw.mv(&c.centroids, np, 1, ptr(gpu, &self.cscore))?;
        let scores = gpu
            .stream
            .clone_dtoh(&self.cscore.slice(0..c.centroids.rows))
            .map_err(drv("download centroid scores"))?;
        let logits = gpu
            .stream
            .clone_dtoh(&self.logits)
            .map_err(drv("download drafter logits"))?;
        let cn = c.centroids.rows;
        let m = c.ordering.len() / cn;
        let mut order: Vec<usize> = (0..cn).collect();
        order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
        let mut best: Option<(u32, f32)> = None;
        for &ci in order.iter().take(c.top_k.min(cn)) {
            for &t in &c.ordering[ci * m..(ci + 1) * m] {
                let s = logits[t as usize];
                let better = match best {
                    None => true,
                    Some((bt, bs)) => s > bs || (s == bs && t < bt),
                };
                if better {
                    best = Some((t, s));
                }
            }
        }
        best.map(|b| b.0)
            .ok_or_else(|| pairing("centroid head selected no token".into()))
    }
}

/// The names under which a drafter's token ordering (§3.1, integers, read by
/// `reference::spec::assistant::read_token_ordering`) may be stored, in the order looked up.
pub const TOKEN_ORDERING_NAMES: [&str; 2] = ["masked_embd_ordering.weight", "masked_embd_ordering"];

/// Loads `masked_embd_centroids.weight` and the ordering when both are present (§1.2, §3.4).
fn load_centroid(
    ld: &mut Loader<'_>,
    cfg: &AssistantConfig,
) -> Result<Option<CentroidHead>, RuntimeError> {
    let file = ld.file;
    let ord_name = TOKEN_ORDERING_NAMES
        .into_iter()
        .find(|n| file.tensor(n).is_ok());
    let (true, Some(ord_name)) = (
        file.tensor("masked_embd_centroids.weight").is_ok(),
        ord_name,
    ) else {
        return Ok(None);
    };
    let centroids = ld.mat("masked_embd_centroids.weight")?;
    let t = file.tensor(ord_name).map_err(|e| model_err(ord_name, e))?;
    let v = cfg.n_vocab;
    let cn = centroids.rows;
    if cn == 0 || !v.is_multiple_of(cn) {
        return Err(model_err(
            "masked_embd_centroids.weight",
            format!("{cn} centroids do not divide the vocabulary {v}"),
        ));
    }
    let out = reference::spec::assistant::read_token_ordering(file, t, v)
        .map_err(|problem| model_err(ord_name, problem))?;
    Ok(Some(CentroidHead {
        centroids,
        ordering: out,
        top_k: cfg.centroid_intermediate_top_k.unwrap_or(32),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drafter's load path checks its weights itself: a copy of the e2b assistant fixture
    /// with a NaN in its first F32 tensor (element 0) is refused by [`open_checked`] naming
    /// that tensor and element; `allow_nonfinite` opens it; the clean file opens. CPU only.
    #[test]
    fn the_drafter_load_path_refuses_a_nonfinite_weight_unless_allowed() {
        let fx = reference::fixtures_dir();
        let src = fx.join("models/e2b-assistant.Q8_0.gguf");
        if !src.exists() {
            println!("skipped: fixtures not found at {}", fx.display());
            return;
        }
        assert!(open_checked(&src, LoadOptions::default()).is_ok());
        let f = GgufFile::open(&src).unwrap();
        let t = f
            .tensors()
            .iter()
            .find(|t| t.ggml_type == reference::quant::GgmlType::F32)
            .expect("an F32 tensor")
            .clone();
        let pos = f.tensor_file_offset(&t) as usize;
        drop(f);
        let mut b = std::fs::read(&src).unwrap();
        b[pos..pos + 4].copy_from_slice(&0x7FC0_0000u32.to_le_bytes());
        let dir = std::env::temp_dir().join(format!("draft-nonfinite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad-assistant.gguf");
        std::fs::write(&bad, b).unwrap();
        match open_checked(&bad, LoadOptions::default()) {
            Err(RuntimeError::NonFiniteWeight(e)) => {
                assert_eq!((e.tensor.as_str(), e.element), (t.name.as_str(), 0));
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a NaN weight passed"),
        }
        let allow = LoadOptions::default().with_allow_nonfinite(true);
        assert!(open_checked(&bad, allow).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
