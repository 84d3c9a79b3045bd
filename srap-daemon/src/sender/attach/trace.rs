//! The tracing programs on the kernel's `__mptcp_subflow_connect`: where
//! the path manager sends each further MPTCP subflow, for the bind hooks
//! (the eBPF side: `srap-ebpf`'s `binder::path_manager`).
//!
//! Optional: without them the bind hooks read a subflow's destination
//! from its MPTCP socket, as the in-kernel path manager chooses it (the
//! connection's remote address, or the address the peer announced last),
//! at the offsets [`write_mptcp_layout`] finds in the kernel's BTF. Each
//! way they can be missing is a named [`Untraced`] reason, logged once by
//! the caller and counted by the bind hooks (`subflow_untraced`); none
//! stops the agent or fails a connect. Attached, they are pinned under the
//! binder's directory as its cgroup programs are, and a restarted agent
//! adopts them.

use std::path::PathBuf;

use aya::{
    Btf, Ebpf,
    maps::Array,
    programs::{FEntry, FExit, ProgramError, links::FdLink},
};
use srap_common::binder::{
    MPTCP_LAYOUT_MAP, MptcpLayout, SUBFLOW_CONNECT_FUNCTION, SUBFLOW_CONNECT_PROGRAM,
};
use tracing::debug;

use super::{note_verifier_walk, remove_if_present};
use crate::sender::{
    error::SenderError,
    layout::{PinLayout, TRACE_PROGRAMS},
};

/// How the tracing programs came to be.
#[derive(Debug)]
pub enum Tracing {
    /// This agent attached and pinned them.
    Attached,
    /// A previous agent's pinned links: kept as they are.
    Adopted,
    /// Not attached, for this reason: the bind hooks fall back.
    Off(Untraced),
}

/// Why the path manager's calls are not traced.
#[derive(Debug, thiserror::Error)]
pub enum Untraced {
    #[error("the kernel's BTF is unreadable: {0}")]
    Btf(String),
    #[error("the kernel's BTF shows no field `{0}` (MPTCP not built in?)")]
    Layout(&'static str),
    #[error(
        "the kernel refused {program} on `{SUBFLOW_CONNECT_FUNCTION}` (not traceable here?): {source}"
    )]
    Program {
        program: &'static str,
        source: ProgramError,
    },
    #[error("pinning {}: {source}", path.display())]
    Pin {
        path: PathBuf,
        source: aya::pin::PinError,
    },
    #[error("{0} is missing from the eBPF object or not of its type")]
    Missing(&'static str),
    #[error("writing {MPTCP_LAYOUT_MAP}: {0}")]
    Map(aya::maps::MapError),
}

/// Adopts the tracing programs' pinned links, or loads, attaches and pins
/// them; on any failure removes what this call pinned and says why.
/// `fields`: what [`write_mptcp_layout`] came to (the entry's program
/// reads the subflow's address at the offsets it wrote).
pub fn ensure_traced(
    ebpf: &mut Ebpf,
    layout: &PinLayout,
    fields: Result<(), Untraced>,
) -> Result<Tracing, SenderError> {
    if TRACE_PROGRAMS.iter().all(|p| layout.link(p).exists()) {
        return Ok(Tracing::Adopted);
    }
    // One without the other: redone as a pair.
    remove_trace_pins(layout)?;
    match fields.and_then(|()| attach(ebpf, layout)) {
        Ok(()) => Ok(Tracing::Attached),
        Err(reason) => {
            remove_trace_pins(layout)?;
            Ok(Tracing::Off(reason))
        }
    }
}

/// Removes the tracing programs' pins (`--mptcp off` uses none of them).
pub fn remove(layout: &PinLayout) -> Result<(), SenderError> {
    remove_trace_pins(layout)
}

fn remove_trace_pins(layout: &PinLayout) -> Result<(), SenderError> {
    for name in TRACE_PROGRAMS {
        remove_if_present(&layout.link(name))?;
        remove_if_present(&layout.program(name))?;
    }
    Ok(())
}

/// Writes where the kernel's MPTCP fields lie, from its BTF, to the
/// loaded object's row, before any of its programs is attached: the
/// tracing program reads the subflow's address there, and the bind hooks
/// their fallback's fields. Unwritten (an error), the row says so and
/// both read nothing but the fixed-layout IPv4 remote address.
pub fn write_mptcp_layout(ebpf: &mut Ebpf) -> Result<(), Untraced> {
    let row = mptcp_layout()?;
    let map = ebpf
        .map_mut(MPTCP_LAYOUT_MAP)
        .ok_or(Untraced::Missing(MPTCP_LAYOUT_MAP))?;
    let mut array: Array<_, MptcpLayout> = Array::try_from(map).map_err(Untraced::Map)?;
    array.set(0, row, 0).map_err(Untraced::Map)?;
    debug!(?row, "MPTCP's fields in this kernel");
    Ok(())
}

/// Each program in [`TRACE_PROGRAMS`] order.
fn attach(ebpf: &mut Ebpf, layout: &PinLayout) -> Result<(), Untraced> {
    let btf = Btf::from_sys_fs().map_err(|err| Untraced::Btf(err.to_string()))?;
    for name in TRACE_PROGRAMS {
        let link = link_of(ebpf, name, &btf)?;
        let path = layout.link(name);
        let pinned = link.pin(&path).map_err(|source| Untraced::Pin {
            path: path.clone(),
            source,
        })?;
        drop(pinned);
        let program = ebpf.program_mut(name).ok_or(Untraced::Missing(name))?;
        let path = layout.program(name);
        program
            .pin(&path)
            .map_err(|source| Untraced::Pin { path, source })?;
    }
    Ok(())
}

/// Loads program `name` on the traced function and attaches it; its link.
fn link_of(ebpf: &mut Ebpf, name: &'static str, btf: &Btf) -> Result<FdLink, Untraced> {
    let program = ebpf.program_mut(name).ok_or(Untraced::Missing(name))?;
    if name == SUBFLOW_CONNECT_PROGRAM {
        traced_link!(program, FEntry, name, btf)
    } else {
        traced_link!(program, FExit, name, btf)
    }
}

/// `link_of`'s steps for one tracing program type (`FEntry`, `FExit`:
/// the same methods, no shared trait).
macro_rules! traced_link {
    ($program:expr, $kind:ty, $name:expr, $btf:expr) => {{
        let refused = |source| Untraced::Program {
            program: $name,
            source,
        };
        let program: &mut $kind = $program.try_into().map_err(refused)?;
        let started = std::time::Instant::now();
        program
            .load(SUBFLOW_CONNECT_FUNCTION, $btf)
            .map_err(refused)?;
        if let Ok(info) = program.info() {
            let load_ms = started.elapsed().as_millis() as u64;
            note_verifier_walk($name, info.verified_instruction_count(), load_ms);
        }
        let id = program.attach().map_err(refused)?;
        Ok(program.take_link(id).map_err(refused)?.into())
    }};
}
use traced_link;

/// Where the MPTCP fields the programs read lie in the running kernel,
/// from its BTF. The address of `struct mptcp_addr_info` is its one
/// unnamed member, the union of `addr` and `addr6`, which both start it.
fn mptcp_layout() -> Result<MptcpLayout, Untraced> {
    let offset = |name: &'static str, strukt: &str, member: &str| {
        match srap_host::btf::running_member_offset(strukt, member) {
            Ok(Some(offset)) => Ok(offset),
            Ok(None) => Err(Untraced::Layout(name)),
            Err(err) => Err(Untraced::Btf(err.to_string())),
        }
    };
    let info = "mptcp_addr_info";
    Ok(MptcpLayout {
        known: 1,
        family: offset("mptcp_addr_info.family", info, "family")?,
        port: offset("mptcp_addr_info.port", info, "port")?,
        addr: offset("mptcp_addr_info.addr", info, "")?,
        v6_daddr: offset("sock_common.skc_v6_daddr", "sock_common", "skc_v6_daddr")?,
        pm_remote: offset("mptcp_sock.pm", "mptcp_sock", "pm")?
            + offset("mptcp_pm_data.remote", "mptcp_pm_data", "remote")?,
    })
}
