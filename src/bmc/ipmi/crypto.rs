//! RMCP+ cryptography for cipher suites 3 and 17: the RAKP key-exchange
//! codes, session key derivation (SIK, K1, K2), per-packet integrity and
//! AES-CBC-128 confidentiality. Pure functions over bytes; no sockets, no
//! randomness (IVs and nonces come from the caller).

use aes::Aes128;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::NoPadding};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

use super::error::IpmiError;

/// The cipher suites this client speaks. Both use AES-CBC-128.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    Suite3,
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    Suite17,
}

impl TryFrom<u8> for CipherSuite {
    type Error = IpmiError;
    fn try_from(id: u8) -> Result<Self, IpmiError> {
        match id {
            3 => Ok(CipherSuite::Suite3),
            17 => Ok(CipherSuite::Suite17),
            other => Err(IpmiError::UnsupportedSuite(other)),
        }
    }
}

impl CipherSuite {
    pub fn id(self) -> u8 {
        match self {
            CipherSuite::Suite3 => 3,
            CipherSuite::Suite17 => 17,
        }
    }
    /// Authentication algorithm number (table 13-17).
    pub fn auth_algorithm(self) -> u8 {
        match self {
            CipherSuite::Suite3 => 0x01,
            CipherSuite::Suite17 => 0x03,
        }
    }
    /// Integrity algorithm number (table 13-18).
    pub fn integrity_algorithm(self) -> u8 {
        match self {
            CipherSuite::Suite3 => 0x01,
            CipherSuite::Suite17 => 0x04,
        }
    }
    /// Confidentiality algorithm number (table 13-19): AES-CBC-128.
    pub fn confidentiality_algorithm(self) -> u8 {
        0x01
    }
    /// Length of the full HMAC (RAKP 2 and 3 key exchange codes, SIK, K1, K2).
    pub fn hmac_len(self) -> usize {
        match self {
            CipherSuite::Suite3 => 20,
            CipherSuite::Suite17 => 32,
        }
    }
    /// Length of the truncated RAKP 4 value and of each packet's auth code.
    pub fn icv_len(self) -> usize {
        match self {
            CipherSuite::Suite3 => 12,
            CipherSuite::Suite17 => 16,
        }
    }

    /// HMAC with this suite's hash. HMAC takes keys of any length, so this
    /// cannot fail; the fallback keeps the no-panic rule without an unwrap.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            match <M as hmac::digest::KeyInit>::new_from_slice(key) {
                Ok(mut m) => {
                    for p in parts {
                        m.update(p);
                    }
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            }
        }
        match self {
            CipherSuite::Suite3 => run::<Hmac<Sha1>>(key, parts),
            CipherSuite::Suite17 => run::<Hmac<Sha256>>(key, parts),
        }
    }
}

/// The role byte sent in RAKP 1 and mixed into every RAKP code: requested
/// privilege (admin = 4) with the name-only lookup bit (0x10).
pub const ROLE_ADMIN_NAME_LOOKUP: u8 = 0x14;

/// Inputs of the RAKP exchange shared by every code.
#[derive(Clone, Debug)]
pub struct RakpInputs<'a> {
    pub console_sid: u32,
    pub managed_sid: u32,
    pub rm: &'a [u8; 16],
    pub rc: &'a [u8; 16],
    pub guid: &'a [u8; 16],
    pub role: u8,
    pub username: &'a [u8],
}

/// RAKP 2 key exchange authentication code the BMC must send:
/// HMAC(Kuid, SIDm | SIDc | Rm | Rc | GUIDc | ROLEm | ULENGTHm | UNAMEm).
pub fn rakp2_code(suite: CipherSuite, kuid: &[u8], i: &RakpInputs<'_>) -> Vec<u8> {
    suite.hmac(
        kuid,
        &[
            &i.console_sid.to_le_bytes(),
            &i.managed_sid.to_le_bytes(),
            i.rm,
            i.rc,
            i.guid,
            &[i.role, i.username.len() as u8],
            i.username,
        ],
    )
}

/// RAKP 3 key exchange authentication code the console sends:
/// HMAC(Kuid, Rc | SIDm | ROLEm | ULENGTHm | UNAMEm).
pub fn rakp3_code(suite: CipherSuite, kuid: &[u8], i: &RakpInputs<'_>) -> Vec<u8> {
    suite.hmac(
        kuid,
        &[
            i.rc,
            &i.console_sid.to_le_bytes(),
            &[i.role, i.username.len() as u8],
            i.username,
        ],
    )
}

/// Session keys. Debug never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    pub sik: Vec<u8>,
    pub k1: Vec<u8>,
    pub k2: Vec<u8>,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(<redacted>)")
    }
}

impl SessionKeys {
    /// SIK = HMAC(KG, Rm | Rc | ROLEm | ULENGTHm | UNAMEm); K1 and K2 are
    /// HMAC(SIK, 20 bytes of 0x01 / 0x02) for both suites (the constants
    /// stay 20 bytes long with SHA-256, as ipmitool and pyghmi do). KG is
    /// the password when the BMC has no BMC key.
    pub fn derive(suite: CipherSuite, kg: &[u8], i: &RakpInputs<'_>) -> SessionKeys {
        let sik = suite.hmac(
            kg,
            &[i.rm, i.rc, &[i.role, i.username.len() as u8], i.username],
        );
        let k1 = suite.hmac(&sik, &[&[0x01; 20]]);
        let k2 = suite.hmac(&sik, &[&[0x02; 20]]);
        SessionKeys { sik, k1, k2 }
    }

    /// AES-128 key: the first 16 bytes of K2.
    fn aes_key(&self) -> Result<[u8; 16], IpmiError> {
        self.k2
            .get(..16)
            .and_then(|k| <[u8; 16]>::try_from(k).ok())
            .ok_or(IpmiError::Malformed {
                what: "session key",
                detail: "K2 shorter than 16 bytes".into(),
            })
    }
}

/// RAKP 4 integrity check value: HMAC(SIK, Rm | SIDc | GUIDc) truncated,
/// where SIDc is the managed system's session ID.
pub fn rakp4_icv(suite: CipherSuite, sik: &[u8], i: &RakpInputs<'_>) -> Vec<u8> {
    let mut v = suite.hmac(sik, &[i.rm, &i.managed_sid.to_le_bytes(), i.guid]);
    v.truncate(suite.icv_len());
    v
}

/// Per-packet auth code: HMAC(K1, data) truncated (HMAC-SHA1-96 or
/// HMAC-SHA256-128).
pub fn integrity_code(suite: CipherSuite, keys: &SessionKeys, data: &[u8]) -> Vec<u8> {
    let mut v = suite.hmac(&keys.k1, &[data]);
    v.truncate(suite.icv_len());
    v
}

/// Constant-time-ish comparison for codes (lengths are public).
pub fn codes_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// AES-CBC-128 payload encryption (IPMI 2.0 section 13.29): IV, then the
/// payload padded with 1, 2, 3... and a pad-length byte to 16 bytes.
pub fn encrypt_payload(
    keys: &SessionKeys,
    iv: &[u8; 16],
    payload: &[u8],
) -> Result<Vec<u8>, IpmiError> {
    let key = keys.aes_key()?;
    let pad = (16 - (payload.len() + 1) % 16) % 16;
    let mut plain = Vec::with_capacity(payload.len() + pad + 1);
    plain.extend_from_slice(payload);
    plain.extend((1..=pad).map(|b| b as u8));
    plain.push(pad as u8);
    let enc = cbc::Encryptor::<Aes128>::new(&key.into(), iv.into());
    let ct = enc.encrypt_padded_vec_mut::<NoPadding>(&plain);
    let mut out = Vec::with_capacity(16 + ct.len());
    out.extend_from_slice(iv);
    out.extend_from_slice(&ct);
    Ok(out)
}

/// Reverse of [`encrypt_payload`]; checks the padding.
pub fn decrypt_payload(keys: &SessionKeys, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
    if data.len() < 32 || !data.len().is_multiple_of(16) {
        return Err(IpmiError::Truncated {
            what: "encrypted payload",
            need: 32.max(data.len().div_ceil(16) * 16),
            got: data.len(),
        });
    }
    let key = keys.aes_key()?;
    let (iv, ct) = data.split_at(16);
    let iv: [u8; 16] = <[u8; 16]>::try_from(iv).map_err(|_| IpmiError::BadPadding)?;
    let dec = cbc::Decryptor::<Aes128>::new(&key.into(), &iv.into());
    let plain = dec
        .decrypt_padded_vec_mut::<NoPadding>(ct)
        .map_err(|_| IpmiError::BadPadding)?;
    let pad = *plain.last().ok_or(IpmiError::BadPadding)? as usize;
    if pad > 15 || pad + 1 > plain.len() {
        return Err(IpmiError::BadPadding);
    }
    let body_len = plain.len() - pad - 1;
    let pad_bytes = &plain[body_len..plain.len() - 1];
    if pad_bytes
        .iter()
        .enumerate()
        .any(|(i, b)| *b as usize != i + 1)
    {
        return Err(IpmiError::BadPadding);
    }
    Ok(plain[..body_len].to_vec())
}
