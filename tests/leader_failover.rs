//! Story: two metalherd replicas in Kubernetes mode elect a leader on a
//! Lease; the leader is killed with SIGKILL and the standby takes over once
//! the Lease expires. The API server is the stand-in (`metalherd serve`,
//! controller off, a separate process); both replicas point at it through
//! the kubeconfig `metalherd kubeconfig` prints. Short durations (3 s
//! Lease, 2 s renew deadline, 500 ms retry) keep it quick; the takeover
//! time is printed, not asserted.
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
//! when it is killed; see its comment.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::proc::wait_for;
use common::server::Server;
use serde_json::Value;

const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/default/leases/metalherd";

fn replica(kc: &str) -> Server {
    let boot_port = common::free_port();
    replica_with(kc, &format!("boot:\n  listen: 127.0.0.1:{boot_port}\n"))
}

fn replica_with(kc: &str, config: &str) -> Server {
    Server::start_with_args(Some(config), &common::rack::replica_args(kc))
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
    let api = Server::start();
    let kc = api.kubeconfig_file();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_in_flight_survives_the_leader_failover() {
    use common::rack::{controller_config, put_secret, wait_phase};
    use common::sim_rack::{SimRack, bmc_credentials};
    use serde_json::json;
    use std::sync::atomic::Ordering;

    let dir = common::rack::boot_files();
    let boot_port = common::free_port();
    let rack = SimRack::start("fo", 2, 63, &format!("http://127.0.0.1:{boot_port}")).await;
    // Server 2 stops between its Ignition fetch and its call-home.
    rack.machines[1].hold_install.store(true, Ordering::SeqCst);

    let api = tokio::task::spawn_blocking(Server::start).await.unwrap();
    let kc = api.kubeconfig_file();
    let config = controller_config(
        "",
        &format!(
            "boot:\n  listen: 127.0.0.1:{boot_port}\n  assetsDir: {}\n  waitSeconds: 1\n",
            dir.path().join("assets").display()
        ),
    );
    let kc_arg = kc.to_str().unwrap().to_string();
    let (api, mut replicas) = tokio::task::spawn_blocking(move || {
        let replicas = [
            replica_with(&kc_arg, &config),
            replica_with(&kc_arg, &config),
        ];
        (api, replicas)
    })
    .await
    .unwrap();

    let class = common::rack::flatcar_class(dir.path());
    let manifests: Vec<Value> = (0..2)
        .map(|i| {
            let mut m = rack.manifest(i, "bmc", json!({"role": "worker"}));
            m["spec"]["classRef"] = json!({"name": "flatcar"});
            m
        })
        .collect();
    let names: Vec<String> = rack.machines.iter().map(|m| m.name.clone()).collect();
    let (n0, n1) = (names[0].clone(), names[1].clone());
    let api = tokio::task::spawn_blocking(move || {
        let (user, pw) = bmc_credentials();
        put_secret(&api, "bmc", &user, &pw);
        common::rack::put_join_secret(&api);
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
        wait_phase(&api, &n0, "Ready", Duration::from_secs(120));
        api
    })
    .await
    .unwrap();

    // Server 2 has its Ignition config (served under the first leader).
    let (api, first, before) = tokio::task::spawn_blocking(move || {
        let boot = wait_for(Duration::from_secs(120), || {
            let (_, m) = api.req(
                "GET",
                &format!("/apis/metalherd.dev/v1alpha1/namespaces/default/machines/{n1}"),
                None,
            );
            let served = m["status"]["bootHistory"]
                .as_array()
                .is_some_and(|h| h.iter().any(|e| e["step"] == "Ignition"));
            served.then(|| m["status"]["boot"].clone())
        })
        .expect("server 2 never fetched its Ignition config");
        let first = holder(&api).expect("a leader");
        (api, first, boot)
    })
    .await
    .unwrap();
    let leader = replicas
        .iter()
        .position(|r| r.guard.pid() == identity_pid(&first))
        .unwrap();
    let standby = 1 - leader;
    let ons_before = rack.machines[1].bmc.counters().power_ons;
    replicas[leader].guard.kill9();
    let (api, replicas) = tokio::task::spawn_blocking(move || {
        wait_for(Duration::from_secs(60), || {
            holder(&api).filter(|h| *h != first)
        })
        .expect("the standby did not take over");
        wait_for(Duration::from_secs(30), || {
            replicas[standby].log().contains(LEADING).then_some(())
        })
        .expect("the new leader did not start acting");
        (api, replicas)
    })
    .await
    .unwrap();
    // The installer calls home now, with the old leader's token, to the
    // new leader (the same boot address).
    rack.machines[1].hold_install.store(false, Ordering::SeqCst);
    let name = names[1].clone();
    let (api, m, replicas) = tokio::task::spawn_blocking(move || {
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_phase(&api, &name, "Ready", Duration::from_secs(120))
        }));
        match got {
            Ok(m) => (api, m, replicas),
            Err(_) => panic!(
                "not Ready after the failover; the new leader's log:\n{}",
                replicas[standby].log()
            ),
        }
    })
    .await
    .unwrap();
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
    drop(replicas);
    drop(api);
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
/// (replayed from the clients' own event logs).
#[test]
fn dhcp_clients_hold_their_leases_through_the_failover_without_a_collision() {
    use common::dhcp_clients::{UdhcpcDaemon, shared_addresses};
    use std::sync::Arc;

    let mut lan = common::lan::Lan::new(&[Some("10.68.0.1/24"), None, None, None, None]);
    let srv = lan.hosts.remove(0);
    let ns = Arc::new(srv.ns);
    let tmp = tempfile::tempdir().unwrap();
    // The stand-in API server and both replicas on the replicas' host.
    let api = Server::start_in_netns(Some("controller:\n  enabled: false\n"), ns.clone(), &[]);
    let kc = api.kubeconfig_file();
    let kc = kc.to_str().unwrap();
    // Four addresses for four clients; a 16 s lease (busybox raises it to
    // its own minimum and renews after about 15 s).
    let config = format!(
        "dhcp:\n  interface: {}\n  discovery: {{enabled: true, record: false, leaseTime: 16}}\n  subnets:\n  - subnet: 10.68.0.0/24\n    ranges: [{{start: 10.68.0.100, end: 10.68.0.103}}]\n",
        srv.iface
    );
    let start = |ns: &Arc<common::netns::Netns>| {
        Server::start_in_netns(Some(&config), ns.clone(), &common::rack::replica_args(kc))
    };
    let mut first = start(&ns);
    wait_for(Duration::from_secs(30), || {
        first.log().contains("dhcp server bound").then_some(())
    })
    .unwrap_or_else(|| panic!("the first replica did not lead:\n{}", first.log()));
    let second = start(&ns);
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

    let leader = holder(&api).expect("a Lease holder");
    assert_eq!(identity_pid(&leader), first.guard.pid());
    first.guard.kill9();
    let killed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    wait_for(Duration::from_secs(60), || {
        let l = second.log();
        (l.contains(LEADING) && l.contains("dhcp server bound")).then_some(())
    })
    .unwrap_or_else(|| panic!("the standby did not take over:\n{}", second.log()));

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
    drop(api);
}
