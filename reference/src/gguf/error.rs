//! Typed errors of the GGUF layer: one variant per failure of the strict-reader checklist
//! (`spec/gguf-gemma4.md`, "Validation checklist for a strict reader", §2.2, §2.3), plus the
//! split-file (§4.5) and writer (§1.6) failures. Every variant names the key, tensor, file or
//! byte position involved.

use std::path::PathBuf;

use super::value::ValueType;

/// Everything that can go wrong reading, validating or writing a GGUF file.
///
/// Byte positions (`at`) are offsets from the start of the GGUF (the file start).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Reading or writing a file failed.
    #[error("I/O error on {}: {source}", path.as_ref().map_or("a caller-supplied writer".into(), |p| p.display().to_string()))]
    Io {
        /// The file involved (`None` for a caller-supplied writer).
        path: Option<PathBuf>,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The first four bytes are not `GGUF` (§1.1).
    #[error(
        "bad magic {}: not a GGUF file (expected 0x47 0x47 0x55 0x46, \"GGUF\")",
        magic_text(found)
    )]
    BadMagic {
        /// The first four bytes (fewer when the file is shorter).
        found: Vec<u8>,
    },
    /// The version is not 2 or 3 (§1.3).
    #[error("unsupported GGUF version {version} (only 2 and 3 are accepted)")]
    UnsupportedVersion {
        /// The version as read (u32 LE).
        version: u32,
    },
    /// The file is in the opposite byte order (version's low 16 bits are zero, §1.2).
    #[error("big-endian GGUF (version field reads {raw_version:#010x} little-endian); only little-endian files are supported")]
    BigEndian {
        /// The version field as read little-endian.
        raw_version: u32,
    },
    /// A fixed-size read needs more bytes than remain.
    #[error("truncated file: {what} at byte {at} needs {need} bytes, {have} remain")]
    Truncated {
        /// What was being read, naming the key or tensor where known.
        what: String,
        /// Byte position of the read.
        at: u64,
        /// Bytes needed.
        need: u64,
        /// Bytes remaining.
        have: u64,
    },
    /// A string's declared length exceeds the bytes remaining or the 1 GiB cap (§2.2 item 3).
    #[error("string length {len} of {what} at byte {at} exceeds the limit ({limit} bytes: remaining bytes or 1 GiB cap; truncated or corrupt file?)")]
    StringTooLong {
        /// What the string is (key, value of key, tensor name).
        what: String,
        /// Byte position of the length field.
        at: u64,
        /// The declared length.
        len: u64,
        /// The effective limit (min of remaining bytes and the cap).
        limit: u64,
    },
    /// An array's element count exceeds 2^30, or count × minimal element size exceeds the
    /// bytes remaining (§2.2 item 4).
    #[error("array of key '{}' declares {count} elements of {min_elem_size}+ bytes: exceeds the 2^30 cap or the {remaining} bytes remaining (truncated or corrupt file?)", shown(key))]
    ArrayTooLong {
        /// The key.
        key: String,
        /// The declared element count.
        count: u64,
        /// Minimal encoded size of one element (8 for strings).
        min_elem_size: u64,
        /// Bytes remaining after the count.
        remaining: u64,
    },
    /// `kv_count` cannot fit in the remaining bytes (≥ 14 bytes per entry, §2.3).
    #[error("kv_count {count} cannot fit in the {remaining} bytes after the header (truncated or corrupt file?)")]
    TooManyKeys {
        /// The declared count.
        count: u64,
        /// Bytes remaining after the header.
        remaining: u64,
    },
    /// `tensor_count` cannot fit in the remaining bytes (≥ 25 bytes per tensor info, §2.3).
    #[error("tensor_count {count} cannot fit in the {remaining} bytes after the metadata (truncated or corrupt file?)")]
    TooManyTensors {
        /// The declared count.
        count: u64,
        /// Bytes remaining after the metadata.
        remaining: u64,
    },
    /// A key of length 0 (§2.2 item 5).
    #[error("empty key (metadata entry {index}, byte {at})")]
    EmptyKey {
        /// 0-based index of the metadata entry.
        index: u64,
        /// Byte position of the key's length field.
        at: u64,
    },
    /// A key longer than the 64 KiB cap (§2.3).
    #[error("key of metadata entry {index} (byte {at}) is {len} bytes long (cap {cap})")]
    KeyTooLong {
        /// 0-based index of the metadata entry.
        index: u64,
        /// Byte position of the key's length field.
        at: u64,
        /// The declared length.
        len: u64,
        /// The cap.
        cap: u64,
    },
    /// A key is not valid UTF-8 (§2.3).
    #[error(
        "key of metadata entry {index} (byte {at}) is not UTF-8: '{}'",
        shown(lossy)
    )]
    InvalidUtf8Key {
        /// 0-based index of the metadata entry.
        index: u64,
        /// Byte position of the key's bytes.
        at: u64,
        /// The key decoded lossily (for display).
        lossy: String,
    },
    /// A tensor name is not valid UTF-8 (§2.3).
    #[error("name of tensor {index} (byte {at}) is not UTF-8: '{}'", shown(lossy))]
    InvalidUtf8TensorName {
        /// 0-based index of the tensor info.
        index: u64,
        /// Byte position of the name's bytes.
        at: u64,
        /// The name decoded lossily (for display).
        lossy: String,
    },
    /// A string value (or string array element) is not valid UTF-8.
    #[error("string value of key '{}'{} is not UTF-8", shown(key), element_text(*index))]
    InvalidUtf8Value {
        /// The key.
        key: String,
        /// Element index for string arrays.
        index: Option<u64>,
    },
    /// The same key appears twice (§2.2 item 5).
    #[error("duplicate key '{}'", shown(key))]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A value type id outside 0..=12 (§2.2 item 6).
    #[error("key '{}' has unknown value type {type_id}", shown(key))]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// An array element type id outside 0..=12.
    #[error("array of key '{}' has unknown element type {type_id}", shown(key))]
    UnknownArrayType {
        /// The key.
        key: String,
        /// The element type id read.
        type_id: u32,
    },
    /// An array whose element type is ARRAY (§2.1; rejected like gguf.cpp).
    #[error(
        "key '{}' is a nested array (array of arrays), which is not accepted",
        shown(key)
    )]
    NestedArray {
        /// The key.
        key: String,
    },
    /// A BOOL byte other than 0 or 1 (§2.3).
    #[error(
        "key '{}' has bool byte {byte:#04x}{}; only 0 and 1 are accepted",
        shown(key),
        element_text(*index)
    )]
    BadBool {
        /// The key.
        key: String,
        /// The byte read.
        byte: u8,
        /// Element index for bool arrays.
        index: Option<u64>,
    },
    /// `general.alignment` has a value type other than u32 (§1.4).
    #[error("general.alignment has type {found}, expected u32")]
    AlignmentType {
        /// The type found.
        found: ValueType,
    },
    /// `general.alignment` is zero, not a power of two, or above the 1 MiB cap (§1.4).
    #[error("general.alignment = {value} is not a power of two in 1..=1048576")]
    BadAlignment {
        /// The value.
        value: u32,
    },
    /// A required key is absent.
    #[error("missing key '{}'", shown(key))]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A key holds another type than asked for.
    #[error("key '{}' has type {found}, expected {expected}", shown(key))]
    WrongType {
        /// The key.
        key: String,
        /// What the caller asked for (e.g. `u32`, `array of u32`).
        expected: String,
        /// What the file holds (e.g. `string`, `array of f32`).
        found: String,
    },
    /// An array element does not fit the requested integer type (e.g. a negative i32 asked
    /// for as u32).
    #[error(
        "element {index} of key '{}' = {value} does not fit in {expected}",
        shown(key)
    )]
    ValueOutOfRange {
        /// The key.
        key: String,
        /// Element index.
        index: u64,
        /// The value found.
        value: i64,
        /// The requested type.
        expected: &'static str,
    },
    /// A requested tensor is absent.
    #[error("missing tensor '{}'", shown(name))]
    MissingTensor {
        /// The tensor name.
        name: String,
    },
    /// A tensor name appears twice (also across split files, §4.5).
    #[error("duplicate tensor '{}'", shown(name))]
    DuplicateTensor {
        /// The tensor name.
        name: String,
    },
    /// A tensor name that two shards of a split model both hold (§4.5): the shard that holds it
    /// first and the one that repeats it.
    #[error(
        "duplicate tensor '{}': in shard {first:?} and again in shard {second:?}",
        shown(name)
    )]
    DuplicateTensorInShards {
        /// The tensor name.
        name: String,
        /// The shard that holds it first.
        first: std::path::PathBuf,
        /// The shard that repeats it.
        second: std::path::PathBuf,
    },
    /// A tensor name of 64 bytes or more (llama.cpp `GGML_MAX_NAME`, §2.2 item 8).
    #[error("tensor name {name:?} is {len} bytes long (at most 63 allowed)")]
    NameTooLong {
        /// The name (lossily decoded; may be shortened to its first 256 bytes).
        name: String,
        /// Its length in bytes.
        len: u64,
    },
    /// n_dims is 0 or above 4 (§4.1).
    #[error("tensor '{}' has {n_dims} dims (1..=4 accepted)", shown(name))]
    TooManyDims {
        /// The tensor name.
        name: String,
        /// The declared number of dims.
        n_dims: u32,
    },
    /// A dim with the top bit set (negative as i64, §2.2 item 8).
    #[error("tensor '{}' dim {index} = {value:#x} is negative as i64", shown(name))]
    NegativeDim {
        /// The tensor name.
        name: String,
        /// Which dim (0 = ne0).
        index: usize,
        /// The raw value.
        value: u64,
    },
    /// The element count or the byte size overflows (§4.4).
    #[error(
        "tensor '{}': element count or byte size of dims {dims:?} overflows",
        shown(name)
    )]
    ElementCountOverflow {
        /// The tensor name.
        name: String,
        /// The dims (GGUF ne order).
        dims: Vec<u64>,
    },
    /// A removed type id (4, 5, 31–33, 36–38) or an id ≥ 43 (§3.7).
    #[error(
        "tensor '{}' has invalid ggml type id {id} (removed or out of range)",
        shown(name)
    )]
    InvalidTensorType {
        /// The tensor name.
        name: String,
        /// The type id.
        id: u32,
    },
    /// ne0 is not a multiple of the type's block size (§4.4).
    #[error(
        "tensor '{}': ne0 = {ne0} is not a multiple of the {ty} block size {block_size}",
        shown(name)
    )]
    RowNotBlockAligned {
        /// The tensor name.
        name: String,
        /// ne0.
        ne0: u64,
        /// The type.
        ty: crate::quant::GgmlType,
        /// Its block size.
        block_size: usize,
    },
    /// A tensor offset not a multiple of the alignment (§1.5).
    #[error(
        "tensor '{}' offset {offset} is not a multiple of the alignment {alignment}",
        shown(name)
    )]
    MisalignedOffset {
        /// The tensor name.
        name: String,
        /// Offset relative to data_start.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes do not lie inside the file (§1.5).
    #[error("tensor '{}' [data_start {data_start} + offset {offset}, + {n_bytes} bytes) is outside the file of {file_len} bytes (truncated file?)", shown(name))]
    OffsetOutOfFile {
        /// The tensor name.
        name: String,
        /// Offset relative to data_start.
        offset: u64,
        /// The tensor's byte size.
        n_bytes: u64,
        /// Start of the data section.
        data_start: u64,
        /// File length.
        file_len: u64,
    },
    /// Two tensors' byte ranges intersect (§1.5).
    #[error("tensors '{a}' and '{b}' overlap")]
    OverlappingTensors {
        /// The tensor starting first.
        a: String,
        /// The other one.
        b: String,
    },
    /// The tensor layout is not the canonical running padded sum (only from
    /// [`super::GgufFile::require_canonical_layout`]; the reader itself only warns).
    #[error(
        "tensor '{}' has offset {offset}, canonical layout needs {expected}",
        shown(name)
    )]
    NonCanonicalLayout {
        /// The first tensor off the running sum.
        name: String,
        /// Its offset.
        offset: u64,
        /// The running padded sum.
        expected: u64,
    },
    /// A shard of a split model is missing (§4.5).
    #[error("split model: shard {path:?} is missing")]
    SplitMissingShard {
        /// The expected path.
        path: PathBuf,
    },
    /// A shard's `split.no` differs from its position (§4.5).
    #[error("split model: {path:?} has split.no = {found}, expected {expected}")]
    SplitNumberMismatch {
        /// The shard.
        path: PathBuf,
        /// Its position (0-based).
        expected: u64,
        /// Its `split.no`.
        found: u64,
    },
    /// `split.count` differs between shards or from the file name (§4.5).
    #[error("split model: {path:?} has split.count = {found}, expected {expected}")]
    SplitCountMismatch {
        /// The shard.
        path: PathBuf,
        /// The count expected (from the first shard or the file name).
        expected: u64,
        /// The count found.
        found: u64,
    },
    /// The merged tensor count differs from `split.tensors.count` (§4.5).
    #[error("split model: {found} tensors over all shards, split.tensors.count = {expected}")]
    SplitTensorCount {
        /// `split.tensors.count`.
        expected: i64,
        /// Tensors found.
        found: u64,
    },
    /// A file has `split.count > 1` but its name does not follow
    /// `<prefix>-NNNNN-of-MMMMM.gguf`, so the other shards cannot be found (§4.5).
    #[error("split model: {path:?} has split.count = {count} but its name is not <prefix>-NNNNN-of-MMMMM.gguf")]
    SplitBadName {
        /// The file.
        path: PathBuf,
        /// Its `split.count`.
        count: u64,
    },
    /// An error inside one shard of a split model.
    #[error("in shard {path:?}: {source}")]
    InShard {
        /// The shard.
        path: PathBuf,
        /// The error.
        source: Box<GgufError>,
    },
    /// Writer: a tensor's data length differs from its dims and type.
    #[error(
        "tensor '{}': {got} data bytes given, dims and type need {expected}",
        shown(name)
    )]
    TensorDataSize {
        /// The tensor name.
        name: String,
        /// Bytes needed.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
}

impl GgufError {
    /// Wraps `self` as an error of shard `path` (no-op for errors that already name a path).
    pub(crate) fn in_shard(self, path: &std::path::Path) -> GgufError {
        match self {
            e @ (GgufError::Io { .. } | GgufError::InShard { .. }) => e,
            e => GgufError::InShard {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        }
    }

    /// The innermost error (unwraps [`GgufError::InShard`]).
    pub fn root(&self) -> &GgufError {
        match self {
            GgufError::InShard { source, .. } => source.root(),
            e => e,
        }
    }
}

/// ` (element N)` for an array element, nothing for a scalar value.
/// A key or tensor name as errors show it: control characters escaped (`\x1b`, `\0`, `\n`: a
/// corrupt or hostile file's name reaches the terminal as text, never as escape sequences), at
/// most [`SHOWN_CHARS`] characters then `…` (a 64 KiB name is one unreadable line).
pub fn shown(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters of a name that [`shown`] keeps.
pub const SHOWN_CHARS: usize = 160;

fn element_text(index: Option<u64>) -> String {
    index.map(|i| format!(" (element {i})")).unwrap_or_default()
}

/// The first bytes of a file as `0x47 0x47 0x55 ("GGU", only 3 bytes)`: each byte in hex, then
/// the bytes as text (escaped) and, for fewer than 4, how many there are.
fn magic_text(found: &[u8]) -> String {
    if found.is_empty() {
        return "(the file is empty)".into();
    }
    let hex: Vec<String> = found.iter().map(|b| format!("{b:#04x}")).collect();
    let text: String = found
        .iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    let short = match found.len() {
        n if n < 4 => format!(", only {n} byte{}", if n == 1 { "" } else { "s" }),
        _ => String::new(),
    };
    format!("{} (\"{text}\"{short})", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{shown, GgufError, SHOWN_CHARS};

    /// Control characters come out escaped (ESC as `\u{1b}`, NUL as `\u{0}`, newline as `\n`),
    /// other text unchanged, and a long name is cut at SHOWN_CHARS characters with `…`.
    #[test]
    fn names_are_escaped_and_capped() {
        assert_eq!(shown("general.name"), "general.name");
        assert_eq!(shown("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        assert_eq!(shown("\0x\n"), "\\u{0}x\\n");
        assert_eq!(shown("blk.0.ffn_gate.é"), "blk.0.ffn_gate.é");
        let long = "k".repeat(10_000);
        let s = shown(&long);
        assert_eq!(s.chars().count(), SHOWN_CHARS + 1);
        assert!(s.ends_with('…'));
        let e = GgufError::DuplicateKey {
            key: "x\u{1b}]0;title\u{7}".into(),
        };
        assert_eq!(e.to_string(), "duplicate key 'x\\u{1b}]0;title\\u{7}'");
    }
}
