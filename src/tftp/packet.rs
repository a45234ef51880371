//! TFTP wire format (RFC 1350, options per RFC 2347): decode any datagram
//! into a [`Packet`] or a typed [`PacketError`], and encode packets back.
//! Pure byte handling: no sockets, no files, no transfer logic here.

use bytes::{BufMut, Bytes, BytesMut};

pub const OP_RRQ: u16 = 1;
pub const OP_WRQ: u16 = 2;
pub const OP_DATA: u16 = 3;
pub const OP_ACK: u16 = 4;
pub const OP_ERROR: u16 = 5;
pub const OP_OACK: u16 = 6;

/// Error codes from RFC 1350 and RFC 2347.
pub mod code {
    pub const NOT_DEFINED: u16 = 0;
    pub const FILE_NOT_FOUND: u16 = 1;
    pub const ACCESS_VIOLATION: u16 = 2;
    pub const DISK_FULL: u16 = 3;
    pub const ILLEGAL_OPERATION: u16 = 4;
    pub const UNKNOWN_TID: u16 = 5;
    pub const FILE_EXISTS: u16 = 6;
    pub const NO_SUCH_USER: u16 = 7;
    pub const OPTION_REFUSED: u16 = 8;
}

/// Transfer mode of a request. `mail` is obsolete and refused at decode time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Octet,
    Netascii,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Octet => "octet",
            Mode::Netascii => "netascii",
        }
    }
}

/// A read or write request with its options, in the order the client sent them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub filename: String,
    pub mode: Mode,
    pub options: Vec<(String, String)>,
}

impl Request {
    /// Value of an option, by case-insensitive name; the first one wins.
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet {
    Rrq(Request),
    Wrq(Request),
    Data { block: u16, data: Bytes },
    Ack { block: u16 },
    Error { code: u16, message: String },
    Oack { options: Vec<(String, String)> },
}

/// Why a datagram is not a valid TFTP packet. [`PacketError::reason`] is a
/// bounded label for metrics.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    #[error("packet shorter than its header ({len} bytes)")]
    Truncated { len: usize },
    #[error("unknown opcode {0}")]
    UnknownOpcode(u16),
    #[error("string field is not NUL-terminated")]
    Unterminated,
    #[error("string field is not valid UTF-8")]
    NotUtf8,
    #[error("empty filename")]
    EmptyFilename,
    #[error("unsupported transfer mode")]
    BadMode,
    #[error("option without a value")]
    OddOptions,
    #[error("option name or value not NUL-terminated or not UTF-8")]
    MalformedOption,
    #[error("trailing bytes after the packet")]
    Trailing,
}

impl PacketError {
    pub fn reason(&self) -> &'static str {
        match self {
            PacketError::Truncated { .. } => "truncated",
            PacketError::UnknownOpcode(_) => "unknown_opcode",
            PacketError::Unterminated => "unterminated",
            PacketError::NotUtf8 => "not_utf8",
            PacketError::EmptyFilename => "empty_filename",
            PacketError::BadMode => "bad_mode",
            PacketError::OddOptions => "odd_options",
            PacketError::MalformedOption => "malformed_option",
            PacketError::Trailing => "trailing",
        }
    }
}

/// Split NUL-terminated strings off the front of `buf`.
struct Strings<'a> {
    rest: &'a [u8],
}

impl<'a> Strings<'a> {
    fn next_str(&mut self) -> Result<&'a str, PacketError> {
        let end = self
            .rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(PacketError::Unterminated)?;
        let (s, rest) = self.rest.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        std::str::from_utf8(s).map_err(|_| PacketError::NotUtf8)
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

fn u16_at(buf: &[u8], at: usize) -> Option<u16> {
    let b = buf.get(at..at + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn decode_options(s: &mut Strings<'_>) -> Result<Vec<(String, String)>, PacketError> {
    let mut options = Vec::new();
    while !s.is_empty() {
        let name = s.next_str().map_err(|_| PacketError::MalformedOption)?;
        if s.is_empty() {
            return Err(PacketError::OddOptions);
        }
        let value = s.next_str().map_err(|_| PacketError::MalformedOption)?;
        options.push((name.to_string(), value.to_string()));
    }
    Ok(options)
}

fn decode_request(body: &[u8]) -> Result<Request, PacketError> {
    let mut s = Strings { rest: body };
    let filename = s.next_str()?;
    if filename.is_empty() {
        return Err(PacketError::EmptyFilename);
    }
    let mode = s.next_str()?;
    let mode = if mode.eq_ignore_ascii_case("octet") {
        Mode::Octet
    } else if mode.eq_ignore_ascii_case("netascii") {
        Mode::Netascii
    } else {
        return Err(PacketError::BadMode);
    };
    let options = decode_options(&mut s)?;
    Ok(Request {
        filename: filename.to_string(),
        mode,
        options,
    })
}

impl Packet {
    /// Decode one datagram. Never panics, whatever the bytes.
    pub fn decode(buf: &[u8]) -> Result<Packet, PacketError> {
        let op = u16_at(buf, 0).ok_or(PacketError::Truncated { len: buf.len() })?;
        let body = buf.get(2..).unwrap_or_default();
        match op {
            OP_RRQ => Ok(Packet::Rrq(decode_request(body)?)),
            OP_WRQ => Ok(Packet::Wrq(decode_request(body)?)),
            OP_DATA => {
                let block = u16_at(buf, 2).ok_or(PacketError::Truncated { len: buf.len() })?;
                let data = Bytes::copy_from_slice(buf.get(4..).unwrap_or_default());
                Ok(Packet::Data { block, data })
            }
            OP_ACK => {
                let block = u16_at(buf, 2).ok_or(PacketError::Truncated { len: buf.len() })?;
                if buf.len() > 4 {
                    return Err(PacketError::Trailing);
                }
                Ok(Packet::Ack { block })
            }
            OP_ERROR => {
                let code = u16_at(buf, 2).ok_or(PacketError::Truncated { len: buf.len() })?;
                // Some clients omit the message's terminating NUL: accept that.
                let raw = buf.get(4..).unwrap_or_default();
                let raw = match raw.iter().position(|&b| b == 0) {
                    Some(end) => raw.get(..end).unwrap_or_default(),
                    None => raw,
                };
                let message = String::from_utf8_lossy(raw).into_owned();
                Ok(Packet::Error { code, message })
            }
            OP_OACK => {
                let mut s = Strings { rest: body };
                Ok(Packet::Oack {
                    options: decode_options(&mut s)?,
                })
            }
            other => Err(PacketError::UnknownOpcode(other)),
        }
    }

    /// Encode into a fresh buffer.
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Packet::Rrq(r) | Packet::Wrq(r) => {
                let op = if matches!(self, Packet::Rrq(_)) {
                    OP_RRQ
                } else {
                    OP_WRQ
                };
                b.put_u16(op);
                put_str(&mut b, &r.filename);
                put_str(&mut b, r.mode.as_str());
                put_options(&mut b, &r.options);
            }
            Packet::Data { block, data } => return encode_data(*block, data),
            Packet::Ack { block } => {
                b.put_u16(OP_ACK);
                b.put_u16(*block);
            }
            Packet::Error { code, message } => return encode_error(*code, message),
            Packet::Oack { options } => {
                b.put_u16(OP_OACK);
                put_options(&mut b, options);
            }
        }
        b.freeze()
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_slice(s.as_bytes());
    b.put_u8(0);
}

fn put_options(b: &mut BytesMut, options: &[(String, String)]) {
    for (k, v) in options {
        put_str(b, k);
        put_str(b, v);
    }
}

/// A DATA packet, built without going through [`Packet`] (the hot path).
pub fn encode_data(block: u16, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + data.len());
    b.put_u16(OP_DATA);
    b.put_u16(block);
    b.put_slice(data);
    b.freeze()
}

/// An ERROR packet. NULs inside `message` are dropped so the packet stays
/// well-formed.
pub fn encode_error(code: u16, message: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u16(OP_ERROR);
    b.put_u16(code);
    b.extend(message.bytes().filter(|&c| c != 0));
    b.put_u8(0);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        "[^\u{0}]{0,40}"
    }

    fn nonempty() -> impl Strategy<Value = String> {
        "[^\u{0}]{1,40}"
    }

    fn options() -> impl Strategy<Value = Vec<(String, String)>> {
        prop::collection::vec((nonempty(), text()), 0..6)
    }

    fn request() -> impl Strategy<Value = Request> {
        (
            nonempty(),
            prop_oneof![Just(Mode::Octet), Just(Mode::Netascii)],
            options(),
        )
            .prop_map(|(filename, mode, options)| Request {
                filename,
                mode,
                options,
            })
    }

    fn packet() -> impl Strategy<Value = Packet> {
        prop_oneof![
            request().prop_map(Packet::Rrq),
            request().prop_map(Packet::Wrq),
            (any::<u16>(), prop::collection::vec(any::<u8>(), 0..600)).prop_map(|(block, data)| {
                Packet::Data {
                    block,
                    data: data.into(),
                }
            }),
            any::<u16>().prop_map(|block| Packet::Ack { block }),
            (any::<u16>(), text()).prop_map(|(code, message)| Packet::Error { code, message }),
            options().prop_map(|options| Packet::Oack { options }),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(p in packet()) {
            let bytes = p.encode();
            prop_assert_eq!(Packet::decode(&bytes), Ok(p));
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..700)) {
            let _ = Packet::decode(&bytes);
        }

        #[test]
        fn never_panics_on_near_valid_requests(
            op in 0u16..8,
            tail in prop::collection::vec(prop_oneof![Just(0u8), any::<u8>()], 0..64),
        ) {
            let mut b = op.to_be_bytes().to_vec();
            b.extend(tail);
            let _ = Packet::decode(&b);
        }
    }

    #[test]
    fn decodes_a_curl_style_request() {
        let raw = b"\x00\x01ipxe.efi\x00octet\x00tsize\x000\x00blksize\x001468\x00";
        let Ok(Packet::Rrq(r)) = Packet::decode(raw) else {
            panic!("not an RRQ")
        };
        assert_eq!(r.filename, "ipxe.efi");
        assert_eq!(r.mode, Mode::Octet);
        assert_eq!(r.option("BLKSIZE"), Some("1468"));
        assert_eq!(r.option("tsize"), Some("0"));
    }

    #[test]
    fn refuses_bad_requests() {
        assert_eq!(Packet::decode(b""), Err(PacketError::Truncated { len: 0 }));
        assert_eq!(
            Packet::decode(b"\x00"),
            Err(PacketError::Truncated { len: 1 })
        );
        assert_eq!(
            Packet::decode(b"\x00\x01file"),
            Err(PacketError::Unterminated)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01f\x00mail\x00"),
            Err(PacketError::BadMode)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01\x00octet\x00"),
            Err(PacketError::EmptyFilename)
        );
        assert_eq!(
            Packet::decode(b"\x00\x01f\x00octet\x00blksize\x00"),
            Err(PacketError::OddOptions)
        );
        assert_eq!(
            Packet::decode(b"\x00\x09"),
            Err(PacketError::UnknownOpcode(9))
        );
        assert_eq!(
            Packet::decode(b"\x00\x04\x00\x01x"),
            Err(PacketError::Trailing)
        );
    }

    #[test]
    fn error_without_terminator_is_accepted() {
        assert_eq!(
            Packet::decode(b"\x00\x05\x00\x08tsize probe"),
            Ok(Packet::Error {
                code: 8,
                message: "tsize probe".into()
            })
        );
    }
}
