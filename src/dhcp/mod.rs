//! DHCP for network boot: a sans-IO policy (request + machines + leases +
//! config + now -> reply), lease keeping with crash-safe persistence (a
//! checksummed write-ahead journal in front of a redb checkpoint; see
//! `lease_store` for what each `leaseSync` mode guarantees), a read-only
//! lease view for the boot services, and a thin UDP driver. Authoritative,
//! proxyDHCP and relayed operation; DHCPv6's message reading and writing
//! (`v6`). Never imports `controller`.

pub mod config;
pub mod discovery;
pub mod flags;
pub mod journal;
pub mod lease;
pub mod lease_db;
pub mod lease_store;
pub mod lease_view;
pub mod limit;
pub mod metrics;
pub mod observe;
pub mod options;
pub mod packet;
mod persist;
pub mod policy;
pub mod probe;
pub mod server;
pub mod v6;

pub use config::{DhcpConfig, DhcpSettings};
pub use lease_view::LeaseView;
pub use server::{DhcpError, run};
