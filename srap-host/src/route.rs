//! The source address the kernel routes from toward a receiver: the address
//! the binder binds, so the 4-tuple on the wire is the one the tables were
//! computed for.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::error::HostError;

/// Asks the kernel's routing table (of this network namespace) by connecting
/// an unsent UDP socket and reading its local address.
pub fn source_toward(receiver: IpAddr) -> Result<IpAddr, HostError> {
    let any: IpAddr = match receiver {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let no_route = |source: std::io::Error| HostError::NoRoute { receiver, source };
    let socket = UdpSocket::bind(SocketAddr::new(any, 0)).map_err(no_route)?;
    // Any non-zero port: connect() on UDP only picks a route and an address.
    socket
        .connect(SocketAddr::new(receiver, 9))
        .map_err(no_route)?;
    let source = socket.local_addr().map_err(no_route)?.ip();
    if source.is_unspecified() {
        return Err(no_route(std::io::Error::other(
            "the kernel chose no source address",
        )));
    }
    Ok(source)
}

/// The interface the route toward `dst` leaves from: the one that holds
/// the route's source address (a bond's address is on the bond, not on its
/// members). `None` when there is no route or no interface has it.
pub fn egress_iface(dst: IpAddr) -> Option<String> {
    let source = source_toward(dst).ok()?;
    crate::local::interface_of(source).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_from_loopback() {
        let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(source_toward(v4).unwrap(), v4);
    }
}
