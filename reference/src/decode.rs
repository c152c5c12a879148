//! Placeholder: filled by its owner (see ARCHITECTURE.md).
