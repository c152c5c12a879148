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
                             float* __restrict__ y, int rows, int K, uint64_t row_bytes) {   \
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
        uint64_t row_bytes) {                                                                \
        const int j = blockIdx.y;                                                            \
        matvec_body<1, F>(W + (uint64_t)ids[j] * expert_bytes,                               \
                          x + (uint64_t)(j / x_div) * K, y + (uint64_t)j * rows, rows, K,    \
                          row_bytes);                                                        \
    }

FOR_EACH_FORMAT(MATVEC_IDS_KERNEL)
