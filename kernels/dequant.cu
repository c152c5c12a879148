// dequant.cu — GPU dequantization of every supported block format to f32.
// Spec: spec/gguf-gemma4.md §3; results equal f32(exact value) bit for bit (§3.6).
//
// dequant_<fmt>(src, dst, n_pieces): src = whole blocks (raw GGUF bytes, 256-byte aligned),
// dst = f32[8 · n_pieces]; one thread per 8-element piece (the same F::dq8 decoder the
// matvec kernels use, so the exactness check covers their weights too). Launch: 1-D.

#define DEQUANT_KERNEL(NAME, F)                                                              \
    extern "C" __global__ void dequant_##NAME(const uint8_t* __restrict__ src,              \
                                              float* __restrict__ dst, uint64_t n_pieces) { GRIDDEP_ENTRY(); \
        uint64_t pc = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;                      \
        if (pc >= n_pieces) return;                                                         \
        float w[8];                                                                         \
        F::dq8(src, pc >> 2, (uint32_t)(pc & 3), w);                                        \
        float4* o = (float4*)(dst + pc * 8);                                                \
        o[0] = make_float4(w[0], w[1], w[2], w[3]);                                         \
        o[1] = make_float4(w[4], w[5], w[6], w[7]);                                         \
    }

FOR_EACH_FORMAT(DEQUANT_KERNEL)
