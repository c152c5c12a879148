//! Compiles every kernel family for `sm_90` (H200) with NVRTC — no GPU needed.
//!
//! NVRTC comes from the pinned PyPI wheel `nvidia-cuda-nvrtc==13.0.88` (the GPU machine's
//! toolkit version): `pip install --target target/nvrtc nvidia-cuda-nvrtc==13.0.88` and put
//! `target/nvrtc/nvidia/cu13/lib` on `LD_LIBRARY_PATH`. Without it the test prints
//! `skipped: …` and passes.

use kernels::{compile_ptx, nvrtc_available, Family};

#[test]
fn compile_all_kernels_sm90() {
    if let Err(why) = nvrtc_available() {
        println!("skipped: {why}");
        return;
    }
    for family in Family::ALL {
        let t = std::time::Instant::now();
        let ptx = compile_ptx(family, (9, 0)).unwrap_or_else(|e| panic!("{}: {e}", family.file()));
        assert!(
            ptx.contains(".target sm_90"),
            "{}: no sm_90 target",
            family.file()
        );
        // Every kernel the host side launches by name must be an entry of the PTX, with a
        // parameter list whose every type ptx_param_sizes reads (no 0-byte parameter).
        let params = kernels::ptx_param_sizes(&ptx);
        for name in family.kernel_names() {
            let entry = format!(".entry {name}(");
            assert!(
                ptx.contains(&entry),
                "{}: kernel {name} missing",
                family.file()
            );
            let sizes = &params[&name];
            assert!(
                !sizes.is_empty() && sizes.iter().all(|&b| b > 0),
                "{}: kernel {name} parameters {sizes:?}",
                family.file()
            );
            // the process-wide lists the runtime checks launches against
            assert_eq!(
                kernels::kernel_param_sizes(&name).as_deref(),
                Some(&sizes[..]),
                "{name}"
            );
        }
        if family == Family::Reduce {
            // fill_u32(uint32_t*, uint64_t, uint32_t): by hand 8, 8, 4
            assert_eq!(params["fill_u32"], vec![8, 8, 4]);
        }
        println!(
            "{}: {} kernels, {} bytes of PTX, {:.2} s",
            family.file(),
            family.kernel_names().len(),
            ptx.len(),
            t.elapsed().as_secs_f64()
        );
    }
}

/// The attention launch pads its score array (hand derivation: span 1 → round_up(1, 4) + 4 = 8
/// floats = 32 bytes; span 16 → 20 floats = 80 bytes), and the largest context the runtime
/// allows (12 000 keys) still fits the 48 KiB default with the kernel's 128-byte static array.
#[test]
fn attention_shared_memory_is_padded() {
    assert_eq!(kernels::attention_smem_bytes(1), 32);
    assert_eq!(kernels::attention_smem_bytes(2), 32);
    assert_eq!(kernels::attention_smem_bytes(16), 80);
    assert_eq!(kernels::attention_smem_bytes(17), 96);
    assert!(kernels::attention_smem_bytes(12_000) + 128 <= 48 * 1024);
}
