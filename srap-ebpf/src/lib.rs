//! Empty on purpose: the programs live in the `srap` binary (`src/main.rs`),
//! which only builds for `bpfel-unknown-none`. The library target exists so
//! `srap-agent` can name this crate as a build-dependency and cargo rebuilds
//! the eBPF object when it changes.
#![no_std]
