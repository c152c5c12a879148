// norm.cu — RMSNorm. Spec: spec/gemma4-text.md §3:
//   y = x · (mean_j(x_j²) + eps)^(−1/2) ⊙ w   (w used as stored; w == nullptr: weightless norm).
//
// rmsnorm_f32(x, w, y, n, eps): x, y f32 [rows, n] (y may equal x), w f32 [n] or null.
// Launch: grid (rows,1,1), block (B,1,1) with B a multiple of 32, ≤ 1024; the host uses
// B = norm_threads(n) = clamp(round_up(⌈n/4⌉, 32), 32, 1024) (kernels::norm_threads).
// Thread i holds x[i + jB] (j < NORM_CACHE) in registers between the two passes (rows longer
// than NORM_CACHE·B are re-read). Sum of squares in f32: per-thread chain over j, then warp and
// block butterflies (block_sum); the same B for every row of a given n, so every row of one
// width is reduced in the same order.
// (NORM_CACHE and rms_scale_cached: common.cuh.)
extern "C" __global__ void rmsnorm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                       float* y, int n, float eps) {
    GRIDDEP_ENTRY();
    __shared__ float red[33];
    const float* xr = x + (uint64_t)blockIdx.x * n;
    float* yr = y + (uint64_t)blockIdx.x * n;
    const int B = blockDim.x, tid = threadIdx.x;
    float c[NORM_CACHE];
    const float scale = rms_scale_cached(xr, n, eps, c, red);
#pragma unroll
    for (int j = 0; j < NORM_CACHE; ++j) {
        const int i = tid + j * B;
        if (i < n) {
            float v = c[j] * scale;
            if (w != nullptr) v *= w[i];
            yr[i] = v;
        }
    }
    for (int i = tid + NORM_CACHE * B; i < n; i += B) {
        float v = xr[i] * scale;
        if (w != nullptr) v *= w[i];
        yr[i] = v;
    }
}
