//! RAKP codes, SIK/K1/K2 and packet auth codes for suites 3 and 17 against
//! Python's hmac/hashlib; AES-CBC-128 against openssl.

use std::process::Command;

use super::*;

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
