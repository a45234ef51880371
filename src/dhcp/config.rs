//! DHCP configuration: the `dhcp:` section of the config file as serde wire
//! types ([`DhcpConfig`]), turned into validated [`DhcpSettings`] with
//! `TryFrom` so the server starts with clear errors or not at all.
//! No I/O here: the interface address is resolved by the driver.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;

use super::lease_store::LeaseSync;

/// Wire form of the `dhcp:` section.
///
/// ```yaml
/// dhcp:
///   interface: eth1
///   mode: authoritative          # or proxy
///   nextServer: 10.0.0.1         # siaddr / TFTP server (default: our address)
///   httpBootUrl: http://10.0.0.1:8080
///   ipxeScriptUrl: "http://10.0.0.1:8080/boot.ipxe?mac={mac}&arch={arch}"
///   bootFiles: {0: undionly.kpxe, 7: ipxe.efi, 9: ipxe.efi, 11: arm64/ipxe.efi}
///   discovery: {enabled: true, leaseTime: 600, maxRecorded: 1024, recordTtlSeconds: 86400}
///   subnets:
///     - subnet: 10.0.0.0/24
///       ranges: [{start: 10.0.0.100, end: 10.0.0.199}]
///       router: 10.0.0.1
///       dns: [10.0.0.1]
///       domain: lab.example
///       leaseTime: 3600
///     - subnet: 10.0.1.0/24                # behind a relay
///       ranges: [{start: 10.0.1.100, end: 10.0.1.199}]
///       relays: [10.0.1.1]                 # giaddr values answered for it
///   leaseSync: {mode: batch, intervalMs: 1000}   # or {mode: always}
///   rateLimit: {perClientPerSecond: 20, perClientBurst: 40, globalPerSecond: 50000}
///   ipxeNoProxyDhcp: true        # iPXE need not wait for a ProxyDHCP offer
///   pingCheck: {enabled: true, timeoutMs: 500}   # default: on with leader election
/// ```
///
/// `leaseSync` says when lease writes reach stable storage (see
/// `lease_store`): `batch` (default) writes each batch to the lease journal
/// before the replies go out and flushes it every `intervalMs` (kill -9
/// safe; a power loss may lose the last interval's leases); `always`
/// flushes before every reply that depends on a write (power-loss safe).
///
/// A relayed request (giaddr set) is answered only when a subnet lists that
/// giaddr under `relays` (the relay agent's address on the clients'
/// subnet, so inside it); any other is dropped and counted
/// (`drops{reason="unlisted_relay"}`), so a host on the boot network cannot
/// pick a subnet by claiming to be a relay.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DhcpConfig {
    /// Interface to serve on (SO_BINDTODEVICE).
    #[serde(default)]
    pub interface: String,
    #[serde(default)]
    pub mode: DhcpMode,
    /// Our address (server identifier); default: the interface's first IPv4.
    #[serde(default)]
    pub server_address: Option<Ipv4Addr>,
    /// siaddr and option 66 for TFTP; default: our address.
    #[serde(default)]
    pub next_server: Option<Ipv4Addr>,
    /// Base URL of the boot HTTP server (UEFI HTTP boot files, iPXE script).
    #[serde(default)]
    pub http_boot_url: Option<String>,
    /// URL handed to iPXE; `{mac}` (aa:bb:..) and `{arch}` are replaced.
    /// Default: `{httpBootUrl}/boot.ipxe?mac={mac}&arch={arch}`.
    #[serde(default)]
    pub ipxe_script_url: Option<String>,
    /// Boot file by option-93 architecture code; merged over the defaults.
    #[serde(default)]
    pub boot_files: BTreeMap<u16, String>,
    /// Boot file for a Machine whose firmware enforces Secure Boot, by
    /// option-93 architecture code; merged over the defaults (the
    /// Microsoft-signed shim, `shimx64.efi`, for x86-64 UEFI PXE). A site
    /// that signs its own iPXE names it here.
    #[serde(default)]
    pub secure_boot_files: BTreeMap<u16, String>,
    #[serde(default)]
    pub discovery: DiscoveryConfig,
    #[serde(default)]
    pub subnets: Vec<SubnetConfig>,
    /// Seconds an OFFER reserves its address (default 60).
    #[serde(default)]
    pub offer_hold_seconds: Option<u32>,
    /// In proxy mode, also answer on port 4011 (default true).
    #[serde(default)]
    pub proxy_port_4011: Option<bool>,
    /// In authoritative mode, tell iPXE in its ACKs and OFFERs (option
    /// 175.176, `no-pxedhcp`) that no ProxyDHCP offer will come, so it does
    /// not wait up to three seconds for one on every boot (default true).
    /// Turn it off only when another server on the network answers iPXE as
    /// ProxyDHCP.
    #[serde(default)]
    pub ipxe_no_proxy_dhcp: Option<bool>,
    /// Before offering a dynamic address this server holds no lease record
    /// of, ping it (ICMP echo) and offer it only if nothing answers: for a
    /// lease time after the boot services start, since a previous instance
    /// (another replica before a failover) may have leased it. See
    /// `probe.rs`. Default: on with leader election, off otherwise.
    #[serde(default)]
    pub ping_check: PingCheckConfig,
    /// When lease writes are flushed to disk.
    #[serde(default)]
    pub lease_sync: LeaseSyncConfig,
    /// Per-client and global packet rate limits (see `limit.rs`).
    #[serde(default)]
    pub rate_limit: super::limit::RateLimitConfig,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PingCheckConfig {
    /// Absent: on when replicas elect a leader (Kubernetes mode).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// How long to wait for an echo reply (default 500 ms).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseSyncMode {
    /// Journal before replying, flush in the background (kill -9 safe).
    #[default]
    Batch,
    /// Flush before replying (power-loss safe).
    Always,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseSyncConfig {
    #[serde(default)]
    pub mode: LeaseSyncMode,
    /// Background flush interval in `batch` mode (default 1000 ms).
    #[serde(default)]
    pub interval_ms: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DhcpMode {
    /// The DHCP server of the provisioning network: addresses and boot info.
    #[default]
    Authoritative,
    /// Next to an existing DHCP server: boot information only, never an address.
    Proxy,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiscoveryConfig {
    #[serde(default)]
    pub enabled: bool,
    /// Lease time for unknown clients (default 600 s).
    #[serde(default)]
    pub lease_time: Option<u32>,
    /// Record unknown clients as DiscoveredMachine objects (default true).
    #[serde(default)]
    pub record: Option<bool>,
    /// DiscoveredMachine objects kept at most (default 1024, 1..=100000):
    /// past it new clients are not recorded (a flood of random MACs leaves
    /// at most this many).
    #[serde(default)]
    pub max_recorded: Option<usize>,
    /// A DiscoveredMachine not seen for this long is deleted (default
    /// 86400, 60..=31536000).
    #[serde(default)]
    pub record_ttl_seconds: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubnetConfig {
    pub subnet: String,
    #[serde(default)]
    pub ranges: Vec<RangeConfig>,
    #[serde(default)]
    pub router: Option<Ipv4Addr>,
    #[serde(default)]
    pub dns: Vec<Ipv4Addr>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub lease_time: Option<u32>,
    /// Relay agents (their giaddr) whose requests are answered from this
    /// subnet; each inside the subnet. None: no relayed request is.
    #[serde(default)]
    pub relays: Vec<Ipv4Addr>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RangeConfig {
    pub start: Ipv4Addr,
    pub end: Ipv4Addr,
}

/// Option-93 architecture codes (RFC 4578, IANA registry).
pub mod arch {
    pub const X86_BIOS: u16 = 0;
    pub const EFI_IA32: u16 = 6;
    pub const EFI_BC: u16 = 7;
    pub const EFI_X86_64: u16 = 9;
    pub const EFI_ARM64: u16 = 11;
    pub const HTTP_X86: u16 = 15;
    pub const HTTP_X86_64: u16 = 16;
    pub const HTTP_ARM64: u16 = 19;

    /// The architecture's name (RFC 4578 and IANA's processor
    /// architecture types), for messages.
    pub fn name(arch: u16) -> &'static str {
        match arch {
            X86_BIOS => "x86 BIOS",
            EFI_IA32 => "32-bit x86 UEFI",
            EFI_BC | EFI_X86_64 => "x86-64 UEFI",
            EFI_ARM64 => "arm64 UEFI",
            HTTP_X86 => "32-bit x86 UEFI HTTP",
            HTTP_X86_64 => "x86-64 UEFI HTTP",
            HTTP_ARM64 => "arm64 UEFI HTTP",
            10 => "32-bit ARM UEFI",
            _ => "other",
        }
    }
}

mod boot_files;
pub(crate) use boot_files::merge_files;
pub use boot_files::{default_boot_files, default_secure_boot_files};

/// A validated subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet {
    pub net: Ipv4Net,
    /// Inclusive ranges, as u32, inside `net`, non-overlapping.
    pub ranges: Vec<(u32, u32)>,
    pub router: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub domain: Option<String>,
    pub lease_time: u32,
    /// giaddr values answered for this subnet.
    pub relays: Vec<Ipv4Addr>,
}

impl DhcpSettings {
    /// Whether dynamic offers are ping-checked: as configured, else on
    /// exactly when replicas elect a leader (a new leader's lease table
    /// does not hold what the previous one leased).
    pub fn ping_check_for(&self, leader_elected: bool) -> bool {
        self.ping_check.unwrap_or(leader_elected)
    }

    /// The longest lease this server hands out (seconds): how long after
    /// a start an address leased by a previous instance may still be in
    /// use unknown to this one.
    pub fn max_lease_time(&self) -> u64 {
        self.subnets
            .iter()
            .map(|s| u64::from(s.lease_time))
            .chain([u64::from(self.discovery_lease_time)])
            .max()
            .unwrap_or(3600)
    }
}

impl Subnet {
    pub fn pool_size(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| u64::from(e - s) + 1).sum()
    }
    pub fn in_pool(&self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        self.ranges.iter().any(|(s, e)| (*s..=*e).contains(&n))
    }
}

/// Validated DHCP settings the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpSettings {
    pub interface: String,
    pub mode: DhcpMode,
    pub server_address: Option<Ipv4Addr>,
    pub next_server: Option<Ipv4Addr>,
    pub http_boot_url: Option<String>,
    pub ipxe_script_url: Option<String>,
    pub boot_files: BTreeMap<u16, String>,
    pub secure_boot_files: BTreeMap<u16, String>,
    pub discovery: bool,
    pub discovery_lease_time: u32,
    pub record_discovered: bool,
    /// DiscoveredMachine objects kept at most, and how long one lives
    /// unseen (seconds).
    pub discovered_cap: usize,
    pub discovered_ttl: u64,
    pub subnets: Vec<Subnet>,
    pub offer_hold: u32,
    pub proxy_port_4011: bool,
    pub ipxe_no_proxy_dhcp: bool,
    /// `dhcp.pingCheck.enabled` as configured (absent: decided by the
    /// caller, see [`DhcpSettings::ping_check_for`]).
    pub ping_check: Option<bool>,
    pub ping_timeout: std::time::Duration,
    pub lease_sync: LeaseSync,
    pub rate_limit: super::limit::RateLimits,
}

/// What is wrong with a `dhcp:` section; the message names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{}: {}", qualified(.field), .message)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

/// `dhcp.<field>` for config fields; flags (`--...`) as they are.
fn qualified(field: &str) -> String {
    if field.starts_with("--") {
        field.to_string()
    } else {
        format!("dhcp.{field}")
    }
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Largest pool accepted per subnet: allocation scans the pool, so keep it bounded.
pub const MAX_POOL: u64 = 1 << 20;
const MAX_LEASE_TIME: u32 = 365 * 24 * 3600;

fn check_url(field: &str, s: &str) -> Result<(), ConfigError> {
    let u = url::Url::parse(s).map_err(|e| err(field, format!("not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(err(field, "must be an http:// or https:// URL"));
    }
    // The URL ends up in a DHCP option and in iPXE: no whitespace or controls.
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(field, "must not contain whitespace"));
    }
    Ok(())
}

fn check_lease_time(field: &str, t: Option<u32>, default: u32) -> Result<u32, ConfigError> {
    let t = t.unwrap_or(default);
    if !(10..=MAX_LEASE_TIME).contains(&t) {
        return Err(err(field, format!("must be 10..={MAX_LEASE_TIME} seconds")));
    }
    Ok(t)
}

fn subnet_from(i: usize, s: &SubnetConfig) -> Result<Subnet, ConfigError> {
    let f = |name: &str| format!("subnets[{i}].{name}");
    let net: Ipv4Net = s
        .subnet
        .parse()
        .map_err(|_| err(f("subnet"), format!("{:?} is not an IPv4 CIDR", s.subnet)))?;
    let net = net.trunc();
    if net.prefix_len() > 30 {
        return Err(err(f("subnet"), "prefix must be /30 or shorter"));
    }
    let mut ranges = Vec::new();
    for (j, r) in s.ranges.iter().enumerate() {
        let (a, b) = (u32::from(r.start), u32::from(r.end));
        let rf = format!("subnets[{i}].ranges[{j}]");
        if a > b {
            return Err(err(rf, "start is after end"));
        }
        if !net.contains(&r.start) || !net.contains(&r.end) {
            return Err(err(rf, format!("not inside {net}")));
        }
        if r.start == net.network()
            || r.end == net.broadcast()
            || r.start == net.broadcast()
            || r.end == net.network()
        {
            return Err(err(rf, "must not include the network or broadcast address"));
        }
        if ranges.iter().any(|&(x, y)| a <= y && x <= b) {
            return Err(err(rf, "overlaps another range"));
        }
        ranges.push((a, b));
    }
    let sub = Subnet {
        net,
        ranges,
        router: s.router,
        dns: s.dns.clone(),
        domain: s.domain.clone(),
        lease_time: check_lease_time(&f("leaseTime"), s.lease_time, 3600)?,
        relays: s.relays.clone(),
    };
    for (j, r) in s.relays.iter().enumerate() {
        if !net.contains(r) || *r == net.network() || *r == net.broadcast() {
            return Err(err(
                format!("subnets[{i}].relays[{j}]"),
                format!(
                    "{r} is not a host address inside {net} (a relay's giaddr is on its clients' subnet)"
                ),
            ));
        }
    }
    if sub.pool_size() > MAX_POOL {
        return Err(err(f("ranges"), format!("pool larger than {MAX_POOL}")));
    }
    if let Some(r) = s.router
        && !net.contains(&r)
    {
        return Err(err(f("router"), format!("{r} is not inside {net}")));
    }
    if let Some(d) = &s.domain
        && (d.is_empty()
            || d.len() > 253
            || !d
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
    {
        return Err(err(f("domain"), "not a DNS domain name"));
    }
    Ok(sub)
}

impl TryFrom<DhcpConfig> for DhcpSettings {
    type Error = ConfigError;

    fn try_from(c: DhcpConfig) -> Result<Self, ConfigError> {
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
        let boot_files = merge_files("bootFiles", default_boot_files(), c.boot_files)?;
        let secure_boot_files = merge_files(
            "secureBootFiles",
            default_secure_boot_files(),
            c.secure_boot_files,
        )?;
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
        if c.discovery.enabled
            && c.mode == DhcpMode::Authoritative
            && subnets.iter().all(|s| s.ranges.is_empty())
        {
            return Err(err(
                "discovery.enabled",
                "discovery needs a subnet with ranges to lease from",
            ));
        }
        let discovered_cap = c.discovery.max_recorded.unwrap_or(1024);
        if !(1..=100_000).contains(&discovered_cap) {
            return Err(err("discovery.maxRecorded", "must be 1..=100000"));
        }
        let discovered_ttl = c.discovery.record_ttl_seconds.unwrap_or(86_400);
        if !(60..=31_536_000).contains(&discovered_ttl) {
            return Err(err("discovery.recordTtlSeconds", "must be 60..=31536000"));
        }
        let offer_hold = c.offer_hold_seconds.unwrap_or(60);
        if !(1..=3600).contains(&offer_hold) {
            return Err(err("offerHoldSeconds", "must be 1..=3600"));
        }
        let lease_sync = match (c.lease_sync.mode, c.lease_sync.interval_ms) {
            (LeaseSyncMode::Always, None) => LeaseSync::Always,
            (LeaseSyncMode::Always, Some(_)) => {
                return Err(err(
                    "leaseSync.intervalMs",
                    "only applies to mode batch (mode always flushes before every reply)",
                ));
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
        Ok(DhcpSettings {
            interface: c.interface,
            mode: c.mode,
            server_address: c.server_address,
            next_server: c.next_server,
            http_boot_url: c.http_boot_url.map(|u| u.trim_end_matches('/').to_string()),
            ipxe_script_url: c.ipxe_script_url,
            boot_files,
            secure_boot_files,
            discovery: c.discovery.enabled,
            discovery_lease_time: check_lease_time(
                "discovery.leaseTime",
                c.discovery.lease_time,
                600,
            )?,
            record_discovered: c.discovery.record.unwrap_or(true),
            discovered_cap,
            discovered_ttl,
            subnets,
            offer_hold,
            proxy_port_4011: c.proxy_port_4011.unwrap_or(true),
            ipxe_no_proxy_dhcp: c.ipxe_no_proxy_dhcp.unwrap_or(true),
            ping_check: c.ping_check.enabled,
            ping_timeout: {
                let ms = c.ping_check.timeout_ms.unwrap_or(500);
                if !(10..=5_000).contains(&ms) {
                    return Err(err("pingCheck.timeoutMs", "must be 10..=5000 milliseconds"));
                }
                std::time::Duration::from_millis(ms)
            },
            lease_sync,
            rate_limit: c.rate_limit.validate()?,
        })
    }
}

#[cfg(test)]
mod tests;
