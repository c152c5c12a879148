//! Typed launch wrappers, one per kernel of the `kernels` crate. Each checks the shapes of its
//! arguments against the kernel's contract (stated at the top of its `.cu` file) and queues the
//! launch on [`Gpu::stream`]; nothing here synchronizes.
//!
//! Spec: `spec/gguf-gemma4.md` §3 (dequant, matvec), `spec/gemma4-text.md` §3 (RMSNorm), §4.4
//! (RoPE), §5 (GeGLU), §9 (soft-capping).
use cudarc::driver::{CudaFunction, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig};
use kernels::{matvec_rows_per_block, Family, FORMATS, MATVEC_MAX_COLS, MATVEC_THREADS};
use reference::quant::GgmlType;

use crate::error::{drv, RuntimeError};
use crate::forward::Arg;
use crate::Gpu;

/// The kernel-name suffix of `ty` (an entry of `kernels::FORMATS`), or
/// [`RuntimeError::UnsupportedType`].
pub fn format_suffix(ty: GgmlType, what: &str) -> Result<&'static str, RuntimeError> {
    let lower = ty.name().to_ascii_lowercase();
    FORMATS
        .iter()
        .copied()
        .find(|f| *f == lower)
        .ok_or_else(|| RuntimeError::UnsupportedType {
            ty,
            what: what.to_string(),
        })
}

fn shape(what: &str, detail: String) -> RuntimeError {
    RuntimeError::Shape {
        what: what.to_string(),
        detail,
    }
}

/// The largest count a kernel's `int` argument (or a grid's x extent) holds.
const I32_MAX: usize = i32::MAX as usize;

/// A 1-D launch of `n ≥ 1` threads in blocks of `block`: grid `ceil(n / block)`, which must
/// fit the grid's x extent (2³¹ − 1), or a shape error naming `what` — a count cast to `u32`
/// unchecked would launch too few blocks and leave the tail unwritten.
fn blocks_1d(what: &str, n: u64, block: u32) -> Result<LaunchConfig, RuntimeError> {
    let blocks = n.div_ceil(u64::from(block));
    if n == 0 || blocks > i32::MAX as u64 {
        return Err(shape(
            what,
            format!("{n} threads: need 1 ≤ ceil(n / {block}) ≤ 2^31 − 1 blocks"),
        ));
    }
    Ok(LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The product of `dims` (the element count of a buffer of that shape), or a shape error when
/// it overflows `usize` or exceeds `max`.
fn checked_len(what: &str, dims: &[usize], max: usize) -> Result<usize, RuntimeError> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= max)
        .ok_or_else(|| shape(what, format!("shape {dims:?}: element count out of range")))
}

/// Bytes of one row of `k` elements of `ty`, checking that `k` is a whole number of blocks and
/// of 32-element units for block formats (their decoders work on 32-element units), or of
/// 8-element pieces for the plain float types (F32/F16/BF16 rows of e.g. the PLE width 8).
pub fn row_bytes(ty: GgmlType, k: usize, what: &str) -> Result<usize, RuntimeError> {
    let unit = if ty.block_size() == 1 { 8 } else { 32 };
    if !k.is_multiple_of(unit) || !k.is_multiple_of(ty.block_size()) {
        return Err(shape(
            what,
            format!(
                "row length {k} must be a multiple of {unit} and of the {ty} block size {}",
                ty.block_size()
            ),
        ));
    }
    Ok(k / ty.block_size() * ty.type_size())
}

/// The buffer checks shared by [`Gpu::matvec`] and [`Gpu::matvec_tc`]: `1 ≤ ncols ≤ 8`,
/// `w_len = rows · row_bytes`, `x_len ≥ ncols · k`, `y_len ≥ ncols · rows`, sizes within `i32`.
#[allow(clippy::too_many_arguments)]
fn check_matvec_shapes(
    what: &str,
    rows: usize,
    k: usize,
    rb: usize,
    ncols: usize,
    w_len: usize,
    x_len: usize,
    y_len: usize,
) -> Result<(), RuntimeError> {
    // rows, k ≤ i32::MAX and ncols ≤ 8 first, so that the products below cannot overflow a
    // 64-bit usize except rows · rb (checked).
    let w_need = rows.checked_mul(rb);
    if !(1..=MATVEC_MAX_COLS).contains(&ncols)
        || rows == 0
        || rows > I32_MAX
        || k > I32_MAX
        || w_need != Some(w_len)
        || x_len < ncols * k
        || y_len < ncols * rows
    {
        return Err(shape(
            what,
            format!(
                "need 1 ≤ ncols ≤ {MATVEC_MAX_COLS}, 1 ≤ rows, k ≤ 2^31 − 1, w = rows · {rb} bytes (got {w_len}), x ≥ ncols · k (got {x_len}), y ≥ ncols · rows (got {y_len})",
            ),
        ));
    }
    Ok(())
}

/// The checks every tensor-core prep writer shares: `1 ≤ nc ≤ 8` columns of `k`, `k % 16 == 0`,
/// `k ≤` [`crate::device::TC_MAX_K`] (the scratch), `x_len ≥ nc · k`.
fn check_prep_shape(what: &str, nc: usize, k: usize, x_len: usize) -> Result<(), RuntimeError> {
    if !(1..=MATVEC_MAX_COLS).contains(&nc)
        || k == 0
        || !k.is_multiple_of(16)
        || k > crate::device::TC_MAX_K
        || x_len < nc * k
    {
        return Err(shape(
            what,
            format!(
                "need 1 ≤ nc ≤ {MATVEC_MAX_COLS} columns of k % 16 == 0, k ≤ {}, x ≥ nc·k (got nc {nc}, k {k}, x {x_len})",
                crate::device::TC_MAX_K
            ),
        ));
    }
    Ok(())
}

/// `rows · n`, the length of a `[rows, n]` buffer, for `1 ≤ rows ≤ max_rows` (a grid extent),
/// or a shape error (also when the product overflows).
fn rows_len(what: &str, rows: usize, n: usize, max_rows: usize) -> Result<usize, RuntimeError> {
    if !(1..=max_rows).contains(&rows) {
        return Err(shape(
            what,
            format!("need 1 ≤ rows ≤ {max_rows} (got rows {rows}, n {n})"),
        ));
    }
    checked_len(what, &[rows, n], usize::MAX)
}

/// Every named device address 16-byte aligned (the kernels read and write `float4`s), or a
/// shape error naming the first that is not.
fn check_aligned16(what: &str, ptrs: &[(&str, u64)]) -> Result<(), RuntimeError> {
    match ptrs.iter().find(|(_, p)| p % 16 != 0) {
        Some((name, p)) => Err(shape(
            what,
            format!("{name} at {p:#x} is not 16-byte aligned"),
        )),
        None => Ok(()),
    }
}

/// One row of [`Gpu::topk`]: the `(id, value)` list, best first, and the non-finite count.
pub type TopkRow = (Vec<(u32, f32)>, i32);

impl Gpu {
    fn func(&self, family: Family, name: &str) -> Result<CudaFunction, RuntimeError> {
        Ok(self.modules.function(family, name)?)
    }

    /// Dequantizes `n_elements` elements of type `ty` from raw GGUF blocks `src` into `out`
    /// (f32, bit-identical to `reference::quant::dequantize_f32`, spec §3.6).
    ///
    /// `src.len()` must equal `ty.bytes_for(n_elements)`; `n_elements` a multiple of 32 and
    /// of the block size; `out.len() ≥ n_elements`; `src` starts a block 256-byte aligned
    /// (any allocation, or an offset that is a multiple of 256 bytes).
    pub fn dequant(
        &self,
        ty: GgmlType,
        src: &CudaView<'_, u8>,
        n_elements: usize,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), RuntimeError> {
        let what = format!("dequant {ty}");
        let fmt = format_suffix(ty, &what)?;
        let bytes = row_bytes(ty, n_elements, &what)?;
        if src.len() != bytes || out.len() < n_elements {
            return Err(shape(
                &what,
                format!(
                    "src {} bytes (need {bytes}), out {} (need ≥ {n_elements})",
                    src.len(),
                    out.len()
                ),
            ));
        }
        let name = kernels::dequant_kernel(fmt);
        let f = self.func(Family::Dequant, &name)?;
        let n_pieces = (n_elements / 8) as u64;
        let cfg = blocks_1d(&what, n_pieces, 256)?;
        let (src_p, _src_sync) = src.device_ptr(&self.stream);
        let (out_p, _out_sync) = out.device_ptr_mut(&self.stream);
        let args = [Arg::P(src_p), Arg::P(out_p), Arg::U(n_pieces)];
        // The parameters of `dequant_<fmt>(const uint8_t*, float*, uint64_t)` (checked against
        // its PTX list in launch_plain); src holds the blocks of n_pieces·8 elements and
        // out ≥ n_pieces·8 floats (checked).
        crate::forward::launch_plain(self, &f, &name, cfg, &args)?;
        Ok(())
    }

    /// Fused dequantize × matvec: `y[c, r] = Σ_k W[r, k] · x[c, k]` for `c < ncols`.
    ///
    /// `w`: `rows` rows of `k` elements of `ty` as raw GGUF blocks (`rows · row_bytes` bytes,
    /// 256-byte aligned start); `x`: f32 `[ncols, k]`; `y`: f32 `[ncols, rows]`;
    /// `1 ≤ ncols ≤ 8`. f32 accumulation (error bound in `matvec.cu`).
    #[allow(clippy::too_many_arguments)]
    pub fn matvec(
        &self,
        ty: GgmlType,
        w: &CudaView<'_, u8>,
        rows: usize,
        k: usize,
        x: &CudaView<'_, f32>,
        ncols: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), RuntimeError> {
        let what = format!("matvec {ty} [{rows}×{k}]×{ncols}");
        let fmt = format_suffix(ty, &what)?;
        let rb = row_bytes(ty, k, &what)?;
        check_matvec_shapes(&what, rows, k, rb, ncols, w.len(), x.len(), y.len())?;
        let name = kernels::matvec_kernel(fmt, ncols);
        let f = self.func(Family::Matvec, &name)?;
        let (rows_i, k_i, rb_u) = (rows as i32, k as i32, rb as u64);
        let cfg = LaunchConfig {
            grid_dim: (
                (rows as u32).div_ceil(matvec_rows_per_block(fmt, ncols)),
                1,
                1,
            ),
            block_dim: (MATVEC_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (w_p, _w_sync) = w.device_ptr(&self.stream);
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (y_p, _y_sync) = y.device_ptr_mut(&self.stream);
        let args = [
            Arg::P(w_p),
            Arg::P(x_p),
            Arg::P(y_p),
            Arg::I(rows_i),
            Arg::I(k_i),
            Arg::U(rb_u),
        ];
        // The parameters of `matvec_<fmt>_<nc>(const uint8_t*, const float*, float*, int, int,
        // uint64_t)` (checked against its PTX list in launch_plain); buffer lengths checked
        // above against rows, k, ncols.
        crate::forward::launch_plain(self, &f, &name, cfg, &args)?;
        Ok(())
    }

    /// Fused q/k/v post-processing `qkv_post_f32` (`layer.cu`; spec/gemma4-text.md §4.2–§4.4,
    /// §4.8) for `t` tokens of `nh` query and `nkv` KV heads of dimension `d`: q ← RoPE(RMSNorm_
    /// q_norm(q)) in place; with `kv = Some((kc, vc, rows, k_eq_v))` also the K cache row
    /// `slot·rows + pos mod rows` ← RoPE(RMSNorm_k_norm(k)) and the V row ← RMSNorm(k_eq_v ? k :
    /// v). Shapes: q [t, nh, d], k/v [t, nkv, d], caches [·, rows, nkv·d], norms [d], slot/pos
    /// [t] (every slot·rows + rows within the caches), inv_freq f64 [d/2].
    ///
    /// Errors: [`RuntimeError::Shape`] for buffers shorter than these shapes, an odd or zero `d`,
    /// `t` outside 1..=65535 (the grid's y extent) or counts beyond `i32`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn qkv_post(
        &self,
        q: &mut CudaViewMut<'_, f32>,
        k: &CudaView<'_, f32>,
        v: &CudaView<'_, f32>,
        kv: Option<(
            &mut CudaViewMut<'_, f32>,
            &mut CudaViewMut<'_, f32>,
            usize,
            bool,
        )>,
        (q_norm, k_norm): (&CudaView<'_, f32>, &CudaView<'_, f32>),
        (slot, pos): (&CudaView<'_, i32>, &CudaView<'_, i32>),
        inv_freq: &CudaView<'_, f64>,
        (t, nh, nkv, d): (usize, usize, usize, usize),
        eps: f32,
    ) -> Result<(), RuntimeError> {
        let what = "qkv_post_f32";
        let q_len = checked_len(what, &[t, nh, d], isize::MAX as usize)?;
        let kv_len = checked_len(what, &[t, nkv, d], isize::MAX as usize)?;
        let cache_ok = kv.as_ref().is_none_or(|(kc, vc, rows, _)| {
            checked_len(what, &[*rows, nkv, d], isize::MAX as usize)
                .is_ok_and(|need| kc.len().min(vc.len()) >= need)
                && (1..=I32_MAX).contains(rows)
        });
        if d == 0
            || !d.is_multiple_of(2)
            || d > I32_MAX
            || t == 0
            || nkv
                .checked_mul(2)
                .and_then(|k2| nh.checked_add(k2))
                .is_none_or(|g| g > I32_MAX)
            || t > 65535
            || q.len() < q_len
            || k.len() < kv_len
            || v.len() < kv_len
            || q_norm.len() < d
            || k_norm.len() < d
            || slot.len() < t
            || pos.len() < t
            || inv_freq.len() < d / 2
            || !cache_ok
        {
            return Err(shape(
                what,
                format!("T {t} (need 1 ≤ T ≤ 65535, the grid's y extent) × ({nh} q, {nkv} kv) heads × d {d} (even, ≥ 2), or buffers short of that shape"),
            ));
        }
        let f = self.func(Family::Layer, what)?;
        let (nkv_i, rows_i, kv_eq) = match &kv {
            Some((_, _, rows, e)) => (nkv as i32, *rows as i32, i32::from(*e)),
            None => (0, 1, 0),
        };
        let (nh_i, d_i) = (nh as i32, d as i32);
        let cfg = LaunchConfig {
            grid_dim: ((nh + 2 * nkv_i as usize) as u32, t as u32, 1),
            block_dim: (kernels::norm_threads(d), 1, 1),
            shared_mem_bytes: (d * 4) as u32,
        };
        let (q_p, _q_sync) = q.device_ptr_mut(&self.stream);
        let (k_p, _k_sync) = k.device_ptr(&self.stream);
        let (v_p, _v_sync) = v.device_ptr(&self.stream);
        // no caches (a KV-sharing layer): kc, vc null with nkv 0 (layer.cu)
        let (kc_p, _kc_sync, vc_p, _vc_sync) = match kv {
            Some((kc, vc, _, _)) => {
                let (kc_p, kc_sync) = kc.device_ptr_mut(&self.stream);
                let (vc_p, vc_sync) = vc.device_ptr_mut(&self.stream);
                (kc_p, Some(kc_sync), vc_p, Some(vc_sync))
            }
            None => (0, None, 0, None),
        };
        let (qn_p, _qn_sync) = q_norm.device_ptr(&self.stream);
        let (kn_p, _kn_sync) = k_norm.device_ptr(&self.stream);
        let (slot_p, _slot_sync) = slot.device_ptr(&self.stream);
        let (pos_p, _pos_sync) = pos.device_ptr(&self.stream);
        let (freq_p, _freq_sync) = inv_freq.device_ptr(&self.stream);
        let args = [
            Arg::P(q_p),
            Arg::P(k_p),
            Arg::P(v_p),
            Arg::P(kc_p),
            Arg::P(vc_p),
            Arg::P(qn_p),
            Arg::P(kn_p),
            Arg::P(slot_p),
            Arg::P(pos_p),
            Arg::P(freq_p),
            Arg::I(nh_i),
            Arg::I(nkv_i),
            Arg::I(d_i),
            Arg::I(rows_i),
            Arg::F(eps),
            Arg::I(kv_eq),
        ];
        // The parameters of `qkv_post_f32(float*, const float*, const float*, float*, float*,
        // const float*, const float*, const int*, const int*, const double*, int, int, int, int,
        // float, int)` (checked against its PTX list in launch_plain); every buffer holds
        // the shape checked above (the caller guarantees the slot/pos values address rows inside
        // the caches); dynamic shared memory d floats.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// Causal / sliding GQA attention of `t` query rows over a KV cache (`attention.cu`;
    /// spec/gemma4-text.md §4.5–§4.6) through `kernel`: the forward pass's choice
    /// [`kernels::attention_kernel`]`(d)` (`attention_d256_f32` / `attention_d512_f32` for head
    /// dims 256 / 512), the generic `attention_f32` (any `d`; the same sums) or
    /// [`kernels::attention_heads_kernel`]`(d)` (two query heads per block; `(nh / nkv) % 2 == 0`;
    /// the same sums): for row `i`, query head `h` reads KV
    /// head `h / (nh / nkv)` at the visible positions `lo … pos[i]` of slot `slot[i]`
    /// (`lo = pos[i] + 1 − window` when that is positive and `window > 0`, else 0), position
    /// `u` at cache row `slot[i]·rows + u mod rows`.
    ///
    /// Shapes: `q` f32 `[t, nh, d]`; `kc`, `vc` f32 `[n_slots, rows, nkv, d]` (`n_slots` =
    /// their length ÷ `rows·nkv·d`); `out` f32 `[t, nh, d]`; `part` f32 scratch
    /// `[t, nh, ATT_SPLIT_MAX, d + 2]`; `cnt` u32 `[t, nh]`, zero before and left zero after.
    /// `slot`, `pos` are host values (uploaded here, so they are checked): each slot below
    /// `n_slots`, each position ≥ 0 with at most `rows` visible keys (a ring of `rows` rows
    /// holds them all). `1 ≤ d ≤ ATTENTION_MAX_HEAD_DIM`, `nkv ≥ 1` dividing `nh`,
    /// `1 ≤ t ≤ 65535`. Errors: [`RuntimeError::Shape`] naming the bad extent or row, a
    /// `kernel` that is none of those for `d`, a two-heads kernel with `nh / nkv` odd or with two
    /// heads' scores over [`crate::forward::ATT_PAIRS_SMEM_MAX`] bytes of shared memory; driver
    /// errors. The o projection's prep buffers are not written (`prep_rows` 0).
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        kernel: &str,
        q: &CudaView<'_, f32>,
        (kc, vc): (&CudaView<'_, f32>, &CudaView<'_, f32>),
        (slot, pos): (&[i32], &[i32]),
        out: &mut CudaViewMut<'_, f32>,
        (part, cnt): (&mut CudaViewMut<'_, f32>, &mut CudaViewMut<'_, u32>),
        (t, nh, nkv, d): (usize, usize, usize, usize),
        (rows, window): (usize, usize),
    ) -> Result<(), RuntimeError> {
        let what = "attention";
        // query heads per block: 2 for the heads kernels, which need (nh / nkv) % 2 == 0
        let heads = kernels::attention_heads_kernel(d);
        let qh = if heads == Some(kernel) {
            kernels::ATT_HEADS_PER_BLOCK
        } else {
            1
        };
        if (kernel != "attention_f32" && kernel != kernels::attention_kernel(d) && qh == 1)
            || (qh > 1 && (nkv == 0 || !nh.is_multiple_of(nkv) || !(nh / nkv).is_multiple_of(qh)))
        {
            return Err(shape(
                what,
                format!(
                    "kernel {kernel} for head dim {d}, nh {nh}, nkv {nkv} (attention_f32, {}{})",
                    kernels::attention_kernel(d),
                    heads.map_or(String::new(), |k| format!(
                        " or, with (nh / nkv) % {} == 0, {k}",
                        kernels::ATT_HEADS_PER_BLOCK
                    ))
                ),
            ));
        }
        if !(1..=65535).contains(&t)
            || !(1..=kernels::ATTENTION_MAX_HEAD_DIM).contains(&d)
            || nkv == 0
            || nh == 0
            || !nh.is_multiple_of(nkv)
            || nh > 65535
            || !(1..=I32_MAX).contains(&rows)
            || slot.len() != t
            || pos.len() != t
        {
            return Err(shape(
                what,
                format!("T {t} (1 … 65535) × nh {nh} (a multiple of nkv {nkv}) × d {d} (1 … {}), rows {rows} (≥ 1), {} slots and {} positions for T rows", kernels::ATTENTION_MAX_HEAD_DIM, slot.len(), pos.len()),
            ));
        }
        let slot_len = checked_len(what, &[rows, nkv, d], isize::MAX as usize)?;
        let n_slots = kc.len().min(vc.len()) / slot_len;
        let q_len = checked_len(what, &[t, nh, d], isize::MAX as usize)?;
        let part_len = checked_len(
            what,
            &[t, nh, kernels::ATT_SPLIT_MAX, d + 2],
            isize::MAX as usize,
        )?;
        if q.len() < q_len || out.len() < q_len || part.len() < part_len || cnt.len() < t * nh {
            return Err(shape(
                what,
                format!(
                    "buffers short of T {t} × nh {nh} × d {d} (q, out), its partials or counts"
                ),
            ));
        }
        let mut span = 1usize;
        for (i, (&s, &p)) in slot.iter().zip(pos).enumerate() {
            let lo = if window > 0 {
                (i64::from(p) + 1 - window as i64).max(0)
            } else {
                0
            };
            let n = i64::from(p) + 1 - lo;
            if s < 0 || s as usize >= n_slots || p < 0 || n > rows as i64 {
                return Err(shape(
                    what,
                    format!("row {i}: slot {s} (the caches hold {n_slots}), position {p} ({n} visible keys, the cache holds {rows} rows per slot)"),
                ));
            }
            span = span.max(n as usize);
        }
        let smem = qh as u64 * kernels::attention_smem_bytes(kernels::att_chunk_bound(span)) as u64;
        if qh > 1 && smem > crate::forward::ATT_PAIRS_SMEM_MAX {
            return Err(shape(
                what,
                format!(
                    "{kernel} over {span} keys: {smem} bytes of scores, more than {} (one head per block at this span)",
                    crate::forward::ATT_PAIRS_SMEM_MAX
                ),
            ));
        }
        let f = self.func(Family::Attention, kernel)?;
        let sd = self.stream.clone_htod(slot).map_err(drv(what))?;
        let pd = self.stream.clone_htod(pos).map_err(drv(what))?;
        let (nh_i, nkv_i, d_i, rows_i) = (nh as i32, nkv as i32, d as i32, rows as i32);
        let window_i = window.min(I32_MAX) as i32;
        let cfg = LaunchConfig {
            grid_dim: ((nh / qh) as u32, t as u32, kernels::att_splits(span) as u32),
            block_dim: (128, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let (q_p, _q_sync) = q.device_ptr(&self.stream);
        let (kc_p, _kc_sync) = kc.device_ptr(&self.stream);
        let (vc_p, _vc_sync) = vc.device_ptr(&self.stream);
        let (sd_p, _sd_sync) = sd.device_ptr(&self.stream);
        let (pd_p, _pd_sync) = pd.device_ptr(&self.stream);
        let (out_p, _out_sync) = out.device_ptr_mut(&self.stream);
        let (part_p, _part_sync) = part.device_ptr_mut(&self.stream);
        let (cnt_p, _cnt_sync) = cnt.device_ptr_mut(&self.stream);
        let args = [
            Arg::P(q_p),
            Arg::P(kc_p),
            Arg::P(vc_p),
            Arg::P(sd_p),
            Arg::P(pd_p),
            Arg::P(out_p),
            Arg::I(nh_i),
            Arg::I(nkv_i),
            Arg::I(d_i),
            Arg::I(rows_i),
            Arg::I(window_i),
            Arg::P(part_p),
            Arg::P(cnt_p),
            Arg::P(0), // no o-projection prep: xp, xs null, prep_rows 0
            Arg::P(0),
            Arg::I(0),
            Arg::I(0),
        ];
        // The parameters of `attention_f32(const float*, const float*, const float*, const int*,
        // const int*, float*, int, int, int, int, int, float*, unsigned*, uint32_t*, float*, int,
        // int)` (checked against its PTX list in launch_plain), the signature of every entry
        // point (the d256 / d512 ones only for their d, the two-head ones with (nh / nkv) even
        // and grid x = nh / 2, checked above); q, out, part and cnt hold the checked shapes; every
        // slot and position was checked to address rows inside the caches with no visible key
        // overwritten; the prep pointers are null with prep_rows 0 (never read); dynamic shared
        // memory for the widest row's chunk, per head of a block, as the forward pass sizes it.
        crate::forward::launch_plain(self, &f, kernel, cfg, &args)?;
        Ok(())
    }

    /// Tensor-core matvec (`mvtc_prep` + `mvtc_<fmt>_<NG>`, `matvec.cu`): the same product as
    /// [`Gpu::matvec`] for a format of [`kernels::TC_FORMATS`] with `k % 256 == 0`, `k ≤`
    /// [`crate::device::TC_MAX_K`]; weights as exact bf16 integers times their group scale,
    /// activations split exactly into three bf16 pieces, products summed in f32 by the tensor
    /// cores — for Q2_K, Q3_K and Q6_K, integer mma against the activations rounded to [`kernels::tc_digits`] int8 digits per
    /// 256-element block ([`kernels::tc_int8_digits`]; error statement in `matvec.cu`); base or wide kernel as [`crate::forward::tc_kernel`]
    /// picks (the same bits). Same shapes and errors as [`Gpu::matvec`], plus
    /// [`RuntimeError::Shape`] for a format or `k` the tensor-core path does not serve.
    #[allow(clippy::too_many_arguments)]
    pub fn matvec_tc(
        &self,
        ty: GgmlType,
        w: &CudaView<'_, u8>,
        rows: usize,
        k: usize,
        x: &CudaView<'_, f32>,
        ncols: usize,
        y: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), RuntimeError> {
        let what = format!("mvtc {ty} [{rows}×{k}]×{ncols}");
        let fmt = format_suffix(ty, &what)?;
        let rb = row_bytes(ty, k, &what)?;
        if !crate::device::tc_serves(fmt, k, rows * rb, self.cc) {
            return Err(shape(
                &what,
                format!(
                    "need a tensor-core format ({}), k % 256 == 0, k ≤ {} and < {} bytes of \
                     weights on sm_80+",
                    kernels::TC_FORMATS.join(" "),
                    crate::device::TC_MAX_K,
                    kernels::TC_MAX_MATRIX_BYTES
                ),
            ));
        }
        check_matvec_shapes(&what, rows, k, rb, ncols, w.len(), x.len(), y.len())?;
        // The staged kernel copies aligned 16-byte chunks and takes row offsets mod 16 from the
        // matrix start, so the matrix must start on a 16-byte boundary.
        check_aligned16(&what, &[("weights", w.device_ptr(&self.stream).0)])?;
        self.tc_prep(x, ncols, k, kernels::tc_prep_kinds([fmt]))?;
        let name = crate::forward::tc_kernel(fmt, ncols, rows, 0, self.sm_count);
        let f = self.func(Family::Matvec, &name)?;
        let need = kernels::tc_dyn_smem(fmt, ncols) as u32;
        if need > 0 {
            crate::forward::raise_dyn_smem(&f, &name, need)?;
        }
        let cfg = LaunchConfig {
            grid_dim: ((rows as u32).div_ceil(kernels::TC_ROWS), 1, 1),
            block_dim: (kernels::TC_THREADS, 1, 1),
            shared_mem_bytes: need,
        };
        let (wp, _w_sync) = w.device_ptr(&self.stream);
        let (yp, _y_sync) = y.device_ptr_mut(&self.stream);
        let args = crate::forward::tc_args(
            crate::forward::TcMatArgs {
                w: wp,
                y: yp,
                rows,
                row_bytes: rb,
            },
            k,
            ncols,
            [
                crate::forward::ptr(self, &self.tc_xp),
                crate::forward::ptr(self, &self.tc_xs),
            ],
            crate::forward::TcMatArgs::default(), // no second matrix
            None,
            0.0, // no soft-cap
        );
        // The parameters of `mvtc_<fmt>_<NG>(const uint8_t*, const uint32_t*, const float*,
        // float*, int, int, uint64_t, int, const uint8_t*, float*, int, float)` (checked against
        // its PTX list in `launch_plain`); w is rows·row_bytes bytes and y ≥ ncols·rows
        // (checked); the scratch was filled by the prep launch above on the same stream.
        crate::forward::launch_plain(self, &f, &name, cfg, &args)?;
        Ok(())
    }

    /// RMSNorm over `rows` rows of `n`: `y = x · (mean(x²) + eps)^(−1/2) ⊙ w` (no `w`: the
    /// weightless norm). `x`, `y`: f32 `[rows, n]`; `w`: f32 `[n]`.
    pub fn rmsnorm(
        &self,
        x: &CudaView<'_, f32>,
        w: Option<&CudaView<'_, f32>>,
        y: &mut CudaViewMut<'_, f32>,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), RuntimeError> {
        let what = "rmsnorm_f32";
        let len = rows_len(what, rows, n, I32_MAX)?;
        if x.len() < len || y.len() < len || w.is_some_and(|w| w.len() < n) || n == 0 {
            return Err(shape(
                what,
                format!("rows {rows} × n {n} vs x {}, y {}", x.len(), y.len()),
            ));
        }
        if n > I32_MAX {
            return Err(shape(what, format!("n {n} exceeds 2^31 − 1")));
        }
        let f = self.func(Family::Norm, what)?;
        let n_i = n as i32;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (kernels::norm_threads(n), 1, 1),
            shared_mem_bytes: 0,
        };
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (w_p, _w_sync) = match w {
            Some(w) => {
                let (w_p, w_sync) = w.device_ptr(&self.stream);
                (w_p, Some(w_sync))
            }
            None => (0, None),
        };
        let (y_p, _y_sync) = y.device_ptr_mut(&self.stream);
        let args = [
            Arg::P(x_p),
            Arg::P(w_p),
            Arg::P(y_p),
            Arg::I(n_i),
            Arg::F(eps),
        ];
        // The parameters of `rmsnorm_f32(const float*, const float* /*nullable*/, float*, int,
        // float)` (checked against its PTX list in launch_plain); a 0 is passed as the null
        // weight pointer; lengths checked above.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// Half-split (NeoX) RoPE: `x`, `y` f32 `[n_tokens, n_heads, d]`, `pos` i32 `[n_tokens]`,
    /// `inv_freq` f64 `[d/2]` (see [`rope_inv_freq_default`], [`rope_inv_freq_proportional`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rope_neox(
        &self,
        x: &CudaView<'_, f32>,
        y: &mut CudaViewMut<'_, f32>,
        pos: &CudaView<'_, i32>,
        inv_freq: &CudaView<'_, f64>,
        n_tokens: usize,
        n_heads: usize,
        d: usize,
    ) -> Result<(), RuntimeError> {
        let what = "rope_neox_f32";
        let n = checked_len(what, &[n_tokens, n_heads, d], u64::MAX as usize)?;
        if d == 0
            || !d.is_multiple_of(2)
            || n_tokens > I32_MAX
            || n_heads > I32_MAX
            || d > I32_MAX
            || x.len() < n
            || y.len() < n
            || pos.len() < n_tokens
            || inv_freq.len() < d / 2
        {
            return Err(shape(what, format!("T {n_tokens} × H {n_heads} × d {d}")));
        }
        let f = self.func(Family::Rope, what)?;
        let (t, h, dd) = (n_tokens as i32, n_heads as i32, d as i32);
        let cfg = blocks_1d(what, (n / 2) as u64, 256)?;
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (y_p, _y_sync) = y.device_ptr_mut(&self.stream);
        let (pos_p, _pos_sync) = pos.device_ptr(&self.stream);
        let (freq_p, _freq_sync) = inv_freq.device_ptr(&self.stream);
        let args = [
            Arg::P(x_p),
            Arg::P(y_p),
            Arg::P(pos_p),
            Arg::P(freq_p),
            Arg::I(t),
            Arg::I(h),
            Arg::I(dd),
        ];
        // The parameters of `rope_neox_f32(const float*, float*, const int*, const double*, int,
        // int, int)` (checked against its PTX list in launch_plain); lengths checked above.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// `out = gelu_tanh(gate) ⊙ up` over `n` f32 values.
    pub fn geglu(
        &self,
        gate: &CudaView<'_, f32>,
        up: &CudaView<'_, f32>,
        out: &mut CudaViewMut<'_, f32>,
        n: usize,
    ) -> Result<(), RuntimeError> {
        let what = "geglu_f32";
        if gate.len() < n || up.len() < n || out.len() < n {
            return Err(shape(what, format!("n {n}")));
        }
        let f = self.func(Family::Activation, what)?;
        let nn = n as u64;
        let cfg = blocks_1d(what, nn, 256)?;
        let (gate_p, _gate_sync) = gate.device_ptr(&self.stream);
        let (up_p, _up_sync) = up.device_ptr(&self.stream);
        let (out_p, _out_sync) = out.device_ptr_mut(&self.stream);
        let args = [Arg::P(gate_p), Arg::P(up_p), Arg::P(out_p), Arg::U(nn)];
        // The parameters of `geglu_f32(const float*, const float*, float*, uint64_t)` (checked
        // against its PTX list in launch_plain); gate, up and out hold n floats (checked).
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// `mvtc_prep` (matvec.cu) alone: the first `nc` columns of `x` (f32 `[nc, k]`, column `c`
    /// at `c·k`) into the tensor-core matvec's scratch (`Gpu::tc_xp`, `Gpu::tc_xs`) — the
    /// pieces and/or int8 digits `kinds` names (`kernels::TC_PREP_PIECES | TC_PREP_DIGITS`).
    /// What [`Gpu::matvec_tc`] runs first, and the bits the fused producers
    /// ([`Gpu::add_norm_prep`], [`Gpu::geglu_prep`]) must write. `1 ≤ nc ≤ 8`, `k % 16 == 0`,
    /// `k ≤` [`crate::device::TC_MAX_K`].
    pub fn tc_prep(
        &self,
        x: &CudaView<'_, f32>,
        nc: usize,
        k: usize,
        kinds: i32,
    ) -> Result<(), RuntimeError> {
        let what = "mvtc_prep";
        check_prep_shape(what, nc, k, x.len())?;
        check_aligned16(what, &[("x", x.device_ptr(&self.stream).0)])?;
        let f = self.func(Family::Matvec, what)?;
        let (nc_i, k_i) = (nc as i32, k as i32);
        let cfg = blocks_1d(what, 8 * (k / 16) as u64, 128)?;
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let args = [
            Arg::P(x_p),
            Arg::I(nc_i),
            Arg::I(k_i),
            Arg::P(crate::forward::ptr(self, &self.tc_xp)),
            Arg::P(crate::forward::ptr(self, &self.tc_xs)),
            Arg::I(kinds),
        ];
        // The parameters of `mvtc_prep(const float*, int, int, uint32_t*, float*, int)` (checked
        // against its PTX list in launch_plain); x holds nc·k floats (checked), the scratch
        // holds 8 columns of TC_MAX_K ≥ k elements.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// `add_norm_prep_f32` (layer.cu) over `rows` rows of `n`: with `y = Some((y, wy, s))`
    /// first `x = (x + RMSNorm_wy(y))·s` (the residual step), then `h = RMSNorm_w(x)`, and rows
    /// `< min(rows, 8)` of `h` into the tensor-core scratch as [`Gpu::tc_prep`] of `h` would
    /// write them (`kinds`). `x`, `h`, `y` f32 `[rows, n]`, `w`, `wy` f32 `[n]`; `n % 16 == 0`,
    /// `n ≤ 16384` (`kernels::norm_prep_threads`), `n ≤` [`crate::device::TC_MAX_K`].
    #[allow(clippy::too_many_arguments)]
    pub fn add_norm_prep(
        &self,
        y: Option<(&CudaView<'_, f32>, &CudaView<'_, f32>, f32)>,
        x: &mut CudaViewMut<'_, f32>,
        w: &CudaView<'_, f32>,
        h: &mut CudaViewMut<'_, f32>,
        rows: usize,
        n: usize,
        eps: f32,
        kinds: i32,
    ) -> Result<(), RuntimeError> {
        let what = "add_norm_prep_f32";
        let threads = kernels::norm_prep_threads(n)
            .ok_or_else(|| shape(what, format!("n {n} must be a multiple of 16, ≤ 16384")))?;
        let len = rows_len(what, rows, n, I32_MAX)?;
        check_prep_shape(what, rows.min(MATVEC_MAX_COLS), n, x.len())?;
        if x.len() < len
            || h.len() < len
            || w.len() < n
            || y.is_some_and(|(y, wy, _)| y.len() < len || wy.len() < n)
        {
            return Err(shape(
                what,
                format!("rows {rows} × n {n} vs x {}, h {}", x.len(), h.len()),
            ));
        }
        let mut ptrs = vec![
            ("x", x.device_ptr(&self.stream).0),
            ("w", w.device_ptr(&self.stream).0),
            ("h", h.device_ptr(&self.stream).0),
        ];
        if let Some((y, wy, _)) = y {
            ptrs.push(("y", y.device_ptr(&self.stream).0));
            ptrs.push(("wy", wy.device_ptr(&self.stream).0));
        }
        check_aligned16(what, &ptrs)?;
        let f = self.func(Family::Layer, what)?;
        let (n_i, prep_i) = (n as i32, rows.min(MATVEC_MAX_COLS) as i32);
        let one = 1.0f32;
        // no residual step: null y and wy
        let (y_p, _y_sync, wy_p, _wy_sync) = match y {
            Some((y, wy, _)) => {
                let (y_p, y_sync) = y.device_ptr(&self.stream);
                let (wy_p, wy_sync) = wy.device_ptr(&self.stream);
                (y_p, Some(y_sync), wy_p, Some(wy_sync))
            }
            None => (0, None, 0, None),
        };
        let s = y.map_or(one, |(_, _, s)| s);
        let (x_p, _x_sync) = x.device_ptr_mut(&self.stream);
        let (w_p, _w_sync) = w.device_ptr(&self.stream);
        let (h_p, _h_sync) = h.device_ptr_mut(&self.stream);
        let args = [
            Arg::P(y_p),
            Arg::P(wy_p),
            Arg::P(x_p),
            Arg::P(w_p),
            Arg::P(h_p),
            Arg::I(n_i),
            Arg::F(eps),
            Arg::P(crate::forward::ptr(self, &self.tc_xp)),
            Arg::P(crate::forward::ptr(self, &self.tc_xs)),
            Arg::I(prep_i),
            Arg::F(s),
            Arg::I(kinds),
        ];
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        // The parameters of `add_norm_prep_f32(const float*, const float*, float*, const float*,
        // float*, int, float, uint32_t*, float*, int, float, int)` (checked against the driver's
        // list in launch_plain); zeros are the null y and wy; lengths checked above, the scratch
        // holds 8 columns of TC_MAX_K ≥ n elements.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// `geglu_prep_f32` (layer.cu): `out = gelu_tanh(g) ⊙ u` over `rows` rows of `n` (the
    /// rounding of [`Gpu::geglu`]), and rows `< min(rows, 8)` of `out` into the tensor-core
    /// scratch as [`Gpu::tc_prep`] of `out` would write them (`kinds`). `g`, `u`, `out` f32
    /// `[rows, n]`; `n % 16 == 0`, `n ≤` [`crate::device::TC_MAX_K`].
    pub fn geglu_prep(
        &self,
        g: &CudaView<'_, f32>,
        u: &CudaView<'_, f32>,
        out: &mut CudaViewMut<'_, f32>,
        rows: usize,
        n: usize,
        kinds: i32,
    ) -> Result<(), RuntimeError> {
        let what = "geglu_prep_f32";
        // rows is the grid's y extent (at most 65535).
        let len = rows_len(what, rows, n, u16::MAX as usize)?;
        check_prep_shape(what, rows.min(MATVEC_MAX_COLS), n, g.len())?;
        if u.len() < len || out.len() < len {
            return Err(shape(
                what,
                format!("rows {rows} × n {n} vs u {}, out {}", u.len(), out.len()),
            ));
        }
        check_aligned16(
            what,
            &[
                ("g", g.device_ptr(&self.stream).0),
                ("u", u.device_ptr(&self.stream).0),
                ("out", out.device_ptr(&self.stream).0),
            ],
        )?;
        let f = self.func(Family::Layer, what)?;
        let (n_i, prep_i) = (n as i32, rows.min(MATVEC_MAX_COLS) as i32);
        let (g_p, _g_sync) = g.device_ptr(&self.stream);
        let (u_p, _u_sync) = u.device_ptr(&self.stream);
        let (out_p, _out_sync) = out.device_ptr_mut(&self.stream);
        let args = [
            Arg::P(g_p),
            Arg::P(u_p),
            Arg::P(out_p),
            Arg::I(n_i),
            Arg::P(crate::forward::ptr(self, &self.tc_xp)),
            Arg::P(crate::forward::ptr(self, &self.tc_xs)),
            Arg::I(prep_i),
            Arg::I(kinds),
        ];
        let cfg = LaunchConfig {
            grid_dim: (
                (n / 4).div_ceil(kernels::GEGLU_PREP_THREADS as usize) as u32,
                rows as u32,
                1,
            ),
            block_dim: (kernels::GEGLU_PREP_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // The parameters of `geglu_prep_f32(const float*, const float*, float*, int, uint32_t*,
        // float*, int, int)` (checked against its PTX list in launch_plain); lengths checked
        // above, the scratch holds 8 columns of TC_MAX_K ≥ n.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// Fills both tensor-core scratch buffers (`Gpu::tc_xp`, `Gpu::tc_xs`) with the bit
    /// pattern `bits` (checks compare what two prep writers leave there).
    pub(crate) fn fill_tc_scratch(&self, bits: u32) -> Result<(), RuntimeError> {
        let xp = crate::forward::ptr(self, &self.tc_xp);
        let xs = crate::forward::ptr(self, &self.tc_xs);
        self.fill_words("fill tc_xp", xp, self.tc_xp.len(), bits)?;
        self.fill_words("fill tc_xs", xs, self.tc_xs.len(), bits)
    }

    /// `y = cap · tanh(x / cap)` over `n` f32 values.
    pub fn softcap(
        &self,
        x: &CudaView<'_, f32>,
        y: &mut CudaViewMut<'_, f32>,
        n: usize,
        cap: f32,
    ) -> Result<(), RuntimeError> {
        let what = "softcap_f32";
        if x.len() < n || y.len() < n {
            return Err(shape(what, format!("n {n}")));
        }
        let f = self.func(Family::Activation, what)?;
        let nn = n as u64;
        let cfg = blocks_1d(what, nn, 256)?;
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (y_p, _y_sync) = y.device_ptr_mut(&self.stream);
        let args = [Arg::P(x_p), Arg::P(y_p), Arg::U(nn), Arg::F(cap)];
        // The parameters of `softcap_f32(const float*, float*, uint64_t, float)` (checked against
        // its PTX list in launch_plain); x and y hold n floats (checked).
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// Row-wise argmax of `x` f32 `[rows, n]` into `idx[rows]`, `val[rows]`; ties → lower
    /// index; a NaN wins (so it is never hidden).
    pub fn argmax(
        &self,
        x: &CudaView<'_, f32>,
        rows: usize,
        n: usize,
        idx: &mut CudaViewMut<'_, i32>,
        val: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), RuntimeError> {
        let what = "argmax_f32";
        let len = rows_len(what, rows, n, I32_MAX)?;
        if x.len() < len || idx.len() < rows || val.len() < rows || n == 0 || n > I32_MAX {
            return Err(shape(what, format!("rows {rows} × n {n}")));
        }
        let f = self.func(Family::Reduce, what)?;
        let nn = n as i32;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (idx_p, _idx_sync) = idx.device_ptr_mut(&self.stream);
        let (val_p, _val_sync) = val.device_ptr_mut(&self.stream);
        let args = [Arg::P(x_p), Arg::P(idx_p), Arg::P(val_p), Arg::I(nn)];
        // The parameters of `argmax_f32(const float*, int*, float*, int)` (checked against the
        // PTX list in launch_plain); lengths checked.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }

    /// `topk_f32` (`reduce.cu`; `topk1_f32` for `k` = 1, [`kernels::topk_kernel`]) over `rows`
    /// rows of `n` f32 at `x`: per row, the `k` largest
    /// values over ids whose `mask` byte is 0 (`mask` u8 `[n]`, `None` = every id), value
    /// descending, lower id first on exact ties, non-finite values left out and counted.
    /// Returns per row the `(id, value)` list (shorter than `k` when fewer ids qualify) and the
    /// non-finite count. The same launch shape as the forward's (grid `(rows,
    /// kernels::topk_blocks(n))`); scratch and output are allocated here (output poisoned first).
    ///
    /// Errors: [`RuntimeError::Shape`] for `k` outside `1..=16`, `n` outside `1..=i32::MAX` or
    /// short buffers; driver errors.
    pub fn topk(
        &self,
        x: &CudaView<'_, f32>,
        rows: usize,
        n: usize,
        mask: Option<&CudaView<'_, u8>>,
        k: usize,
    ) -> Result<Vec<TopkRow>, RuntimeError> {
        let what = kernels::topk_kernel(k);
        let (tmax, stride) = (crate::forward::TOPK_MAX, crate::forward::TK_STRIDE);
        let len = rows_len(what, rows, n, I32_MAX)?;
        checked_len(
            what,
            &[rows, kernels::TOPK_BLOCKS_MAX, stride, 4],
            isize::MAX as usize,
        )?;
        if !(1..=tmax).contains(&k)
            || n == 0
            || n > I32_MAX
            || x.len() < len
            || mask.is_some_and(|m| m.len() < n)
        {
            return Err(shape(what, format!("rows {rows} × n {n}, k {k}")));
        }
        let name = kernels::topk_kernel(k);
        let f = self.func(Family::Reduce, name)?;
        let part = self
            .stream
            .alloc_zeros::<i32>(rows * kernels::TOPK_BLOCKS_MAX * stride)
            .map_err(drv(what))?;
        let cnt = self.stream.alloc_zeros::<u32>(rows).map_err(drv(what))?;
        let out = self
            .stream
            .clone_htod(&vec![i32::MIN; rows * stride])
            .map_err(drv(what))?;
        let (nn, kk) = (n as i32, k as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, kernels::topk_blocks(n) as u32, 1),
            block_dim: (kernels::TOPK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        {
            let (x_p, _x_sync) = x.device_ptr(&self.stream);
            // no mask: a null pointer (every id)
            let (mask_p, _mask_sync) = match mask {
                Some(m) => {
                    let (mask_p, mask_sync) = m.device_ptr(&self.stream);
                    (mask_p, Some(mask_sync))
                }
                None => (0, None),
            };
            let (part_p, _part_sync) = part.device_ptr(&self.stream);
            let (cnt_p, _cnt_sync) = cnt.device_ptr(&self.stream);
            let (out_p, _out_sync) = out.device_ptr(&self.stream);
            let args = [
                Arg::P(x_p),
                Arg::I(nn),
                Arg::P(mask_p),
                Arg::I(kk),
                Arg::P(part_p),
                Arg::P(cnt_p),
                Arg::P(out_p),
            ];
            // The parameters of `topk_f32` and `topk1_f32`: (const float*, int, const uint8_t*,
            // int, int*, unsigned*, int*) (checked against its PTX list in launch_plain); x
            // holds rows·n floats and mask n bytes (checked), part/cnt/out are sized for `rows`
            // rows of the kernel's layout (TOPK_BLOCKS_MAX partials of 2·TOPK_MAX + 1 words).
            crate::forward::launch_plain(self, &f, name, cfg, &args)?;
        }
        let raw = self.stream.clone_dtoh(&out).map_err(drv(what))?;
        Ok(raw
            .chunks_exact(stride)
            .map(|row| (crate::forward::topk_entries(row, k), row[2 * tmax]))
            .collect())
    }

    /// Fills an f32 buffer with the bit pattern `bits` (e.g. `0x7FC0_0000`, a quiet NaN, to
    /// poison outputs before a kernel under test runs).
    pub fn fill_f32_bits(
        &self,
        buf: &mut CudaViewMut<'_, f32>,
        bits: u32,
    ) -> Result<(), RuntimeError> {
        let n = buf.len();
        let (p, _sync) = buf.device_ptr_mut(&self.stream);
        self.fill_words("fill_u32", p, n, bits)
    }

    /// `fill_u32` over the `n` 32-bit words at device address `p` (a live buffer of this GPU
    /// holding at least `n` words: an f32 buffer of n elements is n words, the kernel only stores
    /// bit patterns).
    fn fill_words(&self, what: &str, p: u64, n: usize, bits: u32) -> Result<(), RuntimeError> {
        if n == 0 {
            return Ok(());
        }
        let f = self.func(Family::Reduce, "fill_u32")?;
        let n = n as u64;
        let cfg = blocks_1d(what, n.min(1 << 24), 256)?;
        let args = [Arg::P(p), Arg::U(n), Arg::I(bits as i32)];
        // The parameters of `fill_u32(uint32_t*, uint64_t, uint32_t)` (checked against the
        // PTX list in launch_plain; a grid-stride loop) over the n words at p, which every
        // caller takes from a live buffer of at least n words.
        crate::forward::launch_plain(self, &f, "fill_u32", cfg, &args)?;
        Ok(())
    }

    /// Read-bandwidth probe: sums `x` (length a multiple of 4, 16-byte aligned) into one partial
    /// sum per block; `partial.len()` blocks are launched (256 threads each).
    pub fn sum_probe(
        &self,
        x: &CudaView<'_, f32>,
        partial: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), RuntimeError> {
        let what = "sum_f32x4";
        if !x.len().is_multiple_of(4) || partial.is_empty() || partial.len() > I32_MAX {
            return Err(shape(
                what,
                format!(
                    "need len % 4 == 0 (got {}) and 1 ≤ partials ≤ 2^31 − 1 (got {})",
                    x.len(),
                    partial.len()
                ),
            ));
        }
        check_aligned16(what, &[("x", x.device_ptr(&self.stream).0)])?;
        let f = self.func(Family::Reduce, what)?;
        let n4 = (x.len() / 4) as u64;
        let cfg = LaunchConfig {
            grid_dim: (partial.len() as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (x_p, _x_sync) = x.device_ptr(&self.stream);
        let (partial_p, _partial_sync) = partial.device_ptr_mut(&self.stream);
        let args = [Arg::P(x_p), Arg::U(n4), Arg::P(partial_p)];
        // The parameters of `sum_f32x4(const float4*, uint64_t, float*)` (checked against the
        // PTX list in launch_plain); x holds n4 float4 values at a 16-byte aligned address
        // (both checked) and partial one float per block.
        crate::forward::launch_plain(self, &f, what, cfg, &args)?;
        Ok(())
    }
}

impl Gpu {
    /// Queues a one-thread kernel that busy-waits `ns` nanoseconds (benchmarks: keeps the GPU
    /// busy while the host queues the launches being timed).
    pub fn spin(&self, ns: u64) -> Result<(), RuntimeError> {
        let f = self.func(Family::Reduce, "spin_ns")?;
        let cfg = blocks_1d("spin_ns", 1, 1)?;
        // The parameters of `spin_ns(uint64_t)` (checked against its PTX list in
        // launch_plain); touches no memory.
        let args = [Arg::U(ns)];
        crate::forward::launch_plain(self, &f, "spin_ns", cfg, &args)?;
        Ok(())
    }
}

/// Default RoPE inverse frequencies (`spec/gemma4-text.md` §4.4): `1 / θ^((2i)/d)` for
/// `i < d/2`, in f64.
pub fn rope_inv_freq_default(d: usize, theta: f64) -> Vec<f64> {
    (0..d / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / d as f64))
        .collect()
}

/// Proportional RoPE inverse frequencies (§4.4): `n_rot = floor(partial_rotary_factor·d / 2)`;
/// `1 / θ^((2i)/d)` (full head dim `d` in the exponent) for `i < n_rot`, 0 for the rest; all
/// divided by `factor` (1.0 by default).
pub fn rope_inv_freq_proportional(
    d: usize,
    theta: f64,
    partial_rotary_factor: f64,
    factor: f64,
) -> Vec<f64> {
    let n_rot = ((partial_rotary_factor * d as f64) / 2.0).floor() as usize;
    (0..d / 2)
        .map(|i| {
            if i < n_rot {
                1.0 / theta.powf((2 * i) as f64 / d as f64) / factor
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Rust-side format rules take the kernel suffixes (`"q2_k"`), not ggml names
    /// (`"Q2_K"`): only Q2_K's, Q3_K's and Q6_K's tensor-core matvecs read the int8 digits (`matvec.cu` `TcI8`).
    #[test]
    fn int8_digit_formats_by_suffix() {
        let digits: Vec<GgmlType> = reference::quant::SUPPORTED_TYPES
            .into_iter()
            .filter(|&t| format_suffix(t, "test").is_ok_and(kernels::tc_int8_digits))
            .collect();
        assert_eq!(digits, vec![GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q6_K]);
    }
    use reference::quant::SUPPORTED_TYPES;

    /// The prep writers' shape rules, by hand: 1 ≤ nc ≤ 8 columns, k a positive multiple of 16
    /// within the scratch (`TC_MAX_K` = 65536), x holding nc·k values; `rows · n` in range with
    /// 1 ≤ rows ≤ the grid bound; 16-byte alignment of every address.
    #[test]
    fn prep_shape_rules() {
        assert!(check_prep_shape("t", 1, 16, 16).is_ok());
        assert!(check_prep_shape("t", 8, 65536, 8 * 65536).is_ok());
        for (nc, k, x) in [
            (0, 16, 16),
            (9, 16, 9 * 16),
            (1, 0, 0),
            (1, 24, 24),
            (1, 65536 + 16, 65536 + 16),
            (3, 3840, 3 * 3840 - 1),
        ] {
            assert!(
                matches!(
                    check_prep_shape("t", nc, k, x),
                    Err(RuntimeError::Shape { .. })
                ),
                "nc {nc} k {k} x {x}"
            );
        }
        assert_eq!(rows_len("t", 3, 5376, 65535).unwrap(), 16128);
        assert!(rows_len("t", 0, 16, 65535).is_err());
        assert!(rows_len("t", 65536, 16, 65535).is_err());
        assert!(rows_len("t", usize::MAX / 2, 16, usize::MAX).is_err());
        assert!(check_aligned16("t", &[("a", 0x1000), ("b", 0x2010)]).is_ok());
        let e = check_aligned16("t", &[("a", 0x1000), ("b", 0x2004)]).unwrap_err();
        assert!(e.to_string().contains("b at 0x2004"), "{e}");
    }

    /// Hand derivation (spec/gemma4-text.md §4.4): d = 512, θ = 1e6, factor 0.25 → n_rot =
    /// floor(0.25·512 / 2) = 64; entry 0 = θ⁰ = 1; entry 63 = 1e6^(−126/512); entry 64.. = 0.
    #[test]
    fn proportional_inv_freq_matches_hand_values() {
        let f = rope_inv_freq_proportional(512, 1e6, 0.25, 1.0);
        assert_eq!(f.len(), 256);
        assert_eq!(f[0], 1.0);
        assert!((f[63] - 10f64.powf(-6.0 * 126.0 / 512.0)).abs() < 1e-15);
        assert!(f[64..].iter().all(|&v| v == 0.0));
        let g = rope_inv_freq_default(256, 1e4);
        assert_eq!(g.len(), 128);
        assert!((g[1] - 10f64.powf(-4.0 * 2.0 / 256.0)).abs() < 1e-15);
    }

    /// Every supported type (spec §3.1) has a kernel; a type outside it is a typed error.
    #[test]
    fn every_supported_type_has_a_kernel() {
        for ty in SUPPORTED_TYPES {
            assert!(format_suffix(ty, "t").is_ok(), "{ty}");
        }
        assert!(matches!(
            format_suffix(GgmlType::Q8_1, "t"),
            Err(RuntimeError::UnsupportedType { .. })
        ));
        assert!(matches!(
            row_bytes(GgmlType::Q4_K, 128, "t"),
            Err(RuntimeError::Shape { .. })
        ));
        assert_eq!(row_bytes(GgmlType::Q4_K, 3840, "t").unwrap(), 15 * 144);
    }

    #[test]
    fn matvec_shape_checks() {
        // Q4_K, 2 rows × 256: one 144-byte block per row (spec §3.4) → w must be 288 bytes.
        let ok = |nc, w, x, y| check_matvec_shapes("t", 2, 256, 144, nc, w, x, y).is_ok();
        assert!(ok(1, 288, 256, 2));
        assert!(ok(8, 288, 8 * 256, 16));
        assert!(!ok(0, 288, 256, 2)); // no columns
        assert!(!ok(9, 288, 9 * 256, 18)); // more than MATVEC_MAX_COLS
        assert!(!ok(1, 287, 256, 2)); // weights one byte short
        assert!(!ok(2, 288, 511, 4)); // x one element short
        assert!(!ok(2, 288, 512, 3)); // y one element short

        // rows · row_bytes past usize: an error, not a wrapped product that might match w.
        let huge = check_matvec_shapes("t", i32::MAX as usize, 256, usize::MAX / 4, 1, 0, 256, 1);
        assert!(matches!(huge, Err(RuntimeError::Shape { .. })));
        assert!(check_matvec_shapes("t", 0, 256, 144, 1, 0, 256, 0).is_err()); // no rows
    }

    /// Launch-size rules by hand: ceil(n / block) blocks, 1 ≤ blocks ≤ 2^31 − 1 (the grid's
    /// x extent); element counts as checked products.
    #[test]
    fn launch_size_rules() {
        assert_eq!(blocks_1d("t", 1, 256).unwrap().grid_dim, (1, 1, 1));
        assert_eq!(blocks_1d("t", 257, 256).unwrap().grid_dim, (2, 1, 1));
        // the largest count that fits: (2^31 − 1) blocks of 256 threads
        let top = (i32::MAX as u64) * 256;
        assert_eq!(
            blocks_1d("t", top, 256).unwrap().grid_dim.0,
            i32::MAX as u32
        );
        assert!(blocks_1d("t", top + 1, 256).is_err());
        assert!(blocks_1d("t", 0, 256).is_err());
        // 2^40 + 1 threads: a truncating cast would have launched 1 block
        assert!(blocks_1d("t", (1 << 40) + 1, 256).is_err());
        assert_eq!(checked_len("t", &[7, 8, 256], usize::MAX).unwrap(), 14336);
        assert_eq!(checked_len("t", &[], 10).unwrap(), 1);
        assert!(checked_len("t", &[1 << 40, 1 << 30], usize::MAX).is_err());
        assert!(checked_len("t", &[4, 4], 15).is_err());
    }
}
