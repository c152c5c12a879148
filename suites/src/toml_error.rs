//! TOML deserialization errors as one line naming the key (`suite.rs`, `budgets.rs`): the
//! `toml` crate prints an error as a multi-line source snippet (`TOML parse error at line 4,
//! column 14`, the line, a caret line, the message) or as the message followed by `in `key``;
//! a CLI error is one `error: …` line, and the key is what the reader needs.

/// One line for `e`: `line L column C: ` when it has a place in `input`, then the key path
/// the crate recorded (`a.b`) as `name` writes it (`[suite] stop_ids`), then `: ` and the
/// message ([`message`]).
pub(crate) fn line(
    e: &toml::de::Error,
    input: Option<&str>,
    name: impl Fn(&str) -> String,
) -> String {
    let mut out = String::new();
    if let (Some(text), Some(span)) = (input, e.span()) {
        let (l, c) = line_column(text, span.start);
        out.push_str(&format!("line {l} column {c}: "));
    }
    if let Some(keys) = keys(e) {
        out.push_str(&name(&keys));
        out.push_str(": ");
    }
    out.push_str(&message(e));
    out
}

/// The message alone ([`line`] without place and key), on one line (newlines collapsed); an
/// integer beyond 64 bits is said to be out of range instead of toml's `invalid type: integer
/// `N` as i128, expected …`.
pub(crate) fn message(e: &toml::de::Error) -> String {
    let m = e.message().trim();
    if let Some((n, _)) = m
        .strip_prefix("invalid type: integer `")
        .and_then(|r| r.split_once("` as i128, expected "))
    {
        return format!(
            "integer {n} is out of range (TOML integers are 64-bit: {} to {})",
            i64::MIN,
            i64::MAX
        );
    }
    m.split('\n')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The key path the crate recorded (`a.b`), if any: it is printed only as the last line `in
/// `a.b`` of an error without source context, so the error is printed without its input.
pub(crate) fn keys(e: &toml::de::Error) -> Option<String> {
    let mut bare = e.clone();
    bare.set_input(None);
    let text = bare.to_string();
    let last = text.trim_end().rsplit('\n').next()?;
    let k = last.strip_prefix("in `")?.strip_suffix('`')?;
    (!k.is_empty()).then(|| k.to_string())
}

/// One line for a `toml_edit` parse error: `line L column C: message`.
pub(crate) fn edit_line(e: &toml_edit::TomlError, input: &str) -> String {
    let m = e
        .message()
        .split('\n')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match e.span() {
        Some(span) => {
            let (l, c) = line_column(input, span.start);
            format!("line {l} column {c}: {m}")
        }
        None => m,
    }
}

/// 1-based line and column (in characters) of byte offset `at` in `text`.
pub(crate) fn line_column(text: &str, at: usize) -> (usize, usize) {
    let at = at.min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse errors and type errors each give one line with the place or the key; an integer
    /// beyond i64 is said to be out of range.
    #[test]
    fn errors_are_one_line_with_place_and_key() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct T {
            n: usize,
        }
        let text = "n = 99999999999999999999\n";
        let e = toml::from_str::<T>(text).unwrap_err();
        assert_eq!(
            line(&e, Some(text), str::to_string),
            "line 1 column 5: n: integer 99999999999999999999 is out of range (TOML integers are \
             64-bit: -9223372036854775808 to 9223372036854775807)"
        );
        let v: toml::Value = toml::from_str("n = -1").unwrap();
        let e = v.try_into::<T>().unwrap_err();
        assert_eq!(
            line(&e, None, |k| format!("[t] {k}")),
            "[t] n: invalid value: integer `-1`, expected usize"
        );
        let text = "\nn = [\n";
        let e = toml::from_str::<T>(text).unwrap_err();
        let l = line(&e, Some(text), str::to_string);
        assert!(l.starts_with("line ") && !l.contains('\n'), "{l}");
    }
}
