// reduce.cu — argmax over logit rows, a read-bandwidth probe (sum), and a fill (buffer poisoning).

// Is (v, i) better than (b, j)? Larger value wins; NaN beats any number (so a NaN is surfaced,
// never hidden); equal values: lower index wins.
static __device__ __forceinline__ bool am_better(float v, int i, float b, int j) {
    const bool vn = isnan(v), bn = isnan(b);
    if (vn != bn) return vn;
    if (vn && bn) return i < j;
    return v > b || (v == b && i < j);
}

// argmax_f32(x, idx, val, n): x f32 [rows, n]; idx i32 [rows], val f32 [rows].
// Launch: grid (rows,1,1), block (1024,1,1) (any multiple of 32 ≤ 1024 works).
extern "C" __global__ void argmax_f32(const float* __restrict__ x, int* idx, float* val, int n) {
    GRIDDEP_ENTRY();
    __shared__ float sv[32];
    __shared__ int si[32];
    const float* xr = x + (uint64_t)blockIdx.x * n;
    float bv = -__int_as_float(0x7f800000);
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (am_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) { sv[wid] = bv; si[wid] = bi; }
    __syncthreads();
    if (wid == 0) {
        bv = lane < nw ? sv[lane] : -__int_as_float(0x7f800000);
        bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if (lane == 0) { idx[blockIdx.x] = bi; val[blockIdx.x] = bv; }
    }
}

// topk_f32(x, n, mask, k, part, cnt, out): per row of x f32 [rows, n] the k ≤ TOPK_MAX largest
// values over ids i with mask[i] == 0 (mask u8 [n]: the model's suppressed ids; null = none),
// ordered by value descending, lower id first on exact ties (reference::model::logits::top_k);
// non-finite values never enter the list and are counted. out i32 [rows, 2·TOPK_MAX + 1]: ids at
// [0, k), value bits at [TOPK_MAX, TOPK_MAX + k) (missing entries: id −1), the non-finite count
// at [2·TOPK_MAX].
// Two levels in one launch: block b of a row (grid y = nb = kernels::topk_blocks(n) ≤
// TOPK_BLOCKS_MAX) takes the slices b, b + nb, … of TOPK_SLICE consecutive ids (each thread
// TOPK_PER_THREAD ids of a slice, their loads issued together); each thread keeps a sorted
// top-TOPK_MAX list of its ids (registers, fully unrolled bubble insertion), the block takes k
// rounds of a block arg-best over the list heads and writes its top-k and non-finite count to
// part i32 [rows, TOPK_BLOCKS_MAX, 2·TOPK_MAX + 1] (the layout of out; missing entries: id
// 0x7fffffff). The row's last block to finish (count cnt u32 [rows], zero before the launch and
// left zero) merges the nb·k candidates the same way. A slice's top-k holds every member of the
// row's top-k that lies in it, and the order is total, so the result is the one-pass top-k.
// Launch: grid (rows, topk_blocks(n), 1), block (TOPK_THREADS,1,1).
// topk1_f32: the same kernel, arguments, layouts and result for k = 1 (kernels::topk_kernel: greedy
// decode), with one-entry lists instead of TOPK_MAX: the 16-step insertion into each thread's
// list (every one of its first 16 ids goes in) is most of topk_f32's work, 8 rows × 262144 ids
// at batch-8 decode.
#define TOPK_MAX 16
#define TOPK_THREADS 256
#define TOPK_PER_THREAD 8
#define TOPK_SLICE (TOPK_THREADS * TOPK_PER_THREAD)
#define TOPK_BLOCKS_MAX 128
#define TOPK_STRIDE (2 * TOPK_MAX + 1)
static __device__ __forceinline__ bool tk_better(float v, int i, float b, int j) {
    return v > b || (v == b && i < j);
}
// Inserts (v, i) into the sorted list (lv, li) of KM entries if it beats the last entry.
template <int KM>
static __device__ __forceinline__ void tk_insert(float (&lv)[KM], int (&li)[KM], float v, int i) {
    if (!tk_better(v, i, lv[KM - 1], li[KM - 1])) return;
    float cv = v;
    int ci = i;
#pragma unroll
    for (int j = 0; j < KM; ++j) {
        if (tk_better(cv, ci, lv[j], li[j])) {
            const float tv = lv[j]; const int ti = li[j];
            lv[j] = cv; li[j] = ci; cv = tv; ci = ti;
        }
    }
}
// k rounds of a block arg-best over the threads' list heads (the owner pops its head); thread 0
// writes entry r to o[r] (id, or `missing`) and o[TOPK_MAX + r] (value bits, 0 when missing).
// k ≤ KM.
template <int KM>
static __device__ __forceinline__ void tk_block_emit(float (&lv)[KM], int (&li)[KM], int k,
                                                     int* o, int missing, float* sv, int* si) {
    const float NEG = -__int_as_float(0x7f800000);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int r = 0; r < k; ++r) {
        float bv = lv[0];
        int bi = li[0];
#pragma unroll
        for (int s = 16; s > 0; s >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, s);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, s);
            if (tk_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        __syncthreads();
        if (lane == 0) { sv[wid] = bv; si[wid] = bi; }
        __syncthreads();
        bv = sv[0]; bi = si[0];
        for (int w = 1; w < nw; ++w)
            if (tk_better(sv[w], si[w], bv, bi)) { bv = sv[w]; bi = si[w]; }
        if (threadIdx.x == 0) {
            const bool ok = bi != 0x7fffffff;
            o[r] = ok ? bi : missing;
            o[TOPK_MAX + r] = ok ? __float_as_int(bv) : 0;
        }
        if (li[0] == bi && bi != 0x7fffffff) {  // the owner pops its head
#pragma unroll
            for (int j = 0; j + 1 < KM; ++j) { lv[j] = lv[j + 1]; li[j] = li[j + 1]; }
            lv[KM - 1] = NEG; li[KM - 1] = 0x7fffffff;
        }
    }
}
// Block sum of an int (every thread gets it).
static __device__ __forceinline__ int tk_block_sum(int b, int* sbad) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) b += __shfl_xor_sync(0xffffffffu, b, s);
    __syncthreads();
    if (lane == 0) sbad[wid] = b;
    __syncthreads();
    int tot = 0;
    for (int w = 0; w < nw; ++w) tot += sbad[w];
    return tot;
}
// The body of topk_f32 (KM = TOPK_MAX) and topk1_f32 (KM = 1): lists of KM entries, k ≤ KM.
template <int KM>
static __device__ __forceinline__ void
    topk_body(const float* __restrict__ x, int n, const uint8_t* __restrict__ mask, int k,
              int* __restrict__ part, unsigned* __restrict__ cnt, int* __restrict__ out) {
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ int sbad[32];
    __shared__ int last;
    const float NEG = -__int_as_float(0x7f800000);
    const int row = blockIdx.x, b = blockIdx.y, nb = gridDim.y;
    const float* xr = x + (uint64_t)row * n;
    float lv[KM];
    int li[KM];
#pragma unroll
    for (int j = 0; j < KM; ++j) { lv[j] = NEG; li[j] = 0x7fffffff; }
    int bad = 0;
    for (int s0 = b * TOPK_SLICE; s0 < n; s0 += nb * TOPK_SLICE) {
        float v[TOPK_PER_THREAD];
#pragma unroll
        for (int u = 0; u < TOPK_PER_THREAD; ++u) {
            const int i = s0 + u * TOPK_THREADS + (int)threadIdx.x;
            v[u] = i < n ? xr[i] : NEG;
        }
#pragma unroll
        for (int u = 0; u < TOPK_PER_THREAD; ++u) {
            const int i = s0 + u * TOPK_THREADS + (int)threadIdx.x;
            if (i >= n) continue;
            if (!isfinite(v[u])) { ++bad; continue; }
            if (!tk_better(v[u], i, lv[KM - 1], li[KM - 1])) continue;
            if (mask != nullptr && mask[i]) continue;
            tk_insert(lv, li, v[u], i);
        }
    }
    int* pb = part + ((uint64_t)row * TOPK_BLOCKS_MAX + b) * TOPK_STRIDE;
    const int tot = tk_block_sum(bad, sbad);
    if (threadIdx.x == 0) pb[2 * TOPK_MAX] = tot;
    tk_block_emit(lv, li, k, pb, 0x7fffffff, sv, si);
    // The row's last block merges (the release/acquire pattern of attention_f32's splits).
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        last = atomicAdd(&cnt[row], 1u) == (unsigned)(nb - 1);
        if (last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
    if (!last) return;
#pragma unroll
    for (int j = 0; j < KM; ++j) { lv[j] = NEG; li[j] = 0x7fffffff; }
    const int* prow = part + (uint64_t)row * TOPK_BLOCKS_MAX * TOPK_STRIDE;
    int nbad = 0;
    for (int c = threadIdx.x; c < nb * k; c += blockDim.x) {
        const int bb = c / k, r = c - bb * k;
        const int id = __ldcg(prow + bb * TOPK_STRIDE + r);
        const float v = __int_as_float(__ldcg(prow + bb * TOPK_STRIDE + TOPK_MAX + r));
        if (id != 0x7fffffff) tk_insert(lv, li, v, id);
    }
    for (int bb = threadIdx.x; bb < nb; bb += blockDim.x) nbad += __ldcg(prow + bb * TOPK_STRIDE + 2 * TOPK_MAX);
    int* o = out + (uint64_t)row * TOPK_STRIDE;
    const int all_bad = tk_block_sum(nbad, sbad);
    if (threadIdx.x == 0) {
        o[2 * TOPK_MAX] = all_bad;
        cnt[row] = 0u;  // ready for the next launch
    }
    tk_block_emit(lv, li, k, o, -1, sv, si);
}
extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_f32(const float* __restrict__ x, int n, const uint8_t* __restrict__ mask, int k,
             int* __restrict__ part, unsigned* __restrict__ cnt, int* __restrict__ out) {
    GRIDDEP_ENTRY();
    topk_body<TOPK_MAX>(x, n, mask, k, part, cnt, out);
}
extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk1_f32(const float* __restrict__ x, int n, const uint8_t* __restrict__ mask, int k,
              int* __restrict__ part, unsigned* __restrict__ cnt, int* __restrict__ out) {
    GRIDDEP_ENTRY();
    topk_body<1>(x, n, mask, k, part, cnt, out);
}

// sum_f32x4(x, n4, partial): read-only bandwidth probe. x = n4 float4 values; partial f32
// [gridDim.x] gets each block's sum. Grid-stride loop, 4 loads in flight per iteration.
extern "C" __global__ void sum_f32x4(const float4* __restrict__ x, uint64_t n4, float* partial) {
    GRIDDEP_ENTRY();
    __shared__ float red[32];
    float s = 0.0f;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 a = __ldg(x + i), b = __ldg(x + i + stride), c = __ldg(x + i + 2 * stride),
               d = __ldg(x + i + 3 * stride);
        s += ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) +
             (((c.x + c.y) + (c.z + c.w)) + ((d.x + d.y) + (d.z + d.w)));
    }
    for (; i < n4; i += stride) {
        float4 a = __ldg(x + i);
        s += (a.x + a.y) + (a.z + a.w);
    }
    s = warp_sum(s);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[wid] = s;
    __syncthreads();
    if (wid == 0) {
        float v = lane < nw ? red[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) partial[blockIdx.x] = v;
    }
}

// fill_u32(p, n, v): p[i] = v for i < n (poisoning outputs with a NaN pattern, or filling).
extern "C" __global__ void fill_u32(uint32_t* p, uint64_t n, uint32_t v) {
    GRIDDEP_ENTRY();
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = v;
}

// spin_ns(ns): one thread busy-waits `ns` nanoseconds (%globaltimer). Used by benchmarks to
// keep the GPU busy while the host queues the launches to be timed, so that host launch cost
// is not counted as kernel time.
extern "C" __global__ void spin_ns(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
