// matvec.cu — fused dequantize × matrix-vector product, weights read straight from GGUF blocks.
// Spec: spec/gguf-gemma4.md §3 (block decode: the same F::dq8 as dequant.cu, so the f32 weights
// are bit-identical to the reference dequantizer's).
//
// matvec_<fmt>_<nc>(W, x, y, rows, K, row_bytes):
//   W  : rows × row_bytes raw blocks (row r = output r, K elements; K % 32 == 0 and a whole
//        number of blocks), base 256-byte aligned;
//   x  : f32 [nc, K] (column c contiguous, 16-byte aligned);  y : f32 [nc, rows].
//   y[c, r] = Σ_k W[r, k] · x[c, k], f32 accumulation.
// Launch: block (MV_THREADS,1,1); grid (ceil(rows / R), 1, 1) with R = mv_rows(nc) (host:
// kernels::matvec_rows_per_block). A block computes R consecutive rows; its threads stride over
// the row's 8-element pieces (thread t takes pieces t, t + 128, …), so a warp reads 256
// consecutive elements of x and of each row per step (coalesced), and each x value loaded
// feeds R rows (fewer L1 bytes per weight byte).
// Summation per output: per piece 2 chains of 4 products + 1 add, added to the thread's running
// sum (⌈K/1024⌉ steps), then a 5-level warp butterfly and a 2-level sum over the 4 warps:
// every product passes through at most ⌈K/1024⌉ + 13 f32 roundings.

#define MV_THREADS 128

template <int NC> struct MvRows { enum { R = (NC <= 2) ? 4 : 2 }; };

template <int NC, typename F>
static __device__ __forceinline__ void matvec_body(const uint8_t* __restrict__ W,
                                                   const float* __restrict__ x,
                                                   float* __restrict__ y, int rows, int K,
                                                   uint64_t row_bytes) {
    constexpr int R = MvRows<NC>::R;
    __shared__ float red[MV_THREADS / 32][R * NC];
    const int row0 = blockIdx.x * R;
    const int pieces = K >> 3;
    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
    const uint8_t* wr[R];
    bool live[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        live[r] = row0 + r < rows;
        wr[r] = W + (uint64_t)(live[r] ? row0 + r : row0) * row_bytes;
    }
#pragma unroll 1
    for (int pc = threadIdx.x; pc < pieces; pc += MV_THREADS) {
        float xv[NC][8];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const float4* xp = (const float4*)(x + (uint64_t)c * K + (uint64_t)pc * 8);
            float4 a = __ldg(xp), b = __ldg(xp + 1);
            xv[c][0] = a.x; xv[c][1] = a.y; xv[c][2] = a.z; xv[c][3] = a.w;
            xv[c][4] = b.x; xv[c][5] = b.y; xv[c][6] = b.z; xv[c][7] = b.w;
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (!live[r]) continue;
            float w[8];
            F::dq8(wr[r], (uint64_t)(pc >> 2), (uint32_t)(pc & 3), w);
#pragma unroll
            for (int c = 0; c < NC; ++c) {
                float s0 = w[0] * xv[c][0], s1 = w[1] * xv[c][1];
                s0 = fmaf(w[2], xv[c][2], s0);
                s1 = fmaf(w[3], xv[c][3], s1);
                s0 = fmaf(w[4], xv[c][4], s0);
                s1 = fmaf(w[5], xv[c][5], s1);
                s0 = fmaf(w[6], xv[c][6], s0);
                s1 = fmaf(w[7], xv[c][7], s1);
                acc[r][c] += s0 + s1;
            }
        }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            float s = warp_sum(acc[r][c]);
            if (lane == 0) red[wid][r * NC + c] = s;
        }
    __syncthreads();
    for (int i = threadIdx.x; i < R * NC; i += MV_THREADS) {
        const int r = i / NC, c = i % NC;
        if (row0 + r < rows) {
            float s = (red[0][i] + red[1][i]) + (red[2][i] + red[3][i]);
            y[(uint64_t)c * rows + row0 + r] = s;
        }
    }
}

// Q4_K fast path (spec/gguf-gemma4.md §3.4 Q4_K, same per-element decode as FmtQ4_K::dq8, so the
// f32 weights are identical): one warp computes R = MvK<NC>::R consecutive rows; lane l takes
// block (l >> 3) + 4i of the row (i = 0, 1, …) and, inside it, t = l & 7: the 16 qs bytes
// 16t .. 16t + 15 (one 128-bit load), i.e. elements 64c + 16h + j (low nibbles, sub-block 2c)
// and 64c + 32 + 16h + j (high nibbles, sub-block 2c + 1), c = t >> 1, h = t & 1, j < 16. The
// block header (d, dmin, 12 scale bytes) is one more 128-bit load; scales are decoded once per
// 16 elements, x values once per R rows, weights once per NC columns.
// Summation per output (independent of NC and R): per 8-element group the same 2 chains of 4
// products + 1 add as matvec_body, added to one of 4 running sums of the lane (group g = 2·half
// + (j ≥ 8): low j < 8, low j ≥ 8, high j < 8, high j ≥ 8; blocks in increasing order), then
// (s0 + s1) + (s2 + s3) and a 5-level warp butterfly: every product passes through at most
// ⌈K/1024⌉ + 9 f32 roundings (the generic body's depth). Launch: block (MV_THREADS,1,1), grid ceil(rows / (4·R)) (host:
// kernels::matvec_rows_per_block("q4_k", nc)).
template <int NC> struct MvK { enum { R = (NC <= 2) ? 2 : 1 }; };

static __device__ __forceinline__ uint32_t q4k_sbyte(const uint4& hd, uint32_t j) {
    // byte j (0..11) of the 12 scale bytes = bytes 4..15 of the header (words y, z, w).
    const uint32_t wd = (j < 4) ? hd.y : ((j < 8) ? hd.z : hd.w);
    return (wd >> (8 * (j & 3))) & 0xffu;
}

template <int NC>
static __device__ __forceinline__ void matvec_q4k_body(const uint8_t* __restrict__ W,
                                                       const float* __restrict__ x,
                                                       float* __restrict__ y, int rows, int K,
                                                       uint64_t row_bytes) {
    constexpr int R = MvK<NC>::R;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int row0 = (blockIdx.x * (MV_THREADS / 32) + wid) * R;
    if (row0 >= rows) return;  // whole warp; no block-level synchronisation below
    const int nblk = K >> 8;
    const uint32_t t = lane & 7, c = t >> 1, hq = t & 1;
    float acc[R][NC][4];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int cc = 0; cc < NC; ++cc)
#pragma unroll
            for (int g = 0; g < 4; ++g) acc[r][cc][g] = 0.0f;
    const uint8_t* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = W + (uint64_t)min(row0 + r, rows - 1) * row_bytes;
#pragma unroll 1
    for (int blk = lane >> 3; blk < nblk; blk += 4) {
        uint4 hd[R], qq[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint8_t* b = wr[r] + (uint64_t)blk * 144;
            hd[r] = __ldg((const uint4*)b);
            qq[r] = __ldg((const uint4*)(b + 16 + 16 * t));
        }
        const uint64_t e0 = (uint64_t)blk * 256 + 64 * c + 16 * hq;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float xv[NC][16];
#pragma unroll
            for (int cc = 0; cc < NC; ++cc) {
                const float4* xp = (const float4*)(x + (uint64_t)cc * K + e0 + 32 * half);
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    float4 a = __ldg(xp + v);
                    xv[cc][4 * v] = a.x; xv[cc][4 * v + 1] = a.y;
                    xv[cc][4 * v + 2] = a.z; xv[cc][4 * v + 3] = a.w;
                }
            }
            const uint32_t sb = 2 * c + half;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float d = f16_to_f32(hd[r].x), dmin = f16_to_f32(hd[r].x >> 16);
                uint32_t sc, mn;
                if (sb < 4) {
                    sc = q4k_sbyte(hd[r], sb) & 63u;
                    mn = q4k_sbyte(hd[r], sb + 4) & 63u;
                } else {
                    const uint32_t s4 = q4k_sbyte(hd[r], sb + 4);
                    sc = (s4 & 15u) | ((q4k_sbyte(hd[r], sb - 4) >> 6) << 4);
                    mn = (s4 >> 4) | ((q4k_sbyte(hd[r], sb) >> 6) << 4);
                }
                const float d1 = d * (float)sc, m1 = dmin * (float)mn;
                const uint32_t qw[4] = {qq[r].x, qq[r].y, qq[r].z, qq[r].w};
                float w[16];
#pragma unroll
                for (int i = 0; i < 16; ++i)
                    w[i] = d1 * u2f((BYTE_AT(qw, i) >> (4 * half)) & 15u) - m1;
#pragma unroll
                for (int cc = 0; cc < NC; ++cc) {
#pragma unroll
                    for (int g = 0; g < 2; ++g) {
                        const float* wg = w + 8 * g;
                        const float* xg = xv[cc] + 8 * g;
                        float s0 = wg[0] * xg[0], s1 = wg[1] * xg[1];
                        s0 = fmaf(wg[2], xg[2], s0);
                        s1 = fmaf(wg[3], xg[3], s1);
                        s0 = fmaf(wg[4], xg[4], s0);
                        s1 = fmaf(wg[5], xg[5], s1);
                        s0 = fmaf(wg[6], xg[6], s0);
                        s1 = fmaf(wg[7], xg[7], s1);
                        acc[r][cc][2 * half + g] += s0 + s1;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int cc = 0; cc < NC; ++cc) {
            const float* a = acc[r][cc];
            const float s = warp_sum((a[0] + a[1]) + (a[2] + a[3]));
            if (lane == 0 && row0 + r < rows) y[(uint64_t)cc * rows + row0 + r] = s;
        }
}

// Per-format choice of the matvec body (the generic one unless a format has a fast path).
template <int NC, typename F> struct MatvecImpl {
    static __device__ __forceinline__ void run(const uint8_t* __restrict__ W,
                                               const float* __restrict__ x,
                                               float* __restrict__ y, int rows, int K,
                                               uint64_t row_bytes) {
        matvec_body<NC, F>(W, x, y, rows, K, row_bytes);
    }
};
template <int NC> struct MatvecImpl<NC, FmtQ4_K> {
    static __device__ __forceinline__ void run(const uint8_t* __restrict__ W,
                                               const float* __restrict__ x,
                                               float* __restrict__ y, int rows, int K,
                                               uint64_t row_bytes) {
        matvec_q4k_body<NC>(W, x, y, rows, K, row_bytes);
    }
};

#define MATVEC_KERNEL_NC(NAME, F, NC)                                                        \
    extern "C" __global__ void __launch_bounds__(MV_THREADS)                                 \
        matvec_##NAME##_##NC(const uint8_t* __restrict__ W, const float* __restrict__ x,     \
                             float* __restrict__ y, int rows, int K, uint64_t row_bytes) { GRIDDEP_ENTRY();   \
        MatvecImpl<NC, F>::run(W, x, y, rows, K, row_bytes);                                 \
    }

#define MATVEC_KERNELS(NAME, F)                                                              \
    MATVEC_KERNEL_NC(NAME, F, 1) MATVEC_KERNEL_NC(NAME, F, 2) MATVEC_KERNEL_NC(NAME, F, 3)   \
    MATVEC_KERNEL_NC(NAME, F, 4) MATVEC_KERNEL_NC(NAME, F, 5) MATVEC_KERNEL_NC(NAME, F, 6)   \
    MATVEC_KERNEL_NC(NAME, F, 7) MATVEC_KERNEL_NC(NAME, F, 8)

FOR_EACH_FORMAT(MATVEC_KERNELS)

// matvec_ids_<fmt>(W, expert_bytes, ids, x, x_div, y, rows, K, row_bytes): one matvec per
// (token, expert) pair j (MoE experts, spec/gemma4-text.md §6): the weights are expert ids[j]
// of a 3-D expert tensor (expert e starts at W + e·expert_bytes, `rows` rows of row_bytes),
// the input is column j / x_div of x (f32 [·, K]) and the output row j of y (f32 [J, rows]).
// Launch: block (MV_THREADS,1,1); grid (ceil(rows / 4), J, 1). Same summation as matvec_<fmt>_1.
#define MATVEC_IDS_KERNEL(NAME, F)                                                           \
    extern "C" __global__ void __launch_bounds__(MV_THREADS) matvec_ids_##NAME(              \
        const uint8_t* __restrict__ W, uint64_t expert_bytes, const int* __restrict__ ids,   \
        const float* __restrict__ x, int x_div, float* __restrict__ y, int rows, int K,      \
        uint64_t row_bytes) { GRIDDEP_ENTRY();                                                                \
        const int j = blockIdx.y;                                                            \
        matvec_body<1, F>(W + (uint64_t)ids[j] * expert_bytes,                               \
                          x + (uint64_t)(j / x_div) * K, y + (uint64_t)j * rows, rows, K,    \
                          row_bytes);                                                        \
    }

FOR_EACH_FORMAT(MATVEC_IDS_KERNEL)

// =============================================================================================
// Tensor-core matvec `mvtc_<fmt>_<NG>` (formats with a `Tc` decoder below: q2_k q3_k q4_k q5_k q6_k
// q4_0; host: kernels::TC_FORMATS, K % 256 == 0, sm_80+).
//
// Every weight is W[r, e] = a_{r,G} · q_{r,e} + b_{r,G}: a small integer q (|q| < 128, exact in
// bf16) and the f32 scale a and offset b of its scale group G (16 or 32 elements; spec
// §3.3–§3.4, the same fields as the FmtX::dq8 decoders above). Activations are split exactly
// into three bf16 pieces x = hi + mid + lo (hi truncated, mid rounded, lo the exact rest:
// `tc_split3` in common.cuh, written by `mvtc_prep` or a fused producer kernel). Each piece of
// each input column is its own mma column ("packed columns": column cc = 8m + n of column group
// m is piece cc % 3 of input cc / 3), so 1–2 inputs take one mma per 16-group, 3–5 two and 6–8
// three (NG = ceil(3·nc / 8), one kernel per NG so each keeps only the registers it uses; the
// integer-mma formats below pack TC_DIGITS digits per input the same way, TcCols). Then
//   y[c, r] = (Y_hi + Y_mid) + Y_lo,   Y_p = Σ_G a_{r,G} · P_{p,r,c,G} + [p = hi] b_{r,G} · S_{c,G},
//   P_{p,r,c,G} = Σ_{e∈G} q_{r,e} · piece_p(x_{c,e})   (mma.sync m16n8k16 bf16 → f32: every
//               product exact, summed by the tensor core in f32),
//   S_{c,G}   = Σ_{e∈G} x_{c,e}                         (f32, `mvtc_prep`).
// Error: per piece and group one tensor-core f32 accumulation of 16 exact products + f32
// roundings of the scaling, one running f32 sum per warp over its run of super-blocks, a fixed
// pairwise sum of the runs, then the three pieces; no dependence on the number of columns (a
// column's mma, loads and sums are the same in every NG kernel, so 1..8 columns give the same
// bits: decode, verify and batch rows agree bitwise). Folded formats (Q2_K, Q3_K: FOLD = 1
// below) multiply the group's integer scale into the integer (an s8: Q2_K sc·q ≤ 45, Q3_K
// −S·q ∈ [−128, 124]), so a whole super-block is one sum P = Σ (sc·q)·x scaled once (the
// integer mma below); Q2_K takes its offsets Σ_G b_G·S_G as one more bf16
// mma per super-block of the sums' pieces (packed the same way). Scales: the prep stores
// hi·2^40, mid·2^48, lo·2^56 (and S·2^40), exact powers of two undone in the epilogue (TcOut). Q2_K (SUB = 1) reads its mins as bf16 subnormals (the bit
// pattern n is n·2^-133, so a decoded nibble is an mma operand as it is) and multiplies dmin by
// 2^69; its epilogue factors are those of TcOut<1>.
//
// Integer mma (TcI8: Q2_K, Q3_K, Q6_K): the main sums P = Σ (sc·q)·x take the int8 mma
// (m16n8k32 s8·s8 → s32, tc_imma) against the activations' int8 digits instead of the bf16
// pieces: x ≈ N·2^(e − 21) per 256-element block (2^e ≤ the block's largest |x| < 2^(e+1),
// N = D0·2^16 + D1·2^8 + D2, common.cuh TC_XD_OFFSET), digit p in mma column 3c + p as the pieces
// are. The A word of a (row, group) is the decoded `((w >> 2j) & 0x03030303)·sc` itself (4 bytes
// = 4 consecutive k), so neither the two byte-splitting PRMTs per word nor half of the mma remain
// (Q3_K: one multiply-add per word gives its four −S·q bytes, Tc<FmtQ3_K>::quad8; Q6_K, whose
// scales do not fold into an s8, takes one m16n8k16 mma per group and scales it in s32).
// Per super-block the 8 mma sum exactly in s32, then acc += (d·2^-29·2^e)·P
// (one f32 rounding; the epilogue's TcOut<1> factors 2^(24 − 8p) give digit p its weight
// 2^(16 − 8p)·2^(e − 21)); the offsets stay the bf16 mma of the exact group sums. Error: the
// activations' rounding to the digit grid, |x − N·2^(e−21)| ≤ 2^(e−22) (22 significant bits at
// the block's largest element), plus the f32 roundings above; still one fixed order per column,
// so 1..8 columns give the same bits. (All of this at the default TC_DIGITS = 3, columns 3c + p;
// the fast mode below packs two.)
// Fast mode, TC_DIGITS = 2 (common.cuh; host kernels::tc_digits, GEMMA4_TC_DIGITS=2): the same
// kernels with two digits per input (mma column TC_DIGITS·c + p, TcCols), so the integer formats
// take NG = ceil(2·nc / 8) groups — one up to 4 inputs, two up to 8 — and Q2_K's offsets read
// the sums' pieces hi and mid only; error 2^(e−14) per element (14 bits) and S_G to 2^-16.
// Measured (H100, 2026-12-06, one call, this binary at two digits against the previous binary,
// whose matvecs are these at three): `runtime mv-bench` µs n = 1 / 4 / 8: ffn_gate+ffn_up
// 20.07 / 25.56 / 29.76 → 19.77 / 20.33 / 25.96, ffn_down 15.58 / 17.88 / 19.41 → 15.41 / 15.46
// / 17.94, attn_q+attn_k+attn_v 9.38 / 10.56 / 13.64 → 8.77 / 8.85 / 10.67, tied Q6_K head
// 289.7 / 345.4 / 381.2 → 289.3 / 297.4 / 346.4 (327.2 at n = 8 with TC_Q6_SGN_NG 2); 12B Q2_K-mix
// `runtime bench`, two runs each: batch 1 301.4 / 303.4 → 312.4 / 307.4 tok/s, batch 8 1755.5 /
// 1775.5 → 2006.8 / 1962.3 (×5.82 / ×5.85 → ×6.43 / ×6.38). Logits against the f64 oracle
// (`xtask calibrate`, largest pair error): dense Q4_K_M fixture 2.0e-2, UD-Q2_K_XL fixtures
// 1.4e-3–5.7e-3, e2b Q4_0 and moe Q4_K_M as at three digits (4.2e-5, 2.4e-5) — against
// 6.6e-6–4.7e-5 at three digits — so the default stays three digits and two are opt-in (engine
// `cuda-fast`, its own tie budgets). At the default three digits these sources give the previous
// binary's outputs bit for bit (another call, H100: all 28 `runtime mv-bench` output hashes equal).
// Blocks whose largest |x| is below ~2^-100 lose precision (2^e·d·2^-29 leaves the f32 normal
// range); a non-finite input makes its block's 2^e NaN.
// Measured against Q2_K's former bf16 path (bf16 pieces, `pairs_fold` splitting the same word
// into two bf16-subnormal pairs; removed since, as the producers no longer write bf16 pieces for
// Q2_K's readers) (H200, 2026-12-03, `runtime mv-bench`, both in one call, 12B shapes):
// ffn_gate+ffn_up 24.69 → 21.16 µs at n = 1, 39.42 → 35.70 at n = 8; attn_q+attn_k 6.88 → 6.15;
// attn_output 5.55 → 4.94; attn_q+attn_k+attn_v 9.93 → 9.39 (n = 8 16.08 → 16.66). 12B Q2_K-mix
// decode (`runtime bench`, alternating, two runs each, producers writing the digits in both):
// 235.6 / 236.3 → 253.0 / 252.8 tok/s, batch 8 1384.2 / 1377.2 → 1441.1 / 1438.4; model-check
// maxima vs the f64 oracle on the UD-Q2_K_XL models 3.6e-6 / 1.87e-5 / 3.27e-5 → 4.4e-6 /
// 2.12e-5 / 3.58e-5 (the other models' unchanged), every row still bitwise invariant. The
// NG = 3 wide kernel mvtc_q2_k_3w spills 16 B with it (`scripts/gpu/run.sh sass`; 0 before),
// yet batch 8 is faster. Nsight Compute of ffn_gate+ffn_up (mvtc_q2_k_1w, 1920 tiles, n = 1,
// two launches alike): 11.96 M warp instructions (13.7 M with the bf16 pieces), issue slots 57 %
// busy, integer ALU pipe still 59 % of peak, FMA 16 %, tensor 8.4 % (IMMA 7.5); per issued
// instruction not selected 2.59, math-pipe throttle 1.79, wait 1.40, barrier 1.28, long
// scoreboard 0.74 — still bound by the ALU. The decode proper (PRMT, SHF, LOP3, IMAD per A word)
// is ~120 of the loop's 448 SASS instructions per super-block (`scripts/gpu/run.sh sass`); the
// rest is the work around it (weight and activation loads and their addresses, the exponents,
// the offsets' mma and scaling, the stage copies and barriers).
//
// Tile: 16 rows × 8·NG mma columns per block (TC_WARPS = 8 warps); the tile's K is split into 8
// strided runs of 256-element super-blocks (warp w: w, w + 8, …). The weights reach the warps
// through shared memory: stage j = super-blocks 8j … 8j + 7 of the 16 rows, copied with 16-byte
// `cp.async` chunks by the whole block, up to 3 stages in flight (`TcStage`), so the global
// reads are wide and contiguous whatever the block format's alignment (Q3_K: each warp copies
// its own super-blocks instead, `TcPerWarp`, with the same super-blocks per warp). XB groups' activation
// fragments are loaded (from global memory) as one batch before first use; lane = 4·g + t holds
// rows g and g + 8 and, per 16-group, the elements e = 4t .. 4t+3 (mma k-slots 2t ↔ e=4t,
// 2t+1 ↔ 4t+2, 2t+8 ↔ 4t+1, 2t+9 ↔ 4t+3), so a 32-bit word of 4 consecutive bytes gives the
// thread's two bf16 pairs with one mask each.
// W and W2 must start on a 16-byte boundary (the stages copy aligned chunks and take each
// row's offset mod 16 from the matrix start; host: runtime allocations are 256-aligned, and
// Gpu::matvec_tc checks views).
// Launch: block (256,1,1), grid (ceil(rows / 16) [+ ceil(rows2 / 16)], 1, 1), after mvtc_prep of
// the same x.
// =============================================================================================

// mvtc_prep(x, nc, K, xp, xs, kinds): x f32 [nc, K] (column c at x + c·K), 1 ≤ nc ≤ 8,
// K % 16 == 0; kinds: which of the bf16 pieces (xp) and the int8 digits to write (common.cuh
// TC_PREP_PIECES / TC_PREP_DIGITS, kernels::tc_prep_kinds of the matvecs that read them).
//   xp u32 [3][K/16][32][2] (TC_PREP_PIECES) in mma B-fragment order (common.cuh, tc_prep_quad): piece p of
//      input c is mma column cc = 3c + p of column group cc / 8; lane 4g + t of (group m, 16-group
//      G) holds column 8m + g's bf16 pairs (e 4t, 4t+2), (4t+1, 4t+3) of elements 16G + e.
//      Columns past 3·nc are not written (the matvec does not read them).
//   xs f32 [K/16][8]: S_{c,G} at xs[8G + c] (sequential f32 sum of the 16 elements; 0 for c ≥ nc),
//      then the sums' fragments (common.cuh, TC_XSF_OFFSET), the int8 digits of the inputs
//      (TC_XD_OFFSET) and their per-256-element exponents (TC_XF_OFFSET) (TC_PREP_DIGITS).
// Launch: one thread per (c < 8, G): grid ceil(8·K/16 / 128), block 128.
extern "C" __global__ void __launch_bounds__(128) mvtc_prep(const float* __restrict__ x, int nc,
                                                          int K, uint32_t* __restrict__ xp,
                                                          float* __restrict__ xs, int kinds) {
    GRIDDEP_ENTRY();
    const int ng = K >> 4;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // No return before the shuffles below: every lane of the warp takes part in them.
    const bool in = i < 8 * ng;
    const int c = in ? i / ng : 0, G = in ? i - c * ng : 0;
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) v[j] = 0.0f;
    if (in && c < nc) {
        const float4* p = (const float4*)(x + (uint64_t)c * K + 16 * G);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float4 a = p[j];
            v[4 * j] = a.x; v[4 * j + 1] = a.y; v[4 * j + 2] = a.z; v[4 * j + 3] = a.w;
        }
    }
    // The largest |x| of the group's 256-element block (the int8 digits' shared exponent), over
    // the 16 lanes holding its groups: lanes 16a … 16a + 15 are threads of one input c and groups
    // 16b … 16b + 15 whenever ng % 16 == 0 (the matvecs need K % 256 == 0, so digits of any other
    // K are never read).
    float M = 0.0f;
    if (kinds & TC_PREP_DIGITS) {
        M = fmaxf(fmaxf(tc_quad_absmax(v), tc_quad_absmax(v + 4)),
                  fmaxf(tc_quad_absmax(v + 8), tc_quad_absmax(v + 12)));
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    }
    if (!in) return;
    if (c >= nc) {
        xs[8 * G + c] = 0.0f;
        return;
    }
    tc_prep_group(v, c, G, ng, M, xp, xs, kinds);
}

// tc_pair for a value that already carries the 0x43004300 exponent bits: each bf16 lane
// 128 + v (v < 128) minus `bias` (bias ∈ [128, 256), exact), i.e. the integer v + 128 − bias.
template <int BIAS>
static __device__ __forceinline__ uint32_t tc_pair_m(uint32_t vm) {
    constexpr uint32_t nb = 0xC300u | (uint32_t)(BIAS - 128);
    const uint32_t one = 0x3F803F80u, neg = nb | (nb << 16);
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(vm), "r"(one), "r"(neg));
    return r;
}
// bf16 pair (128 + v_lo, 128 + v_hi) for 16-bit lanes v < 128, minus `bias` in both lanes:
// the integer pair (v_lo + 128 − bias, v_hi + 128 − bias).
template <int BIAS>
static __device__ __forceinline__ uint32_t tc_pair(uint32_t v) { return tc_pair_m<BIAS>(v | 0x43004300u); }

// Three-input logic op with both masks in registers (one LOP3; C++ `(a & b) | c` with two
// immediates compiles to two). LUT 0xEA = (a & b) | c, 0xE4 = (a & c) | (b & ~c).
template <int LUT>
static __device__ __forceinline__ uint32_t lop3(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(a), "r"(b), "r"(c), "n"(LUT));
    return r;
}
// Bytes of (a, b) picked by selector `sel` (PRMT).
static __device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

static __device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1,
                                              uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Integer mma: d += a·b over k = 32 (A 16×32 s8 row-major: a0/a2 row g, a1/a3 row g + 8, k 4t …
// 4t+3 in a0/a1 and 16 + 4t … in a2/a3; B 32×8 s8: b0 k 4t … 4t+3, b1 16 + 4t …, column g;
// D s32 as tc_mma's). Exact (int32 sums). AU8: unsigned A bytes (u8·s8; Q2_K's split chains,
// TcOdd4).
template <bool AU8 = false>
static __device__ __forceinline__ void tc_imma(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
#define TC_IMMA_K32(AT)                                                                            \
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." AT ".s8.s32 {%0,%1,%2,%3}, "            \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                          \
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                  \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
    if constexpr (AU8)
        TC_IMMA_K32("u8");
    else
        TC_IMMA_K32("s8");
#undef TC_IMMA_K32
}
// d += A·B, m16n8k16 s8·s8 → s32: a0 = row g, a1 = row g + 8 (k 4t … 4t+3 each), b0 = k 4t … 4t+3 of
// column g (the .x or .y half of an m16n8k32 B fragment).
static __device__ __forceinline__ void tc_imma16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
        "{%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// Tc<F>: OK (has a decoder); SB = bytes of one 256-element super-block of a row; GPS = 16-groups
// per scale group; HAS_MIN = b ≠ 0; Row = what one thread loads of one row's super-block;
// load(blk, t, R); pairs(R, G, p0, p1): the bf16 integer pairs of 16-group G (0..15) for this
// thread's elements (p0 = e 4t, 4t+2; p1 = e 4t+1, 4t+3); scale(R, s, a, b) of scale group s.
// Loads of a staged super-block (shared memory, copied verbatim from the weights, so with the
// same alignment mod 16 as in global memory; plain loads, no read-only cache path).
static __device__ __forceinline__ uint32_t sm_u16(const uint8_t* p) { return *(const unsigned short*)p; }
static __device__ __forceinline__ uint32_t sm_u32_a2(const uint8_t* p) {
    return sm_u16(p) | (sm_u16(p + 2) << 16);
}
static __device__ __forceinline__ uint32_t sm_u32_a4(const uint8_t* p) { return *(const uint32_t*)p; }

template <typename F> struct Tc { enum { OK = 0, SB = 1, GPS = 1, HAS_MIN = 0, FOLD = 0, SUB = 0 }; struct Row {};
    static __device__ __forceinline__ void load(const uint8_t*, int, Row&) {}
    static __device__ __forceinline__ void pairs(const Row&, int, uint32_t& p0, uint32_t& p1) { p0 = p1 = 0; }
    static __device__ __forceinline__ void scale(const Row&, int, float& a, float& b) { a = b = 0.0f; }
};

// §3.4 Q4_K: W = (d·sc)·q − dmin·mn, q = nibble; sub-block s (32 elements) = groups 2s, 2s+1.
template <> struct Tc<FmtQ4_K> { enum { OK = 1, SB = 144, GPS = 2, HAS_MIN = 1, FOLD = 0, SUB = 0 };
    struct Row { uint4 hd; uint32_t q[8]; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
        R.hd = *(const uint4*)b;
#pragma unroll
        for (int i = 0; i < 8; ++i) R.q[i] = sm_u32_a4(b + 16 + 16 * i + 4 * t);
    }
    static __device__ __forceinline__ void pairs(const Row& R, int G, uint32_t& p0, uint32_t& p1) {
        const int s = G >> 1, w = 2 * (s >> 1) + (G & 1), sh = 4 * (s & 1);
        p0 = tc_pair<128>((R.q[w] >> sh) & 0x000F000Fu);
        p1 = tc_pair<128>((R.q[w] >> (sh + 8)) & 0x000F000Fu);
    }
    static __device__ __forceinline__ void scale(const Row& R, int s, float& a, float& b) {
        const float d = f16_to_f32(R.hd.x), dmin = f16_to_f32(R.hd.x >> 16);
        uint32_t sc, mn;
        if (s < 4) {
            sc = q4k_sbyte(R.hd, s) & 63u;
            mn = q4k_sbyte(R.hd, s + 4) & 63u;
        } else {
            const uint32_t s4 = q4k_sbyte(R.hd, s + 4);
            sc = (s4 & 15u) | ((q4k_sbyte(R.hd, s - 4) >> 6) << 4);
            mn = (s4 >> 4) | ((q4k_sbyte(R.hd, s) >> 6) << 4);
        }
        a = d * u2f(sc);
        b = -(dmin * u2f(mn));
    }
};

// §3.4 Q5_K: q = nibble | (qh bit s)·16; otherwise as Q4_K.
template <> struct Tc<FmtQ5_K> { enum { OK = 1, SB = 176, GPS = 2, HAS_MIN = 1, FOLD = 0, SUB = 0 };
    struct Row { uint4 hd; uint32_t qh[2]; uint32_t q[8]; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
        R.hd = *(const uint4*)b;
        R.qh[0] = sm_u32_a4(b + 16 + 4 * t);
        R.qh[1] = sm_u32_a4(b + 32 + 4 * t);
#pragma unroll
        for (int i = 0; i < 8; ++i) R.q[i] = sm_u32_a4(b + 48 + 16 * i + 4 * t);
    }
    static __device__ __forceinline__ void pairs(const Row& R, int G, uint32_t& p0, uint32_t& p1) {
        const int s = G >> 1, w = 2 * (s >> 1) + (G & 1), sh = 4 * (s & 1);
        const uint32_t h = R.qh[G & 1];
        p0 = tc_pair<128>(((R.q[w] >> sh) & 0x000F000Fu) | (((h >> s) & 0x00010001u) << 4));
        p1 = tc_pair<128>(((R.q[w] >> (sh + 8)) & 0x000F000Fu) |
                          (((h >> (s + 8)) & 0x00010001u) << 4));
    }
    static __device__ __forceinline__ void scale(const Row& R, int s, float& a, float& b) {
        Tc<FmtQ4_K>::Row r4;
        r4.hd = R.hd;
        Tc<FmtQ4_K>::scale(r4, s, a, b);
    }
};

// §3.4 Q6_K: W = (d·sc_G)·(q − 32), q = ql nibble | qh 2 bits · 16; 16-element scale groups.
// Integer (TcI8, not folded: sc_G ∈ [−128, 127] times q − 32 does not fit an s8): per 16-group one
// m16n8k16 mma of the words q (quad8, bytes 0…63, an s8 as they are) and one of the constant
// −32 (I8OFF) against the same digits give Σ (q − 32)·D exactly, and sc_G (sc8) multiplies it
// into the super-block's s32 sum. SUB = 1: the epilogue's factors are the digits'
// (TcOut<1>). (The per-group bf16 `pairs`/`scale` path is never taken for it.)
// Against that former bf16 path (exact bf16 pieces, per-group f32 scaling): the loop of
// mvtc_q6_k_1 920 → 643 SASS instructions per super-block (`scripts/gpu/run.sh sass`; the wide
// mvtc_q6_k_1w at 64 registers now spills 36 B); the tied 12B head (262144 × 3840, `runtime
// mv-bench`, H200, 2026-12-03) 339.6 → 258.1 µs at n = 1 (54 → 71 % of B_read), 508 → 492 µs at
// n = 8; with the wide variant off (GEMMA4_TC_WIDE=0) 352.9 µs, so the head keeps it. 12B
// Q2_K-mix decode (`runtime bench`, alternating binaries, two runs each) 263.6 / 263.4 → 269.2 /
// 269.4 tok/s, batch 8 1491 / 1491 → 1489 / 1489; graph attribution of the head 340 / 343 →
// 261 / 262 µs per step. model-check maximum of dense-target.Q4_K_M (Q6_K tensors, tied head)
// 2.20e-5 → 4.89e-5; the UD-Q2_K_XL models 5.6e-6 / 3.22e-5 / 4.39e-5.
template <> struct Tc<FmtQ6_K> { enum { OK = 1, SB = 210, GPS = 1, HAS_MIN = 0, FOLD = 0, SUB = 1 };
    static constexpr uint32_t I8OFF = 0xE0E0E0E0u;  // −32 in each s8
    struct Row { uint32_t ql[8]; uint32_t qh[4]; uint32_t sc[4]; float d; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
        // ql word i = (h, j&1, gh) = (i >> 2, (i >> 1) & 1, i & 1); qh word i = (h, gh).
#pragma unroll
        for (int i = 0; i < 8; ++i) R.ql[i] = sm_u32_a2(b + 64 * (i >> 2) + 32 * ((i >> 1) & 1) + 16 * (i & 1) + 4 * t);
#pragma unroll
        for (int i = 0; i < 4; ++i) R.qh[i] = sm_u32_a2(b + 128 + 32 * (i >> 1) + 16 * (i & 1) + 4 * t);
#pragma unroll
        for (int i = 0; i < 4; ++i) R.sc[i] = sm_u32_a2(b + 192 + 4 * i);
        R.d = f16_to_f32(sm_u16(b + 208));
    }
    // The int8 scales of groups 4k … 4k + 3 (byte i = group 4k + i).
    static __device__ __forceinline__ uint32_t scale4(const Row& R, int k) { return R.sc[k]; }
    // sc_G sign-extended out of s4 = scale4(R, G >> 2) (PRMT's sign mode).
    static __device__ __forceinline__ int sc8(uint32_t s4, int G) {
        const uint32_t i = (uint32_t)(G & 3);
        return (int)prmt(s4, 0u, i | ((i | 8) << 4) | ((i | 8) << 8) | ((i | 8) << 12));
    }
    // The integer-mma A word of group G: q ∈ [0, 63] of the thread's elements 4t … 4t+3 (one
    // byte each): the ql nibble | the qh 2 bits · 16. SGN: 4·(q − 32) ∈ [−128, 124] as s8 bytes
    // instead, for the same two logic operations: the nibble into bits 2–5 and the 2 bits into
    // bits 6–7 (shifts 2 shorter on one side and 2 longer on the other), then bit 7 flipped — the
    // byte is 4·nibble + 64·(h − 2) as an s8, h the 2 bits — so no mma of the constant −32
    // (I8OFF) is needed; the sums come 4× larger (|P| ≤ 2^29) and are shifted back (TcQ6Sgn).
    template <bool SGN = false>
    static __device__ __forceinline__ uint32_t quad8(const Row& R, int G, uint32_t) {
        const int sb = G >> 1, h = sb >> 2, j = sb & 3, gh = G & 1;
        const uint32_t l = R.ql[4 * h + 2 * (j & 1) + gh], q = R.qh[2 * h + gh];
        const int lsh = 4 * (j >> 1), hsh = 2 * j;
        if constexpr (SGN) {
            const uint32_t ln = lsh == 0 ? (l << 2) : (l >> 2);  // nibble → bits 2–5
            const uint32_t hq = q << (6 - hsh);                   // 2 bits → bits 6–7
            return lop3<0x6A>(lop3<0xE4>(ln, hq, 0x3C3C3C3Cu), 0xFCFCFCFCu, 0x80808080u);  // (a & b) ^ c
        }
        const uint32_t hq = hsh <= 4 ? (q << (4 - hsh)) : (q >> (hsh - 4));  // 2 bits → bits 4–5
        return lop3<0xE4>(l >> lsh, hq, 0x0F0F0F0Fu) & 0x3F3F3F3Fu;
    }
    static __device__ __forceinline__ float d8(const Row& R) { return R.d; }
};

// §3.4 Q2_K: W = (d·(s & 15))·q − dmin·(s >> 4), q 2 bits; 16-element scale groups.
// Folded (FOLD = 1) and integer (TcI8): the 4-bit scale is multiplied into the integer
// (sc·q ≤ 45, an s8), so a super-block is one integer-mma sum P = Σ (sc·q)·D scaled once
// (quad8), and the offsets Σ_G dmin·m_G·S_G are one bf16 mma of the 4-bit mins
// against the group sums' bf16 pieces. SUB = 1: the mins enter that mma as bf16 subnormals, a
// 16-bit lane n being n·2^-133 exactly (the epilogue's factors undo 2^-133, TcOut), so a decoded
// nibble needs no exponent bits and no bias. (Only these decoders exist: the per-group
// `pairs`/`scale` and bf16 `pairs_fold` paths are never taken for it.)
template <> struct Tc<FmtQ2_K> { enum { OK = 1, SB = 84, GPS = 1, HAS_MIN = 1, FOLD = 1, SUB = 1 };
    struct Row { uint32_t sc[4]; uint32_t q[4]; uint32_t dd; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
#pragma unroll
        for (int i = 0; i < 4; ++i) R.sc[i] = sm_u32_a4(b + 4 * i);
        // q word i = (h, gh) = (i >> 1, i & 1)
#pragma unroll
        for (int i = 0; i < 4; ++i) R.q[i] = sm_u32_a4(b + 16 + 32 * (i >> 1) + 16 * (i & 1) + 4 * t);
        R.dd = sm_u32_a4(b + 80);
    }
    // Scale bytes 4k … 4k + 3 with the mins masked off (byte i = sc of group 4k + i).
    static __device__ __forceinline__ uint32_t scale4(const Row& R, int k) { return R.sc[k] & 0x0F0F0F0Fu; }
    // The integer-mma A word of group G: (sc_G·q) of the thread's elements 4t … 4t+3 of the
    // group, one byte each (≤ 45, so an s8, and no carry between bytes); sc_G = byte G & 3 of
    // s4 = scale4(R, G >> 2), picked by one PRMT. X4 (TcOdd4, odd j only): the word times 4, the
    // 2-bit fields of j = 1, 3 masked in place (bits 2–3 of w or of w >> 4), so the bytes are
    // 4·sc·q ≤ 180 (a u8 A) and of the three shifts per q word one remains.
    template <bool X4 = false>
    static __device__ __forceinline__ uint32_t quad8(const Row& R, int G, uint32_t s4) {
        const int h = G >> 3, j = (G >> 1) & 3, gh = G & 1;
        const uint32_t sc = prmt(s4, 0u, 0x4440u | (uint32_t)(G & 3));
        return X4 ? ((R.q[2 * h + gh] >> (2 * j - 2)) & 0x0C0C0C0Cu) * sc
                  : ((R.q[2 * h + gh] >> (2 * j)) & 0x03030303u) * sc;
    }
    // The mins as mma A pairs over k = group, times 16: m0 = (16·m_{2t}, 16·m_{2t+1}),
    // m1 = (16·m_{2t+8}, 16·m_{2t+9}), each a bf16 lane whose bit pattern n ∈ [0, 240] is
    // n·2^-133 exactly (subnormal below 128, exponent field 1 from 128 on: (128 + mantissa)·2^-133),
    // so a min nibble needs no shift: one PRMT (lane-constant selector `msel`, bytes 2t and
    // 2t + 1 of sc[0..1] or sc[2..3] into bytes 0 and 2) and one mask; dmin below carries the
    // 1/16. (Before: selects on t, shifts and masks. With the staging fast path (TcPlan) and
    // NG = 1's offsets below, mvtc_q2_k_1w's loop went 448 → 397 static SASS instructions and
    // ffn_gate+ffn_up 21.2 → 19.9 µs at n = 1, `runtime mv-bench`, H200, 2026-12-04.)
    // The ×16 changes the last bits of a few outputs (mv-bench's output hashes of the Q2_K cases
    // at n ≥ 2 differ, n = 1 and every column-0 invariance unchanged; model-check vs the f64
    // oracle: 2 of 350 figures moved, 5.23e-6 → 4.51e-6 and 3.735e-5 → 3.782e-5, on synthetic
    // UD-Q2_K_XL models): the mma's sums of these operands, some subnormal and now fewer, are
    // apparently not exactly invariant under a power-of-two scale.
    static __device__ __forceinline__ uint32_t min_sel(int t) {
        return (uint32_t)(2 * t) * 0x0011u + (uint32_t)(2 * t + 1) * 0x1100u;
    }
    static __device__ __forceinline__ void mins(const Row& R, uint32_t msel, uint32_t& m0, uint32_t& m1) {
        m0 = prmt(R.sc[0], R.sc[1], msel) & 0x00F000F0u;
        m1 = prmt(R.sc[2], R.sc[3], msel) & 0x00F000F0u;
    }
    static __device__ __forceinline__ float d(const Row& R) { return f16_to_f32(R.dd); }
    // The integer sums' scale (quad8 holds sc·q).
    static __device__ __forceinline__ float d8(const Row& R) { return f16_to_f32(R.dd); }
    // dmin / 16 (exact: an f16 times 2^-4 stays an f32 normal), the factor of mins' 16·m.
    static __device__ __forceinline__ float dmin(const Row& R) { return f16_to_f32(R.dd >> 16) * 0.0625f; }
};

// Formats whose main sums take the integer mma (Tc<F>::quad8): Q2_K, Q3_K, Q6_K (kernels::tc_int8_digits,
// which tells the producers to write its digits — the two must agree).
template <typename F> struct TcI8 { enum { V = 0 }; };
template <> struct TcI8<FmtQ2_K> { enum { V = 1 }; };
template <> struct TcI8<FmtQ3_K> { enum { V = 1 }; };
template <> struct TcI8<FmtQ6_K> { enum { V = 1 }; };
// mma columns per input: its TC_DIGITS int8 digits (common.cuh) for the integer-mma formats,
// its three bf16 pieces for the others (kernels::tc_cols_for).
template <typename F> struct TcCols { enum { V = TcI8<F>::V ? TC_DIGITS : 3 }; };
// TcOdd4<F>::V: the folded decoder's odd-j words come 4× larger from Tc<F>::quad8<true> (Q2_K): per
// half, the even-j and odd-j mma sum into two s32 chains, P = 4·P_even + P_odd (exact, |P| < 2^28),
// and the half's scale carries the 1/4 (d·2^-31): (float)(4·P) = 4·(float)P, so the same bits
// (every `runtime mv-bench` output hash unchanged; blocks whose largest |x| is below ~2^-98, not
// 2^-100, now leave the f32 normal range in d·2^-31·2^e). NG = 1 only: at NG = 2 the loop grew
// 551 → 566 static SASS instructions and NG = 3's wide kernel spilled 168 B. Measured (H200,
// 2026-12-04, same call): attn_q+attn_k (mvtc_q2_k_1) 6.07 / 6.10 → 5.74 / 5.75 µs and
// ffn_gate+ffn_up (mvtc_q2_k_1w, 64 registers: its loop 397 → 408 static, ALU 173 → 171)
// 20.04 / 19.96 → 19.80 / 19.81 µs at n = 1; decode 279.7 / 279.7 → 283.5 / 282.4 tok/s.
// TcQ6Sgn<F, NG>::V (Q6_K only): the A words carry 4·(q − 32) (Tc<FmtQ6_K>::quad8<true>) instead
// of a second mma of the constant −32 per group and column group; the super-block's s32 sum, a
// multiple of 4, is shifted back (exact), so the outputs are the same bits at every NG — from
// TC_Q6_SGN_NG column groups on (1: every kernel; 4: none). Default 3: static SASS of the main
// loop mvtc_q6_k_3 955 → 947, mvtc_q6_k_3w 1103 → 1074 with spills 88 → 64 B (at 2 also
// mvtc_q6_k_2 947 → 922, but mvtcx_q4_k_q6_k_2 then spills 16 B, from 0; at 1 mvtc_q6_k_1 618 →
// 644). Measured (H100, 2026-12-06, `run.sh ab`, one binary, sources 4 vs 3 with TC_WKEEP_2 = 1,
// alternating, every mv-bench output hash the same): tied Q6_K head (mvtc_q6_k_3w, n = 8)
// 417.5 / 422.1 → 389.9 / 389.9 µs, n ≤ 4 unchanged (289.8–353.5 µs); 12B decode at batch 8
// 1642.1 / 1642.0 → 1653.0 / 1652.7 tok/s, batch 1 279.9 / 279.9 → 279.5 / 279.7; and every
// check of `run.sh all` passed with these sources (gpu-check, model-check maxima as before,
// conformance, spec-check, memcheck).
// In the fast mode (TC_DIGITS 2, where the head takes NG = 2 at 5–8 inputs) TC_Q6_SGN_NG 2 was
// measured and not kept (H100, 2026-12-06, GEMMA4_KERNEL_SRC against the embedded sources, the
// same binary): mv-bench head n = 8 346.4 → 327.2 µs (one call), but the 12B decode (another
// call, two alternating runs each) batch 8 2019.5 / 2020.0 → 1981.5 / 1969.4 tok/s and batch 1
// 316.5 / 315.9 → 307.5 / 310.1.
#ifndef TC_Q6_SGN_NG
#define TC_Q6_SGN_NG 3
#endif
template <typename F, int NG> struct TcQ6Sgn { enum { V = 0 }; };
template <int NG> struct TcQ6Sgn<FmtQ6_K, NG> { enum { V = NG >= TC_Q6_SGN_NG }; };
template <typename F> struct TcOdd4 { enum { V = 0 }; };
template <> struct TcOdd4<FmtQ2_K> { enum { V = 1 }; };
// TcAll4<F, NG>::V: one chain instead of TcOdd4's two, for Q2_K from TC_ALL4_NG column groups
// on: the odd-j words come 4× larger as in TcOdd4 and the even-j words are multiplied by 4·sc
// (the scale word times 4, Tc<FmtQ2_K>::scale4 · 4: 4·sc ≤ 60 per byte, no carry) instead of
// sc, so every A byte is 4·sc·q ≤ 180 (a u8 A) and the one s32 sum is 4·P exactly (|4P| < 2^23,
// exact in f32), scaled by d·2^-31: the same bits as the two-chain and plain forms. One shift
// per q word (w >> 4, shared by j = 2 and 3), as TcOdd4, without its second chain's registers
// (which spilled at NG = 3) — for one multiply of each of the 8 scale words per super-block.
// Static SASS (`scripts/gpu/run.sh sass`, bar1→bar2): mvtc_q2_k_3w 331 → 327 (SHF.R 26 → 12,
// IMAD.SHL 4 → 9), mvtc_q2_k_2 308 → 300; at NG = 1 it would be 209 → 213 (mvtc_q2_k_1), so
// NG = 1 keeps the two chains. Measured (H100, 2026-12-07, one binary, `run.sh ab`, two
// mv-bench rounds, every output hash the same; alone, before TC_EPI_SPLIT): ffn_gate+ffn_up
// n = 4 25.21 / 25.34 → 24.87 / 24.82 µs, attn_q+attn_k n = 4 7.15 / 7.15 → 6.88 / 6.86, n = 8
// within ±0.15 µs (attn_q+attn_k+attn_v 13.61 / 13.68 → 13.73 / 13.77, ffn_gate+ffn_up 29.25 /
// 29.43 → 29.54 / 29.38); 12B decode batch 8 1788.6 / 1789.9 → 1793.1 / 1793.0 tok/s.
#ifndef TC_ALL4_NG
#define TC_ALL4_NG 2
#endif
template <typename F, int NG> struct TcAll4 { enum { V = TcOdd4<F>::V && NG >= TC_ALL4_NG }; };

// §3.4 Q3_K: W = (d·S_G)·q, q = low2 + 4·hbit − 4 ∈ [−4, 3], S_G = a_G − 32 ∈ [−32, 31] (a_G the
// 6-bit scale); 16-element scale groups.
// Folded (FOLD = 1) and integer (TcI8): s·q with s = −S_G ∈ [−31, 32] always fits an s8
// ([−128, 124]; S·q itself reaches +128 at S = −32, q = −4), so a super-block is one integer-mma
// sum P = Σ (s·q)·D scaled once by −d (quad8, d8) — the same path as Q2_K,
// without offsets. SUB = 1: the epilogue's factors are the digits' (TcOut<1>). (Only these
// decoders exist: the per-group `pairs`/`scale` and bf16 `pairs_fold` paths are never taken.)
// Against the former bf16 path (exact bf16 pieces, two bf16 pairs of S·q per word): the loop of
// mvtc_q3_k_1 818 → 620 SASS instructions per super-block, 120 → 96 registers
// (`scripts/gpu/run.sh sass`); 12B Q2_K-mix decode (`runtime bench`, H200, 2026-12-03, old and
// new binaries alternating in one call, two runs each): 254.4 / 252.2 → 262.4 / 262.5 tok/s,
// batch 8 1447 / 1438 → 1474 / 1477; the graph attribution's Q3_K matvecs 916 / 904 → 780 / 786 µs
// per step at batch 1; model-check maxima on the UD-Q2_K_XL models 4.4e-6 / 2.12e-5 / 3.58e-5 →
// 5.6e-6 / 3.10e-5 / 4.33e-5 (the other models unchanged), every row still bitwise invariant.
template <> struct Tc<FmtQ3_K> { enum { OK = 1, SB = 110, GPS = 1, HAS_MIN = 0, FOLD = 1, SUB = 1 };
    // Measured, not kept (H200, 2026-12-03, `runtime mv-bench` ffn_down, same call): quad8
    // returning the u8 bytes s·q + 128 for a u8·s8 mma plus one mma of the constant −128 per
    // 32-block instead of the XOR — loop 620 → 605 SASS instructions, yet 17.58 / 22.79 µs at
    // n = 1 / 8 against 17.60 / 22.39 with the XOR.
    struct Row { uint32_t hm[2]; uint32_t q[4]; uint32_t sc[3]; uint32_t dd; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
        R.hm[0] = sm_u32_a2(b + 4 * t);
        R.hm[1] = sm_u32_a2(b + 16 + 4 * t);
#pragma unroll
        for (int i = 0; i < 4; ++i) R.q[i] = sm_u32_a2(b + 32 + 32 * (i >> 1) + 16 * (i & 1) + 4 * t);
#pragma unroll
        for (int i = 0; i < 3; ++i) R.sc[i] = sm_u32_a2(b + 96 + 4 * i);
        R.dd = sm_u16(b + 108);
    }
    // The 6-bit scale bytes a_G = S_G + 32 of groups 4k … 4k + 3 (byte i = group 4k + i): low
    // nibbles from scale bytes 0–7 (groups ≥ 8: high nibbles), bits 4–5 from bytes 8–11.
    static __device__ __forceinline__ uint32_t scale4(const Row& R, int k) {
        const uint32_t lo = (k & 2) ? (R.sc[k & 1] >> 4) : R.sc[k & 1];
        const uint32_t hi = k == 0 ? (R.sc[2] << 4) : k == 1 ? (R.sc[2] << 2) : k == 2 ? R.sc[2] : (R.sc[2] >> 2);
        return lop3<0xE4>(lo, hi, 0x0F0F0F0Fu) & 0x3F3F3F3Fu;
    }
    // The integer-mma A word of group G: s·q_e (s = 32 − a_G = −S_G) of the thread's elements
    // e = 4t … 4t+3 of the group, one s8 each. With u_e = low2 + 4·hbit ∈ [0, 7] (q = u − 4) in
    // the bytes of U, the integer s·U + 4a·0x01010101 = Σ_e (s·(u_e − 4) + 128)·2^(8e) has every
    // "digit" s·q + 128 in [0, 252], so one 32-bit multiply-add (mod 2^32, s may be negative)
    // gives those bytes with no carry between them; XOR 0x80 per byte makes each the s8 s·q.
    // `s4` = scale4(R, G >> 2); s comes sign-extended out of the bytes (32 − a) mod 256
    // (PRMT's sign mode), and 4a·0x01010101 = (128 − 4s)·0x01010101 is s·0xFBFBFBFC + 0x80808080
    // (mod 2^32) — a multiply-add, which ptxas folds into s·(U − 0x04040404) + 0x80808080, not a
    // second PRMT of s4 << 2: the same integer, so the same bits. Static SASS of the main loop
    // (`scripts/gpu/run.sh sass`) mvtc_q3_k_1 644 → 609 (ALU 373 → 346, registers 83 → 78),
    // mvtc_q3_k_3 646 → 630, mvtc_q3_k_1w's 8 B spill gone. Measured (H100, 2026-12-06, `run.sh
    // ab`, same binary, every mv-bench output hash the same): ffn_down at n = 1 16.43 → 15.46 µs
    // and n = 8 20.4 → 19.4; in the 12B decode graph at batch 1, though, 279–281 → 268 tok/s
    // until the launch spread (runtime forward.rs `tc_spread_smem`): 78 registers let 3 of
    // ffn_down's 240 blocks share an SM (2 at 83), and under programmatic dependent launch some
    // SMs took 3. With the spread 288.4 / 288.9 tok/s (281.4 / 281.7 with neither, 285.1 / 285.3
    // with the spread alone), batch 8 1701 / 1707 (1680 / 1682).
    static __device__ __forceinline__ uint32_t quad8(const Row& R, int G, uint32_t s4) {
        const int sb = G >> 1, h = sb >> 2, j = sb & 3, gh = G & 1, i = G & 3;
        const uint32_t w = R.q[2 * h + gh], m = R.hm[gh];
        const int hs = 4 * h + j;
        // Per byte: bits 0–1 = low2 (qs >> 2j), bit 2 = hbit (hmask bit hs moved to bit 2).
        const uint32_t hb = hs >= 2 ? (m >> (hs - 2)) : (m << (2 - hs));
        const uint32_t U = lop3<0xE4>(w >> (2 * j), hb, 0x03030303u) & 0x07070707u;
        const uint32_t sv = (0xA0A0A0A0u - s4) ^ 0x80808080u;  // bytes (32 − a) mod 256 (a ≤ 63)
        const uint32_t s = prmt(sv, 0u, (uint32_t)(i | ((i | 8) << 4) | ((i | 8) << 8) | ((i | 8) << 12)));
        const uint32_t c4 = s * 0xFBFBFBFCu + 0x80808080u;
        return (U * s + c4) ^ 0x80808080u;
    }
    static __device__ __forceinline__ float d(const Row& R) { return f16_to_f32(R.dd); }
    // The integer sums' scale: −d, as A holds −S·q.
    static __device__ __forceinline__ float d8(const Row& R) { return -f16_to_f32(R.dd); }
};

// §3.3 Q4_0: W = d·(nib − 8); a 256-element super-block is 8 blocks of 18 bytes; block i =
// groups 2i (low nibbles) and 2i + 1 (high nibbles) of the same 16 bytes.
template <> struct Tc<FmtQ4_0> { enum { OK = 1, SB = 144, GPS = 2, HAS_MIN = 0, FOLD = 0, SUB = 0 };
    struct Row { uint32_t q[8]; float d[8]; };
    static __device__ __forceinline__ void load(const uint8_t* b, int t, Row& R) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            R.q[i] = sm_u32_a2(b + 18 * i + 2 + 4 * t);
            R.d[i] = f16_to_f32(sm_u16(b + 18 * i));
        }
    }
    static __device__ __forceinline__ void pairs(const Row& R, int G, uint32_t& p0, uint32_t& p1) {
        const uint32_t w = R.q[G >> 1];
        const int sh = 4 * (G & 1);
        p0 = tc_pair<136>((w >> sh) & 0x000F000Fu);
        p1 = tc_pair<136>((w >> (sh + 8)) & 0x000F000Fu);
    }
    static __device__ __forceinline__ void scale(const Row& R, int s, float& a, float& b) {
        a = R.d[s];
        b = 0.0f;
    }
};

// The factors that undo the activation pieces' scales (common.cuh tc_split3: hi·2^40, mid·2^48,
// lo·2^56) and the decoder's own: SF multiplies a folded super-block's d (and dmin) and HS, MS,
// LS a column total. SUB (integers as bf16 subnormals v·2^-133): SF = 2^69 keeps the partial
// sums in range, leaving 2^-64 for the epilogue. (Exact powers of two: the sums are those of
// unscaled pieces.) The integer-mma formats (TcI8: Q2_K, Q3_K, Q6_K) set SUB = 1 as well: their
// sums come out of the main loop as d·2^-29·2^e·P, and TcOut<1>'s column factors 2^(24 − 8p)
// give digit p its weight (matvec.cu's integer-mma note above).
template <int SUB> struct TcOut {
    static constexpr float SF = 1.0f, HS = 0x1p-40f, MS = 0x1p-48f, LS = 0x1p-56f;
};
template <> struct TcOut<1> {
    static constexpr float SF = 0x1p69f, HS = 0x1p24f, MS = 0x1p16f, LS = 0x1p8f;
};
static_assert(TC_XE_HI == 40, "TcOut assumes the pieces hi·2^40, mid·2^48, lo·2^56");

#define TC_WARPS 8  // warps per mvtc block (split-K over super-blocks)
// TC_EPI_SPLIT 1: the epilogue's sums of the 8 warps' runs spread over the warps (mvtc_body's
// end: warp w sums accumulator slots w and w + 8, then every thread writes at most one output);
// 0: warp 0 alone sums all 4·NG slots and writes every output while the block's other warps
// have finished. The same bits. A block's SM slot stays taken until its last warp is done, so
// the serial tail (4·NG slots × 8 shared loads, at NG = 3 ninety-six) delayed the next tile.
// Measured (H100, 2026-12-07, one binary, `run.sh ab`, two mv-bench rounds and two bench runs
// per variant, every mv-bench output hash the same; µs): attn_q+attn_k+attn_v n = 8 13.61 /
// 13.68 → 12.43 / 12.43, ffn_gate+ffn_up n = 8 29.25 / 29.43 → 29.03 / 29.08 and n = 4 25.21 /
// 25.34 → 24.86 / 24.85, tied head n = 8 380.3 / 375.9 → 372.8 / 372.8 and n = 4 341.4 / 338.6
// → 333.4 / 335.1, ffn_down n = 8 19.43 / 19.38 → 19.28 / 19.22; slower ffn_gate+ffn_up n = 1
// 19.73 / 19.84 → 20.05 / 20.05 and attn_v n = 4 4.66 / 4.63 → 4.77 / 4.74. 12B Q2_K-mix
// decode, batch 1 308.4 / 309.2 → 310.9 / 310.7 tok/s, batch 8 1788.6 / 1789.9 → 1821.1 /
// 1816.6 (graph step 4440–4460 → 4374–4389 µs); with TcAll4 as well (these sources' defaults)
// batch 1 309.8 / 310.3, batch 8 1823.3 / 1825.8 (graph step 4359–4377 µs, batch 1 3204–3236
// against 3202–3231). `runtime gpu-check --quick` passed with both.
#ifndef TC_EPI_SPLIT
#define TC_EPI_SPLIT 1
#endif
// Measured and not kept (H100, 2026-12-07, one binary, `scripts/gpu/run.sh ab`, one mv-bench
// round and two bench runs each): 4 warps per block (128 threads, the same 16-row tiles and
// 8-super-block stages, warp w taking super-blocks 2w and 2w + 1 of each stage, register bounds
// per thread unchanged), so that each warp's setup, address work and the epilogue's reduction
// are shared by twice the super-blocks — mvtc_q2_k_1w's loop 415 static SASS instructions for
// two super-blocks against 215 for one; by a static count about a tenth fewer instructions per
// tile at K 3840.
// Slower nearly everywhere: ffn_gate+ffn_up 20.06 → 22.47 µs at n = 1 and 29.30 → 31.15 at
// n = 8, ffn_down (Q3_K) 15.13 → 18.82 / 19.56 → 26.00, attn_output 4.90 → 5.69, the tied head
// 289.6 → 312.5; faster only attn_q+attn_k+attn_v at n = 8 (13.82 → 11.82) and three n = 4
// cases (attn_q+attn_k+attn_v 10.67 → 10.31, ffn_gate+ffn_up 25.49 → 25.04, head 342.7 → 336.4); 12B
// Q2_K-mix decode 306.4 / 305.1 → 253.8 / 254.9 tok/s, batch 8 1762.0 / 1752.2 → 1380.1 /
// 1379.8, graph attribution at batch 1: Q2_K matvecs 1343 / 1358 → 1810 / 1808 µs per step,
// Q3_K 544 / 627 → 903 / 852. The split over 8 warps (more resident warps per tile, shorter
// runs) is worth more than the instructions it repeats.
// One tile per block, grid = tiles. Measured and not kept (H200, 2026-12-02): blocks that take
// tiles b, b + G, … with G the resident blocks and the next tile's stages queued during the
// current one (epilogue sums in the tile's last stage buffer; same bits, all 7 model-check
// models unchanged): 12B decode 197.7/197.7 tok/s against 204.5/203.7 for the same kernel at
// one block per tile, ffn_gate+ffn_up 2143 against 2035 µs over a step's 104 launches (batch 8
// gained a little: 1228.9/1227.9 against 1215.5/1219.0 tok/s). ncu of ffn_gate+ffn_up (mvtc_q2_k_1w, 1920 tiles): 13.7 M warp
// instructions, issue slots 52.7 % busy, DRAM 30 % of peak — the kernel is bound by its
// instruction count, which a longer pipeline does not cut.
// Nsight Compute of the same launch (2026-12-03, mvtc_q2_k_1w, 1920 tiles, n = 1): issue slots
// 53–54 % busy, integer ALU pipe 60 % of its peak against 11 % for the FMA pipe, 27.5 of 64
// warps resident; per issued instruction the warps wait 2.57 cycles not selected, 2.01 on the
// math pipe (the ALU: PRMT/LOP3/SHF of the decoders), 1.77 on fixed latencies, 1.5 at barriers,
// 0.7 on memory. Again after TcOdd4 and the staging fast paths (2026-12-04, same launch, 26.5–27.0
// µs at ncu's locked clocks): issue slots 52–53 % busy over the elapsed time (326 instructions
// per cycle summed over the SMs while active, 274–279 over the elapsed time: ramp and tail), integer ALU
// pipe 50 %, FMA 21 %, tensor 9.7 %; occupancy limited to 4 blocks (32 warps) by both registers
// and shared memory; per issued instruction 2.07 cycles not selected, 1.48 fixed-latency wait,
// 1.42–1.51 long scoreboard, 1.41 barrier, 1.11 math pipe (`scripts/gpu/run.sh ncu`).
// Measured and not kept, 2026-12-03 (`runtime mv-bench`/`bench`, H200):
//  - The decoders' right shifts as multiply-highs (`mul.hi.u32` by 2^(32 − n): IMAD.HI on the
//    FMA pipe, ALU instructions of mvtc_q2_k_1w's loop 194 → 140), for Q2_K, Q3_K and Q6_K, in
//    five Q2_K arrangements; the same bits, every one slower: ffn_gate+ffn_up 25.10 → 25.5–27.4
//    µs, ffn_down (Q3_K) 19.69 → 22.6, tied head (Q6_K) 341 → 357; decode 238–241 → 218–227
//    tok/s.
//  - A K-split for Q3_K's per-warp stages (ks blocks per tile, each a part of the runs, the last
//    to arrive adding the parts in order through a global buffer; column-invariant): ffn_down
//    (240 tiles, 60 super-blocks per row) 18.77 µs at ks = 1 → 23.59 at ks = 2, 26.14 at 3,
//    26.80 at 4 (n = 1; the wide kernel at 4 blocks per SM 21.42 → 22.89 / 26.49 / 24.25), so
//    more resident warps do not help. The split code at ks = 1 (a run-time split, so other
//    registers and schedule) ran decode at batch 1 faster, 239.8 / 240.5 → 243.4 / 243.9 tok/s
//    (Q3_K family 861 → 821–842 µs per step), but batch 8 slower, 1399.7 / 1404.9 → 1334.8 /
//    1338.3 (Q3_K 1091 → 1341–1348 µs). Making only the run's first super-block and stride
//    opaque at NG = 1 (tc_keep; 120 → 114 registers) did not reproduce it: ffn_down 19.61 →
//    20.50 µs, decode 242.2 / 242.8 → 239.2 / 239.4 tok/s.
// Per format and column-group count NG (measured on the H200 with `runtime mv-bench`, 12B
// shapes; none of them changes any sum — each column's arithmetic is fixed):
//   XB   16-groups whose activation fragments are loaded as one batch;
//   MINB resident blocks per SM the compiler must allow (register cap 65536 / (256·MINB):
//        3 blocks ≤ 85 registers, 2 blocks ≤ 128).
// Every value can be overridden with a #define (TC_XB_1, TC_XB_2, TC_XB_3, TC_XB_Q3K_1,
// TC_MINB_1, TC_MINB_2, TC_MINB_3, TC_STAGE_BYTES) in a copy of this file read through
// GEMMA4_KERNEL_SRC, to time variants without a rebuild.
#ifndef TC_XB_1
#define TC_XB_1 8
#endif
#ifndef TC_XB_2
#define TC_XB_2 4
#endif
#ifndef TC_XB_3
#define TC_XB_3 2
#endif
#ifndef TC_XB_Q3K_1
#define TC_XB_Q3K_1 8
#endif
#ifndef TC_MINB_1
#define TC_MINB_1 3
#endif
#ifndef TC_MINB_2
#define TC_MINB_2 3
#endif
#ifndef TC_MINB_3
#define TC_MINB_3 2
#endif
// Shared memory for the weight stages of one block (static, so ≤ 48 KiB with the rest).
#ifndef TC_STAGE_BYTES
#define TC_STAGE_BYTES 45056
#endif
template <typename F, int NG> struct TcXb { enum { V = NG == 1 ? TC_XB_1 : NG == 2 ? TC_XB_2 : TC_XB_3 }; };
template <> struct TcXb<FmtQ3_K, 1> { enum { V = TC_XB_Q3K_1 }; };
template <typename F, int NG> struct TcMinB { enum { V = NG == 1 ? TC_MINB_1 : NG == 2 ? TC_MINB_2 : TC_MINB_3 }; };
// Q6_K: one group compiles to 79 registers under a 2-block bound (so 3 blocks fit anyway);
// forcing 3 slows it (head 376 → 393 µs). Two groups take 128 registers under a 2-block bound;
// at 3 blocks they spill 28 B but the head at n = 4 runs 546 → 460 µs (mv-bench, H200).
template <> struct TcMinB<FmtQ6_K, 1> { enum { V = 2 }; };
template <> struct TcMinB<FmtQ6_K, 2> { enum { V = 3 }; };
// Q5_K at 3 blocks spills ~170 B for one group (not timed on the 12B shapes): left at 2.
template <> struct TcMinB<FmtQ5_K, 1> { enum { V = 2 }; };
// Q3_K (attn_v, ffn_down: 128 and 240 tiles, under 2 blocks per SM on an H200 anyway) at 2: the
// compiler's freer schedule takes ffn_down from 25.70 to 20.33 µs at n = 1 and from 29.73 to
// 23.38 µs at n = 4 (mv-bench, H200; NG = 2 had spilled 32 B at 3 blocks).
template <> struct TcMinB<FmtQ3_K, 1> { enum { V = 2 }; };
template <> struct TcMinB<FmtQ3_K, 2> { enum { V = 2 }; };
// Wide variants `mvtc_<fmt>_<NG>w` (NG = 1, 3): the same arithmetic (same sums, bit for bit)
// compiled for more resident blocks per SM — NG = 1 at 4 blocks (≤ 64 registers), NG = 3 at 3
// (≤ 85 registers: Q2_K's NG = 3 fits with XB = 2). Which launch
// takes which is the host's measured rule (kernels::mvtc_wide).
//
// Measured and not kept (H100, 2026-12-07, one binary, the variant's sources through
// GEMMA4_KERNEL_SRC, every mv-bench output hash the same): Q2_K's NG = 3 wide kernels at 4
// blocks per SM (mvtc_q2_k_3w 64 registers, no spill, loop 507 → 535 static SASS instructions;
// mvtcx_q2_k_q3_k_3w spills 8 B) — ffn_gate+ffn_up n = 8 28.56 → 30.72 µs, attn_q+attn_k n = 8
// 7.84 → 8.68, attn_q+attn_k+attn_v n = 8 12.42 → 11.65; 12B decode at batch 8 1847.0 / 1846.6 →
// 1831.7 / 1830.9 tok/s.
// Measured and not kept (H100, 2026-12-07, one call, `run.sh ab`, every mv-bench output hash the
// same): two 16-row tiles per block (each warp decoding both tiles' rows against one load of each
// activation fragment, exponent pair and sums word; the launch grid unchanged, odd blocks
// returning at once) for Q2_K. At NG = 3 (static SASS: mvtc_q2_k_3 loop 489 → 886 for twice the
// rows, 128 registers, 32 B spill; the wide kernel then at the base's 2 blocks per SM):
// ffn_gate+ffn_up n = 8 29.01 / 29.01 → 30.92 / 30.92 µs, attn_output 6.36 → 8.13, attn_q+attn_k
// 7.99 → 9.22; Nsight Compute of mvtc_q2_k_3w (ffn_gate+ffn_up): L1 hit rate 75.0 → 61.3 %, L1
// throughput 54.3 → 40.3 %, duration 37.4 → 39.9 µs — fewer activation loads, slower; 12B decode
// at batch 8 1811.3 / 1815.2 → 1733.2 / 1727.0 tok/s. At NG = 1 (loop 374 → 750, 80 registers,
// 8 B spill): ffn_gate+ffn_up n = 1 20.05 → 21.17, attn_q+attn_k 6.08 → 8.43, attn_output 4.81
// → 6.41.
// Measured and not kept (H100, 2026-12-07, one call, `run.sh ab`, every mv-bench output hash the
// same, `runtime gpu-check --quick` ALL PASSED on the variant): Q2_K's NG = 1 kernels reading
// their weights straight from global memory (each lane its own Tc<F>::load words of rows g and
// g + 8, the warp's super-blocks wid, wid + 8, … in order; no stages, no barriers). Static SASS:
// main loop 374 / 393 → 221 / 231 (mvtc_q2_k_1 / 1w; 1w spills 4 B), or 248 / 268 with the
// next super-block's words loaded one iteration ahead (1w then spills 240 B). Slower though the loop
// is ~40 % shorter: ffn_gate+ffn_up n = 1 19.98 / 19.95 → 21.49 / 21.46 µs (1w), 23.13 / 23.16
// (base kernel, loaded ahead), 32.0 (1w loaded ahead); attn_output 4.77 → 5.51; attn_q+attn_k
// 6.04 → 5.94; 12B decode at batch 1 310.3 / 311.8 → 289.0 / 286.8 tok/s. So these kernels are
// not bound by instruction issue alone: the stages' 16-byte cp.async copies keep more weight bytes
// in flight than the lanes' 4-byte loads of 8 rows per instruction.
// Measured and not kept (H100, 2026-12-07, one call, `run.sh ab`, every mv-bench output hash the
// same): Q2_K's NG = 1 kernels with V consecutive tiles per block (block b, b a multiple of V
// within its matrix, takes tiles b … b + V − 1; the grid unchanged, the other blocks returning at
// once), each next tile's first stages queued during the current tile's epilogue (`TC_MULTI V`,
// commit 78cfb28; static SASS at V = 2: mvtc_q2_k_1 / 1w 73 / 64 registers, no spill). mv-bench
// at n = 1, base → V = 2 → V = 4: ffn_gate+ffn_up 20.0 → 21.1 → 21.6 µs, attn_output 4.8 → 7.1 →
// 12.0, attn_q+attn_k 6.1 → 8.6 → 14.7; 12B decode at batch 1 311.4 / 311.2 → 288.2 / 288.2 →
// 261.4 / 264.2 tok/s (batch 8, whose kernels it leaves alone, 1828 / 1852 → 1829 / 1847 → 1832 /
// 1827). Fewer blocks, each taking its tiles in turn, lose more than the overlap of one tile's
// epilogue with the next tile's first stages gains — as the H200 record of tiles b, b + G, … above.
#ifndef TC_MINBW_1
#define TC_MINBW_1 4
#endif
#ifndef TC_MINBW_3
#define TC_MINBW_3 3
#endif
#ifndef TC_XBW_3
#define TC_XBW_3 2
#endif
// (XB at least the format's groups per scale group: the unfolded path loads whole scale groups.)
// Measured, not kept (H200, 2026-12-03, `runtime mv-bench`, the tied 12B head, same call): XB 4
// or 2 for Q6_K's integer mvtc_q6_k_1w (spills 4 B instead of 36) — 258.62 / 256.47 µs at n = 1
// against 254.23 with XB = 8.
template <typename F, int NG> struct TcWide {
    enum {
        MINB = NG == 1 ? TC_MINBW_1 : TC_MINBW_3,
        XB = NG == 1 ? (int)TcXb<F, 1>::V
                     : (TC_XBW_3 > (int)Tc<F>::GPS ? TC_XBW_3 : (int)Tc<F>::GPS)
    };
};

// Weight staging: a stage is the next TC_WARPS super-blocks (one per warp) of the tile's 16
// rows, copied into shared memory with 16-byte `cp.async` chunks (whole aligned chunks covering
// each row's contiguous bytes, so a chunk keeps its address mod 16). CPR = chunks per row of a
// stage, made odd so that the 8 rows a fragment load touches fall on 8 different bank quads;
// NST = stages in flight (as many as TC_STAGE_BYTES holds, at most 3).
// TC_NST_MAX_Q2K: at most this many Q2_K stages. TC_FULL_PROLOGUE: the loop keeps NST stages in
// flight (the prologue queues NST, each iteration queues stage j + NST into the buffer it has
// just read) instead of NST − 1. Q2_K takes 2 stages, both in flight (TC_FULL_PROLOGUE_Q2K = 1):
// the same copies ahead as 3 stages with one fewer buffer, which frees the registers its NG = 3
// wide kernel had spilled (16 B → 0) — the 12B-shaped decode at batch 8 went from 1379–1385 to
// 1398–1403 tok/s, batch 1 unchanged within noise (`runtime bench`, three alternating runs,
// H200, 2026-12-03). Other formats keep NST − 1 ahead: the full prologue made Q6_K's NG = 1
// wide kernel spill 108 B.
#ifndef TC_NST_MAX_Q2K
#define TC_NST_MAX_Q2K 2
#endif
#ifndef TC_FULL_PROLOGUE
#define TC_FULL_PROLOGUE 0
#endif
#ifndef TC_FULL_PROLOGUE_Q2K
#define TC_FULL_PROLOGUE_Q2K 1
#endif
template <typename F> struct TcNstMax { enum { V = 3 }; };
template <> struct TcNstMax<FmtQ2_K> { enum { V = TC_NST_MAX_Q2K }; };
template <typename F> struct TcFull { enum { V = TC_FULL_PROLOGUE }; };
template <> struct TcFull<FmtQ2_K> { enum { V = TC_FULL_PROLOGUE_Q2K }; };
template <typename F> struct TcStage {
    enum {
        CPR = ((15 + TC_WARPS * Tc<F>::SB + 15) / 16) | 1,
        BYTES = 16 * CPR * 16,
        FIT = TC_STAGE_BYTES / BYTES >= 3 ? 3 : (TC_STAGE_BYTES / BYTES >= 2 ? 2 : 1),
        NST = FIT < (int)TcNstMax<F>::V ? FIT : (int)TcNstMax<F>::V,
        AHEAD = TcFull<F>::V ? NST : NST - 1
    };
};

// The activation fragments of XB consecutive blocks from block G0 of the current super-block
// on: for each block and column group m, this lane's V at xq[m] + 32·G (xq[m] = the lane's
// fragment of the super-block's block 0; 32 V per (column group, block)), immediate offsets.
// Blocks: 16-groups of the bf16 pieces and 32-blocks of the int8 digits (V = uint2), or
// 64-element blocks of the digits in TC_XLAYOUT 2 (V = uint4, two 32-blocks' fragments).
template <int XB, int NG, typename V>
static __device__ __forceinline__ void tc_load_x(V (&xv)[XB][NG], const V* const (&xq)[NG], int G0) {
#pragma unroll
    for (int u = 0; u < XB; ++u)
#pragma unroll
        for (int m = 0; m < NG; ++m) xv[u][m] = __ldg(xq[m] + 32 * (G0 + u));
}

// `v`, opaque to the compiler when NG = 1: a loop-invariant offset computed once before the
// super-block loop stays in its register. Without it the offsets are recomputed from the kernel
// parameters in every iteration: 25–30 more SASS instructions per super-block of mvtc_q2_k_1(w)
// and 32 of mvtc_q3_k_1; with it the 12B decode runs 209.6–211.1 tok/s against 207.8–208.3
// (three alternating pairs, H200, 2026-12-02). NG = 3 is left to the compiler: the same change
// took batch 8 from 1260.7–1262.1 to 1244.0–1252.5 tok/s.
template <int NG>
static __device__ __forceinline__ uint32_t tc_keep(uint32_t v) {
    if constexpr (NG == 1) asm volatile("" : "+r"(v));
    return v;
}

// The launch's dynamic shared memory in bytes (PTX %dynamic_smem_size).
static __device__ __forceinline__ uint32_t tc_dyn_smem_size() {
    uint32_t r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

// 16 bytes global → shared (asynchronous; 16-byte aligned both sides).
static __device__ __forceinline__ void tc_cp16s(uint32_t d, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src));
}
static __device__ __forceinline__ void tc_cp16(void* dst, const void* src) {
    tc_cp16s((uint32_t)__cvta_generic_to_shared(dst), src);
}
static __device__ __forceinline__ void tc_cp_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
static __device__ __forceinline__ void tc_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// The stage copy plan of one thread: row r = threadIdx.x / 16 of the tile and, of that row's
// CPR aligned chunks, cols l, l + 16, … (l = threadIdx.x mod 16), so one base offset and
// immediate steps address them all. Offsets are bytes from W, 32-bit (the matrix must be
// < 4 GiB: kernels::TC_MAX_MATRIX_BYTES, checked by Gpu::matvec_tc and Forward). Stage j reads
// 8j·SB bytes further on in every row; 8·SB is a multiple of 16 for every format (SB even), so
// a chunk keeps its alignment.
template <typename F> struct TcPlan {
    static_assert(32 * TC_WARPS == 256, "the plan maps 16 threads to each of the 16 rows");
    enum { NCH = (TcStage<F>::CPR + 15) / 16, STRIDE = TC_WARPS * Tc<F>::SB };
    static_assert(STRIDE % 16 == 0, "a stage must advance by whole 16-byte chunks");
    uint32_t base;  // offset of chunk col l of the thread's row in stage 0
    uint32_t last;  // the last offset at which a whole 16-byte chunk lies inside the matrix
    // Stages whose offset o0 = base + j·STRIDE is below `fast` have every chunk of the thread
    // inside the matrix (its last at o0 + 256·(n − 1), n = its chunk count; 0: none such).
    uint32_t fast;
    uint32_t sdst;  // shared address of the thread's first chunk in stage buffer 0
    template <int NG>
    __device__ __forceinline__ void init(int rows, uint64_t row_bytes, int row0, const uint4* sm) {
        const int r = threadIdx.x >> 4, l = threadIdx.x & 15;
        last = (uint32_t)((uint64_t)rows * row_bytes - 16);
        base = (uint32_t)((((uint64_t)min(row0 + r, rows - 1) * row_bytes) & ~15ull) + 16 * l);
        const int n = (TcStage<F>::CPR - l + 15) / 16;  // chunks l, l + 16, … below CPR
        const uint32_t span = 256u * (uint32_t)(n - 1);
        fast = last >= span ? last - span + 1 : 0u;
        sdst = (uint32_t)__cvta_generic_to_shared(sm + r * TcStage<F>::CPR + l);
        // Kept in registers (tc_keep, NG = 1) rather than recomputed from the parameters at every
        // stage (NG = 3's wide kernels spill with it: left to the compiler).
        base = tc_keep<NG>(base);
        fast = tc_keep<NG>(fast);
        sdst = tc_keep<NG>(sdst);
    }
    // Queues stage j (super-blocks 8j … 8j + 7 of rows row0 … row0 + 15, rows past the end
    // clamped to the last one) into stage buffer `buf` (of the `sm` given to init); bytes past
    // the matrix end are not read. The usual case (every chunk of the thread inside the matrix)
    // is one compare and the copies from one address pair with immediate steps, instead of a
    // bounds check and an address per chunk (the other case, stages that reach the matrix end).
    __device__ __forceinline__ void stage(uint4* __restrict__ sm, int buf, const uint8_t* __restrict__ W, int j) const {
        const int l = threadIdx.x & 15;
        const uint32_t o0 = base + (uint32_t)j * STRIDE;
        if (o0 < fast) {
            const uint32_t d = sdst + (uint32_t)buf * TcStage<F>::BYTES;
            const uint8_t* src = W + o0;
#pragma unroll
            for (int i = 0; i < NCH; ++i)
                if (16 * i + 15 < TcStage<F>::CPR || 16 * i + l < TcStage<F>::CPR)
                    tc_cp16s(d + 256 * i, src + 256 * i);
        } else {
            const int r = threadIdx.x >> 4;
            uint4* dg = sm + buf * (TcStage<F>::BYTES / 16) + r * TcStage<F>::CPR + l;
#pragma unroll
            for (int i = 0; i < NCH; ++i) {
                if (16 * i + 15 < TcStage<F>::CPR || 16 * i + l < TcStage<F>::CPR) {
                    const uint32_t o = o0 + 256 * i;
                    if (o <= last)
                        tc_cp16(dg + 16 * i, W + o);
                    else
                        tail(dg + 16 * i, W, o);
                }
            }
        }
    }
    // The matrix's last partial chunk (or none): byte loads, so nothing past the end is
    // touched; zeros after it.
    __device__ __forceinline__ void tail(uint4* d, const uint8_t* __restrict__ W, uint32_t o) const {
        tail_at(d, W, o, last);
    }
    static __device__ __forceinline__ void tail_at(uint4* d, const uint8_t* __restrict__ W, uint32_t o, uint32_t last) {
        const int n = o < last + 16 ? (int)(last + 16 - o) : 0;
        uint8_t* db = (uint8_t*)d;
#pragma unroll 1
        for (int k = 0; k < 16; ++k) db[k] = k < n ? W[(uint64_t)o + k] : (uint8_t)0;
    }
};

// Per-warp staging (TcPerWarp<F>::V = 1: Q3_K). Warp w takes the same super-blocks as with
// block stages (w, w + 8, … in order: the same sums, bit for bit), but copies them itself into
// its own buffers, so the loop needs no block barrier — only cp.async.wait_group and __syncwarp;
// the block synchronises once, before the epilogue. A warp stage is one super-block of the 16
// rows: row r's SB bytes from its 16-byte aligned start (its offset mod 16 is the same for every
// super-block of warp w, as 8·SB is a multiple of 16), the chunks that cover them copied into
// rows of PITCH (odd) chunks; NST stages in flight per warp (as many as TC_STAGE_BYTES holds for
// 8 warps, ≤ 3).
// Measured on the H200 (2026-12-02; the same output hashes at n = 1, 2, 4, 8 in mv-bench):
//   mv-bench, each launch alone: ffn_down (Q3_K, K = 15360, 7.5 super-blocks per warp) 20.05 →
//   18.54 µs at n = 1, 26.24 → 24.47 at n = 8; attn_v (Q3_K, K = 3840) 4.20 → 4.43 µs. Q2_K
//   (K = 3840/4096, ~2 super-blocks per warp) lost everywhere: ffn_gate+ffn_up 23.84 → 25.65,
//   attn_q+attn_k 5.83 → 6.45, attn_output 4.20 → 4.51 µs — so Q2_K keeps block stages.
//   12B decode (`runtime bench`, two runs each): block stages 210.3/209.2 tok/s, Q3_K per-warp
//   212.9/211.1 (batch 8: 1250.8/1250.8 → 1265.3/1271.0). Choosing per launch at run time
//   (per-warp only for rows of ≥ 32 super-blocks, both paths in one kernel) ran 201.6/202.1:
//   dropped.
// TC_WFULL_PROLOGUE: which kernels keep all NST warp stages (2 for Q3_K) in flight (the buffer
// just read takes stage j + NST) instead of NST − 1 — 0 none, 1 every NG, 2 NG ≥ 2 (default). Measured (H200, 2026-12-03,
// mv-bench ffn_down Q3_K; 12B Q2_K-mix `runtime bench`, three alternating runs, the same logits
// bit for bit in model-check): every NG in flight took ffn_down 19.55 → 19.98 µs at n = 1 but
// 21.72 → 21.21 at n = 4 and 24.77 → 23.97 at n = 8; decode at batch 8 1401.3–1401.9 →
// 1406.3–1416.6 tok/s, batch 4 811.2–814.5 → 819.8–828.0, batch 1 238.1–238.3 → 237.8–240.0.
// So the NG = 1 kernels (1–2 inputs) keep NST − 1; with that default, two runs: batch 1 240.3 /
// 239.4, batch 4 822.3 / 821.6, batch 8 1404.4 / 1405.3 tok/s (ffn_down 19.69 µs at n = 1).
// NG = 3's wide kernel spills 12 B instead of 24 (`scripts/gpu/run.sh sass`).
#ifndef TC_WFULL_PROLOGUE
#define TC_WFULL_PROLOGUE 2
#endif
#ifndef TC_WKEEP_2
#define TC_WKEEP_2 1
#endif
template <typename F> struct TcPerWarp { enum { V = 0 }; };
template <> struct TcPerWarp<FmtQ3_K> { enum { V = 1 }; };
// TC_WNST (host: kernels::tc_wnst, `GEMMA4_TC_WNST`, prepended to every program like TC_DIGITS):
// when > 0, the mvtc_<fmt>_* kernels of the per-warp formats (not the mvtcx ones, whose third
// matrix keeps its static stages) take TC_WNST warp stages in dynamic shared memory
// (TcDynSmem; the host passes kernels::tc_dyn_smem bytes) instead of the ≤ 48 KiB of static
// stages (2 for Q3_K); the same super-blocks per warp in the same order, so the same bits.
// Why (not yet timed: written 2026-12-08, a session that got no GPU): ffn_down (Q3_K, 240 tiles,
// 7.5 super-blocks per warp, ≤ 2 blocks per SM under the launch spread) runs at about half of
// B_read at n = 1 (15.5 µs for 25.3 MB on an H100), while its warps issue far fewer
// instructions than the SMs could (~4.5 M warp instructions, ~4 µs of issue); with one stage
// ahead a warp waits about one memory latency per super-block: ~16 warps × ~1 stage × 1760 B
// ≈ 28 KB in flight per SM, which at ~2 µs of loaded latency is ~1.9 TB/s (Little's law) — the
// hypothesis: more stages per warp, more bytes in flight, a shorter ffn_down.
// The one measurement of the stage depth: TC_STAGE_BYTES 32768, which leaves Q3_K one stage
// (no copy ahead) and every other format of the 12B mix as it was, took the decode from 310.6 /
// 309.7 to 300.4 / 297.0 tok/s at batch 1 and 1840.5 / 1832.7 to 1801.5 / 1800.5 at batch 8
// (H100, 2026-12-07, `run.sh ab`, the knob sweep in kernels::mvtc_wide's doc).
// Time it with `VARS="base: w4::GEMMA4_TC_WNST=4 w6::GEMMA4_TC_WNST=6" run.sh ab`.
#ifndef TC_WNST
#define TC_WNST 0
#endif
// NS > 0: that many stages in flight per warp (dynamic shared memory); 0: what TC_STAGE_BYTES holds.
template <typename F, int NS = 0> struct TcWarpStage {
    enum {
        CH = (15 + Tc<F>::SB + 15) / 16,
        PITCH = CH | 1,
        BYTES = 16 * PITCH * 16,
        NST = NS > 0 ? NS : TC_STAGE_BYTES / (TC_WARPS * BYTES) >= 3 ? 3 : (TC_STAGE_BYTES / (TC_WARPS * BYTES) >= 2 ? 2 : 1),
        SLOTS = (16 * CH + 31) / 32
    };
};
// The copy plan of one lane of warp w: chunk slots lane, lane + 32, … of the 16·CH (row, chunk)
// pairs; goff[i] = byte offset from W of slot i's chunk in the warp's first super-block
// (0xFFFFFFFF: a chunk past the row's bytes, not copied). A later super-block of the warp
// (w + 8j) is 8j·SB bytes further on.
template <typename F, int NS = 0> struct TcWarpPlan {
    typedef TcWarpStage<F, NS> WS;
    // Slot i's row is lane / CH + (32 / CH)·i (CH divides 32), so its buffer chunk is the lane's
    // slot-0 chunk plus i·SSTEP chunks: one shared address and immediate steps.
    static_assert(32 % WS::CH == 0, "a warp slot row of 32 chunks covers whole stage rows");
    enum { SSTEP = 32 + (32 / WS::CH) * (WS::PITCH - WS::CH) };
    uint32_t goff[WS::SLOTS];
    uint32_t last;  // the last offset at which a whole 16-byte chunk lies inside the matrix
    // Super-blocks j whose largest copied offset gmax + j·8·SB is below `fast` have every chunk of
    // the lane inside the matrix (0: none such; also when the lane copies nothing).
    uint32_t fast;
    uint32_t sdst;  // shared address of the lane's slot-0 chunk in the warp's stage buffer 0
    template <int NG>
    __device__ __forceinline__ void init(int rows, uint64_t row_bytes, int row0, int wid, int lane,
                                         const uint4* wsm) {
        last = (uint32_t)((uint64_t)rows * row_bytes - 16);
        uint32_t gmax = 0;
        bool any = false;
#pragma unroll
        for (int i = 0; i < WS::SLOTS; ++i) {
            const int slot = lane + 32 * i, r = slot / WS::CH, k = slot - r * WS::CH;
            const uint64_t st = (uint64_t)min(row0 + r, rows - 1) * row_bytes + (uint64_t)wid * Tc<F>::SB;
            const int nk = (int)(((st & 15) + Tc<F>::SB + 15) >> 4);
            const bool live = slot < 16 * WS::CH && k < nk;
            goff[i] = live ? (uint32_t)((st & ~15ull) + 16 * k) : 0xFFFFFFFFu;
            if (live) {
                gmax = max(gmax, goff[i]);
                any = true;
            }
        }
        // Kept in registers at NG = 1 (tc_keep): with the exponent per super-block (one epilogue
        // per super-block, common.cuh TC_XF_OFFSET) ptxas recomputed these offsets inside
        // mvtc_q3_k_1's loop instead (96 → 86 registers, loop 622 → 770 static SASS instructions).
        // NG = 2 had the same recomputation (mvtc_q3_k_2's loop 678 → 784; ffn_down at n = 4
        // 19.61 → 21.49 µs on the H100); TC_WKEEP_2 = 1 (the default) keeps the offsets there
        // too (702 static). Measured (H100, 2026-12-06, same A/B as TcQ6Sgn's): ffn_down at n = 4
        // 21.44 / 21.42 → 19.61 / 19.69 µs, attn_v at n = 4 (128 tiles) 4.95 / 5.03 → 5.25 / 5.23.
#pragma unroll
        for (int i = 0; i < WS::SLOTS; ++i) goff[i] = tc_keep<(NG == 2 && TC_WKEEP_2) ? 1 : NG>(goff[i]);
        // (Only NG = 1 takes the fast path, stage<true>.)
        fast = 0u;
        sdst = 0u;
        if constexpr (NG == 1) {
            fast = tc_keep<NG>((any && gmax <= last) ? last - gmax + 1 : 0u);
            sdst = tc_keep<NG>((uint32_t)__cvta_generic_to_shared(wsm + lane + (lane / WS::CH) * (WS::PITCH - WS::CH)));
        }
    }
    // Queues the warp's j-th super-block (w + 8j) into its stage buffer `buf` (of the `wsm` given
    // to init). The usual case (every chunk of the lane inside the matrix) is one compare, then
    // per live slot an add and the copy, instead of a bounds check and an address per slot
    // (with NG = 1's offsets in mvtc_body: ffn_down, mvtc_q3_k_1, 17.5 → 16.6 µs at n = 1).
    // FAST = false (NG > 1) leaves only the checked path: both paths (and reordered offsets)
    // made mvtc_q3_k_3's loop 798 → 966 static SASS instructions, ffn_down at n = 8
    // 22.3 → 24.1 µs; the fast path alone there, 798 → 823.
    template <bool FAST>
    __device__ __forceinline__ void stage(uint4* __restrict__ wsm, int buf, const uint8_t* __restrict__ W, int j, int lane) const {
        const uint32_t js = (uint32_t)j * (uint32_t)(TC_WARPS * Tc<F>::SB);
        if (FAST && js < fast) {
            const uint32_t d = sdst + (uint32_t)buf * WS::BYTES;
#pragma unroll
            for (int i = 0; i < WS::SLOTS; ++i)
                if (goff[i] != 0xFFFFFFFFu) tc_cp16s(d + 16u * SSTEP * i, W + (goff[i] + js));
        } else {
#pragma unroll
            for (int i = 0; i < WS::SLOTS; ++i) {
                if (goff[i] != 0xFFFFFFFFu) {
                    const int slot = lane + 32 * i, r = slot / WS::CH;
                    uint4* d = wsm + buf * (WS::BYTES / 16) + slot + r * (WS::PITCH - WS::CH);
                    const uint32_t o = goff[i] + js;
                    if (o <= last)
                        tc_cp16(d, W + o);
                    else
                        TcPlan<F>::tail_at(d, W, o, last);
                }
            }
        }
    }
};

// Shared memory (bytes) of one block of mvtc_body<F, NG>: its weight stages (block or per-warp,
// SMB) and the epilogue's sums (RB): after the stages (OWN = 1, BYTES = SMB + RB) or aliasing
// them (BYTES = the larger). OWN (TC_RED_OWN = 1, the default): block stages with all NST in
// flight (TcStage::AHEAD = NST: Q2_K), NG ≤ 2, and both fit TC_STATIC_SMEM bytes — then
// the loop skips the barrier after each of its last NST stages (no buffer is refilled and the
// epilogue does not overwrite them), which for K = 3840/4096 (two stages) is one barrier of the
// tile's four. NG = 3 keeps aliasing: its wide kernels spilled 16 B (mvtc_q2_k_3w) and 56 B
// (mvtcx_q2_k_q3_k_3w, from 24) with it. Same bits (mv-bench output hashes equal, model-check
// maxima unchanged). Measured (H200, 2026-12-03, `runtime mv-bench`, TC_RED_OWN 0 → 1 in one
// call): attn_q+attn_k+attn_v 10.39 → 9.74 µs, attn_q+attn_k 7.43 → 6.85, attn_output 5.64 →
// 5.54, ffn_gate+ffn_up 25.06 → 24.62 at n = 1 (n = 8 unchanged); 12B Q2_K-mix decode
// (`runtime bench`, two alternating runs each) 240.5 / 240.4 → 242.0 / 243.0 tok/s, graph step
// at batch 1 4192–4257 → 4145–4175 µs, batch 8 1400.8 / 1404.9 → 1403.4 / 1400.3 tok/s.
#ifndef TC_RED_OWN
#define TC_RED_OWN 1
#endif
#define TC_STATIC_SMEM 49152  // the most static shared memory one block may declare (48 KiB)
template <typename F, int NG> struct TcSmem {
    enum {
        SMB0 = TcStage<F>::NST * TcStage<F>::BYTES,
        SMB1 = TC_WARPS * TcWarpStage<F>::NST * TcWarpStage<F>::BYTES,
        SMB = (TcPerWarp<F>::V && SMB1 > SMB0) ? SMB1 : SMB0,
        RB = TC_WARPS * 4 * NG * 32 * 4,
        OWN = TC_RED_OWN && NG < 3 && !TcPerWarp<F>::V && (int)TcStage<F>::AHEAD == (int)TcStage<F>::NST &&
              SMB + RB <= TC_STATIC_SMEM,
        BYTES = OWN ? SMB + RB : (SMB > RB ? SMB : RB)
    };
};

// TcCapFused<F>::V: mvtc_<fmt>_* applies its `cap` argument (the final soft-cap of a tied head
// in F, fused into the epilogue); the other formats ignore it (kernels::tc_softcap_fused, the same
// list). Q6_K only, the tied head's format in llama.cpp's K-quant mixes: the branch in every
// format's epilogue changed the Q2_K kernels' code (static SASS of mvtc_q2_k_1w's loop 393 → 391,
// ALU 168 → 160) and the 12B decode at batch 1 went 310.1 / 309.3 → 307.3 / 306.8 tok/s (graph
// attribution's Q2_K matvecs 1328 / 1300 → 1366 / 1361 µs per step; H100, 2026-12-07).
// Dynamic shared memory (bytes) of mvtc_<fmt>_<NG> when its per-warp stages are dynamic
// (TC_WNST > 0 and TcPerWarp<F>): TC_WNST stages per warp, the epilogue's sums aliasing them
// (host: kernels::tc_dyn_smem, the same formula; the kernel traps if it gets less).
template <typename F, int NG> struct TcDynSmem {
    enum {
        ON = TcPerWarp<F>::V && TC_WNST > 0,
        SMB = TC_WARPS * TC_WNST * TcWarpStage<F, TC_WNST>::BYTES,
        RB = TC_WARPS * 4 * NG * 32 * 4,
        BYTES = ON ? (SMB > RB ? SMB : RB) : 0
    };
};
template <typename F> struct TcCapFused { enum { V = 0 }; };
template <> struct TcCapFused<FmtQ6_K> { enum { V = 1 }; };

template <typename F, int NG, int XB, int NS = 0>
static __device__ __forceinline__ void mvtc_body(const uint8_t* __restrict__ W,
                                                 const uint32_t* __restrict__ xp,
                                                 const float* __restrict__ xs,
                                                 float* __restrict__ y, int rows, int K,
                                                 uint64_t row_bytes, int nc, int cta,
                                                 uint4* __restrict__ sm, float cap) {
#if __CUDA_ARCH__ >= 800
    typedef Tc<F> T;
    typedef TcStage<F> St;
    static_assert(16 % XB == 0 && XB % T::GPS == 0, "XB: whole scale groups, a divisor of 16");
    // Per warp: NG mma column groups × 4 accumulator elements × 32 lanes, reused for the
    // column totals tot[8·NG columns][16 rows]; after the stage buffers when TcSmem<F, NG>::OWN,
    // else aliasing them (used after them).
    float (*red)[4 * NG][32] =
        reinterpret_cast<float (*)[4 * NG][32]>(sm + (TcSmem<F, NG>::OWN ? TcSmem<F, NG>::SMB / 16 : 0));
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = cta * 16;
    const int nsb = K >> 8, ng = K >> 4;
    const int nstage = (nsb + TC_WARPS - 1) / TC_WARPS;
    // Byte offsets of this warp's super-block of rows g and g + 8 in a stage buffer: the row's
    // start mod 16 (a stage advances by 8·SB, a multiple of 16, so it is the same in every
    // stage; W is 16-byte aligned) past the row's CPR chunks. At NG > 1 ptxas rebuilds them from
    // the parameters in every super-block under the register bound. Measured and not kept (H100,
    // 2026-12-06, `scripts/gpu/run.sh ab`, one binary, two rounds, the same output hashes): both
    // packed in one kept register at NG > 1 (mvtc_q2_k_3w's loop up to its first barrier 331 →
    // 319 static SASS instructions), with Q2_K's −dmin·SF as one multiply by a folded constant:
    // mv-bench within noise (ffn_gate+ffn_up n = 8 29.76 / 29.64 → 29.62 / 29.79 µs,
    // attn_q+attn_k n = 8 8.08 / 8.06 → 8.21 / 8.22, head n = 4 338.7 / 338.7 → 344.8 / 344.9),
    // 12B decode at batch 8 1682.6 / 1693.0 → 1695.8 / 1698.2 tok/s, batch 1 281.1 / 280.2 →
    // 280.3 / 279.0.
    const uint32_t oa = tc_keep<NG>(g * (St::CPR * 16) + wid * T::SB +
                                (uint32_t)(((uint64_t)min(row0 + g, rows - 1) * row_bytes) & 15));
    const uint32_t ob = tc_keep<NG>((g + 8) * (St::CPR * 16) + wid * T::SB +
                                (uint32_t)(((uint64_t)min(row0 + g + 8, rows - 1) * row_bytes) & 15));
    // Packed columns: mma column cc = 8m + n (group m < NG, n < 8) is piece cc % CPI (hi, mid,
    // lo; for the integer-mma formats digit cc % CPI, most significant first) of input column
    // cc / CPI, CPI = TcCols<F>::V. B-fragment lane (g, t) holds column 8m + g: its fragments start at
    // uint2 xo[m] of the prep buffer (fragment order, 32 uint2 per 16-group). Lanes of columns
    // past the last input read the last input column's fragments instead (written memory, in
    // the lines the warp reads anyway; those columns' outputs are never written).
    // xso[m]: the same lane's uint2 of super-block 0 in the sums' fragment area (folded formats
    // with offsets: Q2_K).
    constexpr int CPI = TcCols<F>::V;
    uint32_t xo[NG], xso[NG];
#pragma unroll
    for (int m = 0; m < NG; ++m) {
        const int cc = min(8 * m + g, CPI * nc - 1);
        xo[m] = tc_keep<NG>((uint32_t)((cc >> 3) * ng * 32 + 4 * (cc & 7) + t));
        xso[m] = tc_keep<NG>((uint32_t)((cc >> 3) * nsb * 32 + 4 * (cc & 7) + t));
    }
    // (xso[m] and xd[m] below are read at NG = 1 only, i.e. m = 0; at NG > 1 they are dead and
    // compiled away. Holding them as scalars gives the same instruction counts but another
    // register assignment in matvec_q2_k/q3_k, not the SASS timed and checked on the GPU.)
    // Integer mma (TcI8), at NG = 1: the loads' offsets are unsigned 32-bit from the buffers'
    // starts (xdb, xfb0), so an address is one multiply-add and a zero-extending add (the buffers
    // are < 4 GiB), not a sign-extended 64-bit product per load: mvtc_q2_k_1's loop 399 → 393
    // SASS instructions. NG > 1 keeps signed expressions (NG = 3's wide kernels spilled 16 →
    // 252 B with unsigned ones; reordered signed ones grew mvtc_q3_k_3's loop by 26).
    // Digits: at NG = 1 the lane's fragments of 32-block 0 (TC_XLAYOUT 2: 64-block 0) at xd[0]
    // (clamped as above); at NG > 1 column group m's at xdb + 4g + t + m·(the group's stride),
    // not clamped: lanes of columns past the last input read words of the buffer no prep wrote
    // for this launch (their outputs are never written; the areas have room for TC_MAX_GROUPS
    // column groups of K ≤ the runtime's TC_MAX_K), and the offsets are one expression of
    // g, t, m and sb instead of NG clamped per-group pointers, which ptxas rebuilt from the
    // parameters in every super-block under the wide kernels' register bound (mvtc_q2_k_3w's
    // loop: ~40 of its SASS instructions). The sums' fragments (Q2_K's offsets, xso) likewise.
    // Measured with the lane-order exponents (common.cuh TC_XF_OFFSET) in matvec.cu's integer
    // epilogue note.
    uint32_t xd[NG];
#if TC_XLAYOUT == 2
    // TC_XLAYOUT 2 (common.cuh): uint4 units, 32 per 64-block (two 32-blocks' fragments per lane;
    // with NG pointers mvtc_q2_k_3w spilled 228 B, `scripts/gpu/run.sh sass`). Static SASS of
    // the main loop against layout 1 (sass, 2026-12-04, when the exponents were per 128-element
    // half and in the order of the inputs in layout 1): mvtc_q2_k_1w 408 → 393, mvtc_q2_k_3w
    // 668 → 563, mvtc_q2_k_3 563 → 511, mvtc_q3_k_1 622 → 614, mvtc_q3_k_3 797 → 732,
    // mvtc_q6_k_1w 724 → 731, mvtc_q6_k_3w 1193 → 1067; spills 0 → 4 B (mvtc_q3_k_3w,
    // mvtcx_q2_k_q3_k_3w), 32 → 112 B (mvtc_q6_k_2), 8 → 0 (mvtc_q6_k_1w), 96 → 88
    // (mvtc_q6_k_3w). Timed and checked on the H200 (2026-12-05, common.cuh: slower); since
    // compile-checked only.
    typedef uint4 XdUnit;
    constexpr int XDS = 2;  // log2 of the 16-groups per unit
#else
    typedef uint2 XdUnit;  // (32 per 32-block, as per 16-group)
    constexpr int XDS = 1;
#endif
    const XdUnit* const xdb = (const XdUnit*)((const uint32_t*)xs + TC_XD_OFFSET);
    if constexpr (TcI8<F>::V) {
#pragma unroll
        for (int m = 0; m < NG; ++m) {
            const int cc = min(8 * m + g, CPI * nc - 1);
            xd[m] = tc_keep<NG>((uint32_t)((cc >> 3) * (ng >> XDS) * 32 + 4 * (cc & 7) + t));
        }
    }
    // Exponents (common.cuh TC_XF_OFFSET, in the lanes' order): one float2 per column group and
    // super-block at xfb0 + 16·sb + 4t + m, those of the lane's accumulator columns 8m + 2t,
    // 8m + 2t + 1 (stale or zero past the last input: their outputs are never written).
    const float2* const xfb0 = (const float2*)(xs + TC_XF_OFFSET);
    const uint32_t xft = tc_keep<NG>(4u * (uint32_t)t);
    // The lane's PRMT selector of its mins (Tc<F>::min_sel; integer-mma formats with offsets).
    uint32_t msel = 0;
    if constexpr (TcI8<F>::V && T::HAS_MIN) msel = tc_keep<NG>(T::min_sel(t));
    float acc[NG][4];
#pragma unroll
    for (int m = 0; m < NG; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[m][i] = 0.0f;
    // One super-block `sb` of the warp's run from its staged bytes (rows g and g + 8 at pa, pb).
    auto sb_body = [&](const uint8_t* pa, const uint8_t* pb, int sb) {
        typename T::Row A, B;
        T::load(pa, t, A);
        T::load(pb, t, B);
        const uint2* xq[NG];
#pragma unroll
        for (int m = 0; m < NG; ++m) xq[m] = (const uint2*)xp + xo[m] + 512 * sb;
        if constexpr (TcI8<F>::V) {
            // Per-row words the decoder derives once per super-block (Tc<F>::scale4).
            uint32_t sA[4], sB[4], sA4[4], sB4[4];  // sA4, sB4: times 4 (TcAll4)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                sA[k] = T::scale4(A, k);
                sB[k] = T::scale4(B, k);
                if constexpr (TcAll4<F, NG>::V) {
                    // (As a PTX shift of the masked word: written `sA[k] * 4u`, the compiler
                    // shifts the raw word and masks it again, one more ALU operation per word.)
                    asm("shl.b32 %0, %1, 2;" : "=r"(sA4[k]) : "r"(sA[k]));
                    asm("shl.b32 %0, %1, 2;" : "=r"(sB4[k]) : "r"(sB[k]));
                }
            }
            constexpr float SF = TcOut<T::SUB>::SF;
            {
                // Integer mma: per super-block (one exponent 2^e per input column, xf) the exact
                // sums P = Σ (sc·q)·D of each digit column over its 16 groups, then
                // acc += (d·2^−29·2^e)·P (the epilogue's TcOut<1> column scales 2^(24 − 8p)
                // complete digit p's weight 2^(16 − 8p)·2^(e − 21)). Folded (Q2_K, Q3_K): 8 m16n8k32
                // mma (groups 2i, 2i + 1 per mma, the scale inside A; |P| < 2^23, exact in f32:
                // Q2_K's two chains ≤ 128·45·128 and 128·180·128, Q3_K ≤ 256·128·128). Unfolded
                // (Q6_K): per group one m16n8k16 mma of quad8 plus one of the constant word I8OFF,
                // or (TcQ6Sgn) one mma of 4·(q − 32) alone, and the group's scale (sc8) times the
                // sum, in s32 (|P| ≤ 2^27, 2^29 before the exact shift back with the ×4: the
                // conversion to f32 below may round, once per super-block).
                // One exponent per super-block, not per 128-element half as until 2026-12-05:
                // half the epilogue's loads, conversions and multiply-adds; static SASS of the
                // main loop (`scripts/gpu/run.sh sass`) mvtc_q2_k_1w 408 → 382, mvtc_q2_k_3w
                // 668 → 598, mvtc_q3_k_1 622 → 648 (after tc_keep of TcWarpPlan's offsets; 770
                // without), mvtc_q3_k_3 797 → 678, mvtc_q6_k_1w 724 → 704, mvtc_q6_k_3w 1193 →
                // 1103, mvtcx_q2_k_q3_k_3w 667 → 597. Measured (H100, 2026-12-05, one binary, the
                // old kernels through GEMMA4_KERNEL_SRC, `scripts/gpu/run.sh ab`): `runtime
                // mv-bench` µs n = 1 / 8: ffn_gate+ffn_up 21.29 → 20.04 / 36.19 → 32.07, ffn_down
                // 16.69 → 16.45 / 22.43 → 20.86 (n = 4: 19.61 → 21.49, mvtc_q3_k_2's loop 678 →
                // 784), attn_q+attn_k+attn_v 10.17 → 9.63 / 14.20 → 12.96, head 292.2 → 279.6 /
                // 476.1 → 426.3; 12B Q2_K-mix `runtime bench`, two alternating runs: batch 1
                // 275.4 / 277.3 → 280.5 / 279.4 tok/s, batch 8 1528.7 / 1526.1 → 1635.7 / 1627.7
                // (×5.52–5.54 → ×5.88–5.91). `run.sh all` passed with it (gpu-check, model-check
                // maxima 2.9e-5 on the real fixtures and 4.0e-5 on the UD-Q2_K_XL models, rows
                // bitwise equal, conformance, spec-check, memcheck).
                // The exponents in the lanes' order (one float2 per column group, common.cuh
                // TC_XF_OFFSET) and the NG > 1 digit offsets unclamped from one base (above mvtc_body's
                // loop), 2026-12-06: static SASS of the main loop mvtc_q2_k_3w 598 → 516,
                // mvtcx_q2_k_q3_k_3w 597 → 518, mvtc_q2_k_3 575 → 504, mvtc_q3_k_3 678 → 646,
                // mvtc_q6_k_3w 1074 → 971 (spills 64 B both), mvtc_q2_k_1w 382 → 368, mvtc_q6_k_2
                // 947 → 851 (spills 4 → 0 B). Measured (H100, `scripts/gpu/run.sh ab`, one
                // binary, alternating, the previous sources against the exponents alone (xf2) and
                // both (xf2b, these sources), every output hash the same; mv-bench µs, two rounds):
                // ffn_gate+ffn_up n = 8 32.46 / 32.52 → 30.10 / 30.16 → 29.82 / 29.98, n = 1 20.05
                // / 20.10 → 19.86 / 19.85 → 19.93 / 19.92; tied head n = 8 385.7 / 381.4 → 371.1
                // / 371.0 → 376.3 / 375.5, n = 4 350.9 / 350.8 → 339.2 / 339.2 → 339.2 / 336.9;
                // ffn_down n = 8 20.80 / 20.90 → 20.28 / 20.24 → 20.49 / 20.47; attn_q+attn_k
                // n = 8 8.68 / 8.72 → 8.23 / 8.24 → 8.10 / 8.11; ffn_gate+ffn_up n = 4 26.50 /
                // 26.53 → 25.97 / 25.96 → 25.60 / 25.63; the others within ±0.3 µs. 12B Q2_K-mix
                // `runtime bench`, two runs each: batch 8 1646.4 / 1601.8 → 1677.0 / 1680.2 →
                // 1674.6 / 1693.1 tok/s (×5.96 / ×5.80 → ×6.14 / ×6.07 → ×6.02 / ×6.03 against the
                // bench's batch-1 row), decode 279.3 / 278.6 → 277.4 / 278.3 → 278.2 / 281.1.
                // `run.sh all` passed with these sources (the same model-check maxima as before,
                // bitwise row invariance, conformance 360 pass, spec-check, memcheck; batch 8
                // ×6.03 / ×6.16). Two later calls (H100, these sources built in): ab ×5.99 / ×6.01
                // and `all` ×5.99 / ×6.03 (which passed again); ab ×6.04 / ×6.05.
                constexpr bool ALL4 = TcAll4<F, NG>::V;
                constexpr bool ODD4 = TcOdd4<F>::V && NG == 1 && !ALL4;
                constexpr float DS = (ODD4 || ALL4) ? 0x1p-31f : 0x1p-29f;
                const float da8 = T::d8(A) * DS, db8 = T::d8(B) * DS;
                constexpr int XP = XB >= 2 ? XB / 2 : 1;  // 32-blocks per activation batch
                // The lane's fragment of the super-block's first 32-block (TC_XLAYOUT 2: 64-block;
                // there XP ≥ 2 loads whole 64-blocks, one uint4 per lane and group, and XP = 1
                // (XB = 2: the NG = 3 kernels) half a uint4 per 32-block): a super-block is
                // 32·2^(4 − XDS) units, a column group (ng >> XDS)·32.
                const XdUnit* xdq[NG];
#pragma unroll
                for (int m = 0; m < NG; ++m)
                    xdq[m] = NG == 1 ? xdb + (xd[m] + (256u >> (XDS - 1)) * (uint32_t)sb)
                                     : xdb + (4 * g + t + (256 >> (XDS - 1)) * sb + m * (ng >> XDS) * 32);
                int P[NG][4], P4[NG][4];  // P4: the odd-j chain (ODD4)
#pragma unroll
                for (int m = 0; m < NG; ++m)
#pragma unroll
                    for (int i = 0; i < 4; ++i) P[m][i] = P4[m][i] = 0;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int hp = 0; hp < 4 / XP; ++hp) {
                        uint2 xv[XP][NG];  // (32 uint2 per 32-block, as per 16-group)
#if TC_XLAYOUT == 2
                        if constexpr (XP >= 2) {
                            uint4 xw[XP / 2][NG];  // (32 uint4 per 64-block)
                            tc_load_x<XP / 2, NG>(xw, xdq, 2 * h + (XP / 2) * hp);
#pragma unroll
                            for (int u = 0; u < XP; ++u)
#pragma unroll
                                for (int m = 0; m < NG; ++m)
                                    xv[u][m] = (u & 1) ? make_uint2(xw[u >> 1][m].z, xw[u >> 1][m].w)
                                                       : make_uint2(xw[u >> 1][m].x, xw[u >> 1][m].y);
                        } else {
                            const int j = 4 * h + hp;  // the 32-block: half j & 1 of 64-block j >> 1
#pragma unroll
                            for (int m = 0; m < NG; ++m)
                                xv[0][m] = __ldg((const uint2*)(xdq[m] + 32 * (j >> 1)) + (j & 1));
                        }
#else
                        tc_load_x<XP, NG>(xv, xdq, 4 * h + XP * hp);
#endif
#pragma unroll
                        for (int u = 0; u < XP; ++u) {
                            const int G = 8 * h + 2 * (XP * hp + u);
                            if constexpr (ODD4 || ALL4) {
                                // j = XP·hp + u (compile-time once unrolled): odd j's words 4×; even
                                // j's scaled by 4·sc into the same chain (ALL4) or as they are into
                                // P (ODD4, whose odd j go into P4).
                                const bool odd = (XP * hp + u) & 1;
                                const uint32_t(&eA)[4] = ALL4 ? sA4 : sA;
                                const uint32_t(&eB)[4] = ALL4 ? sB4 : sB;
                                auto q8 = [&](const typename T::Row& R, int GG, const uint32_t (&s)[4],
                                              const uint32_t (&se)[4]) {
                                    return odd ? T::template quad8<true>(R, GG, s[GG >> 2])
                                               : T::quad8(R, GG, se[GG >> 2]);
                                };
                                const uint32_t a0 = q8(A, G, sA, eA), a1 = q8(B, G, sB, eB);
                                const uint32_t a2 = q8(A, G + 1, sA, eA), a3 = q8(B, G + 1, sB, eB);
                                int (&Pj)[NG][4] = (ODD4 && odd) ? P4 : P;
#pragma unroll
                                for (int m = 0; m < NG; ++m) tc_imma<true>(Pj[m], a0, a1, a2, a3, xv[u][m].x, xv[u][m].y);
                            } else if constexpr (T::FOLD) {
                                const uint32_t a0 = T::quad8(A, G, sA[G >> 2]), a1 = T::quad8(B, G, sB[G >> 2]);
                                const uint32_t a2 = T::quad8(A, G + 1, sA[G >> 2]), a3 = T::quad8(B, G + 1, sB[G >> 2]);
#pragma unroll
                                for (int m = 0; m < NG; ++m) tc_imma(P[m], a0, a1, a2, a3, xv[u][m].x, xv[u][m].y);
                            } else {
                                // Q6_K: q − 32 decoded into A itself (TcQ6Sgn) or one more mma of
                                // the constant I8OFF; the same exact s32 sums either way.
                                constexpr bool SGN = TcQ6Sgn<F, NG>::V;
#pragma unroll
                                for (int gg = 0; gg < 2; ++gg) {
                                    const int G2 = G + gg;
                                    const uint32_t a0 = T::template quad8<SGN>(A, G2, sA[G2 >> 2]),
                                                   a1 = T::template quad8<SGN>(B, G2, sB[G2 >> 2]);
                                    const int ka = T::sc8(sA[G2 >> 2], G2), kb = T::sc8(sB[G2 >> 2], G2);
#pragma unroll
                                    for (int m = 0; m < NG; ++m) {
                                        const uint32_t bx = gg ? xv[u][m].y : xv[u][m].x;
                                        int Q[4] = {0, 0, 0, 0};
                                        tc_imma16(Q, a0, a1, bx);
                                        if constexpr (!SGN) tc_imma16(Q, T::I8OFF, T::I8OFF, bx);
                                        P[m][0] += ka * Q[0];
                                        P[m][1] += ka * Q[1];
                                        P[m][2] += kb * Q[2];
                                        P[m][3] += kb * Q[3];
                                    }
                                }
                            }
                        }
                    }
                }
                if constexpr (ODD4) {
#pragma unroll
                    for (int m = 0; m < NG; ++m)
#pragma unroll
                        for (int i = 0; i < 4; ++i) P[m][i] = 4 * P[m][i] + P4[m][i];
                }
                if constexpr (TcQ6Sgn<F, NG>::V) {
                    // Σ sc·4·Q, a multiple of 4: the shift is the exact division.
#pragma unroll
                    for (int m = 0; m < NG; ++m)
#pragma unroll
                        for (int i = 0; i < 4; ++i) P[m][i] >>= 2;
                }
#pragma unroll
                for (int m = 0; m < NG; ++m) {
                    const float2 ef = __ldg(NG == 1 ? xfb0 + (16u * (uint32_t)sb + xft + m)
                                                    : xfb0 + (16 * sb) + (int)(xft + m));
                    const float f0 = ef.x, f1 = ef.y;
                    acc[m][0] = fmaf(da8 * f0, (float)P[m][0], acc[m][0]);
                    acc[m][1] = fmaf(da8 * f1, (float)P[m][1], acc[m][1]);
                    acc[m][2] = fmaf(db8 * f0, (float)P[m][2], acc[m][2]);
                    acc[m][3] = fmaf(db8 * f1, (float)P[m][3], acc[m][3]);
                }
            }
            if constexpr (T::HAS_MIN) {
                // Offsets: M = Σ_G m_G · S_G over the super-block's 16 groups (k = group),
                // the sums' pieces packed into columns like the activations.
                uint32_t a0, a1, a2, a3;
                T::mins(A, msel, a0, a2);
                T::mins(B, msel, a1, a3);
                const float ma = -T::dmin(A) * SF, mb = -T::dmin(B) * SF;
#pragma unroll
                for (int m = 0; m < NG; ++m) {
                    float M[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    const uint2 s = __ldg((const uint2*)((const uint32_t*)(xs + TC_XSF_OFFSET)) +
                                          (NG == 1 ? (uint64_t)(xso[m] + 32u * (uint32_t)sb)
                                                   // not clamped at NG > 1, as the digits
                                                   : (int64_t)(4 * g + t + m * nsb * 32 + 32 * sb)));
                    tc_mma(M, a0, a1, a2, a3, s.x, s.y);
#pragma unroll
                    for (int i = 0; i < 4; ++i) acc[m][i] = fmaf(i < 2 ? ma : mb, M[i], acc[m][i]);
                }
            }
        } else {
            static_assert(!T::FOLD, "the folded formats (Q2_K, Q3_K) take the integer mma");
#pragma unroll
            for (int hf = 0; hf < 16 / XB; ++hf) {
                uint2 xv[XB][NG];
                tc_load_x<XB, NG>(xv, xq, XB * hf);
#pragma unroll
                for (int s = XB * hf / T::GPS; s < XB * (hf + 1) / T::GPS; ++s) {
                    float part[NG][4];
#pragma unroll
                    for (int m = 0; m < NG; ++m)
#pragma unroll
                        for (int i = 0; i < 4; ++i) part[m][i] = 0.0f;
#pragma unroll
                    for (int u = 0; u < T::GPS; ++u) {
                        const int G = s * T::GPS + u, ul = G - XB * hf;
                        uint32_t a0, a1, a2, a3;
                        T::pairs(A, G, a0, a2);
                        T::pairs(B, G, a1, a3);
#pragma unroll
                        for (int m = 0; m < NG; ++m)
                            tc_mma(part[m], a0, a1, a2, a3, xv[ul][m].x, xv[ul][m].y);
                    }
                    float sa, ma, sbb, mb;
                    T::scale(A, s, sa, ma);
                    T::scale(B, s, sbb, mb);
#pragma unroll
                    for (int m = 0; m < NG; ++m) {
                        acc[m][0] = fmaf(sa, part[m][0], acc[m][0]);
                        acc[m][1] = fmaf(sa, part[m][1], acc[m][1]);
                        acc[m][2] = fmaf(sbb, part[m][2], acc[m][2]);
                        acc[m][3] = fmaf(sbb, part[m][3], acc[m][3]);
                    }
                    if (T::HAS_MIN) {
                        // b · S_{j,G} once per input column j: on its hi-piece column only.
#pragma unroll
                        for (int m = 0; m < NG; ++m)
#pragma unroll
                            for (int h = 0; h < 2; ++h) {
                                const int cc = 8 * m + 2 * t + h;
                                if (cc % CPI == 0 && cc / CPI < nc) {
#pragma unroll
                                    for (int u = 0; u < T::GPS; ++u) {
                                        const float Sg = __ldg(xs + 8 * (16 * sb + s * T::GPS + u) + cc / CPI);
                                        acc[m][h] = fmaf(ma, Sg, acc[m][h]);
                                        acc[m][2 + h] = fmaf(mb, Sg, acc[m][2 + h]);
                                    }
                                }
                            }
                    }
                }
            }
        }
    };
    if constexpr (TcPerWarp<F>::V) {
        // Per-warp stages (TcWarpStage): the warp's buffers, its super-blocks wid, wid + 8, ….
        typedef TcWarpStage<F, NS> WS;
        constexpr int WAHEAD =
            (TC_WFULL_PROLOGUE == 1 || (TC_WFULL_PROLOGUE == 2 && NG >= 2)) ? WS::NST : WS::NST - 1;
        uint4* wsm = sm + wid * WS::NST * (WS::BYTES / 16);
        const int nrun = wid < nsb ? (nsb - wid + TC_WARPS - 1) / TC_WARPS : 0;
        const uint32_t wa = tc_keep<NG>(g * (WS::PITCH * 16) +
            (uint32_t)(((uint64_t)min(row0 + g, rows - 1) * row_bytes + (uint64_t)wid * T::SB) & 15));
        const uint32_t wb = tc_keep<NG>((g + 8) * (WS::PITCH * 16) +
            (uint32_t)(((uint64_t)min(row0 + g + 8, rows - 1) * row_bytes + (uint64_t)wid * T::SB) & 15));
        TcWarpPlan<F, NS> plan;
        plan.template init<NG>(rows, row_bytes, row0, wid, lane, wsm);
#pragma unroll
        for (int j = 0; j < WAHEAD; ++j) {
            if (j < nrun) plan.template stage<NG == 1>(wsm, j, W, j, lane);
            tc_cp_commit();
        }
        griddep_wait();
#pragma unroll 1
        for (int j = 0; j < nrun; ++j) {
            if constexpr (WAHEAD < WS::NST) {
                const int jn = j + WS::NST - 1;
                if (jn < nrun) plan.template stage<NG == 1>(wsm, jn % WS::NST, W, jn, lane);
                tc_cp_commit();
            }
            tc_cp_wait<WS::NST - 1>();
            __syncwarp();
            const uint8_t* sbuf = (const uint8_t*)(wsm + (j % WS::NST) * (WS::BYTES / 16));
            sb_body(sbuf + wa, sbuf + wb, j * TC_WARPS + wid);
            // Every lane has read this buffer before any lane queues the next copy into it.
            __syncwarp();
            if constexpr (WAHEAD == WS::NST) {
                // The buffer just read takes stage j + NST.
                if (j + WS::NST < nrun) plan.template stage<NG == 1>(wsm, j % WS::NST, W, j + WS::NST, lane);
                tc_cp_commit();
            }
        }
        // The epilogue's sums alias the stage buffers of every warp.
        __syncthreads();
    } else {
        // Block stages (TcStage, TcPlan): the whole block copies each stage; a barrier per stage.
        // Prologue: stages 0 … NST − 2 in flight (empty groups keep the group count uniform).
        TcPlan<F> plan;
        plan.template init<NG>(rows, row_bytes, row0, sm);
#pragma unroll
        for (int j = 0; j < St::AHEAD; ++j) {
            if (j < nstage) plan.stage(sm, j, W, j);
            tc_cp_commit();
        }
        // The weights are immutable: their first stages are in flight before waiting for the
        // previous kernel (programmatic dependent launch, common.cuh), which wrote the activations.
        // (The next kernel's launch is allowed after the loop, below.)
        griddep_wait();
#pragma unroll 1
        for (int j = 0; j < nstage; ++j) {
            if constexpr (St::AHEAD < St::NST) {
                const int jn = j + St::NST - 1;
                if (jn < nstage)
                    plan.stage(sm, jn % St::NST, W, jn);
                tc_cp_commit();
            }
            tc_cp_wait<St::NST - 1>();
            __syncthreads();
            // Warp wid takes super-block 8j + wid: over the stages, wid, wid + 8, … in order (the
            // summation order of the unstaged kernel).
            const int sb = j * TC_WARPS + wid;
            if (sb < nsb) {
                const uint8_t* sbuf = (const uint8_t*)(sm + (j % St::NST) * (St::BYTES / 16));
                sb_body(sbuf + oa, sbuf + ob, sb);
            }
            if constexpr (TcSmem<F, NG>::OWN) {
                // (AHEAD = NST.) The buffer just read takes stage j + NST once every warp has
                // read it; the epilogue's sums have their own memory, so the last NST stages
                // need no barrier here.
                if (j + St::NST < nstage) {
                    __syncthreads();
                    plan.stage(sm, j % St::NST, W, j + St::NST);
                }
                tc_cp_commit();
            } else {
                // Every warp has read this buffer before it takes another stage and before the
                // epilogue (whose sums alias the buffers).
                __syncthreads();
                if constexpr (St::AHEAD == St::NST) {
                    // The buffer just read takes stage j + NST.
                    if (j + St::NST < nstage)
                        plan.stage(sm, j % St::NST, W, j + St::NST);
                    tc_cp_commit();
                }
            }
        }
    }
    // The next kernel may launch (programmatic dependent launch) once every block of this one
    // is past its super-block loop, not at its start: launched early, the next kernel's blocks
    // would sit waiting in the SM slots this grid's later waves need. Measured on the H200
    // (12B Q2_K mix, `runtime bench`, PDL `auto`, same call): 216.3 / 217.3 tok/s at batch 1
    // against 215.5 / 216.6 with the trigger at the kernel's start, batch 8 1289.0 / 1288.4
    // against 1281.5 / 1277.6; the graph attribution puts add_norm_prep's cost at 183 / 158 µs
    // per step against 350 / 342 (the launches after a matvec start sooner).
    // Measured and not kept (H100, 2026-12-06, 12B Q2_K mix, `runtime bench --decode 64`, one
    // binary, two alternating rounds): every mvtc/mvtcx launch requesting the next launch's first
    // weights into L2 (`prefetch.global.L2`, 128-byte lines: attn_output after the qkv launch,
    // ffn_gate/ffn_up after attn_output, ffn_down after them, the next layer's attn_v/attn_q
    // after ffn_down), shared by the launch's last SM-count blocks at their start, so that memory
    // would not idle during the launch's tail and the small kernels between matvecs: batch 1
    // 303.8 / 303.5 tok/s without → 297.6 / 296.9 with 4 MiB per launch, 291.1 / 290.0 with the
    // 4 MiB spread over every block, 279.8 / 279.0 with 16 MiB, 269.0 / 267.5 with 32 MiB (batch
    // 8 1763 / 1762 → 1720 / 1723, 1718 / 1719, 1625 / 1624, 1566 / 1561); graph attribution at
    // batch 1: the Q2_K matvecs 1378 → 1551 µs per step with 16 MiB. These kernels are bound by
    // their instruction issue, not by DRAM (Nsight Compute beside TC_WARPS above; the same
    // binaries decode 303.5–303.8 tok/s at batch 1 on the H100, B_read 3.15 TB/s, and 315.4–315.5
    // on an H200, 4.59–4.60 TB/s), so bytes brought in early do not shorten them, and the extra
    // requests slowed them.
    griddep_launch();
#pragma unroll
    for (int m = 0; m < NG; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[wid][4 * m + i][lane] = acc[m][i];
    __syncthreads();
    // The runs of accumulator slot q (< 4·NG) of this tile in order, pairwise: (r0 + r1) + (r2 + r3) + …
    auto run_sum = [&](int q) {
        float v = 0.0f;
#pragma unroll
        for (int s2 = 0; s2 < TC_WARPS; s2 += 2) {
            const float a = red[s2][q][lane];
            v += (s2 + 1 < TC_WARPS) ? a + red[s2 + 1][q][lane] : a;
        }
        return v;
    };
    // Where slot q's column total goes in tot[column cc][row 0..15] (128·NG floats).
    auto tot_at = [&](int q) {
        const int m = q >> 2, i = q & 3;
        return (8 * m + 2 * t + (i & 1)) * 16 + g + 8 * (i >> 1);
    };
    // Output o = 16·j + rr: y[j, row0 + rr] = (hi + mid) + lo (two digits: hi + mid, digit 0 and
    // 1), the pieces' scales undone first (exact powers of two).
    auto write_out = [&](const float* tot, int o) {
        const int j = o >> 4, rr = o & 15, r = row0 + rr;
        const float hv = tot[(CPI * j) * 16 + rr], mv = tot[(CPI * j + 1) * 16 + rr];
        typedef TcOut<T::SUB> O;
        float v = hv * O::HS + mv * O::MS;
        if constexpr (CPI == 3) v += tot[(CPI * j + 2) * 16 + rr] * O::LS;
        // Soft-capping fused (TcCapFused formats, cap > 0): softcap_f32's expression on the
        // value it would have read, so the same bits as the separate launch.
        if constexpr (TcCapFused<F>::V) {
            if (cap > 0.0f) v = cap * tanhf(v / cap);
        }
        if (r < rows) y[(uint64_t)j * rows + r] = v;
    };
#if TC_EPI_SPLIT
    {
        // Warp w sums slots q = w, w + 8, … (< 4·NG): the same sums as one warp taking every q
        // (TC_EPI_SPLIT 0), spread so that the block's last steps are one or two slots per warp,
        // not 4·NG in one.
        constexpr int QPW = (4 * NG + TC_WARPS - 1) / TC_WARPS;
        float v[QPW];
#pragma unroll
        for (int u = 0; u < QPW; ++u) {
            const int q = wid + TC_WARPS * u;
            v[u] = q < 4 * NG ? run_sum(q) : 0.0f;
        }
        // Every run is read before the column totals overwrite warp 0's slot.
        __syncthreads();
        float* tot = &red[0][0][0];
#pragma unroll
        for (int u = 0; u < QPW; ++u) {
            const int q = wid + TC_WARPS * u;
            if (q < 4 * NG) tot[tot_at(q)] = v[u];
        }
        __syncthreads();
        // One output per thread.
        for (int o = threadIdx.x; o < 16 * nc; o += 32 * TC_WARPS) write_out(tot, o);
    }
#else
    if (wid == 0) {
        float v[4 * NG];
#pragma unroll
        for (int q = 0; q < 4 * NG; ++q) v[q] = run_sum(q);
        __syncwarp();
        // Column totals into this warp's slot.
        float* tot = &red[wid][0][0];
#pragma unroll
        for (int q = 0; q < 4 * NG; ++q) tot[tot_at(q)] = v[q];
        __syncwarp();
        for (int o = lane; o < 16 * nc; o += 32) write_out(tot, o);
    }
#endif
#endif
}

// mvtc_<fmt>_<NG>(W, xp, xs, y, rows, K, row_bytes, nc, W2, y2, rows2, cap): y = W·x and, in the
// same launch, y2 = W2·x (same format and K; rows2 = 0 for none), each output soft-capped to
// cap·tanh(v / cap) when cap > 0 and F is a TcCapFused format (§9's final soft-capping, fused for
// the head: the expression of activation.cu's softcap_f32, so the same bits as that launch after
// this one; other formats ignore cap), for nc inputs with
// NG = ceil(TcCols<F>·nc / 8) mma column groups (host: kernels::mvtc_kernel(fmt, nc, wide),
// kernels::tc_col_groups; NG may exceed it: the extra columns are computed, never written); the wide
// variants mvtc_<fmt>_1w and mvtc_<fmt>_3w (TcWide) take the same arguments and give the same
// bits. One 16-row tile per block; grid ceil(rows / 16) + ceil(rows2 / 16).
#define MVTC_ENTRY_V(NAME, F, NG, SUFFIX, MINB, XBV)                                        \
    extern "C" __global__ void __launch_bounds__(32 * TC_WARPS, MINB)                        \
        mvtc_##NAME##_##NG##SUFFIX(                                                          \
        const uint8_t* __restrict__ W, const uint32_t* __restrict__ xp,                      \
        const float* __restrict__ xs, float* __restrict__ y, int rows, int K,                \
        uint64_t row_bytes, int nc, const uint8_t* __restrict__ W2, float* __restrict__ y2,  \
        int rows2, float cap) {                                                              \
        if constexpr (Tc<F>::OK) {                                                           \
            constexpr int XB = XBV;                                                          \
            constexpr bool DYN = TcDynSmem<F, NG>::ON;                                       \
            __shared__ uint4 sms[DYN ? 1 : TcSmem<F, NG>::BYTES / 16];                       \
            extern __shared__ uint4 tc_dyn[];                                                \
            uint4* sm = sms;                                                                 \
            if constexpr (DYN) {                                                             \
                sm = tc_dyn;                                                                 \
                if (tc_dyn_smem_size() < (uint32_t)TcDynSmem<F, NG>::BYTES) __trap();        \
            }                                                                                \
            constexpr int NS = DYN ? TC_WNST : 0;                                            \
            const int ctas = (rows + 15) >> 4;                                               \
            if ((int)blockIdx.x < ctas)                                                      \
                mvtc_body<F, NG, XB, NS>(W, xp, xs, y, rows, K, row_bytes, nc, blockIdx.x,   \
                                         sm, cap);                                           \
            else                                                                             \
                mvtc_body<F, NG, XB, NS>(W2, xp, xs, y2, rows2, K, row_bytes, nc,            \
                                         blockIdx.x - ctas, sm, cap);                        \
        }                                                                                    \
    }
#define MVTC_ENTRY(NAME, F, NG) MVTC_ENTRY_V(NAME, F, NG, , (TcMinB<F, NG>::V), (TcXb<F, NG>::V))
#define MVTC_ENTRY_W(NAME, F, NG)                                                            \
    MVTC_ENTRY_V(NAME, F, NG, w, (TcWide<F, NG>::MINB), (TcWide<F, NG>::XB))
#define MVTC_KERNEL(NAME, F)                                                                 \
    MVTC_ENTRY(NAME, F, 1) MVTC_ENTRY(NAME, F, 2) MVTC_ENTRY(NAME, F, 3) MVTC_ENTRY_W(NAME, F, 1) \
    MVTC_ENTRY_W(NAME, F, 3)

FOR_EACH_FORMAT(MVTC_KERNEL)

// mvtcx_<fmt>_<g>_<NG>[w](W, xp, xs, y, rows, K, row_bytes, nc, W2, y2, rows2, W3, y3, rows3,
// row_bytes3): the paired launch of mvtc_<fmt>_<NG>[w] (y = W·x, y2 = W2·x, format F) plus
// y3 = W3·x for a third matrix of another format G (same K) in the same launch — attn_q, attn_k
// and a higher-precision attn_v (llama.cpp's mixes) in one launch instead of two, so attn_v's
// tiles do not wait for the q/k launch to drain. Blocks 0 … ceil(rows3 / 16) − 1 take W3's tiles
// (mvtc_body<G, NG>, G's XB), the rest W's and W2's as in mvtc_<fmt>_<NG>[w]; every tile's sums
// are those of its format's own kernel, bit for bit. The launch bound (MINB) is F's kernel's.
// Measured (H200, 2026-12-03, 12B shapes, Q2_K q/k + Q3_K v, K 3840): 10.38 µs at n = 1 against
// 7.54 + 4.79 µs for the two launches, 15.83 against 9.83 + 6.86 at n = 8 (`runtime mv-bench
// --case attn`); the Q2_K-mix decode step 4265–4276 → 4198–4214 µs at batch 1 and 5830–5870 →
// 5755–5775 µs at batch 8 (`runtime bench`, graph_attribution's full step, three runs each).
// Instantiated for the pairs of MVTCX_PAIRS (kernels::TC_THIRD) in F's per-format module
// (TcInModule; empty elsewhere).
#ifdef MODULE_FMT
template <typename F> struct TcInModule { enum { V = 0 }; };
template <> struct TcInModule<MODULE_FMT> { enum { V = 1 }; };
#else
template <typename F> struct TcInModule { enum { V = 1 }; };
#endif
#define MVTCX_ENTRY_V(NAME, F, GNAME, G, NG, SUFFIX, MINB, XBF, XBG)                        \
    extern "C" __global__ void __launch_bounds__(32 * TC_WARPS, MINB)                        \
        mvtcx_##NAME##_##GNAME##_##NG##SUFFIX(                                               \
        const uint8_t* __restrict__ W, const uint32_t* __restrict__ xp,                      \
        const float* __restrict__ xs, float* __restrict__ y, int rows, int K,                \
        uint64_t row_bytes, int nc, const uint8_t* __restrict__ W2, float* __restrict__ y2,  \
        int rows2, const uint8_t* __restrict__ W3, float* __restrict__ y3, int rows3,        \
        uint64_t row_bytes3) {                                                               \
        if constexpr (Tc<F>::OK && Tc<G>::OK && TcInModule<F>::V) {                          \
            constexpr int B0 = TcSmem<F, NG>::BYTES, B1 = TcSmem<G, NG>::BYTES;              \
            __shared__ uint4 sm[(B0 > B1 ? B0 : B1) / 16];                                   \
            const int c3 = (rows3 + 15) >> 4, ctas = (rows + 15) >> 4;                       \
            const int b = (int)blockIdx.x;                                                   \
            if (b < c3)                                                                      \
                mvtc_body<G, NG, XBG>(W3, xp, xs, y3, rows3, K, row_bytes3, nc, b, sm, 0.0f); \
            else if (b - c3 < ctas)                                                          \
                mvtc_body<F, NG, XBF>(W, xp, xs, y, rows, K, row_bytes, nc, b - c3, sm, 0.0f); \
            else                                                                             \
                mvtc_body<F, NG, XBF>(W2, xp, xs, y2, rows2, K, row_bytes, nc,               \
                                      b - c3 - ctas, sm, 0.0f);                              \
        }                                                                                    \
    }
#define MVTCX_ENTRY(NAME, F, GNAME, G, NG)                                                   \
    MVTCX_ENTRY_V(NAME, F, GNAME, G, NG, , (TcMinB<F, NG>::V), (TcXb<F, NG>::V), (TcXb<G, NG>::V))
#define MVTCX_ENTRY_W(NAME, F, GNAME, G, NG)                                                 \
    MVTCX_ENTRY_V(NAME, F, GNAME, G, NG, w, (TcWide<F, NG>::MINB), (TcWide<F, NG>::XB),     \
                  (TcWide<G, NG>::XB))
#define MVTCX_KERNEL(NAME, F, GNAME, G)                                                      \
    MVTCX_ENTRY(NAME, F, GNAME, G, 1) MVTCX_ENTRY(NAME, F, GNAME, G, 2)                      \
    MVTCX_ENTRY(NAME, F, GNAME, G, 3) MVTCX_ENTRY_W(NAME, F, GNAME, G, 1)                    \
    MVTCX_ENTRY_W(NAME, F, GNAME, G, 3)
// (first format, third format) pairs with a mvtcx kernel: kernels::TC_THIRD, the same list.
#define MVTCX_PAIRS(X) \
    X(q2_k, FmtQ2_K, q3_k, FmtQ3_K) X(q4_k, FmtQ4_K, q5_k, FmtQ5_K) X(q4_k, FmtQ4_K, q6_k, FmtQ6_K)
MVTCX_PAIRS(MVTCX_KERNEL)
