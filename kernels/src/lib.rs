//! `kernels` — CUDA C sources (one family per `.cu` file) and the NVRTC compile/cache helper.
//!
//! The sources are embedded with `include_str!` and compiled at run time with NVRTC for the GPU
//! in hand (virtual architecture `compute_XY` from the device's compute capability, so the PTX is
//! JIT-compiled by the driver for exactly that GPU). Compiled PTX is cached per process and per
//! architecture; loaded modules are cached per [`ModuleCache`] (one per CUDA context).
//!
//! Block formats follow `spec/gguf-gemma4.md` §3; the math kernels follow `spec/gemma4-text.md`
//! §3 (RMSNorm), §4.4 (RoPE), §5 (GELU-tanh GeGLU) and §9 (soft-capping). Each `.cu` file states
//! its launch contract (grid, block, argument shapes) at the top.
//!
//! cudarc panics when `libnvrtc`/`libcuda` cannot be opened; [`nvrtc_available`] and
//! [`cuda_driver_available`] probe with `libloading` first, so callers can skip cleanly.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileOptions, Ptx};

/// Shared prelude prepended to every family (integer typedefs, f16/bf16 conversion, loads,
/// warp reductions).
const COMMON: &str = include_str!("../common.cuh");
/// Per-format 32-element unit decoders (`spec/gguf-gemma4.md` §3), prepended to the families
/// that read GGUF blocks.
const QUANT: &str = include_str!("../quant.cuh");

/// Environment variable naming a folder whose `common.cuh`, `quant.cuh` and `<family>.cu` files
/// replace the embedded ones (each file only where present), so kernel variants can be timed on
/// a GPU machine without rebuilding the binary. Unset (the normal case): the embedded sources.
pub const SOURCE_DIR_ENV: &str = "GEMMA4_KERNEL_SRC";

/// The text of kernel source `file`: `$GEMMA4_KERNEL_SRC/file` when the variable is set and the
/// file is readable, else `embedded`.
fn override_or(file: &str, embedded: &str) -> String {
    std::env::var_os(SOURCE_DIR_ENV)
        .and_then(|d| std::fs::read_to_string(std::path::Path::new(&d).join(file)).ok())
        .unwrap_or_else(|| embedded.to_string())
}

/// `Some(why)` when `$GEMMA4_KERNEL_SRC` is set but is not a folder [`override_or`] can read:
/// empty, missing, not a folder, or holding one of the source files (`common.cuh`, `quant.cuh`,
/// a [`Family::file`]) as something other than a readable UTF-8 regular file — [`override_or`]
/// would silently compile the embedded file instead (or, for a FIFO, wait forever), and an A/B
/// timing compare the built-in kernels with themselves. A source file absent from the folder is
/// fine: the embedded one is used (a variant folder holds only the files it changes). The
/// runtime refuses to open a GPU when this says something, as for [`tc_digits_env_problem`].
pub fn source_dir_problem() -> Option<String> {
    let dir = std::env::var_os(SOURCE_DIR_ENV)?;
    source_dir_check(std::path::Path::new(&dir)).err()
}

/// [`source_dir_problem`] for the folder `dir` (the variable's value).
fn source_dir_check(dir: &std::path::Path) -> Result<(), String> {
    let bad = |why: String| {
        Err(format!(
            "{SOURCE_DIR_ENV}={:?}: {why}",
            dir.display().to_string()
        ))
    };
    if dir.as_os_str().is_empty() {
        return bad("is empty (unset it for the built-in kernel sources, or name a folder)".into());
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return bad("is not a folder".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return bad("no such folder".into()),
        Err(e) => return bad(format!("cannot be read: {e}")),
    }
    let files = ["common.cuh", "quant.cuh"]
        .into_iter()
        .chain(Family::ALL.iter().map(|f| f.file()));
    for file in files {
        let path = dir.join(file);
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return bad(format!("{file}: cannot be read: {e}")),
            Ok(m) if !m.is_file() => return bad(format!("{file}: is not a regular file")),
            Ok(_) => {}
        }
        if let Err(e) = std::fs::read_to_string(&path) {
            return bad(format!("{file}: cannot be read as UTF-8 text: {e}"));
        }
    }
    Ok(())
}

/// The format suffixes used in kernel names (`dequant_<fmt>`, `matvec_<fmt>_<nc>`), in the
/// order of the X-macro `FOR_EACH_FORMAT` in `quant.cuh`; each is the lower-case ggml type
/// name (`spec/gguf-gemma4.md` §3.1).
pub const FORMATS: [&str; 16] = [
    "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k",
    "q6_k", "q8_k", "iq4_nl", "iq4_xs",
];

/// The `quant.cuh` struct of each entry of [`FORMATS`] (same order).
const FORMAT_STRUCTS: [&str; 16] = [
    "FmtF32",
    "FmtF16",
    "FmtBF16",
    "FmtQ4_0",
    "FmtQ4_1",
    "FmtQ5_0",
    "FmtQ5_1",
    "FmtQ8_0",
    "FmtQ2_K",
    "FmtQ3_K",
    "FmtQ4_K",
    "FmtQ5_K",
    "FmtQ6_K",
    "FmtQ8_K",
    "FmtIQ4_NL",
    "FmtIQ4_XS",
];

/// Largest number of activation columns a single `matvec_<fmt>_<nc>` launch handles.
pub const MATVEC_MAX_COLS: usize = 8;
/// Threads of one `matvec` thread block (`MV_THREADS` in `matvec.cu`).
pub const MATVEC_THREADS: u32 = 128;

/// Rows computed by one `matvec_<fmt>_<nc>` thread block: for `q4_k` (warp-per-rows fast path,
/// `MvK<NC>::R` rows per warp × 4 warps in `matvec.cu`) 8 for `nc ≤ 2`, else 4; for every other
/// format (`MvRows<NC>::R`) 4 for `nc ≤ 2`, else 2. The grid is `ceil(rows / this)` blocks.
pub fn matvec_rows_per_block(fmt: &str, nc: usize) -> u32 {
    let r = if nc <= 2 { 4 } else { 2 };
    if fmt == "q4_k" {
        2 * r
    } else {
        r
    }
}

/// Formats with a tensor-core matvec `mvtc_<fmt>_<NG>` (`matvec.cu`: weights decoded to exact bf16
/// integers, activations split exactly into three bf16 pieces, `mma.sync` bf16 → f32; Q2_K,
/// Q3_K, Q6_K: integer `mma.sync` s8 → s32 against [`tc_digits`] int8 digits per activation,
/// [`tc_int8_digits`]).
pub const TC_FORMATS: [&str; 6] = ["q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_0"];
/// Whether the tensor-core matvec of format `fmt` (a [`FORMATS`] suffix) takes its main sums
/// with the integer mma against the activations' int8 digits (`matvec.cu`, `TcI8`: Q2_K, Q3_K and Q6_K; the two lists must agree)
/// instead of the bf16 mma against their exact bf16 pieces. Those digits round each input to
/// [`tc_digit_bits`] significant bits of its 256-element block's (super-block's) largest
/// magnitude (`common.cuh`, `TC_XD_OFFSET`), so such a matvec is not exact in its activations,
/// unlike the others.
pub fn tc_int8_digits(fmt: &str) -> bool {
    matches!(fmt, "q2_k" | "q3_k" | "q6_k")
}

/// Whether the tensor-core matvec `mvtc_<fmt>_*` applies its `cap` argument, the final logit
/// soft-cap `cap·tanh(v / cap)` fused into its epilogue (`matvec.cu` `TcCapFused`, the same list):
/// Q6_K, the tied head's format in llama.cpp's K-quant mixes. The other formats' kernels ignore
/// `cap`; their heads are capped by `softcap_f32`.
pub fn tc_softcap_fused(fmt: &str) -> bool {
    fmt == "q6_k"
}

/// Int8 digits per activation of the [`tc_int8_digits`] formats' tensor-core matvecs by default
/// (`TC_DIGITS` in `common.cuh`): 3, i.e. 22 significant bits of each 256-element block's
/// largest |x| ([`tc_digit_bits`]).
pub const TC_DIGITS_DEFAULT: usize = 3;

/// Environment variable choosing the digit count for the process ([`tc_digits`]): `3` (the
/// default, "precise") or `2` ("fast"). Anything else is refused when a GPU is opened
/// ([`tc_digits_env_problem`]).
pub const TC_DIGITS_ENV: &str = "GEMMA4_TC_DIGITS";

/// Int8 digits per activation of the [`tc_int8_digits`] formats' tensor-core matvecs in this
/// process: `$GEMMA4_TC_DIGITS` when it is 2 or 3, else [`TC_DIGITS_DEFAULT`] (read once; the
/// kernel sources get it as `#define TC_DIGITS`, [`Family::source`]). Each digit is one mma
/// column, so at 2 digits 8 inputs take 2 column groups (16 columns) instead of 3: a third
/// fewer integer mma and activation loads per weight at 6–8 inputs and half at 3–4 (5: two groups
/// either way; `matvec.cu`'s integer-mma note has the measurements), at the price of 14 significant bits
/// instead of 22 per 256-element block, and Q2_K's group sums for its offsets keep their bf16
/// pieces hi and mid only (to 2⁻¹⁶ relative). Either count is the same for every input count,
/// so 1 … 8 columns give the same bits. The CUDA engine reports its name by it (`cuda` at 3,
/// `cuda-fast` at 2), so each mode has its own tie budgets.
pub fn tc_digits() -> usize {
    *digits_read().as_ref().unwrap_or(&TC_DIGITS_DEFAULT)
}

/// `Some(why)` when `$GEMMA4_TC_DIGITS` is set to something other than `2` or `3` (the runtime
/// refuses to open a GPU then, rather than run a mode the user did not ask for). The same one
/// reading as [`tc_digits`].
pub fn tc_digits_env_problem() -> Option<String> {
    digits_read().as_ref().err().cloned()
}

/// The process's one reading of `$GEMMA4_TC_DIGITS` ([`digits_setting`]).
fn digits_read() -> &'static Result<usize, String> {
    static D: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    D.get_or_init(|| digits_setting(std::env::var(TC_DIGITS_ENV)))
}

/// The digit count a `GEMMA4_TC_DIGITS` lookup asks for: unset → [`TC_DIGITS_DEFAULT`], `2` or
/// `3` → that; any other value (or one that is not Unicode) → why it is refused.
fn digits_setting(v: Result<String, std::env::VarError>) -> Result<usize, String> {
    match v {
        Err(std::env::VarError::NotPresent) => Ok(TC_DIGITS_DEFAULT),
        Ok(v) if v == "2" => Ok(2),
        Ok(v) if v == "3" => Ok(3),
        Ok(v) => Err(format!("{TC_DIGITS_ENV}={v:?}: must be 2 or 3")),
        Err(e) => Err(format!("{TC_DIGITS_ENV}: {e}")),
    }
}

/// Significant bits the int8 digits keep of each 256-element block's largest |x|:
/// `8·digits − 2` (`common.cuh`; 22 at 3 digits, 14 at 2): every element of a block with largest
/// |x| in `[2^e, 2^(e+1))` is rounded to a multiple of `2^(e + 1 − bits)`, an absolute error of
/// at most `2^(e − bits)`.
pub fn tc_digit_bits(digits: usize) -> i32 {
    8 * digits as i32 - 2
}

/// Mma columns one input takes in format `fmt`'s tensor-core matvec (`TcCols` in `matvec.cu`)
/// at `digits` int8 digits: `digits` for the [`tc_int8_digits`] formats, 3 (bf16 pieces hi, mid,
/// lo) for the others.
pub fn tc_cols_for(fmt: &str, digits: usize) -> usize {
    if tc_int8_digits(fmt) {
        digits
    } else {
        3
    }
}

/// The line every NVRTC program starts with: `#define TC_DIGITS <tc_digits()>` (`common.cuh`
/// keeps [`TC_DIGITS_DEFAULT`] only when compiled without it). With `common.cuh` from
/// [`SOURCE_DIR_ENV`] that predates `TC_DIGITS` (it would pack three digits whatever the host
/// asks) and a digit count other than the default, an `#error` naming both instead, so the
/// compile fails rather than the host and the kernels disagreeing on the columns.
fn digits_define(common: &str) -> String {
    digits_line(common, tc_digits())
}

/// `common.cuh` (from [`SOURCE_DIR_ENV`] when set) behind its [`digits_define`] line and, when
/// [`tc_wnst`] is not 0, `#define TC_WNST <n>`: the start of every NVRTC program.
fn common_prelude() -> String {
    let common = override_or("common.cuh", COMMON);
    let mut s = digits_define(&common);
    let n = tc_wnst();
    if n != 0 {
        s.push_str(&format!("#define TC_WNST {n}\n"));
    }
    s.push_str(&common);
    s
}

/// Environment variable ([`tc_wnst`]): warp stages in flight of the per-warp-staged tensor-core
/// matvecs (Q3_K's `mvtc_q3_k_*`), in dynamic shared memory; unset or `0`: the static stages
/// that 48 KiB holds (2). Anything other than `0` or `2` … `8` is refused when a GPU is opened
/// ([`tc_wnst_env_problem`]).
pub const TC_WNST_ENV: &str = "GEMMA4_TC_WNST";

/// Warp stages of the per-warp-staged `mvtc_<fmt>_*` kernels (`TC_WNST` in `matvec.cu`, the
/// define [`Family::source`] prepends when not 0): `$GEMMA4_TC_WNST` when valid, else 0 (static
/// stages). Read once per process.
pub fn tc_wnst() -> usize {
    *wnst_read().as_ref().unwrap_or(&0)
}

/// `Some(why)` when `$GEMMA4_TC_WNST` is set to something other than `0` or `2` … `8`.
pub fn tc_wnst_env_problem() -> Option<String> {
    wnst_read().as_ref().err().cloned()
}

/// The process's one reading of `$GEMMA4_TC_WNST` ([`wnst_setting`]).
fn wnst_read() -> &'static Result<usize, String> {
    static D: std::sync::OnceLock<Result<usize, String>> = std::sync::OnceLock::new();
    D.get_or_init(|| wnst_setting(std::env::var(TC_WNST_ENV)))
}

/// The stage count a `GEMMA4_TC_WNST` lookup asks for: unset → 0, `0` or `2` … `8` → that,
/// anything else → why it is refused.
fn wnst_setting(v: Result<String, std::env::VarError>) -> Result<usize, String> {
    match v {
        Err(std::env::VarError::NotPresent) => Ok(0),
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n == 0 || (2..=8).contains(&n) => Ok(n),
            _ => Err(format!("{TC_WNST_ENV}={v:?}: must be 0 or 2 … 8")),
        },
        Err(e) => Err(format!("{TC_WNST_ENV}: {e}")),
    }
}

/// Bytes of one 256-element super-block of the formats whose tensor-core matvecs stage their
/// weights per warp (`TcPerWarp` in `matvec.cu`): Q3_K's 110; `None` for the others.
fn tc_per_warp_sb(fmt: &str) -> Option<usize> {
    (fmt == "q3_k").then_some(110)
}

/// Dynamic shared memory (bytes) that `mvtc_<fmt>_<NG>[w]` for `nc` inputs needs
/// (`TcDynSmem` in `matvec.cu`, the same formula): with [`tc_wnst`] = n > 0 and a per-warp-staged
/// format, n stages of 16 rows × an odd pitch of 16-byte chunks per warp for 8 warps (the
/// epilogue's `4096·NG` bytes of sums alias them); 0 otherwise, and always 0 for the `mvtcx`
/// kernels. The kernel traps when launched with less.
pub fn tc_dyn_smem(fmt: &str, nc: usize) -> usize {
    dyn_smem(fmt, nc, tc_wnst(), tc_digits())
}

/// [`tc_dyn_smem`] at `wnst` stages and `digits` int8 digits.
fn dyn_smem(fmt: &str, nc: usize, wnst: usize, digits: usize) -> usize {
    match tc_per_warp_sb(fmt) {
        Some(sb) if wnst > 0 => {
            let pitch = (15 + sb).div_ceil(16) | 1; // chunks covering sb bytes from any offset mod 16
            let ng = col_groups(fmt, nc, digits).clamp(1, TC_MAX_GROUPS);
            (8 * wnst * 16 * pitch * 16).max(8 * 4 * ng * 32 * 4)
        }
        _ => 0,
    }
}

/// [`digits_define`] at `d` digits.
fn digits_line(common: &str, d: usize) -> String {
    if d != TC_DIGITS_DEFAULT && !common.contains("TC_DIGITS") {
        return format!(
            "#error \"{TC_DIGITS_ENV}={d} needs a common.cuh with TC_DIGITS; the one from {SOURCE_DIR_ENV} has none\"\n"
        );
    }
    format!("#define TC_DIGITS {d}\n")
}

/// `prep_kinds` bit of the prep producers (`mvtc_prep`, `add_norm_prep_f32`, `geglu_prep_f32`,
/// `attention_f32`; `TC_PREP_PIECES` in `common.cuh`): write the exact bf16 pieces, which the
/// tensor-core matvecs of every format but the [`tc_int8_digits`] ones read.
pub const TC_PREP_PIECES: i32 = 1;
/// `prep_kinds` bit: write the int8 digits and their exponents, which the [`tc_int8_digits`]
/// formats read (`TC_PREP_DIGITS` in `common.cuh`). The group sums are always written.
pub const TC_PREP_DIGITS: i32 = 2;

/// The `prep_kinds` a prep producer must write for tensor-core matvecs of formats `fmts` (the
/// [`FORMATS`] suffixes of the matrices that read its output through the prep buffers).
pub fn tc_prep_kinds<'a>(fmts: impl IntoIterator<Item = &'a str>) -> i32 {
    fmts.into_iter().fold(0, |k, f| {
        k | if tc_int8_digits(f) {
            TC_PREP_DIGITS
        } else {
            TC_PREP_PIECES
        }
    })
}

/// Word offset of the folded formats' group-sum fragments inside the `mvtc` sums buffer
/// (`TC_XSF_OFFSET` in `common.cuh`; equals `TC_MAX_K / 16 · 8` of the runtime's scratch).
pub const TC_XSF_OFFSET: usize = 32768;
/// Word offset of the activations' int8 digit fragments inside the `mvtc` sums buffer
/// (`TC_XD_OFFSET` in `common.cuh`: `u32 [TC_MAX_GROUPS][K / 32][32 lanes][2]`, the integer
/// tensor-core matvec's B fragments; `[TC_MAX_GROUPS][K / 64][32 lanes][4]` in the
/// `TC_XLAYOUT 2` variant), right after the group sums' fragments
/// (`TC_XSF_OFFSET + TC_MAX_K / 256 · TC_PREP_WORDS_PER_GROUP` of the runtime's scratch).
pub const TC_XD_OFFSET: usize = 81920;
/// Word offset of the digits' per-256-element exponents `f32 [K / 256][4][8]`, in the order the
/// matvec's lanes read them (`TC_XF_OFFSET` in `common.cuh`), right after the digit fragments
/// (`TC_XD_OFFSET + TC_MAX_K / 32 · 64 · TC_MAX_GROUPS` words). The runtime's buffer has room for
/// [`TC_XF_WORDS_PER_SUPER_BLOCK`] words per super-block of `TC_MAX_K`.
pub const TC_XF_OFFSET: usize = 475136;
/// Exponent words per 256-element super-block the `mvtc` sums buffer must hold past
/// [`TC_XF_OFFSET`]: 32 (4 lane quads × 8 slots).
pub const TC_XF_WORDS_PER_SUPER_BLOCK: usize = 32;
/// Elements of one `mvtc` super-block: `K` must be a multiple of this.
pub const TC_SUPER_BLOCK: usize = 256;
/// Rows of one `mvtc_<fmt>_<NG>` thread block (grid `ceil(rows / TC_ROWS)`, block [`TC_THREADS`]).
pub const TC_ROWS: u32 = 16;
/// Threads of one `mvtc_<fmt>_<NG>` thread block (`32 · TC_WARPS` in `matvec.cu`).
pub const TC_THREADS: u32 = 256;
/// `u32` words of the `mvtc_prep` activation buffer per 16 input elements of all 8 columns: the
/// mma fragment order `[TC_MAX_GROUPS][K / 16][32 lanes][2]` (`common.cuh`, `tc_prep_quad`),
/// 3 · 32 · 2 = 192 (1.5 words per element of each column); the sums buffer holds `K / 16 · 8`
/// f32, then the sums' fragments.
pub const TC_PREP_WORDS_PER_GROUP: usize = TC_MAX_GROUPS * 32 * 2;

/// Bytes of the largest weight matrix the tensor-core matvec serves: its weight stages address
/// the matrix with 32-bit byte offsets (`TcPlan` in `matvec.cu`). Larger matrices take the
/// CUDA-core matvec.
pub const TC_MAX_MATRIX_BYTES: usize = 1 << 32;

/// Whether the tensor-core matvec serves format `fmt` with row length `k` on a device of compute
/// capability `cc` (needs `mma.sync` bf16 and `fma.rn.bf16x2`: sm_80 or newer).
pub fn tc_supported(fmt: &str, k: usize, cc: (i32, i32)) -> bool {
    TC_FORMATS.contains(&fmt) && k.is_multiple_of(TC_SUPER_BLOCK) && k > 0 && cc.0 >= 8
}

/// Threads of one `rmsnorm_f32` / `rmsnorm_add_f32` block for rows of `n` (`norm.cu`):
/// `clamp(round_up(⌈n/4⌉, 32), 32, 1024)`.
pub fn norm_threads(n: usize) -> u32 {
    (n.div_ceil(4).div_ceil(32) * 32).clamp(32, 1024) as u32
}

/// Threads of one `add_norm_prep_f32` block for rows of `n` (one thread per 4 elements up to
/// 1024 threads, each holding at most `NQ = 4` such quads, `layer.cu`), or `None` when the fused
/// norm/prep kernels do not serve `n` (`n % 16 != 0` or `n > 16384`). `geglu_prep_f32` uses
/// blocks of [`GEGLU_PREP_THREADS`] with the same condition on `n`.
pub fn norm_prep_threads(n: usize) -> Option<u32> {
    (n > 0 && n.is_multiple_of(16) && n <= 4 * 4 * 1024)
        .then(|| ((n / 4).div_ceil(32) * 32).min(1024) as u32)
}

/// Threads of one `geglu_prep_f32` block (grid `(ceil(n / 4 / this), rows)`).
pub const GEGLU_PREP_THREADS: u32 = 128;

/// Largest mma column-group count of the tensor-core matvec (8 inputs × 3 pieces = 24 columns).
pub const TC_MAX_GROUPS: usize = 3;

/// Mma column groups format `fmt`'s tensor-core matvec uses for `nc` inputs: each input takes
/// `cols` = [`tc_cols_for`]`(fmt, `[`tc_digits`]`())` columns (`matvec.cu`), 8 columns a group:
/// `ceil(cols·nc / 8)`, at most [`TC_MAX_GROUPS`] for `nc ≤ 8`.
pub fn tc_col_groups(fmt: &str, nc: usize) -> usize {
    col_groups(fmt, nc, tc_digits())
}

/// [`tc_col_groups`] at `digits` int8 digits.
fn col_groups(fmt: &str, nc: usize, digits: usize) -> usize {
    (tc_cols_for(fmt, digits) * nc).div_ceil(8)
}

/// `mvtc`/`mvtcx` kernel name suffix for NG column groups: `<NG>`, or `<NG>w` for the wide
/// variant, which exists for NG 1 and 3 only.
fn tc_suffix(ng: usize, wide: bool) -> String {
    let ng = ng.clamp(1, TC_MAX_GROUPS);
    let w = if wide && ng != 2 { "w" } else { "" };
    format!("{ng}{w}")
}

/// Kernel name of the tensor-core matvec for format `fmt` and `nc` inputs (1 ≤ nc ≤ 8):
/// `mvtc_<fmt>_<NG>` with NG = [`tc_col_groups`]`(fmt, nc)` (defined, empty, for every format;
/// only [`TC_FORMATS`] compute), or with `wide` and NG 1 or 3 its wide variant
/// `mvtc_<fmt>_<NG>w` (more resident blocks per SM, the same sums bit for bit: `TcWide` in
/// `matvec.cu`; NG = 2 has none and keeps its kernel).
pub fn mvtc_kernel(fmt: &str, nc: usize, wide: bool) -> String {
    mvtc_name(fmt, nc, wide, tc_digits())
}

/// [`mvtc_kernel`] at `digits` int8 digits.
fn mvtc_name(fmt: &str, nc: usize, wide: bool, digits: usize) -> String {
    format!(
        "mvtc_{fmt}_{}",
        tc_suffix(col_groups(fmt, nc, digits), wide)
    )
}

/// (format of `attn_q`/`attn_k`, format of `attn_v`) pairs with a three-matrix tensor-core
/// matvec `mvtcx_<fmt>_<g>_<NG>[w]` ([`mvtcx_kernel`]; `MVTCX_PAIRS` in `matvec.cu`, the same
/// list): llama.cpp's Q2_K mix (Q2_K, Q3_K), Q4_K_M (Q4_K, Q6_K) and the synthetic UD-Q2_K_XL
/// fixtures (Q4_K, Q5_K). The kernel is compiled into the first format's per-format module.
pub const TC_THIRD: [(&str, &str); 3] = [("q2_k", "q3_k"), ("q4_k", "q5_k"), ("q4_k", "q6_k")];

/// Kernel name of the three-matrix tensor-core matvec (y = W·x, y2 = W2·x of format `fmt` and
/// y3 = W3·x of format `g`, one launch) for `nc` inputs: `mvtcx_<fmt>_<g>_<NG>` or, with `wide`
/// and NG 1 or 3, `mvtcx_<fmt>_<g>_<NG>w` (the launch bound of `fmt`'s wide kernel), named as
/// [`mvtc_kernel`], NG = [`tcx_col_groups`]. Defined (and non-empty in `fmt`'s module) for the
/// pairs of [`TC_THIRD`].
pub fn mvtcx_kernel(fmt: &str, g: &str, nc: usize, wide: bool) -> String {
    mvtcx_name(fmt, g, nc, wide, tc_digits())
}

/// [`mvtcx_kernel`] at `digits` int8 digits.
fn mvtcx_name(fmt: &str, g: &str, nc: usize, wide: bool, digits: usize) -> String {
    format!(
        "mvtcx_{fmt}_{g}_{}",
        tc_suffix(pair_groups(fmt, g, nc, digits), wide)
    )
}

/// Column groups of the three-matrix launch ([`mvtcx_kernel`]) of formats `fmt` and `g` for `nc`
/// inputs: the larger of the two formats' [`tc_col_groups`] (a format packed into fewer columns,
/// e.g. Q6_K's digits beside Q4_K's pieces, computes the extra columns and never writes them).
pub fn tcx_col_groups(fmt: &str, g: &str, nc: usize) -> usize {
    pair_groups(fmt, g, nc, tc_digits())
}

/// [`tcx_col_groups`] at `digits` int8 digits.
fn pair_groups(fmt: &str, g: &str, nc: usize, digits: usize) -> usize {
    col_groups(fmt, nc, digits).max(col_groups(g, nc, digits))
}

/// Whether a tensor-core matvec launch of `tiles` 16-row tiles (both matrices of a paired launch)
/// with `nc` inputs on a device of `sms` multiprocessors takes the wide kernel
/// ([`mvtc_kernel`]). The rule is what `runtime mv-bench` measured on an H200 (132 SMs) for the
/// 12B Q2_K-mix launches (µs, base → wide, same run unless said):
/// - NG = 1, Q2_K: wide (4 blocks per SM) except when the tiles fill between 2 and 3 blocks per
///   SM in one wave (attn_q+attn_k, 384 tiles: 5.8 → 6.6, two runs); ffn_gate+ffn_up (1920
///   tiles) 25.53 → 24.57, attn_output (240 tiles) 5.37 → 4.30.
/// - NG = 1, Q6_K: wide when the tiles take more than one wave at 3 blocks per SM (tied head,
///   16384 tiles: 368 → 336, two runs); smaller Q6_K matrices were not timed and keep the base
///   kernel.
/// - NG = 3, Q2_K and Q6_K: wide (3 blocks per SM) when the base kernel's 2 blocks per SM need
///   more than one wave (tiles > 2 · SMs): attn_q+attn_k 11.87 → 9.12, ffn_gate+ffn_up 45.17 →
///   40.16, tied Q6_K head 566.8 → 502.4; not at ≤ 2 · SMs (attn_output, 240 tiles: 6.7 → 8.2,
///   two runs). (At two int8 digits, [`tc_digits`], these formats take at most two groups.)
/// - Q3_K (attn_v, ffn_down: 128 and 240 tiles) and every other format: never (Q3_K at NG = 1:
///   ffn_down 20.2 → 20.6, at NG = 3: 26.3 → 45.6; the Q4_K 12B bench with every launch wide:
///   151.3 → 148.7 tok/s at batch 1, 828 → 704 at batch 8).
/// - NG = 2 has no wide kernel: one at 4 blocks per SM timed faster alone (attn_output 6.49 →
///   5.33, ffn_gate+ffn_up 31.01 → 29.93 at n = 4) but slower in the 12B bench (batch 4 720.5 →
///   712.6 tok/s, verify of K = 4 drafts 1.153 → 1.165 decode steps).
///
/// Re-measured on an H100 (2026-12-07, `runtime mv-bench` and `bench`, one binary, two rounds,
/// `GEMMA4_TC_WIDE=0` / `1` against this rule, every output hash the same): the rule still wins
/// the decode (batch 1 / 8: rule 310.6 / 1840.5 and 309.7 / 1832.7 tok/s, never wide 297.8 /
/// 1700.0 and 297.5 / 1700.1, always wide 309.1 / 1755.9 and 308.7 / 1754.3). One launch went
/// the other way alone: the three-matrix attn_q+attn_k+attn_v (`mvtcx`, 512 tiles) at n = 8,
/// 12.62 / 12.59 µs wide against 11.74 / 11.71 base — a candidate for a base-kernel exception,
/// not yet timed in the decode (no GPU time was left), where an earlier cap of the same launch
/// to 2 blocks per SM, faster alone, lost (`runtime::forward` `spread_cap`). The exception is
/// the opt-in `GEMMA4_TCX_BASE3=1` (`runtime::forward::tcx_kernel`; still untimed, 2026-12-08).
pub fn mvtc_wide(fmt: &str, nc: usize, tiles: usize, sms: usize) -> bool {
    wide_rule(fmt, nc, tiles, sms, tc_digits())
}

/// [`mvtc_wide`] at `digits` int8 digits.
fn wide_rule(fmt: &str, nc: usize, tiles: usize, sms: usize, digits: usize) -> bool {
    match col_groups(fmt, nc, digits) {
        1 => {
            (fmt == "q2_k" && !(tiles > 2 * sms && tiles <= 3 * sms))
                || (fmt == "q6_k" && tiles > 3 * sms)
        }
        3 => (fmt == "q2_k" || fmt == "q6_k") && tiles > 2 * sms,
        _ => false,
    }
}

/// Largest `head_dim` the `attention*_f32` kernels take: a block of 128 threads holds up to 4
/// output dims per thread (`attention.cu`).
pub const ATTENTION_MAX_HEAD_DIM: usize = 512;

/// The `attention.cu` kernel for head dim `d`: `attention_d256_f32` and `attention_d512_f32`
/// (the head dim a compile-time constant: the same sums, fewer instructions) for Gemma-4's
/// sliding and full head dims, `attention_f32` for any other `d` (all take the same arguments).
pub fn attention_kernel(d: usize) -> &'static str {
    match d {
        256 => "attention_d256_f32",
        512 => "attention_d512_f32",
        _ => "attention_f32",
    }
}

/// The `attention.cu` kernel for head dim `d` that serves `QH = 2` query heads of one KV head
/// per block (`attention_d256_h2_f32` / `attention_d512_h2_f32`: each key and value row loaded
/// once for both heads; the same bits as [`attention_kernel`]'s), or `None` where there is none
/// (other head dims). Launch: grid x = nh / 2 (`(nh / nkv) % 2 == 0`), dynamic shared memory
/// twice [`attention_smem_bytes`].
pub fn attention_heads_kernel(d: usize) -> Option<&'static str> {
    match d {
        256 => Some("attention_d256_h2_f32"),
        512 => Some("attention_d512_h2_f32"),
        _ => None,
    }
}

/// Query heads per block of the [`attention_heads_kernel`] kernels.
pub const ATT_HEADS_PER_BLOCK: usize = 2;

/// Most key splits of one query row in `attention_f32` (flash-decoding; `attention.cu`).
pub const ATT_SPLIT_MAX: usize = 32;

/// Keys per split below which a row gets another split (`attention.cu` ATT_SPLIT_KEYS).
pub const ATT_SPLIT_KEYS: usize = 16;

/// Key splits of a query row that sees `n` keys: `min(ceil(n / 16), 32)` (at least 1), the
/// grid's z extent for a launch whose widest row sees `n` keys.
pub fn att_splits(n: usize) -> usize {
    n.div_ceil(ATT_SPLIT_KEYS).clamp(1, ATT_SPLIT_MAX)
}

/// Keys per split of a row that sees `n` keys: `ceil(n / att_splits(n))`.
pub fn att_chunk(n: usize) -> usize {
    n.max(1).div_ceil(att_splits(n))
}

/// The largest [`att_chunk`] of any row that sees at most `span` keys (what an `attention_f32`
/// launch's shared memory must hold): `max(min(span, 16), att_chunk(span))` — chunks never
/// exceed 16 keys below 32 splits, and grow with `n` above.
pub fn att_chunk_bound(span: usize) -> usize {
    span.clamp(1, ATT_SPLIT_KEYS).max(att_chunk(span))
}

/// Dynamic shared memory (bytes) of an `attention*_f32` launch whose widest query row sees `span`
/// keys: `(round_up(span, 4) + 4) · 4`. The padding covers the vector read ptxas makes of the
/// ≤ 3-score remainder of the output loop (see `attention.cu`); without it compute-sanitizer
/// memcheck reports an out-of-bounds shared read (values there are never used).
pub fn attention_smem_bytes(span: usize) -> u32 {
    ((span.div_ceil(4) * 4 + 4) * 4) as u32
}

/// Threads of a `topk_f32` block (`reduce.cu` TOPK_THREADS).
pub const TOPK_THREADS: u32 = 256;

/// Consecutive ids of one `topk_f32` slice: TOPK_THREADS × TOPK_PER_THREAD (8) (`reduce.cu`).
pub const TOPK_SLICE: usize = 2048;

/// Most blocks of one `topk_f32` row (`reduce.cu` TOPK_BLOCKS_MAX; the size of its partials).
pub const TOPK_BLOCKS_MAX: usize = 128;

/// Blocks of one row in a `topk_f32` launch over rows of `n` ids: one per slice of
/// [`TOPK_SLICE`] ids, at most [`TOPK_BLOCKS_MAX`] (a block then takes every nb-th slice), at
/// least 1.
pub fn topk_blocks(n: usize) -> usize {
    n.div_ceil(TOPK_SLICE).clamp(1, TOPK_BLOCKS_MAX)
}

/// The `reduce.cu` kernel that takes a top-`k` launch: `topk1_f32` (one-entry lists) for `k` = 1,
/// else `topk_f32` (lists of 16). Both take the same arguments, launch shape and layouts and
/// give the same result for `k` = 1.
pub fn topk_kernel(k: usize) -> &'static str {
    if k == 1 {
        "topk1_f32"
    } else {
        "topk_f32"
    }
}

/// The parameter sizes in bytes of every kernel (`.entry`) of a PTX module, by kernel name, in
/// order (PTX ISA "Kernel Function Parameters": `.param .<type> [.ptr …] [.align N] name[[N]]`;
/// `.b8`/`.u8`/`.s8` 1 byte … `.b64`/`.u64`/`.s64`/`.f64` 8, times an array length). A
/// parameter whose type it cannot read counts 0 bytes (so it matches no host argument). Every
/// compiled module's lists are kept for [`kernel_param_sizes`].
pub fn ptx_param_sizes(ptx: &str) -> std::collections::HashMap<String, Vec<usize>> {
    let mut out = std::collections::HashMap::new();
    for (i, _) in ptx.match_indices(".entry ") {
        let rest = &ptx[i + ".entry ".len()..];
        let Some(open) = rest.find('(') else { continue };
        let Some(close) = rest[open..].find(')') else {
            continue;
        };
        let name = rest[..open].trim().to_string();
        let list = &rest[open + 1..open + close];
        let sizes = list
            .split(',')
            .filter(|p| p.contains(".param"))
            .map(|p| {
                let bytes = p
                    .split_whitespace()
                    .find_map(|t| {
                        let bits = t.strip_prefix('.')?;
                        let (kind, n) = bits.split_at(1);
                        (["b", "u", "s", "f"].contains(&kind))
                            .then(|| n.parse::<usize>().ok())
                            .flatten()
                            .filter(|n| [8, 16, 32, 64].contains(n))
                            .map(|n| n / 8)
                    })
                    .unwrap_or(0);
                let count = p
                    .split_once('[')
                    .and_then(|(_, r)| r.split(']').next()?.trim().parse::<usize>().ok())
                    .unwrap_or(1);
                bytes * count
            })
            .collect();
        out.insert(name, sizes);
    }
    out
}

/// One kernel family: one `.cu` file, compiled as one NVRTC program / one CUDA module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `dequant.cu`: `dequant_<fmt>` for every format in [`FORMATS`].
    Dequant,
    /// `matvec.cu`: `matvec_<fmt>_<nc>` for every format and `nc` in 1..=8.
    Matvec,
    /// `norm.cu`: `rmsnorm_f32`.
    Norm,
    /// `rope.cu`: `rope_neox_f32`.
    Rope,
    /// `activation.cu`: `geglu_f32`, `softcap_f32`.
    Activation,
    /// `reduce.cu`: `argmax_f32`, `topk_f32`, `topk1_f32`, `sum_f32x4`, `fill_u32`, `spin_ns`.
    Reduce,
    /// `embed.cu`: `embed_<fmt>` (scaled embedding-row lookup) for every format.
    Embed,
    /// `attention.cu`: `attention_f32` (causal / sliding GQA attention over the KV cache), its
    /// entry points per head dim ([`attention_kernel`]) and per two query heads
    /// ([`attention_heads_kernel`]), and `attention_rows_f32` (explicit key range per query row:
    /// the MTP drafter). Every kernel of this family, and no other, is named `attention_*`.
    Attention,
    /// `layer.cu`: residual RMSNorm-add, scales, PLE/MoE helpers, KV store, row gather.
    Layer,
}

impl Family {
    /// Every family, in a fixed order.
    pub const ALL: [Family; 9] = [
        Family::Dequant,
        Family::Matvec,
        Family::Norm,
        Family::Rope,
        Family::Activation,
        Family::Reduce,
        Family::Embed,
        Family::Attention,
        Family::Layer,
    ];

    /// The `.cu` file name of this family (relative to the `kernels/` crate root).
    pub fn file(self) -> &'static str {
        match self {
            Family::Dequant => "dequant.cu",
            Family::Matvec => "matvec.cu",
            Family::Norm => "norm.cu",
            Family::Rope => "rope.cu",
            Family::Activation => "activation.cu",
            Family::Reduce => "reduce.cu",
            Family::Embed => "embed.cu",
            Family::Attention => "attention.cu",
            Family::Layer => "layer.cu",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Family::Dequant => include_str!("../dequant.cu"),
            Family::Matvec => include_str!("../matvec.cu"),
            Family::Norm => include_str!("../norm.cu"),
            Family::Rope => include_str!("../rope.cu"),
            Family::Activation => include_str!("../activation.cu"),
            Family::Reduce => include_str!("../reduce.cu"),
            Family::Embed => include_str!("../embed.cu"),
            Family::Attention => include_str!("../attention.cu"),
            Family::Layer => include_str!("../layer.cu"),
        }
    }

    /// The full NVRTC program text: `common.cuh`, then `quant.cuh` for block-reading families,
    /// then the family's `.cu` file (each read from [`SOURCE_DIR_ENV`] when that is set).
    pub fn source(self) -> String {
        let mut s = common_prelude();
        if self.reads_blocks() {
            s.push_str(&override_or("quant.cuh", QUANT));
        }
        s.push_str(&override_or(self.file(), self.body()));
        s
    }

    /// Whether the family decodes GGUF blocks (gets `quant.cuh`; can be compiled per format).
    pub fn reads_blocks(self) -> bool {
        matches!(self, Family::Dequant | Family::Matvec | Family::Embed)
    }

    /// The NVRTC program text of a block-reading family restricted to one format (`fmt` an
    /// entry of [`FORMATS`]): `FORMAT_FILTER` plus a one-entry `FOR_EACH_FORMAT` before
    /// `quant.cuh`, so only that format's kernels are instantiated (much shorter compile).
    /// `None` for an unknown format or a family that does not read blocks.
    pub fn source_for_format(self, fmt: &str) -> Option<String> {
        let i = FORMATS.iter().position(|f| *f == fmt)?;
        if !self.reads_blocks() {
            return None;
        }
        let mut s = common_prelude();
        s.push_str(&format!(
            "#define FORMAT_FILTER\n#define MODULE_FMT {0}\n#define FOR_EACH_FORMAT(X) X({fmt}, {0})\n",
            FORMAT_STRUCTS[i]
        ));
        s.push_str(&override_or("quant.cuh", QUANT));
        s.push_str(&override_or(self.file(), self.body()));
        Some(s)
    }

    /// Every `extern "C"` kernel this family defines (used by tests to check the PTX).
    pub fn kernel_names(self) -> Vec<String> {
        match self {
            Family::Dequant => FORMATS.iter().map(|f| dequant_kernel(f)).collect(),
            Family::Matvec => FORMATS
                .iter()
                .flat_map(|f| {
                    (1..=MATVEC_MAX_COLS)
                        .map(move |nc| matvec_kernel(f, nc))
                        .chain(std::iter::once(format!("matvec_ids_{f}")))
                        .chain((1..=TC_MAX_GROUPS).map(move |g| format!("mvtc_{f}_{g}")))
                        .chain([1, 3].map(|g| format!("mvtc_{f}_{g}w")))
                })
                .chain(TC_THIRD.iter().flat_map(|(f, g)| {
                    [(1, false), (2, false), (3, false), (1, true), (3, true)]
                        .map(|(ng, w)| format!("mvtcx_{f}_{g}_{}", tc_suffix(ng, w)))
                }))
                .chain(std::iter::once("mvtc_prep".to_string()))
                .collect(),
            Family::Embed => FORMATS.iter().map(|f| format!("embed_{f}")).collect(),
            Family::Attention => vec![
                "attention_f32".into(),
                "attention_d256_f32".into(),
                "attention_d512_f32".into(),
                "attention_d256_h2_f32".into(),
                "attention_d512_h2_f32".into(),
                "attention_rows_f32".into(),
            ],
            Family::Layer => [
                "rmsnorm_add_f32",
                "add_norm_prep_f32",
                "geglu_prep_f32",
                "scale_f32",
                "add_scale_f32",
                "gelu_mul_ple_f32",
                "geglu_split_f32",
                "moe_route_f32",
                "moe_combine_f32",
                "qkv_post_f32",
                "gather_rows_f32",
            ]
            .map(String::from)
            .to_vec(),
            Family::Norm => vec!["rmsnorm_f32".into()],
            Family::Rope => vec!["rope_neox_f32".into()],
            Family::Activation => vec!["geglu_f32".into(), "softcap_f32".into()],
            Family::Reduce => vec![
                "argmax_f32".into(),
                "topk_f32".into(),
                "topk1_f32".into(),
                "sum_f32x4".into(),
                "fill_u32".into(),
                "spin_ns".into(),
            ],
        }
    }
}

/// Kernel name of the dequantizer for format suffix `fmt` (an entry of [`FORMATS`]).
pub fn dequant_kernel(fmt: &str) -> String {
    format!("dequant_{fmt}")
}

/// Kernel name of the fused dequantize-matvec for format `fmt` and `nc` columns (1..=8).
pub fn matvec_kernel(fmt: &str, nc: usize) -> String {
    format!("matvec_{fmt}_{nc}")
}

/// Errors of this crate. Each names the family or kernel involved.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// `libnvrtc` could not be opened (cudarc would panic); the message lists what was tried.
    #[error("NVRTC unavailable: {0}")]
    NvrtcUnavailable(String),
    /// NVRTC rejected a family's source; `log` is the NVRTC program log.
    #[error("NVRTC compile of {file} for {arch} failed: {log}")]
    Compile {
        /// The family's `.cu` file.
        file: &'static str,
        /// The `--gpu-architecture` value.
        arch: String,
        /// The NVRTC log (or error text).
        log: String,
    },
    /// A CUDA driver call failed while loading a module or function.
    #[error("CUDA driver error loading {what}: {source}")]
    Driver {
        /// The module or kernel being loaded.
        what: String,
        /// The driver error.
        #[source]
        source: cudarc::driver::DriverError,
    },
}

/// Tries to open a shared library under every name cudarc would try (`lib_name` as cudarc
/// spells it, e.g. `"nvrtc"`, `"cuda"`) and checks that the first one that opens (the one
/// cudarc would load) exports `symbol`. Returns the name that opened, or a message: the names
/// tried, or the library that lacks the symbol (a stub, on which cudarc would panic).
fn probe_library(lib_name: &str, symbol: &str) -> Result<String, String> {
    probe_candidates(lib_name, &cudarc::get_lib_name_candidates(lib_name), symbol)
}

/// [`probe_library`] over explicit `candidates` (names or paths), in order.
#[allow(unsafe_code)]
fn probe_candidates(lib_name: &str, candidates: &[String], symbol: &str) -> Result<String, String> {
    for c in candidates {
        // SAFETY: opening a CUDA library runs only its ELF initialisers, which have no
        // preconditions; the handle is dropped at the end of this block (cudarc opens its own).
        let Ok(lib) = (unsafe { libloading::Library::new(c) }) else {
            continue;
        };
        // SAFETY: only the symbol's presence is checked; the pointer is never called or kept.
        let found = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }.is_ok();
        if !found {
            // A stub or foreign library of that name: cudarc would panic on the missing symbol.
            return Err(format!(
                "{c} opened but has no {symbol}: not a usable lib{lib_name}"
            ));
        }
        return Ok(c.clone());
    }
    Err(format!(
        "could not open lib{lib_name} (tried {}); set LD_LIBRARY_PATH",
        tried_names(candidates)
    ))
}

/// The names tried, for a message: each once, in order (cudarc's list repeats some); beyond
/// [`TRIED_SHOWN`] names the first ones, `…`, the last one and the count.
fn tried_names(candidates: &[String]) -> String {
    let mut unique: Vec<&str> = Vec::new();
    for c in candidates {
        if !unique.contains(&c.as_str()) {
            unique.push(c);
        }
    }
    if unique.len() <= TRIED_SHOWN {
        return unique.join(", ");
    }
    format!(
        "{}, …, {}: {} names",
        unique[..TRIED_SHOWN - 1].join(", "),
        unique[unique.len() - 1],
        unique.len()
    )
}

/// How many library names a "could not open" message lists before abbreviating.
const TRIED_SHOWN: usize = 3;

/// Whether `libnvrtc` can be opened; `Err` carries a printable reason. Call before any NVRTC
/// use, because cudarc panics when the library is missing.
pub fn nvrtc_available() -> Result<String, String> {
    probe_library("nvrtc", "nvrtcCompileProgram")
}

/// Whether the CUDA driver library (`libcuda`) can be opened; `Err` carries a printable
/// reason. Opening it does not mean a GPU is present (that is `CudaContext::new`'s job).
pub fn cuda_driver_available() -> Result<String, String> {
    probe_library("cuda", "cuInit")
}

/// NVRTC `--gpu-architecture` value for a compute capability, e.g. `(9, 0)` → `compute_90`
/// (PTX for that virtual architecture; the driver JITs it for the device).
pub fn arch_option(cc: (i32, i32)) -> String {
    format!("compute_{}{}", cc.0, cc.1)
}

/// PTX text per (family, architecture option).
type PtxMap = HashMap<(Family, String, String), Arc<str>>;

/// Process-wide PTX cache, keyed by family and architecture option.
/// Parameter sizes (bytes, in order) of every kernel of every PTX module this process compiled
/// ([`compile_ptx`], [`compile_ptx_format`]), by kernel name: filled from each new module's PTX
/// ([`ptx_param_sizes`]). A name in several modules (e.g. `mvtc_prep` in every per-format matvec
/// module) comes from the same source text there, so it has one list.
fn param_map() -> &'static Mutex<HashMap<String, Arc<[usize]>>> {
    static MAP: OnceLock<Mutex<HashMap<String, Arc<[usize]>>>> = OnceLock::new();
    MAP.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The parameter sizes in bytes, in order, of kernel `name` as compiled in this process (the
/// `.entry` of the PTX that every loaded module comes from: what the driver will take at
/// launch); `None` when no module compiled so far holds `name`. The runtime checks each
/// launch's argument list against it (`runtime::forward::check_params`).
pub fn kernel_param_sizes(name: &str) -> Option<Arc<[usize]>> {
    param_map()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .cloned()
}

fn ptx_cache() -> &'static Mutex<PtxMap> {
    static CACHE: OnceLock<Mutex<PtxMap>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles `family` with NVRTC for compute capability `cc` and returns the PTX text; cached
/// per process, so a second call is free. Probes `libnvrtc` first (never panics on a machine
/// without it).
///
/// Options: `--gpu-architecture=compute_XY`, `--fmad=true` (contracting an exact product with
/// one add rounds once, so dequantized weights stay bit-exact, spec §3.6), no fast-math,
/// `--ftz=false`, IEEE division and square root.
///
/// Errors: [`KernelError::NvrtcUnavailable`], [`KernelError::Compile`] with the NVRTC log.
pub fn compile_ptx(family: Family, cc: (i32, i32)) -> Result<Arc<str>, KernelError> {
    compile_keyed(family, None, cc)
}

/// [`compile_ptx`] of `family` restricted to format `fmt` ([`Family::source_for_format`]);
/// cached per process like the whole family.
///
/// Errors: as [`compile_ptx`]; [`KernelError::Compile`] for an unknown format.
pub fn compile_ptx_format(
    family: Family,
    fmt: &str,
    cc: (i32, i32),
) -> Result<Arc<str>, KernelError> {
    compile_keyed(family, Some(fmt), cc)
}

fn compile_keyed(
    family: Family,
    fmt: Option<&str>,
    cc: (i32, i32),
) -> Result<Arc<str>, KernelError> {
    let arch = arch_option(cc);
    let key = (family, fmt.unwrap_or("").to_string(), arch.clone());
    if let Some(p) = ptx_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return Ok(p.clone());
    }
    nvrtc_available().map_err(KernelError::NvrtcUnavailable)?;
    let opts = CompileOptions {
        ftz: Some(false),
        prec_sqrt: Some(true),
        prec_div: Some(true),
        fmad: Some(true),
        options: vec![format!("--gpu-architecture={arch}"), "-std=c++17".into()],
        name: Some(family.file().to_string()),
        ..Default::default()
    };
    let src = match fmt {
        None => family.source(),
        Some(f) => family
            .source_for_format(f)
            .ok_or_else(|| KernelError::Compile {
                file: family.file(),
                arch: arch.clone(),
                log: format!("no per-format source for format {f:?}"),
            })?,
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| {
        let log = match &e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        };
        KernelError::Compile {
            file: family.file(),
            arch: arch.clone(),
            log,
        }
    })?;
    let text: Arc<str> = Arc::from(ptx.to_src());
    param_map()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(
            ptx_param_sizes(&text)
                .into_iter()
                .map(|(k, v)| (k, Arc::from(v))),
        );
    ptx_cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, text.clone());
    Ok(text)
}

/// Loaded modules and functions for one CUDA context: each family is compiled (see
/// [`compile_ptx`]) and loaded on first use, then reused.
pub struct ModuleCache {
    ctx: Arc<CudaContext>,
    cc: (i32, i32),
    modules: Mutex<HashMap<Family, Arc<CudaModule>>>,
    functions: Mutex<HashMap<String, CudaFunction>>,
    format_modules: Mutex<HashMap<(Family, String), Arc<CudaModule>>>,
}

impl ModuleCache {
    /// A cache for `ctx`, targeting its device's compute capability.
    ///
    /// Errors: [`KernelError::Driver`] if the compute capability cannot be read.
    pub fn new(ctx: Arc<CudaContext>) -> Result<ModuleCache, KernelError> {
        let cc = ctx
            .compute_capability()
            .map_err(|source| KernelError::Driver {
                what: "compute capability".into(),
                source,
            })?;
        Ok(ModuleCache {
            ctx,
            cc,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            format_modules: Mutex::new(HashMap::new()),
        })
    }

    /// The device's compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The loaded module of `family` (compiled and loaded on first use).
    pub fn module(&self, family: Family) -> Result<Arc<CudaModule>, KernelError> {
        if let Some(m) = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&family)
        {
            return Ok(m.clone());
        }
        let ptx = compile_ptx(family, self.cc)?;
        let m = self
            .ctx
            .load_module(Ptx::from_src(ptx.to_string()))
            .map_err(|source| KernelError::Driver {
                what: family.file().into(),
                source,
            })?;
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(family, m.clone());
        Ok(m)
    }

    /// The kernel `name` of `family` (looked up once, then cached).
    pub fn function(&self, family: Family, name: &str) -> Result<CudaFunction, KernelError> {
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(f.clone());
        }
        let f = self
            .module(family)?
            .load_function(name)
            .map_err(|source| KernelError::Driver {
                what: format!("{}::{name}", family.file()),
                source,
            })?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// Kernel `name` from the per-format module of `family` for format `fmt`
    /// ([`compile_ptx_format`]): only that format is compiled, on first use.
    pub fn function_fmt(
        &self,
        family: Family,
        fmt: &str,
        name: &str,
    ) -> Result<CudaFunction, KernelError> {
        let key = format!("{fmt}/{name}");
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(f.clone());
        }
        let mkey = (family, fmt.to_string());
        let cached = self
            .format_modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&mkey)
            .cloned();
        let m = match cached {
            Some(m) => m,
            None => {
                let ptx = compile_ptx_format(family, fmt, self.cc)?;
                let m = self
                    .ctx
                    .load_module(Ptx::from_src(ptx.to_string()))
                    .map_err(|source| KernelError::Driver {
                        what: format!("{} ({fmt})", family.file()),
                        source,
                    })?;
                self.format_modules
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(mkey, m.clone());
                m
            }
        };
        let f = m
            .load_function(name)
            .map_err(|source| KernelError::Driver {
                what: format!("{}::{name}", family.file()),
                source,
            })?;
        self.functions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f.clone());
        Ok(f)
    }

    /// Compiles and loads every family now (so later launches have no compile latency).
    pub fn load_all(&self) -> Result<(), KernelError> {
        for f in Family::ALL {
            self.module(f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn xsf_offset_matches_the_cuda_define() {
        // The Rust constant and the CUDA #define are written separately; they must agree.
        for (name, v) in [
            ("TC_XSF_OFFSET", super::TC_XSF_OFFSET),
            ("TC_XD_OFFSET", super::TC_XD_OFFSET),
            ("TC_XF_OFFSET", super::TC_XF_OFFSET),
            ("TC_PREP_PIECES", super::TC_PREP_PIECES as usize),
            ("TC_PREP_DIGITS", super::TC_PREP_DIGITS as usize),
            ("TC_DIGITS", super::TC_DIGITS_DEFAULT),
        ] {
            let line = format!("#define {name} {v}");
            assert!(super::COMMON.contains(&line), "common.cuh lacks {line:?}");
        }
    }

    /// Gemma-4's head dims (256 sliding, 512 full; spec/gemma4-text.md §13.3) get their own
    /// entry points, every other head dim the generic kernel; each name the host may launch is
    /// one the Attention family lists (so the NVRTC compile test checks it is a PTX entry), and
    /// attention.cu declares each with the generic kernel's argument list.
    #[test]
    fn attention_kernel_names() {
        use super::{attention_kernel, Family};
        // the runtime picks the Attention family by the name's `attention_` prefix alone
        for f in Family::ALL {
            for n in f.kernel_names() {
                assert_eq!(
                    n.starts_with("attention_"),
                    f == Family::Attention,
                    "{n} of {f:?}"
                );
            }
        }
        let cases = [
            (256, "attention_d256_f32"),
            (512, "attention_d512_f32"),
            (32, "attention_f32"),
            (128, "attention_f32"),
            (320, "attention_f32"),
        ];
        let listed = Family::Attention.kernel_names();
        let src = include_str!("../attention.cu");
        for (d, want) in cases {
            assert_eq!(attention_kernel(d), want, "head dim {d}");
            assert!(listed.iter().any(|n| n == want), "{want} not in the family");
            let entry = format!(
                "ATT_ENTRY({want}, {}",
                if want == "attention_f32" { 0 } else { d }
            );
            assert!(src.contains(&entry), "attention.cu lacks {entry:?}");
        }
        // the two-heads-per-block kernels: d = 256 / 512 only, declared with QH = 2
        for (d, want) in [
            (256, Some("attention_d256_h2_f32")),
            (512, Some("attention_d512_h2_f32")),
            (128, None),
        ] {
            assert_eq!(super::attention_heads_kernel(d), want, "head dim {d}");
            if let Some(want) = want {
                assert!(listed.iter().any(|n| n == want), "{want} not in the family");
                let entry = format!(
                    "ATT_HEADS_ENTRY({want}, {d}, {})",
                    super::ATT_HEADS_PER_BLOCK
                );
                assert!(src.contains(&entry), "attention.cu lacks {entry:?}");
            }
        }
    }

    /// A library that opens but lacks the entry point cudarc needs (a stub `libcuda.so`) is
    /// refused by name instead of letting cudarc panic; one that exports it is accepted; a
    /// missing one lists the names tried. The stubs are real shared objects built with the
    /// system C compiler (the one cargo links with).
    #[test]
    fn library_probe_checks_the_symbol() {
        let dir = std::env::temp_dir().join(format!("kernels-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let build = |name: &str, body: &str| {
            let c = dir.join(format!("{name}.c"));
            std::fs::write(&c, body).unwrap();
            let so = dir.join(format!("{name}.so"));
            let st = std::process::Command::new("cc")
                .args(["-shared", "-fPIC", "-o"])
                .arg(&so)
                .arg(&c)
                .status()
                .expect("running cc");
            assert!(st.success(), "cc failed for {name}");
            so.display().to_string()
        };
        let stub = build("stub", "int not_cuda(void) { return 0; }\n");
        let good = build("good", "int cuInit(unsigned f) { return (int)f; }\n");
        let e =
            super::probe_candidates("cuda", &[stub.clone(), good.clone()], "cuInit").unwrap_err();
        assert!(e.contains(&stub) && e.contains("no cuInit"), "{e}");
        assert_eq!(
            super::probe_candidates("cuda", std::slice::from_ref(&good), "cuInit"),
            Ok(good)
        );
        let missing = dir.join("missing.so").display().to_string();
        let e =
            super::probe_candidates("cuda", std::slice::from_ref(&missing), "cuInit").unwrap_err();
        assert_eq!(
            e,
            format!("could not open libcuda (tried {missing}); set LD_LIBRARY_PATH")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A missing library's message names each candidate once and abbreviates a long list
    /// (cudarc's 17 libcuda names, three of them the same, made a 350-character line).
    #[test]
    fn tried_names_are_deduplicated_and_abbreviated() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            super::tried_names(&names(&["a.so", "b.so", "a.so"])),
            "a.so, b.so"
        );
        assert_eq!(
            super::tried_names(&names(&["a.so", "b.so", "b.so", "c.so", "d.so", "a.so"])),
            "a.so, b.so, …, d.so: 4 names"
        );
        let real = cudarc::get_lib_name_candidates("cuda");
        let e = super::probe_candidates(
            "cuda",
            &real
                .iter()
                .map(|c| format!("/nonexistent/{c}"))
                .collect::<Vec<_>>(),
            "cuInit",
        )
        .unwrap_err();
        assert!(e.len() < 160, "{} characters: {e}", e.len());
        assert_eq!(e.matches("/nonexistent/libcuda.so,").count(), 1, "{e}");
    }

    #[test]
    fn prep_kinds_follow_the_readers_formats() {
        // Hand-derived from tc_int8_digits (Q2_K, Q3_K and Q6_K read digits): Q2_K q/k with a
        // Q3_K v (the 12B mix's attention input) digits only; Q6_K alone (the tied head) digits;
        // Q4_K q/k with a Q6_K v both; Q4_K/Q5_K pieces.
        use super::{tc_prep_kinds, TC_PREP_DIGITS, TC_PREP_PIECES};
        assert_eq!(tc_prep_kinds(["q2_k", "q2_k", "q3_k"]), TC_PREP_DIGITS);
        assert_eq!(tc_prep_kinds(["q6_k"]), TC_PREP_DIGITS);
        assert_eq!(tc_prep_kinds(["q4_k", "q4_k", "q6_k"]), 3);
        assert_eq!(tc_prep_kinds(["q4_k", "q5_k"]), TC_PREP_PIECES);
        assert_eq!(tc_prep_kinds([]), 0);
    }

    #[test]
    fn norm_block_sizes() {
        // Hand-derived: n = 3840 → ⌈3840/4⌉ = 960 threads (a multiple of 32); n = 256 → 64;
        // n = 20 → 5 → one warp; n = 16384 is the largest fused width (1024 threads × 4 quads).
        assert_eq!(super::norm_threads(3840), 960);
        assert_eq!(super::norm_threads(256), 64);
        assert_eq!(super::norm_threads(20), 32);
        assert_eq!(super::norm_threads(100_000), 1024);
        assert_eq!(super::norm_prep_threads(3840), Some(960));
        assert_eq!(super::norm_prep_threads(16384), Some(1024));
        assert_eq!(super::norm_prep_threads(16400), None);
        assert_eq!(super::norm_prep_threads(40), None);
        assert!(super::tc_supported("q2_k", 3840, (9, 0)));
        assert!(!super::tc_supported("q2_k", 3840 + 32, (9, 0)));
        assert!(!super::tc_supported("q8_0", 3840, (9, 0)));
        assert!(!super::tc_supported("q4_k", 3840, (7, 5)));
    }

    #[test]
    fn attention_splits() {
        // By hand: ceil(n / 16) splits up to 32, then ceil(n / 32) keys each.
        assert_eq!((super::att_splits(1), super::att_chunk(1)), (1, 1));
        assert_eq!((super::att_splits(16), super::att_chunk(16)), (1, 16));
        assert_eq!((super::att_splits(17), super::att_chunk(17)), (2, 9));
        assert_eq!((super::att_splits(100), super::att_chunk(100)), (7, 15));
        assert_eq!((super::att_splits(512), super::att_chunk(512)), (32, 16));
        assert_eq!((super::att_splits(1024), super::att_chunk(1024)), (32, 32));
        assert_eq!(
            (super::att_splits(12_000), super::att_chunk(12_000)),
            (32, 375)
        );
        // The CUDA #defines agree with the Rust constants.
        for line in [
            format!("#define ATT_SPLIT_KEYS {}", super::ATT_SPLIT_KEYS),
            format!("#define ATT_SPLIT_MAX {}", super::ATT_SPLIT_MAX),
            format!("#define ATT_MAX_D {}", super::ATTENTION_MAX_HEAD_DIM),
        ] {
            assert!(
                super::Family::Attention.body().contains(&line),
                "attention.cu lacks {line:?}"
            );
        }
        // The bound covers every shorter row (brute force: running maximum over n ≤ span).
        let mut widest = 0;
        for span in 1..13_000 {
            widest = widest.max(super::att_chunk(span));
            assert_eq!(super::att_chunk_bound(span), widest, "span {span}");
        }
    }

    #[test]
    fn softcap_fused_formats_match_matvec_cu() {
        // tc_softcap_fused must name exactly the formats with a `TcCapFused<Fmt…>` = 1
        // specialization in matvec.cu: a format the host fuses for but whose kernel ignores `cap`
        // would leave the logits uncapped, and the reverse would cap them twice.
        let body = super::Family::Matvec.body();
        for (f, st) in super::FORMATS.iter().zip(super::FORMAT_STRUCTS) {
            let spec = format!("template <> struct TcCapFused<{st}> {{ enum {{ V = 1 }}; }};");
            assert_eq!(super::tc_softcap_fused(f), body.contains(&spec), "{f}");
        }
        assert!(super::tc_softcap_fused("q6_k"));
        assert!(!super::tc_softcap_fused("q2_k"));
    }

    /// Hand-written PTX in NVRTC's form (the `fill_u32` entry of reduce.cu's PTX as NVRTC 13.0
    /// writes it, and a made-up entry with a pointer annotation and a by-value 16-byte array):
    /// sizes 8, 8, 4 and 8, 16, 2.
    #[test]
    fn ptx_param_sizes_reads_entries() {
        let ptx = ".visible .entry fill_u32(\n\t.param .u64 fill_u32_param_0,\n\t.param .u64 \
                   fill_u32_param_1,\n\t.param .u32 fill_u32_param_2\n)\n{\n}\n\
                   .entry k2(.param .u64 .ptr .global .align 16 k2_param_0, .param .align 8 .b8 \
                   k2_param_1[16], .param .f16 k2_param_2)\n{\n}\n";
        let m = super::ptx_param_sizes(ptx);
        assert_eq!(m.len(), 2);
        assert_eq!(m["fill_u32"], vec![8, 8, 4]);
        assert_eq!(m["k2"], vec![8, 16, 2]);
    }

    /// k = 1 takes the one-entry-list kernel, every other k the 16-entry one; both are kernels
    /// of the reduce family (so compiled and loaded with it) and defined in reduce.cu.
    #[test]
    fn topk_kernel_by_k() {
        assert_eq!(super::topk_kernel(1), "topk1_f32");
        for k in [2, 4, 16] {
            assert_eq!(super::topk_kernel(k), "topk_f32");
        }
        let names = super::Family::Reduce.kernel_names();
        let body = include_str!("../reduce.cu");
        for k in ["topk_f32", "topk1_f32"] {
            assert!(names.iter().any(|n| n == k), "{k} not in Family::Reduce");
            assert!(
                body.contains(&format!("\n    {k}(")),
                "reduce.cu does not define {k}"
            );
        }
    }

    #[test]
    fn topk_blocks_and_defines() {
        // By hand: one block per 2048 ids, 1 ≤ blocks ≤ 128 (262144 = 128 · 2048).
        assert_eq!(super::topk_blocks(0), 1);
        assert_eq!(super::topk_blocks(1), 1);
        assert_eq!(super::topk_blocks(2048), 1);
        assert_eq!(super::topk_blocks(2049), 2);
        assert_eq!(super::topk_blocks(262_144), 128);
        assert_eq!(super::topk_blocks(262_145), 128);
        let body = super::Family::Reduce.body();
        for line in [
            format!("#define TOPK_THREADS {}", super::TOPK_THREADS),
            "#define TOPK_PER_THREAD 8".to_string(),
            format!("#define TOPK_BLOCKS_MAX {}", super::TOPK_BLOCKS_MAX),
        ] {
            assert!(body.contains(&line), "reduce.cu lacks {line:?}");
        }
        assert_eq!(super::TOPK_SLICE, super::TOPK_THREADS as usize * 8);
    }

    #[test]
    fn tc_column_groups() {
        use super::{mvtc_kernel, mvtcx_kernel, tc_col_groups, tc_cols_for};
        // Hand-derived, 8 mma columns per group: ceil(columns per input · n / 8).
        let groups =
            |cols: usize| -> Vec<usize> { (1..=8).map(|n| (cols * n).div_ceil(8)).collect() };
        // Three columns (bf16 pieces of every format, or three int8 digits): 1 input = 3
        // columns → 1 group; 2 → 6 → 1; 3 → 9 → 2; 5 → 15 → 2; 6 → 18 → 3; 8 → 24 → 3.
        assert_eq!(groups(tc_cols_for("q4_k", 2)), [1, 1, 2, 2, 2, 3, 3, 3]);
        assert_eq!(groups(tc_cols_for("q2_k", 3)), [1, 1, 2, 2, 2, 3, 3, 3]);
        // Two int8 digits (Q2_K, Q3_K, Q6_K): 1 → 2 → 1; 4 → 8 → 1; 5 → 10 → 2; 8 → 16 → 2.
        assert_eq!(groups(tc_cols_for("q6_k", 2)), [1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(tc_cols_for("q4_0", 2), 3);
        // The names at this process's digit count (tests run without GEMMA4_TC_DIGITS: 3).
        assert_eq!(super::tc_digits(), super::TC_DIGITS_DEFAULT);
        assert_eq!(
            super::TC_DIGITS_DEFAULT,
            3,
            "the names below are derived for three digits"
        );
        assert_eq!(
            (1..=8)
                .map(|n| tc_col_groups("q2_k", n))
                .collect::<Vec<_>>(),
            groups(3)
        );
        assert_eq!(mvtc_kernel("q2_k", 1, false), "mvtc_q2_k_1");
        assert_eq!(mvtc_kernel("q6_k", 4, false), "mvtc_q6_k_2");
        assert_eq!(mvtc_kernel("q3_k", 8, false), "mvtc_q3_k_3");
        // Wide variants exist for NG = 1 and 3 only.
        assert_eq!(mvtc_kernel("q2_k", 2, true), "mvtc_q2_k_1w");
        assert_eq!(mvtc_kernel("q6_k", 4, true), "mvtc_q6_k_2");
        assert_eq!(mvtc_kernel("q6_k", 8, true), "mvtc_q6_k_3w");
        assert_eq!(mvtcx_kernel("q4_k", "q6_k", 3, false), "mvtcx_q4_k_q6_k_2");
        assert_eq!(mvtcx_kernel("q2_k", "q3_k", 8, true), "mvtcx_q2_k_q3_k_3w");
    }

    #[test]
    fn kernel_names_at_two_digits() {
        use super::{mvtc_name, mvtcx_name, wide_rule};
        // Hand-derived: two columns per input for Q2_K/Q3_K/Q6_K, three for Q4_K; 8 a group.
        assert_eq!(mvtc_name("q6_k", 4, false, 2), "mvtc_q6_k_1"); // 8 columns
        assert_eq!(mvtc_name("q6_k", 5, false, 2), "mvtc_q6_k_2"); // 10
        assert_eq!(mvtc_name("q2_k", 8, true, 2), "mvtc_q2_k_2"); // 16, no wide NG = 2
        assert_eq!(mvtc_name("q4_k", 8, true, 2), "mvtc_q4_k_3w"); // 24: bf16 pieces, as at 3

        // A paired launch takes the larger count: Q6_K's 6 digit columns (1 group) beside
        // Q4_K's 9 piece columns (2 groups) at 3 inputs → 2; 1 input: 2 and 3 columns → 1.
        assert_eq!(mvtcx_name("q4_k", "q6_k", 3, false, 2), "mvtcx_q4_k_q6_k_2");
        assert_eq!(mvtcx_name("q4_k", "q6_k", 1, false, 2), "mvtcx_q4_k_q6_k_1");
        assert_eq!(mvtcx_name("q2_k", "q3_k", 4, true, 2), "mvtcx_q2_k_q3_k_1w");
        assert_eq!(mvtcx_name("q2_k", "q3_k", 8, true, 2), "mvtcx_q2_k_q3_k_2");
        // The wide rule follows the group count: Q2_K at 4 inputs is NG = 1 (wide outside the
        // 265–396-tile band on 132 SMs), at 8 NG = 2 (never wide); at three digits 4 inputs
        // are NG = 2 and 8 are NG = 3.
        assert!(wide_rule("q2_k", 4, 1920, 132, 2) && !wide_rule("q2_k", 4, 1920, 132, 3));
        assert!(!wide_rule("q2_k", 4, 384, 132, 2));
        assert!(!wide_rule("q2_k", 8, 1920, 132, 2) && wide_rule("q2_k", 8, 1920, 132, 3));
        assert!(!wide_rule("q6_k", 8, 16384, 132, 2) && wide_rule("q6_k", 4, 16384, 132, 2));
    }

    #[test]
    fn old_kernel_sources_are_refused_at_two_digits() {
        use super::digits_line;
        let old = "// a common.cuh from before the digit count\n";
        // The embedded common.cuh takes either count; one without TC_DIGITS only the default.
        assert_eq!(digits_line(super::COMMON, 2), "#define TC_DIGITS 2\n");
        assert_eq!(digits_line(super::COMMON, 3), "#define TC_DIGITS 3\n");
        assert_eq!(digits_line(old, 3), "#define TC_DIGITS 3\n");
        assert_eq!(
            digits_line(old, 2),
            "#error \"GEMMA4_TC_DIGITS=2 needs a common.cuh with TC_DIGITS; the one from \
             GEMMA4_KERNEL_SRC has none\"\n"
        );
    }

    #[test]
    fn digits_setting_takes_2_or_3_and_refuses_the_rest() {
        use super::digits_setting as d;
        use std::env::VarError;
        assert_eq!(d(Err(VarError::NotPresent)), Ok(3));
        assert_eq!(d(Ok("2".into())), Ok(2));
        assert_eq!(d(Ok("3".into())), Ok(3));
        for bad in ["4", "", " 2", "02", "two", "2\n"] {
            assert_eq!(
                d(Ok(bad.into())),
                Err(format!("GEMMA4_TC_DIGITS={bad:?}: must be 2 or 3")),
                "{bad:?}"
            );
        }
        let e = d(Err(VarError::NotUnicode("\u{fffd}".into()))).unwrap_err();
        assert!(e.starts_with("GEMMA4_TC_DIGITS: "), "{e}");
    }

    /// `GEMMA4_KERNEL_SRC`'s folder: empty, missing and a file are refused naming the value; a
    /// folder holding one of the sources as a folder or as bytes that are not UTF-8 is refused
    /// naming that file (they fell back to the embedded source without a word); a folder
    /// holding some of the sources, or none, passes.
    #[test]
    fn the_kernel_source_folder_is_checked() {
        use super::source_dir_check as c;
        let d = std::env::temp_dir().join(format!("kernels-src-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let q = |p: &std::path::Path| format!("{:?}", p.display().to_string());
        assert_eq!(
            c(std::path::Path::new("")),
            Err(
                "GEMMA4_KERNEL_SRC=\"\": is empty (unset it for the built-in kernel sources, or \
                 name a folder)"
                    .into()
            )
        );
        let missing = d.join("nope");
        assert_eq!(
            c(&missing),
            Err(format!("GEMMA4_KERNEL_SRC={}: no such folder", q(&missing)))
        );
        assert_eq!(c(&d), Ok(()));
        std::fs::write(d.join("norm.cu"), "// a variant\n").unwrap();
        assert_eq!(c(&d), Ok(()));
        let file = d.join("norm.cu");
        assert_eq!(
            c(&file),
            Err(format!("GEMMA4_KERNEL_SRC={}: is not a folder", q(&file)))
        );
        std::fs::create_dir(d.join("quant.cuh")).unwrap();
        assert_eq!(
            c(&d),
            Err(format!(
                "GEMMA4_KERNEL_SRC={}: quant.cuh: is not a regular file",
                q(&d)
            ))
        );
        std::fs::remove_dir(d.join("quant.cuh")).unwrap();
        std::fs::write(d.join("matvec.cu"), [0xffu8, 0xfe]).unwrap();
        let e = c(&d).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "GEMMA4_KERNEL_SRC={}: matvec.cu: cannot be read as UTF-8 text: ",
                q(&d)
            )),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn wnst_setting_is_checked() {
        use super::wnst_setting as w;
        use std::env::VarError;
        assert_eq!(w(Err(VarError::NotPresent)), Ok(0));
        for (v, n) in [("0", 0), ("2", 2), ("4", 4), ("8", 8)] {
            assert_eq!(w(Ok(v.into())), Ok(n), "{v}");
        }
        for bad in ["1", "9", "", "-2", "four", " 4"] {
            assert_eq!(
                w(Ok(bad.into())),
                Err(format!("GEMMA4_TC_WNST={bad:?}: must be 0 or 2 … 8")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn dyn_smem_of_the_per_warp_kernels() {
        use super::dyn_smem as d;
        // By hand, Q3_K (110-byte super-blocks): chunks to cover 110 bytes from an offset up to
        // 15 = ceil(125 / 16) = 8, pitch 9 (odd), so one warp stage is 16 rows × 9 × 16 B =
        // 2304 B and 8 warps × 4 stages = 73728 B; the epilogue's sums (8 warps × 4 × NG × 32
        // floats = 4096·NG B) are smaller at every NG.
        assert_eq!(d("q3_k", 1, 4, 3), 73728);
        assert_eq!(d("q3_k", 8, 4, 3), 73728);
        assert_eq!(d("q3_k", 1, 2, 3), 36864); // the static kernels' stage bytes (2 stages)
                                               // static stages: no dynamic memory; other formats stage per block
        assert_eq!(d("q3_k", 1, 0, 3), 0);
        assert_eq!(d("q2_k", 1, 4, 3), 0);
        assert_eq!(d("q6_k", 8, 6, 3), 0);
    }

    #[test]
    fn digit_bits() {
        // 8 bits per digit, less the top digit's 2 spare bits (|D0| ≤ 65): 22 and 14.
        assert_eq!((super::tc_digit_bits(3), super::tc_digit_bits(2)), (22, 14));
    }

    #[test]
    fn mvtc_wide_rule() {
        // The 12B launches on an H200's 132 SMs, as listed in the rule's doc (by hand: 2·132 =
        // 264 and 3·132 = 396 tiles bound the one-wave band).
        let w = |fmt, nc, tiles| super::mvtc_wide(fmt, nc, tiles, 132);
        assert!(w("q2_k", 1, 1920)); // ffn_gate+ffn_up
        assert!(w("q2_k", 1, 240)); // attn_output
        assert!(!w("q2_k", 1, 384)); // attn_q+attn_k: 265..=396 keeps 3 blocks per SM
        assert!(w("q2_k", 1, 397));
        // (at three digits, the tests' count: 3–5 inputs are NG = 2)
        assert!(!w("q2_k", 4, 1920)); // NG = 2 has no wide kernel
        assert!(w("q2_k", 8, 384) && w("q2_k", 6, 1920));
        assert!(!w("q2_k", 8, 240) && !w("q2_k", 8, 264) && w("q2_k", 8, 265));
        assert!(w("q6_k", 8, 16384) && w("q6_k", 1, 16384) && !w("q6_k", 1, 396));
        assert!(!w("q3_k", 1, 1920) && !w("q3_k", 8, 1920) && !w("q4_k", 8, 1920));
    }
}
