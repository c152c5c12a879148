//! `TC_RT2 1` (`matvec.cu`, `TcRt`): Q2_K's three-column-group kernels take two 16-row tiles
//! per block, decoding both tiles' rows against one load of each activation fragment. The
//! variant must keep compiling for `sm_90` (NVRTC, no GPU) so that it can be timed on the GPU
//! machine (`scripts/gpu/run.sh variant DIR TC_RT2=1`, then the `ab` mode).
//!
//! Its own test binary, as `variants.rs`: `GEMMA4_KERNEL_SRC` points at the variant folder for
//! the whole process (the PTX cache is per process and keyed by family, not by source).
//! Without NVRTC the test prints `skipped: …` and passes.

use kernels::{compile_ptx_format, nvrtc_available, Family, SOURCE_DIR_ENV};

/// The `mma.sync` instructions in the PTX body of entry `name` (up to the next `.entry`).
fn mma_count(ptx: &str, name: &str) -> usize {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("{name} missing from the PTX"));
    let body = &ptx[start + 1..];
    let end = body.find(".entry ").unwrap_or(body.len());
    body[..end].matches("mma.sync").count()
}

/// The variant compiles and took effect. Hand count of the default sources' PTX
/// (`kernels/examples/dump_ptx.rs`, 2026-12-07): per super-block, one mma per column group for
/// each of the 8 pairs of 16-groups plus one for the mins, so mvtc_q2_k_2 has 36 and
/// mvtc_q2_k_3 54 (1.5×); with two row tiles mvtc_q2_k_3 has both tiles' mma, 108 (3×), and the
/// one- and two-group kernels are unchanged.
#[test]
fn tc_rt2_compiles_sm90_with_two_row_tiles_at_three_groups() {
    if let Err(why) = nvrtc_available() {
        println!("skipped: {why}");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-variant-rt2");
    std::fs::create_dir_all(&dir).unwrap();
    let src = env!("CARGO_MANIFEST_DIR");
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("cu" | "cuh")
        ) {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let common = std::fs::read_to_string(format!("{src}/common.cuh")).expect("kernels/common.cuh");
    std::fs::write(
        dir.join("common.cuh"),
        format!("#define TC_RT2 1\n{common}"),
    )
    .unwrap();
    std::env::set_var(SOURCE_DIR_ENV, &dir);
    let ptx = compile_ptx_format(Family::Matvec, "q2_k", (9, 0))
        .unwrap_or_else(|e| panic!("matvec.cu (q2_k), TC_RT2 1: {e}"));
    let two = mma_count(&ptx, "mvtc_q2_k_2");
    assert_eq!(two, 36, "mvtc_q2_k_2 is not a row-tile kernel");
    assert_eq!(mma_count(&ptx, "mvtc_q2_k_1"), 18);
    for name in ["mvtc_q2_k_3", "mvtc_q2_k_3w"] {
        assert_eq!(
            mma_count(&ptx, name),
            3 * two,
            "{name}: TC_RT2 did not take effect"
        );
    }
    // the paired launch with attn_v's Q3_K tiles: Q2_K's bodies doubled, Q3_K's (24 mma) not
    assert_eq!(mma_count(&ptx, "mvtcx_q2_k_q3_k_3"), 108 + 24);
}
