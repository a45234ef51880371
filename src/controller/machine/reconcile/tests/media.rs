//! A virtual media boot through the reconciler: the ISO inserted, the CD
//! set once, then the power-on, each noted; no URL, no power-on.

use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::controller::machine::execute::FirmwareImages;

/// Boot HTTP as the executor sees it: a media URL with a token in it.
struct Urls;

#[async_trait]
impl FirmwareImages for Urls {
    async fn url(&self, _: &Artifact) -> Result<String, String> {
        Err("no firmware here".into())
    }
    fn media_url(&self, m: &Machine, boot_id: &str) -> Result<String, String> {
        Ok(format!(
            "http://10.0.0.1:8080/vmedia/{}/secret-{boot_id}/boot.iso",
            m.spec.boot_mac_address.as_deref().unwrap_or_default()
        ))
    }
}

async fn media_machine(e: &Env) {
    available(e, "m1").await;
    let mut m = get(e, "m1").await;
    m.spec.boot = Some(BootMethod::VirtualMedia);
    e.store.update_obj(&m).await.unwrap();
}

#[tokio::test]
async fn a_virtual_media_boot_inserts_the_iso_then_boots_the_cd_once() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    media_machine(&e).await;
    let bmc = FakeBmc::new();
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_insert_media(Ok(()))
        .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Ok(()))
        .expect_power(PowerAction::On, Ok(()))
        .expect_close();
    let mut r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    r.firmware = Some(Arc::new(Urls));
    settle(&r, "m1", 5).await;
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    let boot = st.boot.clone().unwrap();
    let url = bmc.inserted_media();
    assert_eq!(
        url.as_deref(),
        Some(
            format!(
                "http://10.0.0.1:8080/vmedia/52:54:00:aa:00:01/secret-{}/boot.iso",
                boot.id
            )
            .as_str()
        )
    );
    let noted: Vec<_> = st
        .boot_history
        .iter()
        .filter(|h| h.step == BootStep::MediaInserted)
        .collect();
    assert_eq!(noted.len(), 1, "{:?}", st.boot_history);
    assert_eq!(noted[0].boot_id.as_deref(), Some(boot.id.as_str()));
    assert_eq!(noted[0].detail, "http://10.0.0.1:8080/.../boot.iso");
    assert_eq!(
        st.progress.power_cycled_for.as_deref(),
        Some(boot.id.as_str())
    );
}

#[tokio::test]
async fn without_a_media_url_the_server_is_not_powered_on() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    media_machine(&e).await;
    let bmc = FakeBmc::new();
    bmc.expect_power_state(Ok(PowerState::Off)).expect_close();
    // No boot HTTP here: the executor cannot name the ISO.
    let r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    let next = settle(&r, "m1", 5).await;
    assert_eq!(next, Requeue::After(Limits::default().bmc_retry));
    bmc.verify().unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    let err = st.last_error.unwrap();
    assert_eq!(err.reason, "VirtualMediaUnavailable");
    assert!(
        err.message.contains("no boot HTTP server"),
        "{}",
        err.message
    );
    assert!(st.progress.power_cycled_for.is_none());
}

#[tokio::test]
async fn a_bmc_without_virtual_media_fails_the_boot_saying_so() {
    let e = env();
    e.store.create_obj(&class()).await.unwrap();
    media_machine(&e).await;
    let bmc = FakeBmc::new();
    let unsupported = || BmcError::Unsupported {
        address: "redfish+http://127.0.0.1:8000".into(),
        what:
            "virtual media: the System has no VirtualMedia collection and neither has its Manager"
                .into(),
    };
    bmc.expect_power_state(Ok(PowerState::Off))
        .expect_insert_media(Err(unsupported()))
        .expect_close()
        .expect_power_state(Ok(PowerState::Off))
        .expect_close();
    let mut r = reconciler(&e, FakeConnector::new().with("m1", bmc.clone()), 0);
    r.firmware = Some(Arc::new(Urls));
    settle(&r, "m1", 3).await;
    r.reconcile(&key("m1")).await.unwrap();
    let st = get(&e, "m1").await.status.unwrap();
    // The boot is given up, as a refused boot override's is: retried
    // after the back-off, the Error phase after the last attempt.
    let boot = st.boot.clone().unwrap();
    assert_eq!(boot.outcome, Some(BootOutcome::Abandoned), "{st:?}");
    assert!(st.progress.retry_at.is_some(), "{st:?}");
    let err = st.last_error.unwrap();
    assert_eq!(err.reason, "VirtualMediaUnsupported");
    assert!(
        err.message.contains("no VirtualMedia collection"),
        "{}",
        err.message
    );
    assert!(st.progress.power_cycled_for.is_none(), "never powered on");
}
