//! `GEMMA4_TC_WNST` (per-warp weight stages in dynamic shared memory, `TC_WNST` in `matvec.cu`):
//! the Q3_K matvec module compiles for `sm_90` with the define the host prepends, and it took
//! effect — the `mvtc_q3_k_*` kernels address a dynamic (`.extern .shared`) buffer and check its
//! size (`%dynamic_smem_size`), which the default build never does.
//!
//! Its own test binary: the variable is read once per process. NVRTC as in `compile.rs`; without
//! it the test prints `skipped: …` and passes.

use kernels::{compile_ptx_format, nvrtc_available, Family};

#[test]
fn wnst_4_compiles_sm90() {
    if let Err(why) = nvrtc_available() {
        println!("skipped: {why}");
        return;
    }
    std::env::set_var(kernels::TC_WNST_ENV, "4");
    assert_eq!(kernels::tc_wnst(), 4);
    let ptx = compile_ptx_format(Family::Matvec, "q3_k", (9, 0))
        .unwrap_or_else(|e| panic!("matvec.cu (q3_k), TC_WNST 4: {e}"));
    for ng in ["1", "2", "3", "1w", "3w"] {
        let entry = format!(".entry mvtc_q3_k_{ng}(");
        assert!(ptx.contains(&entry), "TC_WNST 4: {entry} missing");
    }
    assert!(
        ptx.contains(".extern .shared") && ptx.contains("%dynamic_smem_size"),
        "matvec.cu (q3_k): TC_WNST 4 did not take effect"
    );
    // Q2_K stages per block: its kernels keep static stages (the module has no dynamic check)
    let q2 = compile_ptx_format(Family::Matvec, "q2_k", (9, 0))
        .unwrap_or_else(|e| panic!("matvec.cu (q2_k), TC_WNST 4: {e}"));
    assert!(!q2.contains("%dynamic_smem_size"), "matvec.cu (q2_k)");
}
