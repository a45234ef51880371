//! Boot HTTP configuration (section `boot:` of the config file): the wire
//! form, and [`BootSettings`], the validated form the boot server runs with.
//!
//! ```yaml
//! boot:
//!   listen: 10.77.0.1:8080          # the boot network address (own listener)
//!   baseUrl: http://10.77.0.1:8080  # how machines reach it (default: from listen)
//!   baseUrl6: http://[fd00:77::1]:8080  # how machines that came over IPv6 reach it
//!   assetsDir: boot-assets          # served under /assets/
//!   kernelArgs: [console=ttyS0]     # appended to every install kernel line
//!   tokenTtlSeconds: 2100           # a boot's token lives this long after power-on
//!   routerAdvertisement:            # off unless present (see src/ra.rs and
//!     interface: br0                # src/ra/config.rs for flags and prefixes)
//!   maxConnections: 1024            # open connections, all clients together
//!   maxConnectionsPerClient: 32     # open connections from one address
//!   headerTimeoutSeconds: 15        # to send a request header; idle keep-alive
//!   stallTimeoutSeconds: 60         # a response the client stops reading
//!   virtualMediaLoader: /usr/lib/systemd/boot/efi/systemd-bootx64.efi
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::http::limits::ConnLimits;
use crate::ra::RaSettings;
pub use crate::ra::RouterAdvertisementConfig;

use super::script::{UnsafeValue, check_kernel_arg};

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootConfig {
    /// Address of the boot HTTP listener, `ip:port`.
    #[serde(default)]
    pub listen: Option<String>,
    /// URL machines use to reach the listener (no trailing slash).
    #[serde(default)]
    pub base_url: Option<String>,
    /// URL machines that reach the listener over IPv6 use (no trailing
    /// slash; an IPv6 literal in brackets, which every firmware can parse).
    /// A request that arrives from an IPv6 peer (not IPv4-mapped) is
    /// answered with URLs under it; IPv4 peers get `baseUrl`. Unset: every
    /// peer gets `baseUrl`.
    #[serde(default, rename = "baseUrl6")]
    pub base_url6: Option<String>,
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
    /// Send IPv6 router advertisements on the boot interface: by default
    /// minimal ones that end iPXE's IPv6 autoconfiguration wait; with M/O
    /// flags and prefixes, the ones an IPv6-only boot network needs. Off
    /// unless present.
    #[serde(default)]
    pub router_advertisement: Option<RouterAdvertisementConfig>,
    /// Open connections at most, from all clients together (1024).
    #[serde(default)]
    pub max_connections: Option<usize>,
    /// Open connections at most from one client address (32).
    #[serde(default)]
    pub max_connections_per_client: Option<usize>,
    /// Seconds a client has to send a request header once the server is
    /// ready for it; also how long a kept-alive connection may sit idle
    /// (15).
    #[serde(default)]
    pub header_timeout_seconds: Option<u64>,
    /// Seconds a response write may stay blocked because the client does
    /// not read (60).
    #[serde(default)]
    pub stall_timeout_seconds: Option<u64>,
    /// The UEFI loader a virtual media ISO boots (it reads the kernel,
    /// initrd and command line from the ISO's FAT image): systemd-boot,
    /// Debian's `systemd-boot-efi` by default.
    #[serde(default)]
    pub virtual_media_loader: Option<PathBuf>,
}

/// Validated boot settings.
#[derive(Clone, Debug)]
pub struct BootSettings {
    pub listen: SocketAddr,
    /// `http://host:port`, no trailing slash; checked to be safe inside an
    /// iPXE script and a kernel command line.
    pub base_url: String,
    /// The same for peers that arrive over IPv6 (see [`Self::base_url_for`]).
    pub base_url6: Option<String>,
    pub assets_dir: PathBuf,
    /// `<data-dir>`: holds `boot-token.key` and `cache/`.
    pub data_dir: PathBuf,
    pub kernel_args: Vec<String>,
    pub wait_seconds: u32,
    pub router_advertisement: Option<RaSettings>,
    /// How long a boot's token stays valid (see `access.rs`).
    pub token_ttl: Duration,
    /// Caps and deadlines of the listener's connections.
    pub connections: ConnLimits,
    /// systemd-boot's EFI binary, for virtual media ISOs.
    pub virtual_media_loader: PathBuf,
}

/// Token lifetime past the install deadline, when none is configured.
pub const TOKEN_TTL_MARGIN: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootConfigError {
    #[error("boot.listen {0:?} is not an ip:port address")]
    Listen(String),
    #[error("boot.{0} {1:?}: {2}")]
    BaseUrl(&'static str, String, String),
    #[error("boot.baseUrl is required when boot.listen is a wildcard address")]
    BaseUrlRequired,
    #[error("boot.kernelArgs[{0}]: {1}")]
    KernelArg(usize, UnsafeValue),
    #[error(transparent)]
    RouterAdvertisement(#[from] crate::ra::RaConfigError),
    #[error("boot.tokenTtlSeconds {0}: must be between 60 and 604800")]
    TokenTtl(u64),
    #[error("boot.{0} {1}: must be between {2} and {3}")]
    OutOfRange(&'static str, u64, u64, u64),
}

impl BootConfig {
    /// Validate into the settings the server runs with (tokens default to
    /// the default install deadline plus [`TOKEN_TTL_MARGIN`]).
    pub fn settings(&self, data_dir: &std::path::Path) -> Result<BootSettings, BootConfigError> {
        let deadline = crate::api::boot::BootDeadlines::default().install;
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
        let connections = self.connection_limits()?;
        let listen_s = self.listen.as_deref().unwrap_or("0.0.0.0:8080");
        let listen: SocketAddr = listen_s
            .parse()
            .map_err(|_| BootConfigError::Listen(listen_s.to_string()))?;
        let base_url = match &self.base_url {
            Some(u) => check_base_url("baseUrl", u)?,
            None if listen.ip().is_unspecified() => return Err(BootConfigError::BaseUrlRequired),
            None => check_base_url("baseUrl", &format!("http://{listen}"))?,
        };
        let base_url6 = match &self.base_url6 {
            Some(u) => Some(check_base_url("baseUrl6", u)?),
            None => None,
        };
        for (i, a) in self.kernel_args.iter().enumerate() {
            check_kernel_arg(a).map_err(|e| BootConfigError::KernelArg(i, e))?;
        }
        let router_advertisement = match &self.router_advertisement {
            None => None,
            Some(ra) => Some(RaSettings::try_from(ra)?),
        };
        Ok(BootSettings {
            listen,
            base_url,
            base_url6,
            assets_dir: self
                .assets_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("boot-assets")),
            data_dir: data_dir.to_path_buf(),
            kernel_args: self.kernel_args.clone(),
            wait_seconds: self.wait_seconds.unwrap_or(30).clamp(1, 3600),
            router_advertisement,
            token_ttl,
            connections,
            virtual_media_loader: self
                .virtual_media_loader
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::vmedia::SYSTEMD_BOOT)),
        })
    }

    fn connection_limits(&self) -> Result<ConnLimits, BootConfigError> {
        let d = ConnLimits::default();
        let within = |field: &'static str, v: Option<u64>, default: u64, lo: u64, hi: u64| match v {
            None => Ok(default),
            Some(v) if (lo..=hi).contains(&v) => Ok(v),
            Some(v) => Err(BootConfigError::OutOfRange(field, v, lo, hi)),
        };
        let count = |n: Option<usize>| n.map(|n| u64::try_from(n).unwrap_or(u64::MAX));
        let max = within(
            "maxConnections",
            count(self.max_connections),
            d.max as u64,
            1,
            65_536,
        )?;
        let per_client = within(
            "maxConnectionsPerClient",
            count(self.max_connections_per_client),
            d.per_client as u64,
            1,
            max,
        )?;
        let header = within(
            "headerTimeoutSeconds",
            self.header_timeout_seconds,
            d.header_timeout.as_secs(),
            1,
            3600,
        )?;
        let stall = within(
            "stallTimeoutSeconds",
            self.stall_timeout_seconds,
            d.stall_timeout.as_secs(),
            1,
            3600,
        )?;
        Ok(ConnLimits {
            max: max as usize,
            per_client: per_client as usize,
            header_timeout: Duration::from_secs(header),
            stall_timeout: Duration::from_secs(stall),
        })
    }
}

impl BootSettings {
    /// The base URL for the answer to a request from `peer`: `baseUrl6`
    /// when the peer is an IPv6 address (an IPv4-mapped one is IPv4) and
    /// `baseUrl6` is set, else `baseUrl`. A machine handed a URL is handed
    /// one of the family it came over, so it can reach it.
    pub fn base_url_for(&self, peer: std::net::IpAddr) -> &str {
        match (crate::directory::plain_ip(peer), &self.base_url6) {
            (std::net::IpAddr::V6(_), Some(u)) => u,
            _ => &self.base_url,
        }
    }
}

fn check_base_url(field: &'static str, u: &str) -> Result<String, BootConfigError> {
    let err = |m: &str| BootConfigError::BaseUrl(field, u.to_string(), m.to_string());
    let parsed = url::Url::parse(u).map_err(|e| err(&e.to_string()))?;
    if parsed.scheme() != "http" {
        // iPXE builds often lack TLS, and the token is per boot anyway.
        return Err(err("only http:// is supported for the boot network"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(err("must not have a query or fragment"));
    }
    let trimmed = u.trim_end_matches('/').to_string();
    super::script::check_url(&trimmed).map_err(|e| err(&e.to_string()))?;
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
    fn ipv6_peers_get_base_url6_when_set() {
        let tmp = std::path::Path::new("/tmp");
        let mut c = BootConfig {
            listen: Some("[::]:8080".into()),
            base_url: Some("http://10.1.0.1:8080/".into()),
            ..Default::default()
        };
        let s = c.settings(tmp).unwrap();
        assert_eq!(s.listen, "[::]:8080".parse().unwrap());
        let v6: std::net::IpAddr = "fd00:89::7".parse().unwrap();
        assert_eq!(s.base_url_for(v6), "http://10.1.0.1:8080", "no baseUrl6");
        c.base_url6 = Some("http://[fd00:89::1]:8080/".into());
        let s = c.settings(tmp).unwrap();
        assert_eq!(s.base_url_for(v6), "http://[fd00:89::1]:8080");
        for v4 in ["10.1.0.7", "::ffff:10.1.0.7"] {
            assert_eq!(s.base_url_for(v4.parse().unwrap()), "http://10.1.0.1:8080");
        }
        c.base_url6 = Some("http://[fd00:89::1]:8080/x y".into());
        let e = c.settings(tmp).unwrap_err().to_string();
        assert!(e.starts_with("boot.baseUrl6 "), "{e}");
        // The YAML key is `baseUrl6`.
        let c: BootConfig =
            serde_yaml::from_str("listen: '[::]:8080'\nbaseUrl: http://10.1.0.1:8080\nbaseUrl6: http://[fd00:89::1]:8080\n").unwrap();
        assert_eq!(c.base_url6.as_deref(), Some("http://[fd00:89::1]:8080"));
        // A specific IPv6 listen address is a base URL by itself.
        let c = BootConfig {
            listen: Some("[fd00:89::1]:8080".into()),
            ..Default::default()
        };
        assert_eq!(
            c.settings(tmp).unwrap().base_url,
            "http://[fd00:89::1]:8080"
        );
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

    #[test]
    fn connection_limits_default_and_are_bounded() {
        let tmp = std::path::Path::new("/tmp");
        let mut c = BootConfig {
            listen: Some("10.1.0.1:8080".into()),
            ..Default::default()
        };
        assert_eq!(c.settings(tmp).unwrap().connections, ConnLimits::default());
        c.max_connections = Some(10);
        c.max_connections_per_client = Some(4);
        c.header_timeout_seconds = Some(2);
        c.stall_timeout_seconds = Some(3);
        let l = c.settings(tmp).unwrap().connections;
        assert_eq!((l.max, l.per_client), (10, 4));
        assert_eq!(l.header_timeout, Duration::from_secs(2));
        assert_eq!(l.stall_timeout, Duration::from_secs(3));
        // A share above the total, a zero cap, a zero deadline: refused.
        c.max_connections_per_client = Some(11);
        let e = c.settings(tmp).unwrap_err().to_string();
        assert!(e.contains("boot.maxConnectionsPerClient 11"), "{e}");
        c.max_connections_per_client = None;
        c.max_connections = Some(0);
        assert!(c.settings(tmp).is_err());
        c.max_connections = None;
        c.header_timeout_seconds = Some(0);
        let e = c.settings(tmp).unwrap_err().to_string();
        assert!(e.contains("boot.headerTimeoutSeconds"), "{e}");
    }
}
