//! The settings the hooks branch on, fixed when the agent loads them
//! (`srap_common::binder::LoadConfig`, in the object's `.rodata`): the
//! kernel's verifier reads each as a constant, so a step the settings turn
//! off is neither walked at load nor run at a connect. Each setting is read
//! where it is used, through its own accessor, one 4- or 8-byte load the
//! verifier can resolve; never the whole struct at once.

use core::ptr::{addr_of, read_volatile};

use srap_common::binder::{BinderSizes, LoadConfig, mptcp};

/// Set by the agent's loader (`EbpfLoader::override_global`); the default,
/// all zero, is what a loader that sets nothing gets: no feature, no
/// pacing, a one-row socket table.
#[unsafe(no_mangle)]
static SRAP_LOAD_CONFIG: LoadConfig = LoadConfig {
    binder: srap_common::binder::BinderConfig {
        pacing_rate: 0,
        tw_stamp_offset: 0,
        socket_mask: 0,
        row_slots: 0,
        local_placement: 0,
        local_nics: 0,
        receiver_nics: 0,
        sizes: BinderSizes::DEFAULT,
    },
    steer_local: 0,
    mptcp: mptcp::OFF,
};

macro_rules! setting {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $($field:ident).+;)*) => {$(
        $(#[$doc])*
        #[inline(always)]
        pub(super) fn $name() -> $ty {
            // SAFETY: a field of a static that lives as long as the program;
            // read volatile, so the compiler keeps the load that the loader's
            // value reaches.
            unsafe { read_volatile(addr_of!(SRAP_LOAD_CONFIG.$($field).+)) }
        }
    )*};
}

setting! {
    /// `SO_MAX_PACING_RATE` for steered sockets, bytes per second; 0: none.
    pacing_rate: u64 = binder.pacing_rate;
    /// Where `tcp_timewait_sock.tw_ts_recent_stamp` lies (0: unknown).
    tw_stamp_offset: u32 = binder.tw_stamp_offset;
    /// The socket table's rows less one (`--max-sockets`).
    socket_mask: u32 = binder.socket_mask;
    /// Slot words per binder row (`--max-cpus`).
    row_slots: u32 = binder.row_slots;
    /// `--local-placement`, a `srap_common::binder::placement` number.
    local_placement: u32 = binder.local_placement;
    /// `--local-nics`, a `srap_common::local_nics::policy` number.
    local_nics: u32 = binder.local_nics;
    /// `--receiver-nics`, a `srap_common::receiver_nics::mode` number.
    receiver_nics: u32 = binder.receiver_nics;
    /// The reader rows' first index in `SRAP_GRANTS`
    /// (`BinderSizes::reader_row`'s base: `--max-receivers`).
    max_receivers: u32 = binder.sizes.receivers;
    /// Whether this host's NIC is planned (`--steer both|local`).
    steer_local_word: u32 = steer_local;
    /// `--mptcp`, a `srap_common::binder::mptcp` number.
    mptcp_word: u32 = mptcp;
}

/// Whether this host's side of a connect is planned (`--steer both|local`).
#[inline(always)]
pub(super) fn steers_local() -> bool {
    steer_local_word() != 0
}

/// Whether MPTCP subflows are steered (`--mptcp subflows` and
/// `follow-reader`).
#[inline(always)]
pub(super) fn steers_mptcp() -> bool {
    mptcp_word() != mptcp::OFF
}
