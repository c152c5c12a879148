//! GGUF container: reader (mmap, zero-copy), writer, split files, limits. Spec:
//! `spec/gguf-gemma4.md` §1 (container), §2 (metadata), §4 (tensor infos, split files) and the
//! "Validation checklist for a strict reader".
//!
//! [`GgufFile::open`] maps the file (`memmap2`) and parses it strictly (see [`GgufError`] for
//! every rejected condition); tensor data stays in the map and [`GgufFile::tensor_data`]
//! returns slices of it. Metadata is parsed into owned [`Value`]s once. A file named
//! `<prefix>-NNNNN-of-MMMMM.gguf` with `split.count > 1` opens all its shards as one model
//! (§4.5). [`GgufWriter`] writes the canonical layout of §1.6.

mod error;
mod reader;
mod split;
mod value;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use error::{shown, GgufError};
pub use reader::{
    DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_LEN, MAX_DIMS, MAX_KEY_LEN, MAX_STRING_LEN,
    MAX_TENSOR_NAME_LEN,
};
pub use split::parse_split_name;
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;

use crate::quant::GgmlType;

/// One tensor-info entry (§4.1), validated: dims 1..=4, `ne0` a multiple of the block size,
/// offset aligned and the bytes inside the file, no overlap with another tensor.
///
/// `dims` are in GGUF order: `dims[0] = ne0` is the contiguous row length. A 2-D weight
/// `[out, in]` in PyTorch terms is `dims = [in, out]` here: `n_rows = out`, `row_len = in`
/// (§4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name (UTF-8, ≤ 63 bytes, unique in the model).
    pub name: String,
    /// Dimensions in GGUF `ne` order (1 to 4 entries).
    pub dims: Vec<u64>,
    /// Element / block type.
    pub ggml_type: GgmlType,
    /// Offset of the data relative to its shard's data section start (as stored, §1.5).
    pub offset: u64,
    /// Size of the data in bytes (§4.4).
    pub n_bytes: u64,
    /// 0-based index of the shard holding the data (0 for a single file).
    pub shard: usize,
}

impl TensorInfo {
    /// Product of the dims.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Elements per row: `ne0`.
    pub fn row_len(&self) -> usize {
        self.dims.first().copied().unwrap_or(1) as usize
    }

    /// Number of rows: `ne1 · ne2 · ne3` (1 for a 1-D tensor).
    pub fn n_rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }

    /// Bytes per row: `ne0 / block_size · type_size`.
    pub fn row_bytes(&self) -> usize {
        self.row_len() / self.ggml_type.block_size() * self.ggml_type.type_size()
    }

    /// Row-major shape (reverse of `dims`): `[ne3, ne2, ne1, ne0]` trimmed to `dims.len()`;
    /// the one place GGUF `ne` order becomes a row-major shape (style R7).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A tensor whose offset is not the canonical running padded sum (§1.5). The file is
/// accepted (gguf-py would load it), but llama.cpp 0c1e570 rejects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutWarning {
    /// Shard index (0 for a single file).
    pub shard: usize,
    /// The tensor name.
    pub tensor: String,
    /// Its offset (relative to data_start).
    pub offset: u64,
    /// The canonical offset (running sum of `PAD(n_bytes, alignment)`).
    pub expected: u64,
}

impl std::fmt::Display for LayoutWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "shard {}: tensor '{}' has offset {}, canonical layout has {} (llama.cpp would reject the file)",
            self.shard, self.tensor, self.offset, self.expected
        )
    }
}

/// The bytes of one shard: a read-only memory map, or an owned buffer.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }

    fn map(path: &Path) -> Result<Backing, GgufError> {
        let io = |source| GgufError::Io {
            path: Some(path.to_path_buf()),
            source,
        };
        special_file_check(path).map_err(io)?;
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            // (mapping a directory fails with the opaque "No such device")
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                "is a directory, not a GGUF file",
            )));
        }
        let len = meta.len();
        if len == 0 {
            return Ok(Backing::Owned(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this process; the fixtures and model
        // files are not modified while open (if another process truncates the file, reads
        // could fault — the usual caveat of every mmap-based model loader, llama.cpp included).
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Backing::Mmap(map))
    }
}

/// One parsed shard.
struct Shard {
    path: Option<PathBuf>,
    bytes: Backing,
    data_start: u64,
}

/// An open GGUF model: metadata, tensor infos and zero-copy tensor data, possibly spread over
/// several split files (§4.5). `Send + Sync`.
pub struct GgufFile {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    shards: Vec<Shard>,
    warnings: Vec<LayoutWarning>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("n_keys", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("shards", &self.shard_paths())
            .finish()
    }
}

impl GgufFile {
    /// Opens (memory-maps) and validates a GGUF file. A file whose `split.count` > 1 opens
    /// all shards `<prefix>-00001-of-NNNNN.gguf` … as one model, whichever shard is given
    /// (§4.5).
    ///
    /// Errors: [`GgufError::Io`] naming the path, any parse error of the checklist, and the
    /// `Split*` errors.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        split::open(path.as_ref())
    }

    /// Opens exactly one file, ignoring split keys (each shard on its own).
    pub fn open_single(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let backing = Backing::map(path)?;
        GgufFile::from_backing(Some(path.to_path_buf()), backing)
    }

    /// Parses an in-memory GGUF (tests, generated files); split keys are not followed.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::from_backing(None, Backing::Owned(bytes))
    }

    fn from_backing(path: Option<PathBuf>, bytes: Backing) -> Result<GgufFile, GgufError> {
        let p = reader::parse(bytes.bytes())?;
        let tensor_index = p
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            version: p.version,
            alignment: p.alignment,
            metadata: p.metadata,
            key_index: p.key_index,
            tensors: p.tensors,
            tensor_index,
            shards: vec![Shard {
                path,
                bytes,
                data_start: p.data_start,
            }],
            warnings: p.warnings,
        })
    }

    /// The GGUF version (2 or 3) of the (first) file.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment of the (first) file: `general.alignment` or 32 (§1.4).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// All metadata entries in file order (of the first shard for a split model).
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of metadata entries.
    pub fn n_keys(&self) -> usize {
        self.metadata.len()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn need(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })
    }

    fn wrong(key: &str, expected: &str, found: &Value) -> GgufError {
        GgufError::WrongType {
            key: key.to_owned(),
            expected: expected.to_owned(),
            found: found.type_name(),
        }
    }

    /// Tensor infos in file order (shard by shard for a split model).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`, or [`GgufError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor_index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| GgufError::MissingTensor {
                name: name.to_owned(),
            })
    }

    /// The tensor's bytes, exactly `t.n_bytes` long, borrowed from the map (zero-copy).
    /// The reader checked at open that they lie inside the shard; a `TensorInfo` not from this
    /// file (out of range for it) gives an empty slice.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let Some(shard) = self.shards.get(t.shard) else {
            return &[];
        };
        let start = shard.data_start.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) => shard
                .bytes
                .bytes()
                .get(s as usize..e as usize)
                .unwrap_or(&[]),
            _ => &[],
        }
    }

    /// Absolute byte position of the tensor's data in its shard file
    /// (`data_start + offset`).
    pub fn tensor_file_offset(&self, t: &TensorInfo) -> u64 {
        self.data_start(t.shard).saturating_add(t.offset)
    }

    /// Start of the data section of shard `shard` (§1.4); 0 for an unknown shard.
    pub fn data_start(&self, shard: usize) -> u64 {
        self.shards.get(shard).map_or(0, |s| s.data_start)
    }

    /// Number of files the model was read from (1 unless split).
    pub fn n_shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard paths (`None` for an in-memory file).
    pub fn shard_paths(&self) -> Vec<Option<&Path>> {
        self.shards.iter().map(|s| s.path.as_deref()).collect()
    }

    /// Byte length of shard `shard`; 0 for an unknown shard.
    pub fn shard_len(&self, shard: usize) -> u64 {
        self.shards
            .get(shard)
            .map_or(0, |s| s.bytes.bytes().len() as u64)
    }

    /// Tensors off the canonical layout (§1.5), in file order; empty for files written by
    /// llama.cpp, gguf-py or [`GgufWriter`].
    pub fn layout_warnings(&self) -> &[LayoutWarning] {
        &self.warnings
    }

    /// Strict mode: [`GgufError::NonCanonicalLayout`] for the first layout warning.
    pub fn require_canonical_layout(&self) -> Result<(), GgufError> {
        match self.warnings.first() {
            None => Ok(()),
            Some(w) => Err(GgufError::NonCanonicalLayout {
                name: w.tensor.clone(),
                offset: w.offset,
                expected: w.expected,
            }),
        }
    }
}

/// Typed scalar accessors: exact value type required (llama.cpp requires the exact scalar
/// type, §5); errors [`GgufError::MissingKey`] / [`GgufError::WrongType`] name the key.
macro_rules! scalar_getters {
    ($($(#[$doc:meta])* $fn:ident => $variant:ident : $t:ty, $name:literal;)*) => {
        impl GgufFile {
            $(
                $(#[$doc])*
                pub fn $fn(&self, key: &str) -> Result<$t, GgufError> {
                    match self.need(key)? {
                        Value::$variant(v) => Ok(*v),
                        other => Err(Self::wrong(key, $name, other)),
                    }
                }
            )*
        }
    };
}

scalar_getters! {
    /// The u8 value of `key` (exact type).
    get_u8 => U8: u8, "u8";
    /// The u16 value of `key` (exact type; e.g. `split.count`).
    get_u16 => U16: u16, "u16";
    /// The u32 value of `key` (exact type).
    get_u32 => U32: u32, "u32";
    /// The u64 value of `key` (exact type).
    get_u64 => U64: u64, "u64";
    /// The i32 value of `key` (exact type).
    get_i32 => I32: i32, "i32";
    /// The i64 value of `key` (exact type).
    get_i64 => I64: i64, "i64";
    /// The f32 value of `key` (exact type).
    get_f32 => F32: f32, "f32";
    /// The f64 value of `key` (exact type).
    get_f64 => F64: f64, "f64";
    /// The bool value of `key` (exact type).
    get_bool => Bool: bool, "bool";
}

impl GgufFile {
    /// The string value of `key`.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        match self.need(key)? {
            Value::String(s) => Ok(s),
            other => Err(Self::wrong(key, "string", other)),
        }
    }

    /// The array value of `key` (any element type).
    pub fn get_array(&self, key: &str) -> Result<&Array, GgufError> {
        match self.need(key)? {
            Value::Array(a) => Ok(a),
            other => Err(Self::wrong(key, "array", other)),
        }
    }

    /// An integer array as u32. Element types BOOL, U32 and I32 are accepted interchangeably
    /// (as llama.cpp does for integer arrays, §5); a negative I32 element gives
    /// [`GgufError::ValueOutOfRange`]; other element types [`GgufError::WrongType`].
    pub fn get_array_u32(&self, key: &str) -> Result<Vec<u32>, GgufError> {
        let range = |index: usize, value: i64| GgufError::ValueOutOfRange {
            key: key.to_owned(),
            index: index as u64,
            value,
            expected: "u32",
        };
        match self.get_array(key)? {
            Array::U32(v) => Ok(v.clone()),
            Array::Bool(v) => Ok(v.iter().map(|&b| u32::from(b)).collect()),
            Array::I32(v) => v
                .iter()
                .enumerate()
                .map(|(i, &x)| u32::try_from(x).map_err(|_| range(i, x.into())))
                .collect(),
            a => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array of u32 (or i32/bool)".into(),
                found: format!("array of {}", a.elem_type()),
            }),
        }
    }

    /// An integer array as i32. Element types BOOL, U32 and I32 are accepted (§5); a U32
    /// element above `i32::MAX` gives [`GgufError::ValueOutOfRange`].
    pub fn get_array_i32(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        let range = |index: usize, value: i64| GgufError::ValueOutOfRange {
            key: key.to_owned(),
            index: index as u64,
            value,
            expected: "i32",
        };
        match self.get_array(key)? {
            Array::I32(v) => Ok(v.clone()),
            Array::Bool(v) => Ok(v.iter().map(|&b| i32::from(b)).collect()),
            Array::U32(v) => v
                .iter()
                .enumerate()
                .map(|(i, &x)| i32::try_from(x).map_err(|_| range(i, x.into())))
                .collect(),
            a => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array of i32 (or u32/bool)".into(),
                found: format!("array of {}", a.elem_type()),
            }),
        }
    }

    /// An f32 array (element type F32 only).
    pub fn get_array_f32(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        match self.get_array(key)? {
            Array::F32(v) => Ok(v.clone()),
            a => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array of f32".into(),
                found: format!("array of {}", a.elem_type()),
            }),
        }
    }

    /// A bool array. Element type BOOL, or U32/I32 holding only 0 and 1 (llama.cpp treats
    /// integer arrays interchangeably, §5); another integer gives
    /// [`GgufError::ValueOutOfRange`].
    pub fn get_array_bool(&self, key: &str) -> Result<Vec<bool>, GgufError> {
        let conv = |i: usize, x: i64| match x {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(GgufError::ValueOutOfRange {
                key: key.to_owned(),
                index: i as u64,
                value,
                expected: "bool",
            }),
        };
        match self.get_array(key)? {
            Array::Bool(v) => Ok(v.clone()),
            Array::U32(v) => v
                .iter()
                .enumerate()
                .map(|(i, &x)| conv(i, x.into()))
                .collect(),
            Array::I32(v) => v
                .iter()
                .enumerate()
                .map(|(i, &x)| conv(i, x.into()))
                .collect(),
            a => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array of bool".into(),
                found: format!("array of {}", a.elem_type()),
            }),
        }
    }

    /// A string array, borrowed.
    pub fn get_array_str(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        match self.get_array(key)? {
            Array::String(v) => Ok(v.iter().map(String::as_str).collect()),
            a => Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "array of string".into(),
                found: format!("array of {}", a.elem_type()),
            }),
        }
    }
}

/// SHA-256 of a file as lowercase hex, read in 1 MiB chunks (streaming, `sha2`).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    special_file_check(path)?;
    let mut f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Refuses a path (after symlinks) that is a FIFO, socket or device: opening a FIFO blocks until
/// a writer comes (a model path naming one hung forever), and a pipe or device has no length to
/// map (`/dev/stdin` of a piped file, `/dev/zero` read as "the file is empty"). A missing path
/// passes (the open that follows names the error).
///
/// Errors: `InvalidInput` "is a FIFO / socket / device, not a regular file".
pub fn special_file_check(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    if let Ok(meta) = std::fs::metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        let kind = if t.is_fifo() {
            Some("a FIFO")
        } else if t.is_socket() {
            Some("a socket")
        } else if t.is_char_device() || t.is_block_device() {
            Some("a device")
        } else {
            None
        };
        if let Some(kind) = kind {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("is {kind}, not a regular file"),
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO (which an open would wait on forever) and a character device are refused naming
    /// what they are; a regular file and a missing path pass.
    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_before_opening() {
        let d = std::env::temp_dir().join(format!("gguf-special-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let fifo = d.join("m.gguf");
        let _ = std::fs::remove_file(&fifo);
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let Err(e) = GgufFile::open(&fifo) else {
                panic!("a FIFO is refused")
            };
            assert!(
                e.to_string().ends_with("is a FIFO, not a regular file"),
                "{e}"
            );
            let e = sha256_file(&fifo).unwrap_err();
            assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        } else {
            println!("skipped the FIFO case: mkfifo unavailable");
        }
        let Err(e) = GgufFile::open("/dev/zero") else {
            panic!("a device is refused")
        };
        assert!(
            e.to_string().ends_with("is a device, not a regular file"),
            "{e}"
        );
        let file = d.join("plain");
        std::fs::write(&file, b"x").unwrap();
        assert!(special_file_check(&file).is_ok());
        assert!(special_file_check(&d.join("missing")).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn gguf_file_is_send_and_sync() {
        assert_send_sync::<GgufFile>();
    }
}
