//! HTTP routers: the boot network endpoints (iPXE scripts, assets, Ignition,
//! call-home) and the API/UI/metrics server.

pub mod boot_config;
pub mod ui;
