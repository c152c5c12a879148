//! `TC_MULTI 2` (`matvec.cu`, `TcMulti`): Q2_K's one-column-group kernels take two 16-row tiles
//! per block, one after the other, the second tile's first weight stages queued during the
//! first tile's epilogue. The variant must keep compiling for `sm_90` (NVRTC, no GPU) so that it
//! can be timed on the GPU machine (`scripts/gpu/run.sh variant DIR TC_MULTI=2`, then the `ab`
//! mode). Without NVRTC the test prints `skipped: …` and passes.

mod common;

use kernels::{compile_ptx_format, Family};

/// The `mma.sync` instructions in the PTX body of entry `name` (up to the next `.entry`).
fn mma_count(ptx: &str, name: &str) -> usize {
    let start = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("{name} missing from the PTX"));
    let body = &ptx[start + 1..];
    let end = body.find(".entry ").unwrap_or(body.len());
    body[..end].matches("mma.sync").count()
}

/// The variant compiles and took effect. Hand count of the PTX (`kernels/examples/dump_ptx.rs`,
/// 2026-12-07): one super-block body is 9 mma (8 integer m16n8k32 for the pairs of 16-groups,
/// one bf16 for the mins) per column group. The default entries inline the body twice (the
/// first and the second matrix of a paired launch), so mvtc_q2_k_1 has 18 and mvtc_q2_k_2 36;
/// with TC_MULTI the one-group entries run one body in a loop over the block's tiles of
/// either matrix, 9, and the two-group kernel is unchanged.
#[test]
fn tc_multi_compiles_sm90_with_one_body_per_one_group_entry() {
    if !common::use_variant("multi2", "#define TC_MULTI 2") {
        return;
    }
    let ptx = compile_ptx_format(Family::Matvec, "q2_k", (9, 0))
        .unwrap_or_else(|e| panic!("matvec.cu (q2_k), TC_MULTI 2: {e}"));
    assert_eq!(mma_count(&ptx, "mvtc_q2_k_2"), 36, "mvtc_q2_k_2 changed");
    for name in ["mvtc_q2_k_1", "mvtc_q2_k_1w"] {
        assert_eq!(
            mma_count(&ptx, name),
            9,
            "{name}: TC_MULTI did not take effect"
        );
    }
}
