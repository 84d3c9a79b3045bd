//! What the reader tracepoint (`srap-ebpf`'s `reader`) shares with the
//! agent: which node's CPUs read each followed MPTCP connection, counted
//! where the reads happen.
//!
//! The kernel's `sock:sock_recv_length` tracepoint fires in
//! `sock_recvmsg`, on the reading thread, with the socket read (for an
//! MPTCP connection its MPTCP socket, never a subflow), the bytes read and
//! the flags. The program counts a read's bytes under the node of the CPU
//! it ran on, for the connections the agent follows: a connection is
//! followed while [`READS_MAP`] has a row under its token, which the agent
//! adds when the path manager reports it and removes at its close. The
//! agent turns the counts into the node that reads the connection now.
//!
//! It must NOT hold the policy (how many bytes make a move): that is the
//! agent's.

/// The raw tracepoint program, and the tracepoint it is attached to (a
/// raw tracepoint needs no tracefs).
pub const READER_PROGRAM: &str = "srap_reader";
pub const READER_TRACEPOINT: &str = "sock_recv_length";
/// The followed connections' reads: MPTCP token → [`ReadCounts`].
pub const READS_MAP: &str = "SRAP_READS";
/// Where the program finds a socket's protocol and an MPTCP socket's
/// token in this kernel ([`ReaderLayout`], one row, written before the
/// program is attached).
pub const READER_LAYOUT_MAP: &str = "SRAP_READER_LAYOUT";
/// Nodes counted apart; a read on a higher node counts in
/// [`ReadCounts::beyond`].
pub const READER_NODES: usize = 8;
/// Connections followed at once.
pub const MAX_FOLLOWED: u32 = 8192;
/// `IPPROTO_MPTCP`: an MPTCP socket's `sk_protocol`.
pub const IPPROTO_MPTCP: u16 = 262;
/// `MSG_PEEK`: a read that leaves the data queued moves nothing.
pub const MSG_PEEK: i32 = 2;

/// Byte offsets, from the kernel's BTF, of `sock.sk_protocol` (a u16) and
/// `mptcp_sock.token` (a u32); `known` is non-zero once both are written.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderLayout {
    pub known: u32,
    pub sk_protocol: u32,
    pub msk_token: u32,
    pub reserved: u32,
}

/// One followed connection's reads since the agent added its row.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCounts {
    /// Bytes read on each node's CPUs.
    pub bytes: [u64; READER_NODES],
    /// Bytes read on nodes from [`READER_NODES`] up.
    pub beyond: u64,
    /// Reads counted.
    pub reads: u64,
    /// The CPU and node of the last read.
    pub last_cpu: u32,
    pub last_node: u32,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;

    // SAFETY: `#[repr(C)]`, `Copy`, integers only, no implicit padding
    // (4 × 4 bytes; 10 × 8 + 2 × 4 bytes), so every bit pattern is valid.
    unsafe impl aya::Pod for ReaderLayout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for ReadCounts {}
}
