//! Story: rack a server. A Machine declared with only its BMC details
//! (sushy-tools' Redfish emulator, fake driver) goes through a running
//! `metalherd serve` to Available, with its inventory in status and its
//! boot MAC learned from the BMC; a Machine with wrong BMC credentials
//! says so in a condition and its last error instead of crash-looping.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::rack::*;
use common::server::{Server, text};
use common::sushy::{Sushy, SushyOptions};

#[test]
fn rack_a_server() {
    let sushy = Sushy::start(SushyOptions::default());
    let (user, pw) = sushy.opts.auth.clone().expect("auth");
    let api = Server::start_with_config(Some(&controller_config("", "")));
    put_secret(&api, "u1-bmc", &user, &pw);
    put_secret(&api, "wrong-bmc", &user, "not-the-password");
    put_machine(
        &api,
        "rack1-u1",
        serde_json::json!({"bmc": bmc_spec(&sushy.address(0), "u1-bmc")}),
    );
    put_machine(
        &api,
        "rack1-u2",
        serde_json::json!({"bmc": bmc_spec(&sushy.address(0), "wrong-bmc")}),
    );

    let m = wait_phase(&api, "rack1-u1", "Available", Duration::from_secs(90));
    let macs = &sushy.opts.systems[0].macs;
    let learned = m["spec"]["bootMACAddress"].as_str().unwrap_or("");
    assert!(
        macs.iter().any(|x| x == learned),
        "learned {learned}: {m:#}"
    );
    let nics: Vec<&str> = m["status"]["inventory"]["nics"]
        .as_array()
        .expect("inventory nics")
        .iter()
        .filter_map(|n| n["mac"].as_str())
        .collect();
    for mac in macs {
        assert!(nics.contains(&mac.as_str()), "{mac} in {nics:?}");
    }
    assert_eq!(m["status"]["powerState"], "Off", "{m:#}");
    assert_eq!(condition(&m, "BmcReachable").unwrap()["status"], "True");
    assert_eq!(condition(&m, "PowerState").unwrap()["reason"], "Off");
    assert!(
        m["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "metalherd.dev/machine")),
        "{m:#}"
    );
    assert!(m["status"].get("lastError").is_none(), "{m:#}");

    // Every transition is an event (phases passed through within one
    // status write are named in the event of the phase reached); `describe`
    // shows them.
    let evs = events(&api, "rack1-u1");
    let reasons: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
    for want in ["Available", "BootMacLearned"] {
        assert!(reasons.contains(&want), "{want} in {reasons:?}");
    }
    assert!(
        evs.iter()
            .any(|e| e.0 == "Available" && e.2.contains("Registering → Available")),
        "{evs:?}"
    );
    let out = api.cli(&["get", "machines"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("rack1-u1") && l.contains("Available")),
        "{stdout}"
    );

    // `metalherd reimage` asks through the annotation (acted on when Ready).
    let out = api.cli(&["reimage", "rack1-u1"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let m = get_machine(&api, "rack1-u1").unwrap();
    let asked = m["metadata"]["annotations"]["metalherd.dev/reimage"]
        .as_str()
        .unwrap_or("");
    assert!(
        !asked.is_empty() && stdout.contains(asked),
        "{stdout} {m:#}"
    );
    let out = api.cli(&["reimage", "no-such-machine"]);
    assert!(!out.status.success());

    // Bad credentials: a clear condition and error, and still registering.
    let bad = wait_machine(
        &api,
        "rack1-u2",
        Duration::from_secs(60),
        "refused by the BMC",
        |m| {
            condition(m, "BmcReachable").is_some_and(|c| c["reason"] == "BmcBadCredentials")
                && m["status"]["lastError"]["reason"] == "BmcBadCredentials"
        },
    );
    assert_eq!(phase(&bad), "Registering", "{bad:#}");
    assert!(bad["spec"].get("bootMACAddress").is_none());
    let shown = serde_json::to_string(&bad).unwrap();
    assert!(!shown.contains(&pw) && !shown.contains("not-the-password"));
    assert!(
        !api.log().contains("not-the-password"),
        "a password reached the log"
    );
    // Still serving after many failed attempts: no crash loop.
    std::thread::sleep(Duration::from_secs(3));
    assert!(get_machine(&api, "rack1-u2").is_some());
    let log = api.log();
    assert!(!log.contains("panicked"), "{}", tail(&log, 40));
}
