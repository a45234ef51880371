//! A deprovisioning boot over boot HTTP: the live OS with the wipe config
//! (once; never the node config), `wiped` closes the boot where `installed`
//! is refused, and the Machine as that call-home left it is one the
//! controller powers off and lets go.

use std::time::Duration;

use crate::common::boot_server::{client, start, wait_known};
use crate::common::bootlab;
use metalherd::api::Machine;
use metalherd::store::TypedStore;

#[tokio::test]
async fn a_deprovisioning_boot_gets_the_wiper_and_wiped_lets_the_machine_go() {
    use metalherd::api::{BootOutcome, BootPurpose, PowerState};
    use metalherd::controller::machine::{
        BmcObserved, ClassObserved, ClassView, Limits, NodeObserved, Observed, Step, decide,
    };

    let s = start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k"), b"kernel").unwrap();
    std::fs::write(dir.path().join("i"), b"initrd").unwrap();
    let mut class = bootlab::class(
        "workers",
        bootlab::file_artifact(&dir.path().join("k")),
        bootlab::file_artifact(&dir.path().join("i")),
        &["console=ttyS0"],
    );
    class.spec.wipe_on_deprovision = true;
    s.store.create_obj(&class).await.unwrap();
    let m = bootlab::machine("gone", "52:54:00:00:00:07", "127.0.0.1/8", "workers");
    let m: Machine = s.store.create_obj(&m).await.unwrap();
    let m = bootlab::set_boot_for(s.store.as_ref(), &m, "wipe-1", BootPurpose::Deprovision).await;
    wait_known(&s, [0x52, 0x54, 0, 0, 0, 7], Some("wipe-1")).await;
    let token = s.key.mint(m.metadata.uid.as_deref().unwrap(), "wipe-1");
    let c = client();
    let mac = "52-54-00-00-00-07";

    // The live OS, as for an install, with this boot's config URL.
    let r = c
        .get(format!(
            "{}/boot.ipxe?mac={mac}&arch=x86_64&platform=efi",
            s.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let script = r.text().await.unwrap();
    assert!(script.contains("/images/"), "no live OS kernel: {script}");
    assert!(
        script.contains(&format!(
            "metalherd.ignition={}/ignition?mac={mac}&token={token}",
            s.url
        )),
        "{script}"
    );
    // A wipe boot installs no node: its node config is refused.
    let ign = |q: &str| format!("{}/ignition?mac={mac}&token={token}{q}", s.url);
    let r = c.get(ign("&stage=node")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    // Its live OS asks for its config as any live OS does: it gets the
    // wipe config (noted as such), once.
    let r = c.get(ign("")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["ignition"]["version"], "3.3.0");
    let r = c.get(ign("&stage=wipe")).send().await.unwrap();
    assert_eq!(r.status(), 403, "the wipe config twice");
    let mut served = Vec::new();
    for _ in 0..100 {
        let m: Machine = s.store.get_obj("default", "gone").await.unwrap();
        served = m.status.unwrap().boot.unwrap().configs_served;
        if !served.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].stage, "wipe");

    // `installed` is not this boot's word; `wiped` closes it.
    let call = |w: &str| format!("{}/callhome/{w}?mac={mac}&token={token}", s.url);
    let r = c.post(call("installed")).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = c.post(call("wiped")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "recorded\n");
    let r = c.post(call("wiped")).send().await.unwrap();
    assert_eq!(r.status(), 200, "a retried wiped");
    let mut m: Machine = s.store.get_obj("default", "gone").await.unwrap();
    for _ in 0..100 {
        m = s.store.get_obj("default", "gone").await.unwrap();
        let st = m.status.as_ref().unwrap();
        if st.boot_history.iter().any(|e| e.step.as_str() == "Wiped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = m.status.clone().unwrap();
    let b = st.boot.clone().unwrap();
    assert!(b.completed_at.is_some());
    assert_eq!(b.outcome, Some(BootOutcome::Wiped));
    let steps: Vec<String> = st.boot_history.iter().map(|e| e.step.to_string()).collect();
    assert_eq!(steps, ["Script", "Ignition", "Wiped"]);

    // The controller, given the Machine as the call-home left it (being
    // deleted, its Node gone): it powers the wiped server off, then lets
    // the Machine go. Nothing but the call-home recorded the wipe.
    let mut retiring = m.clone();
    retiring.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
    );
    retiring.metadata.finalizers = Some(vec![metalherd::api::FINALIZER.to_string()]);
    let rst = retiring.status.get_or_insert_with(Default::default);
    rst.provisioned_revision = Some("r1".into());
    let observed = |power| Observed {
        bmc: BmcObserved::Reachable { power },
        class: ClassObserved::Present(ClassView {
            name: "workers".into(),
            revision: "r1".into(),
            installs: "r1".into(),
            kubelet_version: "v1.33.2".into(),
            wipe_on_deprovision: true,
            boot: None,
            bios: Default::default(),
            firmware: Vec::new(),
            volumes: Vec::new(),
        }),
        node: NodeObserved::Absent,
        boot_slot: true,
        limits: Limits::default(),
    };
    let now = jiff::Timestamp::now();
    let plan = decide(&retiring, &observed(PowerState::On), now);
    assert!(plan.steps.contains(&Step::PowerOff), "{plan}");
    assert!(
        !plan
            .steps
            .iter()
            .any(|s| matches!(s, Step::MintBoot { .. })),
        "wiped, yet another wipe boot: {plan}"
    );
    let plan = decide(&retiring, &observed(PowerState::Off), now);
    assert!(plan.steps.contains(&Step::RemoveFinalizer), "{plan}");
}
