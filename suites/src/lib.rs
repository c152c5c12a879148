//! `suites` — the conformance library: `Engine` trait, modes, tie-budget rule, golden I/O, reports.
