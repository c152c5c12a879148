// matvec.cu — fused dequantize × matrix-vector product, weights read straight from GGUF blocks.
// Spec: spec/gguf-gemma4.md §3 (block decode as in dequant.cu, identical f32 weights).
//
// matvec_<fmt>_<nc>(W, x, y, rows, K, row_bytes):
//   W  : rows × row_bytes raw blocks (row r = output r, K elements, K % 32 == 0 and a multiple
//        of the block size), base 256-byte aligned;
//   x  : f32 [nc, K] (column c contiguous, 16-byte aligned);  y : f32 [nc, rows].
//   y[c, r] = Σ_k W[r, k] · x[c, k], f32 accumulation.
// Launch: block (128,1,1) = 4 warps = 4 rows; grid (ceil(rows / 4), 1, 1).
// Summation: each lane handles units u ≡ lane (mod 32); per unit 4 interleaved chains of 8
// products, combined pairwise, then added to the lane's running sum; finally a 5-level
// butterfly over the warp. Depth ≤ ceil(K/1024) + 8 + 2 + 5 roundings per output.

#define MV_WARPS 4

template <int NC, typename F>
static __device__ __forceinline__ void matvec_body(const uint8_t* __restrict__ W,
                                                   const float* __restrict__ x,
                                                   float* __restrict__ y, int rows, int K,
                                                   uint64_t row_bytes) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const uint8_t* wr = W + (uint64_t)row * row_bytes;
    const int units = K >> 5;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int u = lane; u < units; u += 32) {
        float w[32];
        F::dq(wr, (uint64_t)u, w);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const float4* xp = (const float4*)(x + (uint64_t)c * K + (uint64_t)u * 32);
            float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float4 v = __ldg(xp + i);
                s0 = fmaf(w[4 * i], v.x, s0);
                s1 = fmaf(w[4 * i + 1], v.y, s1);
                s2 = fmaf(w[4 * i + 2], v.z, s2);
                s3 = fmaf(w[4 * i + 3], v.w, s3);
            }
            acc[c] += (s0 + s1) + (s2 + s3);
        }
    }
#pragma unroll
    for (int c = 0; c < NC; ++c) {
        float s = warp_sum(acc[c]);
        if (lane == 0) y[(uint64_t)c * rows + row] = s;
    }
}

#define MATVEC_KERNEL_NC(NAME, F, NC)                                                        \
    extern "C" __global__ void __launch_bounds__(32 * MV_WARPS)                              \
        matvec_##NAME##_##NC(const uint8_t* __restrict__ W, const float* __restrict__ x,     \
                             float* __restrict__ y, int rows, int K, uint64_t row_bytes) {   \
        matvec_body<NC, F>(W, x, y, rows, K, row_bytes);                                     \
    }

#define MATVEC_KERNELS(NAME, F)                                                              \
    MATVEC_KERNEL_NC(NAME, F, 1) MATVEC_KERNEL_NC(NAME, F, 2) MATVEC_KERNEL_NC(NAME, F, 3)   \
    MATVEC_KERNEL_NC(NAME, F, 4) MATVEC_KERNEL_NC(NAME, F, 5) MATVEC_KERNEL_NC(NAME, F, 6)   \
    MATVEC_KERNEL_NC(NAME, F, 7) MATVEC_KERNEL_NC(NAME, F, 8)

FOR_EACH_FORMAT(MATVEC_KERNELS)
