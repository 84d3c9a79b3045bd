//! The SRAP daemon (`srap-agent`'s library): loads SRAP's eBPF object and
//! drives its programs.
//!
//! It must NOT hold the lab (namespaces, QEMU, plots, the test harness:
//! `srap-lab`, which the root daemon never links), command-line parsing
//! (clap structs belong in the binaries; the library takes settings
//! structs, whose enum-valued settings derive their values: [`setting`]), nor the status types and servers (`srap-status`) or plain
//! kernel access `srap` needs too (`srap-host`).
//!
//! The receive observer ([`observer`]) and the sender-side port binder
//! ([`sender`]); the receiver's RSS service ([`receiver`]) and the sender's
//! client of it ([`receiver_client`]; to a receiver, its senders are its
//! `downstream`), speaking [`srap_common::wire`] through
//! [`framed`]; the receiver's account of where flows land ([`tracker`],
//! reported as [`srap_status::Status`]); where a NIC's description comes
//! from ([`description`]: discovered or a file), beneath both the receiver
//! and the sender's own NIC.

pub mod description;
pub mod framed;
pub mod notify;
pub mod observer;
pub mod psk;
pub mod receiver;
pub mod receiver_client;
pub mod sender;
pub mod setting;
pub mod sock_diag;
pub mod tc;
pub mod tracker;

/// The eBPF object (`srap-ebpf`'s `srap` binary) built by this crate's build
/// script, embedded so the agent is one self-contained binary.
pub fn ebpf_object() -> &'static [u8] {
    static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/srap"));
    OBJECT
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use srap_common::{observer, reader, repair};

    use crate::sender::layout::{PROGRAMS, TRACE_PROGRAMS};

    /// The agents' object holds only what an agent loads: the binder's
    /// programs, the observer's, the audit's repair and the path manager's
    /// reader tracepoint. The lab's emulator,
    /// the benchmarks' bare programs and the tests' drift injector are the
    /// lab's object's.
    #[test]
    fn the_agents_object_holds_only_the_agents_programs() {
        let object = aya_obj::Object::parse(super::ebpf_object()).expect("parse the eBPF object");
        let held: BTreeSet<&str> = object.programs.keys().map(String::as_str).collect();
        let loaded: BTreeSet<&str> = PROGRAMS
            .iter()
            .chain(&TRACE_PROGRAMS)
            .copied()
            .chain([
                observer::OBSERVE_XDP_PROGRAM,
                observer::OBSERVE_TC_PROGRAM,
                observer::OBSERVE_SOCK_PROGRAM,
                observer::OBSERVE_LOCAL_PROGRAM,
                repair::REPAIR_PROGRAM,
                reader::READER_PROGRAM,
            ])
            .collect();
        assert_eq!(held, loaded);
    }
}
