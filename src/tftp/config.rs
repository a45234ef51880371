//! TFTP configuration (section `tftp:` of the config file): the wire type
//! read from YAML, and [`TftpSettings`] (`TryFrom<&TftpConfig>`), the
//! checked values the server runs with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::session::{Limits, MAX_BLKSIZE, MIN_BLKSIZE};

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TftpConfig {
    /// Address of the listening socket (port 69 by RFC 1350).
    pub listen: SocketAddr,
    /// Directory files are served from (read-only).
    pub root: PathBuf,
    /// Transfers in flight at once; requests beyond get no answer: the
    /// client retransmits its request after its timeout and is served once
    /// a slot frees (an ERROR would end a firmware's boot attempt instead).
    pub max_transfers: usize,
    /// Transfers in flight at once from one client address (any port),
    /// within `maxTransfers`; requests beyond get no answer, like a busy
    /// server's (counted as `client_busy`).
    pub max_transfers_per_client: usize,
    /// Largest `timeout` option (RFC 2349, 1..255 s) a client may ask;
    /// more is not acknowledged and the server's `timeoutMs` applies.
    pub max_client_timeout_seconds: u64,
    /// ERROR replies to refused requests (malformed, not found, forbidden,
    /// writes) per second, all clients together: they go to addresses
    /// nobody verified. A refusal over the budget is not answered; the
    /// client retransmits and is answered once the budget refills.
    pub error_replies_per_second: u32,
    /// Refusals answered at once before the rate applies.
    pub error_reply_burst: u32,
    /// First retransmission timeout when the client does not negotiate one.
    pub timeout_ms: u64,
    /// Ceiling of the timeout after exponential backoff.
    pub max_timeout_ms: u64,
    /// Retransmissions without progress before a client counts as gone.
    pub max_retries: u32,
    /// Largest `blksize` granted (RFC 2348 allows up to 65464).
    pub max_blksize: u16,
    /// Largest `windowsize` granted (RFC 7440).
    pub max_windowsize: u16,
    /// How long transfers in flight may finish after shutdown begins.
    pub drain_ms: u64,
    /// Threads of the TFTP server's own runtime (1: one thread, a
    /// current-thread runtime); 0 runs it on the process's shared runtime.
    pub threads: usize,
}

impl Default for TftpConfig {
    fn default() -> Self {
        TftpConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 69)),
            root: PathBuf::from("boot-assets"),
            max_transfers: 4096,
            max_transfers_per_client: 8,
            max_client_timeout_seconds: super::session::MAX_CLIENT_TIMEOUT,
            error_replies_per_second: 200,
            error_reply_burst: 200,
            timeout_ms: 1000,
            max_timeout_ms: 8000,
            max_retries: 5,
            max_blksize: MAX_BLKSIZE,
            max_windowsize: 64,
            drain_ms: 5000,
            threads: 1,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("tftp config: {field}: {message}")]
pub struct ConfigError {
    pub field: &'static str,
    pub message: String,
}

/// What the TFTP server runs with: [`TftpConfig`] checked, durations typed.
#[derive(Clone, Debug)]
pub struct TftpSettings {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub max_transfers: usize,
    pub max_transfers_per_client: usize,
    pub error_replies_per_second: u32,
    pub error_reply_burst: u32,
    pub drain: Duration,
    pub threads: usize,
    /// Per-session timeouts, retries and option ceilings.
    pub limits: Limits,
}

impl TryFrom<&TftpConfig> for TftpSettings {
    type Error = ConfigError;

    fn try_from(c: &TftpConfig) -> Result<TftpSettings, ConfigError> {
        Ok(TftpSettings {
            listen: c.listen,
            root: c.root.clone(),
            max_transfers: c.max_transfers,
            max_transfers_per_client: c.max_transfers_per_client,
            error_replies_per_second: c.error_replies_per_second,
            error_reply_burst: c.error_reply_burst,
            drain: Duration::from_millis(c.drain_ms),
            threads: c.threads,
            limits: c.limits()?,
        })
    }
}

impl TftpConfig {
    /// Check the values and build the per-session limits.
    fn limits(&self) -> Result<Limits, ConfigError> {
        let err = |field, message: &str| ConfigError {
            field,
            message: message.to_string(),
        };
        if self.max_transfers == 0 {
            return Err(err("maxTransfers", "must be at least 1"));
        }
        if self.max_transfers_per_client == 0 {
            return Err(err("maxTransfersPerClient", "must be at least 1"));
        }
        if !(1..=255).contains(&self.max_client_timeout_seconds) {
            return Err(err(
                "maxClientTimeoutSeconds",
                "must be between 1 and 255 (RFC 2349)",
            ));
        }
        if self.timeout_ms == 0 || self.max_timeout_ms < self.timeout_ms {
            return Err(err(
                "timeoutMs",
                "must be at least 1 and at most maxTimeoutMs",
            ));
        }
        if !(MIN_BLKSIZE..=MAX_BLKSIZE).contains(&self.max_blksize) {
            return Err(err("maxBlksize", "must be between 8 and 65464"));
        }
        if self.error_replies_per_second > 0 && self.error_reply_burst == 0 {
            return Err(err(
                "errorReplyBurst",
                "must be at least 1 when errorRepliesPerSecond is above 0",
            ));
        }
        if self.max_windowsize == 0 {
            return Err(err("maxWindowsize", "must be at least 1"));
        }
        Ok(Limits {
            timeout: Duration::from_millis(self.timeout_ms),
            max_timeout: Duration::from_millis(self.max_timeout_ms),
            max_retries: self.max_retries,
            max_blksize: self.max_blksize,
            max_windowsize: self.max_windowsize,
            max_client_timeout: self.max_client_timeout_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_yaml_overrides_them() {
        assert!(TftpSettings::try_from(&TftpConfig::default()).is_ok());
        let c: TftpConfig =
            serde_yaml::from_str("listen: 127.0.0.1:6969\nmaxBlksize: 1468\n").unwrap();
        assert_eq!(c.listen.port(), 6969);
        let s = TftpSettings::try_from(&c).unwrap();
        assert_eq!(s.limits.max_blksize, 1468);
        assert_eq!(s.drain, Duration::from_millis(5000));
        assert_eq!(c.threads, 1);
        let c: TftpConfig = serde_yaml::from_str("threads: 0\n").unwrap();
        assert_eq!(c.threads, 0);
        assert!(serde_yaml::from_str::<TftpConfig>("bogus: 1\n").is_err());
        let bad = TftpConfig {
            max_blksize: 4,
            ..TftpConfig::default()
        };
        let e = TftpSettings::try_from(&bad).unwrap_err();
        assert_eq!(e.field, "maxBlksize");
    }

    #[test]
    fn per_client_share_and_client_timeout_are_bounded() {
        for (yaml, field) in [
            ("maxTransfersPerClient: 0\n", "maxTransfersPerClient"),
            ("maxClientTimeoutSeconds: 0\n", "maxClientTimeoutSeconds"),
            ("maxClientTimeoutSeconds: 256\n", "maxClientTimeoutSeconds"),
        ] {
            let c: TftpConfig = serde_yaml::from_str(yaml).unwrap();
            let e = TftpSettings::try_from(&c).unwrap_err();
            assert_eq!(e.field, field, "{yaml}");
        }
        let c: TftpConfig = serde_yaml::from_str("maxClientTimeoutSeconds: 30\n").unwrap();
        let s = TftpSettings::try_from(&c).unwrap();
        assert_eq!(s.limits.max_client_timeout, 30);
    }
}
