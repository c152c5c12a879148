//! Every GGUF under the fixtures directory loads with the strict reader, and facts stated in
//! the fixture READMEs (`README-models.md` §3, `README-tokenizer-dequant.md` §1, §4) hold.
//! Expected values come from the READMEs (parsed at run time where they are tables), never
//! from the reader under test.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use reference::gguf::{sha256_file, GgufFile, Value};
use reference::quant::GgmlType;

fn fixtures() -> Option<PathBuf> {
    let dir = reference::fixtures_dir();
    if dir.join("README.md").exists() {
        Some(dir)
    } else {
        println!("skipped: fixtures not found at {}", dir.display());
        None
    }
}

fn gguf_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            gguf_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "gguf") {
            out.push(p);
        }
    }
}

/// Opens every `.gguf` file (each shard on its own and through the split logic) and checks
/// the invariants every valid file has: data slices of the stated size, canonical layout
/// (all fixtures come from llama.cpp / gguf-py writers), `general.architecture` present.
#[test]
fn every_fixture_gguf_loads_with_canonical_layout() {
    let Some(dir) = fixtures() else { return };
    let mut files = Vec::new();
    gguf_files(&dir, &mut files);
    files.sort();
    assert!(files.len() >= 16, "found only {files:?}");
    for p in &files {
        for (single, f) in [(true, GgufFile::open_single(p)), (false, GgufFile::open(p))] {
            let f = f.unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            // Shards 2.. of a split model carry only the split.* keys (§4.5).
            let later_shard = single && f.get_u16("split.no").is_ok_and(|n| n > 0);
            assert!(matches!(f.version(), 2 | 3), "{}", p.display());
            assert_eq!(f.layout_warnings(), &[], "{}", p.display());
            assert_eq!(
                f.get_str("general.architecture").is_ok(),
                !later_shard,
                "{}",
                p.display()
            );
            for t in f.tensors() {
                assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
                assert_eq!(f.tensor_file_offset(t) % f.alignment(), 0);
            }
        }
    }
}

/// Parses "F32 37, Q4_K 5" (README-models.md §3 "tensor types (count)").
fn parse_type_counts(s: &str) -> BTreeMap<String, usize> {
    s.split(',')
        .map(|part| {
            let mut it = part.split_whitespace();
            let ty = it.next().unwrap_or_default().to_string();
            let n = it.next().and_then(|n| n.parse().ok()).unwrap_or(usize::MAX);
            (ty, n)
        })
        .collect()
}

/// README-models.md §3 table: per model file, tensor type counts, byte size and SHA-256.
#[test]
fn model_files_match_readme_type_counts_sizes_and_sha256() {
    let Some(dir) = fixtures() else { return };
    let readme = std::fs::read_to_string(dir.join("README-models.md")).expect("README-models.md");
    let rows: Vec<Vec<&str>> = readme
        .lines()
        .filter(|l| l.starts_with("| models/"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 10, "README-models.md §3 lists 10 files");
    for row in rows {
        // ["", file, family, types, bytes, sha, ""]
        let (file, types, bytes, sha) = (row[1], row[3], row[4], row[5]);
        let path = dir.join(file);
        let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for t in f.tensors() {
            *counts.entry(t.ggml_type.name().to_string()).or_default() += 1;
        }
        assert_eq!(counts, parse_type_counts(types), "{file}");
        assert_eq!(
            std::fs::metadata(&path).map(|m| m.len()).ok(),
            bytes.parse().ok(),
            "{file}"
        );
        assert_eq!(sha256_file(&path).expect("sha256"), sha, "{file}");
        let arch = f.get_str("general.architecture").expect("architecture");
        let want = if file.contains("assistant") {
            "gemma4-assistant"
        } else {
            "gemma4"
        };
        assert_eq!(arch, want, "{file}");
    }
}

/// README-tokenizer-dequant.md §1: version 3, 0 tensors, 42 key/values, 262144 tokens,
/// 514906 merges, token_type histogram, special ids; the file is not padded (§1.4: 15,776,467
/// bytes, where the padded position would be 15,776,480).
#[test]
fn vocab_file_has_no_tensors_and_the_full_gemma4_vocabulary() {
    let Some(dir) = fixtures() else { return };
    let path = dir.join("tokenizer/ggml-vocab-gemma-4.gguf");
    assert_eq!(
        std::fs::metadata(&path).map(|m| m.len()).ok(),
        Some(15_776_467)
    );
    let f = GgufFile::open(&path).expect("vocab");
    assert_eq!(f.version(), 3);
    assert_eq!(f.tensors().len(), 0);
    assert_eq!(f.n_keys(), 42);
    assert_eq!(f.get_str("tokenizer.ggml.model").ok(), Some("gemma4"));
    assert!(f.get("tokenizer.ggml.pre").is_none());
    let tokens = f.get_array_str("tokenizer.ggml.tokens").expect("tokens");
    assert_eq!(tokens.len(), 262_144);
    assert_eq!(
        &tokens[..5],
        &["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    );
    assert_eq!(tokens[105], "<|turn>");
    assert_eq!(tokens[238], "<0x00>");
    assert_eq!(tokens[493], "<0xFF>");
    assert_eq!(
        f.get_array_str("tokenizer.ggml.merges")
            .map(|m| m.len())
            .ok(),
        Some(514_906)
    );
    let types = f
        .get_array_i32("tokenizer.ggml.token_type")
        .expect("token_type");
    let mut hist: BTreeMap<i32, usize> = BTreeMap::new();
    for t in &types {
        *hist.entry(*t).or_default() += 1;
    }
    assert_eq!(
        hist,
        BTreeMap::from([(1, 261_864), (3, 17), (4, 7), (6, 256)])
    );
    let scores = f.get_array_f32("tokenizer.ggml.scores").expect("scores");
    assert_eq!(scores.len(), 262_144);
    assert!(scores.iter().all(|&s| s == -1000.0));
    for (key, id) in [
        ("bos", 2),
        ("eos", 1),
        ("unknown", 3),
        ("padding", 0),
        ("mask", 4),
    ] {
        assert_eq!(
            f.get_u32(&format!("tokenizer.ggml.{key}_token_id")).ok(),
            Some(id)
        );
    }
    assert_eq!(f.get_bool("tokenizer.ggml.add_bos_token").ok(), Some(true));
    assert_eq!(
        f.get_bool("tokenizer.ggml.add_space_prefix").ok(),
        Some(false)
    );
    let tmpl = f.get_str("tokenizer.chat_template").expect("template");
    assert_eq!(tmpl.chars().count(), 12_045);
}

/// README-tokenizer-dequant.md §4: v3, alignment 32, architecture "fixture", 30 tensors with
/// rows of 256, the listed types and row counts.
#[test]
fn dequant_vectors_file_has_the_documented_tensors() {
    let Some(dir) = fixtures() else { return };
    let f = GgufFile::open(dir.join("dequant-vectors.gguf")).expect("dequant-vectors");
    assert_eq!((f.version(), f.alignment()), (3, 32));
    assert_eq!(f.get_str("general.architecture").ok(), Some("fixture"));
    assert_eq!(f.get_u32("fixture.row_length").ok(), Some(256));
    assert_eq!(f.tensors().len(), 30);
    assert!(f.tensors().iter().all(|t| t.row_len() == 256));
    let rows = [
        ("q.F16", GgmlType::F16, 256),
        ("expect.F16", GgmlType::F32, 256),
        ("q.BF16", GgmlType::BF16, 263),
        ("q.Q4_0", GgmlType::Q4_0, 32),
        ("q.IQ4_NL", GgmlType::IQ4_NL, 32),
        ("q.Q2_K", GgmlType::Q2_K, 128),
        ("q.IQ4_XS", GgmlType::IQ4_XS, 128),
        ("expect.Q6_K", GgmlType::F32, 128),
        ("nanq.Q4_0", GgmlType::Q4_0, 1),
        ("nanq.Q4_K", GgmlType::Q4_K, 8),
    ];
    for (name, ty, n_rows) in rows {
        let t = f.tensor(name).expect(name);
        assert_eq!((t.ggml_type, t.n_rows()), (ty, n_rows), "{name}");
        // Hand size: rows · 256 / block_size · type_size.
        let bytes = n_rows * 256 / ty.block_size() * ty.type_size();
        assert_eq!(t.n_bytes, bytes as u64, "{name}");
    }
    assert!(matches!(
        f.get("fixture.source"),
        Some(Value::String(s)) if !s.is_empty()
    ));
}
