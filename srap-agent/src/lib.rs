//! The SRAP agent: loads SRAP's eBPF object and drives its programs.
//!
//! The receive verifier ([`verifier`]) and the sender-side port binder
//! ([`sender`]); the receiver's RSS service ([`receiver`]) and its client
//! ([`peer`]), speaking [`srap_common::wire`] through [`framed`]; what the
//! receiver reports of where flows land ([`status`]).

pub mod bpffs;
pub mod discovery;
pub mod emulator;
pub mod framed;
pub mod lab;
pub mod peer;
pub mod psk;
pub mod receiver;
pub mod sender;
pub mod status;
pub mod verifier;

/// The eBPF object (`srap-ebpf`'s `srap` binary) built by this crate's build
/// script, embedded so the agent is one self-contained binary.
pub fn ebpf_object() -> &'static [u8] {
    static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/srap"));
    OBJECT
}
