//! Story: two metalherd replicas in Kubernetes mode elect a leader on a
//! Lease; the leader is killed with SIGKILL and the standby takes over once
//! the Lease expires. The API server is the stand-in (`metalherd serve`,
//! controller off, a separate process); both replicas point at it through
//! the kubeconfig `metalherd kubeconfig` prints. Short durations (3 s
//! Lease, 2 s renew deadline, 500 ms retry) keep it quick; the takeover
//! time is printed, not asserted.
//!
//! Not covered yet: a Machine provisioned across the failover on the
//! simulated rack, DHCP leases held by real clients through it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::proc::wait_for;
use common::server::{Server, text};
use serde_json::Value;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/metalherd";

fn replica(kc: &str) -> Server {
    let boot_port = common::free_port();
    Server::start_with_args(
        Some(&format!("boot:\n  listen: 127.0.0.1:{boot_port}\n")),
        &[
            "--store",
            "kubernetes",
            "--kubeconfig",
            kc,
            "--leader-lease-duration",
            "3s",
            "--leader-renew-deadline",
            "2s",
            "--leader-retry-period",
            "500ms",
        ],
    )
}

fn holder(api: &Server) -> Option<String> {
    let (code, lease) = api.req("GET", LEASE, None);
    (code == 200).then_some(())?;
    lease["spec"]["holderIdentity"]
        .as_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

fn identity_pid(identity: &str) -> u32 {
    identity
        .rsplit('-')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("identity {identity:?} does not end in a pid"))
}

const LEADING: &str = "leading: starting the boot services and controllers";

#[test]
fn leader_failover() {
    let dir = tempfile::tempdir().unwrap();
    let api = Server::start();
    let out = api.cli(&["kubeconfig"]);
    let (kubeconfig, err) = text(&out);
    assert!(out.status.success(), "metalherd kubeconfig: {err}");
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, kubeconfig).unwrap();
    let kc = kc.to_str().unwrap();

    let mut replicas = [replica(kc), replica(kc)];
    let first = wait_for(Duration::from_secs(30), || holder(&api)).unwrap_or_else(|| {
        panic!(
            "no replica took the Lease; logs:\n{}\n{}",
            replicas[0].log(),
            replicas[1].log()
        )
    });
    let leader = replicas
        .iter()
        .position(|r| r.guard.pid() == identity_pid(&first))
        .unwrap_or_else(|| panic!("the Lease names {first}, neither replica"));
    let standby = 1 - leader;
    // Exactly one runs the controllers and boot services.
    wait_for(Duration::from_secs(30), || {
        replicas[leader].log().contains(LEADING).then_some(())
    })
    .unwrap_or_else(|| panic!("the leader did not start; log:\n{}", replicas[leader].log()));
    assert!(
        !replicas[standby].log().contains(LEADING),
        "the standby acts too; log:\n{}",
        replicas[standby].log()
    );
    // One boot-token key, from the Secret, on both: a token minted by one
    // is valid on the other.
    let (code, secret) = api.req(
        "GET",
        "/api/v1/namespaces/default/secrets/metalherd-boot-token-key",
        None,
    );
    assert_eq!(code, 200, "{secret}");
    assert_eq!(
        std::fs::read(replicas[0].data_dir.join("boot-token.key")).unwrap(),
        std::fs::read(replicas[1].data_dir.join("boot-token.key")).unwrap()
    );

    replicas[leader].guard.kill9();
    let killed = Instant::now();
    let second = wait_for(Duration::from_secs(60), || {
        holder(&api).filter(|h| *h != first)
    })
    .unwrap_or_else(|| {
        panic!(
            "the standby did not take over; log:\n{}",
            replicas[standby].log()
        )
    });
    let takeover = killed.elapsed();
    assert_eq!(identity_pid(&second), replicas[standby].guard.pid());
    wait_for(Duration::from_secs(30), || {
        replicas[standby].log().contains(LEADING).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the new leader did not start acting; log:\n{}",
            replicas[standby].log()
        )
    });
    let (_, lease): (u16, Value) = api.req("GET", LEASE, None);
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    println!("leader_failover: takeover {takeover:?} after SIGKILL (Lease 3 s, retry 500 ms)");
}
