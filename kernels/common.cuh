// common.cuh — shared definitions prepended to every kernel family (NVRTC, no system headers).
// Spec: spec/gguf-gemma4.md §3 (block formats), §3.6 (exactness and f32 rounding).
typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

#define WARP 32

// binary16 bits -> f32, exact (subnormals included); PTX cvt.f32.f16.
static __device__ __forceinline__ float f16_to_f32(uint32_t h) {
    float r;
    unsigned short hs = (unsigned short)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(hs));
    return r;
}

// bfloat16 bits -> f32, exact (upper half of a binary32).
static __device__ __forceinline__ float bf16_to_f32(uint32_t h) {
    return __uint_as_float((h & 0xffffu) << 16);
}

// Unaligned-safe loads. `a2`: pointer is 2-byte aligned; `a4`: 4-byte aligned.
static __device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) {
    return (uint32_t)__ldg((const unsigned short*)p);
}
static __device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
    return ld_u16(p) | (ld_u16(p + 2) << 16);
}
static __device__ __forceinline__ uint32_t ld_u32_a4(const uint8_t* p) {
    return __ldg((const unsigned int*)p);
}
// n words (4 bytes each) from a 2-aligned pointer.
template <int N>
static __device__ __forceinline__ void ld_words_a2(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = ld_u32_a2(p + 4 * i);
}
template <int N>
static __device__ __forceinline__ void ld_words_a4(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) q[i] = ld_u32_a4(p + 4 * i);
}
template <int N>
static __device__ __forceinline__ void ld_words_a8(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        uint2 v = __ldg((const uint2*)(p + 8 * i));
        q[2 * i] = v.x;
        q[2 * i + 1] = v.y;
    }
}
template <int N>
static __device__ __forceinline__ void ld_words_a16(const uint8_t* p, uint32_t (&q)[N]) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
        uint4 v = __ldg((const uint4*)(p + 16 * i));
        q[4 * i] = v.x;
        q[4 * i + 1] = v.y;
        q[4 * i + 2] = v.z;
        q[4 * i + 3] = v.w;
    }
}
// Byte j of a little-endian word array (j is a compile-time constant after unrolling).
#define BYTE_AT(q, j) (((q)[(j) >> 2] >> (8 * ((j) & 3))) & 0xffu)

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024), returned to every thread:
// warp butterflies, then warp 0 over the per-warp sums (fixed order). `red`: ≥ 33 floats of
// shared memory; the block must not use it concurrently.
static __device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float s = lane < nw ? red[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) red[32] = s;
    }
    __syncthreads();
    return red[32];
}

// Exact split of an f32 into three bf16 pieces v = hi + mid + lo (8 + 8 + 8 significand bits,
// by truncation), returned as bf16 bit patterns (the tensor-core matvec's activations, matvec.cu).
static __device__ __forceinline__ void tc_split3(float v, uint32_t& h, uint32_t& m, uint32_t& l) {
    const uint32_t hb = __float_as_uint(v) & 0xffff0000u;
    const float r1 = v - __uint_as_float(hb);  // exact: the low 16 significand bits of v
    const uint32_t mb = __float_as_uint(r1) & 0xffff0000u;
    const float r2 = r1 - __uint_as_float(mb);  // exact, ≤ 8 significand bits left
    h = hb >> 16;
    m = mb >> 16;
    l = __float_as_uint(r2) >> 16;
}

// Writes 16-group G of column c (of a K = 16·ng input) into the tensor-core matvec's prep
// buffers (layout in matvec.cu, `mvtc_prep`): xp u32 [·][ng][4][8], xs f32 [ng][8] at 8G + c
// (the sequential f32 sum of the 16 values).
static __device__ __forceinline__ void tc_prep_group(const float (&v)[16], int c, int G, int ng,
                                                     uint32_t* __restrict__ xp,
                                                     float* __restrict__ xs) {
    float s = v[0];
#pragma unroll
    for (int j = 1; j < 16; ++j) s += v[j];
    xs[8 * G + c] = s;
    uint4* out = (uint4*)(xp + ((uint64_t)c * ng + G) * 32);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
        uint32_t h[4], m[4], l[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) tc_split3(v[4 * t + j], h[j], m[j], l[j]);
        out[2 * t] = make_uint4(h[0] | (h[2] << 16), h[1] | (h[3] << 16), m[0] | (m[2] << 16),
                                m[1] | (m[3] << 16));
        out[2 * t + 1] = make_uint4(l[0] | (l[2] << 16), l[1] | (l[3] << 16), 0u, 0u);
    }
}
