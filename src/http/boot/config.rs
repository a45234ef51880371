//! Boot HTTP configuration (section `boot:` of the config file): the wire
//! form, and [`BootSettings`], the validated form the boot server runs with.
//!
//! ```yaml
//! boot:
//!   listen: 10.77.0.1:8080          # the boot network address (own listener)
//!   baseUrl: http://10.77.0.1:8080  # how machines reach it (default: from listen)
//!   assetsDir: boot-assets          # served under /assets/
//!   kernelArgs: [console=ttyS0]     # appended to every install kernel line
//!   tokenTtlSeconds: 2100           # a boot's token lives this long after power-on
//!   routerAdvertisement:            # off unless present (see src/ra.rs)
//!     interface: br0
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::ra::RaSettings;

use super::script::check_kernel_arg;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootConfig {
    /// Address of the boot HTTP listener, `ip:port`.
    #[serde(default)]
    pub listen: Option<String>,
    /// URL machines use to reach the listener (no trailing slash).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Directory served under `/assets/` (iPXE binaries and other files).
    #[serde(default)]
    pub assets_dir: Option<PathBuf>,
    /// Kernel arguments added to every install boot, after the class's.
    #[serde(default)]
    pub kernel_args: Vec<String>,
    /// Seconds an unknown or idle machine waits before handing back to its
    /// firmware.
    #[serde(default)]
    pub wait_seconds: Option<u32>,
    /// Seconds a boot's token stays valid after the server was powered on
    /// for it (for `booted`: after the boot completed). Default: the
    /// controller's `installDeadlineSeconds` plus 5 minutes. 60 to 604800.
    #[serde(default)]
    pub token_ttl_seconds: Option<u64>,
    /// Send IPv6 router advertisements on the boot interface to end iPXE's
    /// IPv6 autoconfiguration wait. Off unless present.
    #[serde(default)]
    pub router_advertisement: Option<RouterAdvertisementConfig>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterAdvertisementConfig {
    /// The boot interface (link) to advertise on.
    pub interface: String,
    /// Seconds between unsolicited advertisements (solicitations are
    /// answered at once); 10 by default.
    #[serde(default)]
    pub interval_seconds: Option<u32>,
}

/// Validated boot settings.
#[derive(Clone, Debug)]
pub struct BootSettings {
    pub listen: SocketAddr,
    /// `http://host:port`, no trailing slash; checked to be safe inside an
    /// iPXE script and a kernel command line.
    pub base_url: String,
    pub assets_dir: PathBuf,
    /// `<data-dir>`: holds `boot-token.key` and `cache/`.
    pub data_dir: PathBuf,
    pub kernel_args: Vec<String>,
    pub wait_seconds: u32,
    pub router_advertisement: Option<RaSettings>,
    /// How long a boot's token stays valid (see `access.rs`).
    pub token_ttl: Duration,
}

/// Token lifetime past the install deadline, when none is configured.
pub const TOKEN_TTL_MARGIN: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootConfigError {
    #[error("boot.listen {0:?} is not an ip:port address")]
    Listen(String),
    #[error("boot.baseUrl {0:?}: {1}")]
    BaseUrl(String, String),
    #[error("boot.baseUrl is required when boot.listen is a wildcard address")]
    BaseUrlRequired,
    #[error("boot.kernelArgs[{0}]: {1}")]
    KernelArg(usize, String),
    #[error("boot.routerAdvertisement.interface {0:?} is not an interface name")]
    Interface(String),
    #[error("boot.tokenTtlSeconds {0}: must be between 60 and 604800")]
    TokenTtl(u64),
}

impl BootConfig {
    /// Validate into the settings the server runs with (tokens default to
    /// the default install deadline plus [`TOKEN_TTL_MARGIN`]).
    pub fn settings(&self, data_dir: &std::path::Path) -> Result<BootSettings, BootConfigError> {
        let deadline = crate::controller::machine::Limits::default().install_deadline;
        self.settings_for(data_dir, deadline)
    }

    /// Validate, with the install deadline the controller runs with.
    pub fn settings_for(
        &self,
        data_dir: &std::path::Path,
        install_deadline: Duration,
    ) -> Result<BootSettings, BootConfigError> {
        let token_ttl = match self.token_ttl_seconds {
            Some(s) if !(60..=604_800).contains(&s) => return Err(BootConfigError::TokenTtl(s)),
            Some(s) => Duration::from_secs(s),
            None => install_deadline.saturating_add(TOKEN_TTL_MARGIN),
        };
        let listen_s = self.listen.as_deref().unwrap_or("0.0.0.0:8080");
        let listen: SocketAddr = listen_s
            .parse()
            .map_err(|_| BootConfigError::Listen(listen_s.to_string()))?;
        let base_url = match &self.base_url {
            Some(u) => check_base_url(u)?,
            None if listen.ip().is_unspecified() => return Err(BootConfigError::BaseUrlRequired),
            None => check_base_url(&format!("http://{listen}"))?,
        };
        for (i, a) in self.kernel_args.iter().enumerate() {
            check_kernel_arg(a).map_err(|e| BootConfigError::KernelArg(i, e))?;
        }
        let router_advertisement = match &self.router_advertisement {
            None => None,
            Some(ra) => {
                let ok = !ra.interface.is_empty()
                    && ra.interface.len() < 16
                    && ra
                        .interface
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                if !ok {
                    return Err(BootConfigError::Interface(ra.interface.clone()));
                }
                Some(RaSettings {
                    interface: ra.interface.clone(),
                    interval: std::time::Duration::from_secs(u64::from(
                        ra.interval_seconds.unwrap_or(10).clamp(1, 1800),
                    )),
                })
            }
        };
        Ok(BootSettings {
            listen,
            base_url,
            assets_dir: self
                .assets_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("boot-assets")),
            data_dir: data_dir.to_path_buf(),
            kernel_args: self.kernel_args.clone(),
            wait_seconds: self.wait_seconds.unwrap_or(30).clamp(1, 3600),
            router_advertisement,
            token_ttl,
        })
    }
}

fn check_base_url(u: &str) -> Result<String, BootConfigError> {
    let err = |m: &str| BootConfigError::BaseUrl(u.to_string(), m.to_string());
    let parsed = url::Url::parse(u).map_err(|e| err(&e.to_string()))?;
    if parsed.scheme() != "http" {
        // iPXE builds often lack TLS, and the token is per boot anyway.
        return Err(err("only http:// is supported for the boot network"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(err("must not have a query or fragment"));
    }
    let trimmed = u.trim_end_matches('/').to_string();
    super::script::check_url(&trimmed).map_err(|e| err(&e))?;
    Ok(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_a_base_url_on_wildcard() {
        let c = BootConfig::default();
        assert!(matches!(
            c.settings(std::path::Path::new("/tmp")),
            Err(BootConfigError::BaseUrlRequired)
        ));
        let c = BootConfig {
            listen: Some("10.1.0.1:8080".into()),
            ..Default::default()
        };
        let s = c.settings(std::path::Path::new("/tmp")).unwrap();
        assert_eq!(s.base_url, "http://10.1.0.1:8080");
    }

    #[test]
    fn rejects_unsafe_values() {
        let c = BootConfig {
            listen: Some("10.1.0.1:8080".into()),
            kernel_args: vec!["a\nchain http://evil".into()],
            ..Default::default()
        };
        assert!(c.settings(std::path::Path::new("/tmp")).is_err());
        let c = BootConfig {
            base_url: Some("http://x/ y".into()),
            ..Default::default()
        };
        assert!(c.settings(std::path::Path::new("/tmp")).is_err());
        let c = BootConfig {
            base_url: Some("https://x".into()),
            ..Default::default()
        };
        assert!(c.settings(std::path::Path::new("/tmp")).is_err());
    }

    #[test]
    fn token_ttl_defaults_above_the_install_deadline_and_is_bounded() {
        let tmp = std::path::Path::new("/tmp");
        let mut c = BootConfig {
            listen: Some("10.1.0.1:8080".into()),
            ..Default::default()
        };
        let s = c.settings(tmp).unwrap();
        assert_eq!(s.token_ttl, Duration::from_secs(35 * 60));
        let s = c.settings_for(tmp, Duration::from_secs(3600)).unwrap();
        assert_eq!(s.token_ttl, Duration::from_secs(3600 + 300));
        c.token_ttl_seconds = Some(600);
        let s = c.settings_for(tmp, Duration::from_secs(3600)).unwrap();
        assert_eq!(s.token_ttl, Duration::from_secs(600));
        for bad in [0, 59, 604_801] {
            c.token_ttl_seconds = Some(bad);
            let e = c.settings(tmp).unwrap_err().to_string();
            assert!(e.contains("boot.tokenTtlSeconds"), "{e}");
        }
    }
}
