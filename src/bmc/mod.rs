//! BMC drivers behind one `Bmc` trait: Redfish and IPMI, with verified
//! actions. Never imports `controller`.
