//! Why the observer could not be loaded, attached or read: its one error
//! type. Only the error: what produces each variant stays with the code
//! that loads, attaches or reads.

use aya::{maps::MapError, programs::ProgramError};

/// Why the observer could not be loaded, attached or read.
#[derive(Debug, thiserror::Error)]
pub enum ObserverError {
    /// The embedded object did not load (no privileges, no BTF, verifier reject…).
    #[error("loading the SRAP eBPF object: {0}")]
    Load(#[from] aya::EbpfError),
    /// The object lacks a program or map this code expects (build mismatch).
    #[error("the SRAP eBPF object has no {0}")]
    Missing(&'static str),
    /// A program could not be loaded into the kernel.
    #[error("loading program {program}: {source}")]
    Program {
        /// Program name.
        program: &'static str,
        /// What the kernel or aya said.
        source: ProgramError,
    },
    /// No hook of the chosen family attached.
    #[error("could not attach the receive observer to {iface}: {attempts}")]
    Attach {
        /// Interface name.
        iface: String,
        /// Every attempt with its error, in order.
        attempts: String,
    },
    /// Reading the flow map failed.
    #[error("reading the observer's flow map: {0}")]
    Map(#[from] MapError),
    /// Reading the connections' counters (sock_diag) failed.
    #[error("reading TCP counters through sock_diag: {0}")]
    Diag(srap_host::netlink::NetlinkError),
}
