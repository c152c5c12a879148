//! `tokenizer.chat_template` rendered with `minijinja`.
//!
//! Spec: `spec/gemma4-chat.md` §2 (what the Gemma-4 template renders) and §5 (examples). The
//! environment mirrors transformers 5.23.0 `utils/chat_template_utils.py`
//! (`_compile_jinja_template`: `trim_blocks`, `lstrip_blocks`, `raise_exception`) and the
//! variables `apply_chat_template` passes (`messages`, `add_generation_prompt`, the special-token
//! strings, `enable_thinking` as a template kwarg). Python string methods used by the template
//! (`text.split(...)`) come from `minijinja_contrib::pycompat`. The `trim` filter is replaced by
//! Python's `str.strip` semantics (jinja2 `do_trim`), whose whitespace set also contains
//! U+001C..U+001F, unlike Rust's `str::trim`.

use minijinja::{context, Environment, Error, ErrorKind, Value};

use super::{ChatMessage, TokenizerError};

/// Work budget of one render: minijinja fuel (`Environment::set_fuel`), one unit per executed
/// template instruction (loop steps, lookups, calls, emits; a filter or method call such as
/// `split` or `trim` is one unit whatever its input length), counted afresh for each render.
///
/// Measured with the real Gemma-4 template (`tokenizer.chat_template` of every fixture model
/// and of `ggml-vocab-gemma-4.gguf`: one 12 045-byte template), minijinja 2.24: 116 to 279
/// units on the nine transformers-rendered chats of `fixtures/tokenizer/chat-cases.json`, 116
/// to 247 on the chat prompts of `suites/*.toml`; each further user turn costs 53, an
/// assistant turn with a thought 96 (18 more per further `<channel|>`), and a chat that fills
/// the real models' 262 144-position context with the shortest turns (52 428 of them) about
/// 3.9 million. The budget, 5·10^7, is about 180 000 times the largest measured chat and 12
/// times that context-filling one, while a template that loops without end (`range(100000)`
/// nested in `range(100000)`: 10^10 steps) is stopped after about 1.6 s (a dev build on a
/// two-core machine) instead of running for hours.
pub const CHAT_TEMPLATE_FUEL: u64 = 50_000_000;

/// Largest rendered chat, in bytes, beyond the messages' own text: a render whose output
/// exceeds this plus 4 × the messages' total content bytes stops with
/// [`TokenizerError::TemplateOutputTooLarge`] instead of growing until the process is killed
/// (fuel bounds steps, not bytes: `{% for i in range(1000) %}{{ "x" * 100000000 }}{% endfor %}`
/// would write 100 GB in a few thousand instructions). The real Gemma-4 template adds 56 to 120 bytes to the
/// messages' text on the nine chats of `fixtures/tokenizer/chat-cases.json` (18 to 66 per
/// message: the turn markers of `spec/gemma4-chat.md` §2), and a chat that fills a 262 144-token
/// context is a few MB, so the limit never stops a real chat. Only what the render writes out is
/// bounded: output minijinja captures in memory first — the body of a `{% filter %}` or of a
/// block `{% set x %}…{% endset %}`, a macro call's output — and strings built without being
/// written (doubling one in a recursive macro) can still grow until the process is killed
/// (30 of the loop's 100 MB writes inside `{% set x %}` peaked at 5.8 GB, measured).
pub const CHAT_TEMPLATE_MAX_OUTPUT: usize = 16 << 20;

/// The render's output buffer, refusing to grow past `limit` bytes (see
/// [`CHAT_TEMPLATE_MAX_OUTPUT`]).
struct CappedOutput {
    buf: Vec<u8>,
    limit: usize,
}

/// The [`CappedOutput`] limit was reached (the source of minijinja's write error).
#[derive(Debug)]
struct OutputLimit;

impl std::fmt::Display for OutputLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the rendered chat outgrew its limit")
    }
}

impl std::error::Error for OutputLimit {}

impl std::io::Write for CappedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() > self.limit - self.buf.len() {
            return Err(std::io::Error::other(OutputLimit));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Source of the error `raise_exception` returns: tells the template's own refusal apart from
/// minijinja's errors of the same kind ([`template_error`]).
#[derive(Debug)]
struct RaisedByTemplate;

impl std::fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("raised by the template")
    }
}

impl std::error::Error for RaisedByTemplate {}

/// A minijinja error as a [`TokenizerError`] that reads on one line, with no Rust paths and no
/// source dump: the template's own message for `raise_exception`, the work budget for running
/// out of fuel, otherwise minijinja's error kind and detail; each with the template line.
fn template_error(e: &Error) -> TokenizerError {
    let line = e.line().filter(|&l| l > 0);
    let raised = std::error::Error::source(e).is_some_and(|s| s.is::<RaisedByTemplate>());
    if raised {
        return TokenizerError::TemplateRaised {
            line,
            message: e.detail().unwrap_or_default().to_string(),
        };
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return TokenizerError::TemplateBudget {
            fuel: CHAT_TEMPLATE_FUEL,
            line,
        };
    }
    let mut message = e.kind().to_string();
    if let Some(detail) = e.detail() {
        message = format!("{message}: {detail}");
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        message = format!("{message}: {c}");
        cause = c.source();
    }
    TokenizerError::Template { line, message }
}

/// Whether `e` or one of its sources is an `E` (also inside an `io::Error`).
fn chain_has<E: std::error::Error + 'static>(e: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.is::<E>()
            || c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .is_some_and(|inner| inner.is::<E>())
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// What [`ChatTemplate::render`] puts in place of the messages' text to see whether the
/// output depends on it.
const CONTENT_PROBE: &str = "content probe 7f3a";

/// Name under which the template is registered (no extension: no auto-escaping).
const TEMPLATE_NAME: &str = "chat_template";

/// Special-token strings passed to the template (`bos_token`, ...), as transformers passes them.
pub(super) struct SpecialTexts {
    pub bos: String,
    pub eos: String,
    pub unk: String,
    pub pad: String,
    pub mask: String,
}

/// A compiled chat template with its special-token strings.
pub(super) struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    special: SpecialTexts,
}

/// Python's `str.isspace` set (what `str.strip()` without arguments removes).
fn is_py_whitespace(c: char) -> bool {
    matches!(c, '\u{1c}'..='\u{1f}') || c.is_whitespace()
}

/// jinja2's `trim` filter: `str(value).strip(chars)`.
fn py_trim(value: &str, chars: Option<&str>) -> String {
    match chars {
        None => value.trim_matches(is_py_whitespace).to_string(),
        Some(set) => value.trim_matches(|c| set.contains(c)).to_string(),
    }
}

/// transformers' `raise_exception(message)` template helper: the render stops with
/// [`TokenizerError::TemplateRaised`] carrying `message`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message).with_source(RaisedByTemplate))
}

impl ChatTemplate {
    /// Compiles `source`; errors name the template line (`TokenizerError::Template`). Renders
    /// are bounded by [`CHAT_TEMPLATE_FUEL`].
    pub fn new(source: &str, special: SpecialTexts) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
        env.set_fuel(Some(CHAT_TEMPLATE_FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("trim", py_trim);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| template_error(&e))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            special,
        })
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` (non-empty; checked by the caller).
    ///
    /// Errors: [`TokenizerError::EmptyChatTemplate`] for an empty (or all-whitespace) source;
    /// the template's own errors ([`template_error`]); [`TokenizerError::TemplateDropsContent`]
    /// when some message has text but the output does not depend on any of it
    /// ([`Self::check_content_rendered`]), which would otherwise score or generate from a
    /// prompt without the user's words.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        if self.source.trim_matches(is_py_whitespace).is_empty() {
            return Err(TokenizerError::EmptyChatTemplate);
        }
        let rendered = self.render_capped(messages, add_generation_prompt, enable_thinking)?;
        self.check_content_rendered(messages, add_generation_prompt, enable_thinking, &rendered)?;
        Ok(rendered)
    }

    /// One render of `messages`, its output bounded by [`CHAT_TEMPLATE_MAX_OUTPUT`] + 4 × the
    /// messages' text ([`TokenizerError::TemplateOutputTooLarge`]); other errors as
    /// [`template_error`] makes them.
    fn render_capped(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&e))?;
        let limit = messages.iter().fold(CHAT_TEMPLATE_MAX_OUTPUT, |n, m| {
            n.saturating_add(m.content.len().saturating_mul(4))
        });
        let mut out = CappedOutput {
            buf: Vec::new(),
            limit,
        };
        tmpl.render_captured_to(
            self.context(messages, add_generation_prompt, enable_thinking),
            &mut out,
        )
        .map_err(|e| {
            if chain_has::<OutputLimit>(&e) {
                TokenizerError::TemplateOutputTooLarge { limit }
            } else {
                template_error(&e)
            }
        })?;
        String::from_utf8(out.buf).map_err(|e| TokenizerError::Template {
            line: None,
            message: format!("the rendered chat is not UTF-8: {e}"),
        })
    }

    /// [`TokenizerError::TemplateDropsContent`] when some message has text and the template's
    /// output does not depend on it. Fast path: the output contains some message's text as the
    /// Gemma-4 template writes it (stripped of Python whitespace). Otherwise (a template that
    /// transforms the text, or drops it) the chat is rendered again with every non-blank
    /// content replaced by [`CONTENT_PROBE`]: the same output means no message's text reaches
    /// the prompt.
    fn check_content_rendered(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
        rendered: &str,
    ) -> Result<(), TokenizerError> {
        let has_text = |m: &ChatMessage| !m.content.trim_matches(is_py_whitespace).is_empty();
        let texts: Vec<&str> = messages
            .iter()
            .filter(|m| has_text(m))
            .map(|m| m.content.trim_matches(is_py_whitespace))
            .collect();
        if texts.is_empty() || texts.iter().any(|t| rendered.contains(t)) {
            return Ok(());
        }
        let probe: Vec<ChatMessage> = messages
            .iter()
            .map(|m| ChatMessage {
                role: m.role.clone(),
                content: if has_text(m) {
                    CONTENT_PROBE.to_string()
                } else {
                    m.content.clone()
                },
            })
            .collect();
        let probed = self.render_capped(&probe, add_generation_prompt, enable_thinking);
        match probed {
            Ok(other) if other == rendered => {
                const SHOWN: usize = 80;
                let mut output: String = rendered.chars().take(SHOWN).collect();
                if output.len() < rendered.len() {
                    output.push('…');
                }
                Err(TokenizerError::TemplateDropsContent {
                    messages: texts.len(),
                    output,
                })
            }
            // The output (or the error) changed with the text: the text reaches the prompt.
            _ => Ok(()),
        }
    }

    /// The variables of one render (`apply_chat_template`'s).
    fn context(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Value {
        context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            enable_thinking => enable_thinking,
            bos_token => self.special.bos.as_str(),
            eos_token => self.special.eos.as_str(),
            unk_token => self.special.unk.as_str(),
            pad_token => self.special.pad.as_str(),
            mask_token => self.special.mask.as_str(),
        }
    }

    /// The fuel one render uses (for the measurements behind [`CHAT_TEMPLATE_FUEL`]).
    #[cfg(test)]
    fn fuel_used(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> u64 {
        let tmpl = self.env.get_template(TEMPLATE_NAME).expect("template");
        let out = tmpl
            .render_captured(self.context(messages, add_generation_prompt, enable_thinking))
            .expect("render");
        out.state().fuel_levels().expect("fuel is on").0
    }
}

#[cfg(test)]
mod tests {
    use super::{py_trim, CHAT_TEMPLATE_FUEL};
    use crate::gguf::GgufFile;
    use crate::tokenizer::{ChatMessage, GemmaTokenizer};

    /// A user/assistant chat of `turns` messages, each assistant message with a thought.
    fn long_chat(turns: usize) -> Vec<ChatMessage> {
        (0..turns)
            .map(|i| match i % 2 {
                0 => ChatMessage::new("user", format!("Question {i}?")),
                _ => ChatMessage::new("assistant", format!("<|channel>t<channel|>Answer {i}.")),
            })
            .collect()
    }

    /// The margins stated at [`CHAT_TEMPLATE_FUEL`], on the real Gemma-4 template (that of the
    /// dense fixture model; every fixture has the same one): every transformers-rendered chat
    /// of `chat-cases.json` uses at most a 100 000th of the budget, and a chat that fills the
    /// 262 144-position context of the real models with the shortest turns (5 tokens each:
    /// `<|turn>`, role, `\n`, `<turn|>`, `\n`; 52 428 turns) at most a tenth.
    #[test]
    fn real_template_uses_a_small_part_of_the_budget() {
        let dir = crate::fixtures_dir();
        let (Ok(file), Ok(cases)) = (
            GgufFile::open(dir.join("models/dense-target.Q4_K_M.gguf")),
            std::fs::read_to_string(dir.join("tokenizer/chat-cases.json")),
        ) else {
            eprintln!("skipped: fixtures not found at {}", dir.display());
            return;
        };
        let tok = GemmaTokenizer::from_gguf(&file).expect("tokenizer");
        let chat = tok.chat.as_ref().expect("the fixture has a chat template");
        let cases: serde_json::Value = serde_json::from_str(&cases).expect("chat-cases.json");
        let mut most = 0;
        for c in cases.as_array().expect("a list of cases") {
            let messages: Vec<ChatMessage> =
                serde_json::from_value(c["messages"].clone()).expect("messages");
            let thinking = c["template_kwargs"]["enable_thinking"] == true;
            let generation = c["add_generation_prompt"] == true;
            let fuel = chat.fuel_used(&messages, generation, thinking);
            eprintln!("{}: fuel {fuel}", c["name"]);
            most = most.max(fuel);
        }
        assert!(most > 0 && most * 100_000 <= CHAT_TEMPLATE_FUEL, "{most}");
        let full = chat.fuel_used(&long_chat(262_144 / 5), true, false);
        eprintln!("52 428 turns: fuel {full}");
        assert!(full * 10 <= CHAT_TEMPLATE_FUEL, "{full}");
    }

    #[test]
    fn trim_filter_strips_python_whitespace_set() {
        // Hand-derived from Python: "\x1c a \t\n".strip() == "a"; "xxaxx".strip("x") == "a".
        assert_eq!(py_trim("\u{1c} a \t\n", None), "a");
        assert_eq!(py_trim("xxaxx", Some("x")), "a");
        assert_eq!(py_trim("\u{3000}b\u{a0}", None), "b");
    }
}
