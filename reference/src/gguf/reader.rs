//! The strict GGUF parser: header, metadata, tensor infos and layout checks over one byte
//! buffer (`spec/gguf-gemma4.md` §1.1–§1.5, §2.1–§2.3, §4.1–§4.4, validation checklist).
//!
//! It never panics and never allocates more than the input justifies: every length and count
//! is checked against the bytes remaining (checked arithmetic) before anything is read or
//! allocated, and tables grow by pushing, never by pre-allocating from a count.

use std::collections::HashMap;

use super::error::GgufError;
use super::value::{Array, Value, ValueType};
use super::{LayoutWarning, TensorInfo};
use crate::quant::GgmlType;

/// `GGUF_DEFAULT_ALIGNMENT` (§1.4).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest accepted `general.alignment` (§1.4 recommendation): 1 MiB.
pub const MAX_ALIGNMENT: u32 = 1 << 20;
/// `GGUF_MAX_STRING_LENGTH` (§2.2 item 3): 1 GiB.
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// `GGUF_MAX_ARRAY_ELEMENTS` (§2.2 item 4): 2^30.
pub const MAX_ARRAY_LEN: u64 = 1 << 30;
/// Key length cap (§2.3 recommendation): 64 KiB.
pub const MAX_KEY_LEN: u64 = 1 << 16;
/// llama.cpp `GGML_MAX_NAME` (64 including the NUL): names must be shorter (§2.2 item 8).
pub const MAX_TENSOR_NAME_LEN: u64 = 63;
/// `GGML_MAX_DIMS` (§2.2 item 8).
pub const MAX_DIMS: u32 = 4;
/// Minimal encoded size of one metadata entry: key (8 + 1) + type (4) + value (≥ 1) (§2.3).
const MIN_KV_SIZE: u64 = 14;
/// Minimal encoded size of one tensor info: name (8 + 1) + n_dims (4) + type (4) +
/// offset (8) (§2.3; a real entry also has ≥ 1 dim).
const MIN_TENSOR_INFO_SIZE: u64 = 25;

/// The magic bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Everything parsed from one GGUF buffer (one shard).
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub metadata: Vec<(String, Value)>,
    pub key_index: HashMap<String, usize>,
    /// `shard` = 0; `offset` relative to `data_start`.
    pub tensors: Vec<TensorInfo>,
    pub data_start: u64,
    pub warnings: Vec<LayoutWarning>,
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn at(&self) -> u64 {
        self.pos as u64
    }

    /// Takes `n` bytes, or `Truncated` naming `what()`.
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                at: self.at(),
                need: n,
                have: self.remaining(),
            });
        }
        let n = n as usize; // n <= remaining <= usize::MAX
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

/// Parses and validates one GGUF buffer.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };

    // --- header (§1.1–§1.3)
    if buf.len() < 4 || &buf[..4] != MAGIC {
        return Err(GgufError::BadMagic {
            found: buf[..buf.len().min(4)].to_vec(),
        });
    }
    c.pos = 4;
    let version = c.u32(&|| "header version".into())?;
    if version & 0xFFFF == 0 && version != 0 {
        return Err(GgufError::BigEndian {
            raw_version: version,
        });
    }
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let tensor_count = c.u64(&|| "header tensor_count".into())?;
    let kv_count = c.u64(&|| "header kv_count".into())?;
    if kv_count
        .checked_mul(MIN_KV_SIZE)
        .is_none_or(|n| n > c.remaining())
    {
        return Err(GgufError::TooManyKeys {
            count: kv_count,
            remaining: c.remaining(),
        });
    }

    // --- metadata (§2)
    let mut metadata: Vec<(String, Value)> = Vec::new();
    let mut key_index: HashMap<String, usize> = HashMap::new();
    for index in 0..kv_count {
        let key = read_key(&mut c, index)?;
        if key_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        let type_id = c.u32(&|| format!("value type of key '{key}'"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
            key: key.clone(),
            type_id,
        })?;
        let value = read_value(&mut c, &key, ty)?;
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    // --- alignment (§1.4)
    let alignment = match key_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) => {
            if *a == 0 || !a.is_power_of_two() || *a > MAX_ALIGNMENT {
                return Err(GgufError::BadAlignment { value: *a });
            }
            u64::from(*a)
        }
        Some(v) => {
            return Err(GgufError::AlignmentType {
                found: v.value_type(),
            })
        }
    };

    // --- tensor infos (§4.1)
    if tensor_count
        .checked_mul(MIN_TENSOR_INFO_SIZE)
        .is_none_or(|n| n > c.remaining())
    {
        return Err(GgufError::TooManyTensors {
            count: tensor_count,
            remaining: c.remaining(),
        });
    }
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut tensor_index: HashMap<String, usize> = HashMap::new();
    for index in 0..tensor_count {
        let t = read_tensor_info(&mut c, index)?;
        if tensor_index.contains_key(&t.name) {
            return Err(GgufError::DuplicateTensor { name: t.name });
        }
        tensor_index.insert(t.name.clone(), tensors.len());
        tensors.push(t);
    }

    // --- data section (§1.4, §1.5)
    let end_infos = c.at();
    let file_len = buf.len() as u64;
    let data_start = pad(end_infos, alignment).ok_or_else(|| GgufError::Truncated {
        what: "padding before tensor data".into(),
        at: end_infos,
        need: u64::MAX,
        have: file_len - end_infos,
    })?;
    if tensor_count > 0 && data_start > file_len {
        return Err(GgufError::Truncated {
            what: "padding before tensor data".into(),
            at: end_infos,
            need: data_start - end_infos,
            have: file_len - end_infos,
        });
    }
    check_layout(&tensors, alignment, data_start, file_len)?;
    let warnings = layout_warnings(&tensors, alignment, 0);

    Ok(Parsed {
        version,
        alignment,
        metadata,
        key_index,
        tensors,
        data_start,
        warnings,
    })
}

/// `PAD(x, a)` for a power-of-two `a`, `None` on overflow.
pub(crate) fn pad(x: u64, a: u64) -> Option<u64> {
    Some(x.checked_add(a - 1)? & !(a - 1))
}

/// Reads a length-prefixed string's bytes, checking the length against the remaining bytes
/// and `cap`.
fn read_str_bytes<'a>(
    c: &mut Cursor<'a>,
    cap: u64,
    what: &dyn Fn() -> String,
) -> Result<&'a [u8], GgufError> {
    let at = c.at();
    let len = c.u64(&|| format!("length of {}", what()))?;
    let limit = c.remaining().min(cap);
    if len > limit {
        return Err(GgufError::StringTooLong {
            what: what(),
            at,
            len,
            limit,
        });
    }
    c.take(len, what)
}

fn read_key(c: &mut Cursor<'_>, index: u64) -> Result<String, GgufError> {
    let at = c.at();
    let what = || format!("key of metadata entry {index}");
    let len = c.u64(&|| format!("length of {}", what()))?;
    if len == 0 {
        return Err(GgufError::EmptyKey { index, at });
    }
    if len > MAX_KEY_LEN {
        return Err(GgufError::KeyTooLong {
            index,
            at,
            len,
            cap: MAX_KEY_LEN,
        });
    }
    if len > c.remaining() {
        return Err(GgufError::StringTooLong {
            what: what(),
            at,
            len,
            limit: c.remaining(),
        });
    }
    let bytes_at = c.at();
    let bytes = c.take(len, &what)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(GgufError::InvalidUtf8Key {
            index,
            at: bytes_at,
            lossy: String::from_utf8_lossy(bytes).into_owned(),
        }),
    }
}

fn read_bool(byte: u8, key: &str, index: Option<u64>) -> Result<bool, GgufError> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(GgufError::BadBool {
            key: key.to_owned(),
            byte,
            index,
        }),
    }
}

fn read_string_value(
    c: &mut Cursor<'_>,
    key: &str,
    index: Option<u64>,
) -> Result<String, GgufError> {
    let what = || match index {
        None => format!("string value of key '{key}'"),
        Some(i) => format!("element {i} of key '{key}'"),
    };
    let bytes = read_str_bytes(c, MAX_STRING_LEN, &what)?;
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(s.to_owned()),
        Err(_) => Err(GgufError::InvalidUtf8Value {
            key: key.to_owned(),
            index,
        }),
    }
}

/// Reads `count` fixed-size little-endian elements of `N` bytes each (count already checked
/// against the remaining bytes).
fn read_fixed<const N: usize, T>(
    c: &mut Cursor<'_>,
    count: u64,
    key: &str,
    conv: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, GgufError> {
    let bytes = c.take(count * N as u64, &|| format!("array of key '{key}'"))?;
    Ok(bytes
        .chunks_exact(N)
        .map(|ch| {
            let mut a = [0u8; N];
            a.copy_from_slice(ch);
            conv(a)
        })
        .collect())
}

fn read_value(c: &mut Cursor<'_>, key: &str, ty: ValueType) -> Result<Value, GgufError> {
    let what = || format!("value of key '{key}'");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(&what)?[0]),
        ValueType::I8 => Value::I8(c.array::<1>(&what)?[0] as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(&what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(&what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        ValueType::Bool => Value::Bool(read_bool(c.array::<1>(&what)?[0], key, None)?),
        ValueType::String => Value::String(read_string_value(c, key, None)?),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(&what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(&what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        ValueType::Array => Value::Array(read_array(c, key)?),
    })
}

fn read_array(c: &mut Cursor<'_>, key: &str) -> Result<Array, GgufError> {
    let type_id = c.u32(&|| format!("array element type of key '{key}'"))?;
    let ty = match ValueType::from_id(type_id) {
        Some(ValueType::Array) => {
            return Err(GgufError::NestedArray {
                key: key.to_owned(),
            })
        }
        Some(t) => t,
        None => {
            return Err(GgufError::UnknownArrayType {
                key: key.to_owned(),
                type_id,
            })
        }
    };
    let count = c.u64(&|| format!("array length of key '{key}'"))?;
    let min = ty.min_size();
    if count > MAX_ARRAY_LEN || count * min > c.remaining() {
        // count <= 2^30 and min <= 8, so the product cannot overflow.
        return Err(GgufError::ArrayTooLong {
            key: key.to_owned(),
            count,
            min_elem_size: min,
            remaining: c.remaining(),
        });
    }
    Ok(match ty {
        ValueType::U8 => Array::U8(read_fixed(c, count, key, |[b]: [u8; 1]| b)?),
        ValueType::I8 => Array::I8(read_fixed(c, count, key, |[b]: [u8; 1]| b as i8)?),
        ValueType::U16 => Array::U16(read_fixed(c, count, key, u16::from_le_bytes)?),
        ValueType::I16 => Array::I16(read_fixed(c, count, key, i16::from_le_bytes)?),
        ValueType::U32 => Array::U32(read_fixed(c, count, key, u32::from_le_bytes)?),
        ValueType::I32 => Array::I32(read_fixed(c, count, key, i32::from_le_bytes)?),
        ValueType::F32 => Array::F32(read_fixed(c, count, key, f32::from_le_bytes)?),
        ValueType::U64 => Array::U64(read_fixed(c, count, key, u64::from_le_bytes)?),
        ValueType::I64 => Array::I64(read_fixed(c, count, key, i64::from_le_bytes)?),
        ValueType::F64 => Array::F64(read_fixed(c, count, key, f64::from_le_bytes)?),
        ValueType::Bool => {
            let raw = c.take(count, &|| format!("array of key '{key}'"))?;
            let mut v = Vec::with_capacity(raw.len());
            for (i, &b) in raw.iter().enumerate() {
                v.push(read_bool(b, key, Some(i as u64))?);
            }
            Array::Bool(v)
        }
        ValueType::String => {
            // count * 8 <= remaining: the capacity is justified by the file's bytes.
            let mut v = Vec::with_capacity(count as usize);
            for i in 0..count {
                v.push(read_string_value(c, key, Some(i))?);
            }
            Array::String(v)
        }
        ValueType::Array => unreachable_nested(),
    })
}

/// Nested arrays were rejected above; kept as a function so no `unreachable!` panics exist
/// in the parser.
fn unreachable_nested() -> Array {
    Array::U8(Vec::new())
}

fn read_tensor_info(c: &mut Cursor<'_>, index: u64) -> Result<TensorInfo, GgufError> {
    let at = c.at();
    let what_name = || format!("name of tensor {index}");
    let len = c.u64(&|| format!("length of {}", what_name()))?;
    let limit = c.remaining().min(MAX_STRING_LEN);
    if len > limit {
        return Err(GgufError::StringTooLong {
            what: what_name(),
            at,
            len,
            limit,
        });
    }
    let bytes_at = c.at();
    let bytes = c.take(len, &what_name)?;
    if len > MAX_TENSOR_NAME_LEN {
        return Err(GgufError::NameTooLong {
            name: String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).into_owned(),
            len,
        });
    }
    let name = match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            return Err(GgufError::InvalidUtf8TensorName {
                index,
                at: bytes_at,
                lossy: String::from_utf8_lossy(bytes).into_owned(),
            })
        }
    };
    let n_dims = c.u32(&|| format!("n_dims of tensor '{name}'"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::TooManyDims { name, n_dims });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for i in 0..n_dims as usize {
        let d = c.u64(&|| format!("dim {i} of tensor '{name}'"))?;
        if d > i64::MAX as u64 {
            return Err(GgufError::NegativeDim {
                name,
                index: i,
                value: d,
            });
        }
        dims.push(d);
    }
    let type_id = c.u32(&|| format!("type of tensor '{name}'"))?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| GgufError::InvalidTensorType {
        name: name.clone(),
        id: type_id,
    })?;
    let offset = c.u64(&|| format!("offset of tensor '{name}'"))?;

    // §4.4 sizes
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64);
    let Some(n_elements) = n_elements else {
        return Err(GgufError::ElementCountOverflow { name, dims });
    };
    let bs = ggml_type.block_size();
    if !dims[0].is_multiple_of(bs as u64) {
        return Err(GgufError::RowNotBlockAligned {
            name,
            ne0: dims[0],
            ty: ggml_type,
            block_size: bs,
        });
    }
    let n_bytes = ggml_type
        .bytes_for(n_elements)
        .filter(|&b| b <= i64::MAX as u64 && usize::try_from(b).is_ok());
    let Some(n_bytes) = n_bytes else {
        return Err(GgufError::ElementCountOverflow { name, dims });
    };
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        n_bytes,
        shard: 0,
    })
}

/// Offsets aligned, in bounds, non-overlapping (§1.5).
fn check_layout(
    tensors: &[TensorInfo],
    alignment: u64,
    data_start: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(GgufError::MisalignedOffset {
                name: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(GgufError::OffsetOutOfFile {
                name: t.name.clone(),
                offset: t.offset,
                n_bytes: t.n_bytes,
                data_start,
                file_len,
            });
        }
    }
    // In bounds, so offset + n_bytes cannot overflow below.
    let mut order: Vec<usize> = (0..tensors.len())
        .filter(|&i| tensors[i].n_bytes > 0)
        .collect();
    order.sort_by_key(|&i| (tensors[i].offset, i));
    for w in order.windows(2) {
        let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
        if b.offset < a.offset + a.n_bytes {
            return Err(GgufError::OverlappingTensors {
                a: a.name.clone(),
                b: b.name.clone(),
            });
        }
    }
    Ok(())
}

/// Tensors whose offset is not the canonical running padded sum (§1.5); llama.cpp would
/// reject such a file.
pub(crate) fn layout_warnings(
    tensors: &[TensorInfo],
    alignment: u64,
    shard: usize,
) -> Vec<LayoutWarning> {
    let mut out = Vec::new();
    let mut expected = 0u64;
    for t in tensors {
        if t.offset != expected {
            out.push(LayoutWarning {
                shard,
                tensor: t.name.clone(),
                offset: t.offset,
                expected,
            });
        }
        // In-bounds sizes: no overflow in practice; saturate to stay panic-free.
        expected = expected.saturating_add(pad(t.n_bytes, alignment).unwrap_or(u64::MAX));
    }
    out
}
