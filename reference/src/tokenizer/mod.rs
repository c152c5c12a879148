//! Gemma-4 tokenizer and chat template, built from GGUF metadata.
//!
//! Spec: `spec/gguf-gemma4.md` §7 (tokenizer keys; §7.2 the HuggingFace `tokenizers` recipe),
//! `spec/gemma4-chat.md` (special tokens §1, template §2, stop tokens §3, BOS rule §4), and the
//! recipe of `fixtures/README-tokenizer-dequant.md` §2 (`make/hf_tokenizer_from_gguf.py`).
//!
//! * [`build`]: the `tokenizers::Tokenizer` (BPE with byte fallback over
//!   `tokenizer.ggml.tokens` / `tokenizer.ggml.merges`, `" "`→`▁` normalizer, llama.cpp's `gemma4`
//!   newline-run split, CONTROL/USER_DEFINED tokens as added tokens) — no hand-written BPE.
//! * [`chat`]: `tokenizer.chat_template` rendered with `minijinja` (+ `minijinja-contrib` pycompat),
//!   with the whitespace settings and variables transformers' `apply_chat_template` uses.

mod build;
mod chat;

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::gguf::{GgufError, GgufFile};

pub use build::{TOKEN_TYPE_BYTE, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL, TOKEN_TYPE_USER_DEFINED};
pub use chat::{CHAT_TEMPLATE_FUEL, CHAT_TEMPLATE_MAX_OUTPUT};

/// Token texts that llama.cpp 0c1e570 puts in the end-of-generation set for Gemma 4 (the entries
/// marked "gemma4" in `src/llama-vocab.cpp`, `llama_vocab::impl::load`): `<turn|>` ends a model
/// turn, `<|tool_response>` hands control back after a tool call (`spec/gemma4-chat.md` §3).
pub const EOG_TOKEN_TEXTS: [&str; 2] = ["<turn|>", "<|tool_response>"];

/// Errors from building the tokenizer, encoding, decoding or rendering a chat.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A tokenizer key is missing or has the wrong type (the GGUF error names the key).
    #[error("tokenizer metadata: {0}")]
    Gguf(#[from] GgufError),
    /// `tokenizer.ggml.model` names a tokenizer this module does not build.
    #[error("tokenizer.ggml.model = {found:?} is not supported (expected \"gemma4\")")]
    UnsupportedModel {
        /// The value found in the file.
        found: String,
    },
    /// A per-token array does not have one entry per token.
    #[error("{key} has {found} entries but tokenizer.ggml.tokens has {expected}")]
    LengthMismatch {
        /// The metadata key.
        key: &'static str,
        /// Number of tokens.
        expected: usize,
        /// Number of entries found.
        found: usize,
    },
    /// A token id given in metadata is outside the vocabulary.
    #[error("{key} = {id} is outside the vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        /// The metadata key.
        key: &'static str,
        /// The id found.
        id: i64,
        /// Number of tokens.
        vocab_size: usize,
    },
    /// The tokenizer has more tokens than the model has embedding rows: the ids from `rows` on,
    /// which the tokenizer may produce, would index past `token_embd.weight`.
    #[error(
        "tokenizer.ggml.tokens has {tokens} tokens but token_embd.weight has {rows} rows: ids \
         from {rows} on have no embedding"
    )]
    TokensWithoutEmbedding {
        /// Number of tokens.
        tokens: usize,
        /// Rows of `token_embd.weight` (its GGUF `ne[1]`).
        rows: u64,
    },
    /// A token of `tokenizer.ggml.tokens` is the empty string (no real Gemma-4 vocabulary has
    /// one; a token without text can never be produced by the BPE).
    #[error("tokenizer.ggml.tokens[{id}] is the empty string: every token needs text")]
    EmptyPiece {
        /// The token id.
        id: u32,
    },
    /// The same piece appears twice in `tokenizer.ggml.tokens`.
    #[error("tokenizer.ggml.tokens: piece {piece:?} occurs at ids {first} and {second}")]
    DuplicatePiece {
        /// The duplicated piece.
        piece: String,
        /// First id carrying it.
        first: u32,
        /// Second id carrying it.
        second: u32,
    },
    /// A merge string is not `"left right"` with non-empty halves.
    #[error("tokenizer.ggml.merges[{index}] = {merge:?} is not \"left right\"")]
    BadMerge {
        /// Rank (index) of the merge.
        index: usize,
        /// The merge string.
        merge: String,
    },
    /// The `tokenizers` crate refused a component (e.g. a merge whose parts are not tokens).
    #[error("building the tokenizer ({what}): {message}")]
    Build {
        /// Which component.
        what: &'static str,
        /// The library's message.
        message: String,
    },
    /// The `tokenizers` crate failed to encode the text.
    #[error("encoding {text_len} bytes of text: {message}")]
    Encode {
        /// Length of the input in bytes.
        text_len: usize,
        /// The library's message.
        message: String,
    },
    /// An id to decode is outside the vocabulary.
    #[error(
        "token id {id} (position {position}) is outside the vocabulary of {vocab_size} tokens"
    )]
    UnknownId {
        /// The id.
        id: u32,
        /// Its index in the input slice.
        position: usize,
        /// Number of tokens.
        vocab_size: usize,
    },
    /// The `tokenizers` crate failed to decode the ids.
    #[error("decoding {n_ids} ids: {message}")]
    Decode {
        /// Number of ids.
        n_ids: usize,
        /// The library's message.
        message: String,
    },
    /// The file has no `tokenizer.chat_template`.
    #[error("the GGUF has no tokenizer.chat_template")]
    NoChatTemplate,
    /// A chat needs at least one message (the template reads `messages[0]`).
    #[error("a chat needs at least one message")]
    EmptyChat,
    /// `tokenizer.chat_template` failed to compile or render (syntax error, unknown filter,
    /// undefined method, ...).
    #[error("tokenizer.chat_template{}: {message}", at_line(*line))]
    Template {
        /// Template line of the error, when minijinja knows it.
        line: Option<usize>,
        /// minijinja's error kind and detail (`unknown filter: filter x is unknown`).
        message: String,
    },
    /// The template refused the chat with `raise_exception(message)` (e.g. roles that do not
    /// alternate).
    #[error("tokenizer.chat_template refused the chat{}: {message}", at_line(*line))]
    TemplateRaised {
        /// Template line of the `raise_exception` call.
        line: Option<usize>,
        /// The template's own message.
        message: String,
    },
    /// The render ran out of its work budget ([`CHAT_TEMPLATE_FUEL`]): a loop far longer than
    /// any chat needs.
    #[error(
        "tokenizer.chat_template exceeded its work budget of {fuel} template instructions{} \
         (a runaway loop: the real Gemma-4 template uses about 50 to 100 per message)",
        at_line(*line)
    )]
    TemplateBudget {
        /// The budget ([`CHAT_TEMPLATE_FUEL`]).
        fuel: u64,
        /// Template line where the budget ran out.
        line: Option<usize>,
    },
    /// The rendered chat outgrew its limit ([`CHAT_TEMPLATE_MAX_OUTPUT`] plus 4 × the
    /// messages' text): a template that writes without end. (minijinja reports no template
    /// line for a failed write.)
    #[error(
        "tokenizer.chat_template wrote more than {limit} bytes (a runaway template: a real chat \
         is its messages' text plus under 100 bytes per message)"
    )]
    TemplateOutputTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// `tokenizer.chat_template` is the empty string (or only whitespace): a chat through it
    /// would lose every message.
    #[error("tokenizer.chat_template is empty: it renders none of the messages")]
    EmptyChatTemplate,
    /// Some message has text, but the rendered chat is the same whatever that text is: the
    /// prompt would silently lose the user's words.
    #[error(
        "tokenizer.chat_template renders none of the messages' text: the output is the same \
         whatever the {messages} message(s) with text say (output {output:?})"
    )]
    TemplateDropsContent {
        /// Messages with non-blank content.
        messages: usize,
        /// The start of the rendered output (at most 80 characters, `…` when cut).
        output: String,
    },
}

/// ` (line N)` for a known template line, else nothing.
fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

/// One chat message as the template sees it: `{"role": ..., "content": ...}`.
///
/// Roles used by the Gemma-4 template: `system` / `developer` (only as the first message: the
/// system turn), `user`, `assistant` (rendered as `model`) — `spec/gemma4-chat.md` §2.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// The role word (`system`, `user`, `assistant`, ...).
    pub role: String,
    /// The message text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// The Gemma-4 tokenizer of one GGUF file: a `tokenizers::Tokenizer` rebuilt from
/// `tokenizer.ggml.*` (`spec/gguf-gemma4.md` §7.2), the special ids, the stop set and the chat
/// template. `Send + Sync`; encoding and rendering take `&self`.
pub struct GemmaTokenizer {
    inner: tokenizers::Tokenizer,
    pieces: Vec<String>,
    token_types: Vec<i32>,
    bos_id: u32,
    eos_id: u32,
    stop_ids: Vec<u32>,
    suppressed_ids: Vec<u32>,
    chat: Option<chat::ChatTemplate>,
}

impl std::fmt::Debug for GemmaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GemmaTokenizer")
            .field("vocab_size", &self.pieces.len())
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("stop_ids", &self.stop_ids)
            .field("has_chat_template", &self.chat.is_some())
            .finish()
    }
}

impl GemmaTokenizer {
    /// Builds the tokenizer from a GGUF's `tokenizer.*` metadata (`spec/gguf-gemma4.md` §7).
    ///
    /// Reads `tokenizer.ggml.{model, tokens, merges, token_type, bos_token_id, eos_token_id,
    /// unknown_token_id}` (required), `tokenizer.ggml.scores` (optional; checked for one f32
    /// per token, otherwise unused), `tokenizer.ggml.suppress_tokens` and
    /// `tokenizer.chat_template` (optional). Stop ids: `eos_token_id`, plus `eot_token_id` /
    /// `eom_token_id` when present, plus the ids of the texts in [`EOG_TOKEN_TEXTS`]
    /// (`spec/gemma4-chat.md` §3; gives {1, 50, 106} for Gemma 4).
    ///
    /// Errors: a missing or mistyped key ([`TokenizerError::Gguf`]), a model other than `gemma4`,
    /// arrays of the wrong length, more tokens than `token_embd.weight` has rows (when the file
    /// has that tensor), an empty token string, ids out of range, malformed merges, a template
    /// that does not compile. The full 262 144-token / 514 906-merge vocabulary loads
    /// in well under a second with optimised dependencies.
    pub fn from_gguf(file: &GgufFile) -> Result<GemmaTokenizer, TokenizerError> {
        let model = file.get_str("tokenizer.ggml.model")?;
        if model != "gemma4" {
            return Err(TokenizerError::UnsupportedModel {
                found: model.to_string(),
            });
        }
        let mut vocab = build::VocabData::from_gguf(file)?;
        let n = vocab.pieces.len();
        // a model file (not a tokenizer-only one): every id the tokenizer can give has a row
        if let Ok(t) = file.tensor("token_embd.weight") {
            let rows = t.dims.get(1).copied().unwrap_or(1);
            if n as u64 > rows {
                return Err(TokenizerError::TokensWithoutEmbedding { tokens: n, rows });
            }
        }
        let id_key = |key: &'static str| -> Result<u32, TokenizerError> {
            let id = file.get_u32(key)?;
            if id as usize >= n {
                return Err(TokenizerError::IdOutOfRange {
                    key,
                    id: i64::from(id),
                    vocab_size: n,
                });
            }
            Ok(id)
        };
        let bos_id = id_key("tokenizer.ggml.bos_token_id")?;
        let eos_id = id_key("tokenizer.ggml.eos_token_id")?;
        let unk_id = id_key("tokenizer.ggml.unknown_token_id")?;

        let mut stop: BTreeSet<u32> = BTreeSet::new();
        stop.insert(eos_id);
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            if file.get(key).is_some() {
                stop.insert(id_key(key)?);
            }
        }
        for (id, piece) in vocab.pieces.iter().enumerate() {
            if EOG_TOKEN_TEXTS.contains(&piece.as_str()) {
                stop.insert(id as u32);
            }
        }
        let stop_ids: Vec<u32> = stop.into_iter().collect();

        let suppressed_ids = match file.get("tokenizer.ggml.suppress_tokens") {
            None => Vec::new(),
            Some(_) => file
                .get_array_i32("tokenizer.ggml.suppress_tokens")?
                .into_iter()
                .map(|id| {
                    u32::try_from(id).ok().filter(|&u| (u as usize) < n).ok_or(
                        TokenizerError::IdOutOfRange {
                            key: "tokenizer.ggml.suppress_tokens",
                            id: i64::from(id),
                            vocab_size: n,
                        },
                    )
                })
                .collect::<Result<Vec<u32>, _>>()?,
        };

        let chat = match file.get("tokenizer.chat_template") {
            None => None,
            Some(_) => {
                let source = file.get_str("tokenizer.chat_template")?;
                let special = |id: Option<u32>| -> String {
                    id.and_then(|i| vocab.pieces.get(i as usize).cloned())
                        .unwrap_or_default()
                };
                let opt_id = |key: &str| file.get_u32(key).ok();
                Some(chat::ChatTemplate::new(
                    source,
                    chat::SpecialTexts {
                        bos: special(Some(bos_id)),
                        eos: special(Some(eos_id)),
                        unk: special(Some(unk_id)),
                        pad: special(opt_id("tokenizer.ggml.padding_token_id")),
                        mask: special(opt_id("tokenizer.ggml.mask_token_id")),
                    },
                )?)
            }
        };

        let inner = build::build_tokenizer(&mut vocab, unk_id, &stop_ids)?;
        Ok(GemmaTokenizer {
            inner,
            pieces: vocab.pieces,
            token_types: vocab.token_types,
            bos_id,
            eos_id,
            stop_ids,
            suppressed_ids,
            chat,
        })
    }

    /// Encodes `text` to token ids, prepending `bos_id` when `add_bos`.
    ///
    /// Special-token text is parsed as specials (llama.cpp `parse_special = true`): every CONTROL
    /// and USER_DEFINED token string in `text` (e.g. `<|turn>`) becomes its id. No EOS is added.
    /// Errors: [`TokenizerError::Encode`] if the library fails.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode {
                text_len: text.len(),
                message: e.to_string(),
            })?;
        let mut ids = Vec::with_capacity(enc.len() + usize::from(add_bos));
        if add_bos {
            ids.push(self.bos_id);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// Decodes ids to text: `▁`→space, byte-fallback tokens `<0xXX>` joined into UTF-8 (invalid
    /// sequences become U+FFFD), special tokens kept as their text (`<bos>`, `<turn|>`, ...).
    ///
    /// Errors: [`TokenizerError::UnknownId`] for an id `>= vocab_size()`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some((position, &id)) = ids
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= self.pieces.len())
        {
            return Err(TokenizerError::UnknownId {
                id,
                position,
                vocab_size: self.pieces.len(),
            });
        }
        self.inner
            .decode(ids, false)
            .map_err(|e| TokenizerError::Decode {
                n_ids: ids.len(),
                message: e.to_string(),
            })
    }

    /// The raw piece of token `id` as stored in `tokenizer.ggml.tokens` (spaces as `▁`, bytes as
    /// `<0xXX>`); `None` if `id >= vocab_size()`.
    pub fn token_piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(String::as_str)
    }

    /// The `tokenizer.ggml.token_type` of token `id` (1 normal, 3 control, 4 user-defined,
    /// 6 byte; `spec/gguf-gemma4.md` §7.1); `None` if `id >= vocab_size()`.
    pub fn token_type(&self, id: u32) -> Option<i32> {
        self.token_types.get(id as usize).copied()
    }

    /// Number of tokens (`tokenizer.ggml.tokens` length; 262 144 for the real vocabulary).
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// `tokenizer.ggml.bos_token_id` (2 for Gemma 4).
    pub fn bos_id(&self) -> u32 {
        self.bos_id
    }

    /// `tokenizer.ggml.eos_token_id` (1 for Gemma 4).
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// End-of-generation ids, ascending: EOS, EOT/EOM when given, and the ids of
    /// [`EOG_TOKEN_TEXTS`] (llama.cpp's set; `spec/gemma4-chat.md` §3). Gemma 4: `[1, 50, 106]`.
    pub fn stop_ids(&self) -> Vec<u32> {
        self.stop_ids.clone()
    }

    /// `tokenizer.ggml.suppress_tokens` as ids (file order); empty if the key is absent.
    pub fn suppressed_ids(&self) -> Vec<u32> {
        self.suppressed_ids.clone()
    }

    /// The `tokenizer.chat_template` source, if the file has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat.as_ref().map(chat::ChatTemplate::source)
    }

    /// Renders `messages` with `tokenizer.chat_template` (`spec/gemma4-chat.md` §2), as
    /// transformers' `apply_chat_template(..., tokenize=False)` does: Jinja `trim_blocks` and
    /// `lstrip_blocks` on, variables `messages`, `add_generation_prompt`, `enable_thinking`,
    /// `bos_token`, `eos_token`, `unk_token`, `pad_token`, `mask_token`.
    ///
    /// The result starts with the `<bos>` text when the template emits it (Gemma 4 always does).
    /// Errors: [`TokenizerError::NoChatTemplate`], [`TokenizerError::EmptyChat`],
    /// [`TokenizerError::EmptyChatTemplate`], the template's own errors
    /// ([`TokenizerError::Template`], [`TokenizerError::TemplateRaised`],
    /// [`TokenizerError::TemplateBudget`]: at most [`CHAT_TEMPLATE_FUEL`] template instructions
    /// per render) and [`TokenizerError::TemplateDropsContent`] when the output does not depend
    /// on the messages' text.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        let chat = self.chat.as_ref().ok_or(TokenizerError::NoChatTemplate)?;
        if messages.is_empty() {
            return Err(TokenizerError::EmptyChat);
        }
        chat.render(messages, add_generation_prompt, enable_thinking)
    }

    /// Renders the chat ([`Self::render_chat`]) and tokenizes it with special tokens parsed,
    /// following the BOS rule of `spec/gemma4-chat.md` §4: the result starts with exactly one
    /// `bos_id`. A leading `<bos>` text emitted by the template is stripped and BOS is added by
    /// the encoder (llama.cpp's chat path; identical ids to tokenizing the text as is without
    /// adding BOS, transformers' path).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let rendered = self.render_chat(messages, add_generation_prompt, enable_thinking)?;
        let bos_text = &self.pieces[self.bos_id as usize];
        let body = rendered
            .strip_prefix(bos_text.as_str())
            .unwrap_or(&rendered);
        self.encode(body, true)
    }
}

/// Compile-time check of the API contract: the tokenizer is shared across threads.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<GemmaTokenizer>();
};
