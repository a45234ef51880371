//! metalherd: bare-metal provisioning. Declare Machines; metalherd powers them
//! through their BMC, network-boots them, installs an OS with Ignition, joins
//! them to Kubernetes and reimages them in place.
//!
//! Module seams follow ARCHITECTURE.md (the layers, who writes what, the
//! seams and where to start reading): protocol cores (`dhcp`, `tftp`, `ignition`,
//! `bmc`) never import `controller`; everything reaches objects through the
//! [`store::Store`] trait.
//!
//! Unit tests have one layout: a small module keeps them inline in
//! `#[cfg(test)] mod tests { ... }`; once they grow, they move to a sibling
//! file declared as `#[cfg(test)] mod tests;` (`foo.rs` -> `foo/tests.rs`,
//! `foo/mod.rs` -> `foo/tests.rs`), with submodules below it if needed.
//! Test doubles live next to what they fake. Integration tests, one per
//! user story, are in `tests/`; benchmarks are examples (`examples/`).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod accept;
pub mod api;
pub mod app;
pub mod backup;
pub mod bmc;
pub mod capi;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod datadir;
pub mod dhcp;
pub mod directory;
pub mod discovery;
pub mod files;
pub mod http;
pub mod hwtest;
pub mod ignition;
pub mod leader;
pub mod private_file;
pub mod ra;
pub mod store;
pub mod telemetry;
pub mod tftp;
pub mod tls;
pub mod vmedia;
