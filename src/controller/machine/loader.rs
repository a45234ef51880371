//! A boot that stalls at its loader: the firmware fetched a file over TFTP
//! (iPXE, or the shim) and nothing asked for a boot script after it. The
//! usual cause is Secure Boot: firmware that enforces it refuses a loader
//! not signed by a key it trusts (the unsigned iPXE above all) and says so
//! only on its console. The planner warns once per boot, naming what the
//! Machine and its BMC say about Secure Boot. Pure.

use std::time::Duration;

use jiff::Timestamp;

use super::decide::{Planner, elapsed};
use crate::api::{BootRecord, BootStep, Machine};

/// How long a fetched loader may take to ask for its script (iPXE under
/// emulation takes seconds; network GRUB a few more).
pub const LOADER_GRACE: Duration = Duration::from_secs(90);

/// The reason of the warning and of `status.lastError`.
pub const LOADER_NOT_RUN: &str = "BootLoaderNotRun";

/// Whether a step is the firmware fetching a loader: over TFTP, or over
/// UEFI HTTP boot from the assets.
fn is_loader_fetch(step: &BootStep) -> bool {
    matches!(step, BootStep::Tftp | BootStep::Asset)
}

/// The file the firmware fetched last in boot `boot_id`, when it fetched
/// loaders (TFTP, or UEFI HTTP boot's asset) and nothing asked for a boot
/// script since the first of them, `LOADER_GRACE` ago. Firmware that
/// refuses a loader tries its next boot option, which may fetch it again
/// (PXE, then HTTP boot): each fetch is as stalled as the first.
pub fn stalled_loader(m: &Machine, boot_id: &str, now: Timestamp) -> Option<String> {
    let history = &m.status.as_ref()?.boot_history;
    let steps: Vec<_> = history
        .iter()
        .filter(|e| e.boot_id.as_deref() == Some(boot_id))
        .collect();
    // Only what came after the last script request (a loader that read its
    // own files, GRUB's configuration over TFTP, has asked for one).
    let since = steps
        .iter()
        .rposition(|e| e.step == BootStep::Script)
        .map_or(0, |i| i + 1);
    let after = &steps[since..];
    let first = after.iter().find(|e| is_loader_fetch(&e.step))?;
    let last = after.iter().rev().find(|e| is_loader_fetch(&e.step))?;
    // Anything but DHCP and more fetches after them is progress (an
    // installer's own steps).
    let progressed = after
        .iter()
        .skip_while(|e| !is_loader_fetch(&e.step))
        .any(|e| {
            !is_loader_fetch(&e.step) && !matches!(e.step, BootStep::DhcpOffer | BootStep::DhcpAck)
        });
    if progressed || elapsed(first.time, now) < LOADER_GRACE {
        return None;
    }
    Some(last.detail.clone())
}

/// The warning for a stalled loader, by what is known of Secure Boot.
pub fn stalled_message(m: &Machine, file: &str) -> String {
    let declared = m.spec.secure_boot;
    let reported = m
        .status
        .as_ref()
        .and_then(|s| s.inventory.as_ref())
        .and_then(|i| i.secure_boot);
    let head = format!(
        "the firmware fetched {file} and nothing asked for a boot script after it: the loader \
         did not run"
    );
    let why = match (declared, reported) {
        (Some(false), Some(true)) => {
            "; the BMC reports Secure Boot enabled but spec.secureBoot is false, so this server \
             got iPXE, which firmware enforcing Secure Boot refuses: remove spec.secureBoot (or \
             set it true) to boot the signed shim and GRUB"
        }
        (Some(true), _) | (None, Some(true)) => {
            "; the firmware enforces Secure Boot and refuses a loader not signed by a key in its \
             db: check dhcp.secureBootFiles and the server's Secure Boot keys"
        }
        _ => {
            "; firmware enforcing Secure Boot refuses the unsigned iPXE: if this server has \
             Secure Boot on, set spec.secureBoot: true (its BMC does not report it)"
        }
    };
    format!("{head}{why}")
}

impl Planner<'_> {
    /// Warn (once: the error is recorded, and the same one is not again)
    /// when boot `b`'s loader was fetched and never ran.
    pub(super) fn check_loader(&mut self, b: &BootRecord) {
        let Some(file) = stalled_loader(self.m, &b.id, self.now) else {
            return;
        };
        let message = stalled_message(self.m, &file);
        if self
            .st
            .last_error
            .as_ref()
            .is_some_and(|e| e.reason == LOADER_NOT_RUN && e.message == message)
        {
            return;
        }
        self.push(super::plan::Step::Warn {
            reason: LOADER_NOT_RUN.into(),
            message: message.clone(),
        });
        self.error(LOADER_NOT_RUN, message);
    }
}

#[cfg(test)]
mod tests;
