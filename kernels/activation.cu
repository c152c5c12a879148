// activation.cu — GELU-tanh GeGLU and tanh soft-capping.
// Spec: spec/gemma4-text.md §5 (gelu_pytorch_tanh):
//   gelu(g) = 0.5·g·(1 + tanh(sqrt(2/π)·(g + 0.044715·g³))),  out = gelu(gate) ⊙ up;
// §9 final logit soft-capping: y = cap · tanh(x / cap).

// geglu_f32(gate, up, out, n): elementwise over n f32 values (out may alias gate or up).
extern "C" __global__ void geglu_f32(const float* gate, const float* up, float* out, uint64_t n) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = geglu_mul(gate[i], up[i]);
}

// softcap_f32(x, y, n, cap): y = cap·tanh(x/cap) elementwise (y may equal x).
extern "C" __global__ void softcap_f32(const float* x, float* y, uint64_t n, float cap) {
    GRIDDEP_ENTRY();
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = cap * tanhf(x[i] / cap);
}
