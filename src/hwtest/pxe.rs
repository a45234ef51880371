//! The PXE half of the qualification: did the one-time PXE override make
//! the server network-boot once, and only once? [`PxeWatch`] runs
//! metalherd's own DHCP driver (`dhcp::server`, the production proxyDHCP
//! policy) on `--interface` with no Machines declared and discovery off,
//! so it answers nothing and the site's DHCP keeps serving the server; it
//! only keeps the PXE DISCOVERs (vendor class `PXEClient`) of the boot
//! MACs, with when they arrived. [`judge_second_boot`] turns "override
//! read back" and "what the server did" into a check and, for a BMC whose
//! override was not one-time, a finding. No sockets outside the driver.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::report::{Finding, Status};
use crate::api::MacAddr;
use crate::dhcp::config::{DhcpConfig, DhcpMode, DhcpSettings};
use crate::dhcp::metrics::DhcpMetrics;
use crate::dhcp::observe::Seen;
use crate::dhcp::server::{BoundServer, DhcpError, interface_ipv4};
use crate::directory::{BootRecorder, Directory};

/// What the PXE check needs.
#[derive(Clone, Debug)]
pub struct PxeOptions {
    /// The interface on the server's boot network (`--interface`).
    pub interface: String,
    /// `--boot-mac`; empty: every NIC MAC of the inventory.
    pub boot_macs: Vec<MacAddr>,
    /// How long to wait for the PXE boot, and to watch for a second one.
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PxeError {
    #[error("pxe watch: {0}")]
    Config(String),
    #[error("pxe watch: {0}")]
    Dhcp(#[from] DhcpError),
}

/// PXE DISCOVERs kept at most (the first after a mark is what counts).
const KEPT: usize = 256;

/// A PXE DISCOVER of a boot MAC, and when it arrived.
#[derive(Clone, Debug)]
pub struct PxeSeen {
    pub at: Instant,
    pub seen: Seen,
}

/// metalherd's proxy DHCP driver bound on the interface, watching.
pub struct PxeWatch {
    seen: Arc<Mutex<Vec<PxeSeen>>>,
    cancel: CancellationToken,
}

impl PxeWatch {
    /// Bind UDP port 67 on `interface` (needs root or CAP_NET_BIND_SERVICE
    /// and CAP_NET_RAW) and start watching for `macs`. Fails fast.
    pub async fn start(interface: &str, macs: Vec<[u8; 6]>) -> Result<PxeWatch, PxeError> {
        let cfg = DhcpConfig {
            interface: interface.to_string(),
            mode: DhcpMode::Proxy,
            // Never on 4011: nothing is answered, and another proxy may
            // own it. Our address only names us in replies never sent.
            proxy_port_4011: Some(false),
            server_address: Some(interface_ipv4(interface).unwrap_or(Ipv4Addr::UNSPECIFIED)),
            ..DhcpConfig::default()
        };
        let settings = DhcpSettings::try_from(cfg).map_err(|e| PxeError::Config(e.to_string()))?;
        // Proxy mode keeps no leases: the data directory is not touched.
        let server = BoundServer::bind(settings, &std::env::temp_dir()).await?;
        let (tx, mut rx) = mpsc::channel::<Seen>(1024);
        let server = server.observe(tx);
        let cancel = CancellationToken::new();
        let store: Arc<dyn crate::store::Store> =
            Arc::new(crate::store::memory::MemoryStore::new());
        let recorder = BootRecorder::spawn(store, cancel.clone());
        let c = cancel.clone();
        tokio::spawn(
            async move {
                if let Err(e) = server
                    .serve(Directory::new(), None, recorder, DhcpMetrics::default(), c)
                    .await
                {
                    tracing::warn!(error = %e, "pxe watch stopped");
                }
            }
            .instrument(tracing::info_span!("pxe_watch", interface)),
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        tokio::spawn(async move {
            while let Some(s) = rx.recv().await {
                if !s.is_pxe_discover() || !macs.contains(&s.mac) {
                    continue;
                }
                if let Ok(mut v) = keep.lock()
                    && v.len() < KEPT
                {
                    v.push(PxeSeen {
                        at: Instant::now(),
                        seen: s,
                    });
                }
            }
        });
        Ok(PxeWatch { seen, cancel })
    }

    /// The first PXE DISCOVER at or after `since`, waiting until `until`.
    pub async fn first_since(&self, since: Instant, until: Instant) -> Option<PxeSeen> {
        loop {
            let hit = self
                .seen
                .lock()
                .ok()
                .and_then(|v| v.iter().find(|s| s.at >= since).cloned());
            if hit.is_some() {
                return hit;
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for PxeWatch {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// What the BMC said about the override after the first boot, and what
/// the server did on the next one.
#[derive(Clone, Debug, PartialEq)]
pub struct SecondBoot {
    /// The override as read back after the PXE boot (e.g. `Pxe/Once`).
    pub read_back: String,
    /// The BMC still reports a network override (it would PXE-boot again).
    pub reports_network: bool,
    /// ... and reports it as Continuous / persistent.
    pub reports_persistent: bool,
    /// Seconds after the power cycle when the server PXE-booted again.
    pub pxe_again_after: Option<f64>,
    /// How long the second boot was watched.
    pub window: Duration,
    /// Who the BMC is, for the finding (`vendor model firmware`).
    pub bmc: String,
}

/// The `pxe-once` check: (status, detail, finding for a quirk).
pub fn judge_second_boot(s: &SecondBoot) -> (Status, String, Option<Finding>) {
    match (s.pxe_again_after, s.reports_network) {
        (None, _) => (
            Status::Pass,
            format!(
                "override read back {} after the PXE boot; the next boot did not PXE-boot within {} s",
                s.read_back,
                s.window.as_secs()
            ),
            None,
        ),
        (Some(t), reports_network) => {
            let said = match (reports_network, s.reports_persistent) {
                (true, true) => "kept as Continuous, as reported".to_string(),
                (true, false) => format!(
                    "the BMC reports Once ({}, a one-time override) but PXE-boots twice",
                    s.read_back
                ),
                (false, _) => format!(
                    "the BMC reports the override done ({}, no network boot) but PXE-boots twice",
                    s.read_back
                ),
            };
            (
                Status::Quirk,
                format!(
                    "override read back {} after the PXE boot; the server PXE-booted again {t:.1} s after the cycle: {said}",
                    s.read_back
                ),
                Some(Finding {
                    quirk: "onceKeptAsContinuous".into(),
                    evidence: format!(
                        "{} PXE-booted twice after one one-time PXE override (read back {} after the first boot)",
                        s.bmc, s.read_back
                    ),
                    covered_by: None,
                }),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(pxe: Option<f64>, network: bool) -> SecondBoot {
        SecondBoot {
            read_back: "Pxe/Once".into(),
            reports_network: network,
            reports_persistent: false,
            pxe_again_after: pxe,
            window: Duration::from_secs(120),
            bmc: "Acme X1 1.0".into(),
        }
    }

    #[test]
    fn a_second_boot_without_pxe_passes() {
        let (st, detail, f) = judge_second_boot(&second(None, false));
        assert_eq!(st, Status::Pass);
        assert!(detail.contains("120 s"), "{detail}");
        assert!(f.is_none());
    }

    #[test]
    fn reports_once_but_pxe_boots_twice_is_named() {
        let (st, detail, f) = judge_second_boot(&second(Some(14.2), true));
        assert_eq!(st, Status::Quirk);
        assert!(detail.contains("reports Once (Pxe/Once"), "{detail}");
        assert!(detail.contains("PXE-boots twice"), "{detail}");
        let f = f.unwrap();
        assert_eq!(f.quirk, "onceKeptAsContinuous");
        assert!(f.evidence.contains("Acme X1 1.0"), "{}", f.evidence);
        let (_, detail, _) = judge_second_boot(&second(Some(14.2), false));
        assert!(detail.contains("reports the override done"), "{detail}");
    }

    #[test]
    fn an_honest_continuous_override_is_a_quirk_too() {
        let mut s = second(Some(3.0), true);
        s.reports_persistent = true;
        let (st, detail, f) = judge_second_boot(&s);
        assert_eq!(st, Status::Quirk);
        assert!(detail.contains("as reported"), "{detail}");
        assert!(f.is_some());
    }
}
