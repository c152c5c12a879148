//! Tie budgets per (engine, model) (`design/conformance.md` §6, §9):
//! `goldens/<model>/budgets.toml`, one table per engine with `tau` and the calibration run it
//! came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One engine's budget and its calibration provenance. Every key is required and no other key
/// is accepted (a misspelt `tau` would otherwise be dropped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// τ in logits.
    pub tau: f64,
    /// Calibration date (UTC, `YYYY-MM-DD` or Unix seconds as text).
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
    /// Malformed TOML, or a table with a missing, unknown or unusable key (the message names
    /// the table and key).
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
}

/// The engine names a `budgets.toml` table may have: what [`crate::Engine::name`] returns for
/// every engine `cargo xtask conformance --engine` builds (`conformance::make_engine`): the
/// reference engines, the CUDA engine and the HTTP engines (`http::HttpEngine`).
pub const ENGINE_NAMES: [&str; 5] = [
    "reference-f32",
    "reference-f64",
    "cuda",
    "llama-server",
    "openai",
];

/// Largest tie budget τ accepted (logits), in `budgets.toml` and a suite's `tie_budget`: Gemma-4's
/// logits are soft-capped at ±30, so a larger τ would call every fork a tie; it is a typo.
pub const TAU_MAX: f64 = 1e3;

/// `Some(why)` when `tau` is not a usable tie budget: NaN, negative, infinite or above
/// [`TAU_MAX`]. τ = 0 is allowed (no tie-flips at all).
pub fn tau_problem(tau: f64) -> Option<String> {
    (!(0.0..=TAU_MAX).contains(&tau)).then(|| format!("{tau} (must be in [0, {TAU_MAX}] logits)"))
}

/// `goldens/<model>/budgets.toml`: engine name → budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Budgets(pub BTreeMap<String, Budget>);

impl Budgets {
    /// Reads the file; a missing file is an empty table.
    ///
    /// Errors: [`BudgetError`] naming the file and, where it applies, the table and key:
    /// unreadable file, bad TOML, a table named after no engine ([`ENGINE_NAMES`]), a missing,
    /// unknown or mistyped key, an unusable τ ([`tau_problem`]).
    pub fn load(path: &Path) -> Result<Budgets, BudgetError> {
        if !path.exists() {
            return Ok(Budgets::default());
        }
        let text = std::fs::read_to_string(path).map_err(|source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |message: String| BudgetError::Toml {
            path: path.to_path_buf(),
            message,
        };
        let tables: BTreeMap<String, toml::Value> =
            toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let mut b = Budgets::default();
        for (engine, table) in tables {
            check_engine_name(path, &engine)?;
            // one table at a time, so that an error names it
            let budget: Budget = table.try_into().map_err(|e: toml::de::Error| {
                bad(format!("[{engine}] {}", e.message().trim_end()))
            })?;
            if let Some(why) = tau_problem(budget.tau) {
                return Err(bad(format!("[{engine}] tau = {why}")));
            }
            b.0.insert(engine, budget);
        }
        Ok(b)
    }

    /// Sets `engine`'s budget in the file at `path`, leaving every other table, comment and
    /// number in it as it was (`toml_edit`; the engine's own table keeps its comments too), or
    /// writes a new file holding that one table ([`Budgets::save`]). Errors: `engine` not in
    /// [`ENGINE_NAMES`] (the file would not load), unreadable or malformed file, `engine`
    /// present but not a table.
    pub fn save_engine(path: &Path, engine: &str, b: &Budget) -> Result<(), BudgetError> {
        check_engine_name(path, engine)?;
        if !path.exists() {
            let mut one = Budgets::default();
            one.0.insert(engine.to_string(), b.clone());
            return one.save(path);
        }
        let io = |source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bad = |message: String| BudgetError::Toml {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| bad(format!("{e}")))?;
        let t = doc
            .entry(engine)
            .or_insert(toml_edit::table())
            .as_table_like_mut()
            .ok_or_else(|| bad(format!("'{engine}' is not a table")))?;
        // A replaced value keeps its decor (spacing and a same-line comment).
        let mut set =
            |key: &str, v: toml_edit::Value| match t.get_mut(key).and_then(|i| i.as_value_mut()) {
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
        std::fs::write(path, doc.to_string()).map_err(io)
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
        let text = toml::to_string_pretty(self).map_err(|e| BudgetError::Toml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let header = "# Tie budgets per engine for this model (conformance.md §6, §9); written by `cargo xtask calibrate`.\n";
        std::fs::write(path, format!("{header}{text}")).map_err(io)
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

/// Proposes τ from the largest observed error (§6): `max_error · safety`, rounded up to a power
/// of two (`2^⌈log2 x⌉`); a zero error gives the smallest normal power of two used, 2^-40.
pub fn propose_tau(max_error: f64, safety: f64) -> f64 {
    let x = max_error * safety;
    if x.is_nan() || x <= 0.0 || !x.is_finite() {
        return 2f64.powi(-40);
    }
    2f64.powi(x.log2().ceil() as i32).max(2f64.powi(-40))
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
            format!("[reference-f32]\ntau = {tau}\ndate = \"d\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n")
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
        let full = "[cuda]\ntau = 0.5\ndate = \"d\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n";
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
        let body = "tau = 0.5\ndate = \"d\"\nsuite = \"s\"\npositions = 1\npairs = 1\nmax_error = 0.0\nquantile_999 = 0.0\nsafety_factor = 2.0\n";
        for name in ["reference-f23", "CUDA", "llama_server", "http:x"] {
            std::fs::write(&path, format!("[cuda]\n{body}[\"{name}\"]\n{body}")).unwrap();
            let e = Budgets::load(&path).unwrap_err();
            assert!(matches!(e, BudgetError::UnknownEngine { .. }), "{e:?}");
            assert_eq!(
                e.to_string(),
                format!(
                    "{}: bad budgets TOML: [{name}] is not an engine name (known: reference-f32, \
                     reference-f64, cuda, llama-server, openai): its τ would never be used",
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
}
