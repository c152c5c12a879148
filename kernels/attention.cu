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
// attention_f32(q, kc, vc, slot, pos, out, nh, nkv, d, rows, window, part, cnt):
//   q   f32 [T, nh, d] (normed, rotated queries);
//   kc, vc f32 [S, rows, nkv, d]: the cache of the layer attended to (its own or, on a reuse
//   layer, the store layer's; `rows` is that storage's rows per slot);
//   slot, pos i32 [T]: the cache slot and absolute position of each query row (its own K/V and
//   every earlier visible position of that slot are already in the cache);
//   out f32 [T, nh, d];  window: W on sliding layers, 0 = full causal;
//   part f32 [T, nh, ATT_SPLIT_MAX, d + 2] scratch; cnt u32 [T, nh], zero before the launch and
//   left zero after it;
//   xp, xs, prep_rows: rows t < prep_rows (≤ 8; 0 = none; needs d % 16 == 0, and d % 256 == 0
//   when prep_kinds has the int8 digits: a head's digits share its 256-element blocks' exponents) of out are also
//   written into the tensor-core matvec's prep buffers (common.cuh tc_prep_quad_lanes, the bits
//   mvtc_prep would write for the o projection's input of K = nh·d) by their combining block;
//   prep_kinds: which of the bf16 pieces and int8 digits (common.cuh TC_PREP_PIECES /
//   TC_PREP_DIGITS).
//   A row that sees n keys is split into Z = att_splits(n) = min(ceil(n / 16), 32) blocks of CH = ceil(n / Z) keys
//   (flash-decoding; Z and CH depend on n only): block z computes, over its keys, m_z = max s,
//   l_z = Σ e, e = exp(s − m_z), o_z = Σ e·v (key order); the row's last block to finish
//   (atomic count) combines, in split order, M = max m_z, w_z = exp(m_z − M),
//   L = Σ w_z·l_z, o = (Σ w_z·o_z) / L; with Z = 1 the one block writes (o_1 + 0) / l_1 itself (the
//   same bits, without the partials and the count).
//   Launch: grid (nh, T, att_splits(span)), block (128,1,1), dynamic shared memory
//   ATT_SMEM_BYTES(att_chunk_bound(span)) (span = visible keys of the widest row, or the window /
//   context for a launch valid at any position; blocks past a row's Z return at once).
// attention_rows_f32(q, kc, vc, slot, lo, cnt, out, nh, nkv, d, rows): one block per (head,
//   row) over an explicit key range per query row: keys at positions lo[t] … lo[t] + cnt[t] − 1
//   of slot[t] (the MTP drafter's visible rows S_τ(p), which exclude the query's own position),
//   1 ≤ cnt[t] ≤ rows; softmax exp(s − max) with the block max, probabilities e/Σe, then every
//   output dim Σ_u prob_u·v_u in key order. Launch: grid (nh, T, 1), block (128,1,1), dynamic
//   shared memory ATT_SMEM_BYTES(span).
// ATT_SMEM_BYTES(n) = (round_up(n, 4) + 4)·4 bytes (host: kernels::attention_smem_bytes). The
// padding is required: the output loop reads the scores 4 at a time and ptxas merges the ≤ 3
// scalar reads of its remainder into one vector read that may extend up to 3 floats past the
// last score (compute-sanitizer memcheck flagged a 12-byte shared read past a 1-score
// allocation); the values read there are never used.
// Arithmetic (f32): each score is a warp dot product (lane-strided fma chain + butterfly, the
// same whatever the split); block max and sums through fixed-shape reductions; the ring's wrap
// point changes only where a key is read. d ≤ 512 (4 output dims per thread).
// attention_d256_f32, attention_d512_f32: attention_f32 for d = 256 and d = 512 (Gemma-4's
// sliding and full head dims; same arguments, d must equal it) with the head dim and the block
// size as constants — each thread then holds d / 128 contiguous output dims, one vector load per
// key (weighted_values_vec). The same sums as attention_f32 (only which thread holds which output
// dim differs). Host: kernels::attention_kernel(d).

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

// Ring row of key i (0-based from the first visible position lo): keys before the wrap point
// (i < n1) are at rows r0 + i, the rest at rows i − n1.
static __device__ __forceinline__ int key_row(int i, int r0, int n1) { return i < n1 ? r0 + i : i - n1; }

// Scores q·k of keys k0 … k1 − 1 into sc[0 … k1 − k0): keys in batches of 4 per warp; each
// score is one lane-strided fma chain (dims lane, lane + 32, … in order) + butterfly, whatever
// the batch. The loads of 8 dims of q and of the 4 keys are issued together before their fmas
// (one memory round trip per 256 dims, not one per 32).
// DC: the head dim when known at compile time (0: d), BT: the block size likewise (0:
// blockDim.x) — the same sums, with the bounds checks of the dims folded away.
#define ATT_DU 8
template <int DC = 0, int BT = 0>
static __device__ __forceinline__ void key_scores(const float* __restrict__ qh,
                                                  const float* __restrict__ kc, uint64_t sbase,
                                                  int r0, int n1, int nkv, int g, int d_, int k0,
                                                  int k1, float* sc) {
    const int d = DC ? DC : d_;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (BT ? BT : blockDim.x) >> 5;
    for (int i0 = k0 + 4 * wid; i0 < k1; i0 += 4 * nw) {
        float s[4];
        const float* kr[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            s[u] = 0.0f;
            const int i = min(i0 + u, k1 - 1);  // keys past k1: a valid row, never summed
            kr[u] = kc + ((sbase + key_row(i, r0, n1)) * nkv + g) * d;
        }
        for (int j0 = lane; j0 < d; j0 += 32 * ATT_DU) {
            float qv[ATT_DU], kv[4][ATT_DU];
#pragma unroll
            for (int e = 0; e < ATT_DU; ++e) {
                const int j = j0 + 32 * e;
                qv[e] = j < d ? qh[j] : 0.0f;
#pragma unroll
                for (int u = 0; u < 4; ++u) kv[u][e] = j < d ? kr[u][j] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int e = 0; e < ATT_DU; ++e)
                    if (i0 + u < k1 && j0 + 32 * e < d) s[u] = fmaf(qv[e], kv[u][e], s[u]);
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const float v = warp_sum(s[u]);
            if (lane == 0 && i0 + u < k1) sc[i0 + u - k0] = v;
        }
    }
}

// acc[q] = Σ_i w_i · v_i[j] over keys k0 … k1 − 1 in key order, w_i = sc[i − k0], for the output
// dims j = threadIdx.x + blockDim.x·q (q < 4: d ≤ 4·blockDim.x); one fma chain per dim. The
// value loads of 8 keys are issued together before their fmas.
template <int DC = 0, int BT = 0>
static __device__ __forceinline__ void weighted_values(const float* __restrict__ vc, uint64_t sbase,
                                                       int r0, int n1, int nkv, int d_, int g,
                                                       int k0, int k1, const float* sc,
                                                       float (&acc)[4]) {
    const int d = DC ? DC : d_, bt = BT ? BT : blockDim.x;
    const uint64_t stride = (uint64_t)nkv * d;
    const float* vb = vc + (sbase * nkv + g) * d;
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[q] = 0.0f;
    for (int i0 = k0; i0 < k1; i0 += 8) {
        float v[8][4];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const float* vr = vb + (uint64_t)key_row(min(i0 + u, k1 - 1), r0, n1) * stride;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int j = threadIdx.x + q * bt;
                v[u][q] = j < d ? vr[j] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (i0 + u < k1) {
                const float w = sc[i0 + u - k0];
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int j = threadIdx.x + q * bt;
                    if (j < d) acc[q] = fmaf(w, v[u][q], acc[q]);
                }
            }
        }
    }
}

// weighted_values for a head dim known at compile time (DC, blocks of BT threads, VPT = DC / BT
// dims per thread, 1 … 4): thread t owns the contiguous dims VPT·t … VPT·t + VPT − 1, so each key
// is one vector load per thread and no dim is dead; the key's row address is one 32×32 → 64-bit
// multiply-add on the slot's base. The same sums: per dim one fma chain over the keys in order
// from +0 (only which thread holds which dim changes). acc[c] is dim VPT·threadIdx.x + c.
template <int N> struct VecF;
template <> struct VecF<1> { typedef float T; };
template <> struct VecF<2> { typedef float2 T; };
template <> struct VecF<4> { typedef float4 T; };
template <int DC, int BT>
static __device__ __forceinline__ void weighted_values_vec(const float* __restrict__ vc,
                                                           uint64_t sbase, int r0, int n1,
                                                           int nkv, int g, int k0, int k1,
                                                           const float* sc,
                                                           float (&acc)[DC / BT]) {
    constexpr int VPT = DC / BT;
    static_assert(VPT == 1 || VPT == 2 || VPT == 4, "one vector load per key");
    typedef typename VecF<VPT>::T V;
    const uint32_t stride_bytes = (uint32_t)nkv * DC * 4u;
    const char* vb = (const char*)(vc + (sbase * nkv + g) * DC + VPT * threadIdx.x);
#pragma unroll
    for (int c = 0; c < VPT; ++c) acc[c] = 0.0f;
    for (int i0 = k0; i0 < k1; i0 += 8) {
        V v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const uint32_t row = (uint32_t)key_row(min(i0 + u, k1 - 1), r0, n1);
            v[u] = *(const V*)(vb + (uint64_t)row * stride_bytes);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (i0 + u < k1) {
                const float w = sc[i0 + u - k0];
                const float* vf = (const float*)&v[u];
#pragma unroll
                for (int c = 0; c < VPT; ++c) acc[c] = fmaf(w, vf[c], acc[c]);
            }
        }
    }
}

// One (head, row) block over all n keys at positions lo … lo + n − 1 of the slot whose rows
// start at cache row `sbase` (= slot·rows), position u at row u mod rows (n ≤ rows: the range
// wraps at most once): scores, softmax (probabilities e/Σe), weighted sum of values into o.
static __device__ __forceinline__ void attend_block(const float* __restrict__ qh,
                                                    const float* __restrict__ kc,
                                                    const float* __restrict__ vc, uint64_t sbase,
                                                    int lo, int n, int rows, int nkv, int g, int d,
                                                    float* __restrict__ o, float* sc, float* red) {
    const int r0 = lo % rows;            // ring row of the first key
    const int n1 = min(n, rows - r0);    // keys before the wrap point
    key_scores(qh, kc, sbase, r0, n1, nkv, g, d, 0, n, sc);
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
    float acc[4];
    weighted_values(vc, sbase, r0, n1, nkv, d, g, 0, n, sc, acc);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int j = threadIdx.x + q * blockDim.x;
        if (j < d) o[j] = acc[q];
    }
}

// Key splits of a query row that sees n keys (flash-decoding): Z = min(ceil(n / 16), 32) blocks
// of CH = ceil(n / Z) consecutive keys (host: kernels::att_splits / att_chunk). A function of n
// only, so a row's sums never depend on the other rows of the launch.
// Measured and not kept (H200, 2026-12-04, `runtime bench --draft-format none`, one binary per
// variant, same call; decode tok/s at batch 1 / batch 8, and the graph attribution's attention µs
// per step at batch 1 / 8):
//   prompt 32:   16 keys 280.9–282.3 / 1527–1535 (attention 453–489 / 496–518); 8 keys
//                284.1–284.8 / 1505–1518; 32 keys 271.8–272.6 / 1489–1495; at most 16 splits
//                279.1–280.4 / 1523–1529.
//   prompt 512:  16 keys 249.2–249.7 / 1019–1021 (attention 918–938 / 3116–3129); 8 keys
//                248.3 / 1018; 32 keys 249.8 / 1096 (914 / 2568); at most 16 splits 243.7 / 991
//                (past 512 keys its chunks of 33–34 keys take the block-wide softmax below).
//   prompt 2048: 16 keys 225.0 / 785 (attention 1377 / 5487); at most 16 splits 205.9 / 673.
// Again (H100, 2026-12-06, one binary per variant, same call; the two-heads rule of
// runtime::forward::attention_pairs on; batch 1 / 4 / 8 tok/s): at most 64 splits is slower,
// prompt 2048 248.3 / 672.3 / 1011.0 → 229.9 / 602.6 / 934.6 (attention 924 → 1270 µs per step at
// batch 1); at most 16 splits: prompt 2048 248.9 / 663.4 / 1000.8 and 247.9 / 666.8 / 1004.9 →
// 249.0 / 708.6 / 1015.3 and 247.9 / 707.5 / 1029.8, prompt 1024 252.7 / 696.2 / 1049.3 → 254.0 /
// 733.8 / 1067.4, prompt 4096 235.6 / 620.6 / 915.8 → 235.7 / 647.9 / 916.8; at most 24 splits
// 249.8 / 664.4 / 991.9 at prompt 2048. At most 16 is faster at batch 4 there, but it changes
// the sums of every row past 256 keys, was slower on the H200 above, and was not run through
// the conformance and model checks: not taken.
// At long contexts attention is the largest cost at batch 8; each query head's block reads its
// KV head's rows itself (2 query heads per KV head on the 12B shapes).
// Measured and not kept (H100, 2026-12-06, `scripts/gpu/run.sh ab`, one binary, two rounds):
// G splits per block, each in its own group of 128 threads with named barriers, a row of ≤ G
// splits combined in shared memory (no partials in global memory, no count, no fences), more
// splits through `part` as here; the same bits (every `run.sh all` check passed with G = 4).
// 12B decode at batch 1 / 8 (tok/s) and the graph attribution's attention cost (µs per step):
//   this kernel   287.3 / 288.9, 1684 / 1708 (attention 430 / 444 at batch 1, 510 / 516 at 8);
//   G = 2         289.8 / 288.3, 1724 / 1710 (440 / 442, 466 / 487);
//   G = 4         289.5 / 291.1, 1600 / 1602 (498 / 504, 748 / 768: a row's splits on one SM).
// So the combine through global memory is not where a split's time goes at these lengths.
// Nor is the launch: qkv_post_f32 fused into this kernel for decode rows was slower
// (runtime forward.rs, at its launch). Where it goes (Nsight Compute, H100, 2026-12-06, one
// decode launch of the 12B bench at 33 keys — grid (16, 1, 3) — `--page source`): 13.5 µs at
// ncu's locked 1.59 GHz, of which the 48 SMs holding a block are active ~13.2k of 21.4k cycles;
// one warp per scheduler issuing every 7.1 cycles; ~1820 warp instructions per warp, of them
// weighted_values 923 (per key a 64-bit ring-row address and four predicated loads and fmas for
// the two live output dims of 4), the prologue before the wait 285 (integer divisions of the
// prefetch loop's indices and of the ring, the pos load), key_scores 288, the combine 218;
// stall samples long scoreboard 26 %, barrier 23 %, wait 23 %. So the split's time is its
// instruction chain at one warp per scheduler — fewer instructions per key (whole dims per
// thread, no dead dims, the row address once per key) is what would shorten it.
// Measured and not kept (H100, 2026-12-06, one binary, the committed kernel through
// GEMMA4_KERNEL_SRC): that change — key_scores, weighted_values and this kernel's body given the
// head dim and block size at compile time for d = 256 and 512 (each thread d / 128 contiguous
// output dims, one vector load and one 32×32 → 64-bit address multiply-add per key), chosen by a
// branch on d inside this one kernel, generic body for other d; the same sums (gpu-check's
// attention cases and every `run.sh all` check passed). The d = 256 launch above executed 900
// warp instructions per warp against 1820, yet ran slower: its stall samples were 54 % "no
// instruction" (3.6 % here; 354 samples against 306) — the kernel was 9504 SASS instructions,
// the d = 256 body starting 5.7k instructions in and run once per warp, so its warps waited on
// instruction fetch. 12B decode at batch 1 275.7 / 276.2 against 288.1 / 288.2 tok/s, batch 8
// 1654.7 / 1637.3 against 1704.8 / 1704.2; the graph attribution's attention cost at batch 1
// 617 / 612 against 438 / 440 µs per step. Separate entry points per head dim instead (below).
#define ATT_SPLIT_KEYS 16
#define ATT_MAX_D 512  // head_dim bound (kernels::ATTENTION_MAX_HEAD_DIM)
#define ATT_SPLIT_MAX 32
static __device__ __forceinline__ int att_splits(int n) {
    return min((n + ATT_SPLIT_KEYS - 1) / ATT_SPLIT_KEYS, ATT_SPLIT_MAX);
}

// attention_f32's body for head dim DC (0: any d ≤ 512), blocks of 128 threads.
template <int DC>
static __device__ __forceinline__ void attention_body(
    const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
    const int* __restrict__ slot, const int* __restrict__ pos, float* __restrict__ out, int nh,
    int nkv, int d_, int rows, int window, float* __restrict__ part, unsigned* __restrict__ cnt,
    uint32_t* __restrict__ xp, float* __restrict__ xs, int prep_rows, int prep_kinds) {
    constexpr int BT = 128;
    const int d = DC ? DC : d_;
    extern __shared__ float sc[];
    __shared__ float red[32];
    __shared__ int last;
    // Before waiting for the previous kernel (programmatic dependent launch): slot and pos are
    // host uploads, and the cache rows of this split's keys are only ever written by a kernel for
    // the current position, so their lines can be requested into L2 now (prefetch: no value is
    // read before the wait); the scores' and values' loads below then find them there.
    // Measured on the H200 (12B Q2_K mix, `runtime bench`, same call): 234.0 / 233.3 tok/s at
    // batch 1 against 226.1 / 226.3 without; the graph attribution's attention cost 489 / 483
    // against 623 / 620 µs per step; the same model-check maxima.
    const int h = blockIdx.x, t = blockIdx.y, z = blockIdx.z;
    const int p = pos[t];
    const int lo = (window > 0 && p + 1 > window) ? p + 1 - window : 0;
    const int n = p + 1 - lo;
    const int Z = att_splits(n), CH = (n + Z - 1) / Z;
    if (z >= Z) return;
    const int g = h / (nh / nkv);
    const uint64_t sbase = (uint64_t)slot[t] * rows;
    const int r0 = lo % rows, n1 = min(n, rows - r0);
    const int k0 = z * CH, k1 = min(n, k0 + CH);
    {
        const int lines = d >> 5;  // 128-byte lines of one key's row of this KV head
        for (int c = threadIdx.x; c < 2 * (k1 - k0) * lines; c += BT) {
            const int i = k0 + c / (2 * lines), rest = c % (2 * lines);
            const float* base = (rest < lines) ? kc : vc;
            const float* r = base + ((sbase + key_row(i, r0, n1)) * nkv + g) * d + 32 * (rest % lines);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(r));
        }
    }
    GRIDDEP_ENTRY();
    const float* qh = q + ((uint64_t)t * nh + h) * d;
    // This split: scores, m = max, e_i = exp(s_i − m), l = Σ e_i, o_z = Σ e_i · v_i.
    key_scores<DC, BT>(qh, kc, sbase, r0, n1, nkv, g, d, k0, k1, sc);
    __syncthreads();
    float m = -__int_as_float(0x7f800000);
    float l = 0.0f;
    if (k1 - k0 <= 32) {
        // A chunk of ≤ 32 keys (every chunk below 32 splits): warp 0 alone. The same bits as the
        // block reductions below: there only warp 0's lanes hold keys (thread i ↔ key i), the
        // other warps contribute −∞ to the max and +0 to the sum, and x + 0 = x, max(x, −∞) = x.
        if (threadIdx.x < 32) {
            const bool live = (int)threadIdx.x < k1 - k0;
            m = warp_max(live ? fmaxf(m, sc[threadIdx.x]) : m);  // fmaxf(−∞, s) as below
            const float e = live ? expf(sc[threadIdx.x] - m) : 0.0f;
            if (live) sc[threadIdx.x] = e;
            l = warp_sum(e);
            if (threadIdx.x == 0) {
                red[0] = m;
                red[1] = l;
            }
        }
        __syncthreads();
        m = red[0];
        l = red[1];
    } else {
        for (int i = threadIdx.x; i < k1 - k0; i += BT) m = fmaxf(m, sc[i]);
        m = block_reduce(m, true, red);
        for (int i = threadIdx.x; i < k1 - k0; i += BT) {
            const float e = expf(sc[i] - m);
            sc[i] = e;
            l += e;
        }
        l = block_reduce(l, false, red);
    }
    // acc[c]: output dim dim_of(c) of this thread (weighted_values_vec's contiguous dims when
    // the head dim is known, else weighted_values' dims threadIdx.x + c·BT).
    constexpr int NA = DC ? DC / BT : 4;
    float acc[NA];
    if constexpr (DC != 0)
        weighted_values_vec<DC, BT>(vc, sbase, r0, n1, nkv, g, k0, k1, sc, acc);
    else
        weighted_values<DC, BT>(vc, sbase, r0, n1, nkv, d, g, k0, k1, sc, acc);
    auto dim_of = [](int c) {
        return DC ? NA * (int)threadIdx.x + c : (int)threadIdx.x + c * BT;
    };
    float* o = out + ((uint64_t)t * nh + h) * d;
    __shared__ float ov[ATT_MAX_D];
    if (Z == 1) {
        // One split: the combine below would give M = m, w = exp(0) = 1, L = fma(1, l, 0) = l
        // and o = fma(1, o_z, 0) / L = (o_z + 0) / l, so the block writes that directly (the
        // same bits, +0 for a −0 sum included) without the partials, the count or a second pass.
#pragma unroll
        for (int c = 0; c < NA; ++c) {
            const int j = dim_of(c);
            if (DC || j < d) {
                const float r = (acc[c] + 0.0f) / l;
                o[j] = r;
                ov[j] = r;
            }
        }
    } else {
        const uint64_t ps = (uint64_t)d + 2;
        float* pb = part + ((uint64_t)t * nh + h) * ATT_SPLIT_MAX * ps;
#pragma unroll
        for (int c = 0; c < NA; ++c) {
            const int j = dim_of(c);
            if (DC || j < d) pb[z * ps + j] = acc[c];
        }
        if (threadIdx.x == 0) {
            pb[z * ps + d] = m;
            pb[z * ps + d + 1] = l;
        }
        // The last split of the row to finish combines them all (in split order, whichever is
        // last). The block's partial writes happen before thread 0's release (the barrier, then
        // one fence by thread 0, cumulative over what the barrier ordered); the last block's
        // acquire is the fence after its count.
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            last = atomicAdd(&cnt[(uint64_t)t * nh + h], 1u) == (unsigned)(Z - 1);
            if (last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
        }
        __syncthreads();
        if (!last) return;
        // The splits' (m_z, l_z) and this thread's partials of the first 8 splits (all its
        // output dims) in one round of loads; every thread then forms M, L and the weights
        // w_z = exp(m_z − M) in split order (the same bits whichever block combines). Measured
        // on the H200 (12B Q2_K mix, `runtime bench`, same call): 218.2 / 217.8 tok/s at batch 1
        // against 215.5 / 216.6 with the (m_z, l_z) loads first and the partials after, one
        // output dim at a time; the same model-check maxima.
        __shared__ float mz[ATT_SPLIT_MAX], lz[ATT_SPLIT_MAX];
        float pv[4][8];
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
            const int j = threadIdx.x + qq * BT;
#pragma unroll
            for (int u = 0; u < 8; ++u) pv[qq][u] = (j < d && u < Z) ? __ldcg(pb + u * ps + j) : 0.0f;
        }
        if ((int)threadIdx.x < Z) {
            mz[threadIdx.x] = __ldcg(pb + threadIdx.x * ps + d);
            lz[threadIdx.x] = __ldcg(pb + threadIdx.x * ps + d + 1);
        }
        __syncthreads();
        float M = -__int_as_float(0x7f800000);
        for (int zz = 0; zz < Z; ++zz) M = fmaxf(M, mz[zz]);
        float L = 0.0f;
        for (int zz = 0; zz < Z; ++zz) L = fmaf(expf(mz[zz] - M), lz[zz], L);
        // Σ_z w_z · o_z[j] in split order, per output dim j = threadIdx.x + qq·BT.
        float sacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int z0 = 0; z0 < Z; z0 += 8) {
            if (z0 > 0) {
#pragma unroll
                for (int qq = 0; qq < 4; ++qq) {
                    const int j = threadIdx.x + qq * BT;
#pragma unroll
                    for (int u = 0; u < 8; ++u)
                        pv[qq][u] = (j < d && z0 + u < Z) ? __ldcg(pb + (z0 + u) * ps + j) : 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                if (z0 + u < Z) {
                    const float w = expf(mz[z0 + u] - M);
#pragma unroll
                    for (int qq = 0; qq < 4; ++qq) sacc[qq] = fmaf(w, pv[qq][u], sacc[qq]);
                }
            }
        }
#pragma unroll
        for (int qq = 0; qq < 4; ++qq) {
            const int j = threadIdx.x + qq * BT;
            if (j < d) {
                const float r = sacc[qq] / L;
                o[j] = r;
                ov[j] = r;
            }
        }
        if (threadIdx.x == 0) cnt[(uint64_t)t * nh + h] = 0u;  // ready for the next launch
    }
    if (t < prep_rows) {
        // This head's 16-groups of row t into the tensor-core prep buffers (the o projection's
        // input, K = nh·d, d % 16 == 0; d % 256 == 0 for the digits): tc_prep_quad_lanes, one
        // quad per thread, warps 2i and 2i + 1 a 256-element block (the bits of
        // tc_prep_group and mvtc_prep; one thread per group before: 217.6 / 218.1 tok/s with
        // both changes against 218.2 / 217.8 with the combine's alone, the same within noise,
        // and a shorter chain).
        __syncthreads();
        // Quad qd = threadIdx.x + k·BT (4 consecutive lanes per 16-group).
        for (int qd0 = 0; qd0 < (d >> 2); qd0 += BT) {
            const int qd = qd0 + threadIdx.x;
            const bool live = qd < (d >> 2);
            float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (live) {
#pragma unroll
                for (int e = 0; e < 4; ++e) v[e] = ov[4 * qd + e];
            }
            tc_prep_quad_lanes(v, t, ((h * d) >> 4) + (qd >> 2), (nh * d) >> 4, xp, xs, live,
                               prep_kinds);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// attention_d256_h2_f32, attention_d512_h2_f32: QH = 2 query heads of one KV head per block (the
// heads h0 = QH·blockIdx.x … h0 + QH − 1, all reading KV head h0 / (nh / nkv); needs
// (nh / nkv) % QH == 0). Each key and value row is loaded once for the QH heads; every head's
// arithmetic is attention_f32's (its scores the same lane-strided chains and butterflies, its
// softmax the same reductions, its weighted sums the same per-dim chains in key order, its
// combine the same), so the bits are those of the one-head kernels. Split counters: the group's
// first head's cnt entry (the others stay zero). Launch: grid (nh / QH, T, att_splits(span)),
// block (128,1,1), dynamic shared memory QH · ATT_SMEM_BYTES(att_chunk_bound(span)) (head qh's
// scores at sc + qh · CHP, CHP = round_up(CH, 4) + 4 for the row's chunk CH).
// Host: runtime::forward::attention_launch takes them for chunks of ≥ 4 rows whose latest row
// sees ≥ 1024 keys (attention_pairs), where sharing the K/V loads pays for the halved grid: 12B
// decode at prompt 2048, batch 8, 922.0 → 1017.9 tok/s (attention 4452 → 3714 µs per step);
// with fewer rows or keys the one-head kernels are faster (batch 1 at prompt 2048 249.9 →
// 233.6 tok/s; batch 8 at prompt 32 1760.2 → 1726.9) (H100, 2026-12-06, `runtime bench`,
// GEMMA4_ATT_HEADS 1 against 2, one binary).
// Measured and not kept (H100, 2026-12-06, one binary, GEMMA4_ATT_QH_MAX 2 against 4): four heads
// per block on the full layers (attention_d512_h4_f32, 163 registers at 2 blocks per SM, no
// spill), 12B decode at prompt 2048: batch 8 1077.0 → 1082.1 tok/s (attention 3729 → 3528 µs per
// step), batch 4 752.4 → 738.0, batch 1 254.6 → 258.9 — within the runs' spread, for another
// entry point.

// key_scores for QH heads whose queries are contiguous (head qh at qh0 + qh·DC): each key row
// loaded once, then head qh's chain over it exactly as key_scores<DC, BT>'s.
template <int DC, int BT, int QH>
static __device__ __forceinline__ void key_scores_heads(const float* __restrict__ qh0,
                                                        const float* __restrict__ kc,
                                                        uint64_t sbase, int r0, int n1, int nkv,
                                                        int g, int k0, int k1, float* sc,
                                                        int chp) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = BT >> 5;
    for (int i0 = k0 + 4 * wid; i0 < k1; i0 += 4 * nw) {
        float s[QH][4];
        const float* kr[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int i = min(i0 + u, k1 - 1);  // keys past k1: a valid row, never summed
            kr[u] = kc + ((sbase + key_row(i, r0, n1)) * nkv + g) * DC;
#pragma unroll
            for (int qh = 0; qh < QH; ++qh) s[qh][u] = 0.0f;
        }
#pragma unroll
        for (int j0 = 0; j0 < DC; j0 += 32 * ATT_DU) {
            float kv[4][ATT_DU];
#pragma unroll
            for (int e = 0; e < ATT_DU; ++e)
#pragma unroll
                for (int u = 0; u < 4; ++u) kv[u][e] = kr[u][j0 + lane + 32 * e];
#pragma unroll
            for (int qh = 0; qh < QH; ++qh) {
                float qv[ATT_DU];
#pragma unroll
                for (int e = 0; e < ATT_DU; ++e) qv[e] = qh0[qh * DC + j0 + lane + 32 * e];
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int e = 0; e < ATT_DU; ++e)
                        if (i0 + u < k1) s[qh][u] = fmaf(qv[e], kv[u][e], s[qh][u]);
            }
        }
#pragma unroll
        for (int qh = 0; qh < QH; ++qh)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const float v = warp_sum(s[qh][u]);
                if (lane == 0 && i0 + u < k1) sc[qh * chp + i0 + u - k0] = v;
            }
    }
}

// weighted_values_vec for QH heads: each value row loaded once, head qh's weights from
// sc + qh·chp; acc[qh][c] is head qh's dim VPT·threadIdx.x + c, the same chain per dim.
template <int DC, int BT, int QH>
static __device__ __forceinline__ void weighted_values_heads(const float* __restrict__ vc,
                                                             uint64_t sbase, int r0, int n1,
                                                             int nkv, int g, int k0, int k1,
                                                             const float* sc, int chp,
                                                             float (&acc)[QH][DC / BT]) {
    constexpr int VPT = DC / BT;
    static_assert(VPT == 1 || VPT == 2 || VPT == 4, "one vector load per key");
    typedef typename VecF<VPT>::T V;
    const uint32_t stride_bytes = (uint32_t)nkv * DC * 4u;
    const char* vb = (const char*)(vc + (sbase * nkv + g) * DC + VPT * threadIdx.x);
#pragma unroll
    for (int qh = 0; qh < QH; ++qh)
#pragma unroll
        for (int c = 0; c < VPT; ++c) acc[qh][c] = 0.0f;
    for (int i0 = k0; i0 < k1; i0 += 8) {
        V v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const uint32_t row = (uint32_t)key_row(min(i0 + u, k1 - 1), r0, n1);
            v[u] = *(const V*)(vb + (uint64_t)row * stride_bytes);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            if (i0 + u < k1) {
                const float* vf = (const float*)&v[u];
#pragma unroll
                for (int qh = 0; qh < QH; ++qh) {
                    const float w = sc[qh * chp + i0 + u - k0];
#pragma unroll
                    for (int c = 0; c < VPT; ++c) acc[qh][c] = fmaf(w, vf[c], acc[qh][c]);
                }
            }
        }
    }
}

template <int DC, int QH>
static __device__ __forceinline__ void attention_heads_body(
    const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
    const int* __restrict__ slot, const int* __restrict__ pos, float* __restrict__ out, int nh,
    int nkv, int window, int rows, float* __restrict__ part, unsigned* __restrict__ cnt,
    uint32_t* __restrict__ xp, float* __restrict__ xs, int prep_rows, int prep_kinds) {
    constexpr int BT = 128, VPT = DC / BT;
    static_assert(QH >= 1 && QH <= 4, "the softmax of head qh is warp qh's");
    extern __shared__ float sc[];
    __shared__ float red[32];
    __shared__ int last;
    const int h0 = blockIdx.x * QH, t = blockIdx.y, z = blockIdx.z;
    const int p = pos[t];
    const int lo = (window > 0 && p + 1 > window) ? p + 1 - window : 0;
    const int n = p + 1 - lo;
    const int Z = att_splits(n), CH = (n + Z - 1) / Z;
    if (z >= Z) return;
    const int chp = ((CH + 3) & ~3) + 4;
    const int g = h0 / (nh / nkv);
    const uint64_t sbase = (uint64_t)slot[t] * rows;
    const int r0 = lo % rows, n1 = min(n, rows - r0);
    const int k0 = z * CH, k1 = min(n, k0 + CH);
    {
        constexpr int lines = DC >> 5;  // 128-byte lines of one key's row of this KV head
        for (int c = threadIdx.x; c < 2 * (k1 - k0) * lines; c += BT) {
            const int i = k0 + c / (2 * lines), rest = c % (2 * lines);
            const float* base = (rest < lines) ? kc : vc;
            const float* r = base + ((sbase + key_row(i, r0, n1)) * nkv + g) * DC + 32 * (rest % lines);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(r));
        }
    }
    GRIDDEP_ENTRY();
    key_scores_heads<DC, BT, QH>(q + ((uint64_t)t * nh + h0) * DC, kc, sbase, r0, n1, nkv, g, k0,
                                 k1, sc, chp);
    __syncthreads();
    float m[QH], l[QH];
    if (k1 - k0 <= 32) {
        // ≤ 32 keys: head qh's softmax in warp qh alone, the bits of attention_f32's warp 0.
        const int wq = threadIdx.x >> 5, ln = threadIdx.x & 31;
        if (wq < QH) {
            float* s = sc + wq * chp;
            const bool live = ln < k1 - k0;
            const float mm = warp_max(live ? fmaxf(-__int_as_float(0x7f800000), s[ln])
                                           : -__int_as_float(0x7f800000));
            const float e = live ? expf(s[ln] - mm) : 0.0f;
            if (live) s[ln] = e;
            const float ll = warp_sum(e);
            if (ln == 0) {
                red[2 * wq] = mm;
                red[2 * wq + 1] = ll;
            }
        }
        __syncthreads();
#pragma unroll
        for (int qh = 0; qh < QH; ++qh) {
            m[qh] = red[2 * qh];
            l[qh] = red[2 * qh + 1];
        }
    } else {
#pragma unroll
        for (int qh = 0; qh < QH; ++qh) {
            float* s = sc + qh * chp;
            float mm = -__int_as_float(0x7f800000), ll = 0.0f;
            for (int i = threadIdx.x; i < k1 - k0; i += BT) mm = fmaxf(mm, s[i]);
            mm = block_reduce(mm, true, red);
            for (int i = threadIdx.x; i < k1 - k0; i += BT) {
                const float e = expf(s[i] - mm);
                s[i] = e;
                ll += e;
            }
            ll = block_reduce(ll, false, red);
            m[qh] = mm;
            l[qh] = ll;
        }
    }
    float acc[QH][VPT];
    weighted_values_heads<DC, BT, QH>(vc, sbase, r0, n1, nkv, g, k0, k1, sc, chp, acc);
    __shared__ float ov[QH][DC];
    if (Z == 1) {
        // As attention_f32: (o_1 + 0) / l_1 per head.
#pragma unroll
        for (int qh = 0; qh < QH; ++qh) {
            float* o = out + ((uint64_t)t * nh + h0 + qh) * DC;
#pragma unroll
            for (int c = 0; c < VPT; ++c) {
                const int j = VPT * (int)threadIdx.x + c;
                const float r = (acc[qh][c] + 0.0f) / l[qh];
                o[j] = r;
                ov[qh][j] = r;
            }
        }
    } else {
        const uint64_t ps = (uint64_t)DC + 2;
#pragma unroll
        for (int qh = 0; qh < QH; ++qh) {
            float* pb = part + ((uint64_t)t * nh + h0 + qh) * ATT_SPLIT_MAX * ps;
#pragma unroll
            for (int c = 0; c < VPT; ++c) pb[z * ps + VPT * threadIdx.x + c] = acc[qh][c];
            if (threadIdx.x == 0) {
                pb[z * ps + DC] = m[qh];
                pb[z * ps + DC + 1] = l[qh];
            }
        }
        // The last split of the head group to finish combines every head (attention_f32's
        // release / acquire, on the group's first head's count).
        __syncthreads();
        if (threadIdx.x == 0) {
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
            last = atomicAdd(&cnt[(uint64_t)t * nh + h0], 1u) == (unsigned)(Z - 1);
            if (last) asm volatile("fence.acq_rel.gpu;" ::: "memory");
        }
        __syncthreads();
        if (!last) return;
        __shared__ float mz[ATT_SPLIT_MAX], lz[ATT_SPLIT_MAX];
#pragma unroll 1
        for (int qh = 0; qh < QH; ++qh) {
            const float* pb = part + ((uint64_t)t * nh + h0 + qh) * ATT_SPLIT_MAX * ps;
            // attention_f32's combine for output dims j = threadIdx.x + qq·BT (the same bits:
            // each dim's sum over the splits in split order with the same weights).
            float pv[4][8];
#pragma unroll
            for (int qq = 0; qq < 4; ++qq) {
                const int j = threadIdx.x + qq * BT;
#pragma unroll
                for (int u = 0; u < 8; ++u) pv[qq][u] = (j < DC && u < Z) ? __ldcg(pb + u * ps + j) : 0.0f;
            }
            if (qh > 0) __syncthreads();  // mz, lz free: every thread has used the previous head's
            if ((int)threadIdx.x < Z) {
                mz[threadIdx.x] = __ldcg(pb + threadIdx.x * ps + DC);
                lz[threadIdx.x] = __ldcg(pb + threadIdx.x * ps + DC + 1);
            }
            __syncthreads();
            float M = -__int_as_float(0x7f800000);
            for (int zz = 0; zz < Z; ++zz) M = fmaxf(M, mz[zz]);
            float L = 0.0f;
            for (int zz = 0; zz < Z; ++zz) L = fmaf(expf(mz[zz] - M), lz[zz], L);
            float sacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int z0 = 0; z0 < Z; z0 += 8) {
                if (z0 > 0) {
#pragma unroll
                    for (int qq = 0; qq < 4; ++qq) {
                        const int j = threadIdx.x + qq * BT;
#pragma unroll
                        for (int u = 0; u < 8; ++u)
                            pv[qq][u] = (j < DC && z0 + u < Z) ? __ldcg(pb + (z0 + u) * ps + j) : 0.0f;
                    }
                }
#pragma unroll
                for (int u = 0; u < 8; ++u) {
                    if (z0 + u < Z) {
                        const float w = expf(mz[z0 + u] - M);
#pragma unroll
                        for (int qq = 0; qq < 4; ++qq) sacc[qq] = fmaf(w, pv[qq][u], sacc[qq]);
                    }
                }
            }
            float* o = out + ((uint64_t)t * nh + h0 + qh) * DC;
#pragma unroll
            for (int qq = 0; qq < 4; ++qq) {
                const int j = threadIdx.x + qq * BT;
                if (j < DC) {
                    const float r = sacc[qq] / L;
                    o[j] = r;
                    ov[qh][j] = r;
                }
            }
        }
        if (threadIdx.x == 0) cnt[(uint64_t)t * nh + h0] = 0u;  // ready for the next launch
    }
    if (t < prep_rows) {
        // Each head's 16-groups of row t into the o projection's prep buffers, as attention_f32.
        __syncthreads();
#pragma unroll 1
        for (int qh = 0; qh < QH; ++qh) {
            const int h = h0 + qh;
            for (int qd0 = 0; qd0 < (DC >> 2); qd0 += BT) {
                const int qd = qd0 + threadIdx.x;
                const bool live = qd < (DC >> 2);
                float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                if (live) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) v[e] = ov[qh][4 * qd + e];
                }
                tc_prep_quad_lanes(v, t, ((h * DC) >> 4) + (qd >> 2), (nh * DC) >> 4, xp, xs, live,
                                   prep_kinds);
            }
        }
    }
}

// ATT_H2_MINB: resident blocks per SM the compiler must allow the two-heads entries (register
// cap 65536 / (128·MINB)); ATT_MINB below likewise for attention_d256_f32 / attention_d512_f32.
// A #define in a GEMMA4_KERNEL_SRC copy (scripts/gpu/run.sh variant) overrides either, to time
// variants without a rebuild. `scripts/gpu/run.sh sass` (not timed yet): ATT_MINB 8 → 64
// registers for both one-head entries, no spill (79 / 96 at 4); ATT_H2_MINB 6 → 80, the d256
// entry spilling 24 B (109 / 128 at 4).
#ifndef ATT_H2_MINB
#define ATT_H2_MINB 4
#endif
#define ATT_HEADS_ENTRY(NAME, DC, QH)                                                              \
    extern "C" __global__ void __launch_bounds__(128, ATT_H2_MINB)                                 \
        NAME(const float* __restrict__ q, const float* __restrict__ kc,                            \
             const float* __restrict__ vc, const int* __restrict__ slot,                           \
             const int* __restrict__ pos, float* __restrict__ out, int nh, int nkv, int d,         \
             int rows, int window, float* __restrict__ part, unsigned* __restrict__ cnt,           \
             uint32_t* __restrict__ xp, float* __restrict__ xs, int prep_rows, int prep_kinds) {   \
        attention_heads_body<DC, QH>(q, kc, vc, slot, pos, out, nh, nkv, window, rows, part, cnt,  \
                                     xp, xs, prep_rows, prep_kinds);                               \
    }
ATT_HEADS_ENTRY(attention_d256_h2_f32, 256, 2)
ATT_HEADS_ENTRY(attention_d512_h2_f32, 512, 2)
#undef ATT_HEADS_ENTRY

// Three entry points with one body: attention_d256_f32 and attention_d512_f32 for Gemma-4's
// sliding and full head dims (the head dim a compile-time constant: the same sums, the bounds
// checks folded away and the values read as vectors), attention_f32 for any other d ≤ 512
// (host: kernels::attention_kernel). Separate functions, not one kernel branching on d: that one
// (the same code, 9504 SASS instructions with the d = 256 body 5.7k instructions in) executed
// 900 warp instructions per warp against 1820 but ran slower, its warps stalled on instruction
// fetch (Nsight Compute, H100, 2026-12-06: "no instruction" 54 % of the stall samples against
// 3.6 %; 12B decode at batch 1 276 against 288 tok/s, attention's graph cost 615 against 439 µs).
// The d256 / d512 kernels at most 128 registers (4 blocks of 128 threads per SM; 79 and 96, no
// spill, 2944 and 3016 SASS instructions, `scripts/gpu/run.sh sass`); attention_f32 without a
// bound, as before. Measured (H100, 2026-12-06, `scripts/gpu/run.sh ab`, one binary, the
// committed attention_f32 for every d through GEMMA4_KERNEL_SRC + GEMMA4_ATT_GENERIC=1 against
// these entry points, two runs each): 12B decode at batch 1 287.1 / 288.9 → 303.4 / 305.0 tok/s,
// batch 8 1701.3 / 1713.9 → 1768.7 / 1783.6; the graph attribution's attention cost per step
// 370 / 441 → 228 / 256 µs at batch 1, 502 / 492 → 288 / 275 at batch 8. Nsight Compute, the
// same decode launch as above (33 keys, grid (16, 1, 3)): 892 warp instructions per warp
// against 1820, 180 stall samples against 306, "no instruction" 7.8 % (barrier 26.7 %, wait
// 20.0 %, long scoreboard 18.3 %). gpu-check: each entry point gives attention_f32's bits.
#define ATT_ENTRY(NAME, DC, BOUNDS)                                                                \
    extern "C" __global__ void BOUNDS                                                              \
        NAME(const float* __restrict__ q, const float* __restrict__ kc,                            \
             const float* __restrict__ vc, const int* __restrict__ slot,                           \
             const int* __restrict__ pos, float* __restrict__ out, int nh, int nkv, int d,         \
             int rows, int window, float* __restrict__ part, unsigned* __restrict__ cnt,           \
             uint32_t* __restrict__ xp, float* __restrict__ xs, int prep_rows, int prep_kinds) {   \
        attention_body<DC>(q, kc, vc, slot, pos, out, nh, nkv, d, rows, window, part, cnt, xp, xs, \
                           prep_rows, prep_kinds);                                                 \
    }
#ifndef ATT_MINB
#define ATT_MINB 4
#endif
#define ATT_BOUNDS __launch_bounds__(128, ATT_MINB)
ATT_ENTRY(attention_f32, 0, )
ATT_ENTRY(attention_d256_f32, 256, ATT_BOUNDS)
ATT_ENTRY(attention_d512_f32, 512, ATT_BOUNDS)
#undef ATT_BOUNDS
#undef ATT_ENTRY

extern "C" __global__ void attention_rows_f32(const float* __restrict__ q,
                                              const float* __restrict__ kc,
                                              const float* __restrict__ vc,
                                              const int* __restrict__ slot,
                                              const int* __restrict__ lo,
                                              const int* __restrict__ cnt, float* __restrict__ out,
                                              int nh, int nkv, int d, int rows) {
    GRIDDEP_ENTRY();
    extern __shared__ float sc[];
    __shared__ float red[32];
    const int h = blockIdx.x, t = blockIdx.y;
    const int g = h / (nh / nkv);
    const float* qh = q + ((uint64_t)t * nh + h) * d;
    const uint64_t sbase = (uint64_t)slot[t] * rows;
    attend_block(qh, kc, vc, sbase, lo[t], cnt[t], rows, nkv, g, d,
                 out + ((uint64_t)t * nh + h) * d, sc, red);
}
