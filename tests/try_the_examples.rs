//! Story: a new user follows the README's "Try the examples" with the
//! controller on. `metalherd apply -f deploy/examples/` stores the examples
//! (refusing only the deliberately invalid one), and the example Machines,
//! shipped paused, are shown PAUSED with a Paused condition while metalherd
//! attempts no BMC call for them: no BmcReachable condition, no last error,
//! no Warning event. The server runs in a network namespace with only
//! loopback, so a regression cannot reach the example BMC addresses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::proc::wait_for;
use common::server::{Server, text};
use serde_json::Value;

const MACHINES: [&str; 3] = ["rack1-u05", "rack1-u07", "rack1-u08"];

fn machine(s: &Server, name: &str) -> Value {
    let (code, m) = s.req(
        "GET",
        &format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{name}"),
        None,
    );
    assert_eq!(code, 200, "{name}: {m}");
    m
}

fn condition<'a>(m: &'a Value, type_: &str) -> Option<&'a Value> {
    m["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[test]
fn the_examples_apply_paused_and_no_bmc_is_contacted() {
    // No config file: the Machine controller runs.
    let s = Server::start_isolated();
    let dir = common::repo_root().join("deploy/examples");
    let out = s.cli(&["apply", "-f", dir.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    for m in MACHINES {
        assert!(
            stdout.contains(&format!("machine/{m} created")),
            "{stdout}\n{stderr}"
        );
    }
    // The controller has looked at every example Machine: each says Paused.
    let seen = wait_for(Duration::from_secs(60), || {
        MACHINES
            .iter()
            .all(|n| condition(&machine(&s, n), "Paused").is_some_and(|c| c["status"] == "True"))
            .then_some(())
    });
    assert!(
        seen.is_some(),
        "example machines never reported Paused: {}\nlog:\n{}",
        MACHINES
            .iter()
            .map(|n| machine(&s, n).to_string())
            .collect::<Vec<_>>()
            .join("\n"),
        s.log()
    );
    for n in MACHINES {
        let m = machine(&s, n);
        assert!(
            condition(&m, "BmcReachable").is_none(),
            "{n}: a BMC call was made: {m}"
        );
        assert!(m["status"]["lastError"].is_null(), "{n}: {m}");
        let (_, evs) = s.req("GET", "/api/v1/namespaces/default/events", None);
        let warnings: Vec<&Value> = evs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == n && e["type"] == "Warning")
            .collect();
        assert!(warnings.is_empty(), "{n}: {warnings:?}");
    }
    let log = s.log();
    assert!(
        !log.contains("10.10.0."),
        "the log names an example BMC address:\n{log}"
    );

    // `get machines` shows it.
    let out = s.cli(&["get", "machines"]);
    let (table, _) = text(&out);
    for n in MACHINES {
        let row = table
            .lines()
            .find(|l| l.starts_with(n))
            .unwrap_or_else(|| panic!("{n} missing:\n{table}"));
        assert!(row.contains("PAUSED"), "{row}");
    }
}
