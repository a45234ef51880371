//! Table tests of the MachineSet planner on plain values.

use jiff::Timestamp;
use serde_json::json;

use super::*;

pub(super) fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(crate) fn class(version: &str) -> MachineClassSpec {
    use crate::api::*;
    let art = |n: &str| Artifact {
        url: format!("http://images.example/{n}"),
        sha256: Some("ab".repeat(32)),
        sha512: None,
        checksums_url: None,
    };
    MachineClassSpec {
        image: OsImage {
            os: "flatcar".into(),
            version: version.into(),
            kernel: art("vmlinuz"),
            initrd: art("initrd"),
            install: None,
            rootfs: None,
        },
        kubernetes: KubernetesSpec {
            version: "v1.33.2".into(),
            ..Default::default()
        },
        container_runtime: ContainerRuntime {
            name: "containerd".into(),
            version: "1.7.27".into(),
        },
        join: JoinSpec {
            api_server_endpoint: "10.0.0.10:6443".into(),
            ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
            token_secret_ref: SecretReference {
                name: "join".into(),
                key: None,
            },
        },
        ..Default::default()
    }
}

pub(super) fn set(replicas: i32, max: serde_json::Value, extra: serde_json::Value) -> MachineSet {
    let mut v = json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
        "metadata": {"name": "workers", "namespace": "default", "generation": 1},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"role": "worker"}},
            "template": {"classRef": {"name": "flatcar"}},
            "updateStrategy": {"maxUnavailable": max, "progressDeadlineSeconds": 100,
                "autoRollback": true, "healthCheck": {"nodeReadySeconds": 10}}}
    });
    if let (Some(spec), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
        for (k, x) in e {
            spec.insert(k.clone(), x.clone());
        }
    }
    serde_json::from_value(v).unwrap()
}

pub(super) fn m(
    name: &str,
    phase: MachinePhase,
    pinned: Option<i64>,
    installed: Option<&str>,
) -> MachineView {
    MachineView {
        name: name.into(),
        created: Some(t(name.len() as i64)),
        phase,
        pinned,
        installed: installed.map(str::to_string),
        paused: false,
        health: Health::default(),
        adoptable: Err(NotClaimable::NotUpToDate { class: "c".into() }),
    }
}

pub(super) fn ready(name: &str, rev: i64, hash: &str) -> MachineView {
    m(name, MachinePhase::Ready, Some(rev), Some(hash))
}

fn avail(name: &str) -> MachineView {
    m(name, MachinePhase::Available, None, None)
}

pub(super) fn run(
    s: &MachineSet,
    claimed: Vec<MachineView>,
    cands: Vec<MachineView>,
    c: &MachineClassSpec,
    now: i64,
) -> Plan {
    plan(&Input {
        set: s,
        claimed,
        candidates: cands,
        class: Some(c),
        now: t(now),
    })
}

pub(super) fn pins(p: &Plan) -> Vec<(String, i64)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Pin { machine, revision } => Some((machine.clone(), *revision)),
            _ => None,
        })
        .collect()
}

fn claims(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Claim { machine, .. } => Some(machine.clone()),
            _ => None,
        })
        .collect()
}

fn releases(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { machine } => Some(machine.clone()),
            _ => None,
        })
        .collect()
}

pub(super) fn cond_msg(p: &Plan, ty: &str) -> String {
    p.status
        .conditions
        .iter()
        .find(|c| c.type_ == ty)
        .map(|c| format!("{} {} {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

/// A set of 4 machines all on revision 1 (class v1), complete.
pub(super) fn settled(max: serde_json::Value) -> (MachineSet, String, Vec<MachineView>) {
    let mut s = set(4, max, json!({}));
    let v1 = class("1.0");
    let names = ["m1", "m2", "m3", "m4"];
    let p0 = run(&s, vec![], names.iter().map(|n| avail(n)).collect(), &v1, 0);
    assert_eq!(claims(&p0), names);
    s.status = Some(p0.status);
    let h1 = s.status.as_ref().unwrap().revisions[0].hash.clone();
    let machines: Vec<MachineView> = names.iter().map(|n| ready(n, 1, &h1)).collect();
    let p1 = run(&s, machines.clone(), vec![], &v1, 1);
    assert_eq!(p1.status.rollout_state, Some(RolloutState::Complete));
    assert_eq!(p1.status.current_revision, Some(1));
    s.status = Some(p1.status);
    (s, h1, machines)
}

#[test]
fn claims_up_to_replicas_by_name() {
    let s = set(2, json!(1), json!({}));
    let p = run(
        &s,
        vec![],
        vec![avail("c"), avail("a"), avail("b")],
        &class("1.0"),
        0,
    );
    assert_eq!(claims(&p), ["a", "b"]);
    assert_eq!(p.status.selector.as_deref(), Some("role=worker"));
    assert_eq!(p.status.update_revision, Some(1));
    assert_eq!(p.status.revisions.len(), 1);
    assert_eq!(
        cond_msg(&p, cond::POOL),
        "True PoolSufficient wanted 2, claimed 0"
    );
}

#[test]
fn short_pool_says_wanted_and_claimable() {
    let s = set(5, json!(1), json!({}));
    let p = run(
        &s,
        vec![ready("x", 1, "h")],
        vec![avail("a"), avail("b")],
        &class("1.0"),
        0,
    );
    assert_eq!(claims(&p), ["a", "b"]);
    assert_eq!(
        cond_msg(&p, cond::POOL),
        "False PoolShort wanted 5, claimable 3"
    );
}

#[test]
fn candidates_not_available_or_claimed_are_skipped() {
    let s = set(3, json!(1), json!({}));
    let mut busy = avail("b");
    busy.phase = MachinePhase::Provisioning;
    let mut taken = avail("c");
    taken.pinned = Some(1);
    let p = run(&s, vec![], vec![avail("a"), busy, taken], &class("1.0"), 0);
    assert_eq!(claims(&p), ["a"]);
}

#[test]
fn paused_candidates_are_neither_claimed_nor_counted() {
    let s = set(3, json!(1), json!({}));
    let mut held = avail("a");
    held.paused = true;
    let p = run(
        &s,
        vec![],
        vec![held, avail("b"), avail("c")],
        &class("1.0"),
        0,
    );
    assert_eq!(claims(&p), ["b", "c"]);
    assert_eq!(
        cond_msg(&p, cond::POOL),
        "False PoolShort wanted 3, claimable 2; not claimable: a: paused (metalherd.dev/paused)"
    );
    // Unpaused, it is claimed like any other.
    let p = run(&s, vec![], vec![avail("a")], &class("1.0"), 1);
    assert_eq!(claims(&p), ["a"]);
}

#[test]
fn scale_down_releases_not_ready_first_then_newest() {
    let (mut s, h1, mut ms) = settled(json!(1));
    s.spec.replicas = 2;
    ms[1].phase = MachinePhase::Error; // m2 not Ready
    for (i, x) in ms.iter_mut().enumerate() {
        x.created = Some(t(i as i64)); // m4 newest
    }
    let p = run(&s, ms, vec![], &class("1.0"), 5);
    assert_eq!(releases(&p), ["m2", "m4"]);
    assert_eq!(p.status.replicas, 2);
    let _ = h1;
}

#[test]
fn class_change_rolls_in_batches_of_max_unavailable() {
    let (mut s, h1, ms) = settled(json!(2));
    let v2 = class("2.0");
    let p = run(&s, ms.clone(), vec![], &v2, 10);
    assert_eq!(p.status.update_revision, Some(2));
    assert_eq!(pins(&p), [("m1".into(), 2), ("m2".into(), 2)]);
    let b = p.status.current_batch.clone().unwrap();
    assert_eq!((b.number, b.revision), (1, 2));
    s.status = Some(p.status);
    let h2 = s.status.as_ref().unwrap().revisions[1].hash.clone();
    // Reimaging: nothing new starts, no pin repeated.
    let mut ms2 = ms.clone();
    ms2[0] = m("m1", MachinePhase::Reimaging, Some(2), Some(&h1));
    ms2[1] = m("m2", MachinePhase::Reimaging, Some(2), Some(&h1));
    let p = run(&s, ms2.clone(), vec![], &v2, 20);
    assert!(pins(&p).is_empty(), "{:?}", p.actions);
    assert_eq!(p.status.available_replicas, 2);
    s.status = Some(p.status);
    // Ready on revision 2: gate clock starts, holds 10 s.
    ms2[0] = ready("m1", 2, &h2);
    ms2[1] = ready("m2", 2, &h2);
    let p = run(&s, ms2.clone(), vec![], &v2, 30);
    assert!(pins(&p).is_empty());
    assert_eq!(p.status.updated_replicas, 2);
    s.status = Some(p.status);
    let p = run(&s, ms2.clone(), vec![], &v2, 40);
    assert_eq!(pins(&p), [("m3".into(), 2), ("m4".into(), 2)]);
    assert_eq!(p.status.current_batch.as_ref().unwrap().number, 2);
    s.status = Some(p.status);
    let all: Vec<MachineView> = ["m1", "m2", "m3", "m4"]
        .iter()
        .map(|n| ready(n, 2, &h2))
        .collect();
    let p = run(&s, all.clone(), vec![], &v2, 50);
    s.status = Some(p.status);
    let p = run(&s, all, vec![], &v2, 60);
    assert_eq!(p.status.rollout_state, Some(RolloutState::Complete));
    assert_eq!(p.status.current_revision, Some(2));
    assert_eq!(p.status.completed_batches.len(), 2);
}

#[test]
fn percentage_max_unavailable_and_not_ready_first() {
    let (s, _h1, mut ms) = settled(json!("50%"));
    ms[3].phase = MachinePhase::Error;
    let p = run(&s, ms, vec![], &class("2.0"), 10);
    // m4 is out of service already: it leads, plus one Ready machine.
    assert_eq!(pins(&p), [("m4".into(), 2), ("m1".into(), 2)]);
}

#[test]
fn unhealthy_probe_past_deadline_fails_and_rolls_back() {
    let (mut s, _h1, ms) = settled(json!(2));
    let v2 = class("2.0");
    let p = run(&s, ms.clone(), vec![], &v2, 10);
    s.status = Some(p.status);
    let h2 = s.status.as_ref().unwrap().revisions[1].hash.clone();
    let mut ms2 = ms.clone();
    for x in &mut ms2[..2] {
        *x = ready(&x.name.clone(), 2, &h2);
        x.health.probe_ok = Some(false);
        x.health.detail = Some("probe answered 500".into());
    }
    let p = run(&s, ms2.clone(), vec![], &v2, 50);
    assert!(pins(&p).is_empty());
    s.status = Some(p.status);
    let p = run(&s, ms2.clone(), vec![], &v2, 111);
    let st = &p.status;
    assert_eq!(st.rollout_state, Some(RolloutState::Failed));
    let f = st.last_failure.as_ref().unwrap();
    assert_eq!(f.machines, ["m1", "m2"]);
    assert_eq!(f.reason, "ProgressDeadlineExceeded");
    assert!(
        f.message.contains("m1: probe answered 500"),
        "{}",
        f.message
    );
    assert!(st.revisions[1].bad);
    assert_eq!(pins(&p), [("m1".into(), 1), ("m2".into(), 1)]);
    assert!(st.current_batch.as_ref().unwrap().rollback);
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, Action::Event { warning: true, .. }))
    );
    s.status = Some(p.status);
    // Back on revision 1, healthy for the hold: RolledBack; m3, m4 untouched.
    let h1 = s.status.as_ref().unwrap().revisions[0].hash.clone();
    let back: Vec<MachineView> = ["m1", "m2", "m3", "m4"]
        .iter()
        .map(|n| ready(n, 1, &h1))
        .collect();
    let p = run(&s, back.clone(), vec![], &v2, 120);
    s.status = Some(p.status);
    let p = run(&s, back.clone(), vec![], &v2, 131);
    assert_eq!(p.status.rollout_state, Some(RolloutState::RolledBack));
    assert!(p.status.current_batch.is_none());
    s.status = Some(p.status);
    // The bad revision is not retried while the template is unchanged.
    let p = run(&s, back, vec![], &v2, 200);
    assert!(pins(&p).is_empty());
    assert_eq!(p.status.rollout_state, Some(RolloutState::RolledBack));
}

#[test]
fn machine_error_fails_the_batch_without_rollback_when_not_asked() {
    let (mut s, h1, ms) = settled(json!(1));
    if let Some(u) = s.spec.update_strategy.as_mut() {
        u.auto_rollback = false;
    }
    let p = run(&s, ms.clone(), vec![], &class("2.0"), 10);
    s.status = Some(p.status);
    let mut ms2 = ms.clone();
    ms2[0] = m("m1", MachinePhase::Error, Some(2), Some(&h1));
    let p = run(&s, ms2, vec![], &class("2.0"), 12);
    assert_eq!(p.status.rollout_state, Some(RolloutState::Failed));
    assert_eq!(
        p.status.last_failure.as_ref().unwrap().reason,
        "MachineFailed"
    );
    assert!(pins(&p).is_empty());
    assert!(p.status.current_batch.is_none());
}

#[test]
fn pause_starts_no_batch_and_resume_does() {
    let (mut s, _h1, ms) = settled(json!(1));
    s.spec.paused = true;
    let p = run(&s, ms.clone(), vec![], &class("2.0"), 10);
    assert!(pins(&p).is_empty());
    assert_eq!(p.status.rollout_state, Some(RolloutState::Paused));
    s.status = Some(p.status);
    s.spec.paused = false;
    let p = run(&s, ms, vec![], &class("2.0"), 11);
    assert_eq!(pins(&p), [("m1".into(), 2)]);
}

#[test]
fn paused_members_are_left_out_of_batches() {
    let (mut s, _h1, mut ms) = settled(json!(2));
    ms[0].paused = true;
    let v2 = class("2.0");
    let p = run(&s, ms.clone(), vec![], &v2, 10);
    assert_eq!(pins(&p), [("m2".into(), 2), ("m3".into(), 2)]);
    s.status = Some(p.status);
    let h2 = s.status.as_ref().unwrap().revisions[1].hash.clone();
    let mut now: Vec<MachineView> = ["m2", "m3", "m4"]
        .iter()
        .map(|n| ready(n, 2, &h2))
        .collect();
    now.insert(0, ms[0].clone());
    let p = run(&s, now.clone(), vec![], &v2, 20);
    s.status = Some(p.status);
    let p = run(&s, now.clone(), vec![], &v2, 31);
    // m4 went in the second batch; m1 stays on revision 1 while paused.
    assert!(pins(&p).iter().all(|(m, _)| m != "m1"), "{:?}", p.actions);
    s.status = Some(p.status);
    let p = run(&s, now.clone(), vec![], &v2, 42);
    s.status = Some(p.status);
    let p = run(&s, now.clone(), vec![], &v2, 53);
    assert_eq!(p.status.rollout_state, Some(RolloutState::Progressing));
    assert!(
        cond_msg(&p, cond::PROGRESSING).contains("WaitingForPausedMachines m1 paused"),
        "{}",
        cond_msg(&p, cond::PROGRESSING)
    );
    // Resumed: it is rolled like the others.
    now[0].paused = false;
    let p = run(&s, now, vec![], &v2, 54);
    assert_eq!(pins(&p), [("m1".into(), 2)]);
}

#[test]
fn class_change_during_a_rollout_supersedes_the_batch() {
    let (mut s, h1, ms) = settled(json!(1));
    let p = run(&s, ms.clone(), vec![], &class("2.0"), 10);
    s.status = Some(p.status);
    let mut ms2 = ms.clone();
    ms2[0] = m("m1", MachinePhase::Reimaging, Some(2), Some(&h1));
    let p = run(&s, ms2, vec![], &class("3.0"), 20);
    assert_eq!(p.status.update_revision, Some(3));
    // m1 is out of service already: it leads the new batch.
    assert_eq!(pins(&p), [("m1".into(), 3)]);
}

#[test]
fn machine_deleted_mid_rollout_leaves_the_batch() {
    let (mut s, _h1, ms) = settled(json!(2));
    let v2 = class("2.0");
    let p = run(&s, ms.clone(), vec![], &v2, 10);
    s.status = Some(p.status);
    let h2 = s.status.as_ref().unwrap().revisions[1].hash.clone();
    // m2 is gone; m1 passes alone; a replacement is claimed.
    let rest = vec![ready("m1", 2, &h2), ms[2].clone(), ms[3].clone()];
    let p = run(&s, rest.clone(), vec![avail("m9")], &v2, 20);
    assert_eq!(claims(&p), ["m9"]);
    assert_eq!(p.status.current_batch.as_ref().unwrap().machines.len(), 1);
    s.status = Some(p.status);
    let p = run(&s, rest, vec![], &v2, 31);
    assert_eq!(pins(&p), [("m3".into(), 2), ("m4".into(), 2)]);
}

#[test]
fn restart_between_record_and_pin_repins_the_same_machines() {
    let (mut s, _h1, ms) = settled(json!(2));
    let v2 = class("2.0");
    let p = run(&s, ms.clone(), vec![], &v2, 10);
    s.status = Some(p.status);
    // The pins never happened (crash): the next plan pins the recorded ones.
    let p = run(&s, ms, vec![], &v2, 11);
    assert_eq!(pins(&p), [("m1".into(), 2), ("m2".into(), 2)]);
    assert_eq!(p.status.current_batch.as_ref().unwrap().number, 1);
}

#[test]
fn undo_returns_to_a_kept_revision_despite_a_moved_class() {
    let (mut s, _h1, ms) = settled(json!(4));
    let p = run(&s, ms, vec![], &class("2.0"), 10);
    s.status = Some(p.status);
    s.metadata.annotations = Some([(UNDO_ANNOTATION.to_string(), "1".to_string())].into());
    let h2 = s.status.as_ref().unwrap().revisions[1].hash.clone();
    let on2: Vec<MachineView> = ["m1", "m2", "m3", "m4"]
        .iter()
        .map(|n| ready(n, 2, &h2))
        .collect();
    let p = run(&s, on2, vec![], &class("2.0"), 20);
    assert_eq!(p.status.update_revision, Some(1));
    assert_eq!(pins(&p).len(), 4);
    assert!(pins(&p).iter().all(|(_, r)| *r == 1));
}

#[test]
fn history_is_pruned_to_the_limit_but_keeps_pinned() {
    let mut s = set(0, json!(1), json!({"revisionHistoryLimit": 1}));
    for (i, v) in ["1.0", "2.0", "3.0"].iter().enumerate() {
        let p = run(&s, vec![], vec![], &class(v), i as i64);
        s.status = Some(p.status);
    }
    let kept: Vec<i64> = s
        .status
        .as_ref()
        .unwrap()
        .revisions
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(kept, [3]);
    // A revision a machine is pinned to stays.
    let p = run(&s, vec![ready("a", 3, "h")], vec![], &class("4.0"), 9);
    let kept: Vec<i64> = p.status.revisions.iter().map(|r| r.revision).collect();
    assert_eq!(kept, [3, 4]);
}

#[test]
fn passed_batches_are_kept_to_the_last_ten_and_numbers_keep_counting() {
    let mut s = set(12, json!(1), json!({}));
    let v1 = class("1.0");
    let names: Vec<String> = (1..=12).map(|i| format!("m{i:02}")).collect();
    let p = run(&s, vec![], names.iter().map(|n| avail(n)).collect(), &v1, 0);
    s.status = Some(p.status);
    let h1 = s.status.as_ref().unwrap().revisions[0].hash.clone();
    let mut ms: Vec<MachineView> = names.iter().map(|n| ready(n, 1, &h1)).collect();
    let p = run(&s, ms.clone(), vec![], &v1, 1);
    s.status = Some(p.status);
    let v2 = class("2.0");
    let mut now = 10;
    let mut started = vec![];
    for _ in 0..100 {
        let p = run(&s, ms.clone(), vec![], &v2, now);
        s.status = Some(p.status.clone());
        if let Some(b) = &p.status.current_batch
            && started.last() != Some(&b.number)
        {
            started.push(b.number);
        }
        let h2 = p.status.revisions.iter().find(|r| r.revision == 2);
        // Pinned machines come back Ready on revision 2 at once.
        for (name, rev) in pins(&p) {
            let h = h2.map(|r| r.hash.clone()).unwrap_or_default();
            if let Some(m) = ms.iter_mut().find(|m| m.name == name) {
                *m = ready(&name, rev, &h);
            }
        }
        if p.status.rollout_state == Some(RolloutState::Complete)
            && p.status.current_revision == Some(2)
        {
            break;
        }
        now += 20;
    }
    let st = s.status.unwrap();
    assert_eq!(st.current_revision, Some(2), "the rollout completed");
    assert_eq!(started, (1..=12).collect::<Vec<i32>>());
    let kept: Vec<i32> = st.completed_batches.iter().map(|b| b.number).collect();
    assert_eq!(kept, (3..=12).collect::<Vec<i32>>());
}

fn event_reasons(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Event { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_short_pool_is_not_a_complete_rollout() {
    // Two wanted, one in the pool: it installs and passes, the set waits.
    let mut s = set(2, json!(1), json!({}));
    let v1 = class("1.0");
    let p0 = run(&s, vec![], vec![avail("m1")], &v1, 0);
    assert_eq!(claims(&p0), ["m1"]);
    s.status = Some(p0.status);
    let h1 = s.status.as_ref().unwrap().revisions[0].hash.clone();
    let p1 = run(&s, vec![ready("m1", 1, &h1)], vec![], &v1, 1);
    assert_eq!(p1.status.rollout_state, Some(RolloutState::Progressing));
    assert_eq!(
        cond_msg(&p1, cond::PROGRESSING),
        "True WaitingForMachines revision 1 on 1 of 2 machines; the pool is short (PoolSufficient)"
    );
    assert!(!event_reasons(&p1).iter().any(|r| r == "RolloutComplete"));
    // The revision is known good all the same.
    assert_eq!(p1.status.current_revision, Some(1));
    assert!(p1.status.revisions[0].passed);
    // A second server joins the pool: claimed, installed, then complete.
    s.status = Some(p1.status);
    let p2 = run(&s, vec![ready("m1", 1, &h1)], vec![avail("m2")], &v1, 2);
    assert_eq!(claims(&p2), ["m2"]);
    s.status = Some(p2.status);
    let both = vec![ready("m1", 1, &h1), ready("m2", 1, &h1)];
    let p3 = run(&s, both, vec![], &v1, 3);
    assert_eq!(p3.status.rollout_state, Some(RolloutState::Complete));
    assert_eq!(event_reasons(&p3), ["RolloutComplete"]);
}
