// dequant.cu — GPU dequantization of every supported block format to f32.
// Spec: spec/gguf-gemma4.md §3; results equal f32(exact value) bit for bit (§3.6).
//
// dequant_<fmt>(src, dst, n_units): src = whole blocks (raw GGUF bytes, 256-byte aligned),
// dst = f32[32 · n_units]; one thread per 32-element unit. Launch: 1-D, any block size.

#define DEQUANT_KERNEL(NAME, F)                                                              \
    extern "C" __global__ void dequant_##NAME(const uint8_t* __restrict__ src,              \
                                              float* __restrict__ dst, uint64_t n_units) {  \
        uint64_t u = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;                       \
        if (u >= n_units) return;                                                           \
        float w[32];                                                                        \
        F::dq(src, u, w);                                                                   \
        float4* o = (float4*)(dst + u * 32);                                                \
        _Pragma("unroll") for (int i = 0; i < 8; ++i)                                       \
            o[i] = make_float4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);        \
    }

FOR_EACH_FORMAT(DEQUANT_KERNEL)
