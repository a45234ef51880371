//! Canned-body tests of the pure Redfish layer: decoding never panics and
//! bad answers become typed errors; decisions (reset type, boot patch and
//! read-back, retries, tasks, inventory) follow the rules.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::json;

use super::logic::*;
use super::model::*;
use crate::bmc::quirks::{BmcIdentity, Protocol, QuirkTable, Quirks};

fn vendor(m: &str) -> Quirks {
    QuirkTable::builtin().resolve(&BmcIdentity {
        protocol: Protocol::Redfish,
        manufacturer: Some(m),
        ..BmcIdentity::default()
    })
}
use crate::bmc::{BootDevice, FirmwareMode, PowerAction, PowerState};

const SUSHY_SYSTEM: &str = r##"{
    "@odata.id": "/redfish/v1/Systems/abc",
    "Id": "abc", "UUID": "27946b59-9e44-4fa7-8e91-f3527a1ef094",
    "Manufacturer": "Sushy Emulator", "PowerState": "Off",
    "Boot": {"BootSourceOverrideEnabled": "Continuous", "BootSourceOverrideTarget": "Hdd",
             "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Cd", "Hdd"],
             "BootSourceOverrideMode": "UEFI"},
    "ProcessorSummary": {"Count": 2, "Model": "Xeon", "Status": {"State": "Enabled"}},
    "MemorySummary": {"TotalSystemMemoryGiB": 1.5},
    "EthernetInterfaces": {"@odata.id": "/redfish/v1/Systems/abc/EthernetInterfaces"},
    "Actions": {"#ComputerSystem.Reset": {
        "target": "/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset",
        "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart"]}},
    "SomethingNew": {"Nested": [1, 2, 3]}
}"##;

#[test]
fn decodes_a_sushy_system_and_ignores_unknown_properties() {
    let s: ComputerSystem = decode(SUSHY_SYSTEM.as_bytes()).unwrap();
    assert_eq!(s.power_state.as_deref(), Some("Off"));
    assert_eq!(s.boot.target_allowable_values.len(), 3);
    let inv = system_inventory(&s);
    assert_eq!(inv.cpu.unwrap().count, 2);
    assert_eq!(inv.memory_mib, Some(1536));
    assert_eq!(
        inv.uuid.as_deref(),
        Some("27946b59-9e44-4fa7-8e91-f3527a1ef094")
    );
}

#[test]
fn malformed_json_is_an_error_not_a_panic() {
    for body in [
        &b"{"[..],
        b"",
        b"null",
        b"[1,2]",
        b"\xff\xfe",
        b"{\"PowerState\": ",
    ] {
        let r: Result<ComputerSystem, DecodeError> = decode(body);
        // `null` is not an object either: every one of these is refused.
        assert!(r.is_err(), "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn wrong_types_name_the_path() {
    let e = decode::<ComputerSystem>(br#"{"PowerState": 5}"#).unwrap_err();
    assert!(e.to_string().contains("PowerState"), "{e}");
    let e = decode::<ComputerSystem>(br#"{"Boot": {"BootSourceOverrideTarget": ["Pxe"]}}"#)
        .unwrap_err();
    assert!(
        e.to_string().contains("Boot.BootSourceOverrideTarget"),
        "{e}"
    );
    let e = decode::<ComputerSystem>(br#"{"ProcessorSummary": {"Count": -1}}"#).unwrap_err();
    assert!(e.to_string().contains("ProcessorSummary.Count"), "{e}");
}

#[test]
fn unknown_enum_values_are_kept_or_reported() {
    let s: ComputerSystem = decode(br#"{"PowerState": "Hibernating"}"#).unwrap();
    let e = parse_power_state(s.power_state.as_deref()).unwrap_err();
    assert_eq!(e, PowerStateError::Unknown("Hibernating".into()));
    assert_eq!(e.to_string(), "unknown PowerState \"Hibernating\"");
    assert_eq!(
        parse_power_state(Some("PoweringOn")).unwrap(),
        PowerState::Unknown
    );
    assert!(parse_power_state(None).is_err());
    // An unknown LinkStatus is simply unknown.
    let n: EthernetInterface =
        decode(br#"{"Id": "1", "MACAddress": "52:54:00:AA:BB:01", "LinkStatus": "Sideways"}"#)
            .unwrap();
    let info = nic_info(&n).unwrap();
    assert_eq!(info.mac, "52:54:00:aa:bb:01");
    assert_eq!(info.link_up, None);
    // An unknown boot target reads back as a mismatch, not a crash.
    let b = Boot {
        boot_source_override_target: Some("Floppy9000".into()),
        boot_source_override_enabled: Some("Once".into()),
        ..Default::default()
    };
    assert!(
        check_boot_readback(BootDevice::Network, FirmwareMode::Uefi, false, false, &b).is_err()
    );
    // Unknown task states keep polling.
    assert_eq!(task_outcome(Some("Meditating")), TaskOutcome::Running);
}

#[test]
fn nics_without_a_mac_are_skipped_and_permanent_mac_is_a_fallback() {
    let n: EthernetInterface = decode(br#"{"Id": "1", "MACAddress": "not-a-mac"}"#).unwrap();
    assert!(nic_info(&n).is_none());
    let n: EthernetInterface = decode(
        br#"{"Id": "2", "MACAddress": "", "PermanentMACAddress": "52-54-00-aa-bb-02", "LinkStatus": "LinkUp", "SpeedMbps": 1000}"#,
    )
    .unwrap();
    let info = nic_info(&n).unwrap();
    assert_eq!(info.mac, "52:54:00:aa:bb:02");
    assert_eq!(info.link_up, Some(true));
    assert_eq!(info.speed_mbps, Some(1000));
}

#[test]
fn reset_type_comes_from_allowable_values() {
    let allowed: Vec<String> = ["On", "ForceOff", "GracefulShutdown", "ForceRestart"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = |a, cur| plan_power(a, cur, &allowed, &Quirks::standard());
    assert_eq!(
        p(PowerAction::On, PowerState::Off).unwrap(),
        PowerPlan::Reset("On".into())
    );
    assert_eq!(
        p(PowerAction::On, PowerState::On).unwrap(),
        PowerPlan::Nothing
    );
    assert_eq!(
        p(PowerAction::Cycle, PowerState::On).unwrap(),
        PowerPlan::Reset("ForceRestart".into())
    );
    assert_eq!(
        p(PowerAction::Cycle, PowerState::Off).unwrap(),
        PowerPlan::Reset("On".into())
    );
    assert_eq!(
        p(PowerAction::GracefulOff, PowerState::On).unwrap(),
        PowerPlan::Reset("GracefulShutdown".into())
    );
    assert_eq!(
        p(PowerAction::ForceOff, PowerState::Unknown).unwrap(),
        PowerPlan::Reset("ForceOff".into())
    );
    // PowerCycle is preferred where offered.
    let with_cycle: Vec<String> = vec!["PowerCycle".into(), "ForceRestart".into()];
    assert_eq!(
        plan_power(
            PowerAction::Cycle,
            PowerState::On,
            &with_cycle,
            &Quirks::standard()
        )
        .unwrap(),
        PowerPlan::Reset("PowerCycle".into())
    );
    // Nothing usable offered: a clear refusal.
    let only_nmi: Vec<String> = vec!["Nmi".into()];
    let e = plan_power(
        PowerAction::ForceOff,
        PowerState::On,
        &only_nmi,
        &Quirks::standard(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"power ForceOff: none of ["ForceOff"] is among the allowed ResetTypes ["Nmi"]"#
    );
    // Not advertised at all: the standard word.
    assert_eq!(
        plan_power(
            PowerAction::ForceOff,
            PowerState::On,
            &[],
            &Quirks::standard()
        )
        .unwrap(),
        PowerPlan::Reset("ForceOff".into())
    );
}

#[test]
fn hpe_graceful_off_falls_back_to_push_power_button() {
    let hpe = &vendor("HPE");
    let allowed: Vec<String> = vec!["On".into(), "ForceOff".into(), "PushPowerButton".into()];
    assert_eq!(
        plan_power(PowerAction::GracefulOff, PowerState::On, &allowed, hpe).unwrap(),
        PowerPlan::Reset("PushPowerButton".into())
    );
}

#[test]
fn boot_patch_and_readback() {
    let s: ComputerSystem = decode(SUSHY_SYSTEM.as_bytes()).unwrap();
    let body = boot_patch(
        BootDevice::Network,
        FirmwareMode::Uefi,
        &s.boot,
        &Quirks::standard(),
    );
    assert_eq!(
        body,
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once",
                        "BootSourceOverrideMode": "UEFI"}})
    );
    // Dell: mode not in the PATCH, and then not required on read-back.
    let dell = &vendor("Dell Inc.");
    let body = boot_patch(BootDevice::Network, FirmwareMode::Uefi, &s.boot, dell);
    assert!(body["Boot"].get("BootSourceOverrideMode").is_none());
    // No mode property at all (iLO 4): not sent.
    let no_mode = Boot::default();
    assert!(!boot_sends_mode(&no_mode, &Quirks::standard()));

    let read = |t: &str, e: &str, m: &str| Boot {
        boot_source_override_target: Some(t.into()),
        boot_source_override_enabled: Some(e.into()),
        boot_source_override_mode: Some(m.into()),
        ..Default::default()
    };
    let ok = |b: &Boot| check_boot_readback(BootDevice::Network, FirmwareMode::Uefi, true, true, b);
    assert!(ok(&read("Pxe", "Once", "UEFI")).is_ok());
    // A BMC known to keep Continuous (sushy-tools): still boots PXE next.
    assert!(ok(&read("Pxe", "Continuous", "UEFI")).is_ok());
    // Without that quirk, Continuous is a BMC that would PXE-boot forever.
    let m = check_boot_readback(
        BootDevice::Network,
        FirmwareMode::Uefi,
        true,
        false,
        &read("Pxe", "Continuous", "UEFI"),
    )
    .unwrap_err();
    assert!(m.kept_continuous, "{m:?}");
    let m = ok(&read("Hdd", "Continuous", "UEFI")).unwrap_err();
    assert_eq!(m.wanted, "Pxe/Once/UEFI");
    assert_eq!(m.got, "Hdd/Continuous/UEFI");
    // Another target: no quirk would make that work.
    assert!(!m.kept_continuous);
    assert!(ok(&read("Pxe", "Disabled", "UEFI")).is_err());
    assert!(ok(&read("Pxe", "Once", "Legacy")).is_err());
    assert!(
        check_boot_readback(
            BootDevice::Network,
            FirmwareMode::Uefi,
            false,
            false,
            &read("Pxe", "Once", "Legacy")
        )
        .is_ok()
    );
}

#[test]
fn retries_only_server_errors_honouring_retry_after() {
    let p = RetryPolicy {
        max_attempts: 4,
        base_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(300),
        max_retry_after: Duration::from_secs(5),
    };
    assert_eq!(
        retry_after(503, Some("2"), 1, &p),
        Some(Duration::from_secs(2))
    );
    assert_eq!(
        retry_after(503, Some("600"), 1, &p),
        Some(Duration::from_secs(5))
    );
    assert_eq!(
        retry_after(500, None, 1, &p),
        Some(Duration::from_millis(100))
    );
    assert_eq!(
        retry_after(502, None, 2, &p),
        Some(Duration::from_millis(200))
    );
    assert_eq!(
        retry_after(500, None, 3, &p),
        Some(Duration::from_millis(300))
    );
    assert_eq!(retry_after(500, None, 4, &p), None, "attempts exhausted");
    assert_eq!(retry_after(501, None, 1, &p), None, "not implemented stays");
    assert_eq!(retry_after(404, None, 1, &p), None);
    assert_eq!(retry_after(401, None, 1, &p), None);
    // An HTTP-date Retry-After falls back to backoff.
    assert_eq!(
        retry_after(503, Some("Wed, 21 Oct 2015 07:28:00 GMT"), 1, &p),
        Some(Duration::from_millis(100))
    );
}

#[test]
fn task_states() {
    assert_eq!(task_outcome(Some("Completed")), TaskOutcome::Completed);
    assert_eq!(task_outcome(Some("Running")), TaskOutcome::Running);
    assert_eq!(task_outcome(None), TaskOutcome::Running);
    assert_eq!(
        task_outcome(Some("Exception")),
        TaskOutcome::Failed("Exception".into())
    );
    let t: Task =
        decode(br#"{"TaskState": "Exception", "Messages": [{"Message": "boom"}]}"#).unwrap();
    assert_eq!(t.messages[0].message.as_deref(), Some("boom"));
}

#[test]
fn error_bodies_are_summarised() {
    let b = br#"{"error": {"code": "Base.1.0.GeneralError", "message": "Not\n   implemented", "@Message.ExtendedInfo": [{"MessageId": "x"}]}}"#;
    assert_eq!(ErrorBody::summary(b), "Not implemented");
    assert_eq!(ErrorBody::summary(b"plain text"), "plain text");
    let long = "x".repeat(1000);
    assert!(ErrorBody::summary(long.as_bytes()).len() < 220);
    // What sushy-tools says when it cannot fetch an image: the URL's path
    // comes past the 200-byte cut. Scrubbed before the cut, no part of the
    // token is left.
    let url = "http://127.0.0.1:41125/vmedia/7c1f0e9a5b3d4e21/boot.iso";
    let sushy = json!({"error": {"message": format!(
        "Failed fetching image from URL {url}: HTTPConnectionPool(host='127.0.0.1', port=41125): \
         Max retries exceeded with url: /vmedia/7c1f0e9a5b3d4e21/boot.iso (Caused by \
         NewConnectionError: Failed to establish a new connection: [Errno 111] Connection refused)")}});
    let body = sushy.to_string();
    assert!(ErrorBody::summary(body.as_bytes()).contains("7c1f0e9a"));
    let hidden = ErrorBody::summary_hiding(body.as_bytes(), Some(url));
    assert!(!hidden.contains("7c1f0e"), "{hidden}");
    assert!(
        hidden.contains("http://127.0.0.1:41125/.../boot.iso"),
        "{hidden}"
    );
}

#[test]
fn inventory_of_storage_documents() {
    let s: SimpleStorage = decode(
        br#"{"Devices": [{"Name": "sda", "Model": "QEMU", "CapacityBytes": 1073741824}, {"Name": "sdb"}]}"#,
    )
    .unwrap();
    let d = disks_from_simple_storage(&s);
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].size_bytes, Some(1 << 30));
    let drive: Drive =
        decode(br#"{"Id": "0", "MediaType": "SSD", "SerialNumber": "S1", "CapacityBytes": 5}"#)
            .unwrap();
    let d = disk_from_drive(&drive);
    assert_eq!(d.rotational, Some(false));
    assert_eq!(d.serial_number.as_deref(), Some("S1"));
}

#[test]
fn negative_or_nan_memory_is_dropped() {
    let s: ComputerSystem = decode(br#"{"MemorySummary": {"TotalSystemMemoryGiB": -3}}"#).unwrap();
    assert_eq!(system_inventory(&s).memory_mib, None);
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode::<ComputerSystem>(&body);
        let _ = decode::<ServiceRoot>(&body);
        let _ = decode::<Task>(&body);
        let _ = decode::<EthernetInterface>(&body);
        let _ = ErrorBody::summary(&body);
    }

    #[test]
    fn decoding_arbitrary_json_never_panics(
        power in proptest::option::of("[A-Za-z]{0,12}"),
        target in proptest::option::of("[A-Za-z]{0,12}"),
        count in proptest::option::of(any::<i64>()),
        gib in proptest::option::of(any::<f64>()),
    ) {
        let v = json!({"PowerState": power, "Boot": {"BootSourceOverrideTarget": target},
                       "ProcessorSummary": {"Count": count},
                       "MemorySummary": {"TotalSystemMemoryGiB": gib}});
        let body = serde_json::to_vec(&v).unwrap();
        if let Ok(s) = decode::<ComputerSystem>(&body) {
            let _ = parse_power_state(s.power_state.as_deref());
            let _ = system_inventory(&s);
            let _ = check_boot_readback(BootDevice::Network, FirmwareMode::Uefi, true, false, &s.boot);
        }
    }
}
