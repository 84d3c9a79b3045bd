//! Read the connect: what the kernel hands a connect or bind hook, read field by
//! field (the kernel's verifier refuses an address derived from another
//! field's).

use core::ptr::read_volatile;

use aya_ebpf::{
    bindings::bpf_sock,
    helpers::{bpf_get_socket_cookie, generated::bpf_skc_to_mptcp_sock},
    programs::SockAddrContext,
};
use srap_common::family::Family;

/// What a connect hands the hook, in the form the plan's keys take: the
/// socket's type and protocol, where it connects to and what it is bound
/// to.
pub(super) struct Connecting {
    /// `bpf_sock_addr.type` and `.protocol`, for
    /// `srap_common::binder::steered_protocol`.
    pub sock_type: u32,
    pub protocol: u32,
    pub peer: Peer,
    /// The bound source address (zero: none), in the key's form.
    pub src: [u32; 4],
    /// The bound source port (zero: none).
    pub sport: u32,
}

impl Connecting {
    /// Whether the application bound a source address.
    #[inline(always)]
    pub fn bound_addr(&self) -> bool {
        self.src != [0; 4]
    }
}

/// Reads a connect's context. Inlined, so its fields stay in registers:
/// returned through the stack, the kernel's verifier would lose track of
/// their values and walk `connect6` past its limit.
#[inline(always)]
pub(super) fn connecting(ctx: &SockAddrContext, family: Family) -> Connecting {
    let sa = ctx.sock_addr;
    // SAFETY: the kernel passes a valid bpf_sock_addr.
    let (sock_type, protocol, user_port) = unsafe {
        (
            field(&raw const (*sa).type_),
            field(&raw const (*sa).protocol),
            field(&raw const (*sa).user_port),
        )
    };
    // user_port holds the port in network byte order in its low 16 bits.
    let port = u16::from_be(user_port as u16);
    // SAFETY: as above.
    let addr = unsafe {
        if family == Family::Inet {
            [field(&raw const (*sa).user_ip4), 0, 0, 0]
        } else {
            [
                field(&raw const (*sa).user_ip6[0]),
                field(&raw const (*sa).user_ip6[1]),
                field(&raw const (*sa).user_ip6[2]),
                field(&raw const (*sa).user_ip6[3]),
            ]
        }
    };
    // A dual-stack AF_INET6 socket connecting to an IPv4 receiver (the JDK's
    // default): steer it with the receiver's IPv4 plan, bind `::ffff:src`.
    let mapped =
        family == Family::Inet6 && addr[0] == 0 && addr[1] == 0 && addr[2] == V4_MAPPED_WORD;
    let (src, sport) = bound_source(ctx, family, mapped);
    let peer = if mapped {
        Peer {
            addr: [addr[3], 0, 0, 0],
            port,
            v4: true,
        }
    } else {
        Peer {
            addr,
            port,
            v4: family == Family::Inet,
        }
    };
    Connecting {
        sock_type,
        protocol,
        peer,
        src,
        sport,
    }
}

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

/// Whether the context's socket is an MPTCP subflow of a connection
/// (`bpf_skc_to_mptcp_sock` finds its MPTCP socket): the first one at its
/// connect, a further one at its bind.
#[inline(always)]
pub(super) fn is_subflow(ctx: &SockAddrContext) -> bool {
    // SAFETY: the context's socket; the helper checks what it is.
    !unsafe { bpf_skc_to_mptcp_sock(sock_of(ctx).cast()) }.is_null()
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
fn bound_source(ctx: &SockAddrContext, family: Family, mapped: bool) -> ([u32; 4], u32) {
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
