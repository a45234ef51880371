//! What a boot gets (the intent a Machine's status calls for). The boot
//! recorder's tests are in `recorder/tests.rs`.

use serde_json::json;

use super::*;
use crate::api::Machine;

/// A Machine in `phase` with `boot` as its current boot.
fn booting(phase: &str, boot: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": "m1", "namespace": "default", "uid": "u1"},
        "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "b"}}, "bootMACAddress": "52:54:00:00:00:01"},
        "status": {"phase": phase, "boot": boot}
    }))
    .unwrap()
}

#[test]
fn an_open_deprovisioning_boot_gets_the_live_os_and_a_closed_one_does_not() {
    let open = json!({"id": "b9", "purpose": "deprovision", "mintedAt": "2026-01-01T00:00:00Z"});
    let e = MachineEntry::from_machine(&booting("Deprovisioning", open.clone())).unwrap();
    assert_eq!(
        e.intent,
        BootIntent::Install {
            boot_id: "b9".into(),
            purpose: BootPurpose::Deprovision
        },
        "a wipe boot is a live-OS boot (its config is the wipe config)"
    );
    let mut wiped = open;
    wiped["completedAt"] = json!("2026-01-01T00:05:00Z");
    wiped["outcome"] = json!("wiped");
    let e = MachineEntry::from_machine(&booting("Deprovisioning", wiped)).unwrap();
    assert_eq!(e.intent, BootIntent::Idle, "once wiped, nothing is served");
    // Install and reimage boots are live-OS boots as before.
    for (phase, purpose) in [
        ("Provisioning", BootPurpose::Install),
        ("Reimaging", BootPurpose::Reimage),
    ] {
        let b = json!({"id": "b1", "purpose": purpose, "mintedAt": "2026-01-01T00:00:00Z"});
        let e = MachineEntry::from_machine(&booting(phase, b)).unwrap();
        assert_eq!(
            e.intent,
            BootIntent::Install {
                boot_id: "b1".into(),
                purpose
            }
        );
    }
}

/// A Machine with `network` as its `spec.network`.
fn networked(name: &str, mac: &str, network: serde_json::Value) -> Machine {
    serde_json::from_value(json!({
        "apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"bmc": {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "b"}},
                 "bootMACAddress": mac, "network": network}
    }))
    .unwrap()
}

#[test]
fn an_ipv6_address_is_kept_and_indexed_beside_ipv4_ones() {
    let v6 = networked(
        "six",
        "52:54:00:00:00:06",
        json!({"address": "fd00:89::7/64", "gateway": "fd00:89::1", "dns": ["fd00:89::53", "10.0.0.53"]}),
    );
    let e = MachineEntry::from_machine(&v6).unwrap();
    assert_eq!(e.address, None, "no IPv4 address");
    assert_eq!(e.address6, Some("fd00:89::7/64".parse().unwrap()));
    assert_eq!(e.gateway6, Some("fd00:89::1".parse().unwrap()));
    assert_eq!(e.gateway, None);
    assert_eq!(e.dns6, vec!["fd00:89::53".parse::<Ipv6Addr>().unwrap()]);
    assert_eq!(e.dns, vec![Ipv4Addr::new(10, 0, 0, 53)]);

    let v4 = networked(
        "four",
        "52:54:00:00:00:04",
        json!({"address": "10.0.0.7/24", "gateway": "10.0.0.1"}),
    );
    let e = MachineEntry::from_machine(&v4).unwrap();
    assert_eq!(e.address, Some("10.0.0.7/24".parse().unwrap()));
    assert_eq!(e.gateway, Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!((e.address6, e.gateway6), (None, None));

    let d = Directory::new();
    d.upsert(&v6);
    d.upsert(&v4);
    let six: Ipv6Addr = "fd00:89::7".parse().unwrap();
    assert_eq!(d.by_ip6(&six).unwrap().name, "six");
    assert_eq!(d.by_peer(IpAddr::V6(six)).unwrap().name, "six");
    assert_eq!(d.by_ip(&Ipv4Addr::new(10, 0, 0, 7)).unwrap().name, "four");
    // A dual-stack socket's view of an IPv4 client is the IPv4 Machine.
    let mapped = Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped();
    assert_eq!(d.by_peer(IpAddr::V6(mapped)).unwrap().name, "four");
    assert!(d.by_peer("fd00:89::8".parse().unwrap()).is_none());

    // Moving the address to IPv4 drops the IPv6 index entry, and removing
    // the Machine drops everything.
    let moved = networked(
        "six",
        "52:54:00:00:00:06",
        json!({"address": "10.0.0.8/24"}),
    );
    d.upsert(&moved);
    assert!(d.by_ip6(&six).is_none());
    assert_eq!(d.by_ip(&Ipv4Addr::new(10, 0, 0, 8)).unwrap().name, "six");
    d.upsert(&v6);
    d.remove("default", "six");
    assert!(d.by_ip6(&six).is_none());
    assert!(d.by_mac(&[0x52, 0x54, 0, 0, 0, 6]).is_none());
    // The index as a full list replaces it.
    d.replace_all(vec![serde_json::to_value(&v6).unwrap()]);
    assert_eq!(d.by_ip6(&six).unwrap().name, "six");
    assert!(d.by_ip(&Ipv4Addr::new(10, 0, 0, 7)).is_none());
}
