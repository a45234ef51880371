//! DHCPv6 for network boot (RFC 8415, boot options of RFC 5970): a strict
//! reader of client and relay messages ([`message`]) and the writer of the
//! server's answers ([`reply`]), sans-IO like DHCPv4's packet code (every
//! malformation is a typed [`message::Drop6`] reason, a metric label); the
//! configuration ([`config`]), the pure decision ([`policy`], with the boot
//! URL rules in [`boot`]), leases keyed by (owner, IAID) ([`lease`]) kept
//! in a journal and snapshot ([`journal`], [`lease_store`]), a view of them
//! for boot HTTP ([`lease_view`]), and the thin UDP driver ([`server`]).

pub mod boot;
pub mod config;
pub mod journal;
pub mod lease;
pub mod lease_store;
pub mod lease_view;
pub mod message;
pub mod metrics;
pub mod policy;
pub mod reply;
pub mod server;

pub use message::{Drop6, Duid, IaNa, Message, MessageType, Msg};

pub use config::{Dhcp6Config, Dhcp6Settings};
pub use lease_view::LeaseView6;
