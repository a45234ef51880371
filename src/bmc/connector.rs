//! Turning a Machine's `spec.bmc` plus its credentials Secret into a driver.
//! The [`BmcConnector`] trait is the seam controllers use (tests inject
//! [`super::FakeConnector`]); [`StoreConnector`] reads the Secret through the
//! [`Store`] and builds a Redfish or IPMI driver.
//!
//! Owns: address parsing into a driver choice, TLS choice (CA bundle by
//! default, insecure only when the Machine says so), Secret decoding.
//! Must not: log or return the password, or talk to the BMC itself.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;

use super::ipmi::{CipherSuite, IpmiBmc};
use super::quirks::QuirkTable;
use super::redfish::{RedfishBmc, TlsMode};
use super::{Bmc, BmcError, Credentials, Timing};
use crate::api::validate::{BmcAddress, parse_bmc_address};
use crate::api::{BmcSpec, Machine};
use crate::store::{Store, TypedStore};

/// Secret keys holding the BMC login.
pub const USERNAME_KEY: &str = "username";
pub const PASSWORD_KEY: &str = "password";

/// Builds a connected driver for a Machine.
#[async_trait]
pub trait BmcConnector: Send + Sync {
    async fn connect(&self, machine: &Machine) -> Result<Box<dyn Bmc>, BmcError>;
}

/// The production connector: credentials from the store's Secrets.
pub struct StoreConnector {
    store: Arc<dyn Store>,
    timing: Timing,
    quirks: Arc<QuirkTable>,
}

impl StoreConnector {
    /// A connector matching the built-in quirks only.
    pub fn new(store: Arc<dyn Store>, timing: Timing) -> StoreConnector {
        StoreConnector {
            store,
            timing,
            quirks: Arc::new(QuirkTable::builtin()),
        }
    }

    /// Match drivers against `quirks` (built-in plus the config's).
    pub fn with_quirks(mut self, quirks: Arc<QuirkTable>) -> StoreConnector {
        self.quirks = quirks;
        self
    }
}

#[async_trait]
impl BmcConnector for StoreConnector {
    async fn connect(&self, machine: &Machine) -> Result<Box<dyn Bmc>, BmcError> {
        let ns = machine
            .metadata
            .namespace
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(crate::store::DEFAULT_NAMESPACE);
        let secret_name = &machine.spec.bmc.credentials_secret_ref.name;
        let secret: Secret = self
            .store
            .get_obj(ns, secret_name)
            .await
            .map_err(|e| BmcError::Config(format!("credentials Secret: {e}")))?;
        let creds = credentials_from_secret(&secret, ns, secret_name)?;
        connect_spec(&machine.spec.bmc, creds, self.timing, &self.quirks).await
    }
}

/// Read `username` and `password` from a Secret (`data`, else `stringData`).
/// Errors name the Secret and the key, never a value.
pub fn credentials_from_secret(
    secret: &Secret,
    namespace: &str,
    name: &str,
) -> Result<Credentials, BmcError> {
    let get = |key: &str| -> Result<String, BmcError> {
        if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
            return String::from_utf8(v.0.clone()).map_err(|_| {
                BmcError::Config(format!(
                    "Secret {namespace}/{name} key {key:?} is not UTF-8"
                ))
            });
        }
        if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone());
        }
        Err(BmcError::Config(format!(
            "Secret {namespace}/{name} has no key {key:?}"
        )))
    };
    let username = get(USERNAME_KEY)?;
    let password = get(PASSWORD_KEY)?;
    Ok(Credentials::new(
        username.trim_end_matches('\n'),
        password.trim_end_matches('\n'),
    ))
}

/// The TLS choice a BmcSpec makes: its CA bundle, the explicit insecure
/// flag, or the system's roots.
pub fn tls_mode(spec: &BmcSpec) -> Result<TlsMode, BmcError> {
    match (&spec.ca_bundle, spec.insecure_skip_verify) {
        (Some(_), true) => Err(BmcError::Config(
            "caBundle and insecureSkipVerify are both set; choose one".into(),
        )),
        (Some(pem), false) => Ok(TlsMode::CaBundle(pem.clone())),
        (None, true) => Ok(TlsMode::Insecure),
        (None, false) => Ok(TlsMode::SystemRoots),
    }
}

/// Build a driver from a BmcSpec and credentials (no Secret lookup).
pub async fn connect_spec(
    spec: &BmcSpec,
    creds: Credentials,
    timing: Timing,
    quirks: &Arc<QuirkTable>,
) -> Result<Box<dyn Bmc>, BmcError> {
    let opts = ConnectOptions {
        tls: tls_mode(spec)?,
        cipher_suite: spec.cipher_suite,
        quirks: quirks.clone(),
    };
    connect_address(&spec.address, creds, &opts, timing).await
}

/// How to reach a BMC beyond its address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Redfish over https.
    pub tls: TlsMode,
    /// IPMI cipher suite (3 or 17); 17 when `None`.
    pub cipher_suite: Option<u8>,
    /// Quirk table the driver matches the BMC against.
    pub quirks: Arc<QuirkTable>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            tls: TlsMode::SystemRoots,
            cipher_suite: None,
            quirks: Arc::new(QuirkTable::builtin()),
        }
    }
}

impl From<TlsMode> for ConnectOptions {
    fn from(tls: TlsMode) -> Self {
        ConnectOptions {
            tls,
            ..ConnectOptions::default()
        }
    }
}

/// Build a driver from an address URL (`redfish+https://…`, `ipmi://…`).
/// Redfish connects lazily (on the first call); IPMI opens its session here.
pub async fn connect_address(
    address: &str,
    creds: Credentials,
    opts: &ConnectOptions,
    timing: Timing,
) -> Result<Box<dyn Bmc>, BmcError> {
    let tls = &opts.tls;
    match parse_bmc_address(address).map_err(|e| BmcError::Config(e.to_string()))? {
        BmcAddress::Redfish { base, system_path } => {
            if base.scheme() == "http" && !matches!(tls, TlsMode::SystemRoots) {
                tracing::debug!(%base, "TLS settings ignored for plain http");
            }
            Ok(Box::new(
                RedfishBmc::new(base, system_path, creds, tls, timing)?
                    .with_quirks(opts.quirks.clone()),
            ))
        }
        BmcAddress::Ipmi { host, port } => {
            let suite = CipherSuite::try_from(opts.cipher_suite.unwrap_or(17)).map_err(|_| {
                BmcError::Config(format!(
                    "unsupported IPMI cipher suite {:?} (use 3 or 17)",
                    opts.cipher_suite
                ))
            })?;
            Ok(Box::new(
                IpmiBmc::connect(&host, port, creds, suite, timing)
                    .await?
                    .with_quirks(opts.quirks.clone()),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MachineSpec;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(user: &str, pass: &str) -> Secret {
        let mut data = BTreeMap::new();
        data.insert("username".into(), ByteString(user.as_bytes().to_vec()));
        data.insert("password".into(), ByteString(pass.as_bytes().to_vec()));
        Secret {
            data: Some(data),
            ..Default::default()
        }
    }

    #[test]
    fn reads_credentials_and_never_shows_the_password() {
        let c = credentials_from_secret(&secret("admin", "s3cr3t-pw"), "default", "bmc").unwrap();
        assert_eq!(c.username, "admin");
        assert_eq!(c.password(), "s3cr3t-pw");
        assert!(!format!("{c:?}").contains("s3cr3t-pw"));
    }

    #[test]
    fn missing_key_names_the_key_not_a_value() {
        let mut s = secret("admin", "s3cr3t-pw");
        if let Some(d) = s.data.as_mut() {
            d.remove("username");
        }
        let e = credentials_from_secret(&s, "default", "bmc").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"username\""), "{msg}");
        assert!(!msg.contains("s3cr3t-pw"));
    }

    #[test]
    fn tls_is_verified_unless_the_machine_says_otherwise() {
        let mut spec = BmcSpec::default();
        assert_eq!(tls_mode(&spec).unwrap(), TlsMode::SystemRoots);
        spec.ca_bundle = Some("PEM".into());
        assert_eq!(tls_mode(&spec).unwrap(), TlsMode::CaBundle("PEM".into()));
        spec.insecure_skip_verify = true;
        assert!(tls_mode(&spec).is_err());
        spec.ca_bundle = None;
        assert_eq!(tls_mode(&spec).unwrap(), TlsMode::Insecure);
    }

    #[tokio::test]
    async fn ipmi_addresses_get_the_ipmi_driver_with_a_valid_suite() {
        let spec = MachineSpec {
            bmc: BmcSpec {
                address: "ipmi://127.0.0.1:9".into(),
                cipher_suite: Some(5),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = connect_spec(
            &spec.bmc,
            Credentials::new("u", "p"),
            Timing::default(),
            &Arc::new(QuirkTable::builtin()),
        )
        .await
        .err()
        .unwrap();
        assert_eq!(e.reason(), "BmcConfigError");
        assert!(e.to_string().contains("cipher suite"), "{e}");
    }

    #[tokio::test]
    async fn bad_address_is_a_config_error() {
        let e = connect_address(
            "ftp://x",
            Credentials::new("u", "p"),
            &ConnectOptions::default(),
            Timing::default(),
        )
        .await
        .err()
        .unwrap();
        assert_eq!(e.reason(), "BmcConfigError");
    }
}
