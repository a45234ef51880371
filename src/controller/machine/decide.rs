//! `decide`: from a Machine, what was observed and `now` to the next
//! [`Plan`]. Pure and level-triggered: it looks only at its inputs, plans a
//! status change only when something actually differs (so a settled machine
//! gets a plan with no writes), and ends every plan with exactly one
//! scheduling step. The network-boot part of the lifecycle is in
//! [`super::boot`].

use std::time::Duration;

use jiff::Timestamp;

use super::hw_labels;
use super::plan::{
    BmcObserved, BootPurpose, ClassObserved, Mark, MarkKey, NodeObserved, Observed, Plan, Step,
    cond,
};
use crate::api::condition::find_condition;
use crate::api::{BootStep, ConditionStatus};
use crate::api::{
    Machine, MachinePhase, MachineStatus, ObservedVersions, PAUSED_ANNOTATION, PowerState,
};

mod record;

/// Decide what to do next for `machine`.
pub fn decide(machine: &Machine, observed: &Observed, now: Timestamp) -> Plan {
    let mut p = Planner {
        m: machine,
        o: observed,
        now,
        st: machine.status.clone().unwrap_or_default(),
        steps: Vec::new(),
    };
    let next = p.run();
    p.push(next);
    Plan { steps: p.steps }
}

/// The plan being built, with the status as it will be after the status
/// steps planned so far.
pub(super) struct Planner<'a> {
    pub m: &'a Machine,
    pub o: &'a Observed,
    pub now: Timestamp,
    pub st: MachineStatus,
    pub steps: Vec<Step>,
}

pub(super) fn wait(after: Duration, what: &'static str) -> Step {
    Step::WaitFor { after, what }
}

/// Look again right away: the plan changed something the next decision
/// depends on.
pub(super) fn again() -> Step {
    Step::Requeue {
        after: Duration::ZERO,
    }
}

/// `b - a`, or zero when `b` is not after `a`.
pub(super) fn elapsed(a: Timestamp, b: Timestamp) -> Duration {
    Duration::try_from(b.duration_since(a)).unwrap_or(Duration::ZERO)
}

impl Planner<'_> {
    fn run(&mut self) -> Step {
        let limits = self.o.limits;
        if self.m.is_paused() {
            return self.paused();
        }
        if find_condition(&self.st.conditions, cond::PAUSED)
            .is_some_and(|c| c.status == ConditionStatus::True)
        {
            self.condition(
                cond::PAUSED,
                ConditionStatus::False,
                "Resumed",
                format!("{PAUSED_ANNOTATION} was removed"),
            );
        }
        if self.m.metadata.deletion_timestamp.is_some() {
            if !self.has_finalizer() {
                return Step::Requeue {
                    after: limits.resync,
                };
            }
            self.observe_bmc();
            return self.deprovision(true);
        }
        if !self.has_finalizer() {
            self.push(Step::AddFinalizer);
        }
        self.hardware_labels();
        self.observe_bmc();
        let phase = self.phase();
        if matches!(
            phase,
            MachinePhase::Provisioned | MachinePhase::Ready | MachinePhase::Reimaging
        ) {
            self.observe_node();
        }
        if matches!(phase, MachinePhase::Ready | MachinePhase::Reimaging) {
            self.remediation_record();
        }
        let next = match phase {
            MachinePhase::Registering => self.registering(),
            MachinePhase::Available => self.available(),
            MachinePhase::Provisioning => self.boot_phase(BootPurpose::Install),
            MachinePhase::Reimaging => self.boot_phase(BootPurpose::Reimage),
            MachinePhase::Provisioned => self.provisioned(),
            MachinePhase::Ready => self.ready(),
            MachinePhase::Deprovisioning => self.deprovision(false),
            MachinePhase::Error => self.error_phase(),
        };
        if self.phase() != MachinePhase::Deprovisioning {
            self.up_to_date();
        }
        next
    }

    /// Label the machine with its inventory's facts when they changed.
    fn hardware_labels(&mut self) {
        let Some(inv) = &self.st.inventory else {
            return;
        };
        let facts = hw_labels::hardware_labels(inv);
        let applied = self
            .m
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(hw_labels::APPLIED_ANNOTATION))
            .map(String::as_str);
        let labels = hw_labels::changes(&facts, applied);
        if !labels.is_empty() {
            self.push(Step::SetHardwareLabels {
                labels,
                applied: hw_labels::applied_text(&facts),
            });
        }
    }

    /// A paused machine: say so, touch nothing else (no BMC call, no boot,
    /// no finalizer), look again at the next resync or when it changes.
    fn paused(&mut self) -> Step {
        self.condition(
            cond::PAUSED,
            ConditionStatus::True,
            "Annotation",
            format!("{PAUSED_ANNOTATION} is set: no BMC call and no boot until it is removed"),
        );
        Step::Requeue {
            after: self.o.limits.resync,
        }
    }

    fn observe_bmc(&mut self) {
        match &self.o.bmc {
            BmcObserved::Reachable { power } => {
                self.condition(
                    cond::BMC_REACHABLE,
                    ConditionStatus::True,
                    "Reachable",
                    String::new(),
                );
                if self.st.power_state != Some(*power) {
                    self.push(Step::SetPowerState(*power));
                }
                let (s, r) = match power {
                    PowerState::On => (ConditionStatus::True, "On"),
                    PowerState::Off => (ConditionStatus::False, "Off"),
                    PowerState::Unknown => (ConditionStatus::Unknown, "Unknown"),
                };
                self.condition(cond::POWER_STATE, s, r, String::new());
                // A refused boot override is not cured by reaching the BMC:
                // the boot it stopped fails with it (see `drive_boot`).
                // A failed step before a power-on stays told until its
                // retry is due: clearing it at once would make the write a
                // watch event that retries the step at once.
                if self.st.last_error.as_ref().is_some_and(|e| {
                    e.reason.starts_with("Bmc")
                        && e.reason != super::boot::OVERRIDE_REFUSED
                        && !super::boot::media_unsupported(e)
                        && self.bmc_retry_left(e).is_none()
                }) {
                    self.clear_error();
                }
            }
            // The condition always tells; the last error only when the BMC
            // is what holds the machine up (see `wait_bmc`), so it never
            // hides a more important error such as an install timeout.
            BmcObserved::Unreachable { reason, message } => {
                self.condition(
                    cond::BMC_REACHABLE,
                    ConditionStatus::False,
                    reason,
                    message.clone(),
                );
            }
            BmcObserved::NotAsked => {}
        }
    }

    /// How long until a step before a boot's power-on (volumes, firmware,
    /// BIOS settings) that failed with `e` may be retried (`None`: now, or
    /// `e` is not such a failure). The executor names the step first in
    /// the message.
    pub fn bmc_retry_left(&self, e: &crate::api::LastError) -> Option<Duration> {
        let pre_boot = super::plan::PRE_BOOT_STEPS
            .iter()
            .any(|s| e.message.starts_with(s));
        let since = elapsed(e.time, self.now);
        let retry = self.o.limits.bmc_retry;
        (pre_boot && e.reason.starts_with("Bmc") && since < retry).then(|| retry - since)
    }

    /// The wait for the retry of a BMC step that just failed (see
    /// [`Self::bmc_retry_left`]), if one is due later.
    pub fn hold_for_bmc_retry(&self) -> Option<Step> {
        let left = self
            .st
            .last_error
            .as_ref()
            .and_then(|e| self.bmc_retry_left(e))?;
        Some(wait(left, "BMC retry"))
    }

    /// Wait for an unreachable BMC that the next step needs, saying so in
    /// the last error.
    pub fn wait_bmc(&mut self) -> Step {
        if let BmcObserved::Unreachable { reason, message } = &self.o.bmc {
            self.error(reason, message.clone());
        }
        wait(self.o.limits.bmc_retry, "BMC")
    }

    fn observe_node(&mut self) {
        let name = self.node();
        match &self.o.node {
            NodeObserved::NotConfigured => {}
            NodeObserved::Absent => self.condition(
                cond::NODE_READY,
                ConditionStatus::False,
                "NodeNotFound",
                format!("node {name} is not registered"),
            ),
            NodeObserved::Unknown { message } => self.condition(
                cond::NODE_READY,
                ConditionStatus::Unknown,
                "ClusterUnreachable",
                message.clone(),
            ),
            NodeObserved::Present(n) => {
                if self.st.node_ref.as_ref().map(|r| &r.name) != Some(&n.name) {
                    self.push(Step::SetNodeRef(n.name.clone()));
                }
                let obs = ObservedVersions {
                    image: self.st.observed.as_ref().and_then(|o| o.image.clone()),
                    kubelet_version: Some(n.kubelet_version.clone()),
                    container_runtime: Some(n.container_runtime_version.clone()),
                    os_image: Some(n.os_image.clone()),
                };
                if self.st.observed.as_ref() != Some(&obs) {
                    self.push(Step::SetObserved(obs));
                }
                let cordoned = if n.unschedulable {
                    "node is cordoned".to_string()
                } else {
                    String::new()
                };
                if n.ready {
                    self.condition(
                        cond::NODE_READY,
                        ConditionStatus::True,
                        "KubeletReady",
                        cordoned,
                    );
                } else {
                    self.condition(
                        cond::NODE_READY,
                        ConditionStatus::False,
                        "KubeletNotReady",
                        cordoned,
                    );
                }
            }
        }
    }

    /// The installed revision is what the class (or the set's pinned
    /// revision) wants, or installs the same under another name: then
    /// record the wanted name instead of reimaging.
    fn runs_wanted(&mut self, c: &super::plan::ClassView) -> bool {
        let have = self.st.provisioned_revision.as_deref();
        if have == Some(&c.revision) {
            return true;
        }
        // What is on the server, whatever it was called when installed (a
        // status written before `installedHash` existed names it only).
        let content = self.st.installed_hash.as_deref().or(have);
        if content != Some(&c.installs) && have != Some(&c.installs) {
            return false;
        }
        self.push(Step::MarkProvisioned {
            revision: c.revision.clone(),
            installs: c.installs.clone(),
        });
        true
    }

    fn up_to_date(&mut self) {
        let (Some(have), ClassObserved::Present(c)) =
            (&self.st.provisioned_revision, &self.o.class)
        else {
            return;
        };
        let (have, want) = (have.clone(), c.revision.clone());
        if have == want {
            self.condition(
                cond::UP_TO_DATE,
                ConditionStatus::True,
                "RevisionInstalled",
                format!("revision {have}"),
            );
        } else {
            self.condition(
                cond::UP_TO_DATE,
                ConditionStatus::False,
                "RevisionChanged",
                format!("installed revision {have}, class wants {want}"),
            );
        }
    }

    fn registering(&mut self) -> Step {
        self.set_phase(MachinePhase::Registering);
        if !matches!(self.o.bmc, BmcObserved::Reachable { .. }) {
            return self.wait_bmc();
        }
        let Some(inv) = &self.st.inventory else {
            self.push(Step::ReadInventory);
            return again();
        };
        if self.m.spec.boot_mac_address.is_none() {
            match inv.nics.iter().find(|n| !n.mac.is_empty()) {
                Some(nic) => {
                    let mac = nic.mac.to_ascii_lowercase();
                    self.push(Step::SetBootMac(mac));
                }
                None => {
                    self.error(
                        "NoBootMac",
                        "the BMC lists no NIC MAC address; set spec.bootMACAddress".into(),
                    );
                    return wait(self.o.limits.bmc_retry, "boot MAC");
                }
            }
        }
        self.clear_error();
        self.set_phase(MachinePhase::Available);
        again()
    }

    fn available(&mut self) -> Step {
        let limits = self.o.limits;
        if self.m.spec.externally_provisioned {
            return self.adopt();
        }
        match &self.o.class {
            ClassObserved::NotReferenced => {
                self.clear_waiting();
                let BmcObserved::Reachable { power } = self.o.bmc else {
                    return self.wait_bmc();
                };
                let want = if self.m.spec.online {
                    PowerState::On
                } else {
                    PowerState::Off
                };
                if power == want {
                    return Step::Requeue {
                        after: limits.resync,
                    };
                }
                self.push(if self.m.spec.online {
                    Step::PowerOn
                } else {
                    Step::PowerOff
                });
                wait(limits.poll, "power state")
            }
            ClassObserved::Missing { name } => {
                let msg = format!("MachineClass {name} does not exist");
                self.condition(
                    cond::PROVISIONED,
                    ConditionStatus::False,
                    "ClassNotFound",
                    msg,
                );
                Step::Requeue {
                    after: limits.resync,
                }
            }
            ClassObserved::Present(c) => {
                let msg = format!("installing class {}", c.name);
                self.condition(
                    cond::PROVISIONED,
                    ConditionStatus::False,
                    "Provisioning",
                    msg,
                );
                self.start_run(MachinePhase::Provisioning);
                again()
            }
        }
    }

    /// A server provisioned outside metalherd: no power action, no boot.
    /// With its class present, its revision is recorded as installed and
    /// it is Ready (its Node, when a cluster is configured, is watched as
    /// any Ready machine's); a later change of revision reimages it.
    fn adopt(&mut self) -> Step {
        let resync = Step::Requeue {
            after: self.o.limits.resync,
        };
        match &self.o.class {
            ClassObserved::NotReferenced => resync,
            ClassObserved::Missing { name } => {
                let msg = format!("MachineClass {name} does not exist");
                self.condition(
                    cond::PROVISIONED,
                    ConditionStatus::False,
                    "ClassNotFound",
                    msg,
                );
                resync
            }
            ClassObserved::Present(c) => {
                let revision = c.revision.clone();
                let msg = format!("provisioned outside metalherd; recorded as revision {revision}");
                self.push(Step::MarkProvisioned {
                    revision,
                    installs: c.installs.clone(),
                });
                self.condition(
                    cond::PROVISIONED,
                    ConditionStatus::True,
                    "ExternallyProvisioned",
                    msg,
                );
                self.set_phase(MachinePhase::Ready);
                again()
            }
        }
    }

    /// Enter a phase that runs a network boot: boots minted before now do
    /// not count for it, and failures start from zero.
    pub fn start_run(&mut self, phase: MachinePhase) {
        let prev = self
            .st
            .boot
            .as_ref()
            .map_or_else(|| "none".to_string(), |b| b.id.clone());
        self.set_progress(Mark::PreviousBoot(prev));
        self.clear_progress(MarkKey::Attempts);
        self.clear_progress(MarkKey::RetryAt);
        self.set_phase(phase);
    }

    /// A request annotation's value not acted on yet (`done` is the value
    /// last acted on).
    fn request(&self, key: &str, done: Option<&String>) -> Option<String> {
        self.m
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
            .filter(|v| done != Some(*v))
            .cloned()
    }

    fn ready(&mut self) -> Step {
        let resync = Step::Requeue {
            after: self.o.limits.resync,
        };
        // A power cycle asked for (by a set's remediation, or a person):
        // its marker goes out before the BMC call, so a restart does not
        // cycle twice.
        if let Some(v) = self.request(
            super::plan::POWER_CYCLE_ANNOTATION,
            self.progress().power_cycle_request.as_ref(),
        ) {
            if !matches!(self.o.bmc, BmcObserved::Reachable { .. }) {
                return self.wait_bmc();
            }
            self.set_progress(Mark::PowerCycleRequest(v.clone()));
            self.push(Step::Note {
                step: BootStep::PowerCycled,
                detail: v,
            });
            self.push(Step::PowerCycle);
            return wait(self.o.limits.poll, "power cycle");
        }
        match &self.o.class {
            ClassObserved::NotReferenced => {
                self.start_run(MachinePhase::Deprovisioning);
                again()
            }
            ClassObserved::Missing { .. } => resync,
            ClassObserved::Present(c) => {
                let request = self.request(
                    super::plan::REIMAGE_ANNOTATION,
                    self.progress().reimage_request.as_ref(),
                );
                let changed = !self.runs_wanted(&c.clone());
                if !changed && request.is_none() {
                    return self.remediation_action().unwrap_or(resync);
                }
                if let Some(v) = request {
                    self.set_progress(Mark::ReimageRequest(v.clone()));
                    self.push(Step::Note {
                        step: BootStep::ReimageRequested,
                        detail: v,
                    });
                }
                self.start_run(MachinePhase::Reimaging);
                again()
            }
        }
    }

    /// Wait out the retry backoff, if one is running.
    pub fn retry_gate(&mut self) -> Option<Step> {
        let at = self.progress().retry_at?;
        (at > self.now).then(|| wait(elapsed(self.now, at), "retry backoff"))
    }

    fn error_phase(&mut self) -> Step {
        if let Some(w) = self.retry_gate() {
            return w;
        }
        let back = self
            .progress()
            .error_from
            .filter(|p| *p != MachinePhase::Error)
            .unwrap_or(MachinePhase::Registering);
        self.set_phase(back);
        again()
    }
}
