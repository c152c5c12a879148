// rope.cu — rotary position embedding, half-split ("rotate_half" / NeoX) pairing.
// Spec: spec/gemma4-text.md §4.4. Dimension i pairs with i + d/2:
//   y[i] = x[i]·cos − x[i+d/2]·sin,   y[i+d/2] = x[i+d/2]·cos + x[i]·sin,   ang = pos·inv_freq[i].
// `default` and `proportional` RoPE differ only in the inv_freq table (host-built, f64;
// proportional has zeros for i ≥ n_rot), so one kernel serves both. Angle, sin/cos and the
// rotation are evaluated in f64 and rounded once to f32.
//
// rope_neox_f32(x, y, pos, inv_freq, n_tokens, n_heads, d): x, y f32 [n_tokens, n_heads, d]
// (y may equal x), pos i32 [n_tokens], inv_freq f64 [d/2]. One thread per pair.
extern "C" __global__ void rope_neox_f32(const float* x, float* y, const int* __restrict__ pos,
                                         const double* __restrict__ inv_freq, int n_tokens,
                                         int n_heads, int d) {
    GRIDDEP_ENTRY();
    const int half = d >> 1;
    const uint64_t idx = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t total = (uint64_t)n_tokens * n_heads * half;
    if (idx >= total) return;
    const int i = (int)(idx % half);
    const uint64_t th = idx / half;  // token * n_heads + head
    const int t = (int)(th / n_heads);
    const uint64_t o = th * d;
    const double ang = (double)pos[t] * inv_freq[i];
    double s, c;
    sincos(ang, &s, &c);
    float y1, y2;
    rope_pair(x[o + i], x[o + i + half], s, c, y1, y2);
    y[o + i] = y1;
    y[o + i + half] = y2;
}
