//! The boot-timeline hook: the server reports each finished transfer to a
//! [`TftpEvents`]; [`BootTimeline`] turns completed ones into `TFTP` steps
//! of the Machine that has the peer's address. Never blocks the transfer.

use std::net::SocketAddr;

use crate::api::BootEvent;
use crate::directory::{BootIntent, BootRecorder, Directory};

/// One finished transfer.
#[derive(Clone, Debug)]
pub struct TransferReport<'a> {
    pub peer: SocketAddr,
    pub file: &'a str,
    /// File bytes sent.
    pub bytes: u64,
    /// The metrics outcome word (`complete`, `client_error`, ...).
    pub outcome: &'static str,
}

/// Receives transfer reports. Called on the transfer's task: keep it quick.
pub trait TftpEvents: Send + Sync {
    fn transfer_finished(&self, report: &TransferReport<'_>);
}

/// Reports go nowhere.
pub struct NoEvents;

impl TftpEvents for NoEvents {
    fn transfer_finished(&self, _report: &TransferReport<'_>) {}
}

/// The boot step a completed transfer is: a cached image (what a Secure
/// Boot machine's GRUB loads over TFTP) is its `Kernel`, `Initrd` or
/// `Image` step, as over HTTP; anything else is `TFTP`.
pub fn step_of(file: &str) -> crate::api::BootStep {
    use crate::api::BootStep;
    let Some(rest) = file.trim_start_matches('/').strip_prefix("images/") else {
        return BootStep::Tftp;
    };
    match rest.rsplit('/').next() {
        Some("kernel") => BootStep::Kernel,
        Some("initrd") => BootStep::Initrd,
        _ => BootStep::Image,
    }
}

/// A step's detail: the file, or for a cached image its digest (as boot
/// HTTP records it).
fn detail_of(file: &str) -> String {
    match file.trim_start_matches('/').strip_prefix("images/") {
        Some(rest) => rest.split('/').next().unwrap_or_default().to_string(),
        None => file.to_string(),
    }
}

/// Appends a boot step (file, bytes; see [`step_of`]) to the Machine whose reserved
/// address (IPv4 or IPv6) is the peer's, an IPv4-mapped peer counting as
/// IPv4; transfers from unknown addresses are not recorded.
pub struct BootTimeline {
    pub directory: Directory,
    pub recorder: BootRecorder,
}

impl TftpEvents for BootTimeline {
    fn transfer_finished(&self, r: &TransferReport<'_>) {
        if r.outcome != "complete" {
            return;
        }
        // IPv4, IPv6, and IPv4 as a dual-stack `[::]` socket sees it.
        let Some(m) = self.directory.by_peer(r.peer.ip()) else {
            return;
        };
        let boot_id = match &m.intent {
            BootIntent::Install { boot_id, .. } => Some(boot_id.clone()),
            _ => None,
        };
        self.recorder.record(
            &m.namespace,
            &m.name,
            BootEvent {
                time: jiff::Timestamp::now(),
                step: step_of(r.file),
                detail: detail_of(r.file),
                bytes: Some(r.bytes),
                boot_id,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::api::{Machine, MachineNetwork, MachineSpec};
    use crate::store::TypedStore;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn completed_transfers_become_tftp_steps_of_the_machine_at_that_address() {
        let mut m = Machine::new(
            "node-1",
            MachineSpec {
                boot_mac_address: Some("52:54:00:12:34:56".into()),
                network: Some(MachineNetwork {
                    address: Some("10.20.0.7/24".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        m.metadata.namespace = Some("default".into());
        let directory = Directory::new();
        directory.upsert(&m);
        assert!(directory.by_ip(&"10.20.0.7".parse().unwrap()).is_some());
        m.spec.bmc.address = "ipmi://10.20.0.2".into();
        m.spec.bmc.credentials_secret_ref.name = "bmc".into();
        let store = Arc::new(MemoryStore::new());
        store.create_obj(&m).await.unwrap();
        let cancel = CancellationToken::new();
        let timeline = BootTimeline {
            directory,
            recorder: BootRecorder::spawn(store.clone(), cancel.clone()),
        };
        let report = |ip: &str, outcome| TransferReport {
            peer: SocketAddr::new(ip.parse().unwrap(), 1234),
            file: "ipxe.efi",
            bytes: 850_528,
            outcome,
        };
        timeline.transfer_finished(&report("10.20.0.9", "complete")); // unknown
        timeline.transfer_finished(&report("10.20.0.7", "client_error")); // tsize probe
        timeline.transfer_finished(&report("10.20.0.7", "complete"));
        let mut tries = 0;
        let history = loop {
            tries += 1;
            assert!(tries < 3000, "the step was never recorded");
            let m: Machine = store.get_obj("default", "node-1").await.unwrap();
            let h = m.status.unwrap_or_default().boot_history;
            if !h.is_empty() {
                break h;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        assert_eq!(history.len(), 1, "{history:?}");
        assert_eq!(history[0].step, crate::api::BootStep::Tftp);
        assert_eq!(history[0].detail, "ipxe.efi");
        assert_eq!(history[0].bytes, Some(850_528));
        cancel.cancel();
    }

    /// The steps of the Machine `name` once `n` are recorded.
    async fn steps(store: &MemoryStore, name: &str, n: usize) -> Vec<BootEvent> {
        for _ in 0..3000 {
            let m: Machine = store.get_obj("default", name).await.unwrap();
            let h = m.status.unwrap_or_default().boot_history;
            if h.len() >= n {
                return h;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("{name}: {n} steps were never recorded");
    }

    #[tokio::test]
    async fn ipv6_and_ipv4_mapped_peers_find_their_machine() {
        let machine = |name: &str, mac: &str, address: &str| {
            let mut m = Machine::new(
                name,
                MachineSpec {
                    boot_mac_address: Some(mac.into()),
                    network: Some(MachineNetwork {
                        address: Some(address.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            );
            m.metadata.namespace = Some("default".into());
            m.spec.bmc.address = "ipmi://10.20.0.2".into();
            m.spec.bmc.credentials_secret_ref.name = "bmc".into();
            m
        };
        let six = machine("six", "52:54:00:12:34:66", "fd00:89::7/64");
        let four = machine("four", "52:54:00:12:34:44", "10.20.0.7/24");
        let directory = Directory::new();
        let store = Arc::new(MemoryStore::new());
        for m in [&six, &four] {
            directory.upsert(m);
            store.create_obj(m).await.unwrap();
        }
        let cancel = CancellationToken::new();
        let timeline = BootTimeline {
            directory,
            recorder: BootRecorder::spawn(store.clone(), cancel.clone()),
        };
        let report = |ip: &str, file| TransferReport {
            peer: SocketAddr::new(ip.parse().unwrap(), 1234),
            file,
            bytes: 10,
            outcome: "complete",
        };
        timeline.transfer_finished(&report("fd00:89::8", "stranger.efi"));
        timeline.transfer_finished(&report("fd00:89::7", "ipxe.efi"));
        timeline.transfer_finished(&report("::ffff:10.20.0.7", "undionly.kpxe"));
        let h = steps(&store, "six", 1).await;
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].detail, "ipxe.efi");
        let h = steps(&store, "four", 1).await;
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[0].detail, "undionly.kpxe");
        cancel.cancel();
    }

    #[test]
    fn images_are_kernel_and_initrd_steps() {
        use crate::api::BootStep;
        assert_eq!(step_of("ipxe.efi"), BootStep::Tftp);
        assert_eq!(step_of("grub/grub.cfg"), BootStep::Tftp);
        assert_eq!(step_of("/images/ab12/kernel"), BootStep::Kernel);
        assert_eq!(step_of("images/ab12/initrd"), BootStep::Initrd);
        assert_eq!(step_of("images/ab12/rootfs"), BootStep::Image);
        assert_eq!(detail_of("/images/ab12/kernel"), "ab12");
        assert_eq!(detail_of("/grub/grub.cfg"), "/grub/grub.cfg");
    }
}
