//! Hostile input: malformed messages are counted drops; any bytes give a
//! reply that reads or a drop, never a panic.

use proptest::prelude::*;

use super::*;

#[test]
fn malformed_messages_are_counted_drops() {
    let p = policy("discovery: {enabled: true}\n");
    let mut t = LeaseTable6::new();
    let cases: [(&[u8], &str); 5] = [
        (&[], "truncated"),
        (&[2, 0, 0, 1], "not_from_client"),
        (&[1, 0, 0, 1, 0, 1, 0, 9, 1], "truncated"),
        (&[1, 0, 0, 1], "no_client_id"),
        (&[99, 0, 0, 0], "unknown_type"),
    ];
    for (b, label) in cases {
        let o = run(&p, b, STRANGER, &mut t, 1);
        assert_eq!(o.dropped.map(Skip6::label), Some(label), "{b:?}");
        assert!(o.reply.is_none());
    }
    let o = run(&p, &vec![1u8; 4000], STRANGER, &mut t, 1);
    assert_eq!(o.dropped.map(Skip6::label), Some("oversized"));
}

#[test]
fn many_identity_associations_are_a_drop_not_a_huge_answer() {
    let p = policy("discovery: {enabled: true}\n");
    let mut t = LeaseTable6::new();
    let mut o = vec![(opt::CLIENTID, DUID_UUID.to_vec())];
    for i in 0..=MAX_IAS as u32 {
        o.push((opt::IA_NA, ia(i, None)));
    }
    let out = run(&p, &msg(1, &o), STRANGER, &mut t, 1);
    assert_eq!(out.dropped, Some(Skip6::TooManyIas));
    o.truncate(MAX_IAS + 1);
    let out = run(&p, &msg(1, &o), STRANGER, &mut t, 1);
    assert_eq!(read(&out).ia_na.len(), MAX_IAS);
}

proptest! {
    #[test]
    fn any_bytes_give_a_reply_that_reads_or_a_drop(
        b in proptest::collection::vec(any::<u8>(), 0..600),
        mode in prop_oneof![Just(""), Just("mode: proxy\n"), Just("discovery: {enabled: true}\n")],
        via in prop_oneof![Just(Via6::Port547), Just(Via6::Port4011)],
    ) {
        let p = policy(mode);
        let mut t = LeaseTable6::new();
        let o = p.handle(&b, via, link_local(KNOWN), &fake(), &mut t, 1);
        match &o.reply {
            Some(r) if r.to == Dest6::Relay => prop_assert_eq!(r.bytes[0], 13),
            Some(r) => prop_assert!(Msg::decode(&r.bytes).is_ok()),
            None => prop_assert!(o.dropped.is_some()),
        }
    }

    #[test]
    fn mutated_firmware_messages_never_panic(
        which in 0usize..4,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut b = [ovmf_pxe(1, &[]), ovmf_http(), ipxe(3, &[sid()]), edk2_stack()][which].clone();
        let i = at.index(b.len());
        b[i] = byte;
        let p = policy("discovery: {enabled: true}\n");
        let mut t = LeaseTable6::new();
        let o = p.handle(&b, Via6::Port547, link_local(KNOWN), &fake(), &mut t, 1);
        prop_assert!(o.reply.is_some() || o.dropped.is_some());
    }
}
