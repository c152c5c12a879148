//! Kernel source variants chosen by a `#define` compile for `sm_90` too (NVRTC, no GPU), so a
//! variant kept for timing on the GPU machine (`scripts/gpu/run.sh variant`) does not rot.
//!
//! Its own test binary: it points `GEMMA4_KERNEL_SRC` at a variant folder for the whole process
//! (the PTX cache is per process and keyed by family, not by source). NVRTC as in `compile.rs`;
//! without it the test prints `skipped: …` and passes.

mod common;

use kernels::{compile_ptx, compile_ptx_format, Family};

/// `TC_XLAYOUT 2` (`common.cuh`): the int8 digits two 32-blocks per lane (the exponents are in
/// the lanes' read order in both layouts). The families that write (`mvtc_prep` in matvec.cu,
/// layer.cu's and attention.cu's fused producers) and read (the integer-mma `mvtc_*` of Q2_K,
/// Q3_K, Q6_K) them compile, and the variant took effect: its matvecs load the digits as `uint4`
/// (`ld.global.nc.v4.u32`), which the default layout's `uint2` loads never are (counted in the
/// PTX of `kernels/examples/dump_ptx.rs`, 2026-12-06: 0 such loads in the default
/// matvec_q2_k/q3_k/q6_k modules, 80/32/32 with the variant).
#[test]
fn tc_xlayout_2_compiles_sm90() {
    if !common::use_variant("xlayout2", "#define TC_XLAYOUT 2") {
        return;
    }
    for fmt in ["q2_k", "q3_k", "q6_k"] {
        let ptx = compile_ptx_format(Family::Matvec, fmt, (9, 0))
            .unwrap_or_else(|e| panic!("matvec.cu ({fmt}), TC_XLAYOUT 2: {e}"));
        for ng in [1, 2, 3] {
            let entry = format!(".entry mvtc_{fmt}_{ng}(");
            assert!(ptx.contains(&entry), "TC_XLAYOUT 2: {entry} missing");
        }
        assert!(
            ptx.contains("ld.global.nc.v4.u32"),
            "matvec.cu ({fmt}): TC_XLAYOUT 2 did not take effect"
        );
    }
    for family in [Family::Layer, Family::Attention] {
        let ptx = compile_ptx(family, (9, 0))
            .unwrap_or_else(|e| panic!("{}, TC_XLAYOUT 2: {e}", family.file()));
        assert!(ptx.contains(".target sm_90"), "{}", family.file());
    }
}
