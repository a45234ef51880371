//! The handshake and session state machines fed good, stray, truncated,
//! corrupted and replayed packets.

use super::*;

#[test]
fn handshake_completes_for_both_suites() {
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let s = established(suite);
        assert_eq!(s.managed_sid(), MANAGED_SID);
        assert_eq!(s.suite(), suite);
    }
}

#[test]
fn handshake_open_request_proposes_the_suite() {
    let mut hs = handshake(CipherSuite::Suite17, PASSWORD);
    let open = sent(hs.on_packet(&auth_caps_reply()));
    let p = wire::decode(&open, None).expect("decode");
    assert_eq!(p.payload_type, payload::OPEN_SESSION_REQUEST);
    assert_eq!((p.payload[12], p.payload[20], p.payload[28]), (3, 4, 1));
}

#[test]
fn wrong_password_is_an_auth_code_mismatch_and_a_good_rakp2_still_counts() {
    let suite = CipherSuite::Suite17;
    let mut hs = handshake(suite, PASSWORD);
    sent(hs.on_packet(&auth_caps_reply()));
    sent(hs.on_packet(&open_reply(suite, 9, 0)));
    let err = hs
        .on_packet(&rakp2(suite, 9, b"other"))
        .expect_err("mismatch");
    assert_eq!(err, IpmiError::AuthCodeMismatch);
    assert!(matches!(
        err.into_bmc_error("x"),
        crate::bmc::BmcError::BadCredentials { .. }
    ));
    // A forged RAKP 2 does not end the exchange: the genuine one completes it.
    sent(hs.on_packet(&rakp2(suite, 9, PASSWORD)));
}

#[test]
fn handshake_stray_and_bad_packets_are_typed_errors() {
    let suite = CipherSuite::Suite3;
    let mut hs = handshake(suite, PASSWORD);
    // A RAKP 2 before Open Session: stray, state unchanged.
    let e = hs.on_packet(&rakp2(suite, 9, PASSWORD)).expect_err("stray");
    assert!(e.is_stray(), "{e}");
    sent(hs.on_packet(&auth_caps_reply()));
    // Another console's tag: stray.
    let e = hs.on_packet(&open_reply(suite, 8, 0)).expect_err("tag");
    assert_eq!(
        e,
        IpmiError::WrongTag {
            expected: 9,
            got: 8
        }
    );
    // Truncated and not-RMCP datagrams.
    let good = open_reply(suite, 9, 0);
    let e = hs.on_packet(&good[..20]).expect_err("truncated");
    assert!(matches!(e, IpmiError::Truncated { .. }), "{e}");
    let e = hs.on_packet(&[0x45, 0, 0, 0, 0, 0]).expect_err("garbage");
    assert!(matches!(e, IpmiError::NotIpmi(_)), "{e}");
    // The BMC refuses the suite.
    let e = hs
        .on_packet(&open_reply(suite, 9, 0x11))
        .expect_err("status");
    assert_eq!(
        e,
        IpmiError::RakpStatus {
            step: "open session",
            code: 0x11
        }
    );
    assert!(matches!(
        e.into_bmc_error("x"),
        crate::bmc::BmcError::Unsupported { .. }
    ));
}

#[test]
fn handshake_rejects_algorithms_it_did_not_ask_for() {
    let mut hs = handshake(CipherSuite::Suite17, PASSWORD);
    sent(hs.on_packet(&auth_caps_reply()));
    let e = hs
        .on_packet(&open_reply(CipherSuite::Suite3, 9, 0))
        .expect_err("downgrade");
    assert!(
        matches!(e, IpmiError::AlgorithmMismatch { auth: 1, .. }),
        "{e}"
    );
}

#[test]
fn rakp4_status_unauthorized_name_is_bad_credentials() {
    let e = IpmiError::RakpStatus {
        step: "RAKP 2",
        code: 0x0d,
    };
    assert!(matches!(
        e.into_bmc_error("x"),
        crate::bmc::BmcError::BadCredentials { .. }
    ));
}

#[test]
fn session_requests_decrypt_on_the_bmc_side() {
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let mut s = established(suite);
        let bmc = BmcSide::new(suite);
        let (pkt, p) = s.request(0x00, 0x02, &[0x01], &[5u8; 16]).expect("request");
        let sec = Security {
            suite,
            keys: &bmc.keys,
        };
        let got = wire::decode(&pkt, Some(&sec)).expect("BMC decodes our request");
        assert_eq!(got.session_id, MANAGED_SID);
        assert_eq!(got.seq, 1);
        assert_eq!(
            got.payload,
            wire::encode_request(0x00, 0x02, p.rq_seq, &[0x01])
        );
    }
}

#[test]
fn session_replies_are_matched_and_bad_ones_are_typed_errors() {
    let suite = CipherSuite::Suite17;
    let mut s = established(suite);
    let mut bmc = BmcSide::new(suite);
    let (_, p) = s.request(0x00, 0x01, &[], &[1u8; 16]).expect("request");

    // Reply to an earlier request number: out of sequence, stray.
    let old = Pending {
        rq_seq: p.rq_seq.wrapping_sub(1) & 0x3f,
        ..p
    };
    let e = s
        .response(&bmc.reply(&old, 0, &[1, 0, 0]), &p)
        .expect_err("old");
    assert!(
        matches!(e, IpmiError::OutOfSequence { .. }) && e.is_stray(),
        "{e}"
    );
    // Reply to another command.
    let other = Pending { cmd: 0x09, ..p };
    let e = s
        .response(&bmc.reply(&other, 0, &[]), &p)
        .expect_err("other");
    assert!(matches!(e, IpmiError::UnexpectedResponse { .. }), "{e}");
    // A corrupted byte anywhere fails the integrity check.
    let mut bad = bmc.reply(&p, 0, &[1, 0, 0]);
    bad[20] ^= 1;
    assert_eq!(s.response(&bad, &p), Err(IpmiError::IntegrityMismatch));
    // Truncated.
    let good = bmc.reply(&p, 0, &[1, 0, 0]);
    let e = s.response(&good[..good.len() - 3], &p).expect_err("short");
    assert!(matches!(e, IpmiError::Truncated { .. }), "{e}");
    // The genuine reply, then the same datagram again (a replay).
    let r = s.response(&good, &p).expect("reply");
    assert_eq!((r.completion, r.data), (0, vec![1, 0, 0]));
    assert_eq!(
        s.response(&good, &p),
        Err(IpmiError::Replay { seq: bmc.seq })
    );
    // Unauthenticated packets inside a session.
    let plain = wire::encode_v2(
        payload::IPMI,
        CONSOLE_SID,
        99,
        &response_msg(0, 1, p.rq_seq, 0, &[1]),
        None,
    )
    .expect("encode");
    assert_eq!(s.response(&plain, &p), Err(IpmiError::Unauthenticated));
    // Another session's packet.
    let sec = Security {
        suite,
        keys: &bmc.keys,
    };
    let foreign = wire::encode_v2(
        payload::IPMI,
        7,
        100,
        &response_msg(0, 1, p.rq_seq, 0, &[1]),
        Some((&sec, &[0; 16])),
    )
    .expect("encode");
    assert!(matches!(
        s.response(&foreign, &p),
        Err(IpmiError::WrongSession { got: 7, .. })
    ));
}

#[test]
fn replay_window_accepts_reordering_but_not_repeats() {
    let suite = CipherSuite::Suite3;
    let mut s = established(suite);
    let mut bmc = BmcSide::new(suite);
    let (_, p) = s.request(0x00, 0x01, &[], &[1u8; 16]).expect("request");
    let first = bmc.reply(&p, 0, &[0, 0, 0]);
    let second = bmc.reply(&p, 0, &[0, 0, 0]);
    s.response(&second, &p).expect("newer first");
    s.response(&first, &p).expect("older, inside the window");
    assert!(matches!(
        s.response(&first, &p),
        Err(IpmiError::Replay { .. })
    ));
    bmc.seq += 100;
    s.response(&bmc.reply(&p, 0, &[0, 0, 0]), &p)
        .expect("jump ahead");
    assert!(
        matches!(s.response(&second, &p), Err(IpmiError::Replay { .. })),
        "too old"
    );
}

#[test]
fn completion_checksums_are_checked() {
    let mut m = response_msg(0x06, 0x01, 3, 0, &[0; 11]);
    let last = m.len() - 1;
    m[last] ^= 0xff;
    assert_eq!(
        wire::decode_response(&m),
        Err(IpmiError::BadChecksum("body"))
    );
    m[2] ^= 0xff;
    assert_eq!(
        wire::decode_response(&m),
        Err(IpmiError::BadChecksum("header"))
    );
}

#[test]
fn a_short_rakp2_with_a_valid_header_does_not_derail_the_handshake() {
    let suite = CipherSuite::Suite17;
    let mut hs = handshake(suite, PASSWORD);
    sent(hs.on_packet(&auth_caps_reply()));
    sent(hs.on_packet(&open_reply(suite, 9, 0)));
    let short = wire::encode_v2(payload::RAKP2, 0, 0, &[9, 0, 0, 0, 1, 2], None).expect("encode");
    let e = hs.on_packet(&short).expect_err("short RAKP 2");
    assert!(matches!(e, IpmiError::Truncated { .. }), "{e}");
    sent(hs.on_packet(&rakp2(suite, 9, PASSWORD)));
    assert!(matches!(
        hs.on_packet(&rakp4(suite, 9)),
        Ok(Step::Established(_))
    ));
    // Anything after the end is refused, not accepted twice.
    assert!(hs.on_packet(&rakp4(suite, 9)).is_err());
}

#[test]
fn over_long_credentials_are_a_config_error_not_sent() {
    let e = Handshake::new(HandshakeParams {
        suite: CipherSuite::Suite3,
        username: USER.to_vec(),
        password: vec![b'x'; 21],
        console_sid: CONSOLE_SID,
        rm: RM,
        tag: 0,
    })
    .expect_err("21-byte password");
    assert_eq!(e, IpmiError::CredentialsTooLong);
    assert!(matches!(
        e.into_bmc_error("x"),
        crate::bmc::BmcError::Config(_)
    ));
}
