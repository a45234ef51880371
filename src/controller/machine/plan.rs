//! The Machine lifecycle as data: what [`decide`](super::decide::decide)
//! takes (the Machine, what was [`Observed`], `now`) and returns (a [`Plan`]
//! of [`Step`]s), plus the pure helpers both it and the executor need
//! ([`desired_revision`], [`apply_status`], reading boot outcomes).
//!
//! Pure: no BMC, store or cluster calls, no clocks, no randomness here.
//!
//! The crash-safety rule a plan keeps: the executor persists every status
//! step before it runs the next effect step, and a non-repeatable effect
//! (a power cycle) is always preceded by a status marker naming the boot it
//! serves (`progress.powerCycledFor = boot id`). After a crash, `decide`
//! sees the marker and does not cycle again. Repeatable effects (cordon,
//! drain, delete Node, power on/off, boot override, release address) need no
//! marker: doing them twice is harmless, and their result is observable.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::ConditionStatus;
use crate::api::condition::set_condition;
use crate::api::{
    BootEvent, BootRecord, BootStep, Condition, LastError, LocalObjectReference, Machine,
    MachinePhase, MachineStatus, ObservedVersions, PowerState,
};
use crate::bmc::BootDevice;

pub use super::class_view::{ClassView, desired_revision};
use crate::cluster::NodeState;

pub use crate::api::boot::BootDeadlines;
pub use crate::api::machine::{FINALIZER, POWER_CYCLE_ANNOTATION, REIMAGE_ANNOTATION};
pub use crate::api::{BootOutcome, BootPurpose};

/// The `status.progress` markers (their owner: src/api/progress.rs).
pub use crate::api::{BootProgress, Mark, MarkKey};

/// Condition types a Machine carries.
pub mod cond {
    pub const BMC_REACHABLE: &str = "BmcReachable";
    pub const POWER_STATE: &str = "PowerState";
    pub const PROVISIONED: &str = "Provisioned";
    pub const NODE_READY: &str = "NodeReady";
    pub const UP_TO_DATE: &str = "UpToDate";
    /// True while the machine waits for a boot-storm slot.
    pub const WAITING: &str = "Waiting";
    /// True while the `metalherd.dev/paused` annotation is set.
    pub const PAUSED: &str = "Paused";
    /// True in phase Ready (provisioned, its Node up): what
    /// `kubectl wait --for=condition=Ready` waits for.
    pub const READY: &str = "Ready";
    /// False once the Machine's own remediation policy gave up on it.
    pub const REMEDIATION: &str = "Remediation";
}

/// The `Ready` condition that goes with phase `p`: `True` only in phase
/// Ready; otherwise `False` with the phase as the reason.
pub fn ready_condition(p: MachinePhase, now: Timestamp) -> Condition {
    let ready = p == MachinePhase::Ready;
    Condition {
        type_: cond::READY.into(),
        status: ConditionStatus::of(ready),
        observed_generation: None,
        last_transition_time: now,
        reason: if ready { cond::NODE_READY } else { p.as_str() }.into(),
        message: if ready {
            "provisioned and its Node is Ready".into()
        } else {
            format!("phase {}", p.as_str())
        },
    }
}

/// What the BMC said this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BmcObserved {
    Reachable {
        power: PowerState,
    },
    /// `reason` is CamelCase (`BmcBadCredentials`, `BmcUnreachable`).
    Unreachable {
        reason: String,
        message: String,
    },
    /// Not contacted: the machine is paused.
    NotAsked,
}

/// The class reference, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassObserved {
    /// `spec.classRef` is absent.
    NotReferenced,
    /// Referenced but not in the store.
    Missing {
        name: String,
    },
    Present(ClassView),
}

/// The machine's Node in the target cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeObserved {
    /// No kubeconfig for a target cluster: the `booted` call-home stands in
    /// for Node readiness.
    NotConfigured,
    Absent,
    Present(NodeState),
    /// The cluster could not be asked.
    Unknown {
        message: String,
    },
}

/// Deadlines and pacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Install and join deadlines.
    pub deadlines: BootDeadlines,
    /// How often to look while waiting for a boot or a Node.
    pub poll: Duration,
    /// How long to wait before asking an unreachable BMC again.
    pub bmc_retry: Duration,
    /// How long to wait for a boot-storm slot before looking again even
    /// though no freed slot woke the machine (a safety net).
    pub slot_wait: Duration,
    /// Periodic look at a settled machine.
    pub resync: Duration,
    /// Backoff after failed boots: `retry_base * 2^(attempts-1)`, capped.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// Failed boots in a row before the machine goes to `Error`.
    pub max_boot_attempts: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadlines: BootDeadlines::default(),
            poll: Duration::from_secs(15),
            bmc_retry: Duration::from_secs(30),
            // A safety net only: a freed slot wakes its next waiter.
            slot_wait: Duration::from_secs(60),
            resync: Duration::from_secs(300),
            retry_base: Duration::from_secs(30),
            retry_cap: Duration::from_secs(3600),
            max_boot_attempts: 3,
        }
    }
}

impl Limits {
    pub fn retry_after(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(31);
        self.retry_base
            .checked_mul(1u32 << shift)
            .unwrap_or(self.retry_cap)
            .min(self.retry_cap)
    }
}

/// Everything `decide` knows besides the Machine itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub bmc: BmcObserved,
    pub class: ClassObserved,
    pub node: NodeObserved,
    /// The boot-storm limit lets this machine start (or keep) a boot: the
    /// executor asks `BootSlots::would_admit`, takes the slot when the plan
    /// mints a boot, and gives it back once [`holds_boot_slot`] is false.
    pub boot_slot: bool,
    pub limits: Limits,
}

/// One thing to do. Status steps only edit `status` (see [`apply_status`]);
/// metadata steps edit metadata or spec; effects reach the BMC or the
/// target cluster; the last step of every plan schedules the next look.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    // metadata and spec
    AddFinalizer,
    RemoveFinalizer,
    /// Learned from inventory: write `spec.bootMACAddress`.
    SetBootMac(String),
    /// Hardware labels whose inventory fact changed (`None`: remove), and
    /// the facts now applied, for the annotation (see [`super::hw_labels`]).
    SetHardwareLabels {
        labels: std::collections::BTreeMap<String, Option<String>>,
        applied: String,
    },
    // status
    SetPhase(MachinePhase),
    SetPowerState(PowerState),
    SetCondition(Condition),
    SetProgress(Mark),
    ClearProgress(MarkKey),
    RecordError {
        reason: String,
        message: String,
    },
    ClearError,
    /// The executor writes a new `status.boot` with a fresh id and token.
    MintBoot {
        purpose: BootPurpose,
        revision: Option<String>,
    },
    /// Close the current boot (its token dies) with this outcome.
    CompleteBoot {
        outcome: BootOutcome,
    },
    MarkProvisioned {
        revision: String,
        /// What it installs ([`ClassView::installs`]).
        installs: String,
    },
    /// Forget what was installed (back to the pool).
    ClearProvisioned,
    SetNodeRef(String),
    SetObserved(ObservedVersions),
    /// The standalone Machine's remediation record (`None`: drop it).
    SetRemediation(Option<crate::api::MachineRemediation>),
    /// A step the controller itself took on request, added to the boot
    /// history (and told as an event, reason the step's word).
    Note {
        step: BootStep,
        detail: String,
    },
    /// A Warning event, told after the status write (nothing is stored).
    Warn {
        reason: String,
        message: String,
    },
    // effects
    ReadInventory,
    /// Read the BIOS attributes into `status.bios`.
    ReadBios,
    /// Write these BIOS attributes to the BMC's pending settings.
    WriteBios(std::collections::BTreeMap<String, String>),
    /// Read the firmware versions into `status.firmware`.
    ReadFirmware,
    /// Update one component: the image cached and served to the BMC,
    /// `SimpleUpdate`, its task followed to the end.
    UpdateFirmware(crate::api::FirmwareImage),
    /// Read the storage volumes into `status.volumes`.
    ReadVolumes,
    /// Create one RAID volume.
    CreateVolume(crate::api::VolumeSpec),
    SetBootOnce(BootDevice),
    /// Insert this boot's ISO into the BMC's virtual CD (the URL is boot
    /// HTTP's, with the boot's media token), noted as `MediaInserted`.
    InsertMedia,
    /// Eject the virtual CD, noted as `MediaEjected`.
    EjectMedia,
    PowerOn,
    PowerCycle,
    PowerOff,
    CordonNode(String),
    DrainNode(String),
    DeleteNode(String),
    UncordonNode(String),
    ReleaseAddress,
    // scheduling
    /// Look again after this long; `what` says what is awaited.
    WaitFor {
        after: Duration,
        what: &'static str,
    },
    Requeue {
        after: Duration,
    },
}

/// The BMC steps around a boot (volumes, firmware and BIOS before its
/// power-on, their reads after the install), as their failures' messages
/// start (`{step}: {error}`): one that failed is retried after the BMC
/// retry wait, not at the watch event its own error makes.
pub const PRE_BOOT_STEPS: [&str; 8] = [
    "InsertMedia",
    "EjectMedia",
    "ReadVolumes",
    "CreateVolume(",
    "ReadFirmware",
    "UpdateFirmware(",
    "ReadBios",
    "WriteBios(",
];

/// What a plan that waits for a boot-storm slot says it awaits
/// (`WaitFor { what: BOOT_SLOT, .. }`): the executor then keeps the
/// machine's place among the slot's waiters.
pub const BOOT_SLOT: &str = "boot slot";

/// How a step is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    Metadata,
    Status,
    Effect,
    Schedule,
}

impl Step {
    /// Whether the status changes before this effect must be written
    /// before it runs: yes for every step that changes something outside
    /// (BMC settings and power, the Node, the address), so a crash right
    /// after one finds its record. Reading the inventory changes nothing:
    /// the registration before it goes out with the inventory itself.
    /// Setting the next boot to the disk after an install is repeatable
    /// and its marker (`diskBootFor`) follows it: the phase change before
    /// it (`Provisioned`) goes out in the same write as the marker.
    pub fn needs_record_before(&self) -> bool {
        use Step::*;
        !matches!(
            self,
            ReadInventory
                | ReadBios
                | ReadFirmware
                | ReadVolumes
                | SetBootOnce(BootDevice::Disk)
                | EjectMedia
        )
    }

    pub fn kind(&self) -> StepKind {
        use Step::*;
        match self {
            AddFinalizer | RemoveFinalizer | SetBootMac(_) | SetHardwareLabels { .. } => {
                StepKind::Metadata
            }
            ReadInventory | ReadBios | WriteBios(_) | ReadFirmware | UpdateFirmware(_)
            | ReadVolumes | CreateVolume(_) | SetBootOnce(_) | InsertMedia | EjectMedia
            | PowerOn | PowerCycle | PowerOff | CordonNode(_) | DrainNode(_) | DeleteNode(_)
            | UncordonNode(_) | ReleaseAddress => StepKind::Effect,
            WaitFor { .. } | Requeue { .. } => StepKind::Schedule,
            _ => StepKind::Status,
        }
    }
}

impl fmt::Display for Step {
    /// Compact form for logs, events and tests: `SetPhase(Ready)`,
    /// `SetCondition(Waiting=True:BootStormLimit)`, `WaitFor(install)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Step::*;
        match self {
            SetBootMac(m) => write!(f, "SetBootMac({m})"),
            SetHardwareLabels { applied, .. } => write!(f, "SetHardwareLabels({applied})"),
            SetPhase(p) => write!(f, "SetPhase({})", p.as_str()),
            SetPowerState(p) => write!(f, "SetPowerState({p:?})"),
            SetCondition(c) => write!(f, "SetCondition({}={}:{})", c.type_, c.status, c.reason),
            SetProgress(m) => write!(f, "SetProgress({m})"),
            ClearProgress(k) => write!(f, "ClearProgress({k})"),
            RecordError { reason, .. } => write!(f, "RecordError({reason})"),
            MintBoot { purpose, revision } => {
                write!(
                    f,
                    "MintBoot({},{})",
                    purpose.as_str(),
                    revision.as_deref().unwrap_or("-")
                )
            }
            CompleteBoot { outcome } => write!(f, "CompleteBoot({outcome})"),
            MarkProvisioned { revision, .. } => write!(f, "MarkProvisioned({revision})"),
            SetNodeRef(n) => write!(f, "SetNodeRef({n})"),
            Note { step, .. } => write!(f, "Note({step})"),
            Warn { reason, .. } => write!(f, "Warn({reason})"),
            SetRemediation(r) => match r {
                Some(r) => write!(
                    f,
                    "SetRemediation({}c,{}r{})",
                    r.power_cycles,
                    r.reimages,
                    if r.exhausted { ",exhausted" } else { "" }
                ),
                None => write!(f, "SetRemediation(-)"),
            },
            SetObserved(o) => write!(
                f,
                "SetObserved({})",
                o.kubelet_version.as_deref().unwrap_or("-")
            ),
            SetBootOnce(d) => write!(f, "SetBootOnce({d:?})"),
            WriteBios(a) => {
                let names: Vec<&str> = a.keys().map(String::as_str).collect();
                write!(f, "WriteBios({})", names.join(","))
            }
            UpdateFirmware(fw) => write!(f, "UpdateFirmware({}={})", fw.component, fw.version),
            CreateVolume(v) => write!(f, "CreateVolume({})", v.name),
            CordonNode(n) => write!(f, "CordonNode({n})"),
            DrainNode(n) => write!(f, "DrainNode({n})"),
            DeleteNode(n) => write!(f, "DeleteNode({n})"),
            UncordonNode(n) => write!(f, "UncordonNode({n})"),
            WaitFor { what, .. } => write!(f, "WaitFor({what})"),
            Requeue { after } => write!(f, "Requeue({}s)", after.as_secs()),
            other => write!(f, "{other:?}"),
        }
    }
}

/// The steps to take now, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
}

impl Plan {
    /// When to look again (the plan's last step).
    pub fn requeue_after(&self) -> Option<Duration> {
        self.steps.iter().rev().find_map(|s| match s {
            Step::WaitFor { after, .. } | Step::Requeue { after } => Some(*after),
            _ => None,
        })
    }

    /// Whether the plan ends waiting for a boot-storm slot.
    pub fn waits_for_boot_slot(&self) -> bool {
        matches!(
            self.steps.last(),
            Some(Step::WaitFor { what, .. }) if *what == BOOT_SLOT
        )
    }

    /// Whether the next decision may follow in the same reconcile (see
    /// `Executor::run`): the plan asks to be looked at again right away
    /// and took no step that changes what was observed for it (power
    /// state, the Node) or ends the object.
    pub fn continues_at_once(&self) -> bool {
        use Step::*;
        self.requeue_after() == Some(Duration::ZERO)
            && !self.steps.iter().any(|s| {
                matches!(
                    s,
                    PowerOn
                        | PowerCycle
                        | PowerOff
                        | CordonNode(_)
                        | DrainNode(_)
                        | DeleteNode(_)
                        | UncordonNode(_)
                        | RemoveFinalizer
                )
            })
    }

    pub fn effects(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.kind() == StepKind::Effect)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.steps.iter().map(Step::to_string).collect();
        f.write_str(&parts.join(" → "))
    }
}

/// The Node name a machine registers as: its hostname, else its name.
pub fn node_name(machine: &Machine) -> String {
    machine
        .spec
        .network
        .as_ref()
        .and_then(|n| n.hostname.clone())
        .or_else(|| machine.metadata.name.clone())
        .unwrap_or_default()
}

/// The outcome of `boot`, if it has one yet: the record's `outcome`, else
/// the installer's call-home in `status.bootHistory`.
pub fn boot_outcome(status: &MachineStatus, boot: &BootRecord) -> Option<BootOutcome> {
    if let Some(o) = &boot.outcome {
        return Some(o.clone());
    }
    status
        .boot_history
        .iter()
        .filter(|e| e.boot_id.as_deref() == Some(&boot.id))
        .find_map(|e| match e.step {
            BootStep::Installed => Some(BootOutcome::Installed),
            BootStep::Wiped => Some(BootOutcome::Wiped),
            BootStep::Failed => Some(BootOutcome::Failed),
            _ => None,
        })
}

/// The reason the installer gave with its last `failed` call-home for
/// `boot_id` (empty when it gave none).
pub fn failed_detail(status: &MachineStatus, boot_id: &str) -> String {
    status
        .boot_history
        .iter()
        .rev()
        .find(|e| e.boot_id.as_deref() == Some(boot_id) && e.step == BootStep::Failed)
        .map(|e| e.detail.clone())
        .unwrap_or_default()
}

/// Whether a machine with this status occupies a boot-storm slot: it has a
/// network boot open. Rebuilding the slot table after a restart uses this.
pub fn holds_boot_slot(status: &MachineStatus) -> bool {
    status
        .boot
        .as_ref()
        .is_some_and(|b| b.completed_at.is_none())
}

/// Whether the installed OS of `boot_id` called home `booted`.
pub fn booted(status: &MachineStatus, boot_id: &str) -> bool {
    status
        .boot_history
        .iter()
        .any(|e| e.boot_id.as_deref() == Some(boot_id) && e.step == BootStep::Booted)
}

/// The steps of one boot, for error messages: `DHCPAck@03:01:02Z, TFTP ipxe.efi@...`.
pub fn boot_timeline(status: &MachineStatus, boot_id: &str) -> String {
    let steps: Vec<String> = status
        .boot_history
        .iter()
        .filter(|e| e.boot_id.as_deref() == Some(boot_id))
        .map(|e| {
            let t = e.time.strftime("%H:%M:%SZ");
            if e.detail.is_empty() {
                format!("{}@{t}", e.step)
            } else {
                format!("{} {}@{t}", e.step, e.detail)
            }
        })
        .collect();
    if steps.is_empty() {
        "no network boot activity was seen".to_string()
    } else {
        let skip = steps.len().saturating_sub(8);
        format!("boot steps: {}", steps[skip..].join(", "))
    }
}

/// Apply a status step to `status` (what the executor writes, and what
/// `decide` uses to avoid planning a change twice). Other steps, and
/// `MintBoot` (which needs a fresh id), leave it unchanged.
pub fn apply_status(status: &mut MachineStatus, step: &Step, now: Timestamp) {
    match step {
        Step::SetPhase(p) => {
            status.phase = Some(*p);
            set_condition(&mut status.conditions, ready_condition(*p, now));
        }
        Step::SetPowerState(p) => status.power_state = Some(*p),
        Step::SetCondition(c) => set_condition(&mut status.conditions, c.clone()),
        Step::SetProgress(m) => status.progress.set(m.clone()),
        Step::ClearProgress(k) => status.progress.clear(*k),
        Step::RecordError { reason, message } => {
            status.last_error = Some(LastError {
                reason: reason.clone(),
                message: message.clone(),
                time: now,
            });
        }
        Step::ClearError => status.last_error = None,
        Step::CompleteBoot { outcome } => {
            if let Some(b) = status.boot.as_mut() {
                b.completed_at.get_or_insert(now);
                b.outcome = Some(outcome.clone());
            }
        }
        Step::MarkProvisioned { revision, installs } => {
            status.provisioned_revision = Some(revision.clone());
            status.installed_hash = Some(installs.clone());
        }
        Step::ClearProvisioned => {
            status.provisioned_revision = None;
            status.installed_hash = None;
            status.node_ref = None;
            status.observed = None;
        }
        Step::SetNodeRef(n) => status.node_ref = Some(LocalObjectReference { name: n.clone() }),
        Step::SetObserved(o) => status.observed = Some(o.clone()),
        Step::SetRemediation(r) => status.remediation = r.clone(),
        Step::Note { step, detail } => {
            let ev = BootEvent {
                time: now,
                step: step.clone(),
                detail: detail.clone(),
                bytes: None,
                boot_id: status.boot.as_ref().map(|b| b.id.clone()),
            };
            crate::api::boot::insert_boot_events(&mut status.boot_history, &[ev]);
        }
        _ => {}
    }
}
