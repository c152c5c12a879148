// common.cuh — shared definitions prepended to every kernel family (NVRTC, no system headers).
// Spec: spec/gguf-gemma4.md §3 (block formats), §3.6 (exactness and f32 rounding).
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

#define WARP 32

// Programmatic dependent launch (sm_90+; no-ops before, and when the kernel was launched without
// a programmatic dependency). The runtime launches the forward's kernels with programmatic stream
// serialization, so a kernel may start while the previous one is still running: every kernel
// calls griddep_wait() before it touches memory the previous kernels write or read (it returns
// once they have completed and their writes are visible), and griddep_launch() to let the next
// kernel start early (it waits in turn). GRIDDEP_ENTRY() does both, first thing in a kernel;
// the tensor-core matvecs (matvec.cu mvtc_body) wait after queueing their first weight copies
// and let the next kernel launch only after their main loop.
static __device__ __forceinline__ void griddep_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
static __device__ __forceinline__ void griddep_launch() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// Measured and not kept (H100, 2026-12-06, 12B Q2_K-mix `runtime bench --decode 64`, one binary,
// two alternating rounds): GRIDDEP_ENTRY letting the next kernel launch before waiting (launch,
// then wait: still safe, the next kernel's wait covers this one's completion), so that a matvec
// after a small kernel stages its first weights during that kernel's whole run: batch 1
// 303.6 / 303.3 → 304.9 / 305.5 tok/s, batch 8 1761.5 / 1755.8 → 1740.7 / 1740.0.
#define GRIDDEP_ENTRY() \
    do {                \
        griddep_wait();   \
        griddep_launch(); \
    } while (0)

// binary16 bits -> f32, exact (subnormals included); PTX cvt.f32.f16.
static __device__ __forceinline__ float f16_to_f32(uint32_t h) {
    float r;
    unsigned short hs = (unsigned short)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(hs));
    return r;
}

// bfloat16 bits -> f32, exact (upper half of a binary32).
static __device__ __forceinline__ float bf16_to_f32(uint32_t h) {
    return __uint_as_float((h & 0xffffu) << 16);
}

// Unaligned-safe loads. `a2`: pointer is 2-byte aligned; `a4`: 4-byte aligned.
static __device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
    return (uint32_t)__ldg((const unsigned short*)p);
}
static __device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
    return ld_u16(p) | (ld_u16(p + 2) << 16);
}
static __device__ __forceinline__ uint32_t ld_u32_a4(const uint8_t* p) {
    return __ldg((const unsigned int*)p);
}
// n words (4 bytes each) from a 2-aligned pointer.
template <int N>
static __device__ __forceinline__ void ld_words_a2(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = ld_u32_a2(p + 4 * i);
}
template <int N>
static __device__ __forceinline__ void ld_words_a4(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = ld_u32_a4(p + 4 * i);
}
template <int N>
static __device__ __forceinline__ void ld_words_a8(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        uint2 v = __ldg((const uint2*)(p + 8 * i));
        q[2 * i] = v.x;
        q[2 * i + 1] = v.y;
    }
}
template <int N>
static __device__ __forceinline__ void ld_words_a16(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        uint4 v = __ldg((const uint4*)(p + 16 * i));
        q[4 * i] = v.x;
        q[4 * i + 1] = v.y;
        q[4 * i + 2] = v.z;
        q[4 * i + 3] = v.w;
    }
}
// Byte j of a little-endian word array (j is a compile-time constant after unrolling).
#define BYTE_AT(q, j) (((q)[(j) >> 2] >> (8 * ((j) & 3))) & 0xffu)

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024), returned to every thread:
// warp butterflies, then warp 0 over the per-warp sums (fixed order). `red`: ≥ 33 floats of
// shared memory; the block must not use it concurrently.
static __device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float s = lane < nw ? red[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) red[32] = s;
    }
    __syncthreads();
    return red[32];
}

// Register cache of the row-norm kernels (rmsnorm_f32, rmsnorm_add_f32, qkv_post_f32): thread
// tid of a block of B threads holds c[j] = row[tid + jB], j < NORM_CACHE (rows longer than
// NORM_CACHE·B are re-read).
#define NORM_CACHE 8

// RMSNorm scale (mean_j(row_j²) + eps)^(−1/2) of the block's row of n floats (spec/gemma4-text.md
// §3), filling the register cache c: sum of squares in f32 as a per-thread fma chain over
// i = tid + jB, then block_sum — one fixed order for every row of a given n and B. All threads
// of the block must call it (block_sum synchronizes); `red` as for block_sum.
static __device__ __forceinline__ float rms_scale_cached(const float* __restrict__ row, int n,
                                                         float eps, float (&c)[NORM_CACHE],
                                                         float* red) {
    const int B = blockDim.x, tid = threadIdx.x;
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        const int i = tid + j * B;
        c[j] = i < n ? row[i] : 0.0f;
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) ss = fmaf(c[j], c[j], ss);
    for (int i = tid + NORM_CACHE * B; i < n; i += B) ss = fmaf(row[i], row[i], ss);
    ss = block_sum(ss, red);
    return 1.0f / sqrtf(ss / (float)n + eps);
}

// NeoX RoPE of one pair (x1, x2) = (x[i], x[i + d/2]) by an angle with f64 sine sn and cosine cs,
// rounded once to f32 (spec/gemma4-text.md §4.4): the one rotation of rope_neox_f32 and
// qkv_post_f32, so both give the same bits (runtime gpu-check `qkv_post`). The f64
// multiply-adds are written out: left to contraction, x2·cs + x1·sn compiled to
// fma(x2, cs, x1·sn) in qkv_post_f32 but to fma(x1, sn, x2·cs) in rope_neox_f32, and to the
// latter when the same source was inlined into another kernel (`scripts/gpu/run.sh sass`,
// 2026-12-06): two roundings that may differ in the last f64 bit, and then in the f32 result.
// These are rope_neox_f32's (its SASS is unchanged by them; qkv_post_f32's y2 now rounds alike).
static __device__ __forceinline__ void rope_pair(double x1, double x2, double sn, double cs,
                                                 float& y1, float& y2) {
    y1 = (float)__fma_rn(x1, cs, -__dmul_rn(x2, sn));
    y2 = (float)__fma_rn(x1, sn, __dmul_rn(x2, cs));
}

// Exact split of an f32 into three bf16 pieces v = hi + mid + lo (hi by truncation, mid rounded
// to nearest, lo the exact rest), returned as the bf16 bit patterns of hi·2^40, mid·2^48 and
// lo·2^56 (the tensor-core matvec's activations, matvec.cu; it scales its sums back exactly).
// The scales keep every piece near 2^40·|v|, so products with the folded Q2_K decoder's bf16
// subnormal integers (v·2^-133) stay normal f32 down to |v| ≈ 2^-33, while sums stay finite up
// to Σ|w·v| ≈ 2^80.
#define TC_XE_HI 40
#define TC_XSCALE 0x1p40f
static __device__ __forceinline__ void tc_split3(float v, uint32_t& h, uint32_t& m, uint32_t& l) {
    v *= TC_XSCALE;
    const uint32_t hb = __float_as_uint(v) & 0xffff0000u;
    const float r1 = v - __uint_as_float(hb);  // exact: the low 16 significand bits of v
    // mid = r1 rounded to nearest-even bf16, so hi + mid alone is v to ~2⁻¹⁷ relative, unbiased
    // (the two-piece matvec); the remainder r2 = r1 − mid is exact in ≤ 8 significand bits.
    const uint32_t rb = __float_as_uint(r1);
    const uint32_t mb = (rb + 0x7fffu + ((rb >> 16) & 1u)) & 0xffff0000u;
    const float r2 = r1 - __uint_as_float(mb);  // exact, ≤ 8 significand bits
    h = hb >> 16;
    m = __float_as_uint(__uint_as_float(mb) * 0x1p8f) >> 16;
    l = __float_as_uint(r2 * 0x1p16f) >> 16;
}

// The prep buffers are kept in mma fragment order. Input column c's piece p (0 = hi, 1 = mid,
// 2 = lo) is mma column cc = 3c + p, i.e. column g = cc % 8 of column group m = cc / 8; the
// B-fragment lane of (column g, thread t) is 4g + t. Every (m, 16-group) block is 32 lanes × 2
// words, so a warp's fragment load of one column group is 256 contiguous bytes.
// xs holds [K/16][8] f32 group sums, and from word TC_XSF_OFFSET on the bf16 fragments of those
// sums for the min-term mma of folded formats (Q2_K, matvec.cu): u32 [m][K/256][32][2]: lane
// 4g + t, words 0, 1 = the pairs (S_{2t}, S_{2t+1}), (S_{2t+8}, S_{2t+9}) of the super-block's 16
// groups, piece p < TC_DIGITS of input c for column 8m + g = TC_DIGITS·c + p (the digits'
// packing, below). (Rust: runtime::device::TC_MAX_K / 16 · 8.)
#define TC_XSF_OFFSET 32768

// int8 digits per activation of the integer tensor-core matvecs (below): 3 (22 significant bits
// per 256-element block; the default, kernels::TC_DIGITS_DEFAULT, which a kernels test checks
// this line against) or 2 (14). The host puts `#define TC_DIGITS n` before this file
// (kernels::tc_digits, $GEMMA4_TC_DIGITS), so the kernels and the host's column packing and
// kernel choice always agree; the default here serves compiles without it.
#ifndef TC_DIGITS
#define TC_DIGITS 3
#endif
static_assert(TC_DIGITS == 2 || TC_DIGITS == 3, "TC_DIGITS: 2 or 3 int8 digits per activation");

// int8 digits of the activations, for the Q2_K, Q3_K and Q6_K integer tensor-core matvecs (matvec.cu, TcI8):
// every 256-element block b (one weight super-block) of input column c has a shared power of two
// 2^e (e = the exponent of its largest |x|, max|x| ∈ [2^e, 2^(e+1))), and each element is the integer
// N = rint(x · 2^(B − 1 − e)) with B = 8·TC_DIGITS − 2 (|N| ≤ 2^B: the block's largest element
// keeps B significant bits, every element an absolute rounding error ≤ 2^(e−B)), written as
// TC_DIGITS signed base-256 digits, most significant first: TC_DIGITS = 3 (the default, B = 22):
// N = D0·2^16 + D1·2^8 + D2; TC_DIGITS = 2 (B = 14): N = D0·2^8 + D1 (the lower digits in
// [−128, 127], |D0| ≤ 65). Digit p of input c is mma column cc = TC_DIGITS·c + p (the bf16
// pieces take 3c + p), so 8 inputs fill 2 column groups at TC_DIGITS = 2 against 3 at 3. Either
// way digit p weighs 2^(8·(TC_DIGITS − 1 − p))·2^(e − B + 1) = 2^(e − 5 − 8p): the matvecs'
// column factors (matvec.cu TcOut<1>) are the same for both.
// The exponents, TC_XF_OFFSET (words of xs): f32 [K/256][4 t][8], in the order the matvec's lanes
// read them (one 64-bit load per column group and super-block): slot 2m + i of (super-block s,
// t) is 2^e of block s of the input of mma column cc = 8m + 2t + i (input cc / TC_DIGITS: each
// input's 2^e is written in its digit columns' slots; slots of columns past the last input are
// not written). Until 2026-12-06 the default was f32 [K/256][8], 2^e of block b of input c at 8b + c:
// two scalar loads per column group, from per-lane input indices that the NG = 3 kernels
// recomputed in every super-block (matvec.cu's integer epilogue note has the measurements); and
// until 2026-12-05 the blocks were 128 elements, each half super-block scaled by its own 2^e.
// Two layouts of the digits, TC_XLAYOUT (the same values and sums in both, so the same output
// bits; the writer below and the reader, matvec.cu mvtc_body, follow the one macro):
// TC_XLAYOUT 1 (the default):
//   TC_XD_OFFSET (words of xs): u32 [m = cc/8][K/32][32 lanes][2] in m16n8k32 B-fragment order:
//   lane 4g + t of (m, 32-block i) holds column 8m + g's digits of elements 4t … 4t+3 of
//   16-groups 2i (word 0) and 2i + 1 (word 1), byte j = element 4t + j.
// TC_XLAYOUT 2 (fewer load instructions in the matvec, yet slower; define it, e.g. through
// `scripts/gpu/run.sh variant`, to time and check it). Measured and not kept (H200, 2026-12-05,
// same binary, GEMMA4_KERNEL_SRC, 12B Q2_K-mix `runtime bench --draft-format none`, three
// alternating runs each): graph step at batch 1 3545–3559 → 3564–3575 µs, at batch 8
// 5210–5217 → 5316–5327 µs (×5.42–5.44 → ×5.35–5.36); `runtime mv-bench` (one run each) n = 8:
// attn_q+attn_k+attn_v (mvtcx_q2_k_q3_k_3w) 13.64 → 15.52 µs, attn_output 6.37 → 7.46,
// ffn_gate+ffn_up 34.85 → 33.55, head 459.2 → 438.9; n = 1: ffn_gate+ffn_up 19.70 → 19.22, head
// 259.7 → 264.7, the others within ±1.5 %. With TC_XB_3 4 on top: batch 8 5215–5246 µs, batch 1
// 3578–3604. gpu-check, model-check (7 models, logits
// within 4.9e-5 of the f64 oracle, rows bitwise equal) and spec-check passed with it.
//   TC_XD_OFFSET: u32 [m][K/64][32 lanes][4], the B fragments of two 32-blocks per lane (one
//   128-bit load): lane 4g + t of (m, 64-block i) holds column 8m + g's digits of elements
//   4t … 4t+3 of 16-groups 4i … 4i + 3 (words 0 … 3: words 0, 1 are 32-block 2i's fragment,
//   2, 3 32-block 2i + 1's). (The measurement above was taken with the exponents in this lane
//   order and the default's in input order.)
// 2^e is 0 for a block of zeros and NaN for a block holding a NaN or an infinity (its
// digits are 0), so a non-finite input never gives a finite output.
// (Rust: kernels::TC_XD_OFFSET, TC_XF_OFFSET; the runtime's buffer holds either layout.)
#define TC_XD_OFFSET 81920
#define TC_XF_OFFSET 475136
#ifndef TC_XLAYOUT
#define TC_XLAYOUT 1
#endif

// max |v[j]| of a quad, +inf when one of them is not finite (NaN included).
static __device__ __forceinline__ float tc_quad_absmax(const float* v) {
    float m = 0.0f;
    bool bad = false;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        m = fmaxf(m, fabsf(v[j]));
        bad |= !isfinite(v[j]);
    }
    return bad ? __int_as_float(0x7f800000) : m;
}

// Digits of quad t of 16-group G of input c (K = 16·ng), given the largest |x| (or +inf) M of
// its 256-element block, into the digit fragments; the lane with t = 0 of the block's first
// group also writes the block's 2^e.
static __device__ __forceinline__ void tc_prep_digits(const float* v, int c, int G, int t, int ng,
                                                      float M, float* __restrict__ xs) {
    uint32_t dw[TC_DIGITS] = {};
    float f;
    if (!(M <= 3.4028234663852886e38f)) {
        f = __int_as_float(0x7fc00000);  // NaN: the block held a NaN or an infinity
    } else if (M == 0.0f) {
        f = 0.0f;
    } else {
        // e and 2^e: the exponent field of a normal M (ilogbf / ldexpf only for a subnormal one).
        const uint32_t mb = __float_as_uint(M);
        const int e = mb >= 0x00800000u ? (int)(mb >> 23) - 127 : ilogbf(M);
        // x · 2^(B − 1 − e) in two exact power-of-two steps (B − 1 − e ∈ [−114, 170]).
        const int k = 8 * TC_DIGITS - 3 - e, k1 = k / 2, k2 = k - k1;
        const float s1 = __int_as_float((127 + k1) << 23), s2 = __int_as_float((127 + k2) << 23);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int n = __float2int_rn((v[j] * s1) * s2);
            // Signed base-256 digits from the least significant up: the low byte sign-extended,
            // the rest exactly (n − d)/256.
#pragma unroll
            for (int p = TC_DIGITS - 1; p > 0; --p) {
                const int d = (n << 24) >> 24;
                dw[p] |= ((uint32_t)d & 255u) << (8 * j);
                n = (n - d) >> 8;
            }
            dw[0] |= ((uint32_t)n & 255u) << (8 * j);
        }
        f = mb >= 0x00800000u ? __uint_as_float(mb & 0x7f800000u) : ldexpf(1.0f, e);
    }
    uint32_t* xd = (uint32_t*)xs + TC_XD_OFFSET;
#pragma unroll
    for (int p = 0; p < TC_DIGITS; ++p) {
        const int cc = TC_DIGITS * c + p;
#if TC_XLAYOUT == 2
        const int n64 = (ng + 3) >> 2;  // 64-element blocks per column group (K % 256 == 0 when read)
        xd[(((uint64_t)(cc >> 3) * n64 + (G >> 2)) * 32 + 4 * (cc & 7) + t) * 4 + (G & 3)] = dw[p];
#else
        xd[(((uint64_t)(cc >> 3) * (ng >> 1) + (G >> 1)) * 32 + 4 * (cc & 7) + t) * 2 + (G & 1)] = dw[p];
#endif
        if (t == 0 && (G & 15) == 0)
            xs[TC_XF_OFFSET + ((G >> 4) * 4 + ((cc & 7) >> 1)) * 8 + 2 * (cc >> 3) + (cc & 1)] = f;
    }
}

// Records the sum s of 16-group G of column c (K = 16·ng): xs[8G + c] and its bf16 pieces in
// the fragment area (only for whole 256-element super-blocks).
static __device__ __forceinline__ void tc_prep_sum(float s, int c, int G, int ng,
                                                   float* __restrict__ xs) {
    xs[8 * G + c] = s * TC_XSCALE;  // with the hi pieces' scale
    const int nsb = ng >> 4, sb = G >> 4, gl = G & 15;
    if (sb >= nsb) return;
    uint32_t pc[3];
    tc_split3(s, pc[0], pc[1], pc[2]);
    const int tt = (gl & 7) >> 1, word = gl >> 3, half = gl & 1;
    unsigned short* f = (unsigned short*)((uint32_t*)(xs + TC_XSF_OFFSET));
    // Packed as the digits (Q2_K, their only reader, sums them in the digits' columns): at
    // TC_DIGITS = 2 the pieces hi and mid alone, S to 2^-16 relative (tc_split3).
#pragma unroll
    for (int p = 0; p < TC_DIGITS; ++p) {
        const int cc = TC_DIGITS * c + p;
        f[2 * ((((uint64_t)(cc >> 3) * nsb + sb) * 32 + 4 * (cc & 7) + tt) * 2 + word) + half] =
            (unsigned short)pc[p];
    }
}

// Sum of a 16-group for the prep buffers, in the fixed order (p0 + p1) + (p2 + p3) with
// p_t = ((v[4t] + v[4t+1]) + v[4t+2]) + v[4t+3] (one quad per thread t in the fused kernels).
static __device__ __forceinline__ float tc_quad_sum(const float* v) {
    return ((v[0] + v[1]) + v[2]) + v[3];
}

// Writes quad t (elements 4t .. 4t+3 = v[0..3]) of 16-group G of column c (of a K = 16·ng
// input) into the tensor-core matvec's prep buffer xp u32 [m][ng][32][2] (fragment order, see
// TC_XSF_OFFSET above): for each piece p, lane 4g + t of (m, G) with 8m + g = 3c + p gets the
// bf16 pairs (e 4t, 4t+2), (4t+1, 4t+3) (mma k-slots 2t, 2t+1 and 2t+8, 2t+9). The group sum
// goes to xs separately.
static __device__ __forceinline__ void tc_prep_quad(const float* v, int c, int G, int t, int ng,
                                                    uint32_t* __restrict__ xp) {
    uint32_t pc[3][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) tc_split3(v[j], pc[0][j], pc[1][j], pc[2][j]);
#pragma unroll
    for (int p = 0; p < 3; ++p) {
        const int cc = 3 * c + p;
        uint2* out = (uint2*)xp + (((uint64_t)(cc >> 3) * ng + G) * 32 + 4 * (cc & 7) + t);
        *out = make_uint2(pc[p][0] | (pc[p][2] << 16), pc[p][1] | (pc[p][3] << 16));
    }
}

// GELU-tanh(g) and GELU-tanh(g) · u (spec/gemma4-text.md §5): the one f32 formula of geglu_f32
// (activation.cu), geglu_prep_f32, geglu_split_f32 and gelu_mul_ple_f32 (layer.cu), so all give
// the same bits.
static __device__ __forceinline__ float gelu_tanh(float g) {
    const float inner = 0.7978845608028654f * fmaf(0.044715f * g, g * g, g);
    return 0.5f * g * (1.0f + tanhf(inner));
}
static __device__ __forceinline__ float geglu_mul(float g, float u) { return gelu_tanh(g) * u; }

// `kinds` of the prep writers (uniform over the launch; kernels::TC_PREP_PIECES |
// kernels::TC_PREP_DIGITS): which of the bf16 pieces (xp) and the int8 digits (TC_XD_OFFSET) to
// write — the ones the matvecs that read this input take; the group sums and their fragments are
// always written.
#define TC_PREP_PIECES 1
#define TC_PREP_DIGITS 2

// Writes 16-group G of column c into the prep buffers: its four quads and, at xs[8G + c], its
// sum (tc_quad_sum order).
// M: the largest |x| of the group's 256-element block, +inf if it holds a non-finite value
// (tc_quad_absmax over its 64 quads), for the int8 digits. `kinds`: see TC_PREP_PIECES above.
static __device__ __forceinline__ void tc_prep_group(const float (&v)[16], int c, int G, int ng,
                                                     float M, uint32_t* __restrict__ xp,
                                                     float* __restrict__ xs, int kinds) {
    const float s = (tc_quad_sum(v) + tc_quad_sum(v + 4)) + (tc_quad_sum(v + 8) + tc_quad_sum(v + 12));
    tc_prep_sum(s, c, G, ng, xs);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        if (kinds & TC_PREP_PIECES) tc_prep_quad(v + 4 * t, c, G, t, ng, xp);
        if (kinds & TC_PREP_DIGITS) tc_prep_digits(v + 4 * t, c, G, t, ng, M, xs);
    }
}

// The largest of the warp-uniform values M of warps w and w ^ 1 of the block (0 for a missing
// partner), through shared memory. Every thread of the block must call it (barriers).
static __device__ __forceinline__ float tc_warp_pair_max(float M) {
    __shared__ float pm[32];
    const int w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads();  // pm is free: every warp has read the previous call's values
    if ((threadIdx.x & 31) == 0) pm[w] = M;
    __syncthreads();
    return (w ^ 1) < nw ? fmaxf(M, pm[w ^ 1]) : M;
}

// The quad form for kernels where 4 consecutive lanes hold the 4 quads of one group (lane & 3 =
// t): writes this lane's quad and, from lane t = 0, the group sum (same order as tc_prep_group).
// `kinds`: see TC_PREP_PIECES above.
// Every thread of the block must call it (shuffles and, for the digits, tc_warp_pair_max's
// barriers), and warps 2i and 2i + 1 must hold one 256-element block (16 consecutive groups from
// a multiple of 16: the int8 digits' shared exponent is the pair's largest |x|); lanes that are
// not `live` hold zeros.
static __device__ __forceinline__ void tc_prep_quad_lanes(const float* v, int c, int G, int ng,
                                                          uint32_t* __restrict__ xp,
                                                          float* __restrict__ xs, bool live,
                                                          int kinds) {
    const int t = threadIdx.x & 3;
    float p = tc_quad_sum(v);
    p = p + __shfl_xor_sync(0xffffffffu, p, 1);  // (p0 + p1) on lanes 0, 1; (p2 + p3) on 2, 3
    p = p + __shfl_xor_sync(0xffffffffu, p, 2);  // commutative adds: the same bits on all four
    float M = 0.0f;
    if (kinds & TC_PREP_DIGITS) {
        M = tc_quad_absmax(v);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        M = tc_warp_pair_max(M);
    }
    if (!live) return;
    if (t == 0) tc_prep_sum(p, c, G, ng, xs);
    if (kinds & TC_PREP_PIECES) tc_prep_quad(v, c, G, t, ng, xp);
    if (kinds & TC_PREP_DIGITS) tc_prep_digits(v, c, G, t, ng, M, xs);
}
