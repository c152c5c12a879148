//! Tie budgets per (engine, model) (`design/conformance.md` §6, §9):
//! `goldens/<model>/budgets.toml`, one table per engine with `tau` and the calibration run it
//! came from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One engine's budget and its calibration provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Malformed TOML.
    #[error("{path}: bad budgets TOML: {message}")]
    Toml {
        /// File.
        path: PathBuf,
        /// Parser message.
        message: String,
    },
}

/// `goldens/<model>/budgets.toml`: engine name → budget.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Budgets(pub BTreeMap<String, Budget>);

impl Budgets {
    /// Reads the file; a missing file is an empty table.
    pub fn load(path: &Path) -> Result<Budgets, BudgetError> {
        if !path.exists() {
            return Ok(Budgets::default());
        }
        let text = std::fs::read_to_string(path).map_err(|source| BudgetError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| BudgetError::Toml {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Writes the file (creating its folder).
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
}
