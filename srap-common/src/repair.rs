//! The occupancy audit's repairs, as the agent asks them of the kernel.
//!
//! The binder's occupancy (the flow count in each slot word of
//! `SRAP_SLOT_STATE`, and the socket table `SRAP_SOCKETS` whose records free
//! those counts on close) is changed by the hooks with compare-and-exchange
//! only. A plain map update from user space is not atomic against them: it
//! would overwrite a claim or a release made between its read and its
//! write. So the agent repairs in kernel context, with the hooks' own
//! compare-and-exchange: it runs [`REPAIR_PROGRAM`] (XDP, never attached)
//! through `BPF_PROG_TEST_RUN`, its packet one [`RepairRequest`], and reads
//! the outcome back from the packet the program wrote.
//!
//! [`INJECT_PROGRAM`] is the tests' sibling: it makes a drift on purpose (a
//! record for a cookie that is no socket, its slot's count raised with it),
//! so a test can prove the audit finds and repairs one. It is in the lab's
//! eBPF object, not the agents'.

/// The repair program (XDP, run only through `BPF_PROG_TEST_RUN`).
pub const REPAIR_PROGRAM: &str = "srap_occupancy_repair";
/// The tests' drift injector (XDP, run only through `BPF_PROG_TEST_RUN`).
pub const INJECT_PROGRAM: &str = "srap_occupancy_inject";

/// What a [`RepairRequest`] asks.
pub mod op {
    /// Forget the socket record of `cookie` and free the slots it holds,
    /// as `srap_sock_release` does for a closed socket.
    pub const FORGET: u32 = 1;
    /// Set the flow count of slot (`receiver`, `slot`) to `value`, if its
    /// word is still `expected` (count, lock and turn): no hook changed it
    /// since the agent read it.
    pub const SET_FLOWS: u32 = 2;
    /// Tests only ([`super::INJECT_PROGRAM`]): claim one flow of slot
    /// (`receiver`, `slot`) and record it for `cookie`, as a connect does
    /// (cookie 0: record nothing, a count no record holds).
    pub const INJECT: u32 = 3;
}

/// What the program did, written back into [`RepairRequest::result`].
pub mod result {
    /// Not run (the packet was too short, or an unknown op).
    pub const NONE: u32 = 0;
    /// Done.
    pub const DONE: u32 = 1;
    /// Nothing to do: the record was gone already (the socket closed
    /// meanwhile, or its hook forgot it first), or the slot word changed
    /// since it was read. The agent looks again at its next audit.
    pub const CHANGED: u32 = 2;
    /// A map row was out of reach (an index past a map).
    pub const MISSING: u32 = 3;
}

/// One request: the packet the program is run on, and where it writes
/// what it did. 48 bytes, so it passes for an Ethernet frame's head
/// (`BPF_PROG_TEST_RUN` of XDP wants at least 14 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairRequest {
    /// [`op`].
    pub op: u32,
    /// Binder row of the slot ([`op::SET_FLOWS`], [`op::INJECT`]).
    pub receiver: u32,
    pub slot: u32,
    /// Written by the program: [`result`].
    pub result: u32,
    /// The socket's cookie ([`op::FORGET`], [`op::INJECT`]).
    pub cookie: u64,
    /// The slot word the agent read ([`op::SET_FLOWS`]).
    pub expected: u64,
    /// The flow count to set ([`op::SET_FLOWS`]).
    pub value: u64,
    /// Written by the program: the slot word before its change, or for
    /// [`op::FORGET`] the freed record's receiver (low 32 bits) and slot.
    pub before: u64,
}

impl RepairRequest {
    /// The request's bytes, as the packet.
    #[cfg(feature = "user")]
    pub fn to_bytes(&self) -> [u8; size_of::<Self>()] {
        let mut out = [0u8; size_of::<Self>()];
        let words = [
            u64::from(self.op) | (u64::from(self.receiver) << 32),
            u64::from(self.slot) | (u64::from(self.result) << 32),
            self.cookie,
            self.expected,
            self.value,
            self.before,
        ];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        out
    }

    /// A request read back from the packet the program returned; `None`
    /// when it is too short.
    #[cfg(feature = "user")]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(
                bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        let (first, second) = (word(0)?, word(1)?);
        Some(Self {
            op: first as u32,
            receiver: (first >> 32) as u32,
            slot: second as u32,
            result: (second >> 32) as u32,
            cookie: word(2)?,
            expected: word(3)?,
            value: word(4)?,
            before: word(5)?,
        })
    }
}

#[cfg(all(test, feature = "user"))]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_its_bytes_in_the_kernels_layout() {
        let request = RepairRequest {
            op: op::SET_FLOWS,
            receiver: 3,
            slot: 511,
            result: result::CHANGED,
            cookie: 0x1234_5678_9abc,
            expected: u64::MAX - 1,
            value: 2,
            before: 7,
        };
        let bytes = request.to_bytes();
        assert_eq!(bytes.len(), 48);
        assert_eq!(RepairRequest::from_bytes(&bytes), Some(request));
        assert_eq!(RepairRequest::from_bytes(&bytes[..40]), None);
        // The `#[repr(C)]` layout the eBPF program reads: field by field.
        assert_eq!(core::mem::offset_of!(RepairRequest, result), 12);
        assert_eq!(core::mem::offset_of!(RepairRequest, cookie), 16);
        assert_eq!(core::mem::offset_of!(RepairRequest, before), 40);
    }
}
