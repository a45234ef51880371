//! HTTP routers: the boot network endpoints (iPXE scripts, assets, Ignition,
//! call-home) and the API/UI/metrics server.

pub mod api;
pub mod boot;
pub mod ops;
pub mod ui;
