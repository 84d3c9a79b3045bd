//! The reader tracepoint (`srap_reader`, `srap_common::reader`) as the
//! agent holds it: attached from the loaded object, its layout written
//! from the kernel's BTF first, and the followed connections' rows added,
//! read and removed by MPTCP token.
//!
//! Not pinned: the counts serve only a running agent. When it stops the
//! program goes with it and every connection keeps the subflows and flags
//! it has; a restarted agent attaches its own.

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, MapError},
    programs::{ProgramError, RawTracePoint, links::FdLink},
};
use srap_common::reader::{
    READER_LAYOUT_MAP, READER_PROGRAM, READER_TRACEPOINT, READS_MAP, ReadCounts, ReaderLayout,
};
use srap_host::HostError;

/// Why the reads cannot be followed.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    #[error("the kernel's BTF: {0}")]
    Btf(#[source] HostError),
    #[error("the kernel's BTF shows no field `{0}` (MPTCP not built in?)")]
    Layout(&'static str),
    #[error("the eBPF object has no {0}")]
    Missing(&'static str),
    #[error("the map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: MapError,
    },
    #[error(
        "this kernel has no tracepoint sock:{READER_TRACEPOINT} (Linux 6.3 and later have it): \
         connections keep the subflow their connect chose: {0}"
    )]
    NoTracepoint(#[source] ProgramError),
    #[error("the kernel refused {READER_PROGRAM}: {0}")]
    Program(#[source] ProgramError),
}

/// The attached tracepoint and its connections' rows.
pub struct Reads {
    counts: HashMap<MapData, u32, ReadCounts>,
    _link: FdLink,
}

impl Reads {
    /// Writes the layout, loads and attaches the program of `ebpf` (the
    /// agent's object, loaded): from then on the connections followed are
    /// counted.
    pub fn attach(ebpf: &mut Ebpf) -> Result<Self, ReaderError> {
        write_layout(ebpf)?;
        let program: &mut RawTracePoint = ebpf
            .program_mut(READER_PROGRAM)
            .ok_or(ReaderError::Missing(READER_PROGRAM))?
            .try_into()
            .map_err(ReaderError::Program)?;
        program.load().map_err(ReaderError::Program)?;
        let id = program
            .attach(READER_TRACEPOINT)
            .map_err(ReaderError::NoTracepoint)?;
        let link = program.take_link(id).map_err(ReaderError::Program)?.into();
        let map = ebpf
            .take_map(READS_MAP)
            .ok_or(ReaderError::Missing(READS_MAP))?;
        let counts = HashMap::try_from(map).map_err(|source| ReaderError::Map {
            name: READS_MAP,
            source,
        })?;
        Ok(Self {
            counts,
            _link: link,
        })
    }

    /// Starts counting the reads of connection `token` (from zero).
    pub fn follow(&mut self, token: u32) -> Result<(), ReaderError> {
        self.counts
            .insert(token, ReadCounts::default(), 0)
            .map_err(|source| ReaderError::Map {
                name: READS_MAP,
                source,
            })
    }

    /// Stops counting `token`; nothing when it was not followed.
    pub fn forget(&mut self, token: u32) {
        let _ = self.counts.remove(&token);
    }

    /// The reads of `token` so far; `None` when it is not followed.
    pub fn counts(&self, token: u32) -> Option<ReadCounts> {
        self.counts.get(&token, 0).ok()
    }
}

/// Where `sock.sk_protocol` and `mptcp_sock.token` lie in the running
/// kernel, written to the object's row before the program is attached.
fn write_layout(ebpf: &mut Ebpf) -> Result<(), ReaderError> {
    let row = ReaderLayout {
        known: 1,
        sk_protocol: offset("sock.sk_protocol", "sock", "sk_protocol")?,
        msk_token: offset("mptcp_sock.token", "mptcp_sock", "token")?,
        reserved: 0,
    };
    let map = ebpf
        .map_mut(READER_LAYOUT_MAP)
        .ok_or(ReaderError::Missing(READER_LAYOUT_MAP))?;
    let map_error = |source| ReaderError::Map {
        name: READER_LAYOUT_MAP,
        source,
    };
    let mut array: Array<_, ReaderLayout> = Array::try_from(map).map_err(map_error)?;
    array.set(0, row, 0).map_err(map_error)
}

fn offset(name: &'static str, strukt: &str, member: &str) -> Result<u32, ReaderError> {
    srap_host::btf::running_member_offset(strukt, member)
        .map_err(ReaderError::Btf)?
        .ok_or(ReaderError::Layout(name))
}
