//! Any datagram a BMC (or anyone on the management network) sends to the
//! IPMI driver gives a decoded packet or an error, never a panic: the
//! RMCP/IPMI 1.5/2.0 session wrapper (unauthenticated, and with suite 3
//! and 17 integrity and confidentiality), the LAN message inside, every
//! command answer the driver parses, FRU images, and the RMCP+ handshake.
#![no_main]

use libfuzzer_sys::fuzz_target;
use metalherd::bmc::ipmi::crypto::{CipherSuite, SessionKeys};
use metalherd::bmc::ipmi::handshake::{Handshake, HandshakeParams};
use metalherd::bmc::ipmi::{commands, fru, wire};

fn keys() -> SessionKeys {
    SessionKeys {
        sik: vec![0x11; 32],
        k1: vec![0x22; 32],
        k2: vec![0x33; 32],
    }
}

fn parse_answer(m: &[u8]) {
    let Ok(r) = wire::decode_response(m) else { return };
    let _ = wire::check_response(&r, r.netfn & !1, r.cmd, r.rq_seq);
    let d = &r.data;
    let _ = commands::parse_chassis_status(d);
    let _ = commands::parse_boot_flags(d);
    let _ = commands::parse_device_id(d);
    let _ = commands::parse_system_guid(d);
    let _ = commands::parse_fru_info(d);
    if let Ok(chunk) = commands::parse_fru_read(d) {
        let _ = fru::parse(chunk);
    }
}

fuzz_target!(|data: &[u8]| {
    let k = keys();
    for sec in [
        None,
        Some(wire::Security { suite: CipherSuite::Suite3, keys: &k }),
        Some(wire::Security { suite: CipherSuite::Suite17, keys: &k }),
    ] {
        if let Ok(p) = wire::decode(data, sec.as_ref()) {
            parse_answer(&p.payload);
        }
    }
    let _ = fru::parse(data);
    for suite in [CipherSuite::Suite3, CipherSuite::Suite17] {
        let Ok(mut h) = Handshake::new(HandshakeParams {
            suite,
            username: b"admin".to_vec(),
            password: b"password".to_vec(),
            console_sid: 0x0a0b_0c0d,
            rm: [7; 16],
            tag: 1,
        }) else {
            return;
        };
        let _ = h.start();
        let _ = h.on_packet(data);
    }
});
