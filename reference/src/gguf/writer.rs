//! The project's GGUF writer (`spec/gguf-gemma4.md` §1.6): version 3, little-endian,
//! `general.architecture` first then keys in insertion order, canonical offsets (running sum
//! of `PAD(n_bytes, alignment)`), zero padding before the data and after every tensor.

use std::io::Write;
use std::path::Path;

use super::error::GgufError;
use super::reader::{pad, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_DIMS, MAX_KEY_LEN};
use super::reader::{MAX_ARRAY_LEN, MAX_STRING_LEN, MAX_TENSOR_NAME_LEN};
use super::value::{Array, Value};
use crate::quant::GgmlType;

/// Builds a GGUF file in memory and writes it canonically (§1.6).
///
/// Keys are written in insertion order with `general.architecture` moved first;
/// `set` on an existing key replaces its value in place. `general.alignment` (u32, power of
/// two ≤ 1 MiB) sets the data alignment and is written only when it is not 32.
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    kvs: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Counts bytes written so padding can be computed.
struct Counting<W: Write> {
    w: W,
    pos: u64,
}

impl<W: Write> Counting<W> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.w.write_all(b)?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn put_str(&mut self, s: &str) -> std::io::Result<()> {
        self.put(&(s.len() as u64).to_le_bytes())?;
        self.put(s.as_bytes())
    }

    fn pad_to(&mut self, alignment: u64) -> std::io::Result<()> {
        let target = pad(self.pos, alignment).unwrap_or(self.pos);
        let zeros = [0u8; 256];
        while self.pos < target {
            let n = (target - self.pos).min(zeros.len() as u64) as usize;
            self.put(&zeros[..n])?;
        }
        Ok(())
    }
}

impl GgufWriter {
    /// An empty writer (no keys, no tensors).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `v` (replacing an existing value in place). Validation happens in
    /// [`GgufWriter::write_to`].
    pub fn set(&mut self, key: &str, v: Value) {
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.kvs.push((key.to_owned(), v)),
        }
    }

    /// Adds a tensor (`dims` in GGUF `ne` order, §4.2) with its raw bytes.
    ///
    /// Errors: [`GgufError::NameTooLong`] (≥ 64 bytes), [`GgufError::DuplicateTensor`],
    /// [`GgufError::TooManyDims`] (0 or > 4), [`GgufError::NegativeDim`],
    /// [`GgufError::ElementCountOverflow`], [`GgufError::RowNotBlockAligned`],
    /// [`GgufError::TensorDataSize`] (`data.len()` ≠ size from dims and type).
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<(), GgufError> {
        if name.len() as u64 > MAX_TENSOR_NAME_LEN {
            return Err(GgufError::NameTooLong {
                name: name.to_owned(),
                len: name.len() as u64,
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor {
                name: name.to_owned(),
            });
        }
        if dims.is_empty() || dims.len() > MAX_DIMS as usize {
            return Err(GgufError::TooManyDims {
                name: name.to_owned(),
                n_dims: dims.len().min(u32::MAX as usize) as u32,
            });
        }
        if let Some(index) = dims.iter().position(|&d| d > i64::MAX as u64) {
            return Err(GgufError::NegativeDim {
                name: name.to_owned(),
                index,
                value: dims[index],
            });
        }
        let overflow = || GgufError::ElementCountOverflow {
            name: name.to_owned(),
            dims: dims.to_vec(),
        };
        let n = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(overflow)?;
        if !dims[0].is_multiple_of(ty.block_size() as u64) {
            return Err(GgufError::RowNotBlockAligned {
                name: name.to_owned(),
                ne0: dims[0],
                ty,
                block_size: ty.block_size(),
            });
        }
        let expected = ty.bytes_for(n).ok_or_else(overflow)?;
        if expected != data.len() as u64 {
            return Err(GgufError::TensorDataSize {
                name: name.to_owned(),
                expected,
                got: data.len() as u64,
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(())
    }

    /// The alignment the file will use (`general.alignment` or 32), validated.
    fn alignment(&self) -> Result<u64, GgufError> {
        match self.kvs.iter().find(|(k, _)| k == "general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, Value::U32(a))) => {
                if *a == 0 || !a.is_power_of_two() || *a > MAX_ALIGNMENT {
                    Err(GgufError::BadAlignment { value: *a })
                } else {
                    Ok(u64::from(*a))
                }
            }
            Some((_, v)) => Err(GgufError::AlignmentType {
                found: v.value_type(),
            }),
        }
    }

    /// The entries to write, in order: `general.architecture` first, `general.alignment`
    /// dropped when 32, the rest in insertion order; keys validated.
    fn ordered_kvs(&self) -> Result<Vec<&(String, Value)>, GgufError> {
        let mut out: Vec<&(String, Value)> = Vec::with_capacity(self.kvs.len());
        out.extend(self.kvs.iter().filter(|(k, _)| k == "general.architecture"));
        out.extend(self.kvs.iter().filter(|(k, v)| {
            k != "general.architecture"
                && !(k == "general.alignment" && matches!(v, Value::U32(32)))
        }));
        for (index, (k, v)) in out.iter().map(|kv| (&kv.0, &kv.1)).enumerate() {
            if k.is_empty() {
                return Err(GgufError::EmptyKey {
                    index: index as u64,
                    at: 0,
                });
            }
            if k.len() as u64 > MAX_KEY_LEN {
                return Err(GgufError::KeyTooLong {
                    index: index as u64,
                    at: 0,
                    len: k.len() as u64,
                    cap: MAX_KEY_LEN,
                });
            }
            check_value_limits(k, v)?;
        }
        Ok(out)
    }

    /// Writes the file (§1.6) to `w`.
    ///
    /// Errors: [`GgufError::Io`] (path `None`), [`GgufError::BadAlignment`] /
    /// [`GgufError::AlignmentType`], [`GgufError::EmptyKey`], [`GgufError::KeyTooLong`],
    /// [`GgufError::StringTooLong`], [`GgufError::ArrayTooLong`].
    pub fn write_to(&self, w: impl Write) -> Result<(), GgufError> {
        let alignment = self.alignment()?;
        let kvs = self.ordered_kvs()?;
        let mut c = Counting { w, pos: 0 };
        let io = |source| GgufError::Io { path: None, source };
        self.write_inner(&mut c, &kvs, alignment).map_err(io)?;
        c.w.flush().map_err(io)
    }

    fn write_inner<W: Write>(
        &self,
        c: &mut Counting<W>,
        kvs: &[&(String, Value)],
        alignment: u64,
    ) -> std::io::Result<()> {
        c.put(super::reader::MAGIC)?;
        c.put(&3u32.to_le_bytes())?;
        c.put(&(self.tensors.len() as u64).to_le_bytes())?;
        c.put(&(kvs.len() as u64).to_le_bytes())?;
        for (k, v) in kvs.iter().map(|kv| (&kv.0, &kv.1)) {
            c.put_str(k)?;
            c.put(&v.value_type().id().to_le_bytes())?;
            write_value(c, v)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            c.put_str(&t.name)?;
            c.put(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                c.put(&d.to_le_bytes())?;
            }
            c.put(&t.ty.id().to_le_bytes())?;
            c.put(&offset.to_le_bytes())?;
            offset += pad(t.data.len() as u64, alignment).unwrap_or(u64::MAX);
        }
        if !self.tensors.is_empty() {
            c.pad_to(alignment)?;
        }
        for t in &self.tensors {
            c.put(&t.data)?;
            c.pad_to(alignment)?;
        }
        Ok(())
    }

    /// Writes the file to `path` (created or truncated), buffered.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: Some(path.to_path_buf()),
            source,
        };
        let f = std::fs::File::create(path).map_err(io)?;
        let mut bw = std::io::BufWriter::new(f);
        match self.write_to(&mut bw) {
            Err(GgufError::Io { source, .. }) => Err(io(source)),
            r => r,
        }?;
        bw.flush().map_err(io)
    }

    /// The file as bytes (convenience for tests).
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }
}

/// Rejects values a strict reader would refuse: strings over 1 GiB, arrays over 2^30.
fn check_value_limits(key: &str, v: &Value) -> Result<(), GgufError> {
    let long = |len: usize| GgufError::StringTooLong {
        what: format!("value of key '{key}'"),
        at: 0,
        len: len as u64,
        limit: MAX_STRING_LEN,
    };
    match v {
        Value::String(s) if s.len() as u64 > MAX_STRING_LEN => Err(long(s.len())),
        Value::Array(a) if a.len() as u64 > MAX_ARRAY_LEN => Err(GgufError::ArrayTooLong {
            key: key.to_owned(),
            count: a.len() as u64,
            min_elem_size: a.elem_type().min_size(),
            remaining: 0,
        }),
        Value::Array(Array::String(v)) => {
            match v.iter().find(|s| s.len() as u64 > MAX_STRING_LEN) {
                Some(s) => Err(long(s.len())),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

fn write_value<W: Write>(c: &mut Counting<W>, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => c.put(&[*x]),
        Value::I8(x) => c.put(&x.to_le_bytes()),
        Value::U16(x) => c.put(&x.to_le_bytes()),
        Value::I16(x) => c.put(&x.to_le_bytes()),
        Value::U32(x) => c.put(&x.to_le_bytes()),
        Value::I32(x) => c.put(&x.to_le_bytes()),
        Value::F32(x) => c.put(&x.to_le_bytes()),
        Value::Bool(x) => c.put(&[u8::from(*x)]),
        Value::String(s) => c.put_str(s),
        Value::U64(x) => c.put(&x.to_le_bytes()),
        Value::I64(x) => c.put(&x.to_le_bytes()),
        Value::F64(x) => c.put(&x.to_le_bytes()),
        Value::Array(a) => {
            c.put(&a.elem_type().id().to_le_bytes())?;
            c.put(&(a.len() as u64).to_le_bytes())?;
            write_array(c, a)
        }
    }
}

fn write_array<W: Write>(c: &mut Counting<W>, a: &Array) -> std::io::Result<()> {
    fn each<W: Write, T: Copy, const N: usize>(
        c: &mut Counting<W>,
        v: &[T],
        f: impl Fn(T) -> [u8; N],
    ) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(v.len() * N);
        for &x in v {
            buf.extend_from_slice(&f(x));
        }
        c.put(&buf)
    }
    match a {
        Array::U8(v) => c.put(v),
        Array::I8(v) => each(c, v, i8::to_le_bytes),
        Array::U16(v) => each(c, v, u16::to_le_bytes),
        Array::I16(v) => each(c, v, i16::to_le_bytes),
        Array::U32(v) => each(c, v, u32::to_le_bytes),
        Array::I32(v) => each(c, v, i32::to_le_bytes),
        Array::F32(v) => each(c, v, f32::to_le_bytes),
        Array::Bool(v) => each(c, v, |b| [u8::from(b)]),
        Array::U64(v) => each(c, v, u64::to_le_bytes),
        Array::I64(v) => each(c, v, i64::to_le_bytes),
        Array::F64(v) => each(c, v, f64::to_le_bytes),
        Array::String(v) => {
            for s in v {
                c.put_str(s)?;
            }
            Ok(())
        }
    }
}
