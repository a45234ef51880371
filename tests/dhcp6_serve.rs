//! Story: on an IPv6-only provisioning network, `metalherd serve` with a
//! `dhcp6:` section leases addresses over DHCPv6 and tells each kind of
//! boot client where to boot from. Real clients (ISC `dhclient -6`,
//! `perfdhcp -6`) get leases; a client built on metalherd's codec sends
//! exactly what OVMF PXE, OVMF HTTP boot and iPXE send and checks the
//! options they need (a reserved address by MAC from the link-local
//! source, Boot File URL in Advertise and Reply, Vendor Class echo for HTTP
//! boot, none for PXE beside an address, Preference 255). In boot-options
//! -only mode, PXE gets an offer without an address and its port-4011
//! Request is answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::{Ipv6Addr, SocketAddrV6};
use std::path::Path;
use std::time::Duration;

use common::dhcp_clients::in_netns;
use common::dhcp_serve;
use common::dhcp6::{self, Firmware, Link6};
use common::proc::{ChildGuard, wait_for};

const RESERVED: &str = "fd00:77::7";
const DUID_UUID: [u8; 18] = [0, 4, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6];

fn machine(mac: [u8; 6]) -> String {
    let mac = metalherd::api::MacAddr(mac);
    format!(
        "apiVersion: metalherd.dev/v1alpha1\nkind: Machine\nmetadata: {{name: rack1-u07, namespace: default}}\n\
         spec:\n  bmc: {{address: 'ipmi://127.0.0.1:623', credentialsSecretRef: {{name: bmc}}}}\n  bootMACAddress: '{mac}'\n\
         \x20 network: {{address: '{RESERVED}/64', hostname: rack1-u07}}\n"
    )
}

fn serve(link: &Link6, dir: &Path, extra: &str) -> ChildGuard {
    let cfg = dir.join("config.yaml");
    std::fs::write(
        &cfg,
        format!(
            "dhcp6:\n  interface: {}\n  httpBootUrl: \"http://[{}]:8080\"\n{extra}  subnets:\n  - subnet: fd00:77::/64\n    ranges: [{{start: \"fd00:77::1:0\", end: \"fd00:77::1:ffff\"}}]\n    dns: [\"fd00:77::1\"]\n",
            link.server_if,
            dhcp6::SERVER_ADDR
        ),
    )
    .unwrap();
    let data = dir.join("data");
    let g = dhcp_serve::start_until(
        &link.server,
        &cfg,
        &data,
        &dir.join("serve.log"),
        "dhcp6 server bound",
    );
    dhcp_serve::apply(&link.server, &data, &machine(link.client_mac));
    g
}

/// Solicit then Request as `fw` would, from the client namespace; the
/// Advertise and the Reply.
fn solicit_request(link: &Link6, fw: Firmware, iaid: u32) -> (dhcp6::Msg6, Option<dhcp6::Msg6>) {
    let iface = link.client_if.clone();
    in_netns(&link.client.name, move || {
        let s = dhcp6::socket(&iface, 546);
        let to = dhcp6::all_servers(&iface);
        let sol = dhcp6::message(
            fw,
            1,
            0x10_0000 | iaid & 0xffff,
            &DUID_UUID,
            iaid,
            None,
            None,
        );
        let adv = dhcp6::exchange(&s, &sol, to, Duration::from_secs(5)).expect("an Advertise");
        let req = dhcp6::message(
            fw,
            3,
            0x20_0000 | iaid & 0xffff,
            &DUID_UUID,
            iaid,
            dhcp6::leased(&adv),
            adv.server_id.as_ref().map(|d| d.0.as_slice()),
        );
        let reply = dhcp6::exchange(&s, &req, to, Duration::from_secs(5));
        (adv, reply)
    })
    .join()
    .unwrap()
}

#[test]
fn firmware_ipxe_dhclient_and_perfdhcp_get_dhcpv6_leases_and_boot_urls() {
    let link = Link6::new();
    let tmp = tempfile::tempdir().unwrap();
    let _srv = serve(&link, tmp.path(), "  discovery: {enabled: true}\n");
    let reserved: Ipv6Addr = RESERVED.parse().unwrap();

    // OVMF PXE: the Machine is found by the MAC in its EUI-64 link-local
    // source (its DUID-UUID has none) once the directory has it.
    let (adv, reply) = wait_for(Duration::from_secs(20), || {
        let (adv, reply) = solicit_request(&link, Firmware::OvmfPxe, 0x1234_5678);
        (dhcp6::leased(&adv) == Some(reserved)).then_some((adv, reply))
    })
    .expect("OVMF PXE is offered the Machine's reserved address");
    assert_eq!(adv.preference, Some(255));
    assert_eq!(
        adv.boot_url.as_deref(),
        Some("tftp://[fd00:77::1]/ipxe.efi")
    );
    assert_eq!(adv.vendor_class, None, "no PXEClient beside an address");
    assert_eq!(adv.dns, vec!["fd00:77::1".parse::<Ipv6Addr>().unwrap()]);
    let reply = reply.expect("a Reply to the Request");
    assert_eq!(
        dhcp6::leased(&reply),
        Some(reserved),
        "the Reply carries the IAADDR"
    );
    assert_eq!(
        reply.boot_url.as_deref(),
        Some("tftp://[fd00:77::1]/ipxe.efi"),
        "59 in the Reply"
    );

    // OVMF HTTP boot: an http:// URL and the HTTPClient echo.
    let (adv, reply) = solicit_request(&link, Firmware::OvmfHttp, 0x0bad_cafe);
    assert_eq!(
        adv.boot_url.as_deref(),
        Some("http://[fd00:77::1]:8080/assets/ipxe.efi")
    );
    assert_eq!(adv.vendor_class, Some((343, vec![b"HTTPClient".to_vec()])));
    assert_eq!(dhcp6::leased(&reply.unwrap()), Some(reserved));

    // iPXE: its script, by MAC.
    let (adv, reply) = solicit_request(&link, Firmware::Ipxe, 0x4242_4242);
    let mac = metalherd::api::MacAddr(link.client_mac).to_string();
    assert_eq!(
        adv.boot_url,
        Some(format!(
            "http://[fd00:77::1]:8080/boot.ipxe?mac={mac}&arch=7"
        ))
    );
    assert_eq!(dhcp6::leased(&reply.unwrap()), Some(reserved));

    // ISC dhclient -6 on the same NIC (DUID-LLT with its MAC): the
    // Machine's address.
    let env =
        dhcp6::dhclient6(&link.client, &link.client_if, tmp.path(), "").unwrap_or_else(|| {
            panic!(
                "dhclient -6 got no lease: {}",
                std::fs::read_to_string(tmp.path().join("dh6.log")).unwrap_or_default()
            )
        });
    assert_eq!(
        env.get("new_ip6_address").map(String::as_str),
        Some(RESERVED),
        "{env:?}"
    );

    // perfdhcp -6: an unknown client (discovery on) gets a pool address.
    let (leases, out) = dhcp6::perfdhcp6(&link.client, &link.client_if, "00:0c:01:00:00:00");
    assert!(
        !leases.is_empty(),
        "perfdhcp -6 completed an exchange: {out}"
    );
    let range = u128::from("fd00:77::1:0".parse::<Ipv6Addr>().unwrap())
        ..=u128::from("fd00:77::1:ffff".parse::<Ipv6Addr>().unwrap());
    assert!(
        leases.iter().all(|a| range.contains(&u128::from(*a))),
        "leases from the pool: {out}"
    );
}

#[test]
fn boot_options_only_mode_offers_no_address_and_answers_port_4011() {
    let link = Link6::new();
    let tmp = tempfile::tempdir().unwrap();
    let _srv = serve(&link, tmp.path(), "  mode: proxy\n");
    // The route an RA's on-link prefix gives the firmware.
    link.client.exec(&[
        "ip",
        "-6",
        "route",
        "add",
        "fd00:77::/64",
        "dev",
        &link.client_if,
    ]);
    let iface = link.client_if.clone();
    let (adv, reply) = wait_for(Duration::from_secs(20), || {
        let iface = iface.clone();
        in_netns(&link.client.name, move || {
            let s = dhcp6::socket(&iface, 546);
            let sol = dhcp6::message(Firmware::OvmfPxe, 1, 0x31, &DUID_UUID, 9, None, None);
            let adv =
                dhcp6::exchange(&s, &sol, dhcp6::all_servers(&iface), Duration::from_secs(3))?;
            // EDK2's boot-service Request: from port 4011 to the URL's
            // server on 4011, with our Server ID and no IA.
            let s4011 = dhcp6::socket(&iface, 4011);
            let req = dhcp6::without_ia(&dhcp6::message(
                Firmware::OvmfPxe,
                3,
                0x32,
                &DUID_UUID,
                9,
                None,
                adv.server_id.as_ref().map(|d| d.0.as_slice()),
            ));
            let to = SocketAddrV6::new(dhcp6::SERVER_ADDR.parse().unwrap(), 4011, 0, 0);
            Some((
                adv,
                dhcp6::exchange(&s4011, &req, to, Duration::from_secs(3)),
            ))
        })
        .join()
        .unwrap()
    })
    .expect("a proxy Advertise once the Machine is known");
    assert!(adv.ia_na.is_empty(), "no address in boot-options-only mode");
    assert_eq!(
        adv.status, None,
        "no status code (EDK2 drops offers with one)"
    );
    assert_eq!(adv.preference, None);
    assert_eq!(adv.vendor_class, Some((343, vec![b"PXEClient".to_vec()])));
    assert_eq!(
        adv.boot_url.as_deref(),
        Some("tftp://[fd00:77::1]/ipxe.efi")
    );
    let reply = reply.expect("the port-4011 Request is answered");
    assert_eq!(
        reply.boot_url.as_deref(),
        Some("tftp://[fd00:77::1]/ipxe.efi")
    );
}
