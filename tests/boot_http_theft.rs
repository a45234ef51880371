//! Story: the boot network is hostile. A third host on it asks boot HTTP
//! for a machine's install script and configs, without and then with the
//! machine's address (here: other loopback addresses, which the server sees
//! as other hosts). The script (it carries the boot's token) goes only to
//! the machine's address; each config of the boot goes out in full once;
//! call-homes are taken once and in the order the boot allows; tokens are
//! valid only from the power-on for their boot and expire. Every refusal
//! answers the same word to the client and leaves a Warning event on the
//! Machine saying why and from where.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::boot_server::{Server, client_from, start, wait_known};
use common::bootlab;
use metalherd::api::{BootStep, Event, Kind, Machine};
use metalherd::store::TypedStore;
use metalherd::store::events::list_for;

const MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0x0d, 1];
const HY: &str = "52-54-00-00-0d-01";

async fn events(s: &Server, name: &str) -> Vec<Event> {
    list_for(s.store.as_ref(), Kind::Machine, "default", name)
        .await
        .unwrap()
}

/// A Warning event with `reason` whose message has every one of `words`.
async fn warned(s: &Server, name: &str, reason: &str, words: &[&str]) -> bool {
    events(s, name).await.iter().any(|e| {
        e.type_ == "Warning" && e.reason == reason && words.iter().all(|w| e.message.contains(w))
    })
}

async fn class(s: &Server) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k"), b"kernel").unwrap();
    std::fs::write(dir.path().join("i"), b"initrd").unwrap();
    let class = bootlab::class(
        "workers",
        bootlab::file_artifact(&dir.path().join("k")),
        bootlab::file_artifact(&dir.path().join("i")),
        &[],
    );
    s.store.create_obj(&class).await.unwrap();
    dir
}

#[tokio::test]
async fn a_third_host_gets_neither_script_nor_config_and_is_seen() {
    let s = start().await;
    let _files = class(&s).await;
    // The machine's reserved address is 127.0.0.1; 127.0.0.3 is a third host.
    let m = bootlab::machine("victim", "52:54:00:00:0d:01", "127.0.0.1/8", "workers");
    let m = bootlab::create_booting(s.store.as_ref(), &m, "boot-1").await;
    wait_known(&s, MAC, Some("boot-1")).await;
    let (me, thief) = (client_from("127.0.0.1"), client_from("127.0.0.3"));
    let script = format!("{}/boot.ipxe?mac={HY}&arch=x86_64&platform=efi", s.url);
    let token = s.key.mint(m.metadata.uid.as_deref().unwrap(), "boot-1");
    let ign = |stage: &str| format!("{}/ignition?mac={HY}&token={token}&stage={stage}", s.url);

    // Without the machine's address: no script, and the machine shows it.
    let r = thief.get(&script).send().await.unwrap();
    assert_eq!(r.status(), 403);
    let refusal = r.text().await.unwrap();
    assert_eq!(refusal, "forbidden\n");
    assert!(warned(&s, "victim", "BootScriptRefused", &["127.0.0.3", "address"]).await);
    // The machine itself gets it, with the token.
    let r = me.get(&script).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains(&token));
    // The token (say, sniffed) from elsewhere: the same word as a bad token.
    let r = thief.get(ign("install")).send().await.unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (403, refusal.clone())
    );
    let r = me
        .get(format!(
            "{}/ignition?mac={HY}&token={}",
            s.url,
            "0".repeat(64)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.status().as_u16(), r.text().await.unwrap()),
        (403, refusal.clone())
    );

    // The machine fetches each config once; a second complete fetch of the
    // same stage (the thief holding the machine's address) is refused and
    // names where it came from and where the config went.
    for stage in ["install", "node"] {
        let r = me.get(ign(stage)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{stage}");
        assert!(!r.bytes().await.unwrap().is_empty());
    }
    for stage in ["install", "node"] {
        let r = me.get(ign(stage)).send().await.unwrap();
        assert_eq!(
            (r.status().as_u16(), r.text().await.unwrap()),
            (403, refusal.clone()),
            "{stage}"
        );
        let words = [
            &format!("Ignition {stage}") as &str,
            "127.0.0.1",
            "already served",
        ];
        assert!(
            warned(&s, "victim", "IgnitionRefused", &words).await,
            "{:#?}",
            events(&s, "victim").await
        );
    }
    // The boot record keeps what went where (a restart keeps the rule).
    let mut served = vec![];
    for _ in 0..100 {
        let v: Machine = s.store.get_obj("default", "victim").await.unwrap();
        served = v.status.unwrap().boot.unwrap().configs_served;
        if served.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got: Vec<(&str, &str)> = served
        .iter()
        .map(|c| (c.stage.as_str(), c.address.as_str()))
        .collect();
    got.sort();
    assert_eq!(got, [("install", "127.0.0.1"), ("node", "127.0.0.1")]);
}

#[tokio::test]
async fn call_homes_are_taken_once_and_in_order() {
    let s = start().await;
    let _files = class(&s).await;
    let m = bootlab::machine("victim", "52:54:00:00:0d:01", "127.0.0.1/8", "workers");
    let m = bootlab::create_booting(s.store.as_ref(), &m, "boot-1").await;
    wait_known(&s, MAC, Some("boot-1")).await;
    let me = client_from("127.0.0.1");
    let token = s.key.mint(m.metadata.uid.as_deref().unwrap(), "boot-1");
    let home = |what: &str| {
        let u = format!("{}/callhome/{what}?mac={HY}&token={token}", s.url);
        let me = me.clone();
        async move {
            let r = me.post(u).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let refused = (403, "forbidden\n".to_string());
    assert_eq!(home("booted").await, refused, "booted before installed");
    // Refusals of one reason fold into one Event that shows the latest:
    // look before the next refusal replaces the message.
    let mut seen = false;
    for _ in 0..100 {
        if warned(
            &s,
            "victim",
            "CallHomeRefused",
            &["call-home booted", "before `installed`"],
        )
        .await
        {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen, "no warning for booted before installed");
    assert_eq!(home("installed").await.0, 200);
    assert_eq!(home("installed").await, (200, "already recorded\n".into()));
    assert_eq!(home("failed").await, refused, "failed after installed");
    assert_eq!(home("booted").await.0, 200);
    assert_eq!(home("booted").await, (200, "already recorded\n".into()));
    // Each step once, in order.
    let mut steps = vec![];
    for _ in 0..100 {
        let v: Machine = s.store.get_obj("default", "victim").await.unwrap();
        steps = v
            .status
            .unwrap()
            .boot_history
            .into_iter()
            .map(|e| e.step)
            .collect();
        if steps.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(steps, [BootStep::Installed, BootStep::Booted]);
}

#[tokio::test]
async fn a_token_is_useless_before_its_power_on_and_after_it_expires() {
    let s = start().await;
    let _files = class(&s).await;
    let m = bootlab::machine("victim", "52:54:00:00:0d:01", "127.0.0.1/8", "workers");
    let m = bootlab::create_booting(s.store.as_ref(), &m, "boot-1").await;
    wait_known(&s, MAC, Some("boot-1")).await;
    let me = client_from("127.0.0.1");
    let token = s.key.mint(m.metadata.uid.as_deref().unwrap(), "boot-1");
    let ign = format!("{}/ignition?mac={HY}&token={token}", s.url);
    let s = &s;
    let set_progress = |powered: Option<jiff::Timestamp>| async move {
        for _ in 0..20 {
            let mut v: Machine = s.store.get_obj("default", "victim").await.unwrap();
            let p = &mut v.status.as_mut().unwrap().progress;
            *p = Default::default();
            if let Some(at) = powered {
                p.power_cycled_for = Some("boot-1".into());
                p.powered_at = Some(at);
            }
            if s.store.update_status_obj(&v).await.is_ok() {
                return;
            }
        }
        panic!("cannot set progress");
    };
    // A reimage's old OS is still up: the new boot's token is not valid yet.
    set_progress(None).await;
    let r = me.get(&ign).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(warned(s, "victim", "IgnitionRefused", &["not been powered on"]).await);
    // Powered on longer ago than the token lives (35 minutes by default).
    let long_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(36);
    set_progress(Some(long_ago)).await;
    let r = me.get(&ign).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(warned(s, "victim", "IgnitionRefused", &["expired"]).await);
    // Powered on just now: served.
    set_progress(Some(jiff::Timestamp::now())).await;
    assert_eq!(me.get(&ign).send().await.unwrap().status(), 200);
}
