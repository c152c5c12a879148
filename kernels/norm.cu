// norm.cu — RMSNorm. Spec: spec/gemma4-text.md §3:
//   y = x · (mean_j(x_j²) + eps)^(−1/2) ⊙ w   (w used as stored; w == nullptr: weightless norm).
//
// rmsnorm_f32(x, w, y, n, eps): x, y f32 [rows, n] (y may equal x), w f32 [n] or null.
// Launch: grid (rows,1,1), block (B,1,1) with B a multiple of 32, ≤ 1024 (256 is typical).
// Sum of squares in f32: per-thread chains of ceil(n/B) fmas, then warp and block butterflies.
extern "C" __global__ void rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                       float* y, int n, float eps) {
    __shared__ float red[32];
    const float* xr = x + (uint64_t)blockIdx.x * n;
    float* yr = y + (uint64_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = fmaf(xr[i], xr[i], ss);
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
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i] * scale;
        if (w != nullptr) v *= w[i];
        yr[i] = v;
    }
}
