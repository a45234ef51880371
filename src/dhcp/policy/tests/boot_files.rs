//! Architectures the boot-file table holds nothing for: never an x86
//! binary; a known Machine gets its address without a boot file, and a
//! warning its owner sees.

use super::*;

fn arm64(mac: [u8; 6], t: u8) -> Vec<u8> {
    raw_request(
        mac,
        &[
            (53, std::slice::from_ref(&t)),
            (60, b"PXEClient:Arch:00011:UNDI:003016"),
            (93, &[0, 11]),
        ],
    )
}

#[test]
fn a_known_arm64_machine_gets_no_x86_binary_and_a_warning() {
    let p = policy("discovery: {enabled: true}\n");
    let mut l = LeaseTable::new();
    let out = p.handle(&arm64(KNOWN, 1), Via::Port67, &fake(), &mut l, 0);
    let offer = decode(out.reply.as_ref().expect("the reservation is offered"));
    assert_eq!(offer.yiaddr(), Ipv4Addr::new(10, 0, 0, 7));
    assert!(
        offer
            .fname_str()
            .is_none_or(|f| f.is_ok_and(|f| f.trim_end_matches('\0').is_empty())),
        "no boot file: {offer:?}"
    );
    assert!(offer.opts().get(OptionCode::BootfileName).is_none());
    let w = out.warning.expect("a warning for the known Machine");
    assert_eq!(
        (w.namespace.as_str(), w.name.as_str()),
        ("default", "rack1-u07")
    );
    assert_eq!(w.reason, "NoBootFile");
    assert!(w.message.contains("11 (arm64 UEFI)"), "{}", w.message);
    assert!(w.message.contains("dhcp.bootFiles"), "{}", w.message);

    // An unknown arm64 client: no Machine to warn about.
    let out = p.handle(&arm64(STRANGER, 1), Via::Port67, &fake(), &mut l, 0);
    assert!(out.warning.is_none());

    // The known Machine's x86-64 firmware is served as before, unwarned.
    let out = p.handle(&pxe(KNOWN, 1, &[]), Via::Port67, &fake(), &mut l, 0);
    assert!(out.reply.is_some());
    assert!(out.warning.is_none());
}

#[test]
fn a_site_binary_for_arm64_is_served_without_a_warning() {
    let p = policy("bootFiles: {11: ipxe-arm64.efi}\n");
    let mut l = LeaseTable::new();
    let out = p.handle(&arm64(KNOWN, 1), Via::Port67, &fake(), &mut l, 0);
    let reply = decode(out.reply.as_ref().expect("an offer"));
    assert!(
        reply
            .fname_str()
            .is_some_and(|f| f.is_ok_and(|f| f.contains("ipxe-arm64.efi"))),
        "{reply:?}"
    );
    assert!(out.warning.is_none());
}
