//! The TLS check of a Redfish BMC: fetch its certificate chain (accepting
//! anything, to see it), then verify it the way the driver would (system
//! roots, or the CA bundle given) and say exactly what to put in the
//! Machine's `spec.bmc`: nothing, a `caBundle`, or, as a last resort,
//! `insecureSkipVerify: true`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::Serialize;
use sha2::Digest;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsReport {
    /// DNS names in the leaf certificate's subjectAltName.
    pub names: Vec<String>,
    pub chain_length: usize,
    pub self_signed: bool,
    /// SHA-256 of the top certificate of the chain (compare it on the
    /// BMC's console before trusting it).
    pub top_sha256: String,
    /// PEM of the top certificate: the `caBundle` candidate.
    pub top_pem: String,
    /// Verification result against the trust the driver would use.
    pub verified: bool,
    pub verify_error: Option<String>,
    pub advice: String,
}

#[derive(Debug)]
struct Recorder {
    chain: Mutex<Vec<Vec<u8>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Ok(mut c) = self.chain.lock() {
            c.push(end_entity.to_vec());
            c.extend(intermediates.iter().map(|i| i.to_vec()));
        }
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// Why no certificate chain could be read from the BMC (a failed
/// verification is not one: it is part of the report).
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error(transparent)]
    Config(rustls::Error),
    #[error("server name {host:?}: {source}")]
    ServerName {
        host: String,
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("connect to {host}:{port} timed out")]
    ConnectTimeout { host: String, port: u16 },
    #[error("connect to {host}:{port}: {source}")]
    Connect {
        host: String,
        port: u16,
        source: std::io::Error,
    },
    #[error("TLS handshake timed out")]
    HandshakeTimeout,
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
    #[error("the BMC sent no certificate")]
    NoCertificate,
}

/// Inspect the TLS of `host:port`. `ca_pem`: the CA bundle the operator
/// means to use (else the system's roots).
pub async fn inspect(
    host: &str,
    port: u16,
    ca_pem: Option<&str>,
    timeout: Duration,
) -> Result<TlsReport, InspectError> {
    crate::bmc::redfish::client::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let recorder = Arc::new(Recorder {
        chain: Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(InspectError::Config)?
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    let name =
        ServerName::try_from(host.to_string()).map_err(|source| InspectError::ServerName {
            host: host.to_string(),
            source,
        })?;
    let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| InspectError::ConnectTimeout {
            host: host.to_string(),
            port,
        })?
        .map_err(|source| InspectError::Connect {
            host: host.to_string(),
            port,
            source,
        })?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(timeout, connector.connect(name.clone(), tcp))
        .await
        .map_err(|_| InspectError::HandshakeTimeout)?
        .map_err(InspectError::Handshake)?;
    let chain: Vec<Vec<u8>> = recorder.chain.lock().map(|c| c.clone()).unwrap_or_default();
    let leaf = chain.first().ok_or(InspectError::NoCertificate)?;
    let top = chain.last().unwrap_or(leaf);
    let leaf_der = CertificateDer::from(leaf.as_slice());
    let names: Vec<String> = webpki::EndEntityCert::try_from(&leaf_der)
        .map(|c| c.valid_dns_names().map(str::to_string).collect())
        .unwrap_or_default();

    // Verify as the driver would.
    let mut roots = rustls::RootCertStore::empty();
    match ca_pem {
        Some(p) => {
            for c in CertificateDer::pem_slice_iter(p.as_bytes()).flatten() {
                let _ = roots.add(c);
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
        }
    }
    let intermediates: Vec<CertificateDer<'_>> = chain
        .iter()
        .skip(1)
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let verify = |roots: rustls::RootCertStore| -> Result<(), String> {
        let v = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| e.to_string())?;
        v.verify_server_cert(&leaf_der, &intermediates, &name, &[], UnixTime::now())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let result = if roots.is_empty() {
        Err("no trusted roots".to_string())
    } else {
        verify(roots)
    };
    // Self-signed: the leaf verifies with itself as the only root (names aside).
    let self_signed = chain.len() == 1 && {
        let mut own = rustls::RootCertStore::empty();
        own.add(leaf_der.clone()).is_ok() && {
            match verify(own) {
                Ok(()) => true,
                Err(e) => e.contains("NotValidForName"),
            }
        }
    };
    let top_sha256 = hex::encode(sha2::Sha256::digest(top));
    let name_problem = result
        .as_ref()
        .err()
        .is_some_and(|e| e.contains("NotValidForName"));
    let advice = match (&result, ca_pem.is_some()) {
        (Ok(()), false) => "verified with the system's roots: leave caBundle unset and insecureSkipVerify false".to_string(),
        (Ok(()), true) => "verified with the given CA file: put its PEM in spec.bmc.caBundle; keep insecureSkipVerify false".to_string(),
        (Err(_), _) if name_problem => format!(
            "the certificate is for {:?}, not {host:?}: address the BMC by one of those names in spec.bmc.address (and give its CA as spec.bmc.caBundle if needed), or reissue the certificate with {host} in subjectAltName; insecureSkipVerify: true only as a last resort",
            names
        ),
        (Err(e), _) if e.contains("Expired") || e.contains("NotValidYet") => format!(
            "the certificate is outside its validity period ({e}): fix the BMC's clock or reissue the certificate; insecureSkipVerify: true only until then"
        ),
        (Err(e), _) => format!(
            "not trusted ({e}): {}set spec.bmc.caBundle to the {} certificate (sha256 {top_sha256}; in the JSON report as tls.topPem) after checking that fingerprint on the BMC's own console; insecureSkipVerify: true skips every check and is the last resort",
            if self_signed { "the BMC's certificate is self-signed: " } else { "" },
            if self_signed { "BMC's own" } else { "issuing CA's" },
        ),
    };
    Ok(TlsReport {
        names,
        chain_length: chain.len(),
        self_signed,
        top_sha256,
        top_pem: pem(top),
        verified: result.is_ok(),
        verify_error: result.err(),
        advice,
    })
}
