//! DHCP configuration (section `dhcp:` of the config file).

use serde::Deserialize;

/// Wire form of the `dhcp:` section; empty means DHCP is off.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DhcpConfig {}
