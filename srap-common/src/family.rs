//! Address families as the kernel numbers them (`AF_INET`, `AF_INET6`): the
//! one definition that the binder's and the observer's map keys and the eBPF
//! programs use, whatever the width of the field that holds it.

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Family {
    /// `AF_INET`.
    Inet = 2,
    /// `AF_INET6`.
    Inet6 = 10,
}

impl Family {
    /// The kernel's number in a `u8` field (the observer's flow key).
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// The kernel's number in a `u16` field (a `sockaddr`'s family).
    pub const fn as_u16(self) -> u16 {
        self as u16
    }

    /// The kernel's number in a `u32` field (the binder's keys, `bpf_sock`).
    pub const fn as_u32(self) -> u32 {
        self as u32
    }

    /// The family the kernel number `raw` names, if it is one of these.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            2 => Some(Self::Inet),
            10 => Some(Self::Inet6),
            _ => None,
        }
    }

    /// The family of `addr`.
    #[cfg(feature = "user")]
    pub fn of(addr: &std::net::IpAddr) -> Self {
        match addr {
            std::net::IpAddr::V4(_) => Self::Inet,
            std::net::IpAddr::V6(_) => Self::Inet6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Family;

    #[test]
    fn kernel_numbers_round_trip() {
        for family in [Family::Inet, Family::Inet6] {
            assert_eq!(Family::from_raw(family.as_u32()), Some(family));
            assert_eq!(u32::from(family.as_u16()), family.as_u32());
        }
        assert_eq!((Family::Inet.as_u8(), Family::Inet6.as_u8()), (2, 10));
        assert_eq!(Family::from_raw(1), None);
    }
}
