//! Shared helpers of the `oracle_*` tests: fixture lookup, `.npy` reading, fixture JSON access.
//! Fixture formats: `fixtures/README-models.md` §5 (logits JSON/NPY) and §6 (greedy JSON).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The fixtures folder (`GEMMA4_FIXTURES`, default `<workspace>/../shared/fixtures`), or `None`
/// after printing the skip message when it is absent.
pub fn fixtures() -> Option<PathBuf> {
    let dir = reference::fixtures_dir();
    if dir.join("models").is_dir() && dir.join("oracle").is_dir() {
        Some(dir)
    } else {
        println!("skipped: fixtures not found at {}", dir.display());
        None
    }
}

/// Stems (`dense-target.F32`, …) of every target GGUF in `models/`, sorted.
pub fn target_stems(fix: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(fix.join("models"))
        .expect("models dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.contains("-target.") && n.ends_with(".gguf"))
        .map(|n| n.trim_end_matches(".gguf").to_string())
        .collect();
    v.sort();
    v
}

/// Reads a JSON file.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A float stored as a JSON string (Python `repr`) or number.
pub fn json_f64(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::String(s) => s.parse().expect("float string"),
        v => v.as_f64().expect("float"),
    }
}

/// A JSON array of integers as token ids.
pub fn json_ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Reads a little-endian float64 C-order `.npy` (format 1.0/2.0): `(shape, data)`.
/// Panics with a message on any other dtype or layout.
pub fn read_npy_f64(path: &Path) -> (Vec<usize>, Vec<f64>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &bytes[..6],
        b"\x93NUMPY",
        "{}: not an npy file",
        path.display()
    );
    let major = bytes[6];
    let (hlen, hstart) = if major == 1 {
        (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10)
    } else {
        (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        )
    };
    let header = std::str::from_utf8(&bytes[hstart..hstart + hlen]).expect("header utf8");
    assert!(
        header.contains("'descr': '<f8'"),
        "{}: dtype is not <f8: {header}",
        path.display()
    );
    assert!(
        header.contains("'fortran_order': False"),
        "{}: Fortran order",
        path.display()
    );
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("shape");
    let shape: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("dim"))
        .collect();
    let data: Vec<f64> = bytes[hstart + hlen..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    assert_eq!(
        data.len(),
        shape.iter().product::<usize>(),
        "{}: size",
        path.display()
    );
    (shape, data)
}

/// `max_i |a_i − b_i| / max_i |b_i|` (b = reference row).
pub fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| y.abs()).fold(0.0, f64::max);
    num / den
}

/// Largest [`rel_err`] over rows (`a`, `b` the same number of rows; b = reference).
pub fn max_rel(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| rel_err(x, y))
        .fold(0.0, f64::max)
}

/// The `(id, logit)` pairs of one position of an oracle `*.logits.json` `top16` entry
/// (`[[id, logit], …]`, logits as in [`json_f64`]).
pub fn top16_pairs(pairs: &serde_json::Value) -> Vec<(u32, f64)> {
    pairs
        .as_array()
        .expect("pairs")
        .iter()
        .map(|pr| (pr[0].as_u64().expect("id") as u32, json_f64(&pr[1])))
        .collect()
}
