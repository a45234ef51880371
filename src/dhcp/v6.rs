//! DHCPv6 for network boot (RFC 8415, boot options of RFC 5970): a strict
//! reader of client and relay messages ([`message`]) and the writer of the
//! server's answers ([`reply`]), sans-IO like DHCPv4's packet code. Every
//! malformation is a typed [`message::Drop6`] reason, a metric label.

pub mod message;
pub mod reply;

pub use message::{Drop6, Duid, IaNa, Message, MessageType, Msg};
