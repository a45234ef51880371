//! The accept step both TCP servers share (boot HTTP in
//! `http::limits::serve`, the API in `tls::serve`): the next connection, or
//! `None` once `cancel` fires. A failed accept (out of descriptors and the
//! like) is logged and retried after a pause instead of ending the server;
//! accepted connections get `TCP_NODELAY` (responses are written whole).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long to wait after a failed accept before trying again.
pub const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// The next connection on `listener`, or `None` once `cancel` fires.
pub async fn next(
    listener: &TcpListener,
    cancel: &CancellationToken,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
                }
                return Some((tcp, peer));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(ACCEPT_RETRY) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hands_out_connections_until_cancelled() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (tcp, peer) = next(&l, &cancel).await.unwrap();
        assert!(tcp.nodelay().unwrap());
        assert_eq!(peer.ip(), addr.ip());
        drop(client.await.unwrap());
        cancel.cancel();
        assert!(next(&l, &cancel).await.is_none());
    }
}
