//! Suite TOML files (`design/conformance.md` §9): a `[suite]` table of settings with the §9
//! defaults, then `[[prompt]]` tables with `id`, either `messages` or `text`, and `max_tokens`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::{first_duplicate, Mode};

/// One chat message of a prompt (`{role, content}`), rendered with the model's chat template.
/// Any other key is refused (a misspelt `content` would otherwise be dropped silently).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user`, `assistant` (or `model`).
    pub role: String,
    /// Message text.
    pub content: String,
}

/// What the prompt is: chat messages (template applied, gemma4-chat §4 BOS rule) or raw text
/// (encoded with BOS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PromptInput {
    /// Chat messages.
    Messages(Vec<Message>),
    /// Raw text.
    Text(String),
}

/// One `[[prompt]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prompt {
    /// Unique id (file-name safe: `[A-Za-z0-9_-]`).
    pub id: String,
    /// The input.
    pub input: PromptInput,
    /// Token budget for generation.
    pub max_tokens: usize,
}

/// The `[suite]` settings, with the conformance §9 defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteSettings {
    /// Suite name (defaults to the file stem; `name = ""` is refused, not read as unset).
    #[serde(default, deserialize_with = "non_empty_name")]
    pub name: String,
    /// Top-k stored and compared per position (default 16).
    #[serde(default = "default_top_k")]
    pub top_k: usize,
    /// Allowed tie-flips per (prompt, mode) (default 3).
    #[serde(default = "default_max_tie_flips")]
    pub max_tie_flips: usize,
    /// τ in logits, used only when `goldens/<model>/budgets.toml` has no entry for the engine.
    #[serde(default = "default_tie_budget")]
    pub tie_budget: f64,
    /// Modes to run (default for CPU engines: prefill, plain, batch:4, spec:1, spec:2, spec:4).
    #[serde(default = "default_modes")]
    pub modes: Vec<Mode>,
    /// Stop ids (default Gemma-4: `[1, 50, 106]`, gemma4-chat §3).
    #[serde(default = "default_stop_ids")]
    pub stop_ids: Vec<u32>,
    /// Chat template `enable_thinking` (default false).
    #[serde(default)]
    pub enable_thinking: bool,
    /// Relative oracle-tie threshold: `ε_oracle = oracle_tie_rel · max|ℓ_t|` (default 1e-9).
    #[serde(default = "default_oracle_tie_rel")]
    pub oracle_tie_rel: f64,
    /// Speculative acceptance floors (§7), `[suite.acceptance_floor]`: drafter file stem (e.g.
    /// `"dense-assistant.F32"`) → minimum acceptance rate (accepted / drafted, in `[0, 1]`) of
    /// every `spec:K` mode with that drafter. Below it: a `slow-spec` note (fails only under
    /// `--require-acceptance`). Drafters not listed have no floor (under `--require-acceptance`
    /// a warning names them); a key naming a drafter of the run in another case or with
    /// `.gguf` is refused ([`crate::acceptance::floor_for`]).
    #[serde(default)]
    pub acceptance_floor: BTreeMap<String, f64>,
    /// Also run the f64 oracle's own `spec:K` (with the real drafter) on this suite's prompts,
    /// for every drafter listed in `acceptance_floor`, and report its acceptance beside the
    /// engine's (§7; default false: it is an f64 generation per prompt and K, cached under
    /// `target/conformance/cache/spec-*.json`). `--oracle-acceptance` runs it for every suite
    /// and drafter.
    #[serde(default)]
    pub oracle_acceptance: bool,
}

/// Smallest top-k a suite (`[suite] top_k`) or an engine (`top-k=` of an HTTP engine spec) may
/// ask for: the rule needs the oracle's and the engine's top-2 (margins, gaps).
pub const MIN_TOP_K: usize = 2;

/// `[suite] name` as given: an empty string is an error (it fell back to the file stem
/// silently, as if the key were absent; the file then owned another name's goldens folder).
fn non_empty_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    if name.is_empty() {
        return Err(serde::de::Error::custom(
            "the name is empty: give one, or leave the key out for the file's stem",
        ));
    }
    Ok(name)
}

fn default_top_k() -> usize {
    16
}
fn default_max_tie_flips() -> usize {
    3
}
fn default_tie_budget() -> f64 {
    0.02
}
fn default_oracle_tie_rel() -> f64 {
    1e-9
}
fn default_modes() -> Vec<Mode> {
    vec![
        Mode::Prefill,
        Mode::Plain,
        Mode::Batch { n: 4 },
        Mode::Spec { k: 1 },
        Mode::Spec { k: 2 },
        Mode::Spec { k: 4 },
    ]
}
fn default_stop_ids() -> Vec<u32> {
    vec![1, 50, 106]
}

impl Default for SuiteSettings {
    fn default() -> Self {
        SuiteSettings {
            name: String::new(),
            top_k: default_top_k(),
            max_tie_flips: default_max_tie_flips(),
            tie_budget: default_tie_budget(),
            modes: default_modes(),
            stop_ids: default_stop_ids(),
            enable_thinking: false,
            oracle_tie_rel: default_oracle_tie_rel(),
            acceptance_floor: BTreeMap::new(),
            oracle_acceptance: false,
        }
    }
}

/// A loaded suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suite {
    /// Where it was read from.
    pub path: PathBuf,
    /// Whether `settings.name` is the file's stem (the file has no `[suite] name` key): errors
    /// about the name then say to rename the file or set the key.
    #[serde(skip)]
    pub name_from_file: bool,
    /// Settings.
    pub settings: SuiteSettings,
    /// Prompts in file order.
    pub prompts: Vec<Prompt>,
}

/// Errors loading a suite; each names the file and, where it applies, the prompt id.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The file could not be read.
    #[error("{path}: cannot read suite: {source}")]
    Io {
        /// Suite file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not UTF-8 (TOML is): the place of the first invalid byte.
    #[error(
        "{path}: cannot read suite: not UTF-8 (TOML must be): line {line} column {column} (byte \
         offset {offset}) holds the invalid byte 0x{byte:02X}"
    )]
    NotUtf8 {
        /// Suite file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based column (characters) of the first invalid byte in its line.
        column: usize,
        /// 0-based byte offset of the first invalid byte in the file.
        offset: usize,
        /// That byte.
        byte: u8,
    },
    /// The TOML is malformed or a `[suite]` key has the wrong type.
    #[error("{path}: bad suite TOML: {message}")]
    Toml {
        /// Suite file.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// One prompt table is invalid: `bad suite TOML` as the other errors of the file, with the
    /// place of the key at fault (of the table when no key is) when the text gives one.
    #[error(
        "{path}: bad suite TOML: {}prompt {id:?}: {message}",
        at.map_or(String::new(), |(l, c)| format!("line {l} column {c}: "))
    )]
    Prompt {
        /// Suite file.
        path: PathBuf,
        /// 1-based line and column (characters) of the key at fault, if found.
        at: Option<(usize, usize)>,
        /// Prompt id (or `#<index>` when the id itself is missing).
        id: String,
        /// What is wrong.
        message: String,
    },
    /// `[suite] modes = []`: the suite would run nothing.
    #[error(
        "{path}: bad suite TOML: [suite] modes = []: the suite declares no modes (list at least \
         one of prefill, plain, batch:N, spec:K, or leave `modes` out for the default)"
    )]
    NoModes {
        /// Suite file.
        path: PathBuf,
    },
    /// `[suite] modes` lists a mode twice (it would run, and be reported, twice).
    #[error("{path}: bad suite TOML: [suite] modes lists {mode} twice (each mode runs once)")]
    DuplicateMode {
        /// Suite file.
        path: PathBuf,
        /// The repeated mode.
        mode: Mode,
    },
    /// The same suite file is given twice to one run (`--suite smoke --suite
    /// suites/smoke.toml`): it would run, and be reported, twice.
    #[error(
        "suite file given twice: {first} and {second} are the same file (each suite runs once)"
    )]
    SameFile {
        /// As given first.
        first: PathBuf,
        /// As given again.
        second: PathBuf,
    },
    /// Two suite files of one run have the same `[suite] name`: their goldens would share one
    /// folder (`goldens/<model>/<name>/`, one overwriting or being judged against the other's)
    /// and their report sections one name.
    #[error(
        "{first} and {second} both have [suite] name = {name:?}: they would share the goldens \
         folder goldens/<model>/{name}/ and one name in the report (rename one)"
    )]
    SameName {
        /// The first file.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
        /// The shared name.
        name: String,
    },
    /// A suite file has the `[suite] name` of a file in the `suites/` folder (its
    /// `<name>.toml`, what `--suite <name>` reads) that it is not: it would be judged against,
    /// or blessed into, that file's goldens (`goldens/<model>/<name>/`).
    #[error(
        "{file}: the suite name {name:?}{} is taken by {owner} (goldens/<model>/{name}/ holds \
         that file's goldens): {}",
        if *from_file { " (from the file name: it has no [suite] name)" } else { "" },
        if *from_file {
            format!("set [suite] name in {} to another name, or rename the file", file.display())
        } else {
            format!("rename [suite] name in {}", file.display())
        }
    )]
    NameTaken {
        /// The suite file given.
        file: PathBuf,
        /// The file of `suites/` with that name.
        owner: PathBuf,
        /// The name.
        name: String,
        /// The name is the file's stem ([`Suite::name_from_file`]), not a `[suite] name` key.
        from_file: bool,
    },
    /// A prompt id asked for does not exist.
    #[error("{path}: no prompt with id {id:?}")]
    UnknownPrompt {
        /// Suite file.
        path: PathBuf,
        /// Prompt id.
        id: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrompt {
    id: Option<String>,
    // an array read one `Message` at a time, so that an error names its index; a single
    // `[prompt.messages]` table is named as such
    messages: Option<toml::Value>,
    text: Option<String>,
    max_tokens: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSuite {
    #[serde(default)]
    suite: SuiteSettings,
    #[serde(default)]
    prompt: Vec<toml::Value>,
}

/// The rule [`is_safe_name`] checks, as error messages state it.
pub const SAFE_NAME_RULE: &str = "[A-Za-z0-9_.-], not starting with '.'";

/// Names no suite may have: files of a model's goldens folder beside the suite folders
/// (`goldens/<model>/<name>/`), compared ignoring ASCII case (one file on a case-insensitive
/// file system).
pub const RESERVED_SUITE_NAMES: [&str; 1] = [crate::budgets::BUDGETS_FILE];

/// Whether `name` is safe as one file or folder name inside a folder of ours: non-empty, only
/// `[A-Za-z0-9_.-]`, not starting with `.` (no path separator, no `..`, no hidden file). The rule
/// of a `[suite] name` (its goldens folder `goldens/<model>/<name>/`) and of a conformance run's
/// `--label` (its report folder `target/conformance/runs/<label>/`).
pub fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Whether two suite paths name the same file (compared canonically: `suites/../suites/x.toml`
/// is `suites/x.toml`; a path that does not resolve is compared as written).
pub fn same_file(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    a == b || canon(a) == canon(b)
}

/// The suite files of one run, each given once and each with its own `[suite] name`.
///
/// Errors: [`SuiteError::SameFile`] for a file in `lists` twice within one list (a list is one
/// model's suites; one file shared by several models is fine), [`SuiteError::SameName`] for two
/// different files among `loaded` with one name.
pub fn check_distinct(lists: &[&[PathBuf]], loaded: &[Suite]) -> Result<(), SuiteError> {
    for list in lists {
        for (i, p) in list.iter().enumerate() {
            if let Some(q) = list[..i].iter().find(|q| same_file(q, p)) {
                return Err(SuiteError::SameFile {
                    first: q.clone(),
                    second: p.clone(),
                });
            }
        }
    }
    for (i, s) in loaded.iter().enumerate() {
        if let Some(t) = loaded[..i]
            .iter()
            .find(|t| t.settings.name == s.settings.name && !same_file(&t.path, &s.path))
        {
            return Err(SuiteError::SameName {
                first: t.path.clone(),
                second: s.path.clone(),
                name: s.settings.name.clone(),
            });
        }
    }
    Ok(())
}

/// Every suite of `loaded` whose `[suite] name` (the file stem when unset) is that of a file in
/// `suites_dir` — `<suites_dir>/<name>.toml`, what `--suite <name>` reads — is that file
/// (compared with [`same_file`]): the goldens of a name, `goldens/<model>/<name>/`, belong to
/// the suite file of that name, so a copy or another file with its name is refused instead of
/// being judged against, or blessed into, them. An edited file of `suites_dir` keeps its name;
/// a name no file of `suites_dir` has is free.
///
/// Errors: [`SuiteError::NameTaken`], naming both files.
pub fn check_names_owned(suites_dir: &Path, loaded: &[Suite]) -> Result<(), SuiteError> {
    for s in loaded {
        let owner = suites_dir.join(format!("{}.toml", s.settings.name));
        if owner.is_file() && !same_file(&owner, &s.path) {
            return Err(SuiteError::NameTaken {
                file: s.path.clone(),
                owner: std::fs::canonicalize(&owner).unwrap_or(owner),
                name: s.settings.name.clone(),
                from_file: s.name_from_file,
            });
        }
    }
    Ok(())
}

/// A key path of the suite file as its table header and key: `suite.stop_ids` →
/// `[suite] stop_ids`, `prompt.max_tokens` → `[[prompt]] max_tokens`.
fn table_key(keys: &str) -> String {
    let (head, rest) = keys.split_once('.').unwrap_or((keys, ""));
    let table = match head {
        "suite" => "[suite]".to_string(),
        "prompt" => "[[prompt]]".to_string(),
        other => return other.to_string() + if rest.is_empty() { "" } else { "." } + rest,
    };
    if rest.is_empty() {
        table
    } else {
        format!("{table} {rest}")
    }
}

/// The byte offset in `text` (a suite file that parsed) of the value at `keys` below prompt
/// table `index` (keys of tables and indices of arrays, `["messages", "1", "role"]`): of the
/// deepest of them found, the prompt table itself (its header) when none is; `None` when the
/// table has no place in the text.
fn prompt_offset(text: &str, index: usize, keys: &[&str]) -> Option<usize> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut item = doc.as_item().get("prompt")?.get(index)?;
    let mut at = item.span().map(|s| s.start);
    for k in keys {
        let next = item
            .get(*k)
            .or_else(|| k.parse::<usize>().ok().and_then(|n| item.get(n)));
        match next {
            Some(n) => {
                item = n;
                at = n.span().map(|s| s.start).or(at);
            }
            None => break,
        }
    }
    at
}

/// [`SuiteError::NotUtf8`] for the file `path` of `bytes`, whose UTF-8 check failed with `e`:
/// the line, column (characters of the valid text before it on its line) and offset of the
/// first invalid byte.
fn not_utf8(path: &Path, bytes: &[u8], e: &std::string::FromUtf8Error) -> SuiteError {
    let offset = e.utf8_error().valid_up_to();
    let before = &bytes[..offset];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // the bytes before `offset` are valid UTF-8
    let column = std::str::from_utf8(&before[line_start..]).map_or(0, |t| t.chars().count()) + 1;
    SuiteError::NotUtf8 {
        path: path.to_path_buf(),
        line: before.iter().filter(|&&b| b == b'\n').count() + 1,
        column,
        offset,
        byte: bytes[offset],
    }
}

impl Suite {
    /// Reads and validates a suite file.
    ///
    /// Errors: [`SuiteError`] naming the file (and prompt id): unreadable file, a file that is
    /// not UTF-8 (the place of the first invalid byte), bad TOML,
    /// missing/duplicate/unsafe id or two ids equal ignoring case, neither or both of
    /// `messages`/`text`, empty messages, an unknown role or key in a message, missing or zero
    /// `max_tokens`, a mistyped key (named), `modes = []` or a mode listed twice, a stop id
    /// listed twice.
    pub fn load(path: impl AsRef<Path>) -> Result<Suite, SuiteError> {
        let path = path.as_ref().to_path_buf();
        let bytes = std::fs::read(&path).map_err(|source| SuiteError::Io {
            path: path.clone(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| not_utf8(&path, e.as_bytes(), &e))?;
        Suite::parse(&text, &path)
    }

    /// Parses suite TOML text; `path` is used for the name default and error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Suite, SuiteError> {
        let raw: RawSuite = toml::from_str(text).map_err(|e| SuiteError::Toml {
            path: path.to_path_buf(),
            message: crate::toml_error::line(&e, Some(text), table_key),
        })?;
        let mut settings = raw.suite;
        let name_from_file = settings.name.is_empty();
        if name_from_file {
            settings.name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "suite".into());
        }
        if settings.top_k < MIN_TOP_K {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: format!(
                    "[suite] top_k = {} (must be >= {MIN_TOP_K})",
                    settings.top_k
                ),
            });
        }
        if let Some(why) = crate::budgets::tau_problem(settings.tie_budget) {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: format!("[suite] tie_budget = {why}"),
            });
        }
        if !(0.0..1.0).contains(&settings.oracle_tie_rel) {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: format!(
                    "[suite] oracle_tie_rel = {} (must be in [0, 1): a fraction of max |logit|)",
                    settings.oracle_tie_rel
                ),
            });
        }
        // The name is the goldens folder (goldens/<model>/<name>/): a path component only, and
        // not a file of that model folder.
        let problem = if !is_safe_name(&settings.name) {
            Some(format!(
                "must be {SAFE_NAME_RULE}: it names the goldens folder"
            ))
        } else {
            RESERVED_SUITE_NAMES
                .iter()
                .find(|r| r.eq_ignore_ascii_case(&settings.name))
                .map(|r| {
                    format!(
                        "is reserved: goldens/<model>/{r} is a file, beside the suite folders \
                         goldens/<model>/<suite>/"
                    )
                })
        };
        if let Some(why) = problem {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: if name_from_file {
                    format!(
                        "the suite name {:?} comes from the file name (the file has no [suite] \
                         name) and {why}: rename the file, or set [suite] name",
                        settings.name
                    )
                } else {
                    format!("[suite] name = {:?} ({why})", settings.name)
                },
            });
        }
        if let Some((i, id)) = settings
            .stop_ids
            .iter()
            .enumerate()
            .find(|(i, id)| settings.stop_ids[..*i].contains(id))
        {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: format!(
                    "[suite] stop_ids lists {id} twice (at {} and {i}; each stop id once)",
                    settings.stop_ids.iter().position(|x| x == id).unwrap_or(0)
                ),
            });
        }
        if settings.modes.is_empty() {
            return Err(SuiteError::NoModes {
                path: path.to_path_buf(),
            });
        }
        if let Some(mode) = first_duplicate(&settings.modes) {
            return Err(SuiteError::DuplicateMode {
                path: path.to_path_buf(),
                mode,
            });
        }
        if let Some((d, f)) = settings
            .acceptance_floor
            .iter()
            .find(|(_, f)| !(0.0..=1.0).contains(*f))
        {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: format!("[suite.acceptance_floor] {d:?} = {f} (must be in [0, 1])"),
            });
        }
        let mut prompts: Vec<Prompt> = Vec::new();
        for (i, value) in raw.prompt.into_iter().enumerate() {
            let id_hint = value
                .get("id")
                .and_then(|v| v.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| format!("#{}", i + 1));
            // the error of this prompt, placed at the value of `keys` below its table (keys
            // and array indices; the table itself for none)
            let perr = |keys: &[&str], message: String| SuiteError::Prompt {
                path: path.to_path_buf(),
                at: prompt_offset(text, i, keys).map(|o| crate::toml_error::line_column(text, o)),
                id: id_hint.clone(),
                message,
            };
            let rp: RawPrompt = value.try_into().map_err(|e: toml::de::Error| {
                let keys = crate::toml_error::keys(&e).unwrap_or_default();
                let keys: Vec<&str> = keys.split('.').filter(|k| !k.is_empty()).collect();
                perr(&keys, crate::toml_error::line(&e, None, str::to_string))
            })?;
            let id = rp.id.ok_or_else(|| perr(&[], "missing `id`".into()))?;
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(perr(&["id"], "id must be non-empty [A-Za-z0-9_-]".into()));
            }
            if prompts.iter().any(|p| p.id == id) {
                return Err(perr(&["id"], "duplicate id".into()));
            }
            if let Some(other) = prompts.iter().find(|p| p.id.eq_ignore_ascii_case(&id)) {
                return Err(perr(
                    &["id"],
                    format!(
                    "id differs from prompt {:?} only in case: their goldens ({id}.snap, {}.snap) \
                     would be one file on a case-insensitive file system",
                    other.id, other.id
                ),
                ));
            }
            let input = match (rp.messages, rp.text) {
                (Some(m), None) => {
                    let m = match m {
                        toml::Value::Array(a) => a,
                        toml::Value::Table(_) => {
                            return Err(perr(
                                &["messages"],
                                "messages: a single [prompt.messages] table; messages are an \
                                 array: [[prompt.messages]] tables or messages = [{role = …, \
                                 content = …}]"
                                    .into(),
                            ))
                        }
                        other => {
                            return Err(perr(&["messages"], format!(
                                "messages: invalid type: {}, expected an array of {{role, content}} tables",
                                other.type_str()
                            )))
                        }
                    };
                    let m = m
                        .into_iter()
                        .enumerate()
                        .map(|(j, v)| {
                            v.try_into::<Message>().map_err(|e| {
                                let key = crate::toml_error::keys(&e);
                                let index = j.to_string();
                                let mut keys = vec!["messages", index.as_str()];
                                keys.extend(key.as_deref());
                                let at = key.as_ref().map_or(String::new(), |k| format!(".{k}"));
                                perr(
                                    &keys,
                                    format!(
                                        "messages[{j}]{at}: {}",
                                        crate::toml_error::message(&e).replace(
                                            "expected struct Message",
                                            "expected a {role, content} table"
                                        )
                                    ),
                                )
                            })
                        })
                        .collect::<Result<Vec<Message>, SuiteError>>()?;
                    if m.is_empty() {
                        return Err(perr(&["messages"], "`messages` is empty".into()));
                    }
                    if let Some((j, bad)) = m.iter().enumerate().find(|(_, m)| {
                        !matches!(m.role.as_str(), "system" | "user" | "assistant" | "model")
                    }) {
                        let index = j.to_string();
                        return Err(perr(
                            &["messages", &index, "role"],
                            format!("unknown role {:?}", bad.role),
                        ));
                    }
                    PromptInput::Messages(m)
                }
                (None, Some(t)) => PromptInput::Text(t),
                (Some(_), Some(_)) => {
                    return Err(perr(&["text"], "has both `messages` and `text`".into()))
                }
                (None, None) => return Err(perr(&[], "needs `messages` or `text`".into())),
            };
            let max_tokens = rp
                .max_tokens
                .ok_or_else(|| perr(&[], "missing `max_tokens`".into()))?;
            if max_tokens == 0 {
                return Err(perr(&["max_tokens"], "`max_tokens` must be >= 1".into()));
            }
            prompts.push(Prompt {
                id,
                input,
                max_tokens,
            });
        }
        if prompts.is_empty() {
            return Err(SuiteError::Toml {
                path: path.to_path_buf(),
                message: "no [[prompt]] tables".into(),
            });
        }
        Ok(Suite {
            path: path.to_path_buf(),
            name_from_file,
            settings,
            prompts,
        })
    }

    /// The prompt with this id.
    pub fn prompt(&self, id: &str) -> Result<&Prompt, SuiteError> {
        self.prompts
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| SuiteError::UnknownPrompt {
                path: self.path.clone(),
                id: id.to_string(),
            })
    }

    /// Keeps only the prompts whose ids are listed (all if `ids` is empty).
    pub fn retain_ids(&mut self, ids: &[String]) -> Result<(), SuiteError> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in ids {
            self.prompt(id)?;
        }
        self.prompts.retain(|p| ids.contains(&p.id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(text, Path::new("suites/t.toml"))
    }

    #[test]
    fn defaults_follow_conformance_section_9() {
        let s = parse("[[prompt]]\nid = \"a\"\ntext = \"hi\"\nmax_tokens = 4\n").unwrap();
        assert_eq!(s.settings.name, "t");
        assert_eq!(s.settings.top_k, 16);
        assert_eq!(s.settings.max_tie_flips, 3);
        assert_eq!(s.settings.stop_ids, vec![1, 50, 106]);
        assert!(!s.settings.enable_thinking);
        assert_eq!(
            s.settings
                .modes
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>(),
            ["prefill", "plain", "batch:4", "spec:1", "spec:2", "spec:4"]
        );
        assert_eq!(s.prompts[0].input, PromptInput::Text("hi".into()));
    }

    #[test]
    fn acceptance_floors_are_read_and_checked() {
        let s = parse(
            "[suite]\noracle_acceptance = true\n[suite.acceptance_floor]\n\"d.F32\" = 0.8\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap();
        assert_eq!(s.settings.acceptance_floor.get("d.F32"), Some(&0.8));
        assert!(s.settings.oracle_acceptance);
        assert!(
            parse("[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n")
                .unwrap()
                .settings
                .acceptance_floor
                .is_empty()
        );
        let e = parse(
            "[suite.acceptance_floor]\n\"d.F32\" = 1.5\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("d.F32"), "{e}");
    }

    /// Settings that would silently pass everything or write outside goldens/ are refused,
    /// naming the key: τ NaN, negative, infinite or beyond 1e3 logits (soft-capped logits are
    /// within ±30); ε_oracle fraction NaN, negative or ≥ 1; a suite name that is not one path
    /// component. The boundary values τ = 0, τ = 1e3 and ε = 0 are accepted.
    #[test]
    fn unusable_settings_are_refused() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        for (setting, key) in [
            ("tie_budget = nan", "tie_budget"),
            ("tie_budget = -1.0", "tie_budget"),
            ("tie_budget = inf", "tie_budget"),
            ("tie_budget = 1e300", "tie_budget"),
            ("oracle_tie_rel = nan", "oracle_tie_rel"),
            ("oracle_tie_rel = -1e-9", "oracle_tie_rel"),
            ("oracle_tie_rel = 1e9", "oracle_tie_rel"),
            ("name = \"../../escaped\"", "name"),
            ("name = \"a/b\"", "name"),
            ("name = \"..\"", "name"),
        ] {
            let e = parse(&format!("[suite]\n{setting}\n{p}")).unwrap_err();
            assert!(
                e.to_string().contains(&format!("[suite] {key}")),
                "{setting}: {e}"
            );
        }
        for ok in [
            "tie_budget = 0.0",
            "tie_budget = 1e3",
            "oracle_tie_rel = 0.0",
            "name = \"core-2.b\"",
        ] {
            parse(&format!("[suite]\n{ok}\n{p}")).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    /// `[suite] name = ""` is refused naming the key and its place (it fell back to the file's
    /// stem as if the key were absent); an absent name is the stem.
    #[test]
    fn an_empty_suite_name_is_refused() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        let e = parse(&format!("[suite]\nname = \"\"\n{p}")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: line 2 column 8: [suite] name: the name is empty: give \
             one, or leave the key out for the file's stem"
        );
        assert_eq!(parse(p).unwrap().settings.name, "t");
    }

    /// A suite named like a file of a model's goldens folder (`budgets.toml`, in any case) is
    /// refused: its goldens folder goldens/<model>/budgets.toml/ collided with the budgets file.
    /// By key or by file name, each message says where the name came from.
    #[test]
    fn reserved_suite_names_are_refused() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        for name in ["budgets.toml", "Budgets.TOML"] {
            let e = parse(&format!("[suite]\nname = \"{name}\"\n{p}")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "suites/t.toml: bad suite TOML: [suite] name = \"{name}\" (is reserved: \
                     goldens/<model>/budgets.toml is a file, beside the suite folders \
                     goldens/<model>/<suite>/)"
                )
            );
        }
        // the stem of x/budgets.toml.toml is budgets.toml
        let e = Suite::parse(p, Path::new("x/budgets.toml.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x/budgets.toml.toml: bad suite TOML: the suite name \"budgets.toml\" comes from the \
             file name (the file has no [suite] name) and is reserved: goldens/<model>/budgets.toml \
             is a file, beside the suite folders goldens/<model>/<suite>/: rename the file, or set \
             [suite] name"
        );
        assert!(parse(&format!("[suite]\nname = \"budgets\"\n{p}")).is_ok());
    }

    /// A name taken from the file's stem is named as such, with what to do (it was reported as
    /// `[suite] name = "my suite"`, a key the file does not have); a name from the key keeps the
    /// key's wording.
    #[test]
    fn a_bad_name_from_the_file_name_says_so() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        let e = Suite::parse(p, Path::new("s/my suite.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "s/my suite.toml: bad suite TOML: the suite name \"my suite\" comes from the file \
             name (the file has no [suite] name) and must be [A-Za-z0-9_.-], not starting with \
             '.': it names the goldens folder: rename the file, or set [suite] name"
        );
        let e = parse(&format!("[suite]\nname = \"my suite\"\n{p}")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: [suite] name = \"my suite\" (must be \
             [A-Za-z0-9_.-], not starting with '.': it names the goldens folder)"
        );
        assert!(parse(p).unwrap().name_from_file);
        assert!(
            !parse(&format!("[suite]\nname = \"t\"\n{p}"))
                .unwrap()
                .name_from_file
        );
    }

    /// A suite file that is not UTF-8 is refused with the line, column (characters) and byte
    /// offset of the first invalid byte (it said only "stream did not contain valid UTF-8").
    #[test]
    fn a_non_utf8_suite_names_the_first_invalid_byte() {
        let dir = std::env::temp_dir().join(format!("suite-utf8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("s.toml");
        // line 2 is `name = "é` (9 characters, 10 bytes) then 0xFF: column 10, offset 8 + 10
        std::fs::write(&f, b"[suite]\nname = \"\xC3\xA9\xFF\"\n").unwrap();
        assert_eq!(
            Suite::load(&f).unwrap_err().to_string(),
            format!(
                "{}: cannot read suite: not UTF-8 (TOML must be): line 2 column 10 (byte offset \
                 18) holds the invalid byte 0xFF",
                f.display()
            )
        );
        // on the first line, at its first byte
        std::fs::write(&f, b"\xE9").unwrap();
        assert!(Suite::load(&f)
            .unwrap_err()
            .to_string()
            .ends_with("line 1 column 1 (byte offset 0) holds the invalid byte 0xE9"),);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The file-name rule of suite names and run labels: letters, digits, `_ - .`, non-empty,
    /// no leading dot (so no `..`, no separator, no hidden file).
    #[test]
    fn safe_names_are_one_plain_path_component() {
        for ok in ["smoke", "core-2.b", "mtp_4", "a.", "A9"] {
            assert!(is_safe_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../../etc",
            ".hidden",
            "a/b",
            "a\\b",
            "a b",
            "é",
            "x\0",
        ] {
            assert!(!is_safe_name(bad), "{bad:?}");
        }
    }

    /// `modes = []` says the suite declares no modes (it ran nothing and ended in "nothing was
    /// scored"); a mode listed twice is refused naming it (it ran twice).
    #[test]
    fn empty_or_repeated_modes_are_refused() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        let e = parse(&format!("[suite]\nmodes = []\n{p}")).unwrap_err();
        assert!(matches!(e, SuiteError::NoModes { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: [suite] modes = []: the suite declares no modes (list \
             at least one of prefill, plain, batch:N, spec:K, or leave `modes` out for the default)"
        );
        for (modes, dup) in [
            (r#"["plain", "plain"]"#, "plain"),
            (r#"["prefill", "spec:2", "plain", "spec:2"]"#, "spec:2"),
        ] {
            let e = parse(&format!("[suite]\nmodes = {modes}\n{p}")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "suites/t.toml: bad suite TOML: [suite] modes lists {dup} twice (each mode \
                     runs once)"
                ),
                "{modes}"
            );
        }
        parse(&format!(
            "[suite]\nmodes = [\"plain\", \"batch:2\", \"batch:4\"]\n{p}"
        ))
        .unwrap();
    }

    /// A key other than `role`/`content` in a message table is refused, naming the prompt, the
    /// message's index and the key (a misspelt `content` was dropped silently).
    #[test]
    fn unknown_message_keys_are_refused() {
        let e = parse(
            "[[prompt]]\nid = \"m1\"\nmessages = [{role = \"system\", content = \"s\"}, {role = \"user\", contnet = \"hi\", content = \"x\"}]\nmax_tokens = 3\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: line 3 column 47: prompt \"m1\": messages[1]: unknown \
             field `contnet`, expected `role` or `content`"
        );
        // the same as a [[prompt.messages]] table
        let e = parse(
            "[[prompt]]\nid = \"m2\"\nmax_tokens = 3\n[[prompt.messages]]\nrole = \"user\"\ncontent = \"x\"\nname = \"bob\"\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "suites/t.toml: bad suite TOML: line 4 column 1: prompt \"m2\": \
                              messages[0]: unknown field `name`"
            ),
            "{e}"
        );
        // a missing content is still named
        let e = parse("[[prompt]]\nid = \"m3\"\nmessages = [{role = \"user\"}]\nmax_tokens = 3\n")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("line 3 column 13: prompt \"m3\": messages[0]: missing field `content`"),
            "{e}"
        );
    }

    /// A prompt's error is placed where the text has it: at the key's value (an unknown role at
    /// that message's `role`), at the table's header when no key is at fault.
    #[test]
    fn prompt_errors_are_placed_at_the_key_or_table() {
        let e =
            parse("[suite]\ntop_k = 4\n[[prompt]]\ntext = \"hi\"\nmax_tokens = 1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: line 3 column 1: prompt \"#1\": missing `id`"
        );
        let e = parse(
            "[[prompt]]\nid = \"r\"\nmessages = [{role = \"user\", content = \"a\"}, {role = \"bot\", content = \"b\"}]\nmax_tokens = 1\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: line 3 column 53: prompt \"r\": unknown role \"bot\""
        );
    }

    #[test]
    fn prompt_errors_name_file_and_id() {
        let e = parse("[[prompt]]\nid = \"x1\"\ntext = \"hi\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("suites/t.toml") && msg.contains("x1") && msg.contains("max_tokens"),
            "{msg}"
        );
        let e = parse("[[prompt]]\nid = \"x2\"\nmax_tokens = 3\n").unwrap_err();
        assert!(e.to_string().contains("x2"), "{e}");
        let e = parse(
            "[[prompt]]\nid = \"x3\"\ntext = \"a\"\nmessages = [{role = \"user\", content = \"b\"}]\nmax_tokens = 3\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("both"), "{e}");
        let e = parse(
            "[[prompt]]\nid = \"d\"\ntext = \"a\"\nmax_tokens = 3\n[[prompt]]\nid = \"d\"\ntext = \"b\"\nmax_tokens = 3\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("duplicate"), "{e}");
        let e = parse(
            "[suite]\nmodes = [\"spec:0\"]\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("spec:0"), "{e}");
    }

    /// A key with the wrong type or value is named (the prompt's `max_tokens`, a message's
    /// `role`, `[suite] stop_ids`), every error is one line (the toml crate's source snippet
    /// and its `in `key`` line are folded into `line L column C: key: message`), an integer
    /// beyond 64 bits is said to be out of range, and a single `[prompt.messages]` table is
    /// named as such.
    #[test]
    fn type_errors_name_the_key_on_one_line() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\n";
        for (toml, want) in [
            (
                format!("{p}max_tokens = -1\n"),
                "suites/t.toml: bad suite TOML: line 4 column 14: prompt \"a\": max_tokens: invalid \
                 value: integer `-1`, expected usize",
            ),
            (
                format!("{p}max_tokens = 99999999999999999999\n"),
                "suites/t.toml: bad suite TOML: line 4 column 14: [[prompt]] max_tokens: integer \
                 99999999999999999999 is out of range (TOML integers are 64-bit: \
                 -9223372036854775808 to 9223372036854775807)",
            ),
            (
                "[suite]\nstop_ids = [1, -1]\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n"
                    .into(),
                "suites/t.toml: bad suite TOML: line 2 column 16: [suite] stop_ids: invalid \
                 value: integer `-1`, expected u32",
            ),
            (
                "[suite]\nstop_id = [1]\n[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n"
                    .into(),
                "suites/t.toml: bad suite TOML: line 2 column 1: [suite]: unknown field \
                 `stop_id`, expected one of `name`, `top_k`, `max_tie_flips`, `tie_budget`, \
                 `modes`, `stop_ids`, `enable_thinking`, `oracle_tie_rel`, `acceptance_floor`, \
                 `oracle_acceptance`",
            ),
            (
                "[[prompt]]\nid = \"m\"\nmessages = [{role = 5, content = \"x\"}]\nmax_tokens = 4\n"
                    .into(),
                "suites/t.toml: bad suite TOML: line 3 column 21: prompt \"m\": messages[0].role: \
                 invalid type: integer `5`, expected a string",
            ),
            (
                "[[prompt]]\nid = \"m\"\nmessages = [{role = \"user\", content.text = \"x\"}]\nmax_tokens = 4\n"
                    .into(),
                "suites/t.toml: bad suite TOML: line 3 column 29: prompt \"m\": \
                 messages[0].content: invalid type: map, expected a string",
            ),
            (
                "[[prompt]]\nid = \"m\"\nmessages = [\"hello\"]\nmax_tokens = 4\n".into(),
                "suites/t.toml: bad suite TOML: line 3 column 13: prompt \"m\": messages[0]: \
                 invalid type: string \"hello\", expected a {role, content} table",
            ),
            (
                "[[prompt]]\nid = \"m\"\nmax_tokens = 4\n[prompt.messages]\nrole = \"user\"\ncontent = \"x\"\n"
                    .into(),
                "suites/t.toml: bad suite TOML: line 4 column 1: prompt \"m\": messages: a single \
                 [prompt.messages] table; \
                 messages are an array: [[prompt.messages]] tables or messages = [{role = …, \
                 content = …}]",
            ),
        ] {
            assert_eq!(parse(&toml).unwrap_err().to_string(), want, "{toml}");
        }
    }

    /// A stop id listed twice is refused naming it; prompt ids equal but for case are refused
    /// naming both (their golden files collide on a case-insensitive file system).
    #[test]
    fn repeated_stop_ids_and_ids_equal_ignoring_case_are_refused() {
        let p = "[[prompt]]\nid = \"a\"\ntext = \"x\"\nmax_tokens = 1\n";
        let e = parse(&format!("[suite]\nstop_ids = [1, 1, 106]\n{p}")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: [suite] stop_ids lists 1 twice (at 0 and 1; each stop \
             id once)"
        );
        let e = parse(&format!("{p}{}", p.replace("\"a\"", "\"A\""))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "suites/t.toml: bad suite TOML: line 6 column 6: prompt \"A\": id differs from prompt \
             \"a\" only in case: their goldens (A.snap, a.snap) would be one file on a case-insensitive file system"
        );
        parse(&format!("{p}{}", p.replace("\"a\"", "\"b\""))).unwrap();
    }
}
