//! DHCPv6 configuration: the `dhcp6:` section of the config file as serde
//! wire types ([`Dhcp6Config`]), turned into validated [`Dhcp6Settings`]
//! with `TryFrom`, so the server starts with clear errors or not at all.
//! No I/O here: the interface's addresses are resolved by the driver.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use ipnet::Ipv6Net;
use serde::Deserialize;

use super::message::Duid;
use crate::dhcp::config::{
    DhcpMode, LeaseSyncConfig, LeaseSyncMode, default_boot_files, default_secure_boot_files,
    merge_files,
};
use crate::dhcp::lease_store::LeaseSync;
use crate::dhcp::limit::{RateLimitConfig, RateLimits};

/// Wire form of the `dhcp6:` section.
///
/// ```yaml
/// dhcp6:
///   interface: eth1
///   mode: authoritative            # or proxy (boot options only)
///   serverAddress: fd00:89::1      # the TFTP server in tftp:// URLs (default: the
///                                  # interface's first non-link-local IPv6)
///   httpBootUrl: "http://[fd00:89::1]:8080"
///   ipxeScriptUrl: "http://[fd00:89::1]:8080/boot.ipxe?mac={mac}&arch={arch}"
///   bootFiles: {7: ipxe.efi, 16: ipxe.efi}
///   discovery: {enabled: true, validLifetime: 600}
///   subnets:
///     - subnet: fd00:89::/64
///       ranges: [{start: "fd00:89::1:0", end: "fd00:89::1:ffff"}]
///       preferredLifetime: 3000
///       validLifetime: 3600
///       dns: [fd00:89::1]
///       relays: [fd00:90::1]       # link-address of relays answered for it
///       reservations:
///         - {duid: "00:04:8a:...", address: "fd00:89::20"}
///         - {mac: "52:54:00:12:34:56", address: "fd00:89::21"}
///   leaseSync: {mode: batch, intervalMs: 1000}
///   rateLimit: {perClientPerSecond: 20, perClientBurst: 40, globalPerSecond: 50000}
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dhcp6Config {
    /// Interface to serve on (SO_BINDTODEVICE, ff02::1:2 joined on it).
    #[serde(default)]
    pub interface: String,
    #[serde(default)]
    pub mode: DhcpMode,
    /// Our DUID (hex bytes, `00:03:00:01:...`); default: DUID-LL of the
    /// interface's MAC. Replicas that share leases should share it.
    #[serde(default)]
    pub server_duid: Option<String>,
    /// Our address in `tftp://[...]` boot URLs; never link-local (EDK2
    /// cannot read a zone). Default: the interface's first ULA/global.
    #[serde(default)]
    pub server_address: Option<Ipv6Addr>,
    /// Base URL of the boot HTTP server as IPv6 clients reach it.
    #[serde(default)]
    pub http_boot_url: Option<String>,
    /// URL handed to iPXE; `{mac}` and `{arch}` are replaced. Default:
    /// `{httpBootUrl}/boot.ipxe?mac={mac}&arch={arch}`.
    #[serde(default)]
    pub ipxe_script_url: Option<String>,
    /// Boot file by client architecture (option 61); merged over the
    /// defaults DHCPv4 uses.
    #[serde(default)]
    pub boot_files: BTreeMap<u16, String>,
    #[serde(default)]
    pub secure_boot_files: BTreeMap<u16, String>,
    #[serde(default)]
    pub discovery: Discovery6Config,
    #[serde(default)]
    pub subnets: Vec<Subnet6Config>,
    /// Preference option (7) in Advertise; default 255 in authoritative
    /// mode (EDK2 takes such an offer at once instead of collecting for
    /// four seconds), none in proxy mode (EDK2 must keep collecting until
    /// the site server's offer arrives).
    #[serde(default)]
    pub preference: Option<u8>,
    /// Answer a Solicit with Rapid Commit (2-message exchange) when the
    /// client asks for it (default false).
    #[serde(default)]
    pub rapid_commit: Option<bool>,
    /// Seconds an Advertise reserves its address (default 60).
    #[serde(default)]
    pub offer_hold_seconds: Option<u32>,
    /// In proxy mode, also answer EDK2 PXE's boot-service Request on port
    /// 4011 (default true).
    #[serde(default)]
    pub proxy_port_4011: Option<bool>,
    #[serde(default)]
    pub lease_sync: LeaseSyncConfig,
    #[serde(default)]
    pub rate_limit: RateLimitConfig,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery6Config {
    /// Lease addresses to clients that are no known Machine (default false).
    #[serde(default)]
    pub enabled: bool,
    /// Valid lifetime for them (default 600 s).
    #[serde(default)]
    pub valid_lifetime: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subnet6Config {
    pub subnet: String,
    #[serde(default)]
    pub ranges: Vec<Range6Config>,
    #[serde(default)]
    pub preferred_lifetime: Option<u32>,
    #[serde(default)]
    pub valid_lifetime: Option<u32>,
    #[serde(default)]
    pub dns: Vec<Ipv6Addr>,
    /// Relay agents (the link-address they put in Relay-forward) whose
    /// requests are answered from this subnet. None: no relayed request is.
    #[serde(default)]
    pub relays: Vec<Ipv6Addr>,
    #[serde(default)]
    pub reservations: Vec<Reservation6Config>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Range6Config {
    pub start: Ipv6Addr,
    pub end: Ipv6Addr,
}

/// A fixed address for a client that is no Machine: by DUID or by MAC.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reservation6Config {
    #[serde(default)]
    pub duid: Option<String>,
    #[serde(default)]
    pub mac: Option<String>,
    pub address: Ipv6Addr,
}

/// Whom a configured reservation is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReservedFor {
    Duid(Duid),
    Mac([u8; 6]),
}

/// A validated subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet6 {
    pub net: Ipv6Net,
    /// Inclusive ranges inside `net`, non-overlapping.
    pub ranges: Vec<(u128, u128)>,
    pub preferred: u32,
    pub valid: u32,
    pub dns: Vec<Ipv6Addr>,
    pub relays: Vec<Ipv6Addr>,
    pub reservations: Vec<(ReservedFor, Ipv6Addr)>,
}

impl Subnet6 {
    pub fn pool_size(&self) -> u128 {
        self.ranges
            .iter()
            .map(|(s, e)| (e - s).saturating_add(1))
            .fold(0u128, u128::saturating_add)
    }

    pub fn in_pool(&self, a: Ipv6Addr) -> bool {
        let n = u128::from(a);
        self.ranges.iter().any(|(s, e)| (*s..=*e).contains(&n))
    }

    /// The `n`th pool address (`n` < [`Subnet6::pool_size`]).
    pub fn nth(&self, mut n: u128) -> Option<Ipv6Addr> {
        for (s, e) in &self.ranges {
            let len = (e - s).saturating_add(1);
            if n < len {
                return Some(Ipv6Addr::from(s + n));
            }
            n -= len;
        }
        None
    }
}

/// Validated DHCPv6 settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dhcp6Settings {
    pub interface: String,
    pub mode: DhcpMode,
    pub server_duid: Option<Duid>,
    pub server_address: Option<Ipv6Addr>,
    pub http_boot_url: Option<String>,
    pub ipxe_script_url: Option<String>,
    pub boot_files: BTreeMap<u16, String>,
    pub secure_boot_files: BTreeMap<u16, String>,
    pub discovery: bool,
    pub discovery_valid: u32,
    pub subnets: Vec<Subnet6>,
    pub preference: Option<u8>,
    pub rapid_commit: bool,
    pub offer_hold: u32,
    pub proxy_port_4011: bool,
    pub lease_sync: LeaseSync,
    pub rate_limit: RateLimits,
}

/// What is wrong with a `dhcp6:` section; the message names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("dhcp6.{field}: {message}")]
pub struct Config6Error {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> Config6Error {
    Config6Error {
        field: field.into(),
        message: message.into(),
    }
}

const MAX_LIFETIME: u32 = 365 * 24 * 3600;

fn lifetime(field: &str, t: Option<u32>, default: u32) -> Result<u32, Config6Error> {
    let t = t.unwrap_or(default);
    if !(10..=MAX_LIFETIME).contains(&t) {
        return Err(err(field, format!("must be 10..={MAX_LIFETIME} seconds")));
    }
    Ok(t)
}

fn check_url(field: &str, s: &str) -> Result<(), Config6Error> {
    let u = url::Url::parse(s).map_err(|e| err(field, format!("not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(err(field, "must be an http:// or https:// URL"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(field, "must not contain whitespace"));
    }
    Ok(())
}

/// `aa:bb:...` (or without colons) as bytes.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let digits: String = s.chars().filter(|c| *c != ':' && *c != '-').collect();
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(digits.get(i..i + 2)?, 16).ok())
        .collect()
}

fn duid(field: &str, s: &str) -> Result<Duid, Config6Error> {
    match parse_hex(s) {
        Some(b) if (3..=130).contains(&b.len()) => Ok(Duid(b)),
        _ => Err(err(
            field,
            "must be 3..=130 hex bytes, e.g. 00:03:00:01:52:54:00:12:34:56",
        )),
    }
}

fn reservation(
    f: &str,
    net: &Ipv6Net,
    r: &Reservation6Config,
) -> Result<(ReservedFor, Ipv6Addr), Config6Error> {
    let who = match (&r.duid, &r.mac) {
        (Some(d), None) => ReservedFor::Duid(duid(&format!("{f}.duid"), d)?),
        (None, Some(m)) => {
            let mac = m
                .parse::<crate::api::MacAddr>()
                .map_err(|_| err(format!("{f}.mac"), "not a MAC address"))?;
            ReservedFor::Mac(mac.octets())
        }
        _ => return Err(err(f, "needs exactly one of duid and mac")),
    };
    if !net.contains(&r.address) {
        return Err(err(format!("{f}.address"), format!("not inside {net}")));
    }
    Ok((who, r.address))
}

fn subnet_from(i: usize, s: &Subnet6Config) -> Result<Subnet6, Config6Error> {
    let f = |name: &str| format!("subnets[{i}].{name}");
    let net: Ipv6Net = s
        .subnet
        .parse()
        .map_err(|_| err(f("subnet"), format!("{:?} is not an IPv6 CIDR", s.subnet)))?;
    let net = net.trunc();
    if net.prefix_len() > 126 {
        return Err(err(f("subnet"), "prefix must be /126 or shorter"));
    }
    if net.addr().is_unicast_link_local() || net.addr().is_multicast() {
        return Err(err(f("subnet"), "must be a ULA or global prefix"));
    }
    let mut ranges: Vec<(u128, u128)> = Vec::new();
    for (j, r) in s.ranges.iter().enumerate() {
        let (a, b) = (u128::from(r.start), u128::from(r.end));
        let rf = format!("subnets[{i}].ranges[{j}]");
        if a > b {
            return Err(err(rf, "start is after end"));
        }
        if !net.contains(&r.start) || !net.contains(&r.end) {
            return Err(err(rf, format!("not inside {net}")));
        }
        if r.start == net.network() {
            return Err(err(
                rf,
                "must not include the subnet-router anycast address",
            ));
        }
        if ranges.iter().any(|&(x, y)| a <= y && x <= b) {
            return Err(err(rf, "overlaps another range"));
        }
        ranges.push((a, b));
    }
    let valid = lifetime(&f("validLifetime"), s.valid_lifetime, 3600)?;
    let preferred = lifetime(&f("preferredLifetime"), s.preferred_lifetime, valid / 6 * 5)?;
    if preferred > valid {
        return Err(err(f("preferredLifetime"), "must not exceed validLifetime"));
    }
    for (j, r) in s.relays.iter().enumerate() {
        if r.is_unspecified() || r.is_multicast() {
            return Err(err(
                format!("subnets[{i}].relays[{j}]"),
                "must be a relay's unicast link-address",
            ));
        }
    }
    let reservations = s
        .reservations
        .iter()
        .enumerate()
        .map(|(j, r)| reservation(&format!("subnets[{i}].reservations[{j}]"), &net, r))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Subnet6 {
        net,
        ranges,
        preferred,
        valid,
        dns: s.dns.clone(),
        relays: s.relays.clone(),
        reservations,
    })
}

/// The boot-file table with the config's entries over it, checked as
/// `dhcp:`'s are (`field` names the key in errors).
fn merge(
    field: &str,
    files: BTreeMap<u16, String>,
    extra: BTreeMap<u16, String>,
) -> Result<BTreeMap<u16, String>, Config6Error> {
    merge_files(field, files, extra).map_err(|e| err(e.field, e.message))
}

impl TryFrom<Dhcp6Config> for Dhcp6Settings {
    type Error = Config6Error;

    fn try_from(c: Dhcp6Config) -> Result<Self, Config6Error> {
        if c.interface.is_empty() || c.interface.len() > 15 || c.interface.contains('/') {
            return Err(err(
                "interface",
                "required: the name of the boot network interface (at most 15 bytes)",
            ));
        }
        if let Some(u) = &c.http_boot_url {
            check_url("httpBootUrl", u)?;
        }
        if let Some(u) = &c.ipxe_script_url {
            check_url(
                "ipxeScriptUrl",
                &u.replace("{mac}", "m").replace("{arch}", "0"),
            )?;
        }
        if let Some(a) = c.server_address
            && (a.is_unicast_link_local() || a.is_multicast() || a.is_unspecified())
        {
            return Err(err(
                "serverAddress",
                "must be a ULA or global address (firmware cannot use a link-local one in a URL)",
            ));
        }
        let server_duid = c
            .server_duid
            .as_deref()
            .map(|d| duid("serverDuid", d))
            .transpose()?;
        let subnets = c
            .subnets
            .iter()
            .enumerate()
            .map(|(i, s)| subnet_from(i, s))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, a) in subnets.iter().enumerate() {
            if subnets[..i]
                .iter()
                .any(|b| a.net.contains(&b.net) || b.net.contains(&a.net))
            {
                return Err(err(
                    format!("subnets[{i}].subnet"),
                    "overlaps another subnet",
                ));
            }
        }
        if c.mode == DhcpMode::Authoritative && subnets.is_empty() {
            return Err(err(
                "subnets",
                "authoritative mode needs at least one subnet",
            ));
        }
        let offer_hold = c.offer_hold_seconds.unwrap_or(60);
        if !(1..=3600).contains(&offer_hold) {
            return Err(err("offerHoldSeconds", "must be 1..=3600"));
        }
        let lease_sync = match (c.lease_sync.mode, c.lease_sync.interval_ms) {
            (LeaseSyncMode::Always, None) => LeaseSync::Always,
            (LeaseSyncMode::Always, Some(_)) => {
                return Err(err("leaseSync.intervalMs", "only applies to mode batch"));
            }
            (LeaseSyncMode::Batch, ms) => {
                let ms = ms.unwrap_or(1000);
                if !(1..=60_000).contains(&ms) {
                    return Err(err(
                        "leaseSync.intervalMs",
                        "must be 1..=60000 milliseconds",
                    ));
                }
                LeaseSync::Batch {
                    interval: std::time::Duration::from_millis(ms),
                }
            }
        };
        let rate_limit = c
            .rate_limit
            .validate()
            .map_err(|e| err(e.field, e.message))?;
        Ok(Dhcp6Settings {
            interface: c.interface,
            preference: match (c.preference, c.mode) {
                (Some(p), _) => Some(p),
                (None, DhcpMode::Authoritative) => Some(255),
                (None, DhcpMode::Proxy) => None,
            },
            mode: c.mode,
            server_duid,
            server_address: c.server_address,
            http_boot_url: c.http_boot_url.map(|u| u.trim_end_matches('/').to_string()),
            ipxe_script_url: c.ipxe_script_url,
            boot_files: merge("bootFiles", default_boot_files(), c.boot_files)?,
            secure_boot_files: merge(
                "secureBootFiles",
                default_secure_boot_files(),
                c.secure_boot_files,
            )?,
            discovery: c.discovery.enabled,
            discovery_valid: lifetime("discovery.validLifetime", c.discovery.valid_lifetime, 600)?,
            subnets,
            rapid_commit: c.rapid_commit.unwrap_or(false),
            offer_hold,
            proxy_port_4011: c.proxy_port_4011.unwrap_or(true),
            lease_sync,
            rate_limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(y: &str) -> Result<Dhcp6Settings, Config6Error> {
        let c: Dhcp6Config = serde_yaml::from_str(y).unwrap();
        Dhcp6Settings::try_from(c)
    }

    #[test]
    fn boot_files_are_checked_as_dhcp_checks_them() {
        let s = parse("interface: eth1\nmode: proxy\nbootFiles: {16: http.efi}\n").unwrap();
        assert_eq!(s.boot_files.get(&16).map(String::as_str), Some("http.efi"));
        let e = parse("interface: eth1\nmode: proxy\nbootFiles: {7: \"a b.efi\"}\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "dhcp6.bootFiles.7: must be 1..127 bytes without whitespace"
        );
    }

    #[test]
    fn a_full_section_validates() {
        let s = parse(
            r#"
interface: eth1
httpBootUrl: "http://[fd00:89::1]:8080/"
subnets:
  - subnet: fd00:89::/64
    ranges: [{start: "fd00:89::1:0", end: "fd00:89::1:ffff"}]
    dns: ["fd00:89::1"]
    reservations:
      - {duid: "00:04:01:02:03", address: "fd00:89::20"}
      - {mac: "52:54:00:12:34:56", address: "fd00:89::21"}
"#,
        )
        .unwrap();
        assert_eq!(s.preference, Some(255));
        assert_eq!(s.http_boot_url.as_deref(), Some("http://[fd00:89::1]:8080"));
        let sub = &s.subnets[0];
        assert_eq!(sub.pool_size(), 65_536);
        assert_eq!(sub.nth(1), Some("fd00:89::1:1".parse().unwrap()));
        assert!(sub.in_pool("fd00:89::1:ff".parse().unwrap()));
        assert_eq!((sub.valid, sub.preferred), (3600, 3000));
        assert_eq!(
            sub.reservations[0].0,
            ReservedFor::Duid(Duid(vec![0, 4, 1, 2, 3]))
        );
        assert_eq!(
            sub.reservations[1].0,
            ReservedFor::Mac([0x52, 0x54, 0, 0x12, 0x34, 0x56])
        );
    }

    #[test]
    fn proxy_mode_sends_no_preference_and_needs_no_subnet() {
        let s = parse("interface: eth1\nmode: proxy\n").unwrap();
        assert_eq!(s.preference, None);
        assert!(s.proxy_port_4011);
    }

    #[test]
    fn mistakes_name_their_field() {
        let cases = [
            ("subnets: []", "dhcp6.interface"),
            ("interface: eth1", "dhcp6.subnets"),
            (
                "interface: eth1\nsubnets: [{subnet: \"fe80::/64\"}]",
                "dhcp6.subnets[0].subnet",
            ),
            (
                "interface: eth1\nsubnets: [{subnet: \"fd00::/64\", ranges: [{start: \"fd01::1\", end: \"fd01::2\"}]}]",
                "dhcp6.subnets[0].ranges[0]",
            ),
            (
                "interface: eth1\nserverAddress: \"fe80::1\"\nsubnets: [{subnet: \"fd00::/64\"}]",
                "dhcp6.serverAddress",
            ),
            (
                "interface: eth1\nsubnets: [{subnet: \"fd00::/64\", reservations: [{address: \"fd00::5\"}]}]",
                "dhcp6.subnets[0].reservations[0]",
            ),
            (
                "interface: eth1\nsubnets: [{subnet: \"fd00::/64\", validLifetime: 100, preferredLifetime: 200}]",
                "dhcp6.subnets[0].preferredLifetime",
            ),
        ];
        for (y, field) in cases {
            let e = parse(y).unwrap_err().to_string();
            assert!(e.starts_with(field), "{y}: {e}");
        }
        let unknown: Result<Dhcp6Config, _> = serde_yaml::from_str("interface: eth1\nbogus: 1");
        assert!(unknown.is_err(), "unknown fields are refused");
    }
}
