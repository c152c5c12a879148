//! The `tokenizers::Tokenizer` rebuilt from `tokenizer.ggml.*` metadata.
//!
//! Spec: `spec/gguf-gemma4.md` §7.2 and `fixtures/README-tokenizer-dequant.md` §2 ("Tokenizer
//! recipe from GGUF metadata", `make/hf_tokenizer_from_gguf.py`), which reproduce llama.cpp
//! 0c1e570's `gemma4` tokenizer (`src/llama-vocab.cpp`):
//!
//! | component | setting |
//! |---|---|
//! | model | `BPE(vocab = {piece: id}, merges split at the first space after position 0, unk = tokens[unknown_token_id], fuse_unk, byte_fallback)`; scores unused |
//! | normalizer | `Replace(" ", "▁")` (no prefix space, no NFC/NFKC) |
//! | pre-tokenizer | `Split(Regex("[^\n]+|[\n]+"), Isolated)`: llama.cpp's `gemma4` newline-run split (the recipe notes it changes nothing on the test set) |
//! | added tokens | CONTROL (type 3) special; USER_DEFINED (type 4) non-special, except those in the stop set (`<|tool_response>`, which llama.cpp re-types CONTROL) special; all `normalized = false` |
//! | decoder | `Sequence([Replace("▁", " "), ByteFallback, Fuse])` |
//! | BOS/EOS | not added by the tokenizer object ([`super::GemmaTokenizer::encode`] adds BOS) |

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::replace::Replace;
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{AddedToken, DecoderWrapper, SplitDelimiterBehavior, Tokenizer};

use super::TokenizerError;
use crate::gguf::GgufFile;

/// `tokenizer.ggml.token_type` value of an ordinary token (llama.cpp `LLAMA_TOKEN_TYPE_NORMAL`).
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// `tokenizer.ggml.token_type` value of a control token (`<bos>`, `<|turn>`, ...), matched in
/// text only when special tokens are parsed.
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// `tokenizer.ggml.token_type` value of a user-defined token (`<|channel>`, `<|"|>`, ...),
/// always matched as a whole token in text.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;
/// `tokenizer.ggml.token_type` value of a byte-fallback token `<0xXX>`.
pub const TOKEN_TYPE_BYTE: i32 = 6;

/// llama.cpp's `gemma4` pre-tokenizer: maximal runs of non-newlines and of newlines.
const NEWLINE_RUN_SPLIT: &str = "[^\n]+|[\n]+";

/// Token list, types and merges as read from the GGUF (owned).
pub(super) struct VocabData {
    /// `tokenizer.ggml.tokens`, id = index.
    pub pieces: Vec<String>,
    /// `tokenizer.ggml.token_type`, one per token.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges` split into (left, right), rank = index.
    pub merges: Vec<(String, String)>,
}

impl VocabData {
    /// Reads and checks `tokenizer.ggml.{tokens, token_type, merges}` and, when present,
    /// `tokenizer.ggml.scores` (unused by BPE, but one f32 per token like `token_type`:
    /// llama.cpp reads `scores[id]` for every id without checking the length).
    ///
    /// Errors: a per-token array of another length ([`TokenizerError::LengthMismatch`]), an
    /// empty token string ([`TokenizerError::EmptyPiece`]: no real vocabulary has one, and the
    /// BPE builder would report it as some merge's token "out of vocabulary"), a malformed merge.
    pub fn from_gguf(file: &GgufFile) -> Result<VocabData, TokenizerError> {
        let pieces: Vec<String> = file
            .get_array_str("tokenizer.ggml.tokens")?
            .into_iter()
            .map(str::to_owned)
            .collect();
        if let Some(id) = pieces.iter().position(String::is_empty) {
            return Err(TokenizerError::EmptyPiece { id: id as u32 });
        }
        let token_types = file.get_array_i32("tokenizer.ggml.token_type")?;
        if token_types.len() != pieces.len() {
            return Err(TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.token_type",
                expected: pieces.len(),
                found: token_types.len(),
            });
        }
        if file.get("tokenizer.ggml.scores").is_some() {
            let n_scores = file.get_array_f32("tokenizer.ggml.scores")?.len();
            if n_scores != pieces.len() {
                return Err(TokenizerError::LengthMismatch {
                    key: "tokenizer.ggml.scores",
                    expected: pieces.len(),
                    found: n_scores,
                });
            }
        }
        let merges = file
            .get_array_str("tokenizer.ggml.merges")?
            .into_iter()
            .enumerate()
            .map(|(index, m)| {
                split_merge(m).ok_or_else(|| TokenizerError::BadMerge {
                    index,
                    merge: m.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(VocabData {
            pieces,
            token_types,
            merges,
        })
    }
}

/// Splits a merge `"left right"` at the first space after position 0 (as
/// `make/hf_tokenizer_from_gguf.py` does: `m.find(" ", 1)`, a character index); `None` if
/// either half is empty.
fn split_merge(m: &str) -> Option<(String, String)> {
    let first_len = m.chars().next()?.len_utf8();
    let pos = m[first_len..].find(' ')? + first_len;
    let (left, right) = (&m[..pos], &m[pos + 1..]);
    if left.is_empty() || right.is_empty() {
        return None;
    }
    Some((left.to_string(), right.to_string()))
}

fn build_err(what: &'static str) -> impl Fn(tokenizers::Error) -> TokenizerError {
    move |e| TokenizerError::Build {
        what,
        message: e.to_string(),
    }
}

/// Builds the `tokenizers::Tokenizer` of the module table above. `stop_ids` are the
/// end-of-generation ids; a USER_DEFINED token among them is registered as special. The merges
/// are moved into the model (`vocab.merges` is left empty).
pub(super) fn build_tokenizer(
    vocab: &mut VocabData,
    unk_id: u32,
    stop_ids: &[u32],
) -> Result<Tokenizer, TokenizerError> {
    let mut map = Vocab::with_capacity(vocab.pieces.len());
    for (id, piece) in vocab.pieces.iter().enumerate() {
        if let Some(first) = map.insert(piece.clone(), id as u32) {
            return Err(TokenizerError::DuplicatePiece {
                piece: piece.clone(),
                first,
                second: id as u32,
            });
        }
    }
    let bpe = BPE::builder()
        .vocab_and_merges(map, std::mem::take(&mut vocab.merges))
        .unk_token(vocab.pieces[unk_id as usize].clone())
        .fuse_unk(true)
        .byte_fallback(true)
        .ignore_merges(false)
        .build()
        .map_err(build_err("BPE model from tokenizer.ggml.tokens/merges"))?;

    let mut tk = Tokenizer::new(bpe);
    tk.with_normalizer(Some(
        Replace::new(" ", "\u{2581}").map_err(build_err("normalizer"))?,
    ));
    tk.with_pre_tokenizer(Some(
        Split::new(
            tokenizers::pre_tokenizers::split::SplitPattern::Regex(NEWLINE_RUN_SPLIT.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(build_err("pre-tokenizer"))?,
    ));
    tk.with_decoder(Some(Sequence::new(vec![
        DecoderWrapper::Replace(Replace::new("\u{2581}", " ").map_err(build_err("decoder"))?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ])));

    let mut special = Vec::new();
    let mut plain = Vec::new();
    for (id, (piece, &ty)) in vocab.pieces.iter().zip(&vocab.token_types).enumerate() {
        let is_stop = stop_ids.contains(&(id as u32));
        if ty == TOKEN_TYPE_CONTROL || (ty == TOKEN_TYPE_USER_DEFINED && is_stop) {
            special.push(AddedToken::from(piece.clone(), true).normalized(false));
        } else if ty == TOKEN_TYPE_USER_DEFINED {
            plain.push(AddedToken::from(piece.clone(), false).normalized(false));
        }
    }
    tk.add_special_tokens(&special);
    tk.add_tokens(&plain);
    Ok(tk)
}

#[cfg(test)]
mod tests {
    use super::split_merge;

    #[test]
    fn merge_splits_at_first_space_after_position_zero() {
        // Hand-derived: pieces never contain U+0020 (spaces are `▁`), so the split is unique.
        assert_eq!(split_merge("▁ t"), Some(("▁".into(), "t".into())));
        assert_eq!(split_merge("▁▁ ▁"), Some(("▁▁".into(), "▁".into())));
        assert_eq!(split_merge("\n\n \n"), Some(("\n\n".into(), "\n".into())));
        assert_eq!(split_merge("ab"), None);
        assert_eq!(split_merge("a "), None);
        assert_eq!(split_merge(""), None);
    }
}
