// layer.cu — the small elementwise / row kernels of the decoder layer that are not a matvec.
// Spec: spec/gemma4-text.md §3 (RMSNorm), §4.8 (KV store), §5 (GELU-tanh), §6 (MoE router and
// mixture), §7 (PLE combination), §8 (residual adds, layer_scalar). All f32.
// 1-D kernels: grid ceil(n / 256), block 256, unless stated otherwise.

static __device__ __forceinline__ float gelu_tanh(float g) {
    const float inner = 0.7978845608028654f * fmaf(0.044715f * g, g * g, g);
    return 0.5f * g * (1.0f + tanhf(inner));
}

// rmsnorm_add_f32(y, w, x, n, eps): x[r] += RMSNorm_w(y[r]) for every row r (y, x f32 [rows, n],
// w f32 [n]): the "x = x + RMSNorm_post(a)" residual step of §8. Grid (rows), block 256.
extern "C" __global__ void rmsnorm_add_f32(const float* __restrict__ y, const float* __restrict__ w,
                                           float* __restrict__ x, int n, float eps) {
    __shared__ float red[32];
    const float* yr = y + (uint64_t)blockIdx.x * n;
    float* xr = x + (uint64_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(yr[i], yr[i], ss);
    ss = warp_sum(ss);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[wid] = ss;
    __syncthreads();
    if (wid == 0) {
        float v = lane < nw ? red[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(red[0] / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] += (yr[i] * scale) * w[i];
}

// scale_f32(x, n, s): x[i] *= s (layer_scalar §8, PLE projection scale §7).
extern "C" __global__ void scale_f32(float* x, uint64_t n, float s) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// add_scale_f32(a, b, out, n, s): out[i] = (a[i] + b[i]) · s (PLE: (ctx + tok) · 2^(−1/2), §7).
extern "C" __global__ void add_scale_f32(const float* a, const float* b, float* out, uint64_t n,
                                         float s) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (a[i] + b[i]) * s;
}

// gelu_mul_ple_f32(g, ple, T, P, L, l): g[t, j] = gelu(g[t, j]) · ple[t, l, j] (§7 step 7);
// g f32 [T, P], ple f32 [T, L, P]. n = T·P threads.
extern "C" __global__ void gelu_mul_ple_f32(float* g, const float* __restrict__ ple, int T, int P,
                                            int L, int l) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)T * P) return;
    const uint64_t t = i / P, j = i % P;
    g[i] = gelu_tanh(g[i]) * ple[(t * L + l) * P + j];
}

// geglu_split_f32(gu, out, rows, ie): out[r, j] = gelu(gu[r, j]) · gu[r, ie + j] for a fused
// expert gate|up output (§6): gu f32 [rows, 2·ie], out f32 [rows, ie]. n = rows·ie threads.
extern "C" __global__ void geglu_split_f32(const float* __restrict__ gu, float* __restrict__ out,
                                           int rows, int ie) {
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
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)T * H) return;
    const uint64_t t = i / H, c = i % H;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = fmaf(w[t * K + k], y[(t * K + k) * H + c], acc);
    out[i] = acc;
}

// kv_write_f32(k, v, kc, vc, slot, pos, T, w, ctx): appends this forward's K/V rows to the
// cache (§4.8 store): kc[(slot[t]·ctx + pos[t])·w + i] = k[t·w + i] (same for v);
// k, v f32 [T, w] (w = nkv·d); kc, vc f32 [S, ctx, w]. n = T·w threads.
extern "C" __global__ void kv_write_f32(const float* __restrict__ k, const float* __restrict__ v,
                                        float* __restrict__ kc, float* __restrict__ vc,
                                        const int* __restrict__ slot, const int* __restrict__ pos,
                                        int T, int w, int ctx) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint64_t)T * w) return;
    const uint64_t t = i / w, c = i % w;
    const uint64_t dst = ((uint64_t)slot[t] * ctx + pos[t]) * w + c;
    kc[dst] = k[i];
    vc[dst] = v[i];
}

// gather_rows_f32(src, idx, dst, n): dst[r, :] = src[idx[r], :] (rows of n floats). Grid (R),
// block 256.
extern "C" __global__ void gather_rows_f32(const float* __restrict__ src, const int* __restrict__ idx,
                                           float* __restrict__ dst, int n) {
    const float* s = src + (uint64_t)idx[blockIdx.x] * n;
    float* d = dst + (uint64_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}
