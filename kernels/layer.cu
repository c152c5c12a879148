// layer.cu — the small elementwise / row kernels of the decoder layer that are not a matvec.
// Spec: spec/gemma4-text.md §3 (RMSNorm), §4.8 (KV store), §5 (GELU-tanh), §6 (MoE router and
// mixture), §7 (PLE combination), §8 (residual adds, layer_scalar). All f32.
// 1-D kernels: grid ceil(n / 256), block 256, unless stated otherwise.

// rmsnorm_add_f32(y, w, x, n, eps): x[r] += RMSNorm_w(y[r]) for every row r (y, x f32 [rows, n],
// w f32 [n]): the "x = x + RMSNorm_post(a)" residual step of §8. Grid (rows), block
// norm_threads(n) (see norm.cu: the same register cache and reduction order as rmsnorm_f32).
extern "C" __global__ void rmsnorm_add_f32(const float* __restrict__ y, const float* __restrict__ w,
                                           float* __restrict__ x, int n, float eps) {
    GRIDDEP_ENTRY();
    __shared__ float red[33];
    const float* yr = y + (uint64_t)blockIdx.x * n;
    float* xr = x + (uint64_t)blockIdx.x * n;
    const int B = blockDim.x, tid = threadIdx.x;
    float c[NORM_CACHE];
    const float scale = rms_scale_cached(yr, n, eps, c, red);
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        const int i = tid + j * B;
        if (i < n) xr[i] += (c[j] * scale) * w[i];
    }
    for (int i = tid + NORM_CACHE * B; i < n; i += B) xr[i] += (yr[i] * scale) * w[i];
}

// add_norm_prep_f32(y, wy, x, w, h, n, eps, xp, xs, prep_rows, post_scale, prep_kinds): for row
// r (grid rows):
//   if y != null: x[r] += RMSNorm_wy(y[r]), then x[r] *= post_scale
//                 (the §8 residual step and, at a layer's end, its layer_scalar: the same f32
//                 multiply as scale_f32)
//   h[r] = RMSNorm_w(x[r])                        (the next sub-block's input norm)
//   and, for r < prep_rows (≤ 8), column r of h split into the tensor-core matvec's prep
//   buffers xp/xs (the same bits as mvtc_prep of h; prep_kinds: which of the bf16 pieces and
//   int8 digits, common.cuh TC_PREP_PIECES / TC_PREP_DIGITS).
// x, h, y f32 [rows, n]; n % 16 == 0, n ≤ 4·1024·NQ. Block B = kernels::norm_prep_threads(n)
// (a multiple of 32, ≤ 1024); thread j owns the quads (4 elements) q = j + kB, k < NQ, in
// registers, so the 4 quads of a 16-group sit on 4 consecutive lanes (and warps 2i, 2i + 1 hold
// one 256-element block, as tc_prep_quad_lanes needs, whenever n % 256 == 0: then B is a
// multiple of 64). Bounded to 1024 threads (≤ 64 registers):
// n = 3840 launches 960. Sums of squares: per-thread
// chains over its quads, then block_sum — one order for every row of a given n.
#define NQ 4
extern "C" __global__ void __launch_bounds__(1024) add_norm_prep_f32(const float* __restrict__ y,
                                             const float* __restrict__ wy, float* __restrict__ x,
                                             const float* __restrict__ w, float* __restrict__ h,
                                             int n, float eps, uint32_t* __restrict__ xp,
                                             float* __restrict__ xs, int prep_rows,
                                             float post_scale, int prep_kinds) {
    GRIDDEP_ENTRY();
    __shared__ float red[33];
    const int r = blockIdx.x, B = blockDim.x, nq = n >> 2, ng = n >> 4;
    float* xr = x + (uint64_t)r * n;
    // The first quad's norm weights are loaded up front (their loads overlap the reductions;
    // at the model widths every thread holds one quad).
    const bool live0 = (int)threadIdx.x < nq;
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 wy0 = (y != nullptr && live0) ? ((const float4*)wy)[threadIdx.x] : zero4;
    const float4 w0 = live0 ? ((const float4*)w)[threadIdx.x] : zero4;
    float v[NQ][4];
#pragma unroll
    for (int k = 0; k < NQ; ++k) {
        const int q = threadIdx.x + k * B;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (q < nq) a = ((const float4*)xr)[q];
        v[k][0] = a.x; v[k][1] = a.y; v[k][2] = a.z; v[k][3] = a.w;
    }
    if (y != nullptr) {
        const float* yr = y + (uint64_t)r * n;
        float u[NQ][4];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < NQ; ++k) {
            const int q = threadIdx.x + k * B;
            float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (q < nq) a = ((const float4*)yr)[q];
            u[k][0] = a.x; u[k][1] = a.y; u[k][2] = a.z; u[k][3] = a.w;
#pragma unroll
            for (int e = 0; e < 4; ++e) ss = fmaf(u[k][e], u[k][e], ss);
        }
        ss = block_sum(ss, red);
        const float scale = 1.0f / sqrtf(ss / (float)n + eps);
#pragma unroll
        for (int k = 0; k < NQ; ++k) {
            const int q = threadIdx.x + k * B;
            if (q < nq) {
                const float4 ww = k == 0 ? wy0 : ((const float4*)wy)[q];
                v[k][0] += (u[k][0] * scale) * ww.x;
                v[k][1] += (u[k][1] * scale) * ww.y;
                v[k][2] += (u[k][2] * scale) * ww.z;
                v[k][3] += (u[k][3] * scale) * ww.w;
#pragma unroll
                for (int e = 0; e < 4; ++e) v[k][e] *= post_scale;
                ((float4*)xr)[q] = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
            }
        }
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NQ; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) ss = fmaf(v[k][e], v[k][e], ss);
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)n + eps);
    float* hr = h + (uint64_t)r * n;
#pragma unroll
    for (int k = 0; k < NQ; ++k) {
        const int q = threadIdx.x + k * B;
        if (k * B >= nq) break;  // uniform over the block
        const bool live = q < nq;
        if (live) {
            const float4 ww = k == 0 ? w0 : ((const float4*)w)[q];
            v[k][0] = (v[k][0] * scale) * ww.x;
            v[k][1] = (v[k][1] * scale) * ww.y;
            v[k][2] = (v[k][2] * scale) * ww.z;
            v[k][3] = (v[k][3] * scale) * ww.w;
            ((float4*)hr)[q] = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
        }
        if (r < prep_rows) tc_prep_quad_lanes(v[k], r, q >> 2, ng, xp, xs, live, prep_kinds);
    }
}

// geglu_prep_f32(g, u, out, n, xp, xs, prep_rows, prep_kinds): out[r] = gelu(g[r]) ⊙ u[r] (the
// formula and rounding of geglu_f32, activation.cu) and, for r < prep_rows (≤ 8), column r of out
// into the tensor-core matvec's prep buffers (prep_kinds as add_norm_prep_f32's). g, u, out f32 [rows, n] (out may alias g); n % 16 == 0.
// One thread per quad (4 elements): grid (ceil(n / 4 / 128), rows), block 128.
extern "C" __global__ void geglu_prep_f32(const float* g, const float* __restrict__ u,
                                          float* out, int n, uint32_t* __restrict__ xp,
                                          float* __restrict__ xs, int prep_rows,
                                          int prep_kinds) {
    GRIDDEP_ENTRY();
    const int r = blockIdx.y, nq = n >> 2, ng = n >> 4;
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = q < nq;
    const uint64_t o = (uint64_t)r * n + 4 * (uint64_t)q;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        const float4 a = *(const float4*)(g + o), b = *(const float4*)(u + o);
        const float ga[4] = {a.x, a.y, a.z, a.w}, ub[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = geglu_mul(ga[e], ub[e]);
        *(float4*)(out + o) = make_float4(v[0], v[1], v[2], v[3]);
    }
    if (r < prep_rows) tc_prep_quad_lanes(v, r, q >> 2, ng, xp, xs, live, prep_kinds);
}

// scale_f32(x, n, s): x[i] *= s (layer_scalar §8, PLE projection scale §7).
extern "C" __global__ void scale_f32(float* x, uint64_t n, float s) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// add_scale_f32(a, b, out, n, s): out[i] = (a[i] + b[i]) · s (PLE: (ctx + tok) · 2^(−1/2), §7).
extern "C" __global__ void add_scale_f32(const float* a, const float* b, float* out, uint64_t n,
                                         float s) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (a[i] + b[i]) * s;
}

// gelu_mul_ple_f32(g, ple, T, P, L, l): g[t, j] = gelu(g[t, j]) · ple[t, l, j] (§7 step 7);
// g f32 [T, P], ple f32 [T, L, P]. n = T·P threads.
extern "C" __global__ void gelu_mul_ple_f32(float* g, const float* __restrict__ ple, int T, int P,
                                            int L, int l) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)T * P) return;
    const uint64_t t = i / P, j = i % P;
    g[i] = gelu_tanh(g[i]) * ple[(t * L + l) * P + j];
}

// geglu_split_f32(gu, out, rows, ie): out[r, j] = gelu(gu[r, j]) · gu[r, ie + j] for a fused
// expert gate|up output (§6): gu f32 [rows, 2·ie], out f32 [rows, ie]. n = rows·ie threads.
extern "C" __global__ void geglu_split_f32(const float* __restrict__ gu, float* __restrict__ out,
                                           int rows, int ie) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)rows * ie) return;
    const uint64_t r = i / ie, j = i % ie;
    out[i] = gelu_tanh(gu[r * 2 * ie + j]) * gu[r * 2 * ie + ie + j];
}

// moe_route_f32(logits, T, E, K, pes, ids, wts): router of §6 per token (one thread each):
// prob = softmax(logits[t]) over E (f32, max-subtracted, Σ in index order); the K largest
// (exact ties → lower expert first) in descending order; renormalised by their sum; times the
// per-expert scale pes[e]. logits f32 [T, E]; ids i32 [T, K]; wts f32 [T, K]. E ≤ 1024.
extern "C" __global__ void moe_route_f32(const float* __restrict__ logits, int T, int E, int K,
                                         const float* __restrict__ pes, int* __restrict__ ids,
                                         float* __restrict__ wts) {
    GRIDDEP_ENTRY();
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* l = logits + (uint64_t)t * E;
    float m = l[0];
    for (int e = 1; e < E; ++e) m = fmaxf(m, l[e]);
    float s = 0.0f;
    for (int e = 0; e < E; ++e) s += expf(l[e] - m);
    float sel = 0.0f;
    for (int k = 0; k < K; ++k) {
        int best = -1;
        float bp = 0.0f;
        for (int e = 0; e < E; ++e) {
            bool used = false;
            for (int kk = 0; kk < k; ++kk) used |= (ids[t * K + kk] == e);
            if (used) continue;
            const float pr = expf(l[e] - m) / s;
            if (best < 0 || pr > bp) { best = e; bp = pr; }
        }
        ids[t * K + k] = best;
        wts[t * K + k] = bp;
        sel += bp;
    }
    for (int k = 0; k < K; ++k) wts[t * K + k] = wts[t * K + k] / sel * pes[ids[t * K + k]];
}

// moe_combine_f32(y, w, out, T, K, H): out[t, i] = Σ_k w[t, k] · y[t·K + k, i], k in order (§6);
// y f32 [T·K, H], w f32 [T, K], out f32 [T, H]. n = T·H threads.
extern "C" __global__ void moe_combine_f32(const float* __restrict__ y, const float* __restrict__ w,
                                           float* __restrict__ out, int T, int K, int H) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)T * H) return;
    const uint64_t t = i / H, c = i % H;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(w[t * K + k], y[(t * K + k) * H + c], acc);
    out[i] = acc;
}

// qkv_post_f32(q, k, v, kc, vc, q_norm, k_norm, slot, pos, inv_freq, nh, nkv, d, rows, eps,
// k_eq_v): everything between the q/k/v projections and attention in one launch
// (spec/gemma4-text.md §4.2–§4.4, §4.8): per token t and head,
//   q head  h < nh:   q[t, h] = RoPE(RMSNorm_{q_norm}(q[t, h]))           (in place);
//   k head  h < nkv:  kc[row, h] = RoPE(RMSNorm_{k_norm}(k[t, h]));
//   v head  h < nkv:  vc[row, h] = RMSNorm(src[t, h]) (weightless), src = k_eq_v ? k : v (the raw
//                     K projection when attention_k_eq_v, read before any normalization);
// row = slot[t]·rows + pos[t] mod rows: kc, vc f32 [S, rows, nkv·d], rows = ctx on
// full-attention layers (row = position), W + CHUNK_ROWS on sliding layers (a ring: position p at
// row p mod rows; the host keeps track of which positions are still held). The arithmetic is
// exactly rmsnorm_f32's (same block size, caching order and block_sum) followed by
// rope_neox_f32's (f64 angle, sin/cos and rotation, rounded once), so the results are bitwise
// those of the separate kernels; k and v in the workspace are left as projected (only the cache
// receives them). q, k, v f32 [T, heads, d]; kc, vc null with nkv = 0 (a KV-sharing layer: q
// only); inv_freq f64 [d/2]. Launch: grid (nh + 2·nkv, T, 1), block norm_threads(d), dynamic
// shared memory d floats.
extern "C" __global__ void qkv_post_f32(float* q, const float* __restrict__ k,
                                        const float* __restrict__ v, float* __restrict__ kc,
                                        float* __restrict__ vc, const float* __restrict__ q_norm,
                                        const float* __restrict__ k_norm,
                                        const int* __restrict__ slot, const int* __restrict__ pos,
                                        const double* __restrict__ inv_freq, int nh, int nkv,
                                        int d, int rows, float eps, int k_eq_v) {
    extern __shared__ float head[];
    __shared__ float red[33];
    const int t = blockIdx.y, b = blockIdx.x, B = blockDim.x, tid = threadIdx.x;
    // Before waiting for the previous kernel (programmatic dependent launch): the RoPE angles'
    // sin/cos depend only on pos (a host upload) and inv_freq, so the f64 sincos of this
    // thread's first two pairs i = tid, tid + B are computed now, off the chain that starts with
    // the projections' outputs (every pair when d ≤ 4096: B = norm_threads(d) ≥ d/4 there).
    // Measured on the H200 (12B Q2_K mix, `runtime bench`, same call, with attention's prefetch):
    // 236.0 / 235.5 tok/s at batch 1 against 234.0 / 233.3; qkv_post's graph cost 113 / 101
    // against 132 / 123 µs per step; q and the K/V rows bitwise those of rmsnorm + rope (gpu-check).
    double sn_pre[2] = {0.0, 0.0}, cs_pre[2] = {1.0, 1.0};
    if (b < nh + nkv) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int i = tid + j * B;
            if (i < (d >> 1)) sincos((double)pos[t] * inv_freq[i], &sn_pre[j], &cs_pre[j]);
        }
    }
    GRIDDEP_ENTRY();
    const float* src;
    float* dst;
    const float* w;
    bool rope = true;
    const uint64_t crow = ((uint64_t)slot[t] * rows + (uint64_t)(pos[t] % rows)) * nkv;
    if (b < nh) {
        src = q + ((uint64_t)t * nh + b) * d;
        dst = q + ((uint64_t)t * nh + b) * d;
        w = q_norm;
    } else if (b < nh + nkv) {
        const int h = b - nh;
        src = k + ((uint64_t)t * nkv + h) * d;
        dst = kc + (crow + h) * d;
        w = k_norm;
    } else {
        const int h = b - nh - nkv;
        src = (k_eq_v ? k : v) + ((uint64_t)t * nkv + h) * d;
        dst = vc + (crow + h) * d;
        w = nullptr;
        rope = false;
    }
    // RMSNorm (rmsnorm_f32's scale and order).
    float c[NORM_CACHE];
    const float scale = rms_scale_cached(src, d, eps, c, red);
    float* out = rope ? head : dst;
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        const int i = tid + j * B;
        if (i < d) {
            float y = c[j] * scale;
            if (w != nullptr) y *= w[i];
            out[i] = y;
        }
    }
    for (int i = tid + NORM_CACHE * B; i < d; i += B) {
        float y = src[i] * scale;
        if (w != nullptr) y *= w[i];
        out[i] = y;
    }
    if (!rope) return;
    __syncthreads();
    // NeoX RoPE (rope_neox_f32's arithmetic), pairs (i, i + d/2), with the sin/cos above.
    const int half = d >> 1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int i = tid + j * B;
        if (i < half) {
            rope_pair(head[i], head[i + half], sn_pre[j], cs_pre[j], dst[i], dst[i + half]);
        }
    }
    for (int i = tid + 2 * B; i < half; i += B) {  // d > 4096 only (B is capped at 1024)
        double sn, cs;
        sincos((double)pos[t] * inv_freq[i], &sn, &cs);
        rope_pair(head[i], head[i + half], sn, cs, dst[i], dst[i + half]);
    }
}

// gather_rows_f32(src, idx, dst, n): dst[r, :] = src[idx[r], :] (rows of n floats). Grid (R),
// block 256.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ src, const int* __restrict__ idx,
                                           float* __restrict__ dst, int n) {
    GRIDDEP_ENTRY();
    const float* s = src + (uint64_t)idx[blockIdx.x] * n;
    float* d = dst + (uint64_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}
