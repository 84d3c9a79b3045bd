//! What a program passes to `bpf_bind()` and the error it answers when the
//! port is taken: shared by the binder and the benchmarks' bare connect
//! hook, which live in different objects.

use srap_common::family::Family;

/// `bpf_bind()`'s answer (negated) when the address and port are in use.
pub(crate) const EADDRINUSE: i64 = 98;

/// A `sockaddr_in` for `bpf_bind()`.
#[repr(C)]
pub(crate) struct SockaddrIn {
    family: u16,
    port_be: u16,
    addr: u32,
    zero: [u8; 8],
}

impl SockaddrIn {
    /// `addr` as the kernel stores it (network byte order), `port` in the
    /// host's.
    pub(crate) const fn new(addr: u32, port: u16) -> Self {
        Self {
            family: Family::Inet.as_u16(),
            port_be: port.to_be(),
            addr,
            zero: [0; 8],
        }
    }
}
