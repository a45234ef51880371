use std::collections::BTreeMap;

use super::*;
use crate::api::{MachineSpec, MachineStatus};

fn machine(name: &str, labels: &[(&str, &str)]) -> Machine {
    let mut m = Machine::new(name, MachineSpec::default());
    m.metadata.namespace = Some("rack".into());
    m.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    m
}

fn fields(class: &str) -> MetalherdMachineSpecFields {
    MetalherdMachineSpecFields {
        host_selector: None,
        class_ref: LocalObjectReference { name: class.into() },
        overrides: None,
    }
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

#[test]
fn picks_only_free_matching_servers_and_says_why_when_short() {
    let mut paused = machine("c", &[("pool", "a")]);
    paused
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(MACHINE_PAUSED.into(), String::new());
    let ms = vec![
        machine("a", &[("pool", "a"), (CLAIM_LABEL, "other")]),
        machine("b", &[("pool", "a"), (SET_LABEL, "set")]),
        paused,
        machine("d", &[("pool", "b")]),
    ];
    let short = pick(&ms, &sel("pool=a"), None).unwrap_err();
    assert_eq!(
        short,
        PoolShort {
            matching: 3,
            claimed: 2,
            unusable: 1
        }
    );
    assert!(
        short
            .to_string()
            .contains("3 Machines match hostSelector, 2 claimed")
    );
    assert_eq!(
        pick(&ms, &sel("pool=b"), None)
            .unwrap()
            .metadata
            .name
            .as_deref(),
        Some("d")
    );
}

#[test]
fn the_reuse_rule_orders_same_owner_then_fresh_then_others() {
    let mut used = machine("a-used", &[]);
    used.spec.class_ref = Some(LocalObjectReference { name: "old".into() });
    let mut mine = machine("z-mine", &[(RELEASED_FROM_LABEL, "MachineDeployment.md")]);
    mine.spec.class_ref = Some(LocalObjectReference { name: "old".into() });
    let fresh = machine("m-fresh", &[]);
    let ms = vec![used.clone(), mine, fresh.clone()];
    let p = |owner| {
        pick(&ms, &sel(""), owner)
            .unwrap()
            .metadata
            .name
            .clone()
            .unwrap()
    };
    assert_eq!(p(Some("MachineDeployment.md")), "z-mine");
    assert_eq!(p(Some("MachineDeployment.other")), "m-fresh");
    assert_eq!(p(None), "m-fresh");
    let ms = vec![used];
    assert_eq!(
        pick(&ms, &sel(""), None).unwrap().metadata.name.as_deref(),
        Some("a-used")
    );
}

#[test]
fn claiming_a_used_server_asks_for_a_reimage_and_a_fresh_one_does_not() {
    let mut fresh = machine("f", &[]);
    assert!(!claim(
        &mut fresh,
        "mm-1",
        &fields("k8s-134"),
        "mm-1-boot",
        None
    ));
    assert_eq!(
        labels(&fresh).get(CLAIM_LABEL).map(String::as_str),
        Some("mm-1")
    );
    assert!(!annotations(&fresh).contains_key(REIMAGE_ANNOTATION));
    assert_eq!(
        fresh.spec.class_ref.as_ref().map(|c| c.name.as_str()),
        Some("k8s-134")
    );
    assert_eq!(
        fresh
            .spec
            .bootstrap_data_secret_ref
            .as_ref()
            .map(|s| s.name.as_str()),
        Some("mm-1-boot")
    );
    assert!(fresh.spec.online);
    assert_eq!(
        claimed_by(std::slice::from_ref(&fresh), "mm-1").map(|m| m.metadata.name.clone()),
        Some(Some("f".into()))
    );
    assert!(claimed_by(std::slice::from_ref(&fresh), "mm-2").is_none());

    let mut used = machine("u", &[(RELEASED_FROM_LABEL, "MachineDeployment.md")]);
    used.spec.class_ref = Some(LocalObjectReference {
        name: "k8s-133".into(),
    });
    assert!(claim(
        &mut used,
        "mm-2",
        &fields("k8s-134"),
        "mm-2-boot",
        Some("MachineDeployment.md")
    ));
    assert_eq!(
        annotations(&used)
            .get(REIMAGE_ANNOTATION)
            .map(String::as_str),
        Some("cluster-api:mm-2/mm-2-boot")
    );
    assert!(!labels(&used).contains_key(RELEASED_FROM_LABEL));
}

#[test]
fn provisioned_waits_for_the_claims_reimage() {
    let mut m = machine("u", &[]);
    m.spec.class_ref = Some(LocalObjectReference { name: "old".into() });
    m.status = Some(MachineStatus {
        phase: Some(MachinePhase::Ready),
        ..MachineStatus::default()
    });
    claim(&mut m, "mm", &fields("new"), "boot", None);
    assert!(!provisioned(&m), "still Ready from its last life");
    if let Some(s) = m.status.as_mut() {
        s.progress.reimage_request = Some("cluster-api:mm/boot".into());
    }
    assert!(provisioned(&m));
    if let Some(s) = m.status.as_mut() {
        s.phase = Some(MachinePhase::Reimaging);
    }
    assert!(!provisioned(&m));
}

#[test]
fn release_keeps_the_disk_and_remembers_the_owner() {
    let mut m = machine("u", &[]);
    claim(&mut m, "mm", &fields("k8s"), "boot", None);
    release(&mut m, Some("KubeadmControlPlane.cp"));
    assert!(!labels(&m).contains_key(CLAIM_LABEL));
    assert_eq!(
        labels(&m).get(RELEASED_FROM_LABEL).map(String::as_str),
        Some("KubeadmControlPlane.cp")
    );
    assert!(m.spec.class_ref.is_some(), "no wipe");
    assert!(m.spec.bootstrap_data_secret_ref.is_none());
    assert!(!m.spec.online);
    assert_eq!(owner_label("MachineDeployment", &"x".repeat(80)).len(), 63);
}
