//! DHCP for network boot: a sans-IO policy (request + machines + leases +
//! config + now -> reply), lease keeping with crash-safe persistence, and a
//! thin UDP driver. Authoritative, proxyDHCP and relayed operation.
//! Never imports `controller`.

pub mod config;
pub mod discovery;
pub mod lease;
pub mod lease_db;
pub mod metrics;
pub mod options;
pub mod packet;
pub mod policy;
pub mod server;

pub use config::{DhcpConfig, DhcpSettings};
pub use server::{DhcpError, run};
