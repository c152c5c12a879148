//! Shared set-up of the kernel-variant tests (each its own test binary, as
//! `GEMMA4_KERNEL_SRC` is read for the whole process).

use kernels::{nvrtc_available, SOURCE_DIR_ENV};

/// Points `GEMMA4_KERNEL_SRC` at a new folder `CARGO_TARGET_TMPDIR/kernel-variant-<name>` whose
/// `common.cuh` is the repository's with `defines` (`#define` lines) first, the prelude of every
/// family, so each `#ifndef` default gives way; the other sources are the built-in ones. Returns
/// false, after printing `skipped: …`, when NVRTC is not available (the test then passes).
pub fn use_variant(name: &str, defines: &str) -> bool {
    if let Err(why) = nvrtc_available() {
        println!("skipped: {why}");
        return false;
    }
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kernel-variant-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let common = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/common.cuh"))
        .expect("kernels/common.cuh");
    std::fs::write(dir.join("common.cuh"), format!("{defines}\n{common}")).unwrap();
    std::env::set_var(SOURCE_DIR_ENV, &dir);
    true
}
