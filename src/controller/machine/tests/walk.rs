//! Whole-lifecycle walks of `decide` against a simulated world: a server
//! that PXE-boots an installer when power-cycled with a one-time network
//! boot, an installer that calls home, a Node that registers with the
//! class's kubelet, and a minimal executor that applies each plan in order.
//! Crashes are simulated by dropping the rest of a plan before or after any
//! effect; the walk must still converge, with at most one power cycle per
//! boot.

use std::collections::BTreeMap;

use super::super::plan::{BootPurpose, holds_boot_slot};
use super::*;
use crate::controller::storm::BootSlots;

const STEP_LIMIT: usize = 3000;

#[derive(Clone, Debug)]
enum Ev {
    History(&'static str, String),
    NodeUp(String),
}

struct World {
    m: Machine,
    now: i64,
    class: ClassView,
    cluster: bool,
    power: PowerState,
    pxe_once: bool,
    node: Option<NodeState>,
    pending: Vec<(i64, Ev)>,
    /// Power actions that started an installer, per boot id.
    cycles: BTreeMap<String, u32>,
    minted: u32,
    drains: u32,
    uncordons: u32,
    released: bool,
    gone: bool,
    phases: Vec<MachinePhase>,
    effects: usize,
    /// Drop the rest of a plan at this effect: (index, after it ran).
    crash: Option<(usize, bool)>,
    slots: BootSlots<String>,
    limits: Limits,
}

fn class_view(rev: &str, kubelet: &str) -> ClassView {
    ClassView {
        bios: Default::default(),
        firmware: Vec::new(),
        volumes: Vec::new(),
        boot: None,
        name: "workers".into(),
        revision: rev.into(),
        installs: rev.into(),
        kubelet_version: kubelet.into(),
        wipe_on_deprovision: false,
    }
}

impl World {
    fn new(name: &str, slots: BootSlots<String>) -> World {
        let mut m = machine().fresh().class().0;
        m.metadata.name = Some(name.into());
        m.spec.boot_mac_address = None;
        World {
            m,
            now: 0,
            class: class_view("r2", "v1.33.2"),
            cluster: true,
            power: PowerState::Off,
            pxe_once: false,
            node: None,
            pending: vec![],
            cycles: BTreeMap::new(),
            minted: 0,
            drains: 0,
            uncordons: 0,
            released: false,
            gone: false,
            phases: vec![],
            effects: 0,
            crash: None,
            slots,
            limits: Limits::default(),
        }
    }

    fn name(&self) -> String {
        self.m.metadata.name.clone().unwrap_or_default()
    }

    fn status(&self) -> MachineStatus {
        self.m.status.clone().unwrap_or_default()
    }

    fn phase(&self) -> Option<MachinePhase> {
        self.m.status.as_ref().and_then(|s| s.phase)
    }

    fn observe(&self) -> Observed {
        Observed {
            bmc: BmcObserved::Reachable { power: self.power },
            class: if self.m.spec.class_ref.is_some() {
                ClassObserved::Present(self.class.clone())
            } else {
                ClassObserved::NotReferenced
            },
            node: match (&self.node, self.cluster) {
                (_, false) => NodeObserved::NotConfigured,
                (Some(n), true) => NodeObserved::Present(n.clone()),
                (None, true) => NodeObserved::Absent,
            },
            boot_slot: self.slots.would_admit(&self.name()),
            limits: self.limits,
        }
    }

    /// The server (re)starts: with a one-time network boot and an open
    /// boot record it runs the installer, which calls home.
    fn server_starts(&mut self) {
        self.pending.clear();
        let open = self.status().boot.filter(|b| b.completed_at.is_none());
        if !self.pxe_once {
            return;
        }
        self.pxe_once = false;
        let Some(b) = open else { return };
        *self.cycles.entry(b.id.clone()).or_default() += 1;
        let done = if b.purpose == BootPurpose::Deprovision {
            "Wiped"
        } else {
            "Installed"
        };
        let t = self.now;
        self.pending
            .push((t + 60, Ev::History("DHCPAck", b.id.clone())));
        self.pending
            .push((t + 300, Ev::History(done, b.id.clone())));
        if b.purpose != BootPurpose::Deprovision {
            self.pending
                .push((t + 420, Ev::History("Booted", b.id.clone())));
            self.pending
                .push((t + 480, Ev::NodeUp(self.class.kubelet_version.clone())));
        }
    }

    fn tick(&mut self) {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(t, _)| *t <= now);
        self.pending = later;
        for (t, ev) in due {
            match ev {
                Ev::History(step, id) => {
                    let st = self.m.status.get_or_insert_with(Default::default);
                    st.boot_history.push(BootEvent {
                        time: at(t),
                        step: step.into(),
                        detail: String::new(),
                        bytes: None,
                        boot_id: Some(id),
                    });
                }
                Ev::NodeUp(kubelet) if self.cluster => {
                    let mut n = node(true, &kubelet);
                    n.name = self.name();
                    self.node = Some(n);
                }
                Ev::NodeUp(_) => {}
            }
        }
    }

    fn effect(&mut self, s: &Step) {
        match s {
            Step::ReadInventory => {
                let st = self.m.status.get_or_insert_with(Default::default);
                st.inventory = Some(Inventory {
                    nics: vec![NicInfo {
                        name: "eth0".into(),
                        mac: "52:54:00:00:00:01".into(),
                        ..NicInfo::default()
                    }],
                    ..Inventory::default()
                });
            }
            Step::SetBootOnce(_) => self.pxe_once = true,
            Step::PowerOn if self.power == PowerState::On => {}
            Step::PowerOn | Step::PowerCycle => {
                self.power = PowerState::On;
                self.server_starts();
            }
            Step::PowerOff => {
                self.power = PowerState::Off;
                self.pending.clear();
            }
            Step::CordonNode(_) => {
                if let Some(n) = self.node.as_mut() {
                    n.unschedulable = true;
                }
            }
            Step::DrainNode(_) => self.drains += 1,
            Step::DeleteNode(_) => self.node = None,
            Step::UncordonNode(_) => {
                self.uncordons += 1;
                if let Some(n) = self.node.as_mut() {
                    n.unschedulable = false;
                }
            }
            Step::ReleaseAddress => self.released = true,
            other => panic!("not an effect: {other}"),
        }
    }

    /// One reconcile: decide and carry the plan out (up to a crash).
    fn reconcile(&mut self) -> Plan {
        self.tick();
        let now = at(self.now);
        let plan = decide(&self.m, &self.observe(), now);
        for s in &plan.steps {
            match s.kind() {
                StepKind::Effect => {
                    let i = self.effects;
                    self.effects += 1;
                    if self.crash == Some((i, false)) {
                        break;
                    }
                    self.effect(s);
                    if self.crash == Some((i, true)) {
                        break;
                    }
                }
                StepKind::Metadata => match s {
                    Step::AddFinalizer => self.m.metadata.finalizers = Some(vec![FINALIZER.into()]),
                    Step::RemoveFinalizer => {
                        self.m.metadata.finalizers = None;
                        self.gone = self.m.metadata.deletion_timestamp.is_some();
                    }
                    Step::SetBootMac(mac) => self.m.spec.boot_mac_address = Some(mac.clone()),
                    other => panic!("unknown metadata step {other}"),
                },
                StepKind::Status => {
                    if let Step::MintBoot { purpose, revision } = s {
                        assert!(self.slots.acquire(&self.name()), "minted without a slot");
                        self.minted += 1;
                        let st = self.m.status.get_or_insert_with(Default::default);
                        st.boot = Some(BootRecord {
                            id: format!(
                                "{}-b{}",
                                self.m.metadata.name.clone().unwrap_or_default(),
                                self.minted
                            ),
                            purpose: *purpose,
                            revision: revision.clone(),
                            minted_at: now,
                            ..BootRecord::default()
                        });
                    }
                    if let Step::SetPhase(p) = s {
                        self.phases.push(*p);
                    }
                    apply_status(self.m.status.get_or_insert_with(Default::default), s, now);
                }
                StepKind::Schedule => {}
            }
        }
        // As the executor settles it: hold, keep a place among the
        // waiters, or leave both.
        if holds_boot_slot(&self.status()) {
        } else if plan.waits_for_boot_slot() {
            self.slots.wait(&self.name());
        } else {
            self.slots.release(&self.name());
        }
        plan
    }

    /// Reconcile, following each plan's requeue time, until `done`.
    fn run_until(&mut self, what: &str, done: impl Fn(&World) -> bool) {
        for _ in 0..STEP_LIMIT {
            if done(self) {
                return;
            }
            let plan = self.reconcile();
            let wait = plan.requeue_after().unwrap_or_default().as_secs();
            self.now += i64::try_from(wait).unwrap().max(1);
        }
        panic!(
            "{what}: did not converge (phase {:?}, crash {:?}, status {:?})",
            self.phase(),
            self.crash,
            self.status()
        );
    }

    fn ready_at(&self, rev: &str) -> bool {
        self.phase() == Some(MachinePhase::Ready)
            && self.status().provisioned_revision.as_deref() == Some(rev)
    }

    fn max_cycles_per_boot(&self) -> u32 {
        self.cycles.values().copied().max().unwrap_or(0)
    }
}

/// Provision to Ready, then change the class and reimage to Ready again.
fn provision_then_reimage(w: &mut World) {
    w.run_until("provision", |w| w.ready_at("r2"));
    w.class = class_view("r3", "v1.34.0");
    w.run_until("reimage", |w| {
        w.ready_at("r3")
            && (!w.cluster
                || w.node
                    .as_ref()
                    .is_some_and(|n| n.kubelet_version == "v1.34.0"))
    });
}

/// The whole life: provision, reimage, retire.
fn whole_life(w: &mut World) {
    provision_then_reimage(w);
    w.m.metadata.deletion_timestamp = Some(Time(at(w.now)));
    w.run_until("retire", |w| w.gone);
    assert!(w.released && w.power == PowerState::Off && w.node.is_none());
}

#[test]
fn provision_reimage_and_retire_a_server() {
    let mut w = World::new("m1", BootSlots::new(10));
    w.run_until("provision", |w| w.ready_at("r2"));
    use MachinePhase::*;
    assert_eq!(
        w.phases,
        [Registering, Available, Provisioning, Provisioned, Ready]
    );
    assert_eq!(
        w.m.spec.boot_mac_address.as_deref(),
        Some("52:54:00:00:00:01"),
        "learned"
    );
    assert_eq!(
        w.cycles.values().sum::<u32>(),
        1,
        "one power cycle for one boot"
    );
    let st = w.status();
    assert_eq!(st.node_ref.as_ref().map(|r| r.name.as_str()), Some("m1"));
    assert_eq!(
        st.observed.as_ref().unwrap().kubelet_version.as_deref(),
        Some("v1.33.2")
    );

    w.phases.clear();
    w.class = class_view("r3", "v1.34.0");
    w.run_until("reimage", |w| w.ready_at("r3"));
    assert_eq!(w.phases, [Reimaging, Ready]);
    assert_eq!((w.drains, w.uncordons), (1, 1));
    assert_eq!(w.minted, 2);
    assert_eq!(w.cycles.len(), 2);
    assert_eq!(w.max_cycles_per_boot(), 1);
    let st = w.status();
    assert_eq!(
        st.observed.as_ref().unwrap().kubelet_version.as_deref(),
        Some("v1.34.0")
    );
    assert_eq!(st.boot.as_ref().unwrap().purpose, BootPurpose::Reimage);

    // Settled: a look at a Ready machine writes nothing and does nothing.
    let plan = w.reconcile();
    assert_eq!(plan.steps.len(), 1, "{plan}");

    w.m.metadata.deletion_timestamp = Some(Time(at(w.now)));
    w.phases.clear();
    w.run_until("retire", |w| w.gone);
    assert_eq!(w.phases, [Deprovisioning]);
    assert!(w.released);
    assert_eq!(w.power, PowerState::Off);
    assert!(w.node.is_none(), "Node deleted");
    assert_eq!(w.drains, 2);
}

#[test]
fn provision_without_a_target_cluster_uses_the_booted_call_home() {
    let mut w = World::new("m1", BootSlots::new(10));
    w.cluster = false;
    provision_then_reimage(&mut w);
    assert_eq!(w.drains, 0);
    assert_eq!(w.max_cycles_per_boot(), 1);
}

#[test]
fn a_crash_before_or_after_any_effect_converges_without_a_second_cycle() {
    let mut clean = World::new("m1", BootSlots::new(10));
    whole_life(&mut clean);
    let effects = clean.effects;
    assert!(effects >= 14, "the walk exercises every effect ({effects})");
    let mut retried = 0;
    for i in 0..effects {
        for after in [false, true] {
            let mut w = World::new("m1", BootSlots::new(10));
            w.crash = Some((i, after));
            whole_life(&mut w);
            assert!(
                w.max_cycles_per_boot() <= 1,
                "crash {:?}: a boot was power-cycled twice: {:?}",
                w.crash,
                w.cycles
            );
            assert!(
                w.minted <= 3,
                "crash {:?}: minted {} boots",
                w.crash,
                w.minted
            );
            retried += usize::from(w.minted == 3);
        }
    }
    // The server is powered off and seen off before a boot's marker, so a
    // crash that loses the power-on leaves it off and silent: the next look
    // powers it on (repeatable), and no crash needs a retry boot.
    assert_eq!(retried, 0, "a crash needed a retry boot");
}

#[test]
fn the_boot_storm_limit_lets_one_install_run_at_a_time() {
    let slots = BootSlots::new(1);
    let mut ws: Vec<World> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| World::new(n, slots.clone()))
        .collect();
    let mut saw_waiting = false;
    for _ in 0..STEP_LIMIT {
        if ws.iter().all(|w| w.ready_at("r2")) {
            break;
        }
        for w in ws.iter_mut() {
            w.reconcile();
            w.now += 15;
            let st = w.status();
            saw_waiting |= st
                .conditions
                .iter()
                .any(|c| c.type_ == "Waiting" && c.status == crate::api::ConditionStatus::True)
                && st.phase == Some(MachinePhase::Provisioning);
        }
        let open = ws
            .iter()
            .filter(|w| w.status().boot.is_some_and(|b| b.completed_at.is_none()))
            .count();
        assert!(open <= 1, "{open} installs at once with a limit of 1");
    }
    assert!(ws.iter().all(|w| w.ready_at("r2")), "all converge");
    assert!(
        saw_waiting,
        "some machine waited in Provisioning with a condition"
    );
}

/// Machines waiting for a slot do not look again on their own (the safety
/// net is set to a day here): each looks once, waits, and is woken by the
/// slot its predecessor frees, in the order they began to wait.
#[test]
fn a_freed_slot_wakes_the_next_waiter_in_order_and_waiters_do_not_poll() {
    use crate::controller::runner::QueueHandle;
    let slots = BootSlots::new(1);
    let (waker, mut woken) = QueueHandle::channel();
    slots.set_waker(waker);
    let names = ["m1", "m2", "m3", "m4"];
    let mut ws: Vec<World> = names
        .iter()
        .map(|n| {
            let mut w = World::new(n, slots.clone());
            w.cluster = false;
            w.limits.slot_wait = Duration::from_secs(86_400);
            w
        })
        .collect();
    let mut due = [0i64; 4];
    let mut clock = 0i64;
    let mut waits = [0u32; 4];
    let mut wait_order = vec![];
    let mut mint_order = vec![];
    for _ in 0..STEP_LIMIT {
        if ws.iter().all(|w| w.phase() == Some(MachinePhase::Ready)) {
            break;
        }
        let (i, t) = due
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, t)| *t)
            .unwrap();
        clock = clock.max(t);
        ws[i].now = clock;
        let minted = ws[i].minted;
        let plan = ws[i].reconcile();
        if plan.waits_for_boot_slot() {
            waits[i] += 1;
            wait_order.push(i);
        }
        if ws[i].minted > minted {
            mint_order.push(i);
        }
        let after = plan.requeue_after().unwrap_or_default().as_secs();
        due[i] = clock + i64::try_from(after).unwrap().max(1);
        while let Ok(k) = woken.try_recv() {
            let j = names.iter().position(|n| *n == k).unwrap();
            due[j] = due[j].min(clock);
        }
        let open = ws.iter().filter(|w| holds_boot_slot(&w.status())).count();
        assert!(open <= 1, "{open} installs at once with a limit of 1");
    }
    assert!(
        ws.iter().all(|w| w.phase() == Some(MachinePhase::Ready)),
        "all converge on wakes alone"
    );
    assert_eq!(waits, [0, 1, 1, 1], "one look to start waiting, then woken");
    assert_eq!(mint_order[0], 0);
    assert_eq!(
        &mint_order[1..],
        wait_order.as_slice(),
        "slots in waiting order"
    );
}
