use serde_json::json;

use super::*;
use crate::api::MachineStatus;

/// A status as the string map wrote it before the typed record: every key
/// the controller ever used, values as strings.
fn written_before() -> serde_json::Value {
    json!({
        "phase": "Error",
        "progress": {
            "powerCycledFor": "b7",
            "poweredAt": "2026-11-26T20:15:00Z",
            "powerOffAt": "2026-11-26T20:14:30.5Z",
            "diskBootFor": "b6",
            "nodeRemovedFor": "b7",
            "previousBoot": "none",
            "reimageRequest": "req-1",
            "attempts": "2",
            "retryAt": "2026-11-26T20:25:00Z",
            "errorFrom": "Reimaging"
        }
    })
}

#[test]
fn a_status_written_as_the_string_map_reads_typed() {
    let st: MachineStatus = serde_json::from_value(written_before()).unwrap();
    let p = &st.progress;
    assert_eq!(p.power_cycled_for.as_deref(), Some("b7"));
    assert_eq!(p.powered_at, Some("2026-11-26T20:15:00Z".parse().unwrap()));
    assert_eq!(
        p.power_off_at,
        Some("2026-11-26T20:14:30.5Z".parse().unwrap())
    );
    assert_eq!(p.disk_boot_for.as_deref(), Some("b6"));
    assert_eq!(p.node_removed_for.as_deref(), Some("b7"));
    assert_eq!(p.previous_boot.as_deref(), Some("none"));
    assert_eq!(p.reimage_request.as_deref(), Some("req-1"));
    assert_eq!(p.attempts, Some(2));
    assert_eq!(p.retry_at, Some("2026-11-26T20:25:00Z".parse().unwrap()));
    assert_eq!(p.error_from, Some(MachinePhase::Reimaging));
}

#[test]
fn it_writes_back_the_same_string_map() {
    let before = written_before();
    let st: MachineStatus = serde_json::from_value(before.clone()).unwrap();
    let after = serde_json::to_value(&st).unwrap();
    assert_eq!(after["progress"], before["progress"]);
}

#[test]
fn an_empty_record_is_not_written() {
    let st = MachineStatus::default();
    let v = serde_json::to_value(&st).unwrap();
    assert!(v.get("progress").is_none(), "{v}");
}

#[test]
fn a_value_that_does_not_parse_reads_as_absent_and_the_rest_survives() {
    let st: MachineStatus = serde_json::from_value(json!({
        "progress": {
            "attempts": "two",
            "poweredAt": "yesterday",
            "errorFrom": "Sleeping",
            "powerCycledFor": "b1",
            "someFutureKey": "x"
        }
    }))
    .unwrap();
    let p = &st.progress;
    assert_eq!((p.attempts, p.powered_at, p.error_from), (None, None, None));
    assert_eq!(p.attempts(), 0);
    assert_eq!(p.power_cycled_for.as_deref(), Some("b1"));
}

#[test]
fn set_has_contains_and_clear_agree_for_every_mark() {
    let t: Timestamp = "2026-11-26T20:15:00Z".parse().unwrap();
    let marks = [
        Mark::PowerCycledFor("b1".into()),
        Mark::PoweredAt(t),
        Mark::PowerOffAt(t),
        Mark::DiskBootFor("b1".into()),
        Mark::NodeRemovedFor("b1".into()),
        Mark::PreviousBoot("none".into()),
        Mark::ReimageRequest("r".into()),
        Mark::PowerCycleRequest("remediation 1".into()),
        Mark::BiosWrittenFor("b1".into()),
        Mark::FirmwareUpdatedFor("b1".into()),
        Mark::VolumesCreatedFor("b1".into()),
        Mark::Attempts(3),
        Mark::RetryAt(t),
        Mark::ErrorFrom(MachinePhase::Provisioning),
    ];
    for m in marks {
        let mut p = BootProgress::default();
        assert!(!p.has(&m) && !p.contains(m.key()));
        p.set(m.clone());
        assert!(p.has(&m) && p.contains(m.key()), "{m}");
        // What Display shows is what is stored under the key.
        let v = serde_json::to_value(&p).unwrap();
        let (k, val) = m
            .to_string()
            .split_once('=')
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .unwrap();
        assert_eq!(v[&k], serde_json::Value::String(val), "{m}");
        p.clear(m.key());
        assert!(p.is_empty(), "{m}");
    }
}

#[test]
fn phases_read_back_from_their_names() {
    for p in [
        MachinePhase::Registering,
        MachinePhase::Error,
        MachinePhase::Deprovisioning,
    ] {
        assert_eq!(p.as_str().parse::<MachinePhase>(), Ok(p));
    }
    assert!("ready".parse::<MachinePhase>().is_err());
}
