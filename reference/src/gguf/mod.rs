//! GGUF container: reader (mmap, zero-copy), writer, split files, limits. Spec: `spec/gguf-gemma4.md` §1, §2, §4.
