//! A standalone Machine's own remediation policy, decided over time.

use serde_json::json;

use super::*;

fn with_policy() -> Machine {
    let mut m = machine().settled_ready().0;
    m.spec.remediation = Some(
        serde_json::from_value(json!({"unhealthySeconds": 60, "recoverySeconds": 300,
            "powerCycles": 1, "reimages": 1}))
        .unwrap(),
    );
    m
}

fn steps(p: &Plan) -> Vec<String> {
    p.steps.iter().map(Step::to_string).collect()
}

/// Decide at `t`, check the rules every plan keeps, apply its status.
fn at_time(m: &mut Machine, o: &O, t: i64) -> Plan {
    let p = decide(m, &o.0, at(t));
    check_invariants("remediation", &p);
    *m = applied(m, &p, at(t));
    p
}

#[test]
fn its_own_policy_power_cycles_then_reimages_a_machine_whose_node_stays_not_ready() {
    let down = obs().node(node(false, "v1.33.2"));
    let mut m = with_policy();
    let p = at_time(&mut m, &down, 0);
    assert!(!steps(&p).iter().any(|s| s == "PowerCycle"), "{p}");
    let rec = m
        .status
        .as_ref()
        .and_then(|s| s.remediation.clone())
        .unwrap();
    assert_eq!(rec.reason, "NodeReady=False: KubeletNotReady");
    assert!(!steps(&at_time(&mut m, &down, 30)).contains(&"PowerCycle".to_string()));
    let p = at_time(&mut m, &down, 61);
    let s = steps(&p);
    let cycle = s
        .iter()
        .position(|x| x == "PowerCycle")
        .expect("a power cycle");
    let record = s.iter().position(|x| x.starts_with("SetRemediation(1c,0r"));
    assert!(record.is_some_and(|r| r < cycle), "{p}");
    assert!(
        s.iter().any(|x| x
            .starts_with("SetProgress(powerCycleRequest=Machine policy: PowerCycle 1 of 1 at ")),
        "{p}"
    );
    assert!(s.contains(&"Note(PowerCycled)".to_string()), "{p}");
    // The power cycle has recoverySeconds; a restart decides the same.
    let p = at_time(&mut m, &down, 200);
    assert!(!steps(&p).contains(&"PowerCycle".to_string()), "{p}");
    let p = at_time(&mut m, &down, 362);
    let s = steps(&p);
    assert!(s.contains(&"Note(ReimageRequested)".to_string()), "{p}");
    assert!(s.contains(&"SetPhase(Reimaging)".to_string()), "{p}");
}

#[test]
fn a_machine_healthy_again_drops_its_record_and_one_a_set_claims_is_the_sets() {
    let down = obs().node(node(false, "v1.33.2"));
    let up = obs().node(node(true, "v1.33.2"));
    let mut m = with_policy();
    at_time(&mut m, &down, 0);
    at_time(&mut m, &down, 61);
    at_time(&mut m, &up, 100);
    assert!(m.status.as_ref().unwrap().remediation.is_some(), "not yet");
    at_time(&mut m, &up, 161);
    assert!(m.status.as_ref().unwrap().remediation.is_none());

    let mut claimed = with_policy();
    claimed
        .metadata
        .labels
        .get_or_insert_default()
        .insert(crate::api::SET_LABEL.into(), "workers".into());
    for t in [0, 61, 400] {
        let p = at_time(&mut claimed, &down, t);
        assert!(!steps(&p).contains(&"PowerCycle".to_string()), "{p}");
    }
    assert!(claimed.status.as_ref().unwrap().remediation.is_none());
}

#[test]
fn an_unknown_node_or_no_cluster_is_no_signal() {
    let mut m = with_policy();
    let unknown = obs().node_unknown();
    for t in [0, 100, 1000] {
        let p = at_time(&mut m, &unknown, t);
        assert!(!steps(&p).contains(&"PowerCycle".to_string()), "{p}");
    }
    assert!(m.status.as_ref().unwrap().remediation.is_none());
}
