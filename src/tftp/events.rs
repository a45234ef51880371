//! The boot-timeline hook: the server reports each finished transfer to a
//! [`TftpEvents`]; [`BootTimeline`] turns completed ones into `TFTP` steps
//! of the Machine that has the peer's address. Never blocks the transfer.

use std::net::{IpAddr, SocketAddr};

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

/// Appends a `TFTP` boot step (file, bytes) to the Machine whose reserved
/// address is the peer's; transfers from unknown addresses are not recorded.
pub struct BootTimeline {
    pub directory: Directory,
    pub recorder: BootRecorder,
}

impl TftpEvents for BootTimeline {
    fn transfer_finished(&self, r: &TransferReport<'_>) {
        if r.outcome != "complete" {
            return;
        }
        let IpAddr::V4(ip) = r.peer.ip() else { return };
        let Some(m) = self.directory.by_ip(&ip) else {
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
                step: "TFTP".into(),
                detail: r.file.to_string(),
                bytes: Some(r.bytes),
                boot_id,
            },
        );
    }
}
