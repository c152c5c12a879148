//! Test support: where the GPU tests find their fixture models.

use std::path::PathBuf;

/// The fixture model `models/<name>.gguf` under `$GEMMA4_FIXTURES` (unset or empty:
/// `../shared/fixtures` beside the workspace) when a usable GPU and the file are both present;
/// otherwise prints `skipped: <reason>` and returns `None` (the test then passes without
/// running, as the CI machine has no GPU).
pub(crate) fn gpu_fixture_model(name: &str) -> Option<PathBuf> {
    if let Some(why) = crate::device::unavailable_reason() {
        println!("skipped: {why}");
        return None;
    }
    let fx = reference::fixtures_dir();
    let path = fx.join(format!("models/{name}.gguf"));
    if !path.exists() {
        println!("skipped: fixtures not found at {}", fx.display());
        return None;
    }
    Some(path)
}
