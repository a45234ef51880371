//! Unit tests of the sans-IO core: RAKP codes and session keys checked
//! against Python's hmac/hashlib and AES against openssl, the handshake
//! and session state machines fed good, stray, garbled and replayed
//! packets, FRU parsing, and property tests that no input panics.

use std::process::Command;

use proptest::prelude::*;

use super::commands::{BootFlags, chassis_control_code, parse_device_id};
use super::crypto::{self, CipherSuite, RakpInputs, SessionKeys};
use super::error::IpmiError;
use super::fru;
use super::handshake::{Handshake, HandshakeParams, Step};
use super::session::{Pending, Session};
use super::wire::{self, Security, payload};
use crate::bmc::{BootDevice, FirmwareMode, PowerAction, PowerState};

const RM: [u8; 16] = *b"console-random-1";
const RC: [u8; 16] = *b"managed-random-2";
const GUID: [u8; 16] = [
    0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
];
const CONSOLE_SID: u32 = 0xa0a2_a3a4;
const MANAGED_SID: u32 = 0x1234_5678;
const USER: &[u8] = b"admin";
const PASSWORD: &[u8] = b"password";

fn inputs() -> RakpInputs<'static> {
    RakpInputs {
        console_sid: CONSOLE_SID,
        managed_sid: MANAGED_SID,
        rm: &RM,
        rc: &RC,
        guid: &GUID,
        role: crypto::ROLE_ADMIN_NAME_LOOKUP,
        username: USER,
    }
}

const PY_RAKP: &str = r#"
import hashlib, hmac, sys
h = {"3": hashlib.sha1, "17": hashlib.sha256}[sys.argv[1]]
icv = {"3": 12, "17": 16}[sys.argv[1]]
kuid, sidm, sidc, rm, rc, guid, role, user, data = [bytes.fromhex(a) for a in sys.argv[2:]]
H = lambda k, m: hmac.new(k, m, h).digest()
ul = bytes([len(user)])
sik = H(kuid, rm + rc + role + ul + user)
k1 = H(sik, b"\x01" * 20)
for v in (
    H(kuid, sidm + sidc + rm + rc + guid + role + ul + user),  # RAKP 2
    H(kuid, rc + sidm + role + ul + user),                     # RAKP 3
    sik,
    k1,
    H(sik, b"\x02" * 20),                                      # K2
    H(sik, rm + sidc + guid)[:icv],                            # RAKP 4
    H(k1, data)[:icv],                                         # packet auth code
):
    print(v.hex())
"#;

/// The same inputs through Python's hmac/hashlib, an implementation
/// independent of the Rust crates.
fn python_values(suite: CipherSuite, data: &[u8]) -> Vec<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(PY_RAKP)
        .arg(suite.id().to_string())
        .args([
            hex::encode(PASSWORD),
            hex::encode(CONSOLE_SID.to_le_bytes()),
            hex::encode(MANAGED_SID.to_le_bytes()),
            hex::encode(RM),
            hex::encode(RC),
            hex::encode(GUID),
            hex::encode([crypto::ROLE_ADMIN_NAME_LOOKUP]),
            hex::encode(USER),
            hex::encode(data),
        ])
        .output()
        .expect("python3 is required for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn rust_values(suite: CipherSuite, data: &[u8]) -> Vec<String> {
    let i = inputs();
    let keys = SessionKeys::derive(suite, PASSWORD, &i);
    vec![
        hex::encode(crypto::rakp2_code(suite, PASSWORD, &i)),
        hex::encode(crypto::rakp3_code(suite, PASSWORD, &i)),
        hex::encode(&keys.sik),
        hex::encode(&keys.k1),
        hex::encode(&keys.k2),
        hex::encode(crypto::rakp4_icv(suite, &keys.sik, &i)),
        hex::encode(crypto::integrity_code(suite, &keys, data)),
    ]
}

#[test]
fn suite17_rakp_codes_and_keys_match_python() {
    let data = b"\x06\xc0\x78\x56\x34\x12\x01\x00\x00\x00\x20\x00some payload";
    let py = python_values(CipherSuite::Suite17, data);
    let rs = rust_values(CipherSuite::Suite17, data);
    assert_eq!(rs, py);
    // SHA-256 lengths: 32-byte codes and keys, 16-byte truncations.
    assert_eq!(rs[0].len(), 64);
    assert_eq!(rs[5].len(), 32);
    assert_eq!(rs[6].len(), 32);
}

#[test]
fn suite3_rakp_codes_and_keys_match_python() {
    let data = b"anything covered by the integrity code";
    let py = python_values(CipherSuite::Suite3, data);
    let rs = rust_values(CipherSuite::Suite3, data);
    assert_eq!(rs, py);
    assert_eq!(rs[0].len(), 40);
    assert_eq!(rs[5].len(), 24);
}

#[test]
fn aes_cbc_matches_openssl() {
    let keys = SessionKeys::derive(CipherSuite::Suite17, PASSWORD, &inputs());
    let iv = [7u8; 16];
    let payload = b"twenty-one bytes long";
    let ours = crypto::encrypt_payload(&keys, &iv, payload).expect("encrypt");
    // IPMI padding by hand: 1, 2, ... then the pad length.
    let mut padded = payload.to_vec();
    padded.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    padded.push(10);
    assert_eq!(padded.len() % 16, 0);
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("plain");
    std::fs::write(&input, &padded).expect("write");
    let out = Command::new("openssl")
        .args(["enc", "-aes-128-cbc", "-nopad", "-K"])
        .arg(hex::encode(&keys.k2[..16]))
        .arg("-iv")
        .arg(hex::encode(iv))
        .arg("-in")
        .arg(&input)
        .output()
        .expect("openssl is required for this test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(&ours[..16], &iv);
    assert_eq!(hex::encode(&ours[16..]), hex::encode(&out.stdout));
    assert_eq!(
        crypto::decrypt_payload(&keys, &ours).expect("decrypt"),
        payload
    );
}

// ---- a BMC side for the state machines, built from the same primitives ----

fn response_msg(netfn: u8, cmd: u8, rq_seq: u8, cc: u8, data: &[u8]) -> Vec<u8> {
    let cs = |b: &[u8]| b.iter().fold(0u8, |a, x| a.wrapping_add(*x)).wrapping_neg();
    let mut m = vec![0x81, (netfn | 1) << 2];
    m.push(cs(&m));
    m.extend_from_slice(&[0x20, rq_seq << 2, cmd, cc]);
    m.extend_from_slice(data);
    m.push(cs(&m[3..]));
    m
}

fn auth_caps_reply() -> Vec<u8> {
    let msg = response_msg(0x06, 0x38, 0, 0, &[1, 0x80, 0x04, 0x02, 0, 0, 0, 0]);
    wire::encode_v15_unauthenticated(&msg)
}

fn open_reply(suite: CipherSuite, tag: u8, status: u8) -> Vec<u8> {
    let mut m = vec![tag, status, 4, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&MANAGED_SID.to_le_bytes());
    m.extend_from_slice(&[0, 0, 0, 8, suite.auth_algorithm(), 0, 0, 0]);
    m.extend_from_slice(&[1, 0, 0, 8, suite.integrity_algorithm(), 0, 0, 0]);
    m.extend_from_slice(&[2, 0, 0, 8, 1, 0, 0, 0]);
    wire::encode_v2(payload::OPEN_SESSION_RESPONSE, 0, 0, &m, None).expect("encode")
}

fn rakp2(suite: CipherSuite, tag: u8, password: &[u8]) -> Vec<u8> {
    let mut m = vec![tag, 0, 0, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&RC);
    m.extend_from_slice(&GUID);
    m.extend_from_slice(&crypto::rakp2_code(suite, password, &inputs()));
    wire::encode_v2(payload::RAKP2, 0, 0, &m, None).expect("encode")
}

fn rakp4(suite: CipherSuite, tag: u8) -> Vec<u8> {
    let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
    let mut m = vec![tag, 0, 0, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&crypto::rakp4_icv(suite, &keys.sik, &inputs()));
    wire::encode_v2(payload::RAKP4, 0, 0, &m, None).expect("encode")
}

fn handshake(suite: CipherSuite, password: &[u8]) -> Handshake {
    let mut hs = Handshake::new(HandshakeParams {
        suite,
        username: USER.to_vec(),
        password: password.to_vec(),
        console_sid: CONSOLE_SID,
        rm: RM,
        tag: 9,
    })
    .expect("params");
    let _ = hs.start();
    hs
}

fn sent(step: Result<Step, IpmiError>) -> Vec<u8> {
    match step {
        Ok(Step::Send(p)) => p,
        other => panic!("expected a packet to send, got {other:?}"),
    }
}

fn established(suite: CipherSuite) -> Session {
    let mut hs = handshake(suite, PASSWORD);
    sent(hs.on_packet(&auth_caps_reply()));
    sent(hs.on_packet(&open_reply(suite, 9, 0)));
    let rakp3 = sent(hs.on_packet(&rakp2(suite, 9, PASSWORD)));
    // RAKP 3 carries the code the BMC will check.
    let code = crypto::rakp3_code(suite, PASSWORD, &inputs());
    assert!(rakp3.ends_with(&code));
    match hs.on_packet(&rakp4(suite, 9)) {
        Ok(Step::Established(s)) => s,
        other => panic!("expected a session, got {other:?}"),
    }
}

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

/// The BMC's half of an established session, to build replies.
struct BmcSide {
    suite: CipherSuite,
    keys: SessionKeys,
    seq: u32,
}

impl BmcSide {
    fn new(suite: CipherSuite) -> BmcSide {
        BmcSide {
            suite,
            keys: SessionKeys::derive(suite, PASSWORD, &inputs()),
            seq: 0,
        }
    }
    fn reply(&mut self, p: &Pending, cc: u8, data: &[u8]) -> Vec<u8> {
        self.seq += 1;
        let msg = response_msg(p.netfn, p.cmd, p.rq_seq, cc, data);
        let sec = Security {
            suite: self.suite,
            keys: &self.keys,
        };
        wire::encode_v2(
            payload::IPMI,
            CONSOLE_SID,
            self.seq,
            &msg,
            Some((&sec, &[3u8; 16])),
        )
        .expect("encode")
    }
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

// ---- commands and FRU ----

#[test]
fn boot_flags_and_read_back_rule() {
    let uefi_pxe = BootFlags::one_time(BootDevice::Network, FirmwareMode::Uefi);
    assert_eq!(uefi_pxe.hex(), "a004000000");
    assert_eq!(
        BootFlags::one_time(BootDevice::Disk, FirmwareMode::Legacy).hex(),
        "8008000000"
    );
    // Echoes everything: honoured.
    assert!(BootFlags([0xa0, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // Echoes the valid bit but dropped EFI (pyghmi): ignored.
    assert!(!BootFlags([0x80, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // Only the device, no flags (ipmi_sim): the device decides.
    assert!(BootFlags([0x00, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // No override at all, or another device: ignored.
    assert!(!BootFlags([0x00, 0x00, 0, 0, 0]).honours(&uefi_pxe));
    assert!(!BootFlags([0xa0, 0x08, 0, 0, 0]).honours(&uefi_pxe));
}

#[test]
fn chassis_control_codes() {
    use PowerAction::*;
    assert_eq!(chassis_control_code(On, PowerState::Off), 1);
    assert_eq!(chassis_control_code(ForceOff, PowerState::On), 0);
    assert_eq!(chassis_control_code(GracefulOff, PowerState::On), 5);
    assert_eq!(chassis_control_code(Cycle, PowerState::On), 2);
    assert_eq!(chassis_control_code(Cycle, PowerState::Off), 1);
    assert_eq!(chassis_control_code(Reset, PowerState::On), 3);
    assert_eq!(chassis_control_code(Reset, PowerState::Off), 1);
}

#[test]
fn device_id_fields() {
    let d =
        parse_device_id(&[0, 3, 9, 0x08, 0x02, 0x9f, 0x91, 0x12, 0, 0x02, 0x0f]).expect("parse");
    assert_eq!(d.firmware, "9.08");
    assert_eq!(d.ipmi_version, "2.0");
    assert_eq!(d.manufacturer_id, 0x1291);
    assert_eq!(d.product_id, 0x0f02);
    assert!(matches!(
        parse_device_id(&[0, 1]),
        Err(IpmiError::Truncated { .. })
    ));
}

/// The FRU image of tests/fixtures/ipmi_sim/sim.emu.
fn fixture_fru() -> Vec<u8> {
    let emu = include_str!("../../../tests/fixtures/ipmi_sim/sim.emu");
    let mut bytes: Vec<u8> = emu
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("0x"))
        .skip_while(|w| *w != "01") // skip the mc_add numbers
        .filter_map(|w| u8::from_str_radix(w, 16).ok())
        .collect();
    bytes.resize(256, 0);
    bytes
}

#[test]
fn fru_board_and_product_areas() {
    let info = fru::parse(&fixture_fru()).expect("parse");
    assert_eq!(info.board_manufacturer.as_deref(), Some("Metalherd Labs"));
    assert_eq!(info.board_product.as_deref(), Some("MH-Board-1"));
    assert_eq!(info.board_serial.as_deref(), Some("BRD0001"));
    assert_eq!(info.product_name.as_deref(), Some("MH-1000"));
    assert_eq!(info.product_part.as_deref(), Some("M1000"));
    assert_eq!(info.product_serial.as_deref(), Some("SN-0042"));
}

#[test]
fn fru_errors_are_typed() {
    let mut f = fixture_fru();
    f[7] ^= 1;
    assert_eq!(fru::parse(&f), Err(IpmiError::BadChecksum("FRU header")));
    let mut f = fixture_fru();
    f[20] ^= 1;
    assert_eq!(fru::parse(&f), Err(IpmiError::BadChecksum("FRU area")));
    assert!(matches!(
        fru::parse(&f[..5]),
        Err(IpmiError::Truncated { .. })
    ));
    assert!(fru::parse(&f[..30]).is_err());
}

// ---- no input panics ----

fn some_session(suite17: bool) -> Session {
    established(if suite17 {
        CipherSuite::Suite17
    } else {
        CipherSuite::Suite3
    })
}

proptest! {
    #[test]
    fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..400), suite17 in any::<bool>()) {
        let _ = wire::decode(&data, None);
        let suite = if suite17 { CipherSuite::Suite17 } else { CipherSuite::Suite3 };
        let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
        let _ = wire::decode(&data, Some(&Security { suite, keys: &keys }));
        let _ = wire::decode_response(&data);
        let _ = crypto::decrypt_payload(&keys, &data);
        let _ = fru::parse(&data);
        let _ = parse_device_id(&data);
        let _ = super::commands::parse_boot_flags(&data);
        let _ = super::commands::parse_fru_read(&data);
        let _ = super::commands::parse_system_guid(&data);
    }

    #[test]
    fn arbitrary_bytes_with_an_ipmi_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..200), auth in prop_oneof![Just(0u8), Just(6u8)], ptype in any::<u8>()) {
        let mut data = vec![0x06, 0x00, 0xff, 0x07, auth, ptype];
        data.extend_from_slice(&tail);
        let _ = wire::decode(&data, None);
        // Every handshake state, and an established session.
        let suite = CipherSuite::Suite17;
        let mut hs = handshake(suite, PASSWORD);
        let _ = hs.on_packet(&data);
        let mut hs = handshake(suite, PASSWORD);
        let _ = hs.on_packet(&auth_caps_reply());
        let _ = hs.on_packet(&data);
        let _ = hs.on_packet(&open_reply(suite, 9, 0));
        let _ = hs.on_packet(&data);
        let _ = hs.on_packet(&rakp2(suite, 9, PASSWORD));
        let _ = hs.on_packet(&data);
        let mut s = some_session(true);
        let p = Pending { netfn: 0, cmd: 1, rq_seq: 1 };
        let _ = s.response(&data, &p);
    }

    #[test]
    fn encrypted_packets_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..300), iv in any::<[u8; 16]>(), suite17 in any::<bool>(), seq in 1u32..) {
        let suite = if suite17 { CipherSuite::Suite17 } else { CipherSuite::Suite3 };
        let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
        let sec = Security { suite, keys: &keys };
        let pkt = wire::encode_v2(payload::IPMI, 42, seq, &payload, Some((&sec, &iv))).expect("encode");
        // Integrity covers from the auth type on and is a multiple of 4 bytes.
        prop_assert_eq!((pkt.len() - 4 - suite.icv_len()) % 4, 0);
        let back = wire::decode(&pkt, Some(&sec)).expect("decode");
        prop_assert_eq!(back.payload, payload);
        prop_assert_eq!(back.session_id, 42);
        prop_assert_eq!(back.seq, seq);
    }
}
