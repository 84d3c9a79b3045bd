//! Step 1: what the kernel hands a connect or bind hook, read field by
//! field (the kernel's verifier refuses an address derived from another
//! field's).

use core::ptr::read_volatile;

use aya_ebpf::{bindings::bpf_sock, helpers::bpf_get_socket_cookie, programs::SockAddrContext};
use srap_common::family::Family;

pub(super) const SOCK_STREAM: u32 = 1;

/// Word 2 of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), as the kernel's
/// `user_ip6` holds it (network byte order).
pub(super) const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

/// Reads one context field (volatile keeps the compiler from deriving one
/// field's address from another's, which the kernel's verifier refuses for
/// context pointers).
#[inline(always)]
pub(super) fn field(ptr: *const u32) -> u32 {
    // SAFETY: callers pass addresses of fields of a kernel context.
    unsafe { read_volatile(ptr) }
}

/// The socket of a sock_addr context.
#[inline(always)]
pub(super) fn sock_of(ctx: &SockAddrContext) -> *mut bpf_sock {
    // SAFETY: `sk` of a sock_addr context is the kernel's socket, never null.
    unsafe { read_volatile(&raw const (*ctx.sock_addr).__bindgen_anon_1.sk) }
}

/// The socket's cookie: its key in `SRAP_SOCKETS`.
#[inline(always)]
pub(super) fn cookie_of(ctx: &SockAddrContext) -> u64 {
    // SAFETY: the context pointer is the kernel's.
    unsafe { bpf_get_socket_cookie(ctx.sock_addr.cast()) }
}

/// The socket's bound source address (zero: none) and port, in the key's
/// form: a v4-mapped source of a dual-stack socket toward an IPv4 receiver
/// becomes its IPv4 address.
#[inline(always)]
pub(super) fn bound_source(ctx: &SockAddrContext, family: Family, mapped: bool) -> ([u32; 4], u32) {
    let sk = sock_of(ctx);
    // SAFETY: field addresses within the kernel's bpf_sock.
    unsafe {
        let port = field(&raw const (*sk).src_port);
        if family == Family::Inet {
            return ([field(&raw const (*sk).src_ip4), 0, 0, 0], port);
        }
        let words = [
            field(&raw const (*sk).src_ip6[0]),
            field(&raw const (*sk).src_ip6[1]),
            field(&raw const (*sk).src_ip6[2]),
            field(&raw const (*sk).src_ip6[3]),
        ];
        if mapped {
            // `::ffff:a.b.c.d` or `::` (unbound): its IPv4 word, or zero.
            ([words[3], 0, 0, 0], port)
        } else {
            (words, port)
        }
    }
}

/// Where a steered connect goes: the receiver's address (the IPv4 one of a
/// v4-mapped destination), its port, and the family its tuple is looked up
/// in.
#[derive(Clone, Copy)]
pub(super) struct Peer {
    pub addr: [u32; 4],
    pub port: u16,
    pub v4: bool,
}
