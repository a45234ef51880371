//! `boot.routerAdvertisement` of the config file: the wire form and its
//! checks into [`RaSettings`]. Without the optional keys the advertisement
//! is the minimal one (router lifetime 0, M and O clear, no prefix), as it
//! always was.
//!
//! ```yaml
//! boot:
//!   routerAdvertisement:
//!     interface: br0
//!     intervalSeconds: 10          # unsolicited ones; solicitations at once
//!     managed: true                # M: addresses from DHCPv6 (iPXE runs it)
//!     other: false                 # O: other settings from DHCPv6
//!     routerLifetimeSeconds: 0     # 0: not a default router
//!     prefixes:                    # Prefix Information options
//!     - prefix: fd00:89::/64
//!       onLink: true               # default true
//!       autonomous: false          # default false (no SLAAC address)
//!       validLifetimeSeconds: 86400      # default
//!       preferredLifetimeSeconds: 14400  # default
//! ```

use std::time::Duration;

use serde::Deserialize;

use super::RaSettings;
use super::advert::{Advertisement, Prefix};

/// Prefixes at most in one advertisement (32 bytes each).
pub const MAX_PREFIXES: usize = 16;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouterAdvertisementConfig {
    /// The boot interface (link) to advertise on.
    pub interface: String,
    /// Seconds between unsolicited advertisements (solicitations are
    /// answered at once); 10 by default.
    #[serde(default)]
    pub interval_seconds: Option<u32>,
    /// The M flag: hosts get addresses from DHCPv6. iPXE runs stateful
    /// DHCPv6 only when it is set. Default false.
    #[serde(default)]
    pub managed: bool,
    /// The O flag: hosts get other settings (DNS, boot URL) from DHCPv6;
    /// iPXE runs stateless DHCPv6 when only O is set. Default false.
    #[serde(default)]
    pub other: bool,
    /// Seconds hosts may use this host as a default router, 0 to 9000;
    /// default 0 (not a router: hosts reach only on-link prefixes).
    #[serde(default)]
    pub router_lifetime_seconds: Option<u16>,
    /// Prefixes to advertise (none by default).
    #[serde(default)]
    pub prefixes: Vec<PrefixConfig>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrefixConfig {
    /// `fd00:89::/64`; host bits must be zero.
    pub prefix: String,
    /// L: the prefix is on this link (default true).
    #[serde(default)]
    pub on_link: Option<bool>,
    /// A: hosts form their own address in it (default false; a /64 only).
    #[serde(default)]
    pub autonomous: Option<bool>,
    /// Seconds (default 86400; 4294967295 is infinity).
    #[serde(default)]
    pub valid_lifetime_seconds: Option<u32>,
    /// Seconds, at most the valid lifetime (default 14400, or the valid
    /// lifetime when that is shorter).
    #[serde(default)]
    pub preferred_lifetime_seconds: Option<u32>,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RaConfigError {
    #[error("boot.routerAdvertisement.interface {0:?} is not an interface name")]
    Interface(String),
    #[error("boot.routerAdvertisement.routerLifetimeSeconds {0}: must be at most 9000")]
    RouterLifetime(u16),
    #[error("boot.routerAdvertisement.prefixes: at most {MAX_PREFIXES}")]
    TooManyPrefixes,
    #[error("boot.routerAdvertisement.prefixes[{0}].prefix {1:?}: {2}")]
    Prefix(usize, String, &'static str),
    #[error(
        "boot.routerAdvertisement.prefixes[{0}]: preferredLifetimeSeconds {1} exceeds validLifetimeSeconds {2}"
    )]
    Lifetimes(usize, u32, u32),
}

const DEFAULT_VALID: u32 = 86_400;
const DEFAULT_PREFERRED: u32 = 14_400;

impl TryFrom<&RouterAdvertisementConfig> for RaSettings {
    type Error = RaConfigError;

    fn try_from(ra: &RouterAdvertisementConfig) -> Result<RaSettings, RaConfigError> {
        let ok = !ra.interface.is_empty()
            && ra.interface.len() < 16
            && ra
                .interface
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(RaConfigError::Interface(ra.interface.clone()));
        }
        let router_lifetime = ra.router_lifetime_seconds.unwrap_or(0);
        if router_lifetime > 9000 {
            return Err(RaConfigError::RouterLifetime(router_lifetime));
        }
        if ra.prefixes.len() > MAX_PREFIXES {
            return Err(RaConfigError::TooManyPrefixes);
        }
        let mut prefixes = Vec::with_capacity(ra.prefixes.len());
        for (i, p) in ra.prefixes.iter().enumerate() {
            let bad = |why| RaConfigError::Prefix(i, p.prefix.clone(), why);
            let net: ipnet::Ipv6Net = p
                .prefix
                .parse()
                .map_err(|_| bad("not an IPv6 prefix (expected fd00:89::/64)"))?;
            if net.trunc() != net {
                return Err(bad("host bits are set (write the network, fd00:89::/64)"));
            }
            let valid = p.valid_lifetime_seconds.unwrap_or(DEFAULT_VALID);
            let preferred = p
                .preferred_lifetime_seconds
                .unwrap_or(DEFAULT_PREFERRED.min(valid));
            if preferred > valid {
                return Err(RaConfigError::Lifetimes(i, preferred, valid));
            }
            prefixes.push(Prefix {
                prefix: net,
                on_link: p.on_link.unwrap_or(true),
                autonomous: p.autonomous.unwrap_or(false),
                valid_lifetime: valid,
                preferred_lifetime: preferred,
            });
        }
        Ok(RaSettings {
            interface: ra.interface.clone(),
            interval: Duration::from_secs(u64::from(
                ra.interval_seconds.unwrap_or(10).clamp(1, 1800),
            )),
            advertisement: Advertisement {
                managed: ra.managed,
                other: ra.other,
                router_lifetime,
                prefixes,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<RaSettings, RaConfigError> {
        let c: RouterAdvertisementConfig = serde_yaml::from_str(yaml).unwrap();
        RaSettings::try_from(&c)
    }

    #[test]
    fn only_an_interface_keeps_the_minimal_advertisement() {
        let s = read("interface: br0").unwrap();
        assert_eq!(s.interface, "br0");
        assert_eq!(s.interval, Duration::from_secs(10));
        assert_eq!(s.advertisement, Advertisement::default());
    }

    #[test]
    fn flags_lifetime_and_prefixes_are_read_with_their_defaults() {
        let s = read(
            "interface: br0\nmanaged: true\nother: true\nrouterLifetimeSeconds: 1800\nprefixes:\n- prefix: fd00:89::/64\n- prefix: 2001:db8::/64\n  onLink: false\n  autonomous: true\n  validLifetimeSeconds: 600\n",
        )
        .unwrap();
        let a = &s.advertisement;
        assert!(a.managed && a.other);
        assert_eq!(a.router_lifetime, 1800);
        assert_eq!(
            a.prefixes,
            vec![
                Prefix {
                    prefix: "fd00:89::/64".parse().unwrap(),
                    on_link: true,
                    autonomous: false,
                    valid_lifetime: 86_400,
                    preferred_lifetime: 14_400,
                },
                Prefix {
                    prefix: "2001:db8::/64".parse().unwrap(),
                    on_link: false,
                    autonomous: true,
                    valid_lifetime: 600,
                    preferred_lifetime: 600,
                },
            ]
        );
    }

    #[test]
    fn bad_values_name_their_field() {
        let e = |y: &str| read(y).unwrap_err().to_string();
        assert!(e("interface: 'a b'").contains("interface"));
        assert!(
            e("interface: br0\nrouterLifetimeSeconds: 9001").contains("routerLifetimeSeconds 9001")
        );
        assert!(
            e("interface: br0\nprefixes: [{prefix: 10.0.0.0/24}]").contains("prefixes[0].prefix")
        );
        assert!(e("interface: br0\nprefixes: [{prefix: 'fd00:89::1/64'}]").contains("host bits"));
        assert!(
            e("interface: br0\nprefixes: [{prefix: 'fd00::/64', validLifetimeSeconds: 10, preferredLifetimeSeconds: 20}]")
                .contains("preferredLifetimeSeconds 20 exceeds")
        );
        let many: String = (0..17)
            .map(|i| format!("- prefix: 'fd00:{i:x}::/64'\n"))
            .collect();
        assert!(e(&format!("interface: br0\nprefixes:\n{many}")).contains("at most 16"));
        let c: Result<RouterAdvertisementConfig, _> =
            serde_yaml::from_str("interface: br0\nmanagedd: true");
        assert!(c.is_err(), "unknown keys are refused");
    }
}
