//! `decide` on generated situations: whatever the Machine and the
//! observation, a plan ends with one scheduling step, never power-cycles
//! without a marker first, never cycles again for a boot whose marker is
//! recorded, and a plan that only waits is stable when asked again.

use proptest::prelude::*;

use super::*;

const PHASES: [Option<MachinePhase>; 9] = [
    None,
    Some(MachinePhase::Registering),
    Some(MachinePhase::Available),
    Some(MachinePhase::Provisioning),
    Some(MachinePhase::Provisioned),
    Some(MachinePhase::Ready),
    Some(MachinePhase::Reimaging),
    Some(MachinePhase::Deprovisioning),
    Some(MachinePhase::Error),
];

const PURPOSES: [&str; 3] = ["install", "reimage", "deprovision"];
const OUTCOMES: [Option<&str>; 5] = [
    None,
    Some("installed"),
    Some("failed"),
    Some("timeout"),
    Some("wiped"),
];
const STEPS: [&str; 5] = ["DHCPAck", "Installed", "Failed", "Booted", "Wiped"];

fn a_machine() -> impl Strategy<Value = M> {
    (
        (
            0..PHASES.len(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            proptest::option::of((0..PURPOSES.len(), 0..2usize, 0..OUTCOMES.len())),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            proptest::option::of(0..STEPS.len()),
            proptest::option::of(0..3usize),
            0..4u32,
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (ph, finalizer, deleting, class, online),
                (boot, cycled, removed),
                (hist, prov, attempts, retry),
            )| {
                let mut m = machine();
                m.0.status.as_mut().unwrap().phase = PHASES[ph];
                if !finalizer {
                    m = m.no_finalizer();
                }
                if deleting {
                    m = m.deleting();
                }
                if class {
                    m = m.class();
                }
                if online {
                    m = m.online();
                }
                m = m.progress("previousBoot", "b0");
                if let Some((p, rev, out)) = boot {
                    m = m.boot("b1", PURPOSES[p], Some(["r1", "r2"][rev]), 0);
                    if let Some(o) = OUTCOMES[out] {
                        m = m.completed(5 * MIN, o);
                    }
                    if cycled {
                        m = m
                            .progress("powerCycledFor", "b1")
                            .progress("poweredAt", &at(0).to_string());
                    }
                    if removed {
                        m = m.progress("nodeRemovedFor", "b1");
                    }
                    if let Some(h) = hist {
                        m = m.history(STEPS[h], "b1", 4 * MIN, "");
                    }
                }
                if let Some(p) = prov {
                    m = m.provisioned(["r1", "r2", "r3"][p]).node_ref("m1");
                }
                if attempts > 0 {
                    m = m
                        .progress("attempts", &attempts.to_string())
                        .progress("errorFrom", "Provisioning");
                }
                if retry {
                    m = m.progress("retryAt", &at(20 * MIN).to_string());
                }
                m
            },
        )
}

fn an_observation() -> impl Strategy<Value = O> {
    (
        0..4usize,
        0..3usize,
        0..5usize,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(bmc, class, node_, slot, wipe)| {
            let mut o = obs();
            o = match bmc {
                0 => o,
                1 => o.off(),
                2 => o.bmc_err("BmcUnreachable"),
                _ => {
                    o.0.bmc = BmcObserved::Reachable {
                        power: PowerState::Unknown,
                    };
                    o
                }
            };
            o = match class {
                0 => o,
                1 => o.no_class(),
                _ => o.class_missing(),
            };
            o = match node_ {
                0 => o,
                1 => o.node_absent(),
                2 => o.node_unknown(),
                3 => o.node(node(true, "v1.33.2")),
                _ => o.node(node(false, "v1.32.0")),
            };
            if !slot {
                o = o.no_slot();
            }
            if wipe {
                o = o.wipe();
            }
            o
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn every_plan_keeps_the_rules(m in a_machine(), o in an_observation(), t in 0i64..(3 * 60 * MIN)) {
        let now = at(t);
        let plan = decide(&m.0, &o.0, now);
        check_invariants("generated", &plan);
        check_settles("generated", &m.0, &o.0, now, &plan);
        let st = m.0.status.clone().unwrap_or_default();
        let marked = st.boot.as_ref().is_some_and(|b| st.progress.power_cycled_for.as_ref() == Some(&b.id));
        if marked {
            prop_assert!(!plan.steps.contains(&Step::PowerCycle), "cycled twice for a boot: {plan}");
        }
        // A boot's marker (its token becomes valid) only with the server seen off.
        let marks = plan.steps.iter().any(|s| matches!(s, Step::SetProgress(crate::api::Mark::PowerCycledFor(_))));
        if marks {
            prop_assert!(
                matches!(o.0.bmc, BmcObserved::Reachable { power: PowerState::Off }),
                "a boot armed while the server was not seen off: {plan}"
            );
        }
    }
}
