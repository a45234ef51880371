//! Story: two metalherd replicas in Kubernetes mode elect a leader on a
//! Lease; the leader is killed with SIGKILL and the standby takes over once
//! the Lease expires. Both replicas point at one API server through a
//! kubeconfig. Short durations (3 s Lease, 2 s renew deadline, 500 ms
//! retry) keep it quick; the takeover time (SIGKILL to the Lease naming
//! the standby) is printed, not asserted.
//!
//! Each story runs twice, on the same code (tests/common/failover.rs):
//! - against a real kube-apiserver and etcd (tests/common/control_plane.rs,
//!   deploy/crds/ installed), the replicas as the `metalherd` user:
//!   `leader_failover` and
//!   `a_provisioning_in_flight_survives_the_leader_failover` on the test
//!   binary's shared control plane, each kept to a namespace of its own
//!   (`--watch-namespace`, where its Lease and boot-token key Secret are
//!   too); the DHCP story on a control plane of its own, started inside
//!   the replicas' network namespace;
//! - against the stand-in (`metalherd serve`, controller off, a separate
//!   process; the kubeconfig `metalherd kubeconfig` prints), the Lease in
//!   `default`: the same names ending in `_on_the_stand_in`.
//!
//! `a_provisioning_in_flight_survives_the_leader_failover`: on the
//! simulated rack, the leader is killed while a server it powered on for
//! its install has fetched its Ignition config and not yet called home.
//! The standby takes over (both replicas serve boot HTTP on the same
//! address, which only the leader binds: the address follows the leader),
//! accepts the call-home carrying the token the old leader minted, and
//! the Machine goes to Ready with no extra power action: as many as a
//! Machine provisioned without a failover in the same run.
//!
//! `dhcp_clients_hold_their_leases_through_the_failover_without_a_collision`:
//! busybox udhcpc clients on a bridge hold dynamic leases from the leader
//! when it is killed; see [`dhcp_story`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Api;
use common::control_plane::{ControlPlane, Options, shared};
use common::failover::{LEADING, Target, identity_pid, which};
use common::proc::wait_for;
use common::server::Server;
use serde_json::Value;

#[test]
fn leader_failover() {
    leader_failover_story(Target::kube_apiserver(shared(), Some("leader-failover")));
}

#[test]
fn leader_failover_on_the_stand_in() {
    leader_failover_story(Target::stand_in(Server::start()));
}

fn leader_failover_story<A: Api>(t: Target<A>) {
    let mut replicas = [t.plain_replica(), t.plain_replica()];
    let first = wait_for(Duration::from_secs(30), || t.holder()).unwrap_or_else(|| {
        panic!(
            "no replica took the Lease; logs:\n{}\n{}",
            replicas[0].log(),
            replicas[1].log()
        )
    });
    let leader = which(&replicas, &first);
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
    let (code, secret) = t
        .api
        .req("GET", &t.path("secrets", "metalherd-boot-token-key"), None);
    assert_eq!(code, 200, "{secret}");
    assert_eq!(
        std::fs::read(replicas[0].data_dir.join("boot-token.key")).unwrap(),
        std::fs::read(replicas[1].data_dir.join("boot-token.key")).unwrap()
    );

    replicas[leader].guard.kill9();
    let killed = Instant::now();
    let second = wait_for(Duration::from_secs(60), || {
        t.holder().filter(|h| *h != first)
    })
    .unwrap_or_else(|| {
        panic!(
            "the standby did not take over; log:\n{}",
            replicas[standby].log()
        )
    });
    let takeover = killed.elapsed();
    assert_eq!(which(&replicas, &second), standby);
    wait_for(Duration::from_secs(30), || {
        replicas[standby].log().contains(LEADING).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the new leader did not start acting; log:\n{}",
            replicas[standby].log()
        )
    });
    let lease = t.lease().expect("the Lease");
    assert_eq!(lease["spec"]["leaseTransitions"], 1, "{lease}");
    println!(
        "leader_failover on {}: takeover {takeover:?} after SIGKILL (Lease 3 s, retry 500 ms)",
        t.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_in_flight_survives_the_leader_failover() {
    // `default` (the simulated rack's manifests name it), kept to by both
    // replicas: no other story on the shared control plane uses it.
    let t = tokio::task::spawn_blocking(|| Target::kube_apiserver(shared(), Some("default")))
        .await
        .unwrap();
    provisioning_in_flight(t, "fo", 63).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_in_flight_survives_the_leader_failover_on_the_stand_in() {
    let t = tokio::task::spawn_blocking(|| Target::stand_in(Server::start()))
        .await
        .unwrap();
    provisioning_in_flight(t, "fs", 64).await;
}

/// The simulated rack (servers `{prefix}1`, `{prefix}2` on
/// `127.0.{subnet}.0/24`) runs on this runtime; the story, which blocks,
/// on a thread of its own.
async fn provisioning_in_flight<A: Api + Send + Sync + 'static>(
    t: Target<A>,
    prefix: &str,
    subnet: u8,
) {
    use common::sim_rack::SimRack;
    use std::sync::atomic::Ordering;

    let boot_port = common::free_port();
    let boot_url = format!("http://127.0.0.1:{boot_port}");
    let rack = Arc::new(SimRack::start(prefix, 2, subnet, &boot_url).await);
    // Server 2 stops between its Ignition fetch and its call-home.
    rack.machines[1].hold_install.store(true, Ordering::SeqCst);
    let r = rack.clone();
    tokio::task::spawn_blocking(move || provisioning_story(&t, &r, boot_port))
        .await
        .unwrap();
}

fn provisioning_story<A: Api>(t: &Target<A>, rack: &common::sim_rack::SimRack, boot_port: u16) {
    use common::rack::{controller_config, put_secret, wait_phase};
    use common::sim_rack::bmc_credentials;
    use serde_json::json;
    use std::sync::atomic::Ordering;

    let dir = common::rack::boot_files();
    let config = controller_config(
        "",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            dir.path().join("assets").display()
        ),
    );
    let mut replicas = [t.replica(&config), t.replica(&config)];
    let api = &t.api;
    let class = common::rack::flatcar_class(dir.path());
    let manifests: Vec<Value> = (0..2)
        .map(|i| {
            let mut m = rack.manifest(i, "bmc", json!({"role": "worker"}));
            m["spec"]["classRef"] = json!({"name": "flatcar"});
            m
        })
        .collect();
    let names: Vec<String> = rack.machines.iter().map(|m| m.name.clone()).collect();
    let (user, pw) = bmc_credentials();
    put_secret(api, "bmc", &user, &pw);
    common::rack::put_join_secret(api);
    for (plural, doc) in [
        ("machineclasses", &class),
        ("machines", &manifests[0]),
        ("machines", &manifests[1]),
    ] {
        let (code, body) = api.req(
            "POST",
            &format!("/apis/metalherd.dev/v1alpha1/namespaces/default/{plural}"),
            Some(doc),
        );
        assert!(code < 300, "{plural}: {code} {body}");
    }
    // Server 1 provisions before any failover: the baseline.
    wait_phase(api, &names[0], "Ready", Duration::from_secs(120));

    // Server 2 has its Ignition config (served under the first leader).
    let before = wait_for(Duration::from_secs(120), || {
        let (_, m) = api.req(
            "GET",
            &format!(
                "/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{}",
                names[1]
            ),
            None,
        );
        let served = m["status"]["bootHistory"]
            .as_array()
            .is_some_and(|h| h.iter().any(|e| e["step"] == "Ignition"));
        served.then(|| m["status"]["boot"].clone())
    })
    .expect("server 2 never fetched its Ignition config");
    let first = t.holder().expect("a leader");
    let leader = which(&replicas, &first);
    let standby = 1 - leader;
    let ons_before = rack.machines[1].bmc.counters().power_ons;
    replicas[leader].guard.kill9();
    let killed = Instant::now();
    wait_for(Duration::from_secs(60), || {
        t.holder().filter(|h| *h != first)
    })
    .expect("the standby did not take over");
    let takeover = killed.elapsed();
    wait_for(Duration::from_secs(30), || {
        replicas[standby].log().contains(LEADING).then_some(())
    })
    .expect("the new leader did not start acting");
    println!(
        "a_provisioning_in_flight_survives_the_leader_failover on {}: takeover {takeover:?} \
         after SIGKILL, acting after {:?}",
        t.name,
        killed.elapsed()
    );
    // The installer calls home now, with the old leader's token, to the
    // new leader (the same boot address).
    rack.machines[1].hold_install.store(false, Ordering::SeqCst);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_phase(api, &names[1], "Ready", Duration::from_secs(120))
    }));
    let m = got.unwrap_or_else(|_| {
        panic!(
            "not Ready after the failover; the new leader's log:\n{}",
            replicas[standby].log()
        )
    });
    // The boot the old leader opened is the one closed: its token held.
    assert_eq!(m["status"]["boot"]["id"], before["id"], "{m:#}");
    let installed = m["status"]["bootHistory"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["step"] == "Installed")
        .unwrap_or_else(|| panic!("no Installed step: {m:#}"));
    assert_eq!(installed["bootId"], before["id"]);
    // No extra power action: as many as the baseline's provisioning.
    let (c0, c1) = (
        rack.machines[0].bmc.counters(),
        rack.machines[1].bmc.counters(),
    );
    assert_eq!(
        c1.power_ons, c0.power_ons,
        "power-ons across the failover vs without one ({ons_before} before the kill)"
    );
    assert_eq!(
        rack.boots(),
        vec![1, 1],
        "each server walked one network boot"
    );
}

#[test]
fn dhcp_clients_hold_their_leases_through_the_failover_without_a_collision() {
    // A control plane of its own, inside the replicas' host: its
    // kube-apiserver listens on that namespace's loopback.
    dhcp_story(|ns| {
        let cp = ControlPlane::start_in_netns(Options::default(), ns);
        cp.install_crds();
        Target::kube_apiserver(Arc::new(cp), None)
    });
}

#[test]
fn dhcp_clients_hold_their_leases_through_the_failover_without_a_collision_on_the_stand_in() {
    dhcp_story(|ns| {
        Target::stand_in(Server::start_in_netns(
            Some("controller:\n  enabled: false\n"),
            ns,
            &[],
        ))
    });
}

/// The leader is killed while real DHCP clients (busybox udhcpc, each in
/// its own namespace on a bridge with the replicas' host) hold dynamic
/// leases from it and use them. The new leader's lease table is its own
/// data directory's, empty of them. A client that arrives after the
/// failover asks for an address: the pool has one address per client, so
/// the new leader can give it the free one only by finding, with its ping
/// check, the ones still in use. The holders then renew (or rebind) the
/// addresses the old leader gave them and keep them: in its ping-check
/// window the new leader takes back a renewal of an address no lease of
/// its own holds. No address is held by two clients at any moment
/// (replayed from the clients' own event logs). The API server (from
/// `target`) runs on the replicas' host too.
fn dhcp_story<A: Api>(target: impl FnOnce(Arc<common::netns::Netns>) -> Target<A>) {
    use common::dhcp_clients::{UdhcpcDaemon, shared_addresses};

    let mut lan = common::lan::Lan::new(&[Some("10.68.0.1/24"), None, None, None, None]);
    let srv = lan.hosts.remove(0);
    let ns = Arc::new(srv.ns);
    let tmp = tempfile::tempdir().unwrap();
    let t = target(ns.clone());
    // Four addresses for four clients; a 16 s lease (busybox raises it to
    // its own minimum and renews after about 15 s).
    let config = format!(
        "dhcp:\n  interface: {}\n  discovery: {{enabled: true, record: false, leaseTime: 16}}\n  subnets:\n  - subnet: 10.68.0.0/24\n    ranges: [{{start: 10.68.0.100, end: 10.68.0.103}}]\n",
        srv.iface
    );
    let mut first = t.replica_in(&ns, &config);
    wait_for(Duration::from_secs(30), || {
        first.log().contains("dhcp server bound").then_some(())
    })
    .unwrap_or_else(|| panic!("the first replica did not lead:\n{}", first.log()));
    let second = t.replica_in(&ns, &config);
    assert!(!second.log().contains(LEADING), "{}", second.log());

    let holders: Vec<UdhcpcDaemon> = (1..=3)
        .map(|i| {
            let h = &lan.hosts[i - 1];
            UdhcpcDaemon::start(&format!("holder{i}"), &h.ns.name, &h.iface, tmp.path(), &[])
        })
        .collect();
    let held: Vec<_> = holders
        .iter()
        .map(|h| {
            wait_for(Duration::from_secs(30), || h.address())
                .unwrap_or_else(|| panic!("{} got no lease:\n{}", h.name, first.log()))
        })
        .collect();
    let mut distinct = held.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{held:?}");

    let leader = t.holder().expect("a Lease holder");
    assert_eq!(identity_pid(&leader), first.guard.pid());
    first.guard.kill9();
    let killed_at = Instant::now();
    let killed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let takeover = wait_for(Duration::from_secs(60), || {
        t.holder()
            .filter(|h| *h != leader)
            .map(|_| killed_at.elapsed())
    })
    .unwrap_or_else(|| panic!("the standby did not take the Lease:\n{}", second.log()));
    wait_for(Duration::from_secs(60), || {
        let l = second.log();
        (l.contains(LEADING) && l.contains("dhcp server bound")).then_some(())
    })
    .unwrap_or_else(|| panic!("the standby did not take over:\n{}", second.log()));
    println!(
        "dhcp failover on {}: takeover {takeover:?} after SIGKILL, serving DHCP after {:?}",
        t.name,
        killed_at.elapsed()
    );

    // A client that comes after the failover, while the holders still use
    // their addresses, and asks for one of them (udhcpc -r): the new
    // leader has no lease of it, pings it, and offers another.
    let h = &lan.hosts[3];
    let wanted = held[0].to_string();
    let newcomer = UdhcpcDaemon::start(
        "newcomer",
        &h.ns.name,
        &h.iface,
        tmp.path(),
        &["-r", &wanted],
    );
    let got = wait_for(Duration::from_secs(60), || newcomer.address())
        .unwrap_or_else(|| panic!("the newcomer got no lease:\n{}", second.log()));
    assert!(
        !held.contains(&got),
        "the newcomer got {got}, in use: {held:?}"
    );

    // Every holder went back to the server after the failover (a renewal
    // at T1) and holds an address again.
    for h in &holders {
        wait_for(Duration::from_secs(60), || {
            let back = h
                .events()
                .iter()
                .any(|(t, ev, _)| *t > killed && (ev == "bound" || ev == "renew"));
            (back && h.address().is_some()).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{} holds no lease after the failover: {:?}\n{}",
                h.name,
                h.events(),
                second.log()
            )
        });
    }
    let all: Vec<&UdhcpcDaemon> = holders.iter().chain([&newcomer]).collect();
    let shared = shared_addresses(&all);
    assert!(
        shared.is_empty(),
        "addresses held by two clients at once: {shared:?}"
    );
    let kept: Vec<_> = holders.iter().map(|h| h.address()).collect();
    assert_eq!(
        kept,
        held.iter().map(|a| Some(*a)).collect::<Vec<_>>(),
        "the holders keep their addresses through the failover"
    );
    assert!(
        second
            .log()
            .contains("answered a ping: quarantined, not offered"),
        "{}",
        second.log()
    );
    let mut now: Vec<_> = all.iter().filter_map(|c| c.address()).collect();
    now.sort();
    now.dedup();
    assert_eq!(now.len(), 4, "every client holds its own address: {now:?}");
    for c in &all {
        eprintln!("{}: {:?}", c.name, c.events());
    }
    drop(all);
    drop(holders);
    drop(newcomer);
    drop(second);
    drop(t);
}
