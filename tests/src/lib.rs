//! Shared helpers for softroce's cross-crate tests (the tests themselves live in `tests/tests/`).
