//! Boot-options-only mode: offers without an address, port 4011.

use super::*;

#[test]
fn proxy_offers_boot_options_without_an_ia_and_answers_port_4011() {
    let p = policy("mode: proxy\n");
    assert_eq!(p.cfg.preference, None);
    let mut t = LeaseTable6::new();
    let o = run(&p, &ovmf_pxe(1, &[]), KNOWN, &mut t, 1);
    let m = read(&o);
    assert!(m.ia_na.is_empty(), "no IA_NA, no status: a ProxyBinl offer");
    assert_eq!(m.status, None);
    assert_eq!(m.preference, None);
    assert_eq!(m.vendor_class, Some((343, vec![b"PXEClient".to_vec()])));
    assert_eq!(m.boot_url.as_deref(), Some("tftp://[fd00:89::1]/ipxe.efi"));
    assert!(t.is_empty());
    // EDK2's Request to port 4011 with our Server ID.
    let o = p.handle(
        &ovmf_pxe(3, &[sid()]),
        Via6::Port4011,
        link_local(KNOWN),
        &fake(),
        &mut t,
        2,
    );
    let r = o.reply.as_ref().unwrap();
    assert_eq!((r.to, r.msg_type), (Dest6::Source, MessageType::Reply));
    assert_eq!(
        read(&o).boot_url.as_deref(),
        Some("tftp://[fd00:89::1]/ipxe.efi")
    );
    // The Request to the site's server is not ours.
    let other = (opt::SERVERID, Duid::link_layer([2, 0, 0, 0, 0, 2]).0);
    let o = run(&p, &ovmf_pxe(3, &[other]), KNOWN, &mut t, 2);
    assert_eq!(o.dropped, Some(Skip6::OtherServer));
    // HTTP boot: HTTPClient echo; plain clients and iPXE Solicits: nothing.
    let m = read(&run(&p, &ovmf_http(), KNOWN, &mut t, 3));
    assert_eq!(m.vendor_class, Some((343, vec![b"HTTPClient".to_vec()])));
    assert!(m.ia_na.is_empty());
    let o = run(&p, &perfdhcp(KNOWN, 1), KNOWN, &mut t, 3);
    assert_eq!(o.dropped, Some(Skip6::NotBootClient));
    let o = run(&p, &ipxe(1, &[]), KNOWN, &mut t, 3);
    assert_eq!(o.dropped, Some(Skip6::Unhandled));
    let o = run(&p, &ovmf_pxe(1, &[]), STRANGER, &mut t, 3);
    assert_eq!(o.dropped, Some(Skip6::UnknownClient));
}
