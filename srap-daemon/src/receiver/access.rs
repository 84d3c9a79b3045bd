//! Whether the receiver may listen where it was told to: beyond loopback it
//! needs a pre-shared key (`--psk-file`) or an allow-list (`--allow`), or
//! `--open` to say that serving anyone is meant. Whoever reaches an open
//! port reads the NIC's RSS description (its key included) and is granted
//! CPUs, so that is never the default.

use std::net::SocketAddr;

use thiserror::Error;

use super::allow::AllowList;

/// Who can reach the receiver, decided at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Listening on a loopback address: only this host's processes.
    Loopback,
    /// A key or an allow-list guards the port.
    Guarded,
    /// Beyond loopback with neither, because `--open` was given.
    Open,
}

/// A listen beyond loopback with nothing to guard it.
#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "refusing to serve senders on {listen} with no pre-shared key and no allow-list: anyone \
     who reaches this port could read the NIC's RSS description and take its CPUs. Give \
     --psk-file FILE (the same key file on every sender; the package makes /etc/srap/psk), \
     or --allow CIDR (the senders' networks), or --open to serve every address anyway"
)]
pub struct UnguardedListen {
    pub listen: SocketAddr,
}

/// The exposure of listening on `listen` with `keyed` (a `--psk-file`),
/// `allow` and `open` (`--open`, which clap keeps apart from the other two).
pub fn exposure(
    listen: SocketAddr,
    keyed: bool,
    allow: &AllowList,
    open: bool,
) -> Result<Exposure, UnguardedListen> {
    if listen.ip().to_canonical().is_loopback() {
        Ok(Exposure::Loopback)
    } else if keyed || !allow.is_empty() {
        Ok(Exposure::Guarded)
    } else if open {
        Ok(Exposure::Open)
    } else {
        Err(UnguardedListen { listen })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("address")
    }

    #[test]
    fn beyond_loopback_a_key_or_an_allow_list_is_needed() {
        let none = AllowList::default();
        let lan = AllowList::new(vec!["192.0.2.0/24".parse().expect("cidr")]);
        for listen in ["0.0.0.0:7447", "[::]:7447", "192.0.2.1:7447"] {
            let listen = addr(listen);
            let err = exposure(listen, false, &none, false).expect_err("unguarded");
            let text = err.to_string();
            for flag in ["--psk-file", "--allow", "--open", &listen.to_string()] {
                assert!(text.contains(flag), "{text}");
            }
            assert_eq!(exposure(listen, true, &none, false), Ok(Exposure::Guarded));
            assert_eq!(exposure(listen, false, &lan, false), Ok(Exposure::Guarded));
            assert_eq!(exposure(listen, false, &none, true), Ok(Exposure::Open));
        }
        for listen in [
            "127.0.0.1:7447",
            "127.9.9.9:1",
            "[::1]:7447",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(
                exposure(addr(listen), false, &none, false),
                Ok(Exposure::Loopback),
                "{listen}"
            );
        }
    }
}
