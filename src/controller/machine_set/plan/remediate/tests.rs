//! Remediation decisions of the set planner on plain values.

use serde_json::json;

use super::super::tests::{class, cond_msg, pins, run, settled};
use super::*;
use crate::api::RemediationAction::{PowerCycle, Reimage};

/// The settled set of four with a remediation policy (`extra` merged in).
fn with_policy(extra: serde_json::Value) -> (MachineSet, Vec<MachineView>) {
    let (mut s, _, machines) = settled(json!(1));
    let mut policy = json!({"unhealthySeconds": 60, "recoverySeconds": 100,
        "powerCycles": 1, "reimages": 1});
    if let (Some(p), Some(e)) = (policy.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            p.insert(k.clone(), v.clone());
        }
    }
    s.spec.remediation = Some(serde_json::from_value(policy).unwrap());
    (s, machines)
}

fn sick(mut m: MachineView) -> MachineView {
    m.health.probe_ok = Some(false);
    m.health.detail = Some("probe answered 500".into());
    m
}

fn asked(p: &Plan) -> Vec<(String, RemediationAction)> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Remediate {
                machine, action, ..
            } => Some((machine.clone(), *action)),
            _ => None,
        })
        .collect()
}

fn reasons(p: &Plan) -> Vec<String> {
    p.actions
        .iter()
        .filter_map(|a| match a {
            Action::Event { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// Plan at `now` and keep the status, as the reconciler does.
fn step(s: &mut MachineSet, machines: &[MachineView], now: i64) -> Plan {
    let p = run(s, machines.to_vec(), vec![], &class("1.0"), now);
    s.status = Some(p.status.clone());
    p
}

#[test]
fn power_cycle_then_reimage_then_give_up() {
    let (mut s, mut ms) = with_policy(json!({}));
    ms[1] = sick(ms[1].clone());
    assert!(asked(&step(&mut s, &ms, 10)).is_empty(), "not yet 60 s");
    let p = step(&mut s, &ms, 75);
    assert_eq!(asked(&p), [("m2".to_string(), PowerCycle)]);
    assert!(reasons(&p).contains(&"RemediationPowerCycle".to_string()));
    let Some(Action::Remediate { request, .. }) = p
        .actions
        .iter()
        .find(|a| matches!(a, Action::Remediate { .. }))
    else {
        panic!("no request");
    };
    assert!(
        request.contains("MachineSet workers: PowerCycle 1 of 1") && request.contains("500"),
        "{request}"
    );
    // The power cycle has `recoverySeconds` to work.
    assert!(asked(&step(&mut s, &ms, 150)).is_empty());
    assert_eq!(
        asked(&step(&mut s, &ms, 176)),
        [("m2".to_string(), Reimage)]
    );
    // While it reimages it is neither judged nor acted on.
    let mut reimaging = ms.clone();
    reimaging[1].phase = MachinePhase::Reimaging;
    assert!(asked(&step(&mut s, &reimaging, 400)).is_empty());
    // Ready again and still sick: judged afresh, then given up on.
    assert!(asked(&step(&mut s, &ms, 500)).is_empty());
    let p = step(&mut s, &ms, 561);
    assert!(asked(&p).is_empty());
    assert!(reasons(&p).contains(&"RemediationExhausted".to_string()));
    let rec = &p.status.remediations[0];
    assert!(rec.exhausted && rec.power_cycles == 1 && rec.reimages == 1);
    assert!(asked(&step(&mut s, &ms, 2000)).is_empty(), "left alone");
}

#[test]
fn a_machine_healthy_again_recovers_and_its_record_goes() {
    let (mut s, mut ms) = with_policy(json!({}));
    let healthy = ms.clone();
    ms[1] = sick(ms[1].clone());
    step(&mut s, &ms, 0);
    assert_eq!(
        asked(&step(&mut s, &ms, 61)),
        [("m2".to_string(), PowerCycle)]
    );
    let p = step(&mut s, &healthy, 90);
    assert_eq!(
        p.status.remediations.len(),
        1,
        "healthy, not yet long enough"
    );
    let p = step(&mut s, &healthy, 151);
    assert!(p.status.remediations.is_empty());
    assert!(reasons(&p).contains(&"RemediationSucceeded".to_string()));
}

#[test]
fn a_blip_shorter_than_unhealthy_seconds_is_forgotten() {
    let (mut s, mut ms) = with_policy(json!({}));
    let healthy = ms.clone();
    ms[0] = sick(ms[0].clone());
    assert_eq!(step(&mut s, &ms, 0).status.remediations.len(), 1);
    assert!(step(&mut s, &healthy, 30).status.remediations.is_empty());
    assert!(
        asked(&step(&mut s, &ms, 80)).is_empty(),
        "the clock restarted"
    );
}

#[test]
fn more_unhealthy_than_max_unhealthy_remediates_none() {
    let (mut s, mut ms) = with_policy(json!({"maxUnhealthy": 1}));
    ms[0] = sick(ms[0].clone());
    ms[2] = sick(ms[2].clone());
    let p = step(&mut s, &ms, 0);
    assert!(reasons(&p).contains(&"TooManyUnhealthy".to_string()));
    assert_eq!(
        cond_msg(&p, cond::REMEDIATION),
        "False TooManyUnhealthy 2 of 4 machines unhealthy (m1, m3), more than maxUnhealthy 1: none is remediated"
    );
    let p = step(&mut s, &ms, 500);
    assert!(asked(&p).is_empty());
    assert!(
        !reasons(&p).contains(&"TooManyUnhealthy".to_string()),
        "told once"
    );
    // One recovers on its own: the other is remediated.
    let mut one = ms.clone();
    one[2].health = Health::default();
    let p = step(&mut s, &one, 501);
    assert!(cond_msg(&p, cond::REMEDIATION).starts_with("True WithinMaxUnhealthy 1 of 4"));
    assert_eq!(asked(&p), [("m1".to_string(), PowerCycle)]);
}

#[test]
fn a_percentage_breaker_counts_against_replicas() {
    let (mut s, mut ms) = with_policy(json!({"maxUnhealthy": "50%"}));
    for m in ms.iter_mut().take(2) {
        *m = sick(m.clone());
    }
    step(&mut s, &ms, 0);
    assert_eq!(asked(&step(&mut s, &ms, 61)).len(), 2, "2 of 4 is 50%");
    let (mut s, mut ms) = with_policy(json!({"maxUnhealthy": "50%"}));
    for m in ms.iter_mut().take(3) {
        *m = sick(m.clone());
    }
    step(&mut s, &ms, 0);
    assert!(asked(&step(&mut s, &ms, 61)).is_empty(), "3 of 4 is over");
}

#[test]
fn an_unknown_node_is_no_signal_and_paused_machines_wait() {
    let (mut s, mut ms) = with_policy(json!({}));
    ms[0].health.node_ready = Some(false);
    ms[0].health.node_unknown = true;
    assert!(step(&mut s, &ms, 0).status.remediations.is_empty());
    ms[0].health.node_unknown = false;
    ms[0].paused = true;
    step(&mut s, &ms, 1);
    assert!(asked(&step(&mut s, &ms, 100)).is_empty(), "paused");
    ms[0].paused = false;
    assert_eq!(
        asked(&step(&mut s, &ms, 101)),
        [("m1".to_string(), PowerCycle)]
    );
}

#[test]
fn only_signals_the_policy_names_count() {
    let (mut s, mut ms) = with_policy(json!({"unhealthyWhen": ["NodeNotReady"]}));
    ms[0] = sick(ms[0].clone());
    assert!(step(&mut s, &ms, 0).status.remediations.is_empty());
}

#[test]
fn a_rollout_and_a_remediation_never_take_the_same_machine() {
    let (mut s, mut ms) = with_policy(json!({}));
    ms[0] = sick(ms[0].clone());
    step(&mut s, &ms, 0);
    assert_eq!(
        asked(&step(&mut s, &ms, 61)),
        [("m1".to_string(), PowerCycle)]
    );
    // The class moves while m1's power cycle works: the batch skips m1.
    let p = run(&s, ms.clone(), vec![], &class("2.0"), 70);
    assert_eq!(pins(&p), [("m2".to_string(), 2)]);
    s.status = Some(p.status.clone());
    // m2 is in the batch now: sick as it reinstalls, it is not remediated.
    let mut rolled = ms.clone();
    rolled[1] = sick(rolled[1].clone());
    rolled[1].pinned = Some(2);
    let p = run(&s, rolled.clone(), vec![], &class("2.0"), 200);
    assert!(!asked(&p).iter().any(|(m, _)| m == "m2"), "{:?}", asked(&p));
}

#[test]
fn without_a_policy_nothing_is_kept() {
    let (mut s, mut ms) = with_policy(json!({}));
    ms[0] = sick(ms[0].clone());
    step(&mut s, &ms, 0);
    s.spec.remediation = None;
    let p = step(&mut s, &ms, 100);
    assert!(p.status.remediations.is_empty() && asked(&p).is_empty());
}
