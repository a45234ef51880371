//! Boot HTTP configuration (section `boot:` of the config file).

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootConfig {}
