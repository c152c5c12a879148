//! Placeholder: the generic Gemma-4 forward (filled by its owner).
