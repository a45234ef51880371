//! The server's UDP sockets, either address family: the listening socket
//! and each transfer's own (its TID, RFC 1350). A wildcard IPv6 listen
//! address (`[::]:69`) is dual stack whatever `net.ipv6.bindv6only` says:
//! IPv4 clients arrive as IPv4-mapped peers and their transfer sockets
//! (bound to `[::]` too) reach them the same way. A link-local listen
//! address keeps its scope (`[fe80::1%br0]:69`) for the transfer sockets.

use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// A non-blocking UDP socket bound to `addr`, dual stack on `[::]`.
fn udp(addr: SocketAddr) -> std::io::Result<Socket> {
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        sock.set_only_v6(false)?;
    }
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// The listening socket on `addr`.
pub fn listener(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let sock = udp(addr)?;
    // A boot storm arrives as a burst of requests: give them room.
    let _ = sock.set_recv_buffer_size(4 << 20);
    sock.bind(&addr.into())?;
    Ok(sock.into())
}

/// A socket on a new port of the listening address `local` (its port is
/// ignored, its scope kept), connected to the client so the kernel drops
/// datagrams from any other TID.
pub async fn transfer(
    local: SocketAddr,
    peer: SocketAddr,
) -> std::io::Result<tokio::net::UdpSocket> {
    let mut at = local;
    at.set_port(0);
    let sock = udp(at)?;
    sock.bind(&at.into())?;
    let sock = tokio::net::UdpSocket::from_std(sock.into())?;
    sock.connect(peer).await?;
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dual-stack listener takes an IPv4 client's datagram, and a
    /// transfer socket answers it from `[::]`; the IPv6 loopback works too.
    #[tokio::test]
    async fn a_wildcard_ipv6_listener_serves_both_families() {
        let l = listener("[::]:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        let l = tokio::net::UdpSocket::from_std(l).unwrap();
        for client_at in ["127.0.0.1:0", "[::1]:0"] {
            let c = tokio::net::UdpSocket::bind(client_at).await.unwrap();
            let to: SocketAddr = if client_at.starts_with('[') {
                format!("[::1]:{port}").parse().unwrap()
            } else {
                format!("127.0.0.1:{port}").parse().unwrap()
            };
            c.send_to(b"rrq", to).await.unwrap();
            let mut buf = [0u8; 16];
            let (n, peer) = l.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"rrq");
            let t = transfer(l.local_addr().unwrap(), peer).await.unwrap();
            t.send(b"data").await.unwrap();
            let (n, from) = c.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"data");
            assert_ne!(from.port(), port, "a transfer has its own port");
        }
    }
}
