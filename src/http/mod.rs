//! HTTP routers: the boot network endpoints (iPXE scripts, assets, Ignition,
//! call-home) and the API/UI/metrics server.

pub mod api;
pub mod boot;
pub mod limits;
pub mod ops;
pub mod ui;

use axum::serve::{ListenerExt, TapIo};
use tokio::net::{TcpListener, TcpStream};

/// A listener whose accepted connections have TCP_NODELAY set. hyper
/// writes a response's head and a streamed body in separate writes; with
/// Nagle's algorithm on, the second small write waits for the client's
/// delayed ACK (~40 ms on Linux) whenever the first is still unacknowledged.
/// iPXE fetches many small things per boot, so every HTTP listener here
/// turns it off.
pub fn no_delay(listener: TcpListener) -> TapIo<TcpListener, fn(&mut TcpStream)> {
    listener.tap_io(set_no_delay as fn(&mut TcpStream))
}

fn set_no_delay(stream: &mut TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
    }
}
