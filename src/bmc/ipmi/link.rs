//! Connection management for one BMC: resolve the address, open the RMCP+
//! session (cipher suite 17, then 3 when the BMC refuses 17, unless a suite
//! is pinned), raise it to administrator, replace idle or dead sessions,
//! close. One request at a time per BMC. No protocol logic here: packets
//! are built and checked by the sans-IO core, sent by [`super::client`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::Mutex;
use tracing::Instrument;

use super::client::{self, Conn};
use super::commands::{CMD_CLOSE_SESSION, CMD_SET_SESSION_PRIVILEGE, NETFN_APP};
use super::crypto::CipherSuite;
use super::error::IpmiError;
use super::metrics;
use super::wire::Response;
use crate::bmc::{Credentials, Timing};

/// A session idle this long is closed and opened again before use: BMCs
/// end idle sessions (often after 60 s) without telling the console.
const SESSION_IDLE_REOPEN: Duration = Duration::from_secs(30);
/// How long Close Session may take (best effort).
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Default)]
struct LinkState {
    peer: Option<SocketAddr>,
    /// The suite that worked (kept for re-opens).
    suite: Option<CipherSuite>,
    conn: Option<Conn>,
}

pub(crate) struct Link {
    host: String,
    port: u16,
    pub address: String,
    credentials: Credentials,
    pub timing: Timing,
    pinned: Option<CipherSuite>,
    state: Mutex<LinkState>,
}

impl Link {
    pub fn new(
        host: &str,
        port: u16,
        credentials: Credentials,
        pinned: Option<CipherSuite>,
        timing: Timing,
    ) -> Link {
        Link {
            host: host.to_string(),
            port,
            address: format!("ipmi://{host}:{port}"),
            credentials,
            timing,
            pinned,
            state: Mutex::new(LinkState::default()),
        }
    }

    pub async fn suite(&self) -> Option<CipherSuite> {
        self.state.lock().await.suite
    }

    /// Open the session now (connect-time checks: reachability, password).
    pub async fn ensure_open(&self) -> Result<(), IpmiError> {
        let mut st = self.state.lock().await;
        if st.conn.is_none() {
            self.open(&mut st).await?;
        }
        Ok(())
    }

    async fn resolve(&self, st: &mut LinkState) -> Result<SocketAddr, IpmiError> {
        if let Some(p) = st.peer {
            return Ok(p);
        }
        let peer = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| IpmiError::Io(format!("cannot resolve {}: {e}", self.host)))?
            .next()
            .ok_or_else(|| IpmiError::Io(format!("{} has no address", self.host)))?;
        st.peer = Some(peer);
        Ok(peer)
    }

    async fn open(&self, st: &mut LinkState) -> Result<(), IpmiError> {
        let peer = self.resolve(st).await?;
        let candidates = match self.pinned.or(st.suite) {
            Some(s) => vec![s],
            None => vec![CipherSuite::Suite17, CipherSuite::Suite3],
        };
        let mut refused = None;
        for suite in candidates {
            match self.open_with(peer, suite).await {
                Ok(conn) => {
                    st.suite = Some(suite);
                    st.conn = Some(conn);
                    return Ok(());
                }
                Err(e) if e.is_suite_refused() => {
                    tracing::info!(bmc = %self.address, suite = suite.id(), error = %e, "cipher suite refused");
                    refused = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(refused.unwrap_or(IpmiError::UnsupportedSuite(0)))
    }

    async fn open_with(&self, peer: SocketAddr, suite: CipherSuite) -> Result<Conn, IpmiError> {
        let span = tracing::info_span!("ipmi_session", bmc = %self.address, suite = suite.id());
        async {
            let t = self.timing.request_timeout;
            let mut conn = client::establish(peer, &self.credentials, suite, t).await?;
            // Sessions start at user privilege; chassis control needs more.
            conn.call_ok(NETFN_APP, CMD_SET_SESSION_PRIVILEGE, &[0x04], t)
                .await?;
            metrics::session_opened();
            tracing::debug!("RMCP+ session open");
            Ok(conn)
        }
        .instrument(span)
        .await
    }

    /// Send one command on the session, opening it if needed. A timeout or
    /// socket error drops the session so the next call starts a fresh one.
    /// Completion codes are returned, not judged.
    pub async fn call(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Response, IpmiError> {
        let mut st = self.state.lock().await;
        if let Some(conn) = st.conn.as_mut()
            && conn.last_reply.elapsed() > SESSION_IDLE_REOPEN
        {
            close_conn(conn).await;
            st.conn = None;
        }
        if st.conn.is_none() {
            self.open(&mut st).await?;
        }
        let Some(conn) = st.conn.as_mut() else {
            return Err(IpmiError::Io("no session".into()));
        };
        let r = conn
            .call(netfn, cmd, data, self.timing.request_timeout)
            .instrument(tracing::debug_span!("ipmi_request", netfn, cmd))
            .await;
        if matches!(r, Err(IpmiError::Timeout(_) | IpmiError::Io(_))) {
            st.conn = None;
        }
        r
    }

    /// Like [`Link::call`]; a non-zero completion code is an error.
    pub async fn call_ok(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
        let r = self.call(netfn, cmd, data).await?;
        if r.completion != 0 {
            return Err(IpmiError::Completion {
                netfn,
                cmd,
                code: r.completion,
            });
        }
        Ok(r.data)
    }

    /// Close the session if one is open. Idempotent.
    pub async fn close(&self) {
        let mut st = self.state.lock().await;
        if let Some(mut conn) = st.conn.take() {
            close_conn(&mut conn).await;
        }
    }

    /// The open session, for a close from `Drop` (no await possible there).
    pub fn take_conn(&mut self) -> Option<Conn> {
        self.state.get_mut().conn.take()
    }
}

/// Best-effort Close Session: a BMC that does not answer times it out.
pub(crate) async fn close_conn(conn: &mut Conn) {
    let sid = conn.session.managed_sid().to_le_bytes();
    let _ = conn
        .call(NETFN_APP, CMD_CLOSE_SESSION, &sid, CLOSE_TIMEOUT)
        .await;
}
