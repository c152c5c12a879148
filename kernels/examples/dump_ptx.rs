//! Writes the NVRTC PTX of the matvec family, one file per format (`matvec_<fmt>.ptx`), and of
//! the families without formats (`attention.ptx`, `layer.ptx`, …) into the folder given as the
//! first argument (default `target/ptx`), for `ptxas -v` register and spill reports on a machine
//! with the CUDA toolkit (`scripts/gpu/run.sh`). Needs libnvrtc.
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // the sources take GEMMA4_TC_DIGITS (kernels::tc_digits): a bad value is refused, not ignored
    if let Some(why) = kernels::tc_digits_env_problem() {
        return Err(why.into());
    }
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "target/ptx".into()),
    );
    std::fs::create_dir_all(&dir)?;
    for fmt in kernels::FORMATS {
        let ptx = kernels::compile_ptx_format(kernels::Family::Matvec, fmt, (9, 0))?;
        let path = dir.join(format!("matvec_{fmt}.ptx"));
        std::fs::write(&path, ptx.as_bytes())?;
        println!("{}", path.display());
    }
    for family in kernels::Family::ALL {
        if family.reads_blocks() {
            continue;
        }
        let ptx = kernels::compile_ptx(family, (9, 0))?;
        let path = dir.join(family.file().replace(".cu", ".ptx"));
        std::fs::write(&path, ptx.as_bytes())?;
        println!("{}", path.display());
    }
    Ok(())
}
