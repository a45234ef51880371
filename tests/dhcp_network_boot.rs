//! Story: a server PXE-boots on the provisioning network and `metalherd
//! serve` answers its DHCP. A known Machine gets its reserved address and
//! the PXE options (and both steps land in its boot history); an unknown
//! server gets nothing with discovery off, and with discovery on a lease
//! from the pool and a DiscoveredMachine object. Real clients (busybox
//! udhcpc), the real binary, in network namespaces.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::dhcp_clients;
use common::dhcp_serve;
use common::netns::VethPair;
use common::proc::wait_for;
use metalherd::api::{DiscoveredMachine, Machine};

const MAC: &str = "52:54:00:12:34:56";
const STRANGER: &str = "52:54:00:aa:bb:cc";

fn machine_yaml() -> String {
    format!(
        "apiVersion: metalherd.dev/v1alpha1\nkind: Machine\nmetadata: {{name: rack1-u07, namespace: default}}\n\
         spec:\n  bmc: {{address: 'ipmi://127.0.0.1:623', credentialsSecretRef: {{name: bmc}}}}\n  bootMACAddress: '{MAC}'\n\
         \x20 network: {{address: 10.78.0.7/24, gateway: 10.78.0.1, dns: [10.78.0.53], hostname: rack1-u07}}\n"
    )
}

/// Items of a `get -o json` answer (a list, or one object).
fn items(v: &serde_json::Value) -> Vec<serde_json::Value> {
    match v.get("items").and_then(|i| i.as_array()) {
        Some(a) => a.clone(),
        None => vec![v.clone()],
    }
}

fn write_config(dir: &std::path::Path, iface: &str, discovery: bool) -> std::path::PathBuf {
    let p = dir.join(format!("config-{discovery}.yaml"));
    std::fs::write(
        &p,
        format!(
            "dhcp:\n  interface: {iface}\n  httpBootUrl: http://10.78.0.1:8080\n  discovery: {{enabled: {discovery}}}\n  subnets:\n  - subnet: 10.78.0.0/24\n    ranges: [{{start: 10.78.0.100, end: 10.78.0.150}}]\n    router: 10.78.0.1\n    dns: [10.78.0.1]\n"
        ),
    )
    .unwrap();
    p
}

const PXE: &[&str] = &[
    "-V",
    "PXEClient:Arch:00007:UNDI:003016",
    "-x",
    "0x5d:0007",
    "-O",
    "66",
    "-O",
    "67",
];

#[test]
fn known_machine_gets_reservation_unknown_only_with_discovery() {
    let pair = VethPair::new("10.78.0.1/24", None);
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let set_mac = |m: &str| {
        pair.client
            .exec(&["ip", "link", "set", "dev", &pair.client_if, "address", m]);
    };

    // Discovery off.
    let cfg = write_config(tmp.path(), &pair.server_if, false);
    let mut srv = dhcp_serve::start(&pair.server, &cfg, &data, &tmp.path().join("serve1.log"));
    dhcp_serve::apply(&pair.server, &data, &machine_yaml());
    set_mac(MAC);
    // The boot directory fills from the store right after start: retry briefly.
    let env = common::proc::wait_for(Duration::from_secs(20), || {
        dhcp_clients::udhcpc(&pair.client.name, &pair.client_if, tmp.path(), PXE)
    })
    .expect("the known Machine gets a lease");
    assert_eq!(env["ip"], "10.78.0.7", "{env:?}");
    assert_eq!(env["router"], "10.78.0.1");
    assert_eq!(env["dns"], "10.78.0.53");
    assert_eq!(env["hostname"], "rack1-u07");
    assert_eq!(env["siaddr"], "10.78.0.1");
    assert_eq!(env["boot_file"], "ipxe.efi");
    assert_eq!(env["bootfile"], "ipxe.efi");

    set_mac(STRANGER);
    assert!(
        dhcp_clients::udhcpc(&pair.client.name, &pair.client_if, tmp.path(), PXE).is_none(),
        "an unknown client gets nothing with discovery off"
    );

    // The Machine's boot history gets the DHCP steps (written off the packet path).
    let steps = wait_for(Duration::from_secs(20), || {
        let m: Machine = serde_json::from_value(dhcp_serve::get_json(
            &pair.server,
            &data,
            &["machine", "rack1-u07"],
        )?)
        .ok()?;
        let steps: Vec<String> = m
            .status?
            .boot_history
            .iter()
            .map(|e| e.step.to_string())
            .collect();
        (steps.contains(&"DHCPOffer".to_string()) && steps.contains(&"DHCPAck".to_string()))
            .then_some(steps)
    });
    assert!(steps.is_some(), "DHCPOffer and DHCPAck in the boot history");
    let none = dhcp_serve::get_json(&pair.server, &data, &["discovered"]).unwrap();
    assert!(
        items(&none).iter().all(|d| d.get("metadata").is_none()),
        "{none}"
    );
    srv.terminate(Duration::from_secs(10));

    // Discovery on.
    let cfg = write_config(tmp.path(), &pair.server_if, true);
    let mut srv = dhcp_serve::start(&pair.server, &cfg, &data, &tmp.path().join("serve2.log"));
    let env = dhcp_clients::udhcpc(&pair.client.name, &pair.client_if, tmp.path(), PXE)
        .expect("an unknown client gets a discovery lease");
    let ip: std::net::Ipv4Addr = env["ip"].parse().unwrap();
    assert!(
        (100..=150).contains(&ip.octets()[3]) && ip.octets()[..3] == [10, 78, 0],
        "{ip} from the pool"
    );
    assert_eq!(env["lease"], "600", "discovery lease time");
    // The DiscoveredMachine is written by a background task; `metalherd get
    // discovered` lists it.
    let d = wait_for(Duration::from_secs(20), || {
        let list = dhcp_serve::get_json(&pair.server, &data, &["discovered"])?;
        items(&list)
            .into_iter()
            .filter_map(|v| serde_json::from_value::<DiscoveredMachine>(v).ok())
            .find(|d| d.metadata.name.as_deref() == Some("mac-525400aabbcc"))
    })
    .expect("DiscoveredMachine listed by `metalherd get discovered`");
    assert_eq!(d.spec.mac_address, STRANGER);
    assert_eq!(d.spec.architecture.as_deref(), Some("efi-x86_64"));
    assert_eq!(
        d.spec.vendor_class.as_deref(),
        Some("PXEClient:Arch:00007:UNDI:003016")
    );
    let out = dhcp_serve::cli(&pair.server, &data, &["get", "discovered"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(STRANGER), "{table}");
    srv.terminate(Duration::from_secs(10));
}
