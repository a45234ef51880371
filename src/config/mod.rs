//! metalherd's config file (YAML): wire types per section, validated into the
//! types each service runs with. Flags override the file.

use std::path::Path;

use serde::Deserialize;

/// The whole config file. Every section is optional; an absent section keeps
/// that service's defaults (or leaves it off, for DHCP).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub dhcp: Option<crate::dhcp::config::DhcpConfig>,
    /// DHCPv6 (`dhcp6:`), beside or instead of DHCPv4; see
    /// `src/dhcp/v6/config.rs`.
    #[serde(default)]
    pub dhcp6: Option<crate::dhcp::v6::Dhcp6Config>,
    #[serde(default)]
    pub tftp: Option<crate::tftp::config::TftpConfig>,
    #[serde(default)]
    pub boot: Option<crate::http::boot::config::BootConfig>,
    #[serde(default)]
    pub controller: Option<crate::controller::config::ControllerConfig>,
    /// BMC quirks (`bmc.quirks:`), see `src/bmc/quirks/config.rs`.
    #[serde(default)]
    pub bmc: Option<crate::bmc::quirks::BmcConfig>,
    /// The object store (`store.watchHistory`).
    #[serde(default)]
    pub store: Option<crate::store::StoreSettings>,
    /// Not in the file: how `serve` reaches the Kubernetes API server when
    /// the store is one (for controllers that talk to it directly).
    #[serde(skip)]
    pub kube_store: Option<KubeStore>,
}

/// The Kubernetes store `serve` runs on: its kubeconfig (in-cluster when
/// `None`) and watched namespace.
#[derive(Clone, Debug, Default)]
pub struct KubeStore {
    pub kubeconfig: Option<std::path::PathBuf>,
    pub namespace: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
}

impl ConfigFile {
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let de = serde_yaml::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: format!("{}: {}", e.path(), e.inner()),
        })
    }
}
