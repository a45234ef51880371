//! Turning a Machine's `spec.bmc` plus its credentials Secret into a driver.
//! The [`BmcConnector`] trait is the seam controllers use (tests inject
//! [`super::FakeConnector`]); [`StoreConnector`] reads the Secret through the
//! [`Store`] and builds a Redfish (or, later, IPMI) driver.
//!
//! Owns: address parsing into a driver choice, TLS choice (CA bundle by
//! default, insecure only when the Machine says so), Secret decoding.
//! Must not: log or return the password, or talk to the BMC itself.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;

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
}

impl StoreConnector {
    pub fn new(store: Arc<dyn Store>, timing: Timing) -> StoreConnector {
        StoreConnector { store, timing }
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
        connect_spec(&machine.spec.bmc, creds, self.timing)
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
pub fn connect_spec(
    spec: &BmcSpec,
    creds: Credentials,
    timing: Timing,
) -> Result<Box<dyn Bmc>, BmcError> {
    connect_address(&spec.address, creds, &tls_mode(spec)?, timing)
}

/// Build a driver from an address URL (`redfish+https://…`, `ipmi://…`).
pub fn connect_address(
    address: &str,
    creds: Credentials,
    tls: &TlsMode,
    timing: Timing,
) -> Result<Box<dyn Bmc>, BmcError> {
    match parse_bmc_address(address).map_err(BmcError::Config)? {
        BmcAddress::Redfish { base, system_path } => {
            if base.scheme() == "http" && !matches!(tls, TlsMode::SystemRoots) {
                tracing::debug!(%base, "TLS settings ignored for plain http");
            }
            Ok(Box::new(RedfishBmc::new(
                base,
                system_path,
                creds,
                tls,
                timing,
            )?))
        }
        // The IPMI driver lands separately; until then say so plainly.
        BmcAddress::Ipmi { host, port } => Err(BmcError::Unsupported {
            address: format!("ipmi://{host}:{port}"),
            what: "IPMI (the IPMI driver is not built into this version yet)".into(),
        }),
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

    #[test]
    fn ipmi_is_a_clear_unsupported_until_its_driver_lands() {
        let spec = MachineSpec {
            bmc: BmcSpec {
                address: "ipmi://10.0.0.9:623".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = connect_spec(&spec.bmc, Credentials::new("u", "p"), Timing::default())
            .err()
            .unwrap();
        assert_eq!(e.reason(), "Unsupported");
        assert!(e.to_string().contains("IPMI"));
    }

    #[test]
    fn bad_address_is_a_config_error() {
        let e = connect_address(
            "ftp://x",
            Credentials::new("u", "p"),
            &TlsMode::SystemRoots,
            Timing::default(),
        )
        .err()
        .unwrap();
        assert_eq!(e.reason(), "BmcConfigError");
    }
}
