//! RMCP+ session establishment as a state machine: Get Channel
//! Authentication Capabilities, Open Session, RAKP 1-4. Fed received
//! packets, it answers with the next packet to send or the established
//! [`Session`]. Nonces and session IDs come from the caller; no sockets,
//! no clock, no randomness here.

use super::crypto::{self, CipherSuite, ROLE_ADMIN_NAME_LOOKUP, RakpInputs, SessionKeys};
use super::error::IpmiError;
use super::session::Session;
use super::wire::{self, le32, need, payload};

/// Everything a handshake needs; the password stays inside.
pub struct HandshakeParams {
    pub suite: CipherSuite,
    pub username: Vec<u8>,
    pub password: Vec<u8>,
    /// Our (remote console) session ID; must not be 0.
    pub console_sid: u32,
    /// Our random number Rm.
    pub rm: [u8; 16],
    /// Message tag echoed by the BMC.
    pub tag: u8,
}

/// What to do after feeding a packet.
#[derive(Debug)]
pub enum Step {
    Send(Vec<u8>),
    Established(Session),
}

enum State {
    AuthCaps,
    Open,
    Rakp2 {
        managed_sid: u32,
    },
    Rakp4 {
        managed_sid: u32,
        rc: [u8; 16],
        guid: [u8; 16],
        keys: SessionKeys,
    },
    Done,
}

pub struct Handshake {
    p: HandshakeParams,
    state: State,
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("suite", &self.p.suite)
            .field("console_sid", &self.p.console_sid)
            .finish_non_exhaustive()
    }
}

const AUTH_CAPS_RQ_SEQ: u8 = 0;

fn arr16(b: &[u8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    a
}

impl Handshake {
    pub fn new(p: HandshakeParams) -> Result<Handshake, IpmiError> {
        if p.username.len() > 16 || p.password.len() > 20 {
            return Err(IpmiError::CredentialsTooLong);
        }
        Ok(Handshake {
            p,
            state: State::AuthCaps,
        })
    }

    /// The first packet: Get Channel Authentication Capabilities (IPMI 1.5
    /// wrapper, channel "this one", IPMI 2.0 extended data, admin).
    pub fn start(&mut self) -> Vec<u8> {
        self.state = State::AuthCaps;
        let msg = wire::encode_request(0x06, 0x38, AUTH_CAPS_RQ_SEQ, &[0x8e, 0x04]);
        wire::encode_v15_unauthenticated(&msg)
    }

    fn inputs<'a>(
        &'a self,
        managed_sid: u32,
        rc: &'a [u8; 16],
        guid: &'a [u8; 16],
    ) -> RakpInputs<'a> {
        RakpInputs {
            console_sid: self.p.console_sid,
            managed_sid,
            rm: &self.p.rm,
            rc,
            guid,
            role: ROLE_ADMIN_NAME_LOOKUP,
            username: &self.p.username,
        }
    }

    /// Feed one received datagram. An error never changes the state: a
    /// stray, truncated or forged datagram leaves the exchange where it
    /// was; the driver decides which errors end it.
    pub fn on_packet(&mut self, data: &[u8]) -> Result<Step, IpmiError> {
        let pkt = wire::decode(data, None)?;
        match &self.state {
            State::AuthCaps => {
                self.on_auth_caps(&pkt)?;
                self.state = State::Open;
                Ok(Step::Send(self.open_request()))
            }
            State::Open => {
                let managed_sid = self.on_open(&pkt)?;
                self.state = State::Rakp2 { managed_sid };
                Ok(Step::Send(self.rakp1(managed_sid)))
            }
            State::Rakp2 { managed_sid } => {
                let managed_sid = *managed_sid;
                let (rc, guid) = self.on_rakp2(managed_sid, &pkt)?;
                let inputs = self.inputs(managed_sid, &rc, &guid);
                let keys = SessionKeys::derive(self.p.suite, &self.p.password, &inputs);
                let code3 = crypto::rakp3_code(self.p.suite, &self.p.password, &inputs);
                let mut m = vec![self.p.tag, 0, 0, 0];
                m.extend_from_slice(&managed_sid.to_le_bytes());
                m.extend_from_slice(&code3);
                let out = wire::encode_v2(payload::RAKP3, 0, 0, &m, None)?;
                self.state = State::Rakp4 {
                    managed_sid,
                    rc,
                    guid,
                    keys,
                };
                Ok(Step::Send(out))
            }
            State::Rakp4 {
                managed_sid,
                rc,
                guid,
                keys,
            } => {
                let inputs = self.inputs(*managed_sid, rc, guid);
                self.on_rakp4(&pkt, &keys.sik, &inputs)?;
                let (managed_sid, keys) = (*managed_sid, keys.clone());
                self.state = State::Done;
                Ok(Step::Established(Session::new(
                    self.p.suite,
                    keys,
                    managed_sid,
                    self.p.console_sid,
                )))
            }
            State::Done => Err(IpmiError::Malformed {
                what: "handshake",
                detail: "already finished".into(),
            }),
        }
    }

    fn expect(got: u8, expected: u8) -> Result<(), IpmiError> {
        if got != expected {
            return Err(IpmiError::UnexpectedPayload { expected, got });
        }
        Ok(())
    }

    /// Tag, then status (a non-zero status is the BMC's answer, final).
    fn tag_and_status(&self, b: &[u8], step: &'static str) -> Result<(), IpmiError> {
        need(step, b, 2)?;
        if b[0] != self.p.tag {
            return Err(IpmiError::WrongTag {
                expected: self.p.tag,
                got: b[0],
            });
        }
        if b[1] != 0 {
            return Err(IpmiError::RakpStatus { step, code: b[1] });
        }
        Ok(())
    }

    fn check_console_sid(&self, b: &[u8]) -> Result<(), IpmiError> {
        let got = le32(&b[4..8]);
        if got != self.p.console_sid {
            return Err(IpmiError::WrongSession {
                expected: self.p.console_sid,
                got,
            });
        }
        Ok(())
    }

    fn on_auth_caps(&self, pkt: &wire::Packet) -> Result<(), IpmiError> {
        Self::expect(pkt.payload_type, payload::IPMI)?;
        let resp = wire::decode_response(&pkt.payload)?;
        wire::check_response(&resp, 0x06, 0x38, AUTH_CAPS_RQ_SEQ)?;
        if resp.completion != 0 {
            return Err(IpmiError::Completion {
                netfn: 0x06,
                cmd: 0x38,
                code: resp.completion,
            });
        }
        need("channel authentication capabilities", &resp.data, 4)?;
        if resp.data[1] & 0x80 == 0 || resp.data[3] & 0x02 == 0 {
            return Err(IpmiError::NoIpmi2);
        }
        Ok(())
    }

    fn on_open(&self, pkt: &wire::Packet) -> Result<u32, IpmiError> {
        Self::expect(pkt.payload_type, payload::OPEN_SESSION_RESPONSE)?;
        let b = &pkt.payload;
        self.tag_and_status(b, "open session")?;
        need("open session response", b, 36)?;
        self.check_console_sid(b)?;
        let managed_sid = le32(&b[8..12]);
        let (auth, integrity, conf) = (b[16], b[24], b[32]);
        let s = self.p.suite;
        if auth != s.auth_algorithm()
            || integrity != s.integrity_algorithm()
            || conf != s.confidentiality_algorithm()
        {
            return Err(IpmiError::AlgorithmMismatch {
                auth,
                integrity,
                conf,
            });
        }
        if managed_sid == 0 {
            return Err(IpmiError::Malformed {
                what: "open session response",
                detail: "session ID 0".into(),
            });
        }
        Ok(managed_sid)
    }

    /// Check RAKP 2 and return the BMC's random number and GUID. A code
    /// that does not verify is a wrong password, or a forged datagram.
    fn on_rakp2(
        &self,
        managed_sid: u32,
        pkt: &wire::Packet,
    ) -> Result<([u8; 16], [u8; 16]), IpmiError> {
        Self::expect(pkt.payload_type, payload::RAKP2)?;
        let b = &pkt.payload;
        self.tag_and_status(b, "RAKP 2")?;
        let code_len = self.p.suite.hmac_len();
        need("RAKP 2", b, 40 + code_len)?;
        self.check_console_sid(b)?;
        let rc = arr16(&b[8..24]);
        let guid = arr16(&b[24..40]);
        let expected = crypto::rakp2_code(
            self.p.suite,
            &self.p.password,
            &self.inputs(managed_sid, &rc, &guid),
        );
        if !crypto::codes_equal(&expected, &b[40..40 + code_len]) {
            return Err(IpmiError::AuthCodeMismatch);
        }
        Ok((rc, guid))
    }

    fn on_rakp4(
        &self,
        pkt: &wire::Packet,
        sik: &[u8],
        inputs: &RakpInputs<'_>,
    ) -> Result<(), IpmiError> {
        Self::expect(pkt.payload_type, payload::RAKP4)?;
        let b = &pkt.payload;
        self.tag_and_status(b, "RAKP 4")?;
        let icv_len = self.p.suite.icv_len();
        need("RAKP 4", b, 8 + icv_len)?;
        self.check_console_sid(b)?;
        let expected = crypto::rakp4_icv(self.p.suite, sik, inputs);
        if !crypto::codes_equal(&expected, &b[8..8 + icv_len]) {
            return Err(IpmiError::Rakp4Mismatch);
        }
        Ok(())
    }

    fn open_request(&self) -> Vec<u8> {
        let s = self.p.suite;
        let mut m = vec![self.p.tag, 0x04, 0, 0];
        m.extend_from_slice(&self.p.console_sid.to_le_bytes());
        m.extend_from_slice(&[0x00, 0, 0, 0x08, s.auth_algorithm(), 0, 0, 0]);
        m.extend_from_slice(&[0x01, 0, 0, 0x08, s.integrity_algorithm(), 0, 0, 0]);
        m.extend_from_slice(&[0x02, 0, 0, 0x08, s.confidentiality_algorithm(), 0, 0, 0]);
        // Unauthenticated payloads cannot fail to encode.
        wire::encode_v2(payload::OPEN_SESSION_REQUEST, 0, 0, &m, None).unwrap_or_default()
    }

    fn rakp1(&self, managed_sid: u32) -> Vec<u8> {
        let mut m = vec![self.p.tag, 0, 0, 0];
        m.extend_from_slice(&managed_sid.to_le_bytes());
        m.extend_from_slice(&self.p.rm);
        m.extend_from_slice(&[ROLE_ADMIN_NAME_LOOKUP, 0, 0, self.p.username.len() as u8]);
        m.extend_from_slice(&self.p.username);
        wire::encode_v2(payload::RAKP1, 0, 0, &m, None).unwrap_or_default()
    }
}
