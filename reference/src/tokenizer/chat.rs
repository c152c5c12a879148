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
/// source dump: the template's own message for `raise_exception`, otherwise minijinja's error
/// kind and detail; each with the template line.
fn template_error(e: &Error) -> TokenizerError {
    let line = e.line().filter(|&l| l > 0);
    let raised = std::error::Error::source(e).is_some_and(|s| s.is::<RaisedByTemplate>());
    if raised {
        return TokenizerError::TemplateRaised {
            line,
            message: e.detail().unwrap_or_default().to_string(),
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
    /// Compiles `source`; errors name the template line (`TokenizerError::Template`).
    pub fn new(source: &str, special: SpecialTexts) -> Result<ChatTemplate, TokenizerError> {
        let mut env = Environment::new();
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
    /// Errors: the template's own errors ([`template_error`]).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        enable_thinking: bool,
    ) -> Result<String, TokenizerError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| template_error(&e))?;
        let ctx = context! {
            messages => Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            enable_thinking => enable_thinking,
            bos_token => self.special.bos.as_str(),
            eos_token => self.special.eos.as_str(),
            unk_token => self.special.unk.as_str(),
            pad_token => self.special.pad.as_str(),
            mask_token => self.special.mask.as_str(),
        };
        tmpl.render(ctx).map_err(|e| template_error(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::py_trim;

    #[test]
    fn trim_filter_strips_python_whitespace_set() {
        // Hand-derived from Python: "\x1c a \t\n".strip() == "a"; "xxaxx".strip("x") == "a".
        assert_eq!(py_trim("\u{1c} a \t\n", None), "a");
        assert_eq!(py_trim("xxaxx", Some("x")), "a");
        assert_eq!(py_trim("\u{3000}b\u{a0}", None), "b");
    }
}
