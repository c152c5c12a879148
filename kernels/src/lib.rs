//! `kernels` — CUDA C sources (one family per `.cu` file) and the NVRTC compile/cache helper. Filled by the CUDA runtime issue.
