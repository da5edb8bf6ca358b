//! Safe Rust verbs API over a pluggable backend.
//!
//! Not yet implemented: this crate will hold the rust-ibverbs-shaped API (device list,
//! context, PD, MR, CQ, QP builders) over a `Backend` trait with the softroce emulator as
//! the default backend and libibverbs hardware behind a cargo feature.
