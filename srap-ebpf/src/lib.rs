//! Empty on purpose: the programs live in the `srap` binary (`src/main.rs`),
//! which only builds for `bpfel-unknown-none`. The library target exists so
//! `srap-daemon` can name this crate as a build-dependency (its `build.rs`,
//! `srap-daemon/build.rs`, builds the object and `srap_daemon::ebpf_object`
//! embeds it) and cargo rebuilds the eBPF object when it changes.
//!
//! Holds no code a host crate may use: what the programs share with the
//! host (map keys and values, pinned maps' names) lives in `srap-common`.
#![no_std]
