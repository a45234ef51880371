//! Story: update firmware from the class, on the simulated rack
//! (tests/common/sim_rack.rs; its Redfish BMCs offer
//! `UpdateService.SimpleUpdate`, fetch the image from the URI they are
//! given, run a task until the download ends, and apply the new BIOS
//! version at the next boot, as a BIOS flash does). The same through
//! sushy-tools on a lab VM is part of the reimage story of
//! tests/provision_reimage_and_retire_a_server.rs.
//!
//! - A MachineSet of two runs revision 1. Its class gains a `firmware`
//!   entry (BIOS 3.0.0, the image pinned by sha256): revision 2 rolls one
//!   machine at a time. Before each reimage's power-on the BMC is given
//!   the image's URL on metalherd's boot HTTP (served from the image
//!   cache) and fetches it; the task is followed to its end; after the
//!   reboot both BMCs report 3.0.0, read back into `status.firmware`.
//! - A BMC whose update task fails: the boot never starts on the old
//!   firmware (no power-on), and the Machine's last error is the task's
//!   message.
//! - A BMC that completes the update but whose boot does not apply it:
//!   the install fails with the component named (`FirmwareNotUpdated`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::out_of_service::passed_batches;
use common::rack::tail;
use common::sim_rack::{MACHINES, Story, story_declared};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const CLASSES: &str = "/apis/metalherd.dev/v1alpha1/namespaces/default/machineclasses";

/// fw1 and fw2 are the set's pool; fw3 and fw4 stay out of it.
fn declare(i: usize, m: &mut Value) -> &'static str {
    if i >= 2 {
        m["metadata"]["labels"]["role"] = json!("spare");
    }
    "Available"
}

async fn rollout_status(s: &Story) -> String {
    let (ok, out, err) = s
        .cli(&[
            "rollout",
            "status",
            "machineset",
            "workers",
            "--timeout",
            "2m",
        ])
        .await;
    assert!(ok, "rollout: {out}{err}\n{}", tail(&s.api.log(), 40));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_firmware_on_the_simulated_rack() {
    let s = story_declared(
        "fw",
        27,
        &[("lab", "1.0", &[]), ("flash", "1.0", &[])],
        |_| None,
        declare,
    )
    .await;
    let image = b"BiosVersion=3.0.0\n";
    let path = s.dir.path().join("bios-3.0.0.bin");
    std::fs::write(&path, image).unwrap();
    let sha = hex::encode(Sha256::digest(image));
    let firmware = json!([{"component": "BIOS", "version": "3.0.0",
        "image": {"url": format!("file://{}", path.display()), "sha256": sha}}]);

    // Revision 1 on the set's two machines, old firmware.
    let one_at_a_time = json!({"updateStrategy": {"type": "InPlace", "maxUnavailable": 1,
        "progressDeadlineSeconds": 120, "autoRollback": true,
        "healthCheck": {"nodeReadySeconds": 1, "httpProbe": {
            "url": format!("http://{{{{address}}}}:{}/healthz", s.rack.health_port),
            "expectedStatus": 200}}}});
    s.apply_set_with("lab", 2, 120, one_at_a_time).await;
    let out = rollout_status(&s).await;
    assert!(out.contains("revision 1 on 2 machines"), "{out}");
    for i in 0..2 {
        assert_eq!(s.rack.machines[i].bmc.sim.lock().unwrap().firmware, "2.3.4");
    }

    // The class names firmware: revision 2, rolled one machine at a time.
    let f = firmware.clone();
    s.edit(format!("{CLASSES}/lab"), move |c| {
        c["spec"]["firmware"] = f;
    })
    .await;
    let out = rollout_status(&s).await;
    assert!(out.contains("revision 2 on 2 machines"), "{out}");
    let batches = passed_batches(&out, 2);
    assert_eq!(batches.len(), 2, "two batches of one: {out}");
    assert!(batches.values().all(|b| b.len() == 1), "{batches:?}");
    let served = format!("{}/images/{sha}/firmware", s.boot_url);
    for i in 0..2 {
        let name = format!("fw{}", i + 1);
        let m = s.machine(&name).await;
        assert_eq!(m["status"]["phase"], "Ready", "{m:#}");
        assert_eq!(
            m["status"]["firmware"]["versions"]["BIOS"], "3.0.0",
            "read back after the reboot: {m:#}"
        );
        let sim = s.rack.machines[i].bmc.sim.lock().unwrap();
        assert_eq!(sim.firmware, "3.0.0", "{name}");
        assert_eq!(sim.image_uris, std::slice::from_ref(&served), "{name}");
    }
    assert_eq!(s.rack.boots()[..2], [2, 2], "one install, one reimage each");

    // fw3's BMC fails the update: no power-on, the task's message named.
    s.rack.machines[2]
        .bmc
        .sim
        .lock()
        .unwrap()
        .opts
        .firmware_refused = true;
    let class = |name: &'static str| {
        move |m: &mut Value| {
            m["spec"]["classRef"] = json!({"name": name});
        }
    };
    let f = firmware.clone();
    s.edit(format!("{CLASSES}/flash"), move |c| {
        c["spec"]["firmware"] = f;
    })
    .await;
    s.edit(format!("{MACHINES}/fw3"), class("flash")).await;
    let m = s
        .until("fw3", "a failed update", |m| {
            m["status"]["lastError"]["reason"] == "BmcTaskFailed"
        })
        .await;
    let msg = m["status"]["lastError"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("UpdateFirmware(BIOS=3.0.0): ")
            && msg.contains("image rejected: signature check failed"),
        "{msg}"
    );
    {
        let sim = s.rack.machines[2].bmc.sim.lock().unwrap();
        assert_eq!(sim.counters.power_ons, 0, "booted on the old firmware");
        assert_eq!(sim.firmware, "2.3.4");
    }

    // fw4's boot does not apply the update: the install fails, named.
    s.rack.machines[3]
        .bmc
        .sim
        .lock()
        .unwrap()
        .opts
        .firmware_ignored = true;
    s.edit(format!("{MACHINES}/fw4"), class("flash")).await;
    let m = s
        .until("fw4", "a firmware error", |m| {
            m["status"]["lastError"]["reason"] == "FirmwareNotUpdated"
        })
        .await;
    let msg = m["status"]["lastError"]["message"].as_str().unwrap();
    assert_eq!(
        msg,
        "firmware BIOS: wanted 3.0.0, the BMC reports 2.3.4 after the install's reboot; \
         the update did not apply",
        "{m:#}"
    );
    assert_ne!(m["status"]["phase"], "Ready", "{m:#}");
}
