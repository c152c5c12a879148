//! `reference::fixtures_dir`: an empty `GEMMA4_FIXTURES` is unset, as `.ci/run` passes it (it
//! was read as the current folder by the test helpers). One test in its own binary: it sets
//! the variable, so no other test of this process reads it meanwhile.

use std::path::{Path, PathBuf};

#[test]
fn empty_gemma4_fixtures_is_the_default_folder() {
    // the workspace root (reference/'s parent), then ../shared/fixtures beside it
    let default = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("../shared/fixtures");
    std::env::set_var("GEMMA4_FIXTURES", "");
    assert_eq!(reference::fixtures_dir(), default);
    std::env::remove_var("GEMMA4_FIXTURES");
    assert_eq!(reference::fixtures_dir(), default);
    std::env::set_var("GEMMA4_FIXTURES", "/some/fixtures");
    assert_eq!(reference::fixtures_dir(), PathBuf::from("/some/fixtures"));
}
