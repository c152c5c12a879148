//! `runtime` — the CUDA engine: device weights, KV cache, modes, batching, speculative decoding. Filled by the CUDA runtime issue.
