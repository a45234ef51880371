//! DiscoveredMachine: an unknown server that PXE-booted, recorded so it can
//! be adopted. It never gets an OS it was not asked for.

use jiff::Timestamp;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "metalherd.dev",
    version = "v1alpha1",
    kind = "DiscoveredMachine",
    namespaced,
    shortname = "dm",
    category = "metalherd",
    derive = "PartialEq",
    derive = "Default",
    printcolumn(name = "MAC", type_ = "string", json_path = ".spec.macAddress"),
    printcolumn(name = "Arch", type_ = "string", json_path = ".spec.architecture"),
    printcolumn(name = "Vendor", type_ = "string", json_path = ".spec.vendorClass"),
    printcolumn(name = "Last-Seen", type_ = "date", json_path = ".spec.lastSeen"),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".spec.address",
        priority = 1
    ),
    printcolumn(
        name = "First-Seen",
        type_ = "date",
        json_path = ".spec.firstSeen",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredMachineSpec {
    #[serde(rename = "macAddress")]
    pub mac_address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[schemars(with = "String")]
    pub first_seen: Timestamp,
    #[schemars(with = "String")]
    pub last_seen: Timestamp,
}
