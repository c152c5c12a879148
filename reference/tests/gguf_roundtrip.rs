//! Writer → reader round trip (`spec/gguf-gemma4.md` §1.6): random metadata of all 13 value
//! types (arrays of every scalar type and of strings included) and random tensors come back
//! key for key, value for value (floats bitwise) and byte for byte, in the canonical layout.

use proptest::prelude::*;
use reference::gguf::{Array, GgufFile, GgufWriter, Value};
use reference::quant::GgmlType;

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u8>().prop_map(Value::U8),
        any::<i8>().prop_map(Value::I8),
        any::<u16>().prop_map(Value::U16),
        any::<i16>().prop_map(Value::I16),
        any::<u32>().prop_map(Value::U32),
        any::<i32>().prop_map(Value::I32),
        any::<u32>().prop_map(|b| Value::F32(f32::from_bits(b))),
        any::<bool>().prop_map(Value::Bool),
        ".{0,20}".prop_map(Value::String),
        any::<u64>().prop_map(Value::U64),
        any::<i64>().prop_map(Value::I64),
        any::<u64>().prop_map(|b| Value::F64(f64::from_bits(b))),
    ]
}

fn array() -> impl Strategy<Value = Array> {
    const N: usize = 12;
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..N).prop_map(Array::U8),
        prop::collection::vec(any::<i8>(), 0..N).prop_map(Array::I8),
        prop::collection::vec(any::<u16>(), 0..N).prop_map(Array::U16),
        prop::collection::vec(any::<i16>(), 0..N).prop_map(Array::I16),
        prop::collection::vec(any::<u32>(), 0..N).prop_map(Array::U32),
        prop::collection::vec(any::<i32>(), 0..N).prop_map(Array::I32),
        prop::collection::vec(any::<u32>().prop_map(f32::from_bits), 0..N).prop_map(Array::F32),
        prop::collection::vec(any::<bool>(), 0..N).prop_map(Array::Bool),
        prop::collection::vec(".{0,8}", 0..N).prop_map(Array::String),
        prop::collection::vec(any::<u64>(), 0..N).prop_map(Array::U64),
        prop::collection::vec(any::<i64>(), 0..N).prop_map(Array::I64),
        prop::collection::vec(any::<u64>().prop_map(f64::from_bits), 0..N).prop_map(Array::F64),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![3 => scalar(), 2 => array().prop_map(Value::Array)]
}

/// Bitwise equality (NaN payloads included).
fn same(a: &Value, b: &Value) -> bool {
    fn fa(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }
    fn da(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(Array::F32(x)), Value::Array(Array::F32(y))) => fa(x, y),
        (Value::Array(Array::F64(x)), Value::Array(Array::F64(y))) => da(x, y),
        _ => a == b,
    }
}

const TYPES: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::I8,
    GgmlType::IQ2_XS,
    GgmlType::MXFP4,
];

/// (type, dims, bytes): ne0 = blocks · block_size, up to 3 dims, random payload.
fn tensor() -> impl Strategy<Value = (GgmlType, Vec<u64>, Vec<u8>)> {
    (
        0..TYPES.len(),
        1u64..3,
        prop::collection::vec(1u64..4, 0..3),
    )
        .prop_flat_map(|(ti, blocks, rest)| {
            let ty = TYPES[ti];
            let mut dims = vec![blocks * ty.block_size() as u64];
            dims.extend(rest);
            let n: u64 = dims.iter().product();
            let nbytes = ty.bytes_for(n).unwrap_or(0) as usize;
            prop::collection::vec(any::<u8>(), nbytes)
                .prop_map(move |data| (ty, dims.clone(), data))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn written_files_read_back_every_key_value_and_byte(
        kvs in prop::collection::btree_map("[a-z]{1,6}(\\.[a-z_]{1,6}){0,2}", value(), 0..12),
        arch in prop::option::of("[a-z0-9]{1,10}"),
        align_log2 in prop::option::of(0u32..9),
        tensors in prop::collection::vec(tensor(), 0..5),
    ) {
        let mut w = GgufWriter::new();
        // Insert the other keys first: the writer must still put general.architecture first.
        for (k, v) in &kvs {
            w.set(k, v.clone());
        }
        if let Some(a) = &arch {
            w.set("general.architecture", Value::String(a.clone()));
        }
        let alignment = align_log2.map_or(32u64, |l| 1 << l);
        if let Some(l) = align_log2 {
            w.set("general.alignment", Value::U32(1 << l));
        }
        for (i, (ty, dims, data)) in tensors.iter().enumerate() {
            w.add_tensor(&format!("t{i}.weight"), dims, *ty, data.clone()).expect("add_tensor");
        }
        let bytes = w.to_bytes().expect("write");
        let f = GgufFile::from_bytes(bytes.clone()).expect("read back");

        prop_assert_eq!(f.version(), 3);
        prop_assert_eq!(f.alignment(), alignment);
        let keys: Vec<&str> = f.metadata().map(|(k, _)| k).collect();
        if arch.is_some() {
            prop_assert_eq!(keys.first().copied(), Some("general.architecture"));
        }
        // Every written key comes back; general.alignment only when it is not 32 (§1.6).
        let n_extra = usize::from(arch.is_some()) + usize::from(alignment != 32);
        prop_assert_eq!(keys.len(), kvs.len() + n_extra);
        for (k, v) in &kvs {
            let got = f.get(k);
            prop_assert!(got.is_some_and(|g| same(g, v)), "key {}: {:?} vs {:?}", k, got, v);
        }
        prop_assert_eq!(f.tensors().len(), tensors.len());
        let mut expected_offset = 0u64;
        for (i, (ty, dims, data)) in tensors.iter().enumerate() {
            let t = f.tensor(&format!("t{i}.weight")).expect("tensor");
            prop_assert_eq!(t.ggml_type, *ty);
            prop_assert_eq!(&t.dims, dims);
            prop_assert_eq!(t.offset, expected_offset);
            prop_assert_eq!(f.tensor_data(t), &data[..]);
            expected_offset += (data.len() as u64).div_ceil(alignment) * alignment;
        }
        prop_assert!(f.layout_warnings().is_empty());
        // Canonical file length: padded header, then padded tensors; no padding without tensors.
        if tensors.is_empty() {
            prop_assert!(bytes.len() as u64 <= f.data_start(0));
        } else {
            prop_assert_eq!(bytes.len() as u64, f.data_start(0) + expected_offset);
            prop_assert_eq!(f.data_start(0) % alignment, 0);
        }
        // Writing is deterministic.
        prop_assert_eq!(w.to_bytes().expect("write again"), bytes);
    }
}

#[test]
fn writer_rejects_what_the_reader_would_reject() {
    use reference::gguf::GgufError;
    let mut w = GgufWriter::new();
    assert!(matches!(
        w.add_tensor(&"x".repeat(64), &[4], GgmlType::F32, vec![0; 16]),
        Err(GgufError::NameTooLong { len: 64, .. })
    ));
    assert!(matches!(
        w.add_tensor("q", &[16], GgmlType::Q4_0, vec![0; 9]),
        Err(GgufError::RowNotBlockAligned { .. })
    ));
    assert!(matches!(
        w.add_tensor("f", &[4], GgmlType::F32, vec![0; 15]),
        Err(GgufError::TensorDataSize {
            expected: 16,
            got: 15,
            ..
        })
    ));
    assert!(matches!(
        w.add_tensor("f", &[1, 1, 1, 1, 4], GgmlType::F32, vec![0; 16]),
        Err(GgufError::TooManyDims { n_dims: 5, .. })
    ));
    w.add_tensor("f", &[4], GgmlType::F32, vec![0; 16])
        .expect("ok");
    assert!(matches!(
        w.add_tensor("f", &[4], GgmlType::F32, vec![0; 16]),
        Err(GgufError::DuplicateTensor { .. })
    ));
    w.set("general.alignment", Value::U32(48));
    assert!(matches!(
        w.to_bytes(),
        Err(GgufError::BadAlignment { value: 48 })
    ));
    w.set("general.alignment", Value::U64(64));
    assert!(matches!(w.to_bytes(), Err(GgufError::AlignmentType { .. })));
    w.set("general.alignment", Value::U32(32));
    let f = GgufFile::from_bytes(w.to_bytes().expect("valid")).expect("read");
    assert!(f.get("general.alignment").is_none());
    let mut e = GgufWriter::new();
    e.set("", Value::U8(1));
    assert!(matches!(e.to_bytes(), Err(GgufError::EmptyKey { .. })));
}

/// The header written for an empty writer is exactly magic, version 3, two zero counts.
#[test]
fn empty_writer_writes_a_24_byte_header() {
    let bytes = GgufWriter::new().to_bytes().expect("write");
    let mut want = b"GGUF".to_vec();
    want.extend_from_slice(&3u32.to_le_bytes());
    want.extend_from_slice(&[0; 16]);
    assert_eq!(bytes, want);
}
