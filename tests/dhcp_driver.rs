//! The DHCP driver in-process (a thread inside the server namespace), with
//! the boot directory filled directly, against real clients: busybox udhcpc
//! and crafted PXE requests. Proves the sockets (SO_BINDTODEVICE, broadcast
//! replies) and the policy together without the rest of `metalherd serve`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use dhcproto::v4::MessageType;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use common::dhcp_clients::{self, Req};
use common::netns::VethPair;
use metalherd::api::Machine;
use metalherd::dhcp::server::BoundServer;
use metalherd::dhcp::{DhcpConfig, DhcpSettings};
use metalherd::directory::{BootRecorder, Directory};
use metalherd::store::memory::MemoryStore;
use metalherd::store::{ListOptions, Store, TypedStore};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const MAC: &str = "52:54:00:12:34:56";

fn machine() -> Machine {
    serde_yaml::from_str(&format!(
        "apiVersion: metalherd.dev/v1alpha1\nkind: Machine\nmetadata: {{name: rack1-u07, namespace: default}}\n\
         spec:\n  bmc: {{address: 'ipmi://127.0.0.1:623', credentialsSecretRef: {{name: bmc}}}}\n  bootMACAddress: '{MAC}'\n\
         \x20 network: {{address: 10.77.0.7/24, gateway: 10.77.0.1, dns: [10.77.0.53], hostname: rack1-u07, domain: lab.test}}\n"
    ))
    .unwrap()
}

struct Server {
    cancel: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(ns: &str, yaml: &str, directory: Directory, data_dir: &Path) -> Server {
    serve_recording(ns, yaml, directory, data_dir, None)
}

/// As [`serve`], recording boot steps and warnings into `store` when given.
fn serve_recording(
    ns: &str,
    yaml: &str,
    directory: Directory,
    data_dir: &Path,
    store: Option<Arc<dyn Store>>,
) -> Server {
    let c: DhcpConfig = serde_yaml::from_str(yaml).unwrap();
    let settings = DhcpSettings::try_from(c).unwrap();
    let cancel = CancellationToken::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let (c2, dir) = (cancel.clone(), data_dir.to_path_buf());
    let thread = dhcp_clients::in_netns(ns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let bound = BoundServer::bind(settings, &dir).await;
            let bound = match bound {
                Ok(b) => {
                    tx.send(Ok(())).unwrap();
                    b
                }
                Err(e) => {
                    tx.send(Err(e.to_string())).unwrap();
                    return;
                }
            };
            let recorder = match store {
                Some(s) => BootRecorder::spawn(s, c2.clone()),
                None => BootRecorder::discard(),
            };
            bound
                .serve(
                    directory,
                    // Discovery recording off: no store is needed.
                    None,
                    recorder,
                    Default::default(),
                    c2,
                )
                .await
                .unwrap();
        });
    });
    rx.recv().unwrap().expect("dhcp server binds");
    Server {
        cancel,
        thread: Some(thread),
    }
}

fn config(iface: &str, extra: &str) -> String {
    format!(
        "interface: {iface}\nhttpBootUrl: http://10.77.0.1:8080\nsubnets:\n- subnet: 10.77.0.0/24\n  ranges: [{{start: 10.77.0.100, end: 10.77.0.150}}]\n  router: 10.77.0.1\n  dns: [10.77.0.1]\n{extra}"
    )
}

#[test]
fn udhcpc_gets_its_reserved_address_and_pxe_options() {
    let pair = VethPair::new("10.77.0.1/24", None);
    pair.client
        .exec(&["ip", "link", "set", "dev", &pair.client_if, "address", MAC]);
    let dir = tempfile::tempdir().unwrap();
    let directory = Directory::new();
    directory.upsert(&machine());
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, ""),
        directory,
        dir.path(),
    );

    let env = dhcp_clients::udhcpc(
        &pair.client.name,
        &pair.client_if,
        dir.path(),
        &[
            "-V",
            "PXEClient:Arch:00007:UNDI:003016",
            "-x",
            "0x5d:0007",
            "-O",
            "66",
            "-O",
            "67",
        ],
    )
    .expect("udhcpc got a lease");
    assert_eq!(
        env.get("ip").map(String::as_str),
        Some("10.77.0.7"),
        "{env:?}"
    );
    assert_eq!(env.get("router").map(String::as_str), Some("10.77.0.1"));
    assert_eq!(env.get("dns").map(String::as_str), Some("10.77.0.53"));
    assert_eq!(env.get("hostname").map(String::as_str), Some("rack1-u07"));
    assert_eq!(env.get("domain").map(String::as_str), Some("lab.test"));
    assert_eq!(env.get("siaddr").map(String::as_str), Some("10.77.0.1"));
    assert_eq!(env.get("boot_file").map(String::as_str), Some("ipxe.efi"));
    assert_eq!(env.get("bootfile").map(String::as_str), Some("ipxe.efi"));
    assert_eq!(env.get("serverid").map(String::as_str), Some("10.77.0.1"));
}

#[test]
fn crafted_pxe_client_unknown_gets_nothing_without_discovery() {
    let pair = VethPair::new("10.77.0.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, ""),
        Directory::new(),
        dir.path(),
    );
    let iface = pair.client_if.clone();
    let got = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        let req = Req::new(1, [2, 0, 0, 0, 0, 0x42]).pxe(0);
        dhcp_clients::exchange(
            &s,
            &req,
            SocketAddr::from((Ipv4Addr::BROADCAST, 67)),
            Duration::from_secs(3),
        )
    })
    .join()
    .unwrap();
    assert!(got.is_none(), "an unknown client must get no reply");
}

#[test]
fn relayed_request_is_answered_to_the_relay_with_option_82() {
    let pair = VethPair::new("10.77.0.1/24", Some("10.77.0.2/24"));
    // The relay's address on the remote subnet, and the server's route to it.
    pair.client
        .exec(&["ip", "addr", "add", "10.88.0.1/24", "dev", &pair.client_if]);
    pair.server
        .exec(&["ip", "route", "add", "10.88.0.0/24", "via", "10.77.0.2"]);
    let dir = tempfile::tempdir().unwrap();
    let directory = Directory::new();
    let mut m = machine();
    m.metadata.name = Some("remote-1".into());
    m.spec.boot_mac_address = Some("52:54:00:00:88:01".into());
    let net = m.spec.network.as_mut().unwrap();
    net.address = Some("10.88.0.20/24".into());
    net.gateway = Some("10.88.0.1".into());
    directory.upsert(&m);
    let extra = "- subnet: 10.88.0.0/24\n  ranges: [{start: 10.88.0.100, end: 10.88.0.150}]\n  router: 10.88.0.1\n  relays: [10.88.0.1]\n";
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, extra),
        directory,
        dir.path(),
    );

    let iface = pair.client_if.clone();
    let (offer, ack) = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::new(10, 88, 0, 1), 67);
        let agent = [1, 4, b'e', b't', b'h', b'7', 2, 3, 0xaa, 0xbb, 0xcc];
        let mut req = Req::new(1, [0x52, 0x54, 0, 0, 0x88, 1])
            .pxe(7)
            .opt(82, &agent);
        req.giaddr = Ipv4Addr::new(10, 88, 0, 1);
        req.hops = 1;
        req.broadcast = false;
        let server = SocketAddr::from((Ipv4Addr::new(10, 77, 0, 1), 67));
        let offer = dhcp_clients::exchange(&s, &req, server, Duration::from_secs(3));
        req.msg_type = 3;
        req.opts.push((50, vec![10, 88, 0, 20]));
        req.opts.push((54, vec![10, 77, 0, 1]));
        let ack = dhcp_clients::exchange(&s, &req, server, Duration::from_secs(3));
        // The same request claiming another relay on that subnet: the
        // config does not list it, so nothing is answered.
        req.giaddr = Ipv4Addr::new(10, 88, 0, 9);
        let unlisted = dhcp_clients::exchange(&s, &req, server, Duration::from_secs(2));
        assert!(unlisted.is_none(), "an unlisted relay was answered");
        (offer, ack)
    })
    .join()
    .unwrap();
    let agent = vec![1, 4, b'e', b't', b'h', b'7', 2, 3, 0xaa, 0xbb, 0xcc];
    for (what, r) in [("offer", offer), ("ack", ack)] {
        let (m, raw, from) = r.unwrap_or_else(|| panic!("relay got no {what}"));
        assert_eq!(from, SocketAddr::from((Ipv4Addr::new(10, 77, 0, 1), 67)));
        assert_eq!(
            m.yiaddr(),
            Ipv4Addr::new(10, 88, 0, 20),
            "{what}: subnet chosen by giaddr"
        );
        assert_eq!(m.giaddr(), Ipv4Addr::new(10, 88, 0, 1));
        assert_eq!(
            dhcp_clients::raw_option(&raw, 82),
            Some(agent.clone()),
            "{what}: option 82 echoed"
        );
        assert_eq!(dhcp_clients::boot_file(&m).as_deref(), Some("ipxe.efi"));
    }
}

#[test]
fn proxy_dhcp_next_to_dnsmasq_gives_boot_file_not_address() {
    let dnsmasq = common::require_tool("dnsmasq");
    let lan = common::lan::Lan::new(&[Some("10.77.0.1/24"), Some("10.77.0.2/24"), None]);
    let (mh, site, client) = (&lan.hosts[0], &lan.hosts[1], &lan.hosts[2]);
    client
        .ns
        .exec(&["ip", "link", "set", "dev", &client.iface, "address", MAC]);
    let dir = tempfile::tempdir().unwrap();
    let _site = common::proc::ChildGuard::spawn(
        "dnsmasq",
        site.ns.command(dnsmasq.to_str().unwrap()).args([
            "--no-daemon",
            "--port=0",
            "--no-resolv",
            "--no-hosts",
            "--log-dhcp",
            &format!("--interface={}", site.iface),
            "--bind-interfaces",
            "--dhcp-range=10.77.0.50,10.77.0.60,255.255.255.0,1h",
            &format!(
                "--dhcp-leasefile={}",
                dir.path().join("dnsmasq.leases").display()
            ),
            &format!("--pid-file={}", dir.path().join("dnsmasq.pid").display()),
        ]),
        &dir.path().join("dnsmasq.log"),
    );
    let directory = Directory::new();
    directory.upsert(&machine());
    let yaml = format!(
        "interface: {}\nmode: proxy\nhttpBootUrl: http://10.77.0.1:8080\n",
        mh.iface
    );
    let _srv = serve(&mh.ns.name, &yaml, directory, dir.path());
    // dnsmasq is up when it answers; retry the whole exchange until then.
    let iface = client.iface.clone();
    let cns = client.ns.name.clone();
    let (offers, ack, proxy_ack) = dhcp_clients::in_netns(&client.ns.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
        let bcast = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
        let mut offers = Vec::new();
        for _ in 0..10 {
            offers =
                dhcp_clients::collect(&s, &Req::new(1, mac).pxe(7), bcast, Duration::from_secs(1));
            if offers.iter().any(|(m, _, _)| !m.yiaddr().is_unspecified()) {
                break;
            }
        }
        let site = offers
            .iter()
            .find(|(m, _, _)| !m.yiaddr().is_unspecified())
            .map(|(m, _, _)| (m.yiaddr(), dhcp_clients::server_id(m).unwrap()))
            .expect("an address offer from the site DHCP server");
        let mut req = Req::new(3, mac).pxe(7);
        req.opts.push((50, site.0.octets().to_vec()));
        req.opts.push((54, site.1.octets().to_vec()));
        let ack = dhcp_clients::exchange(&s, &req, bcast, Duration::from_secs(3));
        // Configure the address, then ask the proxy on port 4011 (PXE step 2).
        let out = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &cns,
                "ip",
                "addr",
                "add",
                &format!("{}/24", site.0),
                "dev",
                &iface,
            ])
            .status()
            .unwrap();
        assert!(out.success());
        // A transaction of its own: dnsmasq may still answer a resent
        // REQUEST of the first one, and that late ACK carries its xid.
        let mut req = Req::new(3, mac).pxe(7);
        req.xid ^= 1;
        req.ciaddr = site.0;
        req.broadcast = false;
        let proxy_ack = dhcp_clients::exchange(
            &s,
            &req,
            SocketAddr::from((Ipv4Addr::new(10, 77, 0, 1), 4011)),
            Duration::from_secs(3),
        );
        (offers, ack, proxy_ack)
    })
    .join()
    .unwrap();

    let site_offer = offers
        .iter()
        .find(|(m, _, _)| dhcp_clients::server_id(m) == Some(Ipv4Addr::new(10, 77, 0, 2)))
        .expect("offer from dnsmasq");
    assert!(
        dhcp_clients::boot_file(&site_offer.0).is_none(),
        "dnsmasq gives no boot file here"
    );
    let proxy = offers
        .iter()
        .find(|(m, _, _)| dhcp_clients::server_id(m) == Some(Ipv4Addr::new(10, 77, 0, 1)))
        .expect("proxy offer from metalherd");
    assert_eq!(
        proxy.0.yiaddr(),
        Ipv4Addr::UNSPECIFIED,
        "proxyDHCP never gives an address"
    );
    assert_eq!(
        dhcp_clients::boot_file(&proxy.0).as_deref(),
        Some("ipxe.efi")
    );
    assert_eq!(
        dhcp_clients::raw_option(&proxy.1, 60),
        Some(b"PXEClient".to_vec())
    );
    let (ack, _, _) = ack.expect("ACK from dnsmasq");
    assert_eq!(
        dhcp_clients::server_id(&ack),
        Some(Ipv4Addr::new(10, 77, 0, 2))
    );
    let (pa, _, from) = proxy_ack.expect("ACK from metalherd on port 4011");
    assert_eq!(from, SocketAddr::from((Ipv4Addr::new(10, 77, 0, 1), 4011)));
    assert_eq!(pa.yiaddr(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(dhcp_clients::boot_file(&pa).as_deref(), Some("ipxe.efi"));
}

#[test]
fn request_for_a_never_offered_free_address_is_naked_and_not_bound() {
    let pair = VethPair::new("10.77.0.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let _srv = serve(
        &pair.server.name,
        &config(&pair.server_if, "discovery: {enabled: true}\n"),
        Directory::new(),
        dir.path(),
    );
    let iface = pair.client_if.clone();
    let (steer, offer) = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        let to = SocketAddr::from((Ipv4Addr::BROADCAST, 67));
        let mac = [2, 0, 0, 0, 0, 0x43];
        // A new client asks for a free pool address of its choosing, with
        // no server identifier, never having been offered it.
        let req = Req::new(3, mac).pxe(0).opt(50, &[10, 77, 0, 140]);
        let steer = dhcp_clients::exchange(&s, &req, to, Duration::from_secs(3));
        // The address stayed free: the same client's DISCOVER is offered
        // whatever the server picks, and another client can still get 140.
        let mut other = Req::new(1, [2, 0, 0, 0, 0, 0x44])
            .pxe(0)
            .opt(50, &[10, 77, 0, 140]);
        other.xid ^= 0x0101_0101;
        let offer = dhcp_clients::exchange(&s, &other, to, Duration::from_secs(3));
        (steer, offer)
    })
    .join()
    .unwrap();
    let (m, _, _) = steer.expect("the server answers the steering REQUEST");
    assert_eq!(m.opts().msg_type(), Some(MessageType::Nak));
    let (m, _, _) = offer.expect("another client is offered");
    assert_eq!(m.opts().msg_type(), Some(MessageType::Offer));
    assert_eq!(
        m.yiaddr(),
        Ipv4Addr::new(10, 77, 0, 140),
        "the steered address was not bound"
    );
}

#[test]
fn an_arm64_machine_gets_no_x86_binary_and_its_owner_a_warning() {
    let pair = VethPair::new("10.77.0.1/24", None);
    let dir = tempfile::tempdir().unwrap();
    let directory = Directory::new();
    directory.upsert(&machine());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(store.create_obj(&machine())).unwrap();
    let _srv = serve_recording(
        &pair.server.name,
        &config(&pair.server_if, ""),
        directory,
        dir.path(),
        Some(store.clone()),
    );
    let iface = pair.client_if.clone();
    let mac = MAC.parse::<metalherd::api::MacAddr>().unwrap().0;
    let got = dhcp_clients::in_netns(&pair.client.name, move || {
        let s = dhcp_clients::bound_socket(&iface, Ipv4Addr::UNSPECIFIED, 68);
        // arm64 UEFI firmware (architecture 11): the built-in table has
        // only x86 binaries.
        let req = Req::new(1, mac).pxe(11);
        dhcp_clients::exchange(
            &s,
            &req,
            SocketAddr::from((Ipv4Addr::BROADCAST, 67)),
            Duration::from_secs(3),
        )
    })
    .join()
    .unwrap();
    let (offer, _, _) = got.expect("the reservation is offered");
    assert_eq!(offer.yiaddr(), Ipv4Addr::new(10, 77, 0, 7));
    assert_eq!(dhcp_clients::boot_file(&offer), None, "never an x86 binary");
    let events = rt.block_on(async {
        for _ in 0..50 {
            let evs = store
                .list_obj::<metalherd::api::Event>(&ListOptions::default())
                .await
                .unwrap();
            if !evs.is_empty() {
                return evs;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Vec::new()
    });
    assert_eq!(events.len(), 1, "one Warning event: {events:?}");
    let e = &events[0];
    assert_eq!(
        (e.type_.as_str(), e.reason.as_str()),
        ("Warning", "NoBootFile")
    );
    assert_eq!(e.involved_object.name, "rack1-u07");
    assert!(e.message.contains("arm64"), "{}", e.message);
}
