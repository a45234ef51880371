//! Story: remediate an unhealthy node, on the busybox rack after the roll
//! and the rollback. The set `workers` goes back to class `lab` (revision
//! 2, what every VM runs: no install) with a remediation policy on its
//! health probe: 10 s unhealthy, then one power cycle, then one reimage
//! with the pinned revision, 120 s for each to help, `maxUnhealthy: 1`.
//!
//! - vm1's installed OS is broken on disk (its ROOT now names `health=503`
//!   among the installed kernel arguments, written into the VM's disk from
//!   the host) and the VM stops answering (suspended through libvirt): the
//!   set has it power-cycled through sushy-tools, it boots its disk and
//!   answers 503, so after the recovery window the set reimages it; the
//!   reinstall rewrites ROOT and it answers 200. Its history shows
//!   `PowerCycled` before `ReimageRequested`, and one new install.
//! - vm2 and vm3 stop answering (suspended): two unhealthy, more than
//!   `maxUnhealthy: 1`, so `RemediationAllowed=False, TooManyUnhealthy`
//!   names both and the BMCs are asked for nothing while it holds. vm3,
//!   resumed, answers again on its own: one unhealthy is within the limit,
//!   the breaker closes and vm2 is power-cycled (vm3's BMC is never asked);
//!   both end healthy.

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use crate::common::lab::Lab;
use crate::common::lab_disk;
use crate::common::out_of_service::{log_tail, new_installs};
use crate::common::proc::wait_for;
use serde_json::{Value, json};

/// The policy: on the probe only, short windows, `maxUnhealthy: 1`.
fn policy() -> Value {
    json!({"unhealthyWhen": ["ProbeFailing"], "unhealthySeconds": 10, "recoverySeconds": 120,
        "powerCycles": 1, "reimages": 1, "maxUnhealthy": 1})
}

fn set(lab: &Lab) -> Value {
    crate::get(lab, "machineset", "workers")
}

fn remediations(lab: &Lab) -> Vec<Value> {
    set(lab)["status"]["remediations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn condition(lab: &Lab, type_: &str) -> Value {
    set(lab)["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or(Value::Null)
}

fn steps(lab: &Lab, name: &str) -> Vec<String> {
    lab.machine(name).unwrap()["status"]["bootHistory"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["step"].as_str().map(str::to_string))
        .collect()
}

/// Rewrite VM `i`'s ROOT record (the installer's stamp and the installed
/// kernel arguments) so the installed OS answers `health=503`.
fn break_the_installed_os(lab: &Lab, i: usize) {
    let img = lab.disk(i);
    let root = lab_disk::partition(&img, "ROOT").expect("no ROOT partition");
    let stamp = lab_disk::first_line(&img, root.start);
    let mut record = format!("{stamp}\nMHARGS health=503\n").into_bytes();
    record.resize(512, 0);
    let mut f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.seek(SeekFrom::Start(root.start * 512)).unwrap();
    f.write_all(&record).unwrap();
    f.sync_all().unwrap();
}

/// The answers VM `i`'s health endpoint announced on its console.
fn answers(lab: &Lab, i: usize) -> Vec<String> {
    lab.console(i)
        .lines()
        .filter_map(|l| l.split("node: health endpoint answers ").nth(1))
        .map(|a| a.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

pub fn remediate_an_unhealthy_node(lab: &Lab) {
    let before = crate::history(lab);
    crate::apply_set_with(lab, "lab", 1800, Some(policy()));
    let settled = wait_for(Duration::from_secs(300), || {
        let s = set(lab);
        (s["status"]["rolloutState"] == "Complete" && s["status"]["updatedReplicas"] == crate::VMS)
            .then_some(())
    });
    assert!(
        settled.is_some(),
        "{:#}\n{}",
        set(lab)["status"],
        log_tail(lab)
    );

    // 1. vm1: broken on disk, then silent.
    let resets = lab.reset_calls();
    let seen = answers(lab, 1).len();
    break_the_installed_os(lab, 1);
    lab.virsh(&["suspend", &format!("{}-vm1", lab.ns)]);
    let cycled = wait_for(Duration::from_secs(180), || {
        (lab.reset_calls() > resets).then_some(())
    });
    assert!(cycled.is_some(), "no power cycle: {:#}", set(lab)["status"]);
    eprintln!("lab: vm1 power-cycled");
    let reimaged = wait_for(Duration::from_secs(600), || {
        steps(lab, "vm1")
            .contains(&"ReimageRequested".to_string())
            .then_some(())
    });
    assert!(
        reimaged.is_some(),
        "no reimage: {:#}\n{}",
        set(lab)["status"],
        log_tail(lab)
    );
    eprintln!("lab: vm1 reimaged");
    let recovered = wait_for(Duration::from_secs(900), || {
        let gone = !remediations(lab).iter().any(|r| r["machine"] == "vm1");
        let m = lab.machine("vm1")?;
        (gone && m["status"]["phase"] == "Ready").then_some(())
    });
    assert!(
        recovered.is_some(),
        "vm1 did not recover: {:#}\n{}",
        set(lab)["status"],
        log_tail(lab)
    );
    eprintln!("lab: vm1 recovered");
    let h = steps(lab, "vm1");
    let cycled = h.iter().position(|x| x == "PowerCycled");
    let reimaged = h.iter().position(|x| x == "ReimageRequested");
    assert!(
        cycled.is_some() && reimaged.is_some() && cycled < reimaged,
        "{h:?}"
    );
    let after = crate::history(lab);
    assert_eq!(new_installs(&before["vm1"], &after["vm1"]), 1, "{h:?}");
    // Booted its broken disk once (503), then the reinstall (200).
    let new: Vec<String> = answers(lab, 1).split_off(seen);
    assert_eq!(new, ["503", "200"], "{new:?}");
    assert_eq!(crate::probe(lab, 1), "200");
    assert_eq!(crate::root_stamp(lab, 1).1, "version=4230.2.4");
    let ev = lab.cli_ok(&["describe", "machineset", "workers"]);
    for reason in [
        "RemediationPowerCycle",
        "RemediationReimage",
        "RemediationSucceeded",
    ] {
        assert!(ev.contains(reason), "no {reason} event:\n{ev}");
    }
    for outcome in ["power_cycled", "reimaged", "recovered"] {
        let name = format!("metalherd_machineset_remediations_total{{outcome=\"{outcome}\"}}");
        assert!(
            lab.metric(&name).is_some_and(|v| v >= 1.0),
            "{name}: {}",
            lab.metrics()
        );
    }

    // 2. vm2 and vm3 silent at once: the breaker holds.
    let resets = lab.reset_calls();
    for i in [2, 3] {
        lab.virsh(&["suspend", &format!("{}-vm{i}", lab.ns)]);
    }
    let open = wait_for(Duration::from_secs(120), || {
        let c = condition(lab, "RemediationAllowed");
        (c["status"] == "False").then_some(c)
    });
    let c = open.unwrap_or_else(|| panic!("no breaker: {:#}", set(lab)["status"]));
    assert_eq!(c["reason"], "TooManyUnhealthy", "{c}");
    let msg = c["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("2 of 4 machines unhealthy (vm2, vm3), more than maxUnhealthy 1"),
        "{msg}"
    );
    // Longer than unhealthySeconds: nothing is asked of any BMC.
    std::thread::sleep(Duration::from_secs(20));
    assert_eq!(lab.reset_calls(), resets, "a BMC was asked to act");

    // vm3 comes back on its own: one unhealthy is within maxUnhealthy, the
    // breaker closes and vm2 is power-cycled; both end healthy.
    let resets_of = |i: usize| {
        let uuid = &lab.uuids[i - 1];
        lab.bmc_calls("POST", &format!("{uuid}/Actions/ComputerSystem.Reset"))
    };
    let (vm2_before, vm3_before) = (resets_of(2), resets_of(3));
    lab.virsh(&["resume", &format!("{}-vm3", lab.ns)]);
    let cycled = wait_for(Duration::from_secs(180), || {
        (resets_of(2) > vm2_before).then_some(())
    });
    assert!(
        cycled.is_some(),
        "vm2 not power-cycled: {:#}",
        set(lab)["status"]
    );
    let closed = wait_for(Duration::from_secs(600), || {
        let c = condition(lab, "RemediationAllowed");
        (c["status"] == "True" && remediations(lab).is_empty()).then_some(())
    });
    assert!(
        closed.is_some(),
        "{:#}\n{}",
        set(lab)["status"],
        log_tail(lab)
    );
    assert_eq!(resets_of(3), vm3_before, "vm3 recovered on its own");
    assert!(steps(lab, "vm2").contains(&"PowerCycled".to_string()));
    for i in [2, 3] {
        assert_eq!(crate::probe(lab, i), "200", "vm{i}");
    }
    assert!(
        lab.metric("metalherd_machineset_remediations_total{outcome=\"held\"}")
            .is_some_and(|v| v >= 1.0),
        "{}",
        lab.metrics()
    );
    let after_breaker = crate::history(lab);
    for vm in ["vm2", "vm3"] {
        assert_eq!(new_installs(&after[vm], &after_breaker[vm]), 0, "{vm}");
    }
}
