// embed.cu — token-embedding row lookup straight from GGUF blocks, scaled.
// Spec: spec/gemma4-text.md §2 (x0 = E[ids] · sqrt(H)) and §7 (PLE table, · sqrt(P)); block
// decode spec/gguf-gemma4.md §3 (the same F::dq8 as dequant.cu, bit-exact f32 weights).
//
// embed_<fmt>(W, row_bytes, ids, out, K, scale): W = the table's raw blocks (row r at
// W + r·row_bytes, K elements, K % 32 == 0), ids i32 [T] (< rows, checked on the host),
// out f32 [T, K]: out[t, k] = f32(W[ids[t], k]) · scale (one f32 rounding).
// Launch: grid (T,1,1), block (256,1,1); threads stride over the row's 8-element pieces.
#define EMBED_KERNEL(NAME, F)                                                               \
    extern "C" __global__ void embed_##NAME(const uint8_t* __restrict__ W, uint64_t row_bytes, \
                                            const int* __restrict__ ids,                    \
                                            float* __restrict__ out, int K, float scale) { GRIDDEP_ENTRY();  \
        const uint8_t* row = W + (uint64_t)ids[blockIdx.x] * row_bytes;                    \
        float* o = out + (uint64_t)blockIdx.x * K;                                          \
        for (int pc = threadIdx.x; pc < (K >> 3); pc += blockDim.x) {                       \
            float w[8];                                                                     \
            F::dq8(row, (uint64_t)(pc >> 2), (uint32_t)(pc & 3), w);                        \
            _Pragma("unroll") for (int i = 0; i < 8; ++i) o[pc * 8 + i] = w[i] * scale;     \
        }                                                                                   \
    }

FOR_EACH_FORMAT(EMBED_KERNEL)
