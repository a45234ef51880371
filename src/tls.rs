//! TLS for the API server: the data directory's own certificate authority,
//! the server certificate it signs, and the accept loop that serves the API
//! over HTTPS with rustls (ring provider).
//!
//! On first start `serve` creates `ca.crt`/`ca.key` (kept across starts, so
//! clients that trust the CA keep working). The server certificate
//! (`server.crt`/`server.key`) is signed anew on every start for the names
//! the server answers to (the listen address, localhost, the advertised
//! names), so a changed `--listen` or `--advertise-address` never leaves a
//! stale certificate behind. Every file is mode 0600. `--tls-cert` and
//! `--tls-key` replace the generated pair with a user's own.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::datadir::{CA_CERT_FILE, CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE};

/// How long a client gets to finish the TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// The CA's subject; the same on every start, so a re-signed server
/// certificate chains to the stored CA.
const CA_NAME: &str = "metalherd CA";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {detail}", path.display())]
    BadPem { path: PathBuf, detail: String },
    #[error("certificate generation: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A PEM certificate chain and its key, as the server presents them.
#[derive(Clone, Debug)]
pub struct ServerIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

/// The names (DNS names or IP addresses) a server certificate should cover:
/// the listen address (unless it is a wildcard), localhost and the loopback
/// addresses, and `extra` (advertised names).
pub fn server_names(listen: IpAddr, extra: &[String]) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !listen.is_unspecified() {
        names.push(listen.to_string());
    }
    for n in extra {
        let n = n.trim();
        if !n.is_empty() {
            names.push(n.to_string());
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Load the data directory's CA (creating it on first start) and sign a
/// fresh server certificate for `names`; both are written to `dir`.
pub fn ensure_generated(dir: &Path, names: &[String]) -> Result<ServerIdentity, TlsError> {
    let ca_key = load_or_create_ca(dir)?;
    let issuer = rcgen::Issuer::new(ca_params(), ca_key);
    let mut params = rcgen::CertificateParams::new(names.to_vec())?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "metalherd");
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    set_validity(&mut params, 1);
    let key = rcgen::KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let identity = ServerIdentity {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    };
    write_private(&dir.join(SERVER_KEY_FILE), &identity.key_pem)?;
    write_private(&dir.join(SERVER_CERT_FILE), &identity.cert_pem)?;
    Ok(identity)
}

/// A user's own certificate chain and key (`--tls-cert`, `--tls-key`).
pub fn load_user(cert: &Path, key: &Path) -> Result<ServerIdentity, TlsError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| TlsError::Read {
            path: p.to_path_buf(),
            source,
        })
    };
    Ok(ServerIdentity {
        cert_pem: read(cert)?,
        key_pem: read(key)?,
    })
}

/// The rustls server configuration for `identity` (HTTP/2 and HTTP/1.1).
pub fn server_config(identity: &ServerIdentity) -> Result<rustls::ServerConfig, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: &str, e: rustls::pki_types::pem::Error| TlsError::BadPem {
        path: PathBuf::from(what),
        detail: e.to_string(),
    };
    let certs = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("certificate", e))?;
    if certs.is_empty() {
        return Err(TlsError::BadPem {
            path: PathBuf::from("certificate"),
            detail: "no certificate in the file".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes())
        .map_err(|e| bad("private key", e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Serve `app` over TLS on `listener` until `cancel`; then stop accepting
/// and give open connections `drain` to finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: rustls::ServerConfig,
    app: axum::Router,
    cancel: CancellationToken,
    drain: Duration,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let graceful = GracefulShutdown::new();
    let builder = Arc::new(Builder::new(TokioExecutor::new()));
    while let Some((tcp, peer)) = crate::accept::next(&listener, &cancel).await {
        let acceptor = acceptor.clone();
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let span = tracing::debug_span!("api connection", %peer);
        tokio::spawn(
            async move {
                let tls = match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake timed out");
                        return;
                    }
                };
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
                if let Err(e) = watcher.watch(conn.into_owned()).await {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            }
            .instrument(span),
        );
    }
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("open API connections did not end within {drain:?}");
    }
    Ok(())
}

/// The CA's parameters: fixed, so the stored key re-creates the same issuer.
fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CA_NAME);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// The CA key from `dir`, or a new CA (key and certificate) written there.
fn load_or_create_ca(dir: &Path) -> Result<rcgen::KeyPair, TlsError> {
    let key_path = dir.join(CA_KEY_FILE);
    let cert_path = dir.join(CA_CERT_FILE);
    match std::fs::read_to_string(&key_path) {
        Ok(pem) if cert_path.exists() => {
            return rcgen::KeyPair::from_pem(&pem).map_err(|e| TlsError::BadPem {
                path: key_path,
                detail: e.to_string(),
            });
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(TlsError::Read {
                path: key_path,
                source,
            });
        }
    }
    let key = rcgen::KeyPair::generate()?;
    let mut params = ca_params();
    set_validity(&mut params, 10);
    let cert = params.self_signed(&key)?;
    write_private(&key_path, &key.serialize_pem())?;
    write_private(&cert_path, &cert.pem())?;
    Ok(key)
}

/// From yesterday to `years` from now (whole days, UTC).
fn set_validity(params: &mut rcgen::CertificateParams, years: i16) {
    let today = jiff::Zoned::now()
        .with_time_zone(jiff::tz::TimeZone::UTC)
        .date();
    let yesterday = today.yesterday().unwrap_or(today);
    let ymd = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
    };
    let until = today
        .checked_add(jiff::Span::new().years(years))
        .unwrap_or(today);
    params.not_before = ymd(yesterday);
    params.not_after = ymd(until);
}

/// Write `text` to `path` with mode 0600 (replacing any older file),
/// atomically ([`crate::private_file`]).
fn write_private(path: &Path, text: &str) -> Result<(), TlsError> {
    crate::private_file::replace(path, text.as_bytes()).map_err(|source| TlsError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustls::client::danger::ServerCertVerifier;

    #[test]
    fn ca_is_kept_and_server_certificate_chains_to_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let names = server_names("127.0.0.1".parse().unwrap(), &["mh.example".into()]);
        let first = ensure_generated(d.path(), &names).unwrap();
        let ca1 = std::fs::read_to_string(d.path().join(CA_CERT_FILE)).unwrap();
        let second = ensure_generated(d.path(), &names).unwrap();
        let ca2 = std::fs::read_to_string(d.path().join(CA_CERT_FILE)).unwrap();
        assert_eq!(ca1, ca2, "the CA survives a restart");
        assert_ne!(first.key_pem, second.key_pem);
        for f in [CA_CERT_FILE, CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE] {
            let mode = std::fs::metadata(d.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        // A rustls client trusting only the CA accepts the server's chain
        // for every name.
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca1.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let chain: Vec<_> =
            rustls::pki_types::CertificateDer::pem_slice_iter(second.cert_pem.as_bytes())
                .map(|c| c.unwrap())
                .collect();
        for n in ["localhost", "127.0.0.1", "mh.example"] {
            let name = rustls::pki_types::ServerName::try_from(n.to_string()).unwrap();
            verifier
                .verify_server_cert(
                    &chain[0],
                    &chain[1..],
                    &name,
                    &[],
                    rustls::pki_types::UnixTime::now(),
                )
                .unwrap_or_else(|e| panic!("{n}: {e}"));
        }
        let other = rustls::pki_types::ServerName::try_from("other.example").unwrap();
        assert!(
            verifier
                .verify_server_cert(
                    &chain[0],
                    &[],
                    &other,
                    &[],
                    rustls::pki_types::UnixTime::now()
                )
                .is_err()
        );
        assert!(server_config(&second).is_ok());
    }

    #[test]
    fn wildcard_listen_is_not_a_name() {
        let n = server_names("0.0.0.0".parse().unwrap(), &["10.0.0.1".into(), "".into()]);
        assert_eq!(n, vec!["localhost", "127.0.0.1", "::1", "10.0.0.1"]);
    }
}
