//! Tie budgets per (engine, model) (`design/conformance.md` §6, §9):
//! `goldens/<model>/budgets.toml`, one table per engine with `tau` and the calibration run it
//! came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One engine's budget and its calibration provenance. Every key is required and no other key
/// is accepted (a misspelt `tau` would otherwise be dropped); [`Budgets::load`] also checks the
/// values ([`Budget::problem`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// τ in logits.
    pub tau: f64,
    /// Calibration date (UTC, `YYYY-MM-DD`).
    pub date: String,
    /// Suite calibrated on.
    pub suite: String,
    /// Positions measured.
    pub positions: usize,
    /// Candidate pairs measured.
    pub pairs: usize,
    /// Largest observed error of a logit difference.
    pub max_error: f64,
    /// The 0.999 quantile of the error.
    pub quantile_999: f64,
    /// Safety factor applied to `max_error`.
    pub safety_factor: f64,
}

impl Budget {
    /// The first unusable value as `(key, value, why)`: τ outside `[0, TAU_MAX]`
    /// ([`tau_problem`]), `max_error` or `quantile_999` negative or not finite, `safety_factor`
    /// not finite or not above 0, `date` not a calendar date `YYYY-MM-DD`. `None` when all
    /// are usable.
    pub fn problem(&self) -> Option<(&'static str, String, String)> {
        if tau_problem(self.tau).is_some() {
            return Some((
                "tau",
                show_number(self.tau),
                format!("must be in [0, {TAU_MAX}] logits"),
            ));
        }
        for (key, v) in [
            ("max_error", self.max_error),
            ("quantile_999", self.quantile_999),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Some((
                    key,
                    show_number(v),
                    "must be a finite error >= 0 logits".into(),
                ));
            }
        }
        if !(self.safety_factor.is_finite() && self.safety_factor > 0.0) {
            return Some((
                "safety_factor",
                show_number(self.safety_factor),
                "must be finite and > 0".into(),
            ));
        }
        if !is_calendar_date(&self.date) {
            return Some((
                "date",
                format!("{:?}", self.date),
                "must be a date YYYY-MM-DD".into(),
            ));
        }
        None
    }
}

/// `YYYY-MM-DD` naming a real day (month 01–12, day within the month, leap years counted).
pub fn is_calendar_date(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' || !digits(0..4) || !digits(5..7) {
        return false;
    }
    if !digits(8..10) {
        return false;
    }
    let num = |r: std::ops::Range<usize>| text[r].parse::<u32>().unwrap_or(0);
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// Errors reading or writing `budgets.toml`, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Unreadable or unwritable.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Malformed TOML, or a table with a missing, unknown or mistyped key (the message names
    /// the table and key, on one line).
    #[error("{path}: bad budgets TOML: {message}")]
    Toml {
        /// File.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
    /// A table whose name is no engine's ([`ENGINE_NAMES`]): a misspelt engine name would never
    /// be read, and the run would fall back to the suite's default τ without a word.
    #[error(
        "{path}: bad budgets TOML: [{engine}] is not an engine name (known: {}): its τ would \
         never be used",
        ENGINE_NAMES.join(", ")
    )]
    UnknownEngine {
        /// File.
        path: PathBuf,
        /// The table's name.
        engine: String,
    },
    /// A key before the first table header (`tau = 0.5` above `[reference-f32]`): it belongs
    /// to no engine.
    #[error(
        "{path}: bad budgets TOML: `{key} = …` is a key outside any table (budgets.toml holds \
         one table per engine, e.g. [reference-f32] with tau = …; move it under its engine's \
         header)"
    )]
    KeyOutsideTable {
        /// File.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// `[[engine]]`: an array of tables, where an engine has one budget.
    #[error(
        "{path}: bad budgets TOML: [[{engine}]] is an array of tables; an engine has one budget: \
         write [{engine}] (single brackets), once"
    )]
    ArrayOfTables {
        /// File.
        path: PathBuf,
        /// The table's name.
        engine: String,
    },
    /// A value that is the right type but unusable ([`Budget::problem`]).
    #[error("{path}: bad budgets TOML: [{engine}] {key} = {value} ({why})")]
    BadValue {
        /// File.
        path: PathBuf,
        /// The engine's table.
        engine: String,
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What it must be.
        why: String,
    },
    /// [`Budgets::save_engine`] would leave a file that [`Budgets::load`] refuses (a problem
    /// elsewhere in it, or in the engine's own table): nothing was written.
    #[error("{source}; [{engine}] not written (conformance would refuse the file: fix it first)")]
    NotWritten {
        /// The engine whose budget was to be written.
        engine: String,
        /// Why the file would not load.
        source: Box<BudgetError>,
    },
}

/// The budgets file of a model's goldens folder, `goldens/<model>/budgets.toml` (beside the
/// suite folders `goldens/<model>/<suite>/`, so no suite may have this name:
/// [`crate::suite::RESERVED_SUITE_NAMES`]).
pub const BUDGETS_FILE: &str = "budgets.toml";

/// The engine names a `budgets.toml` table may have: what [`crate::Engine::name`] returns for
/// every engine `cargo xtask conformance --engine` builds (`conformance::make_engine`): the
/// reference engines, the CUDA engine and the HTTP engines (`http::HttpEngine`).
pub const ENGINE_NAMES: [&str; 6] = [
    "reference-f32",
    "reference-f64",
    "cuda",
    "cuda-fast",
    "llama-server",
    "openai",
];

/// Largest tie budget τ accepted (logits), in `budgets.toml` and a suite's `tie_budget`: Gemma-4's
/// logits are soft-capped at ±30, so a larger τ would call every fork a tie; it is a typo.
pub const TAU_MAX: f64 = 1e3;

/// `Some(why)` when `tau` is not a usable tie budget: NaN, negative, infinite or above
/// [`TAU_MAX`]. τ = 0 is allowed (no tie-flips at all).
pub fn tau_problem(tau: f64) -> Option<String> {
    (!(0.0..=TAU_MAX).contains(&tau))
        .then(|| format!("{} (must be in [0, {TAU_MAX}] logits)", show_number(tau)))
}

/// A number as the errors about it show it: Rust's shortest round-trip form, in scientific
/// notation from 10^6 up in magnitude (`1e300`, not 301 digits).
pub fn show_number(x: f64) -> String {
    if x.is_finite() && x.abs() >= 1e6 {
        format!("{x:e}")
    } else {
        x.to_string()
    }
}

/// `goldens/<model>/budgets.toml`: engine name → budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Budgets(pub BTreeMap<String, Budget>);

/// The header [`Budgets::save`] writes.
const HEADER: &str = "# Tie budgets per engine for this model (conformance.md §6, §9); written by `cargo xtask calibrate`.\n";

impl Budgets {
    /// Reads the file; a missing file is an empty table.
    ///
    /// Errors: [`BudgetError`] naming the file and, where it applies, the table and key
    /// ([`Budgets::parse`]).
    pub fn load(path: &Path) -> Result<Budgets, BudgetError> {
        if !path.exists() {
            return Ok(Budgets::default());
        }
        let text = std::fs::read_to_string(path).map_err(|source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Budgets::parse(&text, path)
    }

    /// Parses `budgets.toml` text; `path` is named in errors.
    ///
    /// Errors: [`BudgetError`], on one line: bad TOML (with line and column), a key outside any
    /// table, an array of tables, a table named after no engine ([`ENGINE_NAMES`]), a missing,
    /// unknown or mistyped key (naming table and key), an unusable value ([`Budget::problem`]).
    pub fn parse(text: &str, path: &Path) -> Result<Budgets, BudgetError> {
        let bad = |message: String| BudgetError::Toml {
            path: path.to_path_buf(),
            message,
        };
        let tables: toml::Table = toml::from_str(text)
            .map_err(|e| bad(crate::toml_error::line(&e, Some(text), str::to_string)))?;
        let mut b = Budgets::default();
        for (engine, value) in tables {
            let table = match value {
                toml::Value::Table(t) => t,
                toml::Value::Array(a) if !a.is_empty() && a.iter().all(toml::Value::is_table) => {
                    return Err(BudgetError::ArrayOfTables {
                        path: path.to_path_buf(),
                        engine,
                    })
                }
                _ => {
                    return Err(BudgetError::KeyOutsideTable {
                        path: path.to_path_buf(),
                        key: engine,
                    })
                }
            };
            check_engine_name(path, &engine)?;
            // one table at a time, so that an error names it
            let budget: Budget =
                toml::Value::Table(table)
                    .try_into()
                    .map_err(|e: toml::de::Error| {
                        bad(format!(
                            "[{engine}] {}",
                            crate::toml_error::line(&e, None, str::to_string)
                        ))
                    })?;
            if let Some((key, value, why)) = budget.problem() {
                return Err(BudgetError::BadValue {
                    path: path.to_path_buf(),
                    engine,
                    key,
                    value,
                    why,
                });
            }
            b.0.insert(engine, budget);
        }
        Ok(b)
    }

    /// Sets `engine`'s budget in the file at `path`, leaving every other table, comment and
    /// number in it as it was (`toml_edit`; the engine's own table keeps its comments too), or
    /// writes a new file holding that one table ([`Budgets::save`]). The file as it would be
    /// written is checked first ([`Budgets::parse`]): a file that conformance would refuse is
    /// not written.
    ///
    /// Errors: `engine` not in [`ENGINE_NAMES`], unreadable or malformed file, `engine` present
    /// but not a table, [`BudgetError::NotWritten`] (naming the problem) when the written file
    /// would not load.
    pub fn save_engine(path: &Path, engine: &str, b: &Budget) -> Result<(), BudgetError> {
        let text = Budgets::edited(path, engine, b)?;
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|source| BudgetError::Io {
                path: d.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(path, text).map_err(|source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Whether [`Budgets::save_engine`] could write a budget for `engine` into `path`: the same
    /// checks, with a placeholder budget, writing nothing (`calibrate` asks before it measures).
    pub fn check_save(path: &Path, engine: &str) -> Result<(), BudgetError> {
        let placeholder = Budget {
            tau: 0.0,
            date: "1970-01-01".into(),
            suite: String::new(),
            positions: 0,
            pairs: 0,
            max_error: 0.0,
            quantile_999: 0.0,
            safety_factor: 1.0,
        };
        Budgets::edited(path, engine, &placeholder).map(|_| ())
    }

    /// The text [`Budgets::save_engine`] writes, checked with [`Budgets::parse`].
    fn edited(path: &Path, engine: &str, b: &Budget) -> Result<String, BudgetError> {
        check_engine_name(path, engine)?;
        let bad = |message: String| BudgetError::Toml {
            path: path.to_path_buf(),
            message,
        };
        let text = if path.exists() {
            let text = std::fs::read_to_string(path).map_err(|source| BudgetError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let mut doc: toml_edit::DocumentMut = text
                .parse()
                .map_err(|e: toml_edit::TomlError| bad(crate::toml_error::edit_line(&e, &text)))?;
            let t = doc
                .entry(engine)
                .or_insert(toml_edit::table())
                .as_table_like_mut()
                .ok_or_else(|| bad(format!("'{engine}' is not a table")))?;
            // A replaced value keeps its decor (spacing and a same-line comment).
            let mut set = |key: &str, v: toml_edit::Value| match t
                .get_mut(key)
                .and_then(|i| i.as_value_mut())
            {
                Some(old) => {
                    let decor = old.decor().clone();
                    *old = v;
                    *old.decor_mut() = decor;
                }
                None => {
                    t.insert(key, toml_edit::Item::Value(v));
                }
            };
            set("tau", b.tau.into());
            set("date", b.date.as_str().into());
            set("suite", b.suite.as_str().into());
            set("positions", (b.positions as i64).into());
            set("pairs", (b.pairs as i64).into());
            set("max_error", b.max_error.into());
            set("quantile_999", b.quantile_999.into());
            set("safety_factor", b.safety_factor.into());
            doc.to_string()
        } else {
            let mut one = Budgets::default();
            one.0.insert(engine.to_string(), b.clone());
            one.text(path)?
        };
        Budgets::parse(&text, path).map_err(|e| BudgetError::NotWritten {
            engine: engine.to_string(),
            source: Box::new(e),
        })?;
        Ok(text)
    }

    /// Every table in the serializer's format, after the header.
    fn text(&self, path: &Path) -> Result<String, BudgetError> {
        let text = toml::to_string_pretty(self).map_err(|e| BudgetError::Toml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Ok(format!("{HEADER}{text}"))
    }

    /// Writes the file (creating its folder), every table in the serializer's format.
    pub fn save(&self, path: &Path) -> Result<(), BudgetError> {
        let io = |source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(io)?;
        }
        std::fs::write(path, self.text(path)?).map_err(io)
    }
}

/// `engine` must be one of [`ENGINE_NAMES`] ([`BudgetError::UnknownEngine`] otherwise).
fn check_engine_name(path: &Path, engine: &str) -> Result<(), BudgetError> {
    if ENGINE_NAMES.contains(&engine) {
        Ok(())
    } else {
        Err(BudgetError::UnknownEngine {
            path: path.to_path_buf(),
            engine: engine.to_string(),
        })
    }
}

/// The smallest τ [`propose_tau`] proposes, 2^-40 (what a zero error gives).
pub const TAU_FLOOR: f64 = 1.0 / (1u64 << 40) as f64;

/// Proposes τ from the largest observed error (§6): `max_error · safety`, rounded up to a power
/// of two (`2^⌈log2 x⌉`), at least [`TAU_FLOOR`] (a zero error gives the floor).
pub fn propose_tau(max_error: f64, safety: f64) -> f64 {
    let x = max_error * safety;
    if x.is_nan() || x <= 0.0 || !x.is_finite() {
        return TAU_FLOOR;
    }
    2f64.powi(x.log2().ceil() as i32).max(TAU_FLOOR)
}

/// Quantile `q ∈ [0, 1]` of the values (nearest rank on a sorted copy); 0 for an empty slice.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tau_is_error_times_safety_rounded_up_to_a_power_of_two() {
        // 3e-4 · 2 = 6e-4; 2^-11 = 4.88e-4 < 6e-4 ≤ 2^-10 = 9.77e-4
        assert_eq!(propose_tau(3e-4, 2.0), 2f64.powi(-10));
        // exact power of two stays
        assert_eq!(propose_tau(0.25, 2.0), 0.5);
        assert_eq!(propose_tau(0.0, 2.0), 2f64.powi(-40));
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 5.0);
        assert_eq!(quantile(&v, 1.0), 10.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
    }

    #[test]
    fn budgets_round_trip_through_toml() {
        let dir = std::env::temp_dir().join(format!("budgets-test-{}", std::process::id()));
        let path = dir.join("budgets.toml");
        let mut b = Budgets::default();
        b.0.insert(
            "reference-f32".into(),
            Budget {
                tau: 0.0009765625,
                date: "2025-01-01".into(),
                suite: "core".into(),
                positions: 10,
                pairs: 280,
                max_error: 1.25e-4,
                quantile_999: 1e-4,
                safety_factor: 2.0,
            },
        );
        b.save(&path).unwrap();
        assert_eq!(Budgets::load(&path).unwrap(), b);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A τ that would silently pass every fork (NaN, infinite, huge) or is negative is refused
    /// on load, naming the engine's table; τ = 0 loads.
    #[test]
    fn unusable_tau_is_refused_on_load() {
        let dir = std::env::temp_dir().join(format!("budgets-tau-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("budgets.toml");
        let table = |tau: &str| {
            format!("[reference-f32]\ntau = {tau}\ndate = \"2026-01-02\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n")
        };
        for bad in ["nan", "-1.0", "inf", "1e300"] {
            std::fs::write(&path, table(bad)).unwrap();
            let e = Budgets::load(&path).unwrap_err().to_string();
            assert!(e.contains("[reference-f32] tau"), "{bad}: {e}");
        }
        std::fs::write(&path, table("0.0")).unwrap();
        assert_eq!(Budgets::load(&path).unwrap().0["reference-f32"].tau, 0.0);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A key that is not a budget field is refused naming the table and the key (it was
    /// dropped silently: a misspelt `tau` loaded as if absent only because `tau` is required,
    /// any other misspelling not at all); a missing key names the table too.
    #[test]
    fn unknown_or_missing_budget_keys_are_refused() {
        let dir = std::env::temp_dir().join(format!("budgets-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("budgets.toml");
        let full = "[cuda]\ntau = 0.5\ndate = \"2026-01-02\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n";
        std::fs::write(&path, format!("{full}safety_factr = 3.0\n")).unwrap();
        let e = Budgets::load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: bad budgets TOML: [cuda] unknown field `safety_factr`, expected one of `tau`",
                path.display()
            )),
            "{e}"
        );
        std::fs::write(&path, full.replace("pairs = 1\n", "")).unwrap();
        let e = Budgets::load(&path).unwrap_err().to_string();
        assert!(
            e.ends_with("bad budgets TOML: [cuda] missing field `pairs`"),
            "{e}"
        );
        std::fs::write(&path, full).unwrap();
        assert_eq!(Budgets::load(&path).unwrap().0["cuda"].tau, 0.5);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A table named after no engine (a misspelt `[reference-f23]`, a wrong case) is refused
    /// naming it (the run fell back to the suite's default τ without a word); saving under such
    /// a name is refused too; every `budgets.toml` committed under `goldens/` loads.
    #[test]
    fn tables_named_after_no_engine_are_refused() {
        let dir = std::env::temp_dir().join(format!("budgets-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("budgets.toml");
        let body = "tau = 0.5\ndate = \"2026-01-02\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n";
        for name in ["reference-f23", "CUDA", "llama_server", "http:x"] {
            std::fs::write(&path, format!("[cuda]\n{body}[\"{name}\"]\n{body}")).unwrap();
            let e = Budgets::load(&path).unwrap_err();
            assert!(matches!(e, BudgetError::UnknownEngine { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: bad budgets TOML: [{name}] is not an engine name (known: reference-f32, \
                     reference-f64, cuda, cuda-fast, llama-server, openai): its τ would never be used",
                    path.display()
                )
            );
        }
        for name in ENGINE_NAMES {
            std::fs::write(&path, format!("[\"{name}\"]\n{body}")).unwrap();
            assert_eq!(Budgets::load(&path).unwrap().0[name].tau, 0.5, "{name}");
        }
        let b = Budgets::load(&path).unwrap().0["openai"].clone();
        let e = Budgets::save_engine(&path, "reference_f32", &b).unwrap_err();
        assert!(
            e.to_string()
                .contains("[reference_f32] is not an engine name"),
            "{e}"
        );
        let goldens = Path::new(env!("CARGO_MANIFEST_DIR")).join("../goldens");
        let mut n = 0;
        for d in std::fs::read_dir(&goldens).unwrap() {
            let f = d.unwrap().path().join("budgets.toml");
            if f.exists() {
                Budgets::load(&f).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 6, "{n} budgets.toml under {}", goldens.display());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Calibrating one engine rewrites only its table: the other engine's table, the comments
    /// and the number spellings (`3.691e-5`) stay byte for byte; the new values read back; a new
    /// engine is appended; a missing file is created.
    #[test]
    fn save_engine_touches_only_its_table() {
        let dir = std::env::temp_dir().join(format!("budgets-edit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("budgets.toml");
        let cuda = "# CUDA engine, calibrated on the H200.\n[cuda]\ntau = 0.0001220703125\ndate = \"2026-11-30\"\nsuite = \"smoke+core\"\npositions = 2730\npairs = 76440\nmax_error = 3.691e-5\nquantile_999 = 1.498e-5\nsafety_factor = 2.0\n";
        let f32 = "# header\n[reference-f32]\ntau = 0.001953125\ndate = \"2026-11-30\"\nsuite = \"smoke\"\npositions = 1\npairs = 2\nmax_error = 6e-4\nquantile_999 = 2e-4\nsafety_factor = 2.0\n\n";
        std::fs::write(&path, format!("{f32}{cuda}")).unwrap();
        let nb = Budget {
            tau: 0.00390625,
            date: "2026-12-04".into(),
            suite: "smoke+core".into(),
            positions: 2730,
            pairs: 76440,
            max_error: 0.0015,
            quantile_999: 0.0005,
            safety_factor: 2.0,
        };
        Budgets::save_engine(&path, "reference-f32", &nb).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# header\n[reference-f32]\n"), "{text}");
        assert!(text.ends_with(cuda), "{text}");
        let back = Budgets::load(&path).unwrap();
        assert_eq!(back.0["reference-f32"], nb);
        assert_eq!(back.0["cuda"].max_error, 3.691e-5);
        Budgets::save_engine(&path, "reference-f64", &nb).unwrap();
        let text2 = std::fs::read_to_string(&path).unwrap();
        assert!(text2.starts_with(&text), "{text2}");
        assert_eq!(Budgets::load(&path).unwrap().0.len(), 3);
        let fresh = dir.join("new/budgets.toml");
        Budgets::save_engine(&fresh, "cuda", &nb).unwrap();
        assert_eq!(Budgets::load(&fresh).unwrap().0["cuda"], nb);
        // a same-line comment on a replaced value stays; an inline table is edited in place
        std::fs::write(
            &path,
            format!(
                "{}tau = 1.0 # kept\n",
                f32.replace("tau = 0.001953125\n", "")
            ),
        )
        .unwrap();
        Budgets::save_engine(&path, "reference-f32", &nb).unwrap();
        let text3 = std::fs::read_to_string(&path).unwrap();
        assert!(text3.contains("tau = 0.00390625 # kept"), "{text3}");
        std::fs::write(&path, "cuda = { tau = 1.0, date = \"x\" }\n").unwrap();
        Budgets::save_engine(&path, "cuda", &nb).unwrap();
        assert_eq!(Budgets::load(&path).unwrap().0["cuda"], nb);
        std::fs::write(&path, "cuda = 1\n").unwrap();
        let e = Budgets::save_engine(&path, "cuda", &nb).unwrap_err();
        assert!(e.to_string().contains("'cuda' is not a table"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A budget table: every key, with `tau` as given.
    fn table(engine: &str, tau: &str) -> String {
        format!(
            "[{engine}]\ntau = {tau}\ndate = \"2026-11-30\"\nsuite = \"smoke\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n"
        )
    }

    /// A fresh folder under the temp dir for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("budgets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A key of the wrong type is named with its table (`[reference-f32] positions: …`), on one
    /// line; a key before any table header is called that (it read as `[tau] is not an engine
    /// name`); `[[engine]]` is called an array of tables (it read as `invalid type: map,
    /// expected f64`); malformed TOML gives its line and column on one line.
    #[test]
    fn mistyped_and_misplaced_keys_are_named() {
        let dir = scratch("typed");
        let path = dir.join("budgets.toml");
        let ok = table("reference-f32", "0.5");
        let cases = [
            (
                ok.replace("positions = 1", "positions = -1"),
                "[reference-f32] positions: invalid value: integer `-1`, expected usize",
            ),
            (
                ok.replace("tau = 0.5", "tau = \"0.5\""),
                "[reference-f32] tau: invalid type: string \"0.5\", expected f64",
            ),
            (
                ok.replace("date = \"2026-11-30\"", "date = 20261130"),
                "[reference-f32] date: invalid type: integer `20261130`, expected a string",
            ),
            (
                format!("tau = 0.5\n{ok}"),
                "`tau = …` is a key outside any table (budgets.toml holds one table per engine, \
                 e.g. [reference-f32] with tau = …; move it under its engine's header)",
            ),
            (
                ok.replace("[reference-f32]", "[[reference-f32]]"),
                "[[reference-f32]] is an array of tables; an engine has one budget: write \
                 [reference-f32] (single brackets), once",
            ),
            (
                format!("{ok}tau = 0.25\n"),
                "line 10 column 1: duplicate key",
            ),
        ];
        for (text, want) in cases {
            std::fs::write(&path, &text).unwrap();
            let e = Budgets::load(&path).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("{}: bad budgets TOML: {want}", path.display()),
                "{text}"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Values of the right type that no calibration writes are refused on load, naming table
    /// and key: a negative or NaN error or quantile, a safety factor <= 0 or infinite, a date
    /// that is not `YYYY-MM-DD` (or no such day).
    #[test]
    fn unusable_budget_values_are_refused() {
        let dir = scratch("values");
        let path = dir.join("budgets.toml");
        let ok = table("cuda", "0.5");
        for (from, to, want) in [
            (
                "max_error = 0.0",
                "max_error = -5.0",
                "[cuda] max_error = -5 (must be a finite error >= 0 logits)",
            ),
            (
                "quantile_999 = 0.0",
                "quantile_999 = nan",
                "[cuda] quantile_999 = NaN (must be a finite error >= 0 logits)",
            ),
            (
                "safety_factor = 2.0",
                "safety_factor = -3.0",
                "[cuda] safety_factor = -3 (must be finite and > 0)",
            ),
            (
                "safety_factor = 2.0",
                "safety_factor = inf",
                "[cuda] safety_factor = inf (must be finite and > 0)",
            ),
            (
                "date = \"2026-11-30\"",
                "date = \"not a date\"",
                "[cuda] date = \"not a date\" (must be a date YYYY-MM-DD)",
            ),
            (
                "date = \"2026-11-30\"",
                "date = \"2026-02-29\"",
                "[cuda] date = \"2026-02-29\" (must be a date YYYY-MM-DD)",
            ),
            (
                "tau = 0.5",
                "tau = -1.0",
                "[cuda] tau = -1 (must be in [0, 1000] logits)",
            ),
        ] {
            std::fs::write(&path, ok.replace(from, to)).unwrap();
            let e = Budgets::load(&path).unwrap_err();
            assert!(matches!(e, BudgetError::BadValue { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!("{}: bad budgets TOML: {want}", path.display())
            );
        }
        for date in ["2024-02-29", "2026-12-31", "2000-01-01"] {
            assert!(is_calendar_date(date), "{date}");
        }
        for date in [
            "2026-13-01",
            "2026-00-10",
            "2026-1-01",
            "2026-01-32",
            "+026-01-01",
        ] {
            assert!(!is_calendar_date(date), "{date}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `save_engine` (calibrate) does not write into a file that `load` (conformance) would
    /// refuse: a misspelt engine table elsewhere, an unknown key in the engine's own table or
    /// in another, a key outside any table; the error names the problem and the file is left
    /// byte for byte; `check_save` says the same without a budget. A problem the write itself
    /// repairs (the engine's own table missing a key) is no obstacle.
    #[test]
    fn save_engine_refuses_a_file_load_would_refuse() {
        let dir = scratch("refuse");
        let path = dir.join("budgets.toml");
        let good = Budget {
            tau: 0.25,
            date: "2026-12-04".into(),
            suite: "smoke".into(),
            positions: 3,
            pairs: 84,
            max_error: 0.1,
            quantile_999: 0.05,
            safety_factor: 2.0,
        };
        let f32 = table("reference-f32", "0.5");
        for (text, want) in [
            (
                format!("{f32}[reference-f23]\ntau = 0.5\n"),
                "[reference-f23] is not an engine name",
            ),
            (
                format!("{f32}note = \"hand-tuned\"\n"),
                "[reference-f32] unknown field `note`",
            ),
            (
                format!(
                    "{}{f32}",
                    table("cuda", "0.5").replace("pairs", "note = 1\npairs")
                ),
                "[cuda] unknown field `note`",
            ),
            (
                format!("tau = 0.5\n{f32}"),
                "`tau = …` is a key outside any table",
            ),
        ] {
            std::fs::write(&path, &text).unwrap();
            for e in [
                Budgets::save_engine(&path, "reference-f32", &good).unwrap_err(),
                Budgets::check_save(&path, "reference-f32").unwrap_err(),
            ] {
                assert!(matches!(e, BudgetError::NotWritten { .. }), "{e:?}");
                let e = e.to_string();
                assert!(
                    e.starts_with(&format!("{}: bad budgets TOML: {want}", path.display()))
                        && e.ends_with(
                            "; [reference-f32] not written (conformance would refuse the file: \
                             fix it first)"
                        ),
                    "{e}"
                );
            }
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
        // the engine's own table lacking keys is completed by the write
        std::fs::write(&path, "[reference-f32]\ntau = 1.0\n").unwrap();
        Budgets::check_save(&path, "reference-f32").unwrap();
        Budgets::save_engine(&path, "reference-f32", &good).unwrap();
        assert_eq!(Budgets::load(&path).unwrap().0["reference-f32"], good);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod show_number_tests {
    use super::{show_number, tau_problem};

    /// Ordinary values print as before; a huge one in scientific notation, not in full.
    #[test]
    fn huge_numbers_are_short() {
        assert_eq!(show_number(0.000122), "0.000122");
        assert_eq!(show_number(-1.0), "-1");
        assert_eq!(show_number(999_999.0), "999999");
        assert_eq!(show_number(1e300), "1e300");
        assert_eq!(show_number(-2.5e7), "-2.5e7");
        assert_eq!(show_number(f64::INFINITY), "inf");
        assert_eq!(
            tau_problem(1e300).unwrap(),
            "1e300 (must be in [0, 1000] logits)"
        );
    }
}
