//! Typed errors of the IPMI client. Every malformed, unexpected or
//! unauthenticated packet becomes one of these; none carries a secret.

use std::time::Duration;

use crate::bmc::BmcError;

/// What went wrong in the RMCP+ session or a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IpmiError {
    #[error("packet truncated: {what} needs {need} bytes, got {got}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    #[error("not an IPMI packet: {0}")]
    NotIpmi(&'static str),
    #[error("bad {0} checksum")]
    BadChecksum(&'static str),
    #[error("unexpected payload type {got:#04x} (waiting for {expected:#04x})")]
    UnexpectedPayload { expected: u8, got: u8 },
    #[error("packet for session {got:#010x}, ours is {expected:#010x}")]
    WrongSession { expected: u32, got: u32 },
    #[error("unauthenticated packet inside an authenticated session")]
    Unauthenticated,
    #[error("integrity check value does not match")]
    IntegrityMismatch,
    #[error("bad confidentiality padding")]
    BadPadding,
    #[error("session sequence number {seq} replayed or too old")]
    Replay { seq: u32 },
    #[error("reply for request sequence {got}, waiting for {expected}")]
    OutOfSequence { expected: u8, got: u8 },
    #[error(
        "reply to netfn {netfn:#04x} cmd {cmd:#04x}, waiting for netfn {want_netfn:#04x} cmd {want_cmd:#04x}"
    )]
    UnexpectedResponse {
        netfn: u8,
        cmd: u8,
        want_netfn: u8,
        want_cmd: u8,
    },
    #[error("message tag {got} does not match {expected}")]
    WrongTag { expected: u8, got: u8 },
    #[error("{step} answered RMCP+ status {code:#04x} ({})", rakp_status_text(*code))]
    RakpStatus { step: &'static str, code: u8 },
    #[error("RAKP 2 key exchange code does not match: wrong password or user")]
    AuthCodeMismatch,
    #[error("RAKP 4 integrity check value does not match")]
    Rakp4Mismatch,
    #[error("BMC chose algorithms {auth}/{integrity}/{conf}, not the requested cipher suite")]
    AlgorithmMismatch { auth: u8, integrity: u8, conf: u8 },
    #[error("the BMC does not support IPMI 2.0 (RMCP+)")]
    NoIpmi2,
    #[error("netfn {netfn:#04x} cmd {cmd:#04x} failed with completion code {code:#04x}")]
    Completion { netfn: u8, cmd: u8, code: u8 },
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error("username longer than 16 bytes or password longer than 20 bytes")]
    CredentialsTooLong,
    #[error("unsupported cipher suite {0} (3 and 17 are supported)")]
    UnsupportedSuite(u8),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("socket: {0}")]
    Io(String),
}

impl IpmiError {
    /// A packet that does not belong to the exchange in progress (late,
    /// duplicated, for another request): the driver drops it and keeps
    /// waiting, instead of failing the request.
    pub fn is_stray(&self) -> bool {
        matches!(
            self,
            IpmiError::UnexpectedPayload { .. }
                | IpmiError::WrongSession { .. }
                | IpmiError::Replay { .. }
                | IpmiError::OutOfSequence { .. }
                | IpmiError::UnexpectedResponse { .. }
                | IpmiError::WrongTag { .. }
        )
    }

    /// The BMC refused the proposed cipher suite (so another may work).
    pub fn is_suite_refused(&self) -> bool {
        matches!(
            self,
            IpmiError::RakpStatus {
                code: 0x04..=0x07 | 0x10 | 0x11,
                ..
            } | IpmiError::AlgorithmMismatch { .. }
        )
    }

    /// A short label for metrics (bounded set).
    pub fn label(&self) -> &'static str {
        match self {
            IpmiError::Truncated { .. } => "truncated",
            IpmiError::NotIpmi(_) => "not_ipmi",
            IpmiError::BadChecksum(_) => "checksum",
            IpmiError::UnexpectedPayload { .. } => "unexpected_payload",
            IpmiError::WrongSession { .. } => "wrong_session",
            IpmiError::Unauthenticated => "unauthenticated",
            IpmiError::IntegrityMismatch => "integrity",
            IpmiError::BadPadding => "padding",
            IpmiError::Replay { .. } => "replay",
            IpmiError::OutOfSequence { .. } => "out_of_sequence",
            IpmiError::UnexpectedResponse { .. } => "unexpected_response",
            IpmiError::WrongTag { .. } => "wrong_tag",
            IpmiError::RakpStatus { .. } => "rakp_status",
            IpmiError::AuthCodeMismatch => "auth_code",
            IpmiError::Rakp4Mismatch => "rakp4",
            IpmiError::AlgorithmMismatch { .. } => "algorithms",
            IpmiError::NoIpmi2 => "no_ipmi2",
            IpmiError::Completion { .. } => "completion_code",
            IpmiError::Malformed { .. } => "malformed",
            IpmiError::CredentialsTooLong => "credentials",
            IpmiError::UnsupportedSuite(_) => "suite",
            IpmiError::Timeout(_) => "timeout",
            IpmiError::Io(_) => "io",
        }
    }

    /// The driver-neutral error the `Bmc` trait returns.
    pub fn into_bmc_error(self, address: &str) -> BmcError {
        let address = address.to_string();
        match self {
            IpmiError::AuthCodeMismatch => BmcError::BadCredentials { address },
            e @ IpmiError::CredentialsTooLong => BmcError::Config(e.to_string()),
            // Unauthorized name, unauthorized GUID, invalid integrity check
            // value (our RAKP 3 code was computed from a wrong password).
            IpmiError::RakpStatus {
                code: 0x0d..=0x0f, ..
            } => BmcError::BadCredentials { address },
            IpmiError::RakpStatus {
                code: 0x04..=0x07 | 0x10 | 0x11,
                step,
            } => BmcError::Unsupported {
                address,
                what: format!("the requested cipher suite ({step})"),
            },
            e @ (IpmiError::AlgorithmMismatch { .. }
            | IpmiError::UnsupportedSuite(_)
            | IpmiError::NoIpmi2) => BmcError::Unsupported {
                address,
                what: e.to_string(),
            },
            IpmiError::Timeout(after) => BmcError::Timeout { address, after },
            IpmiError::Io(detail) => BmcError::Unreachable { address, detail },
            e => BmcError::Protocol {
                address,
                detail: e.to_string(),
            },
        }
    }
}

/// RMCP+ status codes (IPMI 2.0 table 13-15).
pub fn rakp_status_text(code: u8) -> &'static str {
    match code {
        0x00 => "no errors",
        0x01 => "insufficient resources to create a session",
        0x02 => "invalid session ID",
        0x03 => "invalid payload type",
        0x04 => "invalid authentication algorithm",
        0x05 => "invalid integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        0x08 => "inactive session ID",
        0x09 => "invalid role",
        0x0a => "unauthorized role or privilege level requested",
        0x0b => "insufficient resources to create a session at the requested role",
        0x0c => "invalid name length",
        0x0d => "unauthorized name",
        0x0e => "unauthorized GUID",
        0x0f => "invalid integrity check value",
        0x10 => "invalid confidentiality algorithm",
        0x11 => "no cipher suite match with proposed security algorithms",
        0x12 => "illegal or unrecognized parameter",
        _ => "unknown status",
    }
}
