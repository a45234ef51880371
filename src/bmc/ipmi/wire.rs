//! Wire format: RMCP header, IPMI 1.5 and 2.0 session wrappers (with
//! integrity and confidentiality applied through [`super::crypto`]) and the
//! IPMI LAN message inside them. Pure encode/decode over byte slices; every
//! length is checked before it is used, so arbitrary input gives an
//! [`IpmiError`], never a panic. No sockets, no session state.

use super::crypto::{self, CipherSuite, SessionKeys};
use super::error::IpmiError;

/// RMCP header for IPMI messages: version 6, reserved, no ACK, class IPMI.
pub const RMCP_IPMI: [u8; 4] = [0x06, 0x00, 0xff, 0x07];

/// Payload types (IPMI 2.0 table 13-16).
pub mod payload {
    pub const IPMI: u8 = 0x00;
    pub const OPEN_SESSION_REQUEST: u8 = 0x10;
    pub const OPEN_SESSION_RESPONSE: u8 = 0x11;
    pub const RAKP1: u8 = 0x12;
    pub const RAKP2: u8 = 0x13;
    pub const RAKP3: u8 = 0x14;
    pub const RAKP4: u8 = 0x15;
}

const AUTH_TYPE_RMCP_PLUS: u8 = 0x06;
const BMC_ADDR: u8 = 0x20;
const CONSOLE_ADDR: u8 = 0x81;

/// Established-session security for outgoing and incoming packets.
pub struct Security<'a> {
    pub suite: CipherSuite,
    pub keys: &'a SessionKeys,
}

/// A decoded IPMI 2.0 (or 1.5) session packet, already verified and
/// decrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    pub payload_type: u8,
    pub session_id: u32,
    pub seq: u32,
    pub authenticated: bool,
    pub payload: Vec<u8>,
}

/// `Truncated` unless `data` has at least `n` bytes.
pub(crate) fn need(what: &'static str, data: &[u8], n: usize) -> Result<(), IpmiError> {
    if data.len() < n {
        Err(IpmiError::Truncated {
            what,
            need: n,
            got: data.len(),
        })
    } else {
        Ok(())
    }
}

/// Little-endian u32 from up to 4 bytes (missing bytes are 0).
pub(crate) fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u32::from_le_bytes(a)
}

/// Encode an IPMI 2.0 session packet. With `sec`, the payload is encrypted
/// (AES-CBC-128 with `iv`) and the packet carries an integrity code.
pub fn encode_v2(
    payload_type: u8,
    session_id: u32,
    seq: u32,
    payload: &[u8],
    sec: Option<(&Security<'_>, &[u8; 16])>,
) -> Result<Vec<u8>, IpmiError> {
    let mut out = Vec::with_capacity(payload.len() + 64);
    out.extend_from_slice(&RMCP_IPMI);
    out.push(AUTH_TYPE_RMCP_PLUS);
    let flags = if sec.is_some() { 0xc0 } else { 0x00 };
    out.push(flags | (payload_type & 0x3f));
    out.extend_from_slice(&session_id.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    match sec {
        None => {
            out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            out.extend_from_slice(payload);
        }
        Some((s, iv)) => {
            let body = crypto::encrypt_payload(s.keys, iv, payload)?;
            out.extend_from_slice(&(body.len() as u16).to_le_bytes());
            out.extend_from_slice(&body);
            // Integrity pad: auth type .. next header must be a multiple of 4.
            let pad = (4 - (out.len() - 4 + 2) % 4) % 4;
            out.extend(std::iter::repeat_n(0xff, pad));
            out.push(pad as u8);
            out.push(0x07);
            let code = crypto::integrity_code(s.suite, s.keys, &out[4..]);
            out.extend_from_slice(&code);
        }
    }
    Ok(out)
}

/// Encode an IPMI 1.5 packet without authentication (only used before a
/// session exists: Get Channel Authentication Capabilities).
pub fn encode_v15_unauthenticated(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 14);
    out.extend_from_slice(&RMCP_IPMI);
    out.push(0x00); // auth type none
    out.extend_from_slice(&[0; 8]); // sequence, session id
    out.push(message.len() as u8);
    out.extend_from_slice(message);
    out
}

/// Decode any IPMI-over-RMCP packet. `sec` is required for authenticated
/// packets; with `sec` set, unauthenticated packets are refused.
pub fn decode(data: &[u8], sec: Option<&Security<'_>>) -> Result<Packet, IpmiError> {
    need("RMCP header", data, 5)?;
    if data[0] != 0x06 {
        return Err(IpmiError::NotIpmi("RMCP version is not 6"));
    }
    if data[3] & 0x1f != 0x07 {
        return Err(IpmiError::NotIpmi("RMCP class is not IPMI"));
    }
    match data[4] {
        AUTH_TYPE_RMCP_PLUS => decode_v2(data, sec),
        0x00 => {
            if sec.is_some() {
                return Err(IpmiError::Unauthenticated);
            }
            need("IPMI 1.5 session header", data, 14)?;
            let len = data[13] as usize;
            need("IPMI 1.5 message", data, 14 + len)?;
            Ok(Packet {
                payload_type: payload::IPMI,
                seq: le32(&data[5..9]),
                session_id: le32(&data[9..13]),
                authenticated: false,
                payload: data[14..14 + len].to_vec(),
            })
        }
        _ => Err(IpmiError::NotIpmi("unsupported authentication type")),
    }
}

fn decode_v2(data: &[u8], sec: Option<&Security<'_>>) -> Result<Packet, IpmiError> {
    need("IPMI 2.0 session header", data, 16)?;
    let ptype = data[5];
    let encrypted = ptype & 0x80 != 0;
    let authenticated = ptype & 0x40 != 0;
    let payload_type = ptype & 0x3f;
    if payload_type == 0x02 {
        return Err(IpmiError::NotIpmi("OEM payloads are not supported"));
    }
    let session_id = le32(&data[6..10]);
    let seq = le32(&data[10..14]);
    let len = u16::from_le_bytes([data[14], data[15]]) as usize;
    need("IPMI 2.0 payload", data, 16 + len)?;
    let body = &data[16..16 + len];
    match (sec, authenticated) {
        (Some(_), false) => return Err(IpmiError::Unauthenticated),
        (None, true) | (None, false) if encrypted => {
            return Err(IpmiError::Malformed {
                what: "packet",
                detail: "encrypted before a session exists".into(),
            });
        }
        (None, true) => {
            return Err(IpmiError::Malformed {
                what: "packet",
                detail: "authenticated before a session exists".into(),
            });
        }
        _ => {}
    }
    let payload = match sec {
        None => body.to_vec(),
        Some(s) => {
            let icv = s.suite.icv_len();
            // Trailer: pad, pad length, next header, auth code. Read from
            // the end as ipmitool does (a BMC may pad more than needed);
            // the auth code covers everything from the auth type on.
            let trailer_start = 16 + len;
            need("integrity trailer", data, trailer_start + 2 + icv)?;
            let total = data.len();
            let expected = crypto::integrity_code(s.suite, s.keys, &data[4..total - icv]);
            if !crypto::codes_equal(&expected, &data[total - icv..]) {
                return Err(IpmiError::IntegrityMismatch);
            }
            let pad = total - icv - 2 - trailer_start;
            if data[total - icv - 2] as usize != pad || data[total - icv - 1] != 0x07 {
                return Err(IpmiError::Malformed {
                    what: "integrity trailer",
                    detail: "bad pad length or next header".into(),
                });
            }
            if encrypted {
                crypto::decrypt_payload(s.keys, body)?
            } else {
                body.to_vec()
            }
        }
    };
    Ok(Packet {
        payload_type,
        session_id,
        seq,
        authenticated,
        payload,
    })
}

fn checksum(bytes: &[u8]) -> u8 {
    bytes
        .iter()
        .fold(0u8, |acc, b| acc.wrapping_add(*b))
        .wrapping_neg()
}

/// An IPMI LAN request message (figure 13-4) to the BMC at 0x20, LUN 0.
pub fn encode_request(netfn: u8, cmd: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(7 + data.len());
    m.extend_from_slice(&[BMC_ADDR, netfn << 2]);
    m.push(checksum(&m[0..2]));
    m.extend_from_slice(&[CONSOLE_ADDR, (rq_seq & 0x3f) << 2, cmd]);
    m.extend_from_slice(data);
    m.push(checksum(&m[3..]));
    m
}

/// A decoded IPMI response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub netfn: u8,
    pub cmd: u8,
    pub rq_seq: u8,
    pub completion: u8,
    pub data: Vec<u8>,
}

/// Decode an IPMI LAN response message and check both checksums.
pub fn decode_response(m: &[u8]) -> Result<Response, IpmiError> {
    need("IPMI response", m, 8)?;
    if checksum(&m[0..2]) != m[2] {
        return Err(IpmiError::BadChecksum("header"));
    }
    let last = m.len() - 1;
    if checksum(&m[3..last]) != m[last] {
        return Err(IpmiError::BadChecksum("body"));
    }
    Ok(Response {
        netfn: m[1] >> 2,
        rq_seq: m[4] >> 2,
        cmd: m[5],
        completion: m[6],
        data: m[7..last].to_vec(),
    })
}

/// Match a response against the request it should answer.
pub fn check_response(r: &Response, netfn: u8, cmd: u8, rq_seq: u8) -> Result<(), IpmiError> {
    if r.netfn != netfn | 1 || r.cmd != cmd {
        return Err(IpmiError::UnexpectedResponse {
            netfn: r.netfn,
            cmd: r.cmd,
            want_netfn: netfn | 1,
            want_cmd: cmd,
        });
    }
    if r.rq_seq != rq_seq & 0x3f {
        return Err(IpmiError::OutOfSequence {
            expected: rq_seq & 0x3f,
            got: r.rq_seq,
        });
    }
    Ok(())
}
