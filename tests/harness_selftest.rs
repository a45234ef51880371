//! The test harness itself: namespaces come and go, processes die with guards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[test]
fn veth_pair_connects_two_namespaces() {
    let pair = common::netns::VethPair::new("10.231.0.1/24", Some("10.231.0.2/24"));
    let out = pair
        .client
        .exec(&["ping", "-c", "1", "-W", "2", "10.231.0.1"]);
    assert!(out.contains("1 received"), "{out}");
    let name = pair.server.name.clone();
    drop(pair);
    let list = String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(!list.contains(&name), "namespace {name} left behind");
}
