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
