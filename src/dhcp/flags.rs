//! `metalherd serve` flags for the common DHCP settings, applied over the
//! config file's `dhcp:` section (flags win). Validation of the result is
//! the section's own (`config`); errors here name the flag. No I/O.

use super::config::{ConfigError, DhcpConfig, DhcpMode, LeaseSyncMode, err};

/// `metalherd serve` flags for the common DHCP settings; each one given
/// overrides the config file's value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DhcpFlags {
    /// `--dhcp-interface`
    pub interface: Option<String>,
    /// `--dhcp-mode`: `authoritative` or `proxy`.
    pub mode: Option<String>,
    /// `--dhcp-server-address`
    pub server_address: Option<String>,
    /// `--dhcp-lease-sync`: `batch` or `always`.
    pub lease_sync: Option<String>,
}

impl DhcpFlags {
    pub fn is_empty(&self) -> bool {
        *self == DhcpFlags::default()
    }

    /// The `dhcp:` section with the flags applied. Flags alone (no section)
    /// start DHCP with the file's defaults; the result is validated later
    /// by `DhcpSettings::try_from` like any section. Errors name the flag.
    pub fn apply(&self, file: Option<DhcpConfig>) -> Result<Option<DhcpConfig>, ConfigError> {
        if self.is_empty() {
            return Ok(file);
        }
        let mut c = file.unwrap_or_default();
        if let Some(i) = &self.interface {
            if i.is_empty() || i.len() > 15 || i.contains('/') || i.contains(char::is_whitespace) {
                return Err(err(
                    "--dhcp-interface",
                    format!("{i:?} is not an interface name (1..15 bytes, no '/' or spaces)"),
                ));
            }
            c.interface = i.clone();
        }
        if let Some(m) = &self.mode {
            c.mode = match m.as_str() {
                "authoritative" => DhcpMode::Authoritative,
                "proxy" => DhcpMode::Proxy,
                _ => {
                    return Err(err(
                        "--dhcp-mode",
                        format!("{m:?}: expected authoritative or proxy"),
                    ));
                }
            };
        }
        if let Some(a) = &self.server_address {
            c.server_address = Some(a.parse().map_err(|_| {
                err(
                    "--dhcp-server-address",
                    format!("{a:?} is not an IPv4 address"),
                )
            })?);
        }
        if let Some(m) = &self.lease_sync {
            c.lease_sync.mode = match m.as_str() {
                "batch" => LeaseSyncMode::Batch,
                "always" => {
                    c.lease_sync.interval_ms = None;
                    LeaseSyncMode::Always
                }
                _ => {
                    return Err(err(
                        "--dhcp-lease-sync",
                        format!("{m:?}: expected batch or always"),
                    ));
                }
            };
        }
        Ok(Some(c))
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::dhcp::config::DhcpSettings;
    use crate::dhcp::lease_store::LeaseSync;

    #[test]
    fn flags_override_the_file_and_name_themselves_in_errors() {
        let file: DhcpConfig = serde_yaml::from_str(
            "interface: eth1\nsubnets: [{subnet: 10.0.0.0/24}]\nleaseSync: {intervalMs: 50}\n",
        )
        .unwrap();
        let none = DhcpFlags::default();
        assert_eq!(none.apply(None).unwrap().map(|c| c.interface), None);
        let f = DhcpFlags {
            interface: Some("eth9".into()),
            mode: Some("proxy".into()),
            server_address: Some("10.0.0.2".into()),
            lease_sync: Some("always".into()),
        };
        let s = DhcpSettings::try_from(f.apply(Some(file.clone())).unwrap().unwrap()).unwrap();
        assert_eq!(s.interface, "eth9");
        assert_eq!(s.mode, DhcpMode::Proxy);
        assert_eq!(s.server_address, Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(s.lease_sync, LeaseSync::Always);
        assert_eq!(s.subnets.len(), 1, "the rest comes from the file");
        // Flags alone: a proxy needs nothing else.
        let only = DhcpFlags {
            interface: Some("eth0".into()),
            mode: Some("proxy".into()),
            ..DhcpFlags::default()
        };
        assert!(DhcpSettings::try_from(only.apply(None).unwrap().unwrap()).is_ok());
        for (f, field) in [
            (
                DhcpFlags {
                    mode: Some("relay".into()),
                    ..DhcpFlags::default()
                },
                "--dhcp-mode",
            ),
            (
                DhcpFlags {
                    interface: Some("a/b".into()),
                    ..DhcpFlags::default()
                },
                "--dhcp-interface",
            ),
            (
                DhcpFlags {
                    server_address: Some("x".into()),
                    ..DhcpFlags::default()
                },
                "--dhcp-server-address",
            ),
            (
                DhcpFlags {
                    lease_sync: Some("never".into()),
                    ..DhcpFlags::default()
                },
                "--dhcp-lease-sync",
            ),
        ] {
            let e = f.apply(Some(file.clone())).unwrap_err();
            assert_eq!(e.field, field);
            assert!(e.to_string().starts_with(&format!("{field}: ")), "{e}");
        }
    }
}
