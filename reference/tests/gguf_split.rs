//! Split GGUF models (`spec/gguf-gemma4.md` §4.5, fixtures `README-tokenizer-dequant.md` §5):
//! the three shards made by `llama-gguf-split` open as one model equal to `split/model.gguf`,
//! and broken shard sets give their typed errors.

use std::path::{Path, PathBuf};

use reference::gguf::{GgufError, GgufFile, GgufWriter, Value};
use reference::quant::GgmlType;

fn fixtures() -> Option<PathBuf> {
    let dir = reference::fixtures_dir();
    if dir.join("split/model.gguf").exists() {
        Some(dir)
    } else {
        println!("skipped: fixtures not found at {}", dir.display());
        None
    }
}

/// A fresh empty directory under the cargo target tmp dir.
fn tmp_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gguf_split")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

#[test]
fn split_shards_open_as_one_model_equal_to_the_unsplit_file() {
    let Some(dir) = fixtures() else { return };
    let whole = GgufFile::open(dir.join("split/model.gguf")).expect("model.gguf");
    assert_eq!(whole.n_shards(), 1);
    for shard in 1..=3 {
        let p = dir.join(format!("split/model-0000{shard}-of-00003.gguf"));
        let split = GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(split.n_shards(), 3);
        let names: Vec<&str> = split.tensors().iter().map(|t| t.name.as_str()).collect();
        let whole_names: Vec<&str> = whole.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, whole_names);
        for t in split.tensors() {
            let w = whole.tensor(&t.name).expect("same name in model.gguf");
            assert_eq!(
                (&t.dims, t.ggml_type, t.n_bytes),
                (&w.dims, w.ggml_type, w.n_bytes)
            );
            assert!(split.tensor_data(t) == whole.tensor_data(w), "{}", t.name);
        }
        // README §5 table: shard of each tensor (1-based there).
        let shards: Vec<usize> = split.tensors().iter().map(|t| t.shard + 1).collect();
        assert_eq!(shards, [1, 1, 2, 2, 3, 3]);
        // Metadata is the first shard's: the model's keys plus split.*.
        assert_eq!(split.get_str("general.name").ok(), Some("split fixture"));
        assert_eq!(split.get_u32("fixture.n_embd").ok(), Some(64));
        assert_eq!(split.get_f32("fixture.eps").ok(), Some(1e-6));
        assert_eq!(split.get_bool("fixture.flag").ok(), Some(true));
        assert_eq!(
            split.get_array_i32("fixture.kv_heads").ok(),
            Some(vec![8, 2])
        );
        assert_eq!(
            split.get_array_str("fixture.layer_kinds").ok(),
            Some(vec!["sliding", "full"])
        );
        assert_eq!(split.get_u16("split.no").ok(), Some(0));
        assert_eq!(split.get_u16("split.count").ok(), Some(3));
        assert_eq!(split.get_i32("split.tensors.count").ok(), Some(6));
        for (k, v) in whole.metadata() {
            assert_eq!(split.get(k), Some(v), "{k}");
        }
    }
    // README §5 table: types and ne of the six tensors.
    let expect = [
        ("token_embd.weight", GgmlType::F32, vec![64, 32], 8192),
        ("blk.0.attn_norm.weight", GgmlType::F32, vec![64], 256),
        ("blk.0.attn_q.weight", GgmlType::F16, vec![64, 64], 8192),
        ("blk.0.ffn_up.weight", GgmlType::Q8_0, vec![64, 128], 8704),
        ("blk.1.ffn_down.weight", GgmlType::Q4_0, vec![128, 64], 4608),
        ("output.weight", GgmlType::BF16, vec![64, 32], 4096),
    ];
    for (name, ty, dims, bytes) in expect {
        let t = whole.tensor(name).expect(name);
        assert_eq!((t.ggml_type, &t.dims, t.n_bytes), (ty, &dims, bytes));
    }
}

fn copy(src: &Path, dst: &Path) {
    std::fs::copy(src, dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
}

#[test]
fn missing_shard_is_an_error_naming_its_path() {
    let Some(dir) = fixtures() else { return };
    let d = tmp_dir("missing");
    for i in 1..=2 {
        let n = format!("model-0000{i}-of-00003.gguf");
        copy(&dir.join("split").join(&n), &d.join(&n));
    }
    match GgufFile::open(d.join("model-00002-of-00003.gguf")) {
        Err(GgufError::SplitMissingShard { path }) => {
            assert_eq!(path, d.join("model-00003-of-00003.gguf"))
        }
        other => panic!("expected SplitMissingShard, got {other:?}"),
    }
}

#[test]
fn shards_in_the_wrong_order_give_split_number_mismatch() {
    let Some(dir) = fixtures() else { return };
    let d = tmp_dir("order");
    let s = |i: u32| dir.join(format!("split/model-0000{i}-of-00003.gguf"));
    copy(&s(1), &d.join("model-00001-of-00003.gguf"));
    copy(&s(3), &d.join("model-00002-of-00003.gguf"));
    copy(&s(2), &d.join("model-00003-of-00003.gguf"));
    match GgufFile::open(d.join("model-00001-of-00003.gguf")) {
        Err(GgufError::SplitNumberMismatch {
            path,
            expected,
            found,
        }) => {
            assert_eq!(path, d.join("model-00002-of-00003.gguf"));
            assert_eq!((expected, found), (1, 2));
        }
        other => panic!("expected SplitNumberMismatch, got {other:?}"),
    }
}

#[test]
fn shard_count_in_name_disagreeing_with_split_count_is_an_error() {
    let Some(dir) = fixtures() else { return };
    let d = tmp_dir("count");
    copy(
        &dir.join("split/model-00001-of-00003.gguf"),
        &d.join("model-00001-of-00004.gguf"),
    );
    let r = GgufFile::open(d.join("model-00001-of-00004.gguf"));
    assert!(
        matches!(
            r,
            Err(GgufError::SplitCountMismatch {
                expected: 4,
                found: 3,
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn split_shard_with_a_plain_name_is_an_error() {
    let Some(dir) = fixtures() else { return };
    let d = tmp_dir("name");
    copy(
        &dir.join("split/model-00001-of-00003.gguf"),
        &d.join("model.gguf"),
    );
    let r = GgufFile::open(d.join("model.gguf"));
    assert!(
        matches!(r, Err(GgufError::SplitBadName { count: 3, .. })),
        "{r:?}"
    );
    // Each shard still opens on its own.
    let single = GgufFile::open_single(d.join("model.gguf")).expect("single");
    assert_eq!(single.tensors().len(), 2);
}

/// Writes a 2-shard set with the given tensor names per shard and `split.tensors.count`.
fn write_pair(d: &Path, names: [&[&str]; 2], total: i32) {
    for (i, shard) in names.iter().enumerate() {
        let mut w = GgufWriter::new();
        if i == 0 {
            w.set("general.architecture", Value::String("fixture".into()));
        }
        w.set("split.no", Value::U16(i as u16));
        w.set("split.count", Value::U16(2));
        w.set("split.tensors.count", Value::I32(total));
        for n in *shard {
            w.add_tensor(n, &[4], GgmlType::F32, vec![0; 16])
                .expect("add");
        }
        w.write_file(d.join(format!("w-0000{}-of-00002.gguf", i + 1)))
            .expect("write");
    }
}

#[test]
fn tensor_name_repeated_across_shards_is_a_duplicate() {
    let d = tmp_dir("dup");
    write_pair(&d, [&["a", "b"], &["a"]], 3);
    let r = GgufFile::open(d.join("w-00001-of-00002.gguf"));
    let (one, two) = (
        d.join("w-00001-of-00002.gguf"),
        d.join("w-00002-of-00002.gguf"),
    );
    assert!(
        matches!(&r, Err(GgufError::DuplicateTensorInShards { name, first, second })
            if name == "a" && *first == one && *second == two),
        "{r:?}"
    );
    // both shards named in the message (it named neither)
    let e = r.unwrap_err().to_string();
    assert_eq!(
        e,
        format!("duplicate tensor 'a': in shard {one:?} and again in shard {two:?}")
    );
}

#[test]
fn merged_tensor_count_must_equal_split_tensors_count() {
    let d = tmp_dir("total");
    write_pair(&d, [&["a", "b"], &["c"]], 4);
    let r = GgufFile::open(d.join("w-00002-of-00002.gguf"));
    assert!(
        matches!(
            r,
            Err(GgufError::SplitTensorCount {
                expected: 4,
                found: 3
            })
        ),
        "{r:?}"
    );
    write_pair(&d, [&["a", "b"], &["c"]], 3);
    let f = GgufFile::open(d.join("w-00002-of-00002.gguf")).expect("valid pair");
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.tensor("c").map(|t| t.shard).ok(), Some(1));
    assert!(matches!(
        f.get_array("split.no"),
        Err(GgufError::WrongType { .. })
    ));
}
