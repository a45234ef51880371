//! Story: BIOS settings from the class, on the simulated rack
//! (tests/common/sim_rack.rs; its Redfish BMCs keep BIOS attributes, take
//! changes into pending settings at `Bios/Settings` and apply them when
//! the server next starts, as firmware does). The same settings through
//! sushy-tools on a lab VM are part of
//! tests/provision_reimage_and_retire_a_server.rs (the reimage story).
//!
//! - A class names `biosAttributes`; a Machine given the class has what
//!   differs written before its install's power-on, the install's boot
//!   applies it, and after the install the Machine reports the attributes
//!   it read back (`status.bios`), typed as the BMC keeps them (a number
//!   stays a number).
//! - A BMC that drops one of them at boot fails the install with the
//!   attribute named (`BiosSettingNotApplied`), and the machine is not
//!   Ready.
//! - Changing a class's BIOS attributes is a new revision: the Ready
//!   machine is reimaged in place and ends with the new value.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::sim_rack::{MACHINES, Story, story};
use serde_json::{Value, json};

const CLASSES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses";

async fn give_class(s: &Story, name: &str, class: &str) {
    let class = class.to_string();
    s.edit(format!("{MACHINES}/{name}"), move |m| {
        m["spec"]["classRef"] = json!({"name": class});
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apply_bios_settings_on_the_simulated_rack() {
    let s = story("bi", 23, &[("tuned", "1.0", &["console=ttyS0"])]).await;
    s.edit(format!("{CLASSES}/tuned"), |c| {
        c["spec"]["biosAttributes"] = json!({"ProcTurboMode": "Disabled", "NumCores": "8"});
    })
    .await;

    // bi1: written before the install, applied by its boot, read back.
    give_class(&s, "bi1", "tuned").await;
    let m = s
        .until("bi1", "Ready", |m| m["status"]["phase"] == "Ready")
        .await;
    let read = &m["status"]["bios"]["attributes"];
    assert_eq!(read["ProcTurboMode"], "Disabled", "{m}");
    assert_eq!(read["NumCores"], "8", "{m}");
    assert_eq!(read["BootMode"], "Uefi", "untouched: {m}");
    let bmc = s.rack.machines[0].bmc.sim.lock().unwrap().bios.clone();
    assert_eq!(bmc["NumCores"], json!(8), "sent as the number it is");
    assert_eq!(bmc["ProcTurboMode"], "Disabled");
    assert_eq!(s.rack.boots()[0], 1);

    // bi2's BMC drops ProcTurboMode at boot: the install fails, named.
    s.rack.machines[1]
        .bmc
        .sim
        .lock()
        .unwrap()
        .opts
        .bios_dropped
        .push("ProcTurboMode".into());
    give_class(&s, "bi2", "tuned").await;
    let m = s
        .until("bi2", "a BIOS error", |m| {
            m["status"]["lastError"]["reason"] == "BiosSettingNotApplied"
        })
        .await;
    let msg = m["status"]["lastError"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "BIOS attribute ProcTurboMode: wanted Disabled, the BMC reports Enabled after the install's reboot"
        ),
        "{msg}"
    );
    assert_ne!(m["status"]["phase"], "Ready", "{m}");

    // A new value in the class: a new revision, bi1 reimaged in place.
    let before = s.machine("bi1").await["status"]["provisionedRevision"].clone();
    assert_ne!(before, Value::Null);
    s.edit(format!("{CLASSES}/tuned"), |c| {
        c["spec"]["biosAttributes"]["ProcTurboMode"] = json!("Enabled");
    })
    .await;
    let m = s
        .until("bi1", "reimaged with the new value", |m| {
            m["status"]["phase"] == "Ready"
                && m["status"]["provisionedRevision"] != before
                && m["status"]["bios"]["attributes"]["ProcTurboMode"] == "Enabled"
        })
        .await;
    assert_eq!(s.rack.boots()[0], 2, "{m}");
}
