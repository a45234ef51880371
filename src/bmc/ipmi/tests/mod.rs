//! Unit tests of the sans-IO core: RAKP codes and session keys checked
//! against Python's hmac/hashlib and AES against openssl (`crypto_xcheck`),
//! the handshake and session state machines fed good, stray, garbled and
//! replayed packets (`state`), commands and FRU parsing (`commands`), and
//! property tests that no input panics (`props`). This file holds the
//! shared inputs and a BMC side built from the same primitives.

mod commands;
mod crypto_xcheck;
mod props;
mod state;

use super::crypto::{self, CipherSuite, RakpInputs, SessionKeys};
use super::error::IpmiError;
use super::handshake::{Handshake, HandshakeParams, Step};
use super::session::{Pending, Session};
use super::wire::{self, Security, payload};

pub const RM: [u8; 16] = *b"console-random-1";
pub const RC: [u8; 16] = *b"managed-random-2";
pub const GUID: [u8; 16] = [
    0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xa1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
];
pub const CONSOLE_SID: u32 = 0xa0a2_a3a4;
pub const MANAGED_SID: u32 = 0x1234_5678;
pub const USER: &[u8] = b"admin";
pub const PASSWORD: &[u8] = b"password";

pub fn inputs() -> RakpInputs<'static> {
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

pub fn response_msg(netfn: u8, cmd: u8, rq_seq: u8, cc: u8, data: &[u8]) -> Vec<u8> {
    let cs = |b: &[u8]| b.iter().fold(0u8, |a, x| a.wrapping_add(*x)).wrapping_neg();
    let mut m = vec![0x81, (netfn | 1) << 2];
    m.push(cs(&m));
    m.extend_from_slice(&[0x20, rq_seq << 2, cmd, cc]);
    m.extend_from_slice(data);
    m.push(cs(&m[3..]));
    m
}

pub fn auth_caps_reply() -> Vec<u8> {
    let msg = response_msg(0x06, 0x38, 0, 0, &[1, 0x80, 0x04, 0x02, 0, 0, 0, 0]);
    wire::encode_v15_unauthenticated(&msg)
}

pub fn open_reply(suite: CipherSuite, tag: u8, status: u8) -> Vec<u8> {
    let mut m = vec![tag, status, 4, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&MANAGED_SID.to_le_bytes());
    m.extend_from_slice(&[0, 0, 0, 8, suite.auth_algorithm(), 0, 0, 0]);
    m.extend_from_slice(&[1, 0, 0, 8, suite.integrity_algorithm(), 0, 0, 0]);
    m.extend_from_slice(&[2, 0, 0, 8, 1, 0, 0, 0]);
    wire::encode_v2(payload::OPEN_SESSION_RESPONSE, 0, 0, &m, None).expect("encode")
}

pub fn rakp2(suite: CipherSuite, tag: u8, password: &[u8]) -> Vec<u8> {
    let mut m = vec![tag, 0, 0, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&RC);
    m.extend_from_slice(&GUID);
    m.extend_from_slice(&crypto::rakp2_code(suite, password, &inputs()));
    wire::encode_v2(payload::RAKP2, 0, 0, &m, None).expect("encode")
}

pub fn rakp4(suite: CipherSuite, tag: u8) -> Vec<u8> {
    let keys = SessionKeys::derive(suite, PASSWORD, &inputs());
    let mut m = vec![tag, 0, 0, 0];
    m.extend_from_slice(&CONSOLE_SID.to_le_bytes());
    m.extend_from_slice(&crypto::rakp4_icv(suite, &keys.sik, &inputs()));
    wire::encode_v2(payload::RAKP4, 0, 0, &m, None).expect("encode")
}

pub fn handshake(suite: CipherSuite, password: &[u8]) -> Handshake {
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

pub fn sent(step: Result<Step, IpmiError>) -> Vec<u8> {
    match step {
        Ok(Step::Send(p)) => p,
        other => panic!("expected a packet to send, got {other:?}"),
    }
}

pub fn established(suite: CipherSuite) -> Session {
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

/// The BMC's half of an established session, to build replies.
pub struct BmcSide {
    pub suite: CipherSuite,
    pub keys: SessionKeys,
    pub seq: u32,
}

impl BmcSide {
    pub fn new(suite: CipherSuite) -> BmcSide {
        BmcSide {
            suite,
            keys: SessionKeys::derive(suite, PASSWORD, &inputs()),
            seq: 0,
        }
    }
    pub fn reply(&mut self, p: &Pending, cc: u8, data: &[u8]) -> Vec<u8> {
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

/// The FRU image of tests/fixtures/ipmi_sim/sim.emu.
pub fn fixture_fru() -> Vec<u8> {
    let emu = include_str!("../../../../tests/fixtures/ipmi_sim/sim.emu");
    let mut bytes: Vec<u8> = emu
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("0x"))
        .skip_while(|w| *w != "01") // skip the mc_add numbers
        .filter_map(|w| u8::from_str_radix(w, 16).ok())
        .collect();
    bytes.resize(256, 0);
    bytes
}

pub fn some_session(suite17: bool) -> Session {
    established(if suite17 {
        CipherSuite::Suite17
    } else {
        CipherSuite::Suite3
    })
}
