// attention.cu — causal / sliding-window GQA attention over the per-layer KV cache.
// Spec: spec/gemma4-text.md §4.5 (scores = q·k, scaling 1.0, softmax, o = Σ prob·v; query head
// h reads KV head h / (nh / nkv)), §4.6 (allowed keys p_k ≤ p_q, and p_q − p_k < W on sliding
// layers), §4.8 (reuse layers pass their store layer's cache); spec/gemma4-assistant-mtp.md §2.2,
// §2.5 (drafter queries over an explicit range of target rows), §6.2 (ring storage).
//
// Cache layout (runtime/src/forward.rs KvCache): kc, vc f32 [S, rows, nkv, d], slot-major;
// key position u of slot s lives at row (s·rows + u mod rows). rows = ctx on full-attention
// layers (u < ctx, so row u: linear), rows = W + CHUNK_ROWS on sliding layers (a ring). The
// host guarantees that every key a launch reads is still held (n ≤ rows, no wrap-over), so the
// kernels only change where a key is read, never which keys or in which order: results are
// bitwise those of a linear cache.
//
// attention_f32(q, kc, vc, slot, pos, out, nh, nkv, d, rows, window):
//   q   f32 [T, nh, d] (normed, rotated queries);
//   kc, vc f32 [S, rows, nkv, d]: the cache of the layer attended to (its own or, on a reuse
//   layer, the store layer's; `rows` is that storage's rows per slot);
//   slot, pos i32 [T]: the cache slot and absolute position of each query row (its own K/V and
//   every earlier visible position of that slot are already in the cache);
//   out f32 [T, nh, d];  window: W on sliding layers, 0 = full causal.
// attention_rows_f32(q, kc, vc, slot, lo, cnt, out, nh, nkv, d, rows): the same over an explicit
//   key range per query row: keys at positions lo[t] … lo[t] + cnt[t] − 1 of slot[t] (the MTP
//   drafter's visible rows S_τ(p), which exclude the query's own position). 1 ≤ cnt[t] ≤ rows.
// Launch: grid (nh, T, 1), block (128,1,1), dynamic shared memory ATT_SMEM_BYTES(span) =
// (round_up(span, 4) + 4)·4 bytes where span = number of visible keys of the widest row (host
// computes it; kernels::attention_smem_bytes). The padding is required: the output loop reads the
// scores 4 at a time and ptxas merges the ≤ 3 scalar reads of its remainder into one vector read
// that may extend up to 3 floats past the last score (compute-sanitizer memcheck flagged a
// 12-byte shared read past a 1-score allocation); the values read there are never used.
// Arithmetic (f32): each score is a warp dot product (lane-strided fma chain + butterfly);
// softmax exp(s − max) with the block max, probabilities e/Σe (block-reduced Σ), then every
// output dim is Σ_u prob_u·v_u in key order (one fma chain per dim, continued unchanged across
// the ring's wrap point).

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reduction (sum if is_max false); every thread gets the result.
static __device__ __forceinline__ float block_reduce(float v, bool is_max, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float r = lane < nw ? red[lane] : (is_max ? -__int_as_float(0x7f800000) : 0.0f);
        r = is_max ? warp_max(r) : warp_sum(r);
        if (lane == 0) red[0] = r;
    }
    __syncthreads();
    return red[0];
}

// One (head, row) block: scores of query qh against the n keys at positions lo … lo + n − 1 of
// the slot whose rows start at cache row `sbase` (= slot·rows), position u at row u mod rows
// (n ≤ rows: the range wraps at most once), softmax, weighted sum of values into o.
static __device__ __forceinline__ void attend_block(const float* __restrict__ qh,
                                                    const float* __restrict__ kc,
                                                    const float* __restrict__ vc, uint64_t sbase,
                                                    int lo, int n, int rows, int nkv, int g, int d,
                                                    float* __restrict__ o, float* sc, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int r0 = lo % rows;                 // ring row of the first key
    const int n1 = min(n, rows - r0);         // keys before the wrap point
    for (int i = wid; i < n; i += nw) {
        const int r = i < n1 ? r0 + i : i - n1;
        const float* kr = kc + ((sbase + r) * nkv + g) * d;
        float s = 0.0f;
        for (int j = lane; j < d; j += 32) s = fmaf(qh[j], kr[j], s);
        s = warp_sum(s);
        if (lane == 0) sc[i] = s;
    }
    __syncthreads();
    float m = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, sc[i]);
    m = block_reduce(m, true, red);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(sc[i] - m);
        sc[i] = e;
        sum += e;
    }
    sum = block_reduce(sum, false, red);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sc[i] = sc[i] / sum;
    __syncthreads();
    const uint64_t stride = (uint64_t)nkv * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        // One fma chain in key order: keys 0 … n1 − 1 (rows r0 …), then n1 … n − 1 (rows 0 …).
        float acc = 0.0f;
        const float* vr = vc + ((sbase + r0) * nkv + g) * d + j;
        for (int i = 0; i < n1; ++i) acc = fmaf(sc[i], vr[i * stride], acc);
        const float* vw = vc + (sbase * nkv + g) * d + j;
        for (int i = n1; i < n; ++i) acc = fmaf(sc[i], vw[(i - n1) * stride], acc);
        o[j] = acc;
    }
}

extern "C" __global__ void attention_f32(const float* __restrict__ q, const float* __restrict__ kc,
                                         const float* __restrict__ vc, const int* __restrict__ slot,
                                         const int* __restrict__ pos, float* __restrict__ out,
                                         int nh, int nkv, int d, int rows, int window) {
    extern __shared__ float sc[];
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int p = pos[t];
    const int lo = (window > 0 && p + 1 > window) ? p + 1 - window : 0;
    const int n = p + 1 - lo;
    const int g = h / (nh / nkv);
    const float* qh = q + ((uint64_t)t * nh + h) * d;
    const uint64_t sbase = (uint64_t)slot[t] * rows;
    attend_block(qh, kc, vc, sbase, lo, n, rows, nkv, g, d, out + ((uint64_t)t * nh + h) * d, sc,
                 red);
}

extern "C" __global__ void attention_rows_f32(const float* __restrict__ q,
                                              const float* __restrict__ kc,
                                              const float* __restrict__ vc,
                                              const int* __restrict__ slot,
                                              const int* __restrict__ lo,
                                              const int* __restrict__ cnt, float* __restrict__ out,
                                              int nh, int nkv, int d, int rows) {
    extern __shared__ float sc[];
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int g = h / (nh / nkv);
    const float* qh = q + ((uint64_t)t * nh + h) * d;
    const uint64_t sbase = (uint64_t)slot[t] * rows;
    attend_block(qh, kc, vc, sbase, lo[t], cnt[t], rows, nkv, g, d,
                 out + ((uint64_t)t * nh + h) * d, sc, red);
}
