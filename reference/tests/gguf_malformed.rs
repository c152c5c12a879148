//! Hand-built malformed GGUF files, one per condition of the strict-reader checklist
//! (`spec/gguf-gemma4.md` §2.2, §2.3, "Validation checklist"), each asserting its own error
//! variant; plus the edge cases the reader must accept (§1.3 v2, §1.4 zero-tensor files
//! without padding, §1.5 non-canonical layout as a warning, §3.7 listed-but-unsupported types).
//! Files are assembled byte by byte with [`B`], independent of the project writer.

use reference::gguf::{GgufError, GgufFile, Value};
use reference::quant::GgmlType;

/// Little-endian byte builder for GGUF files.
#[derive(Clone, Default)]
struct B(Vec<u8>);

impl B {
    /// Magic, version, tensor_count, kv_count.
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> B {
        let mut b = B(b"GGUF".to_vec());
        b = b.u32(version).u64(n_tensors).u64(n_kv);
        b
    }
    fn raw(mut self, bytes: &[u8]) -> B {
        self.0.extend_from_slice(bytes);
        self
    }
    fn u8(self, v: u8) -> B {
        self.raw(&[v])
    }
    fn u32(self, v: u32) -> B {
        self.raw(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> B {
        self.raw(&v.to_le_bytes())
    }
    /// A GGUF string: u64 length + bytes.
    fn s(self, bytes: &[u8]) -> B {
        self.u64(bytes.len() as u64).raw(bytes)
    }
    /// Key + value type id.
    fn key(self, key: &str, ty: u32) -> B {
        self.s(key.as_bytes()).u32(ty)
    }
    fn kv_u32(self, key: &str, v: u32) -> B {
        self.key(key, 4).u32(v)
    }
    fn kv_str(self, key: &str, v: &str) -> B {
        self.key(key, 8).s(v.as_bytes())
    }
    /// Tensor info: name, n_dims, dims, type, offset.
    fn tensor(self, name: &[u8], dims: &[u64], ty: u32, offset: u64) -> B {
        let mut b = self.s(name).u32(dims.len() as u32);
        for &d in dims {
            b = b.u64(d);
        }
        b.u32(ty).u64(offset)
    }
    /// Zero bytes up to a multiple of `a`.
    fn pad(mut self, a: usize) -> B {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
        self
    }
    /// Drops the last `n` bytes.
    fn cut(mut self, n: usize) -> B {
        self.0.truncate(self.0.len().saturating_sub(n));
        self
    }
    fn zeros(mut self, n: usize) -> B {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn open(self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.0)
    }
}

/// A valid v3 file: one u32 key, two F32 tensors of 4 elements at canonical offsets 0 and 32.
fn valid_two_tensors(version: u32) -> B {
    B::header(version, 2, 1)
        .kv_str("general.architecture", "test")
        .tensor(b"a", &[4], 0, 0)
        .tensor(b"b", &[4], 0, 32)
        .pad(32)
        .zeros(16)
        .pad(32)
        .zeros(16)
}

/// Asserts the file is rejected with an error matching `pred`, printing it otherwise.
fn rejects(b: B, what: &str, pred: impl Fn(&GgufError) -> bool) {
    match b.open() {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => assert!(pred(&e), "{what}: wrong error {e:?}"),
    }
}

#[test]
fn valid_v3_and_v2_files_are_accepted_identically() {
    for v in [2, 3] {
        let f = valid_two_tensors(v).open().expect("valid");
        assert_eq!(f.version(), v);
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.tensors().len(), 2);
        assert_eq!(f.tensor("b").map(|t| t.offset).ok(), Some(32));
        assert_eq!(f.tensor_data(f.tensor("b").expect("b")).len(), 16);
        assert!(f.layout_warnings().is_empty());
        assert!(f.require_canonical_layout().is_ok());
    }
}

#[test]
fn header_errors_have_their_own_variants() {
    rejects(
        B(b"GGUX".to_vec()).u32(3).u64(0).u64(0),
        "magic",
        |e| matches!(e, GgufError::BadMagic { found } if found == b"GGUX"),
    );
    rejects(
        B(b"GG".to_vec()),
        "short magic",
        |e| matches!(e, GgufError::BadMagic { found } if found == b"GG"),
    );
    for v in [0, 1, 4, 0xFFFF] {
        rejects(
            B::header(v, 0, 0),
            "version",
            |e| matches!(e, GgufError::UnsupportedVersion { version } if *version == v),
        );
    }
    // Version 3 stored big-endian reads as 0x03000000 (§1.2).
    rejects(
        B(b"GGUF".to_vec()).raw(&3u32.to_be_bytes()).zeros(16),
        "big endian",
        |e| {
            matches!(
                e,
                GgufError::BigEndian {
                    raw_version: 0x0300_0000
                }
            )
        },
    );
    rejects(B(b"GGUF".to_vec()).u32(3).u64(0), "truncated header", |e| {
        matches!(
            e,
            GgufError::Truncated {
                need: 8,
                have: 0,
                ..
            }
        )
    });
    rejects(B::header(3, 0, u64::MAX), "kv count", |e| {
        matches!(
            e,
            GgufError::TooManyKeys {
                count: u64::MAX,
                ..
            }
        )
    });
    // 1 key of 14+ bytes cannot fit in 10 remaining bytes.
    rejects(B::header(3, 0, 1).zeros(10), "kv count vs bytes", |e| {
        matches!(
            e,
            GgufError::TooManyKeys {
                count: 1,
                remaining: 10
            }
        )
    });
    rejects(
        B::header(3, 1 << 60, 0),
        "tensor count",
        |e| matches!(e, GgufError::TooManyTensors { count, .. } if *count == 1 << 60),
    );
}

#[test]
fn key_errors_have_their_own_variants() {
    rejects(B::header(3, 0, 1).s(b"").u32(4).u32(1), "empty key", |e| {
        matches!(e, GgufError::EmptyKey { index: 0, at: 24 })
    });
    rejects(
        B::header(3, 0, 1).u64(70_000).zeros(100),
        "key too long",
        |e| matches!(e, GgufError::KeyTooLong { len: 70_000, .. }),
    );
    rejects(B::header(3, 0, 1).u64(100).zeros(20), "key past end", |e| {
        matches!(
            e,
            GgufError::StringTooLong {
                len: 100,
                limit: 20,
                ..
            }
        )
    });
    rejects(
        B::header(3, 0, 1).s(&[0xff, 0xfe]).u32(4).u32(1),
        "non-UTF-8 key",
        |e| matches!(e, GgufError::InvalidUtf8Key { index: 0, .. }),
    );
    rejects(
        B::header(3, 0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2),
        "duplicate key",
        |e| matches!(e, GgufError::DuplicateKey { key } if key == "a.b"),
    );
}

#[test]
fn value_errors_name_the_key() {
    let is_k = |k: &String| k == "k";
    rejects(
        B::header(3, 0, 1).key("k", 13).u32(0),
        "value type 13",
        |e| matches!(e, GgufError::UnknownValueType { key, type_id: 13 } if is_k(key)),
    );
    rejects(
        B::header(3, 0, 1).key("k", 9).u32(200).u64(0),
        "array type 200",
        |e| matches!(e, GgufError::UnknownArrayType { key, type_id: 200 } if is_k(key)),
    );
    // Array of u8 arrays (§2.1: gguf.cpp rejects "invalid GGUF type 9").
    rejects(
        B::header(3, 0, 1)
            .key("k", 9)
            .u32(9)
            .u64(1)
            .u32(0)
            .u64(2)
            .raw(&[1, 2]),
        "nested array",
        |e| matches!(e, GgufError::NestedArray { key } if is_k(key)),
    );
    rejects(
        B::header(3, 0, 1).key("k", 7).u8(2).zeros(4),
        "bool 2",
        |e| matches!(e, GgufError::BadBool { key, byte: 2, index: None } if is_k(key)),
    );
    rejects(
        B::header(3, 0, 1)
            .key("k", 9)
            .u32(7)
            .u64(3)
            .raw(&[1, 0, 0xff]),
        "bool array",
        |e| {
            matches!(
                e,
                GgufError::BadBool {
                    byte: 0xff,
                    index: Some(2),
                    ..
                }
            )
        },
    );
    rejects(
        B::header(3, 0, 1).key("k", 8).u64(1 << 62).zeros(8),
        "string 2^62",
        |e| matches!(e, GgufError::StringTooLong { len, .. } if *len == 1 << 62),
    );
    rejects(
        B::header(3, 0, 1).key("k", 8).u64(9).raw(b"12345678"),
        "string one past end",
        |e| matches!(e, GgufError::StringTooLong { len: 9, limit: 8, what, .. } if what.contains("'k'")),
    );
    rejects(
        B::header(3, 0, 1).key("k", 9).u32(0).u64(1 << 31).zeros(64),
        "array over 2^30",
        |e| matches!(e, GgufError::ArrayTooLong { key, count, .. } if is_k(key) && *count == 1 << 31),
    );
    // 5 u32 need 20 bytes, 16 remain.
    rejects(
        B::header(3, 0, 1).key("k", 9).u32(4).u64(5).zeros(16),
        "array past end",
        |e| {
            matches!(
                e,
                GgufError::ArrayTooLong {
                    count: 5,
                    min_elem_size: 4,
                    remaining: 16,
                    ..
                }
            )
        },
    );
    // 3 strings need at least 24 bytes (length fields), 20 remain.
    rejects(
        B::header(3, 0, 1).key("k", 9).u32(8).u64(3).zeros(20),
        "string array past end",
        |e| {
            matches!(
                e,
                GgufError::ArrayTooLong {
                    min_elem_size: 8,
                    ..
                }
            )
        },
    );
    rejects(
        B::header(3, 0, 1).key("k", 8).s(&[b'a', 0xc3]),
        "non-UTF-8 string value",
        |e| matches!(e, GgufError::InvalidUtf8Value { key, index: None } if is_k(key)),
    );
    rejects(
        B::header(3, 0, 1)
            .key("k", 9)
            .u32(8)
            .u64(2)
            .s(b"ok")
            .s(&[0x80]),
        "non-UTF-8 string element",
        |e| matches!(e, GgufError::InvalidUtf8Value { index: Some(1), .. }),
    );
    rejects(
        B::header(3, 0, 1).key("k", 4).raw(&[1, 2]).zeros(0),
        "u32 value truncated",
        |e| matches!(e, GgufError::Truncated { what, need: 4, have: 2, .. } if what.contains("'k'")),
    );
    rejects(
        B::header(3, 0, 1).key("k", 12).zeros(7),
        "f64 value truncated",
        |e| {
            matches!(
                e,
                GgufError::Truncated {
                    need: 8,
                    have: 7,
                    ..
                }
            )
        },
    );
}

/// Element indices read as `element 600`, not as Rust's `Some(600)`; a scalar value names no
/// element.
#[test]
fn value_error_messages_name_the_element_as_a_number() {
    let text = |b: B| b.open().expect_err("refused").to_string();
    let mut strings = B::header(3, 0, 1).key("k", 9).u32(8).u64(601);
    for _ in 0..600 {
        strings = strings.s(b"ok");
    }
    assert_eq!(
        text(strings.s(&[0xff, 0xfe])),
        "string value of key 'k' (element 600) is not UTF-8"
    );
    assert_eq!(
        text(B::header(3, 0, 1).key("k", 8).s(&[b'a', 0xc3])),
        "string value of key 'k' is not UTF-8"
    );
    assert_eq!(
        text(
            B::header(3, 0, 1)
                .key("k", 9)
                .u32(7)
                .u64(3)
                .raw(&[1, 0, 0xff])
        ),
        "key 'k' has bool byte 0xff (element 2); only 0 and 1 are accepted"
    );
    assert_eq!(
        text(B::header(3, 0, 1).key("k", 7).u8(2).zeros(4)),
        "key 'k' has bool byte 0x02; only 0 and 1 are accepted"
    );
}

#[test]
fn alignment_must_be_a_u32_power_of_two_up_to_1_mib() {
    rejects(
        B::header(3, 0, 1).key("general.alignment", 10).u64(32),
        "u64 alignment",
        |e| matches!(e, GgufError::AlignmentType { found } if found.name() == "u64"),
    );
    for bad in [0, 24, 1 << 21, u32::MAX] {
        rejects(
            B::header(3, 0, 1).kv_u32("general.alignment", bad),
            "alignment value",
            |e| matches!(e, GgufError::BadAlignment { value } if *value == bad),
        );
    }
    // 64 is fine: the single tensor's data starts at a multiple of 64.
    let f = B::header(3, 1, 1)
        .kv_u32("general.alignment", 64)
        .tensor(b"t", &[8], 0, 0)
        .pad(64)
        .zeros(32)
        .open()
        .expect("alignment 64");
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_start(0) % 64, 0);
}

/// One valid key, one tensor info built by `t`, then padding and `data` zero bytes.
fn one_tensor(t: impl Fn(B) -> B, data: usize) -> B {
    t(B::header(3, 1, 1).kv_str("general.architecture", "x"))
        .pad(32)
        .zeros(data)
}

#[test]
fn tensor_info_errors_name_the_tensor() {
    let name64 = [b'n'; 64];
    rejects(
        one_tensor(|b| b.tensor(&name64, &[4], 0, 0), 16),
        "name 64",
        |e| matches!(e, GgufError::NameTooLong { len: 64, .. }),
    );
    // 63 bytes is the llama.cpp maximum and accepted.
    assert!(one_tensor(|b| b.tensor(&name64[..63], &[4], 0, 0), 16)
        .open()
        .is_ok());
    rejects(
        one_tensor(|b| b.tensor(&[b'w', 0xff], &[4], 0, 0), 16),
        "non-UTF-8 name",
        |e| matches!(e, GgufError::InvalidUtf8TensorName { index: 0, .. }),
    );
    let is_t = |n: &String| n == "t";
    rejects(
        one_tensor(|b| b.tensor(b"t", &[1, 1, 1, 1, 4], 0, 0), 16),
        "5 dims",
        |e| matches!(e, GgufError::TooManyDims { name, n_dims: 5 } if is_t(name)),
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[], 0, 0), 16),
        "0 dims",
        |e| matches!(e, GgufError::TooManyDims { n_dims: 0, .. }),
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[4, 1 << 63], 0, 0), 16),
        "negative dim",
        |e| matches!(e, GgufError::NegativeDim { name, index: 1, .. } if is_t(name)),
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[1 << 32, 1 << 32], 0, 0), 16),
        "element overflow",
        |e| matches!(e, GgufError::ElementCountOverflow { name, .. } if is_t(name)),
    );
    // 2^62 F32 elements: count fits i64, bytes (2^64) do not.
    rejects(
        one_tensor(|b| b.tensor(b"t", &[1 << 31, 1 << 31], 0, 0), 16),
        "byte size overflow",
        |e| matches!(e, GgufError::ElementCountOverflow { .. }),
    );
    for id in [4, 5, 31, 33, 36, 38, 43, u32::MAX] {
        rejects(
            one_tensor(|b| b.tensor(b"t", &[32], id, 0), 128),
            "type id",
            |e| matches!(e, GgufError::InvalidTensorType { name, id: i } if is_t(name) && *i == id),
        );
    }
    rejects(
        one_tensor(|b| b.tensor(b"t", &[16, 2], GgmlType::Q4_0.id(), 0), 64),
        "ne0 not multiple of 32",
        |e| {
            matches!(
                e,
                GgufError::RowNotBlockAligned {
                    ne0: 16,
                    block_size: 32,
                    ..
                }
            )
        },
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[4], 0, 0).zeros(0), 15),
        "data truncated",
        |e| matches!(e, GgufError::OffsetOutOfFile { name, n_bytes: 16, .. } if is_t(name)),
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[4], 0, u64::MAX - 31), 16),
        "offset wraps",
        |e| matches!(e, GgufError::OffsetOutOfFile { .. }),
    );
    rejects(
        one_tensor(|b| b.tensor(b"t", &[4], 0, 4), 32),
        "misaligned offset",
        |e| {
            matches!(
                e,
                GgufError::MisalignedOffset {
                    offset: 4,
                    alignment: 32,
                    ..
                }
            )
        },
    );
    rejects(
        B::header(3, 1, 0).tensor(b"t", &[4], 0, 0).u32(7),
        "padding before data missing",
        |e| matches!(e, GgufError::Truncated { what, .. } if what.contains("padding")),
    );
    rejects(
        B::header(3, 1, 0).tensor(b"t", &[4, 4], 0, 0).cut(9),
        "tensor info truncated",
        |e| matches!(e, GgufError::Truncated { what, .. } if what.contains("'t'")),
    );
}

#[test]
fn tensor_table_errors_name_both_tensors() {
    rejects(
        B::header(3, 2, 0)
            .tensor(b"a", &[4], 0, 0)
            .tensor(b"a", &[4], 0, 32)
            .pad(32)
            .zeros(64),
        "duplicate tensor",
        |e| matches!(e, GgufError::DuplicateTensor { name } if name == "a"),
    );
    rejects(
        B::header(3, 2, 0)
            .tensor(b"a", &[16], 0, 0)
            .tensor(b"b", &[4], 0, 32)
            .pad(32)
            .zeros(64),
        "overlap",
        |e| matches!(e, GgufError::OverlappingTensors { a, b } if a == "a" && b == "b"),
    );
}

#[test]
fn non_canonical_layout_is_accepted_with_a_warning() {
    // Second tensor at 64 instead of 32 (§2.2 table: gguf.cpp rejects, gguf-py accepts).
    let f = B::header(3, 2, 0)
        .tensor(b"a", &[4], 0, 0)
        .tensor(b"b", &[4], 0, 64)
        .pad(32)
        .zeros(96)
        .open()
        .expect("gap layout");
    let w = f.layout_warnings();
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].tensor.as_str(), w[0].offset, w[0].expected),
        ("b", 64, 32)
    );
    assert!(matches!(
        f.require_canonical_layout(),
        Err(GgufError::NonCanonicalLayout {
            offset: 64,
            expected: 32,
            ..
        })
    ));
}

#[test]
fn zero_tensor_file_needs_no_trailing_padding() {
    // 24-byte header + key (8 + 1) + type 4 + u32 4 = 41 bytes: not a multiple of 32.
    let b = B::header(3, 0, 1).kv_u32("k", 7);
    assert_eq!(b.0.len(), 41);
    let f = b.open().expect("zero tensors");
    assert_eq!(f.get_u32("k").ok(), Some(7));
    assert!(f.tensors().is_empty());
}

#[test]
fn listed_but_unsupported_types_are_accepted_with_their_sizes() {
    // I32 [4] = 16 bytes; IQ2_XS [256] = 74 bytes (§3.7); Q8_1 [32] = 36 bytes.
    let f = B::header(3, 3, 0)
        .tensor(b"i", &[4], 26, 0)
        .tensor(b"q", &[256], 17, 32)
        .tensor(b"r", &[32], 9, 128)
        .pad(32)
        .zeros(128 + 36)
        .open()
        .expect("unsupported types");
    let sizes: Vec<(GgmlType, u64)> = f
        .tensors()
        .iter()
        .map(|t| (t.ggml_type, t.n_bytes))
        .collect();
    assert_eq!(
        sizes,
        [
            (GgmlType::I32, 16),
            (GgmlType::IQ2_XS, 74),
            (GgmlType::Q8_1, 36)
        ]
    );
}

#[test]
fn accessors_name_the_key_and_tensor() {
    let f = B::header(3, 0, 5)
        .kv_u32("u", 5)
        .kv_str("s", "hi")
        .key("neg", 9)
        .u32(5)
        .u64(2)
        .raw(&1i32.to_le_bytes())
        .raw(&(-1i32).to_le_bytes())
        .key("b", 7)
        .u8(1)
        .key("f", 9)
        .u32(6)
        .u64(1)
        .raw(&1.5f32.to_le_bytes())
        .open()
        .expect("valid");
    assert!(matches!(f.get_u32("nope"), Err(GgufError::MissingKey { key }) if key == "nope"));
    assert!(matches!(
        f.get_u32("s"),
        Err(GgufError::WrongType { key, expected, found }) if key == "s" && expected == "u32" && found == "string"
    ));
    assert!(matches!(f.get_str("u"), Err(GgufError::WrongType { .. })));
    assert!(matches!(f.get_u64("u"), Err(GgufError::WrongType { .. })));
    assert_eq!(f.get_bool("b").ok(), Some(true));
    assert_eq!(f.get("b"), Some(&Value::Bool(true)));
    assert_eq!(f.get_array_i32("neg").ok(), Some(vec![1, -1]));
    assert!(matches!(
        f.get_array_u32("neg"),
        Err(GgufError::ValueOutOfRange {
            index: 1,
            value: -1,
            ..
        })
    ));
    assert_eq!(f.get_array_f32("f").ok(), Some(vec![1.5]));
    assert!(matches!(
        f.get_array_str("f"),
        Err(GgufError::WrongType { found, .. }) if found == "array of f32"
    ));
    assert!(matches!(f.tensor("w"), Err(GgufError::MissingTensor { name }) if name == "w"));
    let keys: Vec<&str> = f.metadata().map(|(k, _)| k).collect();
    assert_eq!(keys, ["u", "s", "neg", "b", "f"]);
}

/// Opening a path that is not a readable file names the path as written (no `Some(…)`) and says
/// what is wrong: a directory ("is a directory", not the mmap's opaque "No such device"), a
/// missing file (the OS's "No such file or directory").
#[test]
fn io_errors_name_the_path_plainly() {
    let dir = std::env::temp_dir().join(format!("gguf-io-errors-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("model.gguf")).unwrap();
    let e = GgufFile::open(dir.join("model.gguf")).unwrap_err();
    assert!(
        matches!(&e, GgufError::Io { source, .. } if source.kind() == std::io::ErrorKind::IsADirectory)
    );
    let msg = e.to_string();
    let want = format!(
        "I/O error on {}: is a directory",
        dir.join("model.gguf").display()
    );
    assert!(msg.starts_with(&want), "{msg}");
    let msg = GgufFile::open(dir.join("missing.gguf"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with(&format!(
            "I/O error on {}:",
            dir.join("missing.gguf").display()
        )) && !msg.contains("Some(")
            && msg.contains("No such file"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The magic is shown as hex bytes with `0x` and as text (it read `bad magic [47, 47, 55]`,
/// hex digits without a prefix, indistinguishable from decimal).
#[test]
fn bad_magic_prints_hex_bytes_and_text() {
    let show = |found: &[u8]| {
        GgufError::BadMagic {
            found: found.to_vec(),
        }
        .to_string()
    };
    assert_eq!(
        show(b"GGU"),
        "bad magic 0x47 0x47 0x55 (\"GGU\", only 3 bytes): not a GGUF file (expected 0x47 0x47 \
         0x55 0x46, \"GGUF\")"
    );
    assert_eq!(
        show(b"\x7fELF"),
        "bad magic 0x7f 0x45 0x4c 0x46 (\"\\x7fELF\"): not a GGUF file (expected 0x47 0x47 0x55 \
         0x46, \"GGUF\")"
    );
    assert_eq!(
        show(b""),
        "bad magic (the file is empty): not a GGUF file (expected 0x47 0x47 0x55 0x46, \"GGUF\")"
    );
}
