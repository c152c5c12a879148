//! Split GGUF models (`spec/gguf-gemma4.md` §4.5; `src/llama-model-loader.cpp`,
//! `src/llama.cpp` `llama_split_path`): `<prefix>-%05d-of-%05d.gguf`, 1-based numbers in the
//! name, 0-based `split.no` (u16) in the file, `split.count` (u16), `split.tensors.count`
//! (i32). The first shard carries all model metadata; the model's metadata is the first
//! shard's, tensors are merged in shard order with names unique across shards.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{GgufError, GgufFile, Shard};

/// Key: 0-based index of this shard.
pub const KEY_SPLIT_NO: &str = "split.no";
/// Key: number of shards.
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// Key: total tensors over all shards.
pub const KEY_SPLIT_TENSORS: &str = "split.tensors.count";

/// Splits a shard file name `<prefix>-NNNNN-of-MMMMM.gguf` into
/// `(prefix path, NNNNN, MMMMM)` (both numbers 1-based as in the name); `None` when the name
/// does not follow the pattern. Exactly five digits each, as `llama_split_path` writes.
pub fn parse_split_name(path: &Path) -> Option<(PathBuf, u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".gguf")?;
    // "-NNNNN-of-MMMMM" is 15 ASCII bytes.
    if stem.len() < 15 || !stem.is_char_boundary(stem.len() - 15) {
        return None;
    }
    let (prefix, tail) = stem.split_at(stem.len() - 15);
    let tb = tail.as_bytes();
    let digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    if tb[0] != b'-' || &tb[6..10] != b"-of-" || !digits(&tb[1..6]) || !digits(&tb[10..15]) {
        return None;
    }
    let no: u32 = tail[1..6].parse().ok()?;
    let count: u32 = tail[10..15].parse().ok()?;
    Some((path.with_file_name(prefix), no, count))
}

/// The path of shard `no` (1-based) of `count` for `prefix` (`llama_split_path`).
pub fn split_path(prefix: &Path, no: u32, count: u32) -> PathBuf {
    let name = prefix
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    prefix.with_file_name(format!("{name}-{no:05}-of-{count:05}.gguf"))
}

/// `split.count` of an opened file, or `None` when absent (0 and 1 mean "not split").
fn split_count(f: &GgufFile) -> Result<Option<u16>, GgufError> {
    match f.get(KEY_SPLIT_COUNT) {
        None => Ok(None),
        Some(_) => f.get_u16(KEY_SPLIT_COUNT).map(Some),
    }
}

/// Opens `path`; if it is a shard of a split model (`split.count > 1`), opens all shards.
pub(crate) fn open(path: &Path) -> Result<GgufFile, GgufError> {
    let first = GgufFile::open_single(path)?;
    let count = match split_count(&first)? {
        Some(n) if n > 1 => n,
        _ => return Ok(first),
    };
    let Some((prefix, _, name_count)) = parse_split_name(path) else {
        return Err(GgufError::SplitBadName {
            path: path.to_path_buf(),
            count: count.into(),
        });
    };
    if name_count != u32::from(count) {
        return Err(GgufError::SplitCountMismatch {
            path: path.to_path_buf(),
            expected: name_count.into(),
            found: count.into(),
        });
    }
    let mut shards = Vec::with_capacity(count.into());
    for i in 0..u32::from(count) {
        let p = split_path(&prefix, i + 1, name_count);
        if !p.exists() {
            return Err(GgufError::SplitMissingShard { path: p });
        }
        let f = GgufFile::open_single(&p).map_err(|e| e.in_shard(&p))?;
        let found_count = split_count(&f).map_err(|e| e.in_shard(&p))?;
        if found_count != Some(count) {
            return Err(GgufError::SplitCountMismatch {
                path: p,
                expected: count.into(),
                found: found_count.map_or(0, u64::from),
            });
        }
        let no = f.get_u16(KEY_SPLIT_NO).map_err(|e| e.in_shard(&p))?;
        if u32::from(no) != i {
            return Err(GgufError::SplitNumberMismatch {
                path: p,
                expected: i.into(),
                found: no.into(),
            });
        }
        shards.push(f);
    }
    merge(shards)
}

/// Merges opened shards (in order) into one model: metadata of shard 0, tensors of all
/// shards with `shard` set, names unique, count = `split.tensors.count`.
fn merge(shards: Vec<GgufFile>) -> Result<GgufFile, GgufError> {
    let mut it = shards.into_iter();
    let Some(mut model) = it.next() else {
        return Err(GgufError::MissingKey {
            key: KEY_SPLIT_COUNT.into(),
        });
    };
    let expected = i64::from(model.get_i32(KEY_SPLIT_TENSORS)?);
    let mut tensor_index: HashMap<String, usize> = std::mem::take(&mut model.tensor_index);
    for (k, shard) in it.enumerate() {
        let k = k + 1;
        for mut t in shard.tensors {
            if let Some(&i) = tensor_index.get(&t.name) {
                // (split shards are files: every one has its path)
                let path = |s: Option<&Shard>| s.and_then(|s| s.path.clone()).unwrap_or_default();
                return Err(GgufError::DuplicateTensorInShards {
                    first: path(model.shards.get(model.tensors[i].shard)),
                    second: path(shard.shards.first()),
                    name: t.name,
                });
            }
            t.shard = k;
            tensor_index.insert(t.name.clone(), model.tensors.len());
            model.tensors.push(t);
        }
        model
            .warnings
            .extend(shard.warnings.into_iter().map(|mut w| {
                w.shard = k;
                w
            }));
        model.shards.extend(shard.shards);
    }
    model.tensor_index = tensor_index;
    let found = model.tensors.len() as u64;
    if i64::try_from(found).ok() != Some(expected) {
        return Err(GgufError::SplitTensorCount { expected, found });
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_parse_and_format_like_llama_split_path() {
        let (prefix, no, count) =
            parse_split_name(Path::new("/a/b/model-00002-of-00003.gguf")).unwrap_or_default();
        assert_eq!(prefix, Path::new("/a/b/model"));
        assert_eq!((no, count), (2, 3));
        assert_eq!(
            split_path(&prefix, 1, 3),
            Path::new("/a/b/model-00001-of-00003.gguf")
        );
        assert_eq!(parse_split_name(Path::new("model.gguf")), None);
        assert_eq!(
            parse_split_name(Path::new("model-0001-of-00003.gguf")),
            None
        );
        assert_eq!(
            parse_split_name(Path::new("-00001-of-00003.gguf")).map(|x| x.1),
            Some(1)
        );
    }
}
