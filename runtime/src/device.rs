//! Device context setup with a panic-safe probe.
//!
//! cudarc panics when `libcuda` or `libnvrtc` cannot be loaded, so [`Gpu::new`] first opens
//! both with `libloading` (see `kernels::cuda_driver_available`) and then creates the context
//! inside `catch_unwind`; a machine without a GPU gets [`RuntimeError::Unavailable`].

use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream};
use kernels::ModuleCache;

use crate::error::{drv, RuntimeError};

/// One GPU: its context, the stream all work is queued on, and the kernel module cache.
pub struct Gpu {
    /// The CUDA context (primary context of the device).
    pub ctx: Arc<CudaContext>,
    /// The stream every launch and copy of this runtime uses (in-order).
    pub stream: Arc<CudaStream>,
    /// Compiled and loaded kernel families (NVRTC, for this device's architecture).
    pub modules: ModuleCache,
    /// Device name as the driver reports it, e.g. `"NVIDIA H200"`.
    pub name: String,
    /// Compute capability (major, minor); `(9, 0)` on H100/H200.
    pub cc: (i32, i32),
    /// Number of streaming multiprocessors.
    pub sm_count: u32,
    /// Total device memory in bytes.
    pub total_mem: usize,
    /// Scratch of the tensor-core matvec (`mvtc_prep` output, see `matvec.cu`), shared by every
    /// forward on [`Gpu::stream`] (in-order, so one at a time): split activations of up to 8
    /// columns of [`TC_MAX_K`] elements, and their 16-element sums.
    pub(crate) tc_xp: CudaSlice<u32>,
    /// 16-element sums `[TC_MAX_K / 16, 8]` of the same columns, followed by their bf16
    /// fragments for the folded formats' offset mma (`common.cuh`, `TC_XSF_OFFSET`), the
    /// columns' int8 digits for the integer mma (`TC_XD_OFFSET`) and their per-256-element
    /// exponents (`TC_XF_OFFSET`; the digits' area holds either `TC_XLAYOUT`, each with room for
    /// all [`kernels::TC_MAX_GROUPS`] column groups, which the matvecs' unclamped reads rely on).
    pub(crate) tc_xs: CudaSlice<f32>,
    /// Kernel profile being recorded ([`Gpu::profile_start`]): per launch (the forward's and the
    /// `ops.rs` wrappers', both through `forward::launch_with`), the kernel name and an event
    /// recorded right after it. `None` when not profiling.
    pub(crate) prof: std::sync::Mutex<Option<Vec<(String, CudaEvent)>>>,
    /// Per (loaded tensor-core function, as its `CUfunction` address; tiles): the dynamic shared
    /// memory that spreads its launch (`forward::tc_spread_smem`; 0 = none).
    pub(crate) tc_spread: std::sync::Mutex<std::collections::HashMap<(usize, u32), u32>>,
}

/// Longest row (input length `K`) the tensor-core matvec scratch holds; longer rows use the
/// CUDA-core matvec.
pub const TC_MAX_K: usize = 1 << 16;
const _: () = assert!(TC_MAX_K / 16 * 8 == kernels::TC_XSF_OFFSET);
const _: () = assert!(
    kernels::TC_XSF_OFFSET + TC_MAX_K / 256 * kernels::TC_PREP_WORDS_PER_GROUP
        == kernels::TC_XD_OFFSET
);
const _: () = assert!(
    kernels::TC_XD_OFFSET + TC_MAX_K / 32 * 64 * kernels::TC_MAX_GROUPS == kernels::TC_XF_OFFSET
);
/// `f32` words of the `mvtc` sums buffer: group sums, their fragments, the int8 digit fragments
/// and the digits' exponents (`common.cuh`).
const TC_XS_WORDS: usize =
    kernels::TC_XF_OFFSET + TC_MAX_K / 256 * kernels::TC_XF_WORDS_PER_SUPER_BLOCK;

/// Whether the tensor-core matvec serves a matrix of format `fmt` (a [`kernels::FORMATS`]
/// suffix), row length `k` and `bytes` bytes on a device of compute capability `cc`: a
/// [`kernels::TC_FORMATS`] format with `k % 256 == 0` on sm_80+ ([`kernels::tc_supported`]),
/// `k ≤` [`TC_MAX_K`] (the scratch) and `bytes <` [`kernels::TC_MAX_MATRIX_BYTES`] (32-bit
/// stage offsets). The one rule for `Forward` and [`Gpu::matvec_tc`].
pub(crate) fn tc_serves(fmt: &str, k: usize, bytes: usize, cc: (i32, i32)) -> bool {
    kernels::tc_supported(fmt, k, cc) && k <= TC_MAX_K && bytes < kernels::TC_MAX_MATRIX_BYTES
}

/// Why no GPU can be used here, or `None` when `libcuda` and `libnvrtc` open and a device
/// context can be created. A bad setting ([`RuntimeError::Setting`], e.g. `GEMMA4_TC_DIGITS=02`)
/// is not a missing GPU: it gives `None` too, so the caller's own [`Gpu::new`] fails with it
/// (a GPU test fails instead of printing `skipped`). Never panics.
pub fn unavailable_reason() -> Option<String> {
    match Gpu::new(0) {
        Ok(_) | Err(RuntimeError::Setting(_)) => None,
        Err(e) => Some(e.to_string()),
    }
}

impl Gpu {
    /// Opens device `ordinal`: probes the libraries, creates the context and a stream, reads
    /// the device facts. Kernels are compiled lazily on first use (or by
    /// [`ModuleCache::load_all`]).
    ///
    /// Errors: [`RuntimeError::Setting`] for a runtime setting in the environment that is
    /// refused (`GEMMA4_TC_DIGITS` other than 2 or 3, a `GEMMA4_PDL` typo, a missing
    /// `GEMMA4_KERNEL_SRC` folder…: [`crate::forward::settings_problem`]; checked first, on any
    /// machine), [`RuntimeError::Unavailable`] (no driver / NVRTC / device,
    /// including a cudarc panic caught here), [`RuntimeError::Driver`] for a failing driver query.
    pub fn new(ordinal: usize) -> Result<Gpu, RuntimeError> {
        if let Some(why) = crate::forward::settings_problem() {
            return Err(RuntimeError::Setting(why));
        }
        kernels::cuda_driver_available().map_err(RuntimeError::Unavailable)?;
        kernels::nvrtc_available().map_err(RuntimeError::Unavailable)?;
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|p| {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into());
                RuntimeError::Unavailable(format!("cudarc panicked creating a context: {msg}"))
            })?
            .map_err(|e| RuntimeError::Unavailable(format!("no CUDA device {ordinal}: {e}")))?;
        // SAFETY: this runtime queues all work on the one stream below, so cudarc's per-buffer
        // cross-stream events are not needed (and cost driver calls on every launch).
        #[allow(unsafe_code)]
        unsafe {
            ctx.disable_event_tracking()
        };
        let stream = ctx.new_stream().map_err(drv("new_stream"))?;
        let name = ctx.name().map_err(drv("device name"))?;
        let cc = ctx
            .compute_capability()
            .map_err(drv("compute capability"))?;
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv("SM count"))? as u32;
        let total_mem = ctx.total_mem().map_err(drv("total memory"))?;
        let modules = ModuleCache::new(ctx.clone())?;
        let tc_xp = stream
            .alloc_zeros::<u32>(TC_MAX_K / 16 * kernels::TC_PREP_WORDS_PER_GROUP)
            .map_err(drv("alloc mvtc scratch"))?;
        // Group sums [TC_MAX_K / 16][8], then (from TC_XSF_OFFSET = TC_MAX_K / 16 · 8 words, see
        // common.cuh) their bf16 fragments [3][TC_MAX_K / 256][32][2] for folded formats, then
        // the int8 digits (TC_XD_OFFSET) and their exponents (TC_XF_OFFSET).
        let tc_xs = stream
            .alloc_zeros::<f32>(TC_XS_WORDS)
            .map_err(drv("alloc mvtc scratch"))?;
        Ok(Gpu {
            prof: std::sync::Mutex::new(None),
            tc_spread: std::sync::Mutex::new(std::collections::HashMap::new()),
            tc_xp,
            tc_xs,
            ctx,
            stream,
            modules,
            name,
            cc,
            sm_count,
            total_mem,
        })
    }

    /// Starts recording a kernel profile: from now on every launch (forward and `ops.rs`
    /// wrappers) is followed by an event on [`Gpu::stream`] (see [`Gpu::profile_take`]). A start event is recorded first.
    ///
    /// Errors: driver errors creating or recording the event.
    pub fn profile_start(&self) -> Result<(), RuntimeError> {
        let e = self
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv("profile event"))?;
        e.record(&self.stream).map_err(drv("profile event"))?;
        *self.prof.lock().unwrap_or_else(|p| p.into_inner()) = Some(vec![("start".into(), e)]);
        Ok(())
    }

    /// Stops recording, waits for the stream and returns `(kernel name, µs)` per launch since
    /// [`Gpu::profile_start`]: the GPU time between the event before and the one after it (the
    /// kernel plus the gap before it). Meaningful only when the GPU was kept busy while the
    /// launches were queued (e.g. behind [`Gpu::spin`]), so host launch cost is hidden.
    ///
    /// Errors: driver errors; [`RuntimeError::Capacity`] when no profile was started.
    pub fn profile_take(&self) -> Result<Vec<(String, f64)>, RuntimeError> {
        let evs = self
            .prof
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| RuntimeError::Capacity("no kernel profile was started".into()))?;
        self.sync()?;
        let mut out = Vec::with_capacity(evs.len().saturating_sub(1));
        for w in evs.windows(2) {
            let ms = w[0].1.elapsed_ms(&w[1].1).map_err(drv("profile elapsed"))?;
            out.push((w[1].0.clone(), ms as f64 * 1e3));
        }
        Ok(out)
    }

    /// Waits for all queued work on [`Gpu::stream`].
    pub fn sync(&self) -> Result<(), RuntimeError> {
        self.stream.synchronize().map_err(drv("stream synchronize"))
    }
}
