//! The control plane's PKI, generated with rcgen for each start: a CA,
//! kube-apiserver's serving certificate (for loopback and the lab bridge),
//! and the service-account signing key pair.

use std::path::{Path, PathBuf};

pub(super) struct Pki {
    pub(super) ca_cert: PathBuf,
    pub(super) ca_key: PathBuf,
    pub(super) server_cert: PathBuf,
    pub(super) server_key: PathBuf,
    pub(super) sa_key: PathBuf,
    pub(super) sa_pub: PathBuf,
}

impl Pki {
    pub(super) fn generate(dir: &Path) -> Pki {
        let d = dir.join("pki");
        std::fs::create_dir_all(&d).expect("pki dir");
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "metalherd-test-kubernetes-ca");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).expect("CA cert");
        let issuer = rcgen::Issuer::new(ca, &ca_key);
        let mut server = rcgen::CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "10.96.0.1".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
            "kubernetes.default.svc.cluster.local".to_string(),
        ])
        .expect("server params");
        server
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver");
        server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = rcgen::KeyPair::generate().expect("server key");
        let server_cert = server.signed_by(&server_key, &issuer).expect("server cert");
        let sa_key = rcgen::KeyPair::generate().expect("service account key");
        let p = Pki {
            ca_cert: d.join("ca.crt"),
            ca_key: d.join("ca.key"),
            server_cert: d.join("apiserver.crt"),
            server_key: d.join("apiserver.key"),
            sa_key: d.join("sa.key"),
            sa_pub: d.join("sa.pub"),
        };
        for (path, pem) in [
            (&p.ca_cert, ca_cert.pem()),
            (&p.ca_key, ca_key.serialize_pem()),
            (&p.server_cert, server_cert.pem()),
            (&p.server_key, server_key.serialize_pem()),
            (&p.sa_key, sa_key.serialize_pem()),
            (&p.sa_pub, sa_key.public_key_pem()),
        ] {
            std::fs::write(path, pem).expect("write PKI file");
        }
        p
    }
}
