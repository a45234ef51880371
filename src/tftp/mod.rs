//! TFTP: packet codec, a sans-IO transfer state machine and a thin tokio
//! driver serving files from a read-only file source ([`crate::files`]). Never imports `controller`.
//!
//! - [`packet`]: wire format (no I/O);
//! - [`session`]: one transfer as a state machine (no I/O, no clock);
//! - [`netascii`]: the netascii transfer mode over any file;
//! - [`refuse`]: which datagrams get an ERROR, and the budget of ERROR replies;
//! - [`server`]: tasks, timers, shutdown; [`socket`]: its sockets, either family;
//! - [`burst`]: a session's datagrams out in as few sends as possible (UDP GSO);
//! - [`metrics`], [`events`]: what the rest of metalherd sees of transfers.

pub mod burst;
pub mod config;
pub mod events;
pub mod metrics;
pub mod netascii;
pub mod packet;
pub mod refuse;
pub mod server;
pub mod session;
pub mod socket;

pub use config::{TftpConfig, TftpSettings};
pub use events::{BootTimeline, NoEvents, TftpEvents, TransferReport};
pub use metrics::TftpMetrics;
pub use server::{TftpError, TftpServer, bind, run};
