//! DHCP for network boot: a sans-IO policy (request + machines + leases +
//! config + now -> reply), lease keeping, and a thin UDP driver.
//! Never imports `controller`.

pub mod config;
