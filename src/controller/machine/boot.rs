//! The parts of `decide` that run a network boot (install, reimage, wipe)
//! and wait for the result: minting under the boot-storm limit, removing the
//! Node before a reimage, the one power-on per boot (after the server was
//! seen off, marker first: the boot's token is valid from then),
//! install deadlines and retries, then waiting for the Node; and taking a
//! machine apart again (deprovisioning). Pure, like the rest of `decide`.

use super::decide::{Planner, again, elapsed, wait};
use super::plan::{
    BmcObserved, BootOutcome, BootPurpose, ClassObserved, ClassView, Mark, MarkKey, NodeObserved,
    Step, boot_outcome, boot_timeline, booted, cond, failed_detail,
};
use crate::api::ConditionStatus;
use crate::api::{BootRecord, MachinePhase, PowerState};
use crate::bmc::BootDevice;

/// The last error's reason when the BMC did not keep the one-time network
/// boot override (`bmc_reason` of `BootOverrideIgnored`).
pub(super) const OVERRIDE_REFUSED: &str = "BmcBootOverrideIgnored";
/// The last error's reason when the BMC answered a virtual media insert
/// that it has no virtual media ([`crate::bmc::BmcError::Unsupported`]).
const MEDIA_UNSUPPORTED_FROM: &str = "BmcUnsupported";
/// A boot failed because the BMC has no virtual media.
pub const MEDIA_UNSUPPORTED: &str = "VirtualMediaUnsupported";

/// Whether `e` is a BMC's answer that it has no virtual media to insert
/// into: it fails the boot (see `drive_boot`), reaching the BMC again does
/// not clear it.
pub(super) fn media_unsupported(e: &crate::api::LastError) -> bool {
    e.reason == MEDIA_UNSUPPORTED_FROM && e.message.starts_with("InsertMedia")
}

/// Where a network boot stands.
enum BootState {
    /// Not done; this step schedules the next look.
    Pending(Step),
    /// The boot reached its goal (installed, or wiped).
    Done(BootRecord),
}

/// Whether a node's kubelet version is the wanted one (`v1.33.2` matches
/// `1.33.2` and `v1.33.2+k3s1`).
fn kubelet_matches(have: &str, want: &str) -> bool {
    let (h, w) = (have.trim_start_matches('v'), want.trim_start_matches('v'));
    h == w || h.strip_prefix(w).is_some_and(|r| r.starts_with(['+', '-']))
}

fn fmt_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

impl Planner<'_> {
    /// Provisioning (install) and Reimaging.
    pub(super) fn boot_phase(&mut self, purpose: BootPurpose) -> Step {
        let class = match &self.o.class {
            ClassObserved::Present(c) => c.clone(),
            ClassObserved::NotReferenced => {
                // The class was taken away mid-run: stop, and hand the
                // machine back (a reimaging one had a Node: take it apart).
                self.close_open_boot(BootOutcome::Abandoned);
                if purpose == BootPurpose::Install {
                    self.condition(
                        cond::PROVISIONED,
                        ConditionStatus::False,
                        "ClassRemoved",
                        String::new(),
                    );
                    self.set_phase(MachinePhase::Available);
                } else {
                    self.start_run(MachinePhase::Deprovisioning);
                }
                return again();
            }
            ClassObserved::Missing { name } => {
                let msg = format!("MachineClass {name} does not exist");
                self.condition(
                    cond::PROVISIONED,
                    ConditionStatus::False,
                    "ClassNotFound",
                    msg,
                );
                return wait(self.o.limits.resync, "class");
            }
        };
        if let Some(w) = self.retry_gate() {
            return w;
        }
        match self.run_boot(purpose, Some(&class.revision)) {
            BootState::Pending(s) => s,
            BootState::Done(b) => self.after_install(purpose, &class, &b),
        }
    }

    fn close_open_boot(&mut self, outcome: BootOutcome) {
        if self
            .st
            .boot
            .as_ref()
            .is_some_and(|b| b.completed_at.is_none())
        {
            self.push(Step::CompleteBoot { outcome });
        }
    }

    /// The boot of the current run, minting one when there is none.
    fn run_boot(&mut self, purpose: BootPurpose, revision: Option<&str>) -> BootState {
        let prev = self.progress().previous_boot.clone();
        let ours = self
            .st
            .boot
            .clone()
            .filter(|b| b.purpose == purpose && Some(&b.id) != prev.as_ref());
        if let Some(b) = ours {
            let open = b.completed_at.is_none();
            let same_rev = b.revision.as_deref() == revision;
            if open && !same_rev {
                // The target moved while booting: this boot installs the
                // wrong thing. Close it; the next look mints a new one.
                self.push(Step::CompleteBoot {
                    outcome: BootOutcome::Superseded,
                });
                return BootState::Pending(again());
            }
            match boot_outcome(&self.st, &b) {
                Some(o @ (BootOutcome::Installed | BootOutcome::Wiped)) if same_rev => {
                    if open {
                        self.push(Step::CompleteBoot { outcome: o });
                    }
                    return BootState::Done(b);
                }
                Some(BootOutcome::Failed) if open => {
                    let detail = failed_detail(&self.st, &b.id);
                    let timeline = boot_timeline(&self.st, &b.id);
                    let msg = format!("the installer reported failure: {detail}; {timeline}");
                    let reason = fail_reason(purpose, false);
                    return BootState::Pending(self.fail_boot(BootOutcome::Failed, reason, msg));
                }
                None if open => return BootState::Pending(self.drive_boot(purpose, &b)),
                _ => {} // closed without success: mint another
            }
        }
        if !self.o.boot_slot {
            self.condition(
                cond::WAITING,
                ConditionStatus::True,
                "BootStormLimit",
                "the boot-storm limit is reached; waiting for a free boot slot".into(),
            );
            return BootState::Pending(wait(self.o.limits.slot_wait, super::plan::BOOT_SLOT));
        }
        self.clear_waiting();
        self.push(Step::MintBoot {
            purpose,
            revision: revision.map(str::to_string),
        });
        BootState::Pending(again())
    }

    /// An open boot without an outcome: get the server booting, then wait.
    fn drive_boot(&mut self, purpose: BootPurpose, b: &BootRecord) -> Step {
        let limits = self.o.limits;
        if purpose == BootPurpose::Reimage
            && self.progress().node_removed_for.as_ref() != Some(&b.id)
        {
            let node = self.node();
            match &self.o.node {
                NodeObserved::Present(_) => {
                    self.push(Step::CordonNode(node.clone()));
                    self.push(Step::DrainNode(node.clone()));
                    self.push(Step::DeleteNode(node));
                }
                NodeObserved::Unknown { .. } => return wait(limits.poll, "target cluster"),
                NodeObserved::Absent | NodeObserved::NotConfigured => {}
            }
            self.set_progress(Mark::NodeRemovedFor(b.id.clone()));
            return again();
        }
        if self.progress().power_cycled_for.as_ref() != Some(&b.id) {
            let BmcObserved::Reachable { power } = self.o.bmc else {
                return self.wait_bmc();
            };
            if power != PowerState::Off {
                // Off first, and seen off: the boot's token becomes valid
                // with the marker below, when nothing from the disk (the OS
                // a reimage replaces) can be running to use it.
                return self.power_off(Some(b.minted_at));
            }
            // The BMC refused this boot's override (recorded since it was
            // minted): powering on would not network-boot. The boot fails
            // with the BMC's answer, counted like any failed boot.
            if let Some(e) = self
                .st
                .last_error
                .clone()
                .filter(|e| e.reason == OVERRIDE_REFUSED && e.time >= b.minted_at)
            {
                return self.fail_boot(BootOutcome::Abandoned, OVERRIDE_REFUSED, e.message);
            }
            // A BMC without virtual media will not grow it: the boot
            // fails with the BMC's words (a new boot is tried after the
            // Error phase's back-off, once the spec or the BMC changed).
            if let Some(e) = self
                .st
                .last_error
                .clone()
                .filter(|e| media_unsupported(e) && e.time >= b.minted_at)
            {
                return self.fail_boot(BootOutcome::Abandoned, MEDIA_UNSUPPORTED, e.message);
            }
            // The steps before the power-on are BMC actions too: one that
            // just failed is retried when its retry is due.
            if let Some(s) = self.hold_for_bmc_retry() {
                return s;
            }
            if purpose != BootPurpose::Deprovision
                && let Some(s) = self
                    .volumes_before_boot(b)
                    .or_else(|| self.firmware_before_boot(b))
                    .or_else(|| self.bios_before_boot(b))
            {
                return s;
            }
            // A virtual media boot: the ISO into the virtual CD (the BMC
            // fetches it now, with its own token: see http/boot/vmedia.rs),
            // then the CD once. Both are repeatable, so a crash before the
            // marker only repeats them.
            if self.virtual_media() {
                self.push(Step::InsertMedia);
                self.push(Step::SetBootOnce(BootDevice::Cd));
            } else {
                self.push(Step::SetBootOnce(BootDevice::Network));
            }
            // The marker goes first: after a crash the power-on is not
            // repeated blindly (see below).
            self.set_progress(Mark::PowerCycledFor(b.id.clone()));
            self.set_progress(Mark::PoweredAt(self.now));
            // Written only if the override went through: an earlier
            // refusal no longer holds.
            if self
                .st
                .last_error
                .as_ref()
                .is_some_and(|e| e.reason == OVERRIDE_REFUSED)
            {
                self.clear_error();
            }
            self.push(Step::PowerOn);
            return wait(limits.poll, "install");
        }
        let since = self.progress().powered_at.unwrap_or(b.minted_at);
        let spent = elapsed(since, self.now);
        self.check_loader(b);
        if spent >= limits.deadlines.install {
            let mut msg = format!(
                "no call-home within {}; {}",
                fmt_duration(limits.deadlines.install),
                boot_timeline(&self.st, &b.id)
            );
            if let Some(file) = super::loader::stalled_loader(self.m, &b.id, self.now) {
                msg = format!("{msg}; {}", super::loader::stalled_message(self.m, &file));
            }
            return self.fail_boot(BootOutcome::TimedOut, fail_reason(purpose, true), msg);
        }
        // Marker written but the server is off with nothing heard from it:
        // the power action was lost (crash, or a BMC that dropped it).
        // Powering on is safe to repeat; a cycle would not be.
        let heard = self
            .st
            .boot_history
            .iter()
            .any(|e| e.boot_id.as_deref() == Some(&b.id));
        if self.o.bmc
            == (BmcObserved::Reachable {
                power: PowerState::Off,
            })
            && !heard
        {
            self.push(Step::PowerOn);
        }
        wait(limits.poll.min(limits.deadlines.install - spent), "install")
    }

    /// The server is on and must go off: ask, then look again soon. A
    /// power-off takes from a moment to tens of seconds, so the look backs
    /// off (see [`power_look`]) rather than waiting a whole `poll`. The
    /// request is recorded (`powerOffAt`, in the write that precedes the
    /// action anyway) so later looks only look: it is repeated once a whole
    /// `poll` passed with the server still on (a lost action). A record
    /// older than `since` (the boot's mint) belongs to an earlier run.
    fn power_off(&mut self, since: Option<jiff::Timestamp>) -> Step {
        let poll = self.o.limits.poll;
        let asked = self
            .progress()
            .power_off_at
            .filter(|t| since.is_none_or(|s| *t >= s))
            .map(|t| elapsed(t, self.now));
        match asked {
            Some(spent) if spent < poll => wait(power_look(spent, poll), "power off"),
            _ => {
                self.set_progress(Mark::PowerOffAt(self.now));
                self.push(Step::PowerOff);
                wait(power_look(std::time::Duration::ZERO, poll), "power off")
            }
        }
    }

    /// A boot failed (`outcome`): close it, count it, back off; too many in
    /// a row and the machine goes to Error (retried after the backoff).
    pub(super) fn fail_boot(
        &mut self,
        outcome: BootOutcome,
        reason: &str,
        message: String,
    ) -> Step {
        self.close_open_boot(outcome);
        self.error(reason, message);
        self.back_off(self.phase())
    }

    pub(super) fn back_off(&mut self, from: MachinePhase) -> Step {
        let limits = self.o.limits;
        let attempts = self.progress().attempts() + 1;
        let after = limits.retry_after(attempts);
        self.set_progress(Mark::Attempts(attempts));
        let at = self.now.saturating_add(after).unwrap_or(self.now);
        self.set_progress(Mark::RetryAt(at));
        if attempts >= limits.max_boot_attempts {
            self.set_progress(Mark::ErrorFrom(from));
            self.set_phase(MachinePhase::Error);
        }
        wait(after, "retry backoff")
    }

    fn after_install(&mut self, purpose: BootPurpose, class: &ClassView, b: &BootRecord) -> Step {
        // The reads after the install are BMC actions too (see above).
        if let Some(s) = self.hold_for_bmc_retry() {
            return s;
        }
        if let Some(s) = self
            .firmware_after_install(class, b)
            .or_else(|| self.bios_after_install(class, b))
        {
            return s;
        }
        if self.st.provisioned_revision.as_deref() != Some(&class.revision) {
            self.push(Step::MarkProvisioned {
                revision: class.revision.clone(),
                installs: class.installs.clone(),
            });
        }
        let msg = format!("revision {} installed", class.revision);
        self.condition(cond::PROVISIONED, ConditionStatus::True, "Installed", msg);
        self.clear_progress(MarkKey::Attempts);
        self.clear_progress(MarkKey::RetryAt);
        self.clear_error();
        if purpose == BootPurpose::Install {
            self.set_phase(MachinePhase::Provisioned);
            return again();
        }
        // Reimaging: the same server must come back as a Ready Node running
        // the new versions; then it may take work again.
        if let Some(s) = self.node_pending(Some(b), Some(&class.kubelet_version)) {
            return s;
        }
        if matches!(self.o.node, NodeObserved::Present(_)) {
            self.push(Step::UncordonNode(self.node()));
        }
        self.set_phase(MachinePhase::Ready);
        again()
    }

    pub(super) fn provisioned(&mut self) -> Step {
        if self.o.class == ClassObserved::NotReferenced {
            self.start_run(MachinePhase::Deprovisioning);
            return again();
        }
        let b = self.st.boot.clone();
        if let Some(s) = self.node_pending(b.as_ref(), None) {
            return s;
        }
        self.set_phase(MachinePhase::Ready);
        again()
    }

    /// `None` when the installed OS is up: its Node is Ready (with `kubelet`
    /// when given), or, without a target cluster, it called home `booted`.
    /// Otherwise the step that waits for it; past the join deadline the
    /// machine goes to Error with the reason.
    fn node_pending(&mut self, b: Option<&BootRecord>, kubelet: Option<&str>) -> Option<Step> {
        let limits = self.o.limits;
        if let Some(b) = b {
            self.boot_installed_os(b);
        }
        let node = self.node();
        let problem = match &self.o.node {
            NodeObserved::NotConfigured => {
                if b.is_some_and(|b| booted(&self.st, &b.id)) {
                    return None;
                }
                "the installed OS did not call home `booted`".to_string()
            }
            NodeObserved::Present(n) if n.ready => match kubelet {
                Some(want) if !kubelet_matches(&n.kubelet_version, want) => format!(
                    "node {node} runs kubelet {} but the class wants {want}",
                    n.kubelet_version
                ),
                _ => return None,
            },
            NodeObserved::Present(_) => format!("node {node} is not Ready"),
            NodeObserved::Absent => format!("node {node} did not register"),
            NodeObserved::Unknown { .. } => return Some(wait(limits.poll, "target cluster")),
        };
        let since = b.and_then(|b| b.completed_at).unwrap_or(self.now);
        let spent = elapsed(since, self.now);
        if spent < limits.deadlines.join {
            return Some(wait(
                limits.poll.min(limits.deadlines.join - spent),
                "node Ready",
            ));
        }
        let msg = format!(
            "{problem} within {} of install",
            fmt_duration(limits.deadlines.join)
        );
        self.error("JoinTimeout", msg);
        // A retry installs again: this boot no longer counts for the run.
        if let Some(b) = b {
            self.set_progress(Mark::PreviousBoot(b.id.clone()));
        }
        let from = if self.phase() == MachinePhase::Reimaging {
            MachinePhase::Reimaging
        } else {
            MachinePhase::Provisioning
        };
        let next = self.back_off(from);
        self.set_progress(Mark::ErrorFrom(from));
        self.set_phase(MachinePhase::Error);
        Some(next)
    }

    /// After an install, the server must come up from its disk: set the boot
    /// device to the disk once per boot (repeatable, so the marker follows
    /// the effect), and power the server on if the installer switched it
    /// off (also repeatable) and the installed OS has not called home yet.
    fn boot_installed_os(&mut self, b: &BootRecord) {
        if boot_outcome(&self.st, b) != Some(BootOutcome::Installed) || booted(&self.st, &b.id) {
            return;
        }
        let BmcObserved::Reachable { power } = self.o.bmc else {
            return;
        };
        if self.progress().disk_boot_for.as_ref() != Some(&b.id) {
            self.push(Step::SetBootOnce(BootDevice::Disk));
            // The installer's ISO leaves the drive (repeatable, as the
            // disk boot: the marker follows both).
            if self.virtual_media() {
                self.push(Step::EjectMedia);
            }
            self.set_progress(Mark::DiskBootFor(b.id.clone()));
        } else if power == PowerState::Off {
            self.push(Step::PowerOn);
        }
    }

    /// Whether this machine boots its installer from virtual media: its own
    /// `spec.boot`, else its class's.
    pub(super) fn virtual_media(&self) -> bool {
        let class = match &self.o.class {
            ClassObserved::Present(c) => c.boot,
            _ => None,
        };
        self.m.spec.boot.or(class) == Some(crate::api::BootMethod::VirtualMedia)
    }

    /// Take the machine apart: Node, optional wipe, power, address. Then
    /// `retire` removes the finalizer (the object goes); otherwise the
    /// machine returns to the pool as Available.
    pub(super) fn deprovision(&mut self, retire: bool) -> Step {
        let limits = self.o.limits;
        if self.phase() != MachinePhase::Deprovisioning {
            self.close_open_boot(BootOutcome::Abandoned);
            self.clear_waiting();
            self.start_run(MachinePhase::Deprovisioning);
        }
        let had_node = self.st.provisioned_revision.is_some() || self.st.node_ref.is_some();
        if had_node {
            match &self.o.node {
                NodeObserved::Present(_) => {
                    let node = self.node();
                    self.push(Step::CordonNode(node.clone()));
                    self.push(Step::DrainNode(node.clone()));
                    self.push(Step::DeleteNode(node));
                    return again();
                }
                NodeObserved::Unknown { .. } => return wait(limits.poll, "target cluster"),
                NodeObserved::Absent | NodeObserved::NotConfigured => {}
            }
            if let ClassObserved::Present(c) = &self.o.class
                && c.wipe_on_deprovision
            {
                if let Some(w) = self.retry_gate() {
                    return w;
                }
                if let BootState::Pending(s) = self.run_boot(BootPurpose::Deprovision, None) {
                    return s;
                }
            }
        }
        match self.o.bmc {
            BmcObserved::Reachable { power } if power != PowerState::Off => {
                return self.power_off(None);
            }
            BmcObserved::Unreachable { .. } | BmcObserved::NotAsked => return self.wait_bmc(),
            BmcObserved::Reachable { .. } => {}
        }
        // A wipe booted from virtual media: its ISO leaves the drive.
        if self.virtual_media() && had_node {
            self.push(Step::EjectMedia);
        }
        self.push(Step::ReleaseAddress);
        if retire {
            self.push(Step::RemoveFinalizer);
            return Step::Requeue {
                after: limits.resync,
            };
        }
        if self.st.provisioned_revision.is_some() || self.st.node_ref.is_some() {
            self.push(Step::ClearProvisioned);
        }
        self.condition(
            cond::PROVISIONED,
            ConditionStatus::False,
            "Deprovisioned",
            String::new(),
        );
        self.clear_progress(MarkKey::NodeRemovedFor);
        self.set_phase(MachinePhase::Available);
        again()
    }
}

/// The first look after a power-off request.
pub const POWER_LOOK_MIN: std::time::Duration = std::time::Duration::from_millis(250);

/// How long to wait before looking at a server asked to power off `spent`
/// ago: as long as it has already taken (so the looks double: 0.25 s,
/// 0.5 s, 1 s, ...), at least [`POWER_LOOK_MIN`], at most `poll`. A few
/// power-state reads per power-off, never a steady stream.
pub fn power_look(spent: std::time::Duration, poll: std::time::Duration) -> std::time::Duration {
    spent.max(POWER_LOOK_MIN).min(poll)
}

fn fail_reason(purpose: BootPurpose, timeout: bool) -> &'static str {
    match (purpose, timeout) {
        (BootPurpose::Deprovision, false) => "WipeFailed",
        (BootPurpose::Deprovision, true) => "WipeTimeout",
        (_, false) => "InstallFailed",
        (_, true) => "InstallTimeout",
    }
}
