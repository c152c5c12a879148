//! Cost of the load-time non-finite check (`reference::quant::check_finite`, conformance
//! contract §9): for each GGUF given (default: every model in `GEMMA4_FIXTURES/models`), the
//! bytes of tensor data, the time of one cold and the best of five warm checks (the file is
//! opened once; "cold" is the first pass over the map, which pays the page faults), throughput
//! and the result.
//!
//! `cargo run -p reference --example check_finite [-- FILE.gguf …]`

use std::path::PathBuf;
use std::time::Instant;

use reference::gguf::GgufFile;
use reference::quant::check_finite;

fn main() {
    let mut files: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        let fix = reference::fixtures_dir();
        let Ok(dir) = std::fs::read_dir(fix.join("models")) else {
            eprintln!("no files given and no fixtures at {}", fix.display());
            std::process::exit(2);
        };
        files = dir
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        files.sort();
    }
    println!(
        "{:<48} {:>12} {:>10} {:>10} {:>9}  result",
        "file", "data bytes", "cold ms", "warm ms", "GB/s"
    );
    for path in files {
        let t0 = Instant::now();
        let file = match GgufFile::open(&path) {
            Ok(f) => f,
            Err(e) => {
                println!("{}: {e}", path.display());
                continue;
            }
        };
        let open_ms = t0.elapsed().as_secs_f64() * 1e3;
        let bytes: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
        let t = Instant::now();
        let result = check_finite(&file);
        let cold = t.elapsed().as_secs_f64();
        let warm = (0..5)
            .map(|_| {
                let t = Instant::now();
                let _ = check_finite(&file);
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min);
        let name = path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        println!(
            "{:<48} {:>12} {:>10.3} {:>10.3} {:>9.2}  {} (open {open_ms:.1} ms)",
            name,
            bytes,
            cold * 1e3,
            warm * 1e3,
            bytes as f64 / warm / 1e9,
            match result {
                Ok(()) => "clean".to_string(),
                Err(e) => e.to_string(),
            }
        );
    }
}
