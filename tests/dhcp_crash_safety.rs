//! Story: metalherd is killed (kill -9) while a rack is getting
//! addresses; after restart no address is ever held by two clients. Every
//! DHCP reply on the link is captured; perfdhcp drives the load before the
//! kill and after the restart, and crafted clients check that a client
//! ACKed before the kill keeps its address while a newcomer asking for it
//! is refused. Run in both lease-sync modes: `batch` (the default; the
//! journal is written before each reply) and `always` (flushed too).
//! DHCPv6 leases likewise survive a kill -9: after the restart the pool is
//! still taken and every holder renews its own address.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::dhcp_clients::{self, ReplyCapture, Req};
use common::dhcp_serve;
use common::dhcp6::{self, Firmware, Link6};
use common::netns::VethPair;
use common::proc::{ChildGuard, wait_for};
use dhcproto::v4::MessageType;

fn acks(cap: &ReplyCapture) -> usize {
    cap.snapshot()
        .iter()
        .filter(|s| s.msg_type == MessageType::Ack)
        .count()
}

#[test]
fn kill_9_during_perfdhcp_then_restart_never_double_leases() {
    // The default: journal written before each reply, flushed in the background.
    kill_9_scenario("");
}

#[test]
fn kill_9_with_lease_sync_always_never_double_leases() {
    kill_9_scenario("  leaseSync: {mode: always}\n");
}

fn kill_9_scenario(extra: &str) {
    let perfdhcp = common::require_tool("perfdhcp");
    let pair = VethPair::new("10.66.0.1/16", Some("10.66.0.2/16"));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = tmp.path().join("config.yaml");
    // A pool smaller than both runs together, so the second run contends
    // for addresses the first one was given.
    std::fs::write(
        &cfg,
        format!(
            "dhcp:\n{extra}  interface: {}\n  discovery: {{enabled: true, record: false, leaseTime: 3600}}\n  subnets:\n  - subnet: 10.66.0.0/16\n    ranges: [{{start: 10.66.1.0, end: 10.66.2.255}}]\n    router: 10.66.0.1\n    relays: [10.66.0.2]\n",
            pair.server_if
        ),
    )
    .unwrap();
    let cap = ReplyCapture::start(&pair.client.name);
    let mut srv = dhcp_serve::start(&pair.server, &cfg, &data, &tmp.path().join("serve1.log"));

    let run_perf = |base: &str, clients: &str, secs: &str, log: &str| {
        let mut c = pair.client.command(perfdhcp.to_str().unwrap());
        c.args([
            "-4",
            "-l",
            &pair.client_if,
            "-r",
            "200",
            "-R",
            clients,
            "-p",
            secs,
        ])
        .args(["-b", &format!("mac={base}")]);
        ChildGuard::spawn("perfdhcp", &mut c, &tmp.path().join(log))
    };
    let mut pd1 = run_perf("00:0c:01:00:00:00", "300", "30", "perf1.log");
    let got = wait_for(Duration::from_secs(60), || {
        (acks(&cap) >= 150).then_some(())
    });
    assert!(got.is_some(), "perfdhcp got ACKs before the kill");
    srv.kill9();
    pd1.kill9();
    let before = cap.snapshot();
    // Every client's last ACK before the kill.
    let mut held: HashMap<[u8; 6], Ipv4Addr> = HashMap::new();
    for s in before.iter().filter(|s| s.msg_type == MessageType::Ack) {
        held.insert(s.mac, s.yiaddr);
    }
    assert!(!held.is_empty());

    let _srv = dhcp_serve::start(&pair.server, &cfg, &data, &tmp.path().join("serve2.log"));
    let mut pd2 = run_perf("00:0c:02:00:00:00", "500", "6", "perf2.log");
    let done = wait_for(Duration::from_secs(60), || (!pd2.running()).then_some(()));
    assert!(done.is_some(), "second perfdhcp run ends");

    // A client ACKed before the kill keeps its address (INIT-REBOOT) and a
    // newcomer asking for one of those addresses is refused.
    let sample: Vec<([u8; 6], Ipv4Addr)> = held.iter().take(20).map(|(m, i)| (*m, *i)).collect();
    let iface = pair.client_if.clone();
    let results = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        let to = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
        sample
            .iter()
            .enumerate()
            .map(|(n, (mac, ip))| {
                let own = Req::new(3, *mac).opt(50, &ip.octets());
                let own = dhcp_clients::exchange(&s, &own, to, Duration::from_secs(3));
                let mut newcomer = Req::new(3, [2, 0xee, 0, 0, 0, n as u8]).opt(50, &ip.octets());
                newcomer.xid ^= 0x0101_0101;
                let other = dhcp_clients::exchange(&s, &newcomer, to, Duration::from_secs(3));
                (*ip, own.map(|r| r.0), other.map(|r| r.0))
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    for (ip, own, other) in results {
        let own = own.unwrap_or_else(|| panic!("no answer for the holder of {ip}"));
        assert_eq!(
            own.opts().msg_type(),
            Some(MessageType::Ack),
            "holder of {ip} keeps it"
        );
        assert_eq!(own.yiaddr(), ip);
        let other = other.unwrap_or_else(|| panic!("no answer for a newcomer asking for {ip}"));
        assert_eq!(
            other.opts().msg_type(),
            Some(MessageType::Nak),
            "newcomer asking for {ip}"
        );
    }

    let all = cap.snapshot();
    let total_acks = all
        .iter()
        .filter(|s| s.msg_type == MessageType::Ack)
        .count();
    assert!(total_acks > before.len() / 2, "the second run got ACKs too");
    let doubles = dhcp_clients::double_holders(&all);
    assert!(
        doubles.is_empty(),
        "addresses ACKed to two clients: {doubles:?}"
    );
}

/// A new server on an empty lease table (a new leader after a failover in
/// Kubernetes mode, whose data directory is its own): a client still holds
/// and uses the address the previous server leased it. With `pingCheck`
/// (on by default where replicas elect a leader) the new server pings an
/// address it has no record of before offering it, finds it in use, and
/// offers it to nobody; without it, it hands the same address to the next
/// client: the hazard the check closes, shown in the same run.
#[test]
fn a_new_server_pings_before_offering_and_never_hands_out_an_address_in_use() {
    let lan = common::lan::Lan::new(&[Some("10.67.0.1/24"), None, None]);
    let (srv, holder, newcomer) = (&lan.hosts[0], &lan.hosts[1], &lan.hosts[2]);
    let tmp = tempfile::tempdir().unwrap();
    // One address in the pool: whoever gets it, gets the holder's.
    let config = |ping: bool| {
        let p = tmp.path().join(format!("config-{ping}.yaml"));
        std::fs::write(
            &p,
            format!(
                "dhcp:\n  interface: {}\n  pingCheck: {{enabled: {ping}, timeoutMs: 500}}\n  discovery: {{enabled: true, record: false, leaseTime: 3600}}\n  subnets:\n  - subnet: 10.67.0.0/24\n    ranges: [{{start: 10.67.0.100, end: 10.67.0.100}}]\n",
                srv.iface
            ),
        )
        .unwrap();
        p
    };
    // The first server leases the address to the holder, which puts it on
    // its interface (it answers pings from then on).
    let first = dhcp_serve::start(
        &srv.ns,
        &config(false),
        &tmp.path().join("data1"),
        &tmp.path().join("serve1.log"),
    );
    let got = dhcp_clients::udhcpc(&holder.ns.name, &holder.iface, tmp.path(), &[])
        .expect("the holder gets a lease");
    assert_eq!(got["ip"], "10.67.0.100");
    holder
        .ns
        .exec(&["ip", "addr", "add", "10.67.0.100/24", "dev", &holder.iface]);
    drop(first);

    // A new server with its own, empty, lease table and the ping check.
    let log2 = tmp.path().join("serve2.log");
    let second = dhcp_serve::start(&srv.ns, &config(true), &tmp.path().join("data2"), &log2);
    let dir2 = tmp.path().join("newcomer2");
    std::fs::create_dir_all(&dir2).unwrap();
    let got = dhcp_clients::udhcpc(&newcomer.ns.name, &newcomer.iface, &dir2, &[]);
    assert_eq!(got, None, "the address in use was offered again: {got:?}");
    let log = std::fs::read_to_string(&log2).unwrap();
    assert!(
        log.contains("answered a ping: quarantined, not offered"),
        "{log}"
    );
    drop(second);

    // The same without the check: the newcomer is handed the holder's address.
    let third = dhcp_serve::start(
        &srv.ns,
        &config(false),
        &tmp.path().join("data3"),
        &tmp.path().join("serve3.log"),
    );
    let dir3 = tmp.path().join("newcomer3");
    std::fs::create_dir_all(&dir3).unwrap();
    let got = dhcp_clients::udhcpc(&newcomer.ns.name, &newcomer.iface, &dir3, &[])
        .expect("without the check the address is offered");
    assert_eq!(
        got["ip"], "10.67.0.100",
        "both clients now hold 10.67.0.100"
    );
    drop(third);
}

#[test]
fn dhcpv6_leases_survive_kill_9_and_restart() {
    dhcpv6_kill_9_scenario("");
}

#[test]
fn dhcpv6_leases_survive_kill_9_with_lease_sync_always() {
    dhcpv6_kill_9_scenario("  leaseSync: {mode: always}\n");
}

/// Four clients fill a four-address pool, metalherd is killed and started
/// again on the same data directory: a newcomer gets no address, and each
/// holder's Renew gets its own address back.
fn dhcpv6_kill_9_scenario(extra: &str) {
    let link = Link6::new();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = tmp.path().join("config.yaml");
    std::fs::write(
        &cfg,
        format!(
            "dhcp6:\n{extra}  interface: {}\n  discovery: {{enabled: true, validLifetime: 3600}}\n  subnets:\n  - subnet: fd00:77::/64\n    ranges: [{{start: \"fd00:77::1:0\", end: \"fd00:77::1:3\"}}]\n",
            link.server_if
        ),
    )
    .unwrap();
    let bound = "dhcp6 server bound";
    let mut srv = dhcp_serve::start_until(
        &link.server,
        &cfg,
        &data,
        &tmp.path().join("serve1.log"),
        bound,
    );
    let duid = |n: u8| vec![0, 4, n, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
    let iface = link.client_if.clone();
    let held = dhcp_clients::in_netns(&link.client.name, move || {
        let s = dhcp6::socket(&iface, 546);
        let to = dhcp6::all_servers(&iface);
        (1..=4u8)
            .map(|n| {
                let sol = dhcp6::message(Firmware::Ipxe, 1, u32::from(n), &duid(n), 7, None, None);
                let adv = dhcp6::exchange(&s, &sol, to, Duration::from_secs(5)).expect("Advertise");
                let sid = adv.server_id.clone().expect("server id").0;
                let req = dhcp6::message(
                    Firmware::Ipxe,
                    3,
                    0x100 + u32::from(n),
                    &duid(n),
                    7,
                    dhcp6::leased(&adv),
                    Some(&sid),
                );
                let reply = dhcp6::exchange(&s, &req, to, Duration::from_secs(5)).expect("Reply");
                (n, dhcp6::leased(&reply).expect("an address"), sid)
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    let mut addrs: Vec<_> = held.iter().map(|h| h.1).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), 4, "four clients, four addresses");
    srv.kill9();

    let _srv = dhcp_serve::start_until(
        &link.server,
        &cfg,
        &data,
        &tmp.path().join("serve2.log"),
        bound,
    );
    let iface = link.client_if.clone();
    let (newcomer, renewed) = dhcp_clients::in_netns(&link.client.name, move || {
        let s = dhcp6::socket(&iface, 546);
        let to = dhcp6::all_servers(&iface);
        let sol = dhcp6::message(Firmware::Ipxe, 1, 0x99, &duid(9), 7, Some(held[0].1), None);
        let newcomer = dhcp6::exchange(&s, &sol, to, Duration::from_secs(5)).expect("Advertise");
        let renewed = held
            .iter()
            .map(|(n, a, sid)| {
                let renew = dhcp6::message(
                    Firmware::Ipxe,
                    5,
                    0x200 + u32::from(*n),
                    &duid(*n),
                    7,
                    Some(*a),
                    Some(sid),
                );
                let r = dhcp6::exchange(&s, &renew, to, Duration::from_secs(5)).expect("Reply");
                (*a, dhcp6::leased(&r))
            })
            .collect::<Vec<_>>();
        (newcomer, renewed)
    })
    .join()
    .unwrap();
    assert_eq!(
        dhcp6::leased(&newcomer),
        None,
        "the pool is still full after the restart"
    );
    for (a, got) in renewed {
        assert_eq!(got, Some(a), "the holder of {a} renews it");
    }
}
