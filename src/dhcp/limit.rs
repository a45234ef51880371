//! Rate limits in front of the DHCP policy (sans-IO: time comes in as
//! milliseconds): each client (by hardware address) gets `perClientPerSecond`
//! packets with a burst of `perClientBurst`, and unknown clients together
//! get `globalPerSecond`, so a flood of random MACs cannot crowd out the
//! declared Machines (they are not counted against the global limit).
//! Packets over a limit are dropped and counted (`rate_limited_client`,
//! `rate_limited`). 0 turns a limit off.
//!
//! ```yaml
//! dhcp:
//!   rateLimit: {perClientPerSecond: 20, perClientBurst: 40, globalPerSecond: 50000}
//! ```

use std::collections::HashMap;

use serde::Deserialize;

use super::config::{ConfigError, err};
use super::packet::DropReason;

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateLimitConfig {
    #[serde(default)]
    pub per_client_per_second: Option<u32>,
    #[serde(default)]
    pub per_client_burst: Option<u32>,
    #[serde(default)]
    pub global_per_second: Option<u32>,
}

/// Validated limits (packets per second; 0: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    pub per_client: u32,
    pub burst: u32,
    pub global: u32,
}

impl RateLimitConfig {
    pub fn validate(&self) -> Result<RateLimits, ConfigError> {
        let per_client = self.per_client_per_second.unwrap_or(20);
        let burst = self
            .per_client_burst
            .unwrap_or(per_client.saturating_mul(2));
        let global = self.global_per_second.unwrap_or(50_000);
        if per_client > 0 && burst < per_client {
            return Err(err(
                "rateLimit.perClientBurst",
                "must be at least perClientPerSecond",
            ));
        }
        if per_client > 100_000 || global > 10_000_000 {
            return Err(err(
                "rateLimit",
                "perClientPerSecond at most 100000, globalPerSecond at most 10000000",
            ));
        }
        Ok(RateLimits {
            per_client,
            burst,
            global,
        })
    }
}

/// A token bucket in thousandths of a packet.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    milli: u64,
    at_ms: u64,
}

impl Bucket {
    fn full(cap: u32, now_ms: u64) -> Bucket {
        Bucket {
            milli: u64::from(cap) * 1000,
            at_ms: now_ms,
        }
    }

    fn refill(&mut self, rate: u32, cap: u32, now_ms: u64) {
        let dt = now_ms.saturating_sub(self.at_ms);
        self.milli = (self.milli + dt * u64::from(rate)).min(u64::from(cap) * 1000);
        self.at_ms = now_ms;
    }

    fn take(&mut self, rate: u32, cap: u32, now_ms: u64) -> bool {
        self.refill(rate, cap, now_ms);
        if self.milli >= 1000 {
            self.milli -= 1000;
            true
        } else {
            false
        }
    }
}

/// Clients tracked at most; past it idle ones (full buckets) are forgotten,
/// and while still full new clients meet only the global limit.
pub const MAX_CLIENTS: usize = 65_536;

pub struct Limiter {
    limits: RateLimits,
    clients: HashMap<[u8; 6], Bucket>,
    global: Bucket,
}

impl Limiter {
    pub fn new(limits: RateLimits, now_ms: u64) -> Limiter {
        Limiter {
            limits,
            clients: HashMap::new(),
            global: Bucket::full(limits.global, now_ms),
        }
    }

    /// Whether a packet from `mac` may go on to the policy.
    pub fn check(&mut self, mac: [u8; 6], known: bool, now_ms: u64) -> Result<(), DropReason> {
        let l = self.limits;
        if l.per_client > 0 {
            if !self.clients.contains_key(&mac) && self.clients.len() >= MAX_CLIENTS {
                self.clients.retain(|_, b| {
                    b.refill(l.per_client, l.burst, now_ms);
                    b.milli < u64::from(l.burst) * 1000
                });
            }
            if self.clients.len() < MAX_CLIENTS || self.clients.contains_key(&mac) {
                let b = self
                    .clients
                    .entry(mac)
                    .or_insert_with(|| Bucket::full(l.burst, now_ms));
                if !b.take(l.per_client, l.burst, now_ms) {
                    return Err(DropReason::RateLimitedClient);
                }
            }
        }
        if !known && l.global > 0 && !self.global.take(l.global, l.global, now_ms) {
            return Err(DropReason::RateLimited);
        }
        Ok(())
    }

    pub fn tracked(&self) -> usize {
        self.clients.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_client: u32, burst: u32, global: u32) -> RateLimits {
        RateLimits {
            per_client,
            burst,
            global,
        }
    }

    #[test]
    fn a_client_gets_its_burst_then_its_rate() {
        let mut l = Limiter::new(limits(2, 4, 0), 0);
        let mac = [2, 0, 0, 0, 0, 1];
        for _ in 0..4 {
            assert_eq!(l.check(mac, true, 0), Ok(()));
        }
        assert_eq!(l.check(mac, true, 0), Err(DropReason::RateLimitedClient));
        // Another client is not held back by this one.
        assert_eq!(l.check([2, 0, 0, 0, 0, 2], true, 0), Ok(()));
        // Half a second later: one more packet (2 per second).
        assert_eq!(l.check(mac, true, 500), Ok(()));
        assert_eq!(l.check(mac, true, 500), Err(DropReason::RateLimitedClient));
    }

    #[test]
    fn a_flood_of_unknown_macs_meets_the_global_limit_known_machines_do_not() {
        let mut l = Limiter::new(limits(20, 40, 100), 0);
        let mut passed = 0;
        for i in 0..50_000u32 {
            let b = i.to_be_bytes();
            if l.check([2, 1, b[0], b[1], b[2], b[3]], false, 0).is_ok() {
                passed += 1;
            }
        }
        assert_eq!(passed, 100, "the global bucket");
        // A declared Machine is answered in the middle of the flood.
        assert_eq!(l.check([0x52, 0x54, 0, 0, 0, 7], true, 0), Ok(()));
        // The per-client table stays bounded.
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            let b = i.to_be_bytes();
            let _ = l.check([2, 2, b[0], b[1], b[2], b[3]], false, 10_000);
        }
        assert!(l.tracked() <= MAX_CLIENTS);
    }

    #[test]
    fn config_defaults_and_checks() {
        let d = RateLimitConfig::default().validate().unwrap();
        assert_eq!(d, limits(20, 40, 50_000));
        let off: RateLimitConfig =
            serde_yaml::from_str("{perClientPerSecond: 0, globalPerSecond: 0}").unwrap();
        assert_eq!(off.validate().unwrap(), limits(0, 0, 0));
        let bad: RateLimitConfig =
            serde_yaml::from_str("{perClientPerSecond: 10, perClientBurst: 5}").unwrap();
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .starts_with("dhcp.rateLimit.perClientBurst")
        );
    }
}
