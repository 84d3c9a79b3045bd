//! From ethtool's numbers to the RSS description's words: hash function
//! (`ETH_RSS_HASH_*`), input transform (`RXH_XFRM_*`), hashed fields
//! (`RXH_*` → ethtool letters), and the one driver quirk SRAP knows of.

use srap_common::rss::{HashFunction, InputXfrm};
use thiserror::Error;

/// ethtool's numbers that SRAP has no word for.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HashingError {
    #[error(
        "input transform bits {bits:#x} are not one transform SRAP knows ({})",
        known_xfrms()
    )]
    UnknownXfrm { bits: u32 },
    #[error("the NIC discards this flow type (RXH_DISCARD)")]
    Discarded,
    /// `bits` are those without a letter.
    #[error("hashed-field bits {bits:#x} have no ethtool letter SRAP knows")]
    UnknownFields { bits: u64 },
}

/// The transforms SRAP knows with their bits: `sym-xor = 0x1, …`.
fn known_xfrms() -> String {
    let known: Vec<String> = InputXfrm::ALL
        .iter()
        .filter(|x| x.ethtool_bits() != 0)
        .map(|x| format!("{} = {:#x}", x.name(), x.ethtool_bits()))
        .collect();
    known.join(", ")
}

/// `RXH_*` bits and their ethtool letters, in ethtool's order.
const RXH_LETTERS: [(u64, char); 7] = [
    (1 << 1, 'm'), // L2 destination address
    (1 << 2, 'v'), // VLAN tag
    (1 << 3, 't'), // L3 protocol
    (1 << 4, 's'), // IP source
    (1 << 5, 'd'), // IP destination
    (1 << 6, 'f'), // L4 bytes 0-1: source port
    (1 << 7, 'n'), // L4 bytes 2-3: destination port
];
const RXH_DISCARD: u64 = 1 << 31;

/// The first kernel whose RSS_GET can report `RXH_XFRM_SYM_OR_XOR`; on an
/// older one, mlx5's or-xor hashing is invisible to ethtool.
pub const KERNEL_REPORTS_OR_XOR: (u32, u32) = (6, 15);

/// ethtool's name of the hash function in `hfunc` (a one-bit mask). `None`
/// for 0: the driver did not say.
pub fn hfunc_name(hfunc: u32) -> Option<String> {
    match (hfunc, HashFunction::from_ethtool_bits(hfunc)) {
        (0, _) => None,
        (_, Some(function)) => Some(function.name().into()),
        (other, None) => Some(format!("unknown (hfunc bits {other:#x})")),
    }
}

/// The description's name of an `RXH_XFRM_*` mask.
pub fn xfrm_name(bits: u32) -> Result<&'static str, HashingError> {
    InputXfrm::ALL
        .into_iter()
        .find(|x| x.ethtool_bits() == bits)
        .map(InputXfrm::name)
        .ok_or(HashingError::UnknownXfrm { bits })
}

/// ethtool letters of an `RXH_*` mask (`ethtool -n DEV rx-flow-hash tcp4`).
pub fn rxh_letters(bits: u64) -> Result<String, HashingError> {
    if bits & RXH_DISCARD != 0 {
        return Err(HashingError::Discarded);
    }
    let known: u64 = RXH_LETTERS.iter().map(|(bit, _)| bit).sum();
    if bits & !known != 0 {
        return Err(HashingError::UnknownFields {
            bits: bits & !known,
        });
    }
    Ok(RXH_LETTERS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, letter)| *letter)
        .collect())
}

/// The transform the NIC really applies, given what the kernel reported.
///
/// mlx5 hashes (SIP|DIP, SIP^DIP, SPORT|DPORT, SPORT^DPORT) but kernels
/// before [`KERNEL_REPORTS_OR_XOR`] have no way to say so: there, an mlx5
/// device that reports nothing is taken to be `sym-or-xor`, with a note.
pub fn effective_xfrm(
    reported: &'static str,
    driver: Option<&str>,
    kernel: Option<(u32, u32)>,
) -> (&'static str, Option<String>) {
    let is_mlx5 = driver.is_some_and(|d| d.starts_with("mlx5"));
    let kernel_is_silent = kernel.is_some_and(|k| k < KERNEL_REPORTS_OR_XOR);
    if reported == "none" && is_mlx5 && kernel_is_silent {
        let (major, minor) = KERNEL_REPORTS_OR_XOR;
        let note = format!(
            "input transform: assumed sym-or-xor (mlx5 hashes that way; kernels before \
             {major}.{minor} do not report it) — run the observer to confirm"
        );
        return ("sym-or-xor", Some(note));
    }
    (reported, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_functions() {
        assert_eq!(hfunc_name(1).as_deref(), Some("toeplitz"));
        assert_eq!(hfunc_name(2).as_deref(), Some("xor"));
        assert_eq!(hfunc_name(4).as_deref(), Some("crc32"));
        assert_eq!(hfunc_name(0), None);
        assert!(hfunc_name(3).unwrap().contains("0x3"));
    }

    #[test]
    fn transforms() {
        assert_eq!(xfrm_name(0), Ok("none"));
        assert_eq!(xfrm_name(1), Ok("sym-xor"));
        assert_eq!(xfrm_name(2), Ok("sym-or-xor"));
        assert!(xfrm_name(3).is_err());
        assert!(xfrm_name(0xff).is_err());
    }

    #[test]
    fn rxh_bits_to_letters() {
        assert_eq!(rxh_letters(0xf0).unwrap(), "sdfn");
        assert_eq!(rxh_letters(0x30).unwrap(), "sd");
        assert_eq!(rxh_letters(0x3e).unwrap(), "mvtsd");
        assert_eq!(rxh_letters(0).unwrap(), "");
        assert!(rxh_letters(RXH_DISCARD | 0xf0).is_err());
        assert!(rxh_letters(1 << 8).is_err());
    }

    #[test]
    fn mlx5_on_old_kernels_is_or_xor() {
        let (xfrm, note) = effective_xfrm("none", Some("mlx5_core"), Some((6, 1)));
        assert_eq!(xfrm, "sym-or-xor");
        assert!(note.unwrap().contains("assumed"));
        // New kernels say what the device does.
        assert_eq!(
            effective_xfrm("none", Some("mlx5_core"), Some((6, 18))),
            ("none", None)
        );
        // Other drivers, and reported transforms, are taken as reported.
        assert_eq!(
            effective_xfrm("none", Some("ice"), Some((6, 1))),
            ("none", None)
        );
        assert_eq!(
            effective_xfrm("sym-xor", Some("mlx5_core"), Some((6, 1))),
            ("sym-xor", None)
        );
    }
}
