//! systemd's notification protocol (`sd_notify(3)`), for units of
//! `Type=notify`: `READY=1` once the agent does what it is for (the
//! sender: its hooks attached; the receiver: serving), `STATUS=` with what
//! it does, `WATCHDOG=1` from the agent's own loop while `WatchdogSec=`
//! asks for it, and `STOPPING=1`. Outside systemd (no `NOTIFY_SOCKET`)
//! every call does nothing. A message that cannot be sent is logged once,
//! never an error: a unit's readiness must not stop an agent that works.

use std::{
    os::unix::net::{SocketAddr, UnixDatagram},
    sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tracing::warn;

/// The service manager's socket, as `NOTIFY_SOCKET` names it.
struct Manager {
    socket: UnixDatagram,
    to: SocketAddr,
    /// `WATCHDOG_USEC`, when it is for this process (`WATCHDOG_PID`).
    watchdog: Option<Duration>,
}

fn manager() -> Option<&'static Manager> {
    static MANAGER: OnceLock<Option<Manager>> = OnceLock::new();
    MANAGER.get_or_init(from_env).as_ref()
}

fn from_env() -> Option<Manager> {
    let path = std::env::var_os("NOTIFY_SOCKET")?;
    let to = address(path.as_encoded_bytes())
        .map_err(|err| warn!("NOTIFY_SOCKET {path:?}: {err}; not notifying systemd"))
        .ok()?;
    let socket = UnixDatagram::unbound()
        .map_err(|err| warn!("a socket to notify systemd: {err}"))
        .ok()?;
    Some(Manager {
        socket,
        to,
        watchdog: watchdog_from(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        ),
    })
}

/// A path, or with a leading `@` an abstract name.
fn address(path: &[u8]) -> std::io::Result<SocketAddr> {
    match path.split_first() {
        Some((b'@', name)) => {
            use std::os::linux::net::SocketAddrExt as _;
            SocketAddr::from_abstract_name(name)
        }
        _ => {
            use std::os::unix::ffi::OsStrExt as _;
            SocketAddr::from_pathname(std::ffi::OsStr::from_bytes(path))
        }
    }
}

/// The watchdog's interval, if `usec` asks for one and `pid` (when set)
/// is `own`.
fn watchdog_from(usec: Option<&str>, pid: Option<&str>, own: u32) -> Option<Duration> {
    let usec: u64 = usec?.parse().ok().filter(|&u| u > 0)?;
    match pid.map(str::parse::<u32>) {
        Some(Ok(pid)) if pid != own => None,
        Some(Err(_)) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

fn send(message: &str) {
    let Some(manager) = manager() else {
        return;
    };
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(err) = manager.socket.send_to_addr(message.as_bytes(), &manager.to)
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        warn!("notifying systemd ({message:?}): {err}");
    }
}

/// One line of `STATUS=`: the protocol separates assignments by newlines.
fn one_line(status: &str) -> String {
    status.replace('\n', "; ")
}

/// `READY=1` with `status`.
pub fn ready(status: &str) {
    send(&format!("READY=1\nSTATUS={}", one_line(status)));
}

/// `STATUS=` alone.
pub fn status(status: &str) {
    send(&format!("STATUS={}", one_line(status)));
}

/// `STOPPING=1`.
pub fn stopping() {
    send("STOPPING=1");
}

/// `WATCHDOG=1`, when the unit asks for a watchdog: call it from the loop
/// whose stall the watchdog is to catch, at least twice per
/// [`watchdog_interval`].
pub fn watchdog() {
    if manager().is_some_and(|m| m.watchdog.is_some()) {
        send("WATCHDOG=1");
    }
}

/// `WatchdogSec=` as systemd passed it to this process.
pub fn watchdog_interval() -> Option<Duration> {
    manager().and_then(|m| m.watchdog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watchdog_for_another_process_or_none_is_not_kept() {
        assert_eq!(
            watchdog_from(Some("30000000"), None, 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            watchdog_from(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(30))
        );
        assert_eq!(watchdog_from(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_from(Some("0"), None, 7), None);
        assert_eq!(watchdog_from(Some("soon"), None, 7), None);
        assert_eq!(watchdog_from(None, None, 7), None);
    }

    /// The messages reach a datagram socket named by a path and by an
    /// abstract name, as systemd binds either.
    #[test]
    fn messages_reach_a_path_and_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!("srap-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("notify");
        let server = UnixDatagram::bind(&path).expect("bind");
        let to = address(path.as_os_str().as_encoded_bytes()).expect("a path");
        let client = UnixDatagram::unbound().expect("socket");
        client.send_to_addr(b"READY=1", &to).expect("sent");
        let mut buf = [0u8; 16];
        let n = server.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);

        let name = format!("@srap-notify-{}", std::process::id());
        let abstract_addr = address(name.as_bytes()).expect("an abstract name");
        let server = UnixDatagram::bind_addr(&abstract_addr).expect("bind abstract");
        client
            .send_to_addr(b"STOPPING=1", &abstract_addr)
            .expect("sent");
        let n = server.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"STOPPING=1");
        assert_eq!(one_line("a\nb"), "a; b");
    }
}
