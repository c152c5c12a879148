// quant.cuh — per-format decoders of one 32-element unit, shared by dequant.cu and matvec.cu.
// Spec: spec/gguf-gemma4.md §3.2–§3.5 (layouts), §3.6 (evaluation order: every product below is
// exact in f32 and at most the final add/subtract rounds, so these match gguf-py bit for bit).
//
// Interface of every format struct F:
//   F::QK  elements per block;  F::TS  bytes per block;
//   F::dq8(base, u, p, w)  decodes piece p (0..3) of unit u, i.e. elements 32u + 8p .. +7 of a
//                      run of whole blocks starting at `base`, into w[0..8]. Consecutive threads
//                      taking consecutive pieces read consecutive bytes (coalesced). `base` must be 256-byte aligned or a row start of
//                      a tensor whose rows are whole blocks (so a block is aligned to the largest
//                      power of two dividing TS; the loads below rely on exactly that).

// IQ4 codebook (§3.5) packed as 16 int8 in four words; looked up with byte_perm (no memory).
#define IQ4_T0 0xBFAD9881u
#define IQ4_T1 0xF6EADDCFu
#define IQ4_T2 0x26190D01u
#define IQ4_T3 0x71594535u
// Exact small-integer → f32 without the I2F unit (16/clk/SM on sm_90): the bits
// 0x4B000000 | v are the float 2²³ + v (v < 2²³), and one exact FADD removes 2²³ (+ off).
static __device__ __forceinline__ float u2f(uint32_t v) {
    return __uint_as_float(0x4B000000u | v) - 8388608.0f;
}
// Exact f32 of v − off (v < 2²³, 0 ≤ off small): both operands lie in [2²³, 2²⁴).
#define U2F_OFF(v, off) (__uint_as_float(0x4B000000u | (v)) - (8388608.0f + (float)(off)))
// Exact f32 of a byte b (0..255) read as int8: (b ^ 0x80) − 128.
static __device__ __forceinline__ float s8f(uint32_t b) {
    return __uint_as_float(0x4B000000u | ((b & 0xffu) ^ 0x80u)) - 8388736.0f;
}

static __device__ __forceinline__ float iq4_value(uint32_t n) {
    uint32_t lo = __byte_perm(IQ4_T0, IQ4_T1, n & 7u);
    uint32_t hi = __byte_perm(IQ4_T2, IQ4_T3, n & 7u);
    uint32_t v = (n & 8u) ? hi : lo;
    return s8f(v);
}

struct FmtF32 {
    enum { QK = 1, TS = 4 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const float4* q = (const float4*)(base + u * 128 + 32 * p);
        float4 a = __ldg(q), b = __ldg(q + 1);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    }
};

struct FmtF16 {
    enum { QK = 1, TS = 2 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        uint32_t q[4];
        ld_words_a16<4>(base + u * 64 + 16 * p, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = f16_to_f32(q[i >> 1] >> (16 * (i & 1)));
    }
};

struct FmtBF16 {
    enum { QK = 1, TS = 2 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        uint32_t q[4];
        ld_words_a16<4>(base + u * 64 + 16 * p, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = bf16_to_f32(q[i >> 1] >> (16 * (i & 1)));
    }
};

// Legacy 32-element formats (§3.3): piece p covers elements 8p..8p+7, i.e. the low (p < 2) or
// high (p ≥ 2) nibbles of qs[8(p&1) .. 8(p&1)+7].

// §3.3 Q4_0: x = d·(nib − 8)
struct FmtQ4_0 {
    enum { QK = 32, TS = 18 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        float d = f16_to_f32(ld_u16(b));
        uint32_t q[2];
        ld_words_a2<2>(b + 2 + 8 * (p & 1), q);
        const uint32_t sh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d * U2F_OFF((BYTE_AT(q, i) >> sh) & 15u, 8);
    }
};

// §3.3 Q4_1: x = d·nib + m
struct FmtQ4_1 {
    enum { QK = 32, TS = 20 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        uint32_t dm = ld_u32_a4(b);
        float d = f16_to_f32(dm), m = f16_to_f32(dm >> 16);
        uint32_t q[2];
        ld_words_a4<2>(b + 4 + 8 * (p & 1), q);
        const uint32_t sh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d * u2f((BYTE_AT(q, i) >> sh) & 15u) + m;
    }
};

// §3.3 Q5_0: q = nib | bit·16, x = d·(q − 16)
struct FmtQ5_0 {
    enum { QK = 32, TS = 22 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        float d = f16_to_f32(ld_u16(b));
        const uint32_t qh = ld_u32_a2(b + 2) >> (8 * p);
        uint32_t q[2];
        ld_words_a2<2>(b + 6 + 8 * (p & 1), q);
        const uint32_t sh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t v = ((BYTE_AT(q, i) >> sh) & 15u) | (((qh >> i) & 1u) << 4);
            w[i] = d * U2F_OFF(v, 16);
        }
    }
};

// §3.3 Q5_1: x = d·q + m
struct FmtQ5_1 {
    enum { QK = 32, TS = 24 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        uint32_t dm = ld_u32_a4(b);
        float d = f16_to_f32(dm), m = f16_to_f32(dm >> 16);
        const uint32_t qh = ld_u32_a4(b + 4) >> (8 * p);
        uint32_t q[2];
        ld_words_a8<2>(b + 8 + 8 * (p & 1), q);
        const uint32_t sh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t v = ((BYTE_AT(q, i) >> sh) & 15u) | (((qh >> i) & 1u) << 4);
            w[i] = d * u2f(v) + m;
        }
    }
};

// §3.3 Q8_0: x = d·qs
struct FmtQ8_0 {
    enum { QK = 32, TS = 34 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        float d = f16_to_f32(ld_u16(b));
        uint32_t q[2];
        ld_words_a2<2>(b + 2 + 8 * p, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d * s8f(BYTE_AT(q, i));
    }
};

// §3.3 IQ4_NL: x = d·K[nib]
struct FmtIQ4_NL {
    enum { QK = 32, TS = 18 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + u * TS;
        float d = f16_to_f32(ld_u16(b));
        uint32_t q[2];
        ld_words_a2<2>(b + 2 + 8 * (p & 1), q);
        const uint32_t sh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d * iq4_value((BYTE_AT(q, i) >> sh) & 15u);
    }
};

// K formats (§3.4): unit u = sub-block sb = u & 7 of block u >> 3; piece p = elements
// r = 8p .. 8p+7 of the sub-block (one 16-element scale group: sb16 = 2·sb + (p >> 1)).

// §3.4 Q2_K: x = (d·(s&15))·q − dmin·(s>>4)
struct FmtQ2_K {
    enum { QK = 256, TS = 84 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7), h = sb >> 2, j = sb & 3;
        uint32_t dd = ld_u32_a4(b + 80);
        float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
        uint32_t s = __ldg(b + 2 * sb + (p >> 1));
        float dl = d * (float)(s & 15u);
        float ml = dmin * (float)(s >> 4);
        uint32_t q[2];
        ld_words_a4<2>(b + 16 + 32 * h + 8 * p, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = dl * u2f((BYTE_AT(q, i) >> (2 * j)) & 3u) - ml;
    }
};

// §3.4 Q3_K: x = (d·S)·q with q = low2 − (hbit ? 0 : 4)
struct FmtQ3_K {
    enum { QK = 256, TS = 110 };
    static __device__ __forceinline__ int scale(const uint8_t* sc, uint32_t i) {
        uint32_t low = (i < 8) ? (__ldg(sc + i) & 15u) : (__ldg(sc + i - 8) >> 4);
        uint32_t high = (__ldg(sc + 8 + (i & 3)) >> (2 * (i >> 2))) & 3u;
        return (int)(low | (high << 4)) - 32;
    }
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7), h = sb >> 2, j = sb & 3;
        float d = f16_to_f32(ld_u16(b + 108));
        float dl = d * (float)scale(b + 96, 2 * sb + (p >> 1));
        uint32_t hm[2], q[2];
        ld_words_a2<2>(b + 8 * p, hm);
        ld_words_a2<2>(b + 32 + 32 * h + 8 * p, q);
        const uint32_t hshift = 4 * h + j;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t low2 = (BYTE_AT(q, i) >> (2 * j)) & 3u;
            uint32_t hbit = (BYTE_AT(hm, i) >> hshift) & 1u;
            w[i] = dl * U2F_OFF(low2 + 4u * hbit, 4);  // low2 − (hbit ? 0 : 4)
        }
    }
};

// §3.4 6-bit scale/min unpacking shared by Q4_K and Q5_K.
static __device__ __forceinline__ void k4_scale_min(const uint8_t* s, uint32_t b, uint32_t& sc, uint32_t& mn) {
    if (b < 4) {
        sc = __ldg(s + b) & 63u;
        mn = __ldg(s + b + 4) & 63u;
    } else {
        uint32_t s4 = __ldg(s + b + 4);
        sc = (s4 & 15u) | ((__ldg(s + b - 4) >> 6) << 4);
        mn = (s4 >> 4) | ((__ldg(s + b) >> 6) << 4);
    }
}

// §3.4 Q4_K: x = (d·sc)·q − dmin·mn
struct FmtQ4_K {
    enum { QK = 256, TS = 144 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7);
        uint32_t dd = ld_u32_a4(b);
        float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
        uint32_t sc, mn;
        k4_scale_min(b + 4, sb, sc, mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        uint32_t q[2];
        ld_words_a8<2>(b + 16 + 32 * (sb >> 1) + 8 * p, q);
        const uint32_t sh = 4 * (sb & 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d1 * u2f((BYTE_AT(q, i) >> sh) & 15u) - m1;
    }
};

// §3.4 Q5_K: q = low4 | (qh bit sb)·16; x = (d·sc)·q − dmin·mn
struct FmtQ5_K {
    enum { QK = 256, TS = 176 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7);
        uint32_t dd = ld_u32_a4(b);
        float d = f16_to_f32(dd), dmin = f16_to_f32(dd >> 16);
        uint32_t sc, mn;
        k4_scale_min(b + 4, sb, sc, mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        uint32_t qh[2], q[2];
        ld_words_a8<2>(b + 16 + 8 * p, qh);
        ld_words_a8<2>(b + 48 + 32 * (sb >> 1) + 8 * p, q);
        const uint32_t sh = 4 * (sb & 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t v = ((BYTE_AT(q, i) >> sh) & 15u) | (((BYTE_AT(qh, i) >> sb) & 1u) << 4);
            w[i] = d1 * u2f(v) - m1;
        }
    }
};

// §3.4 Q6_K: x = (d·sc)·(q − 32)
struct FmtQ6_K {
    enum { QK = 256, TS = 210 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7), h = sb >> 2, j = sb & 3;
        float d = f16_to_f32(ld_u16(b + 208));
        float dl = d * (float)(int)(int8_t)__ldg(b + 192 + 2 * sb + (p >> 1));
        uint32_t ql[2], qh[2];
        ld_words_a2<2>(b + 64 * h + 32 * (j & 1) + 8 * p, ql);
        ld_words_a2<2>(b + 128 + 32 * h + 8 * p, qh);
        const uint32_t lsh = 4 * (j >> 1), hsh = 2 * j;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t lo = (BYTE_AT(ql, i) >> lsh) & 15u;
            uint32_t hi = (BYTE_AT(qh, i) >> hsh) & 3u;
            w[i] = dl * U2F_OFF(lo | (hi << 4), 32);
        }
    }
};

// §3.4 Q8_K: x = d·qs with an f32 d (one rounding)
struct FmtQ8_K {
    enum { QK = 256, TS = 292 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7);
        float d = __uint_as_float(ld_u32_a4(b));
        uint32_t q[2];
        ld_words_a4<2>(b + 4 + 32 * sb + 8 * p, q);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = d * s8f(BYTE_AT(q, i));
    }
};

// §3.4 IQ4_XS: x = (d·(ls − 32))·K[idx]; sub-block sb's 16 qs bytes hold elements r (low
// nibble of byte r) and r + 16 (high nibble).
struct FmtIQ4_XS {
    enum { QK = 256, TS = 136 };
    static __device__ __forceinline__ void dq8(const uint8_t* base, uint64_t u, uint32_t p, float (&w)[8]) {
        const uint8_t* b = base + (u >> 3) * TS;
        const uint32_t sb = (uint32_t)(u & 7);
        uint32_t w0 = ld_u32_a4(b);
        float d = f16_to_f32(w0);
        uint32_t sh = w0 >> 16;
        uint32_t sl = __ldg(b + 4 + (sb >> 1));
        int ls = (int)(((sl >> (4 * (sb & 1))) & 15u) | (((sh >> (2 * sb)) & 3u) << 4));
        float dl = d * (float)(ls - 32);
        uint32_t q[2];
        ld_words_a8<2>(b + 8 + 16 * sb + 8 * (p & 1), q);
        const uint32_t nsh = 4 * (p >> 1);
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = dl * iq4_value((BYTE_AT(q, i) >> nsh) & 15u);
    }
};

// X-macro over every supported format: (kernel-name suffix, struct). A per-format compile
// (kernels::compile_ptx_format) defines FORMAT_FILTER and its own one-entry FOR_EACH_FORMAT
// before this file, so only that format's kernels are instantiated (short NVRTC time).
#ifndef FORMAT_FILTER
#define FOR_EACH_FORMAT(X) \
    X(f32, FmtF32) X(f16, FmtF16) X(bf16, FmtBF16) \
    X(q4_0, FmtQ4_0) X(q4_1, FmtQ4_1) X(q5_0, FmtQ5_0) X(q5_1, FmtQ5_1) X(q8_0, FmtQ8_0) \
    X(q2_k, FmtQ2_K) X(q3_k, FmtQ3_K) X(q4_k, FmtQ4_K) X(q5_k, FmtQ5_K) X(q6_k, FmtQ6_K) \
    X(q8_k, FmtQ8_K) X(iq4_nl, FmtIQ4_NL) X(iq4_xs, FmtIQ4_XS)
#endif
