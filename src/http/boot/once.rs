//! Each config of a boot (install, node, wipe) is handed out in full once. A
//! complete transfer is noted here at once (so a second fetch right behind
//! it is refused) and in the Machine's `status.boot.configsServed` (so a
//! restart keeps the rule); a transfer cut short notes nothing and may be
//! retried. Two fetches racing each other both complete: the second one to
//! finish is reported (detection, where prevention is impossible).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;

use super::ignition::IgnitionStage;
use crate::api::BootRecord;

/// Where and when a config went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub address: String,
    pub at: Timestamp,
}

/// Complete transfers of this process, by boot id and stage. Entries older
/// than the token TTL are useless (the token has expired) and are dropped;
/// past [`MAX_ENTRIES`] the oldest go first.
pub struct ServedLog {
    inner: Mutex<HashMap<(String, IgnitionStage), Served>>,
    ttl: Duration,
}

/// Boots whose transfers are remembered in memory at most (the Machine's
/// status keeps them durably).
pub const MAX_ENTRIES: usize = 16_384;

impl ServedLog {
    pub fn new(ttl: Duration) -> ServedLog {
        ServedLog {
            inner: Mutex::default(),
            ttl,
        }
    }

    /// The earlier complete transfer of this config, if any: from this
    /// process, else from the boot record.
    pub fn earlier(&self, boot: &BootRecord, stage: IgnitionStage) -> Option<Served> {
        let mem = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(boot.id.clone(), stage))
            .cloned();
        mem.or_else(|| {
            boot.configs_served
                .iter()
                .find(|c| c.stage == stage.as_str())
                .map(|c| Served {
                    address: c.address.clone(),
                    at: c.at,
                })
        })
    }

    /// Note a complete transfer; returns the one before it, if another got
    /// there first.
    pub fn note(
        &self,
        boot_id: &str,
        stage: IgnitionStage,
        peer: IpAddr,
        now: Timestamp,
    ) -> Option<Served> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (boot_id.to_string(), stage);
        if let Some(prev) = g.get(&key) {
            return Some(prev.clone());
        }
        if g.len() >= MAX_ENTRIES {
            let ttl = jiff::SignedDuration::try_from(self.ttl).unwrap_or(jiff::SignedDuration::MAX);
            g.retain(|_, s| s.at.saturating_add(ttl).is_ok_and(|end| end > now));
            if g.len() >= MAX_ENTRIES
                && let Some(oldest) = g.iter().min_by_key(|(_, s)| s.at).map(|(k, _)| k.clone())
            {
                g.remove(&oldest);
            }
        }
        g.insert(
            key,
            Served {
                address: plain(peer),
                at: now,
            },
        );
        None
    }
}

/// An address as a person reads it (IPv4-mapped IPv6 shown as IPv4).
pub fn plain(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(a) => a
            .to_ipv4_mapped()
            .map_or_else(|| a.to_string(), |v| v.to_string()),
        IpAddr::V4(a) => a.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServedConfig;

    #[test]
    fn a_config_is_noted_once_per_boot_and_stage() {
        let log = ServedLog::new(Duration::from_secs(60));
        let now = Timestamp::UNIX_EPOCH;
        let a: IpAddr = "10.0.0.5".parse().unwrap();
        let b: IpAddr = "::ffff:10.0.0.6".parse().unwrap();
        let boot = BootRecord {
            id: "b1".into(),
            ..Default::default()
        };
        assert_eq!(log.earlier(&boot, IgnitionStage::Install), None);
        assert_eq!(log.note("b1", IgnitionStage::Install, a, now), None);
        let first = Served {
            address: "10.0.0.5".into(),
            at: now,
        };
        assert_eq!(
            log.earlier(&boot, IgnitionStage::Install),
            Some(first.clone())
        );
        assert_eq!(log.note("b1", IgnitionStage::Install, b, now), Some(first));
        // Another stage, another boot: their own.
        assert_eq!(log.earlier(&boot, IgnitionStage::Node), None);
        assert_eq!(log.note("b2", IgnitionStage::Install, b, now), None);
        // After a restart the boot record remembers.
        let fresh = ServedLog::new(Duration::from_secs(60));
        let recorded = BootRecord {
            id: "b1".into(),
            configs_served: vec![ServedConfig {
                stage: "node".into(),
                address: "10.0.0.6".into(),
                at: now,
            }],
            ..Default::default()
        };
        assert_eq!(fresh.earlier(&recorded, IgnitionStage::Install), None);
        assert_eq!(
            fresh
                .earlier(&recorded, IgnitionStage::Node)
                .unwrap()
                .address,
            "10.0.0.6"
        );
    }

    #[test]
    fn the_log_is_bounded() {
        let log = ServedLog::new(Duration::from_secs(60));
        let peer: IpAddr = "10.0.0.5".parse().unwrap();
        for i in 0..MAX_ENTRIES + 10 {
            let at = Timestamp::from_second(i as i64).unwrap();
            log.note(&format!("b{i}"), IgnitionStage::Install, peer, at);
        }
        let n = log.inner.lock().unwrap().len();
        assert!(n <= MAX_ENTRIES, "{n}");
    }
}
