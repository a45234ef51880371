//! Shared builders for `decide`'s tests: a Machine and an observation that
//! read like the situation they describe, and the checks every plan must
//! pass. The table of cases is in `tests/table.rs`; lifecycle walks with a
//! simulated executor (including crashes) are in `tests/walk.rs`.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::plan::{
    BmcObserved, ClassObserved, ClassView, FINALIZER, Limits, NodeObserved, Observed, Plan,
    StepKind, apply_status,
};
use super::{Step, decide};
use crate::api::condition::set_condition;
use crate::api::*;
use crate::cluster::NodeState;

mod remediate;
mod table;
mod units;
mod walk;

pub const T0: i64 = 1_800_000_000;

pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(T0 + secs).unwrap()
}

pub const MIN: i64 = 60;

/// A Machine under construction.
#[derive(Clone, Debug)]
pub struct M(pub Machine);

pub fn machine() -> M {
    let mut m = Machine::new(
        "m1",
        MachineSpec {
            bmc: BmcSpec {
                address: "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1".into(),
                ..BmcSpec::default()
            },
            boot_mac_address: Some("52:54:00:00:00:01".into()),
            ..MachineSpec::default()
        },
    );
    m.metadata.namespace = Some("default".into());
    m.metadata.finalizers = Some(vec![FINALIZER.into()]);
    m.status = Some(MachineStatus {
        inventory: Some(Inventory::default()),
        ..MachineStatus::default()
    });
    M(m)
}

impl M {
    fn st(&mut self) -> &mut MachineStatus {
        self.0.status.get_or_insert_with(Default::default)
    }
    pub fn phase(mut self, p: MachinePhase) -> M {
        self.st().phase = Some(p);
        self
    }
    pub fn no_finalizer(mut self) -> M {
        self.0.metadata.finalizers = None;
        self
    }
    pub fn fresh(mut self) -> M {
        self.0.status = None;
        self.0.metadata.finalizers = None;
        self
    }
    pub fn deleting(mut self) -> M {
        self.0.metadata.deletion_timestamp = Some(Time(at(0)));
        self
    }
    pub fn class(mut self) -> M {
        self.0.spec.class_ref = Some(LocalObjectReference {
            name: "workers".into(),
        });
        self
    }
    pub fn online(mut self) -> M {
        self.0.spec.online = true;
        self
    }
    pub fn no_mac(mut self) -> M {
        self.0.spec.boot_mac_address = None;
        self
    }
    pub fn no_inventory(mut self) -> M {
        self.st().inventory = None;
        self
    }
    pub fn nics(mut self, macs: &[&str]) -> M {
        self.st().inventory = Some(Inventory {
            nics: macs
                .iter()
                .map(|m| NicInfo {
                    name: "eth".into(),
                    mac: m.to_string(),
                    ..NicInfo::default()
                })
                .collect(),
            ..Inventory::default()
        });
        self
    }
    pub fn power(mut self, p: PowerState) -> M {
        self.st().power_state = Some(p);
        self
    }
    /// An open boot minted at `minted`.
    pub fn boot(mut self, id: &str, purpose: &str, rev: Option<&str>, minted: i64) -> M {
        self.st().boot = Some(BootRecord {
            id: id.into(),
            purpose: serde_json::from_value(serde_json::json!(purpose)).unwrap(),
            revision: rev.map(str::to_string),
            minted_at: at(minted),
            ..BootRecord::default()
        });
        self
    }
    /// Close the boot at `t` with `outcome`.
    pub fn completed(mut self, t: i64, outcome: &str) -> M {
        if let Some(b) = self.st().boot.as_mut() {
            b.completed_at = Some(at(t));
            b.outcome = Some(outcome.into());
        }
        self
    }
    /// Set marker `k` as its stored text, the way a status on the wire
    /// carries it (a key this version does not know fails the test).
    pub fn progress(mut self, k: &str, v: &str) -> M {
        let mut map = serde_json::to_value(&self.st().progress).unwrap();
        map[k] = serde_json::Value::String(v.into());
        let p: crate::api::BootProgress = serde_json::from_value(map).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap()[k], v, "marker {k}={v}");
        self.st().progress = p;
        self
    }
    pub fn history(mut self, step: &str, boot: &str, t: i64, detail: &str) -> M {
        self.st().boot_history.push(BootEvent {
            time: at(t),
            step: step.into(),
            detail: detail.into(),
            bytes: None,
            boot_id: Some(boot.into()),
        });
        self
    }
    pub fn provisioned(mut self, rev: &str) -> M {
        self.st().provisioned_revision = Some(rev.into());
        self
    }
    pub fn node_ref(mut self, n: &str) -> M {
        self.st().node_ref = Some(LocalObjectReference { name: n.into() });
        self
    }
    pub fn annotate(mut self, k: &str, v: &str) -> M {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(k.into(), v.into());
        self
    }
    pub fn condition(mut self, type_: &str, status: &str, reason: &str, msg: &str) -> M {
        set_condition(
            &mut self.st().conditions,
            Condition {
                type_: type_.into(),
                status: crate::api::ConditionStatus::parse(status),
                observed_generation: None,
                last_transition_time: at(0),
                reason: reason.into(),
                message: msg.into(),
            },
        );
        self
    }
    pub fn last_error(mut self, reason: &str, msg: &str) -> M {
        self.st().last_error = Some(LastError {
            reason: reason.into(),
            message: msg.into(),
            time: at(0),
        });
        self
    }
    pub fn observed(mut self, kubelet: &str) -> M {
        self.st().observed = Some(ObservedVersions {
            image: None,
            kubelet_version: Some(kubelet.into()),
            container_runtime: Some("containerd://2.0.5".into()),
            os_image: Some("Flatcar".into()),
        });
        self
    }
    /// A Ready machine whose status already says everything `decide` would.
    pub fn settled_ready(self) -> M {
        self.class()
            .phase(MachinePhase::Ready)
            .power(PowerState::On)
            .boot("b1", "install", Some("r2"), 0)
            .completed(10 * MIN, "installed")
            .progress("previousBoot", "none")
            .provisioned("r2")
            .node_ref("m1")
            .observed("v1.33.2")
            .condition("BmcReachable", "True", "Reachable", "")
            .condition("PowerState", "True", "On", "")
            .condition("NodeReady", "True", "KubeletReady", "")
            .condition("UpToDate", "True", "RevisionInstalled", "revision r2")
    }
}

/// An observation under construction: BMC reachable and on, class
/// `workers` at revision r2, no target cluster, a boot slot free.
#[derive(Clone, Debug)]
pub struct O(pub Observed);

pub fn obs() -> O {
    O(Observed {
        bmc: BmcObserved::Reachable {
            power: PowerState::On,
        },
        class: ClassObserved::Present(ClassView {
            bios: Default::default(),
            firmware: Vec::new(),
            volumes: Vec::new(),
            boot: None,
            name: "workers".into(),
            revision: "r2".into(),
            installs: "r2".into(),
            kubelet_version: "v1.33.2".into(),
            wipe_on_deprovision: false,
        }),
        node: NodeObserved::NotConfigured,
        boot_slot: true,
        limits: Limits::default(),
    })
}

pub fn node(ready: bool, kubelet: &str) -> NodeState {
    NodeState {
        name: "m1".into(),
        ready,
        unschedulable: false,
        kubelet_version: kubelet.into(),
        container_runtime_version: "containerd://2.0.5".into(),
        os_image: "Flatcar".into(),
        kernel_version: "6.6".into(),
    }
}

impl O {
    pub fn off(mut self) -> O {
        self.0.bmc = BmcObserved::Reachable {
            power: PowerState::Off,
        };
        self
    }
    pub fn bmc_err(mut self, reason: &str) -> O {
        self.0.bmc = BmcObserved::Unreachable {
            reason: reason.into(),
            message: format!("{reason} at 127.0.0.1:8000"),
        };
        self
    }
    pub fn no_class(mut self) -> O {
        self.0.class = ClassObserved::NotReferenced;
        self
    }
    pub fn class_missing(mut self) -> O {
        self.0.class = ClassObserved::Missing {
            name: "workers".into(),
        };
        self
    }
    pub fn wipe(mut self) -> O {
        if let ClassObserved::Present(c) = &mut self.0.class {
            c.wipe_on_deprovision = true;
        }
        self
    }
    pub fn node(mut self, n: NodeState) -> O {
        self.0.node = NodeObserved::Present(n);
        self
    }
    pub fn node_absent(mut self) -> O {
        self.0.node = NodeObserved::Absent;
        self
    }
    pub fn node_unknown(mut self) -> O {
        self.0.node = NodeObserved::Unknown {
            message: "connection refused".into(),
        };
        self
    }
    pub fn no_slot(mut self) -> O {
        self.0.boot_slot = false;
        self
    }
}

/// Rules every plan keeps, whatever the case.
pub fn check_invariants(name: &str, plan: &Plan) {
    let sched: Vec<_> = plan
        .steps
        .iter()
        .filter(|s| s.kind() == StepKind::Schedule)
        .collect();
    assert_eq!(sched.len(), 1, "{name}: one scheduling step: {plan}");
    assert_eq!(
        plan.steps.last().map(Step::kind),
        Some(StepKind::Schedule),
        "{name}: scheduling comes last: {plan}"
    );
    for (i, s) in plan.steps.iter().enumerate() {
        if *s == Step::PowerCycle {
            let marked = plan.steps[..i].iter().any(|p| {
                matches!(
                    p,
                    Step::SetProgress(
                        crate::api::Mark::PowerCycledFor(_)
                            | crate::api::Mark::PowerCycleRequest(_)
                    )
                )
            });
            assert!(
                marked,
                "{name}: a power cycle without a marker before it: {plan}"
            );
        }
    }
}

/// The machine after the executor carried out `plan`'s status steps.
pub fn applied(m: &Machine, plan: &Plan, now: Timestamp) -> Machine {
    let mut m = m.clone();
    let st = m.status.get_or_insert_with(Default::default);
    for s in &plan.steps {
        apply_status(st, s, now);
    }
    m
}

/// A plan that only waits (no writes, no effects) must not change its mind
/// when asked again: a settled machine gets no writes.
pub fn check_settles(name: &str, m: &Machine, o: &Observed, now: Timestamp, plan: &Plan) {
    let quiet = plan.steps.iter().all(|s| {
        matches!(s.kind(), StepKind::Status | StepKind::Schedule)
            && !matches!(s, Step::MintBoot { .. })
    });
    if !quiet || plan.requeue_after() == Some(Duration::ZERO) {
        return;
    }
    let again = decide(&applied(m, plan, now), o, now);
    assert!(
        again.steps.iter().all(|s| s.kind() == StepKind::Schedule),
        "{name}: asked again, the plan still writes: {again}"
    );
}

mod prop;
