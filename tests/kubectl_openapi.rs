//! Story: kubectl reads metalherd's OpenAPI documents as it reads
//! kube-apiserver's (the real kubectl, targeting 1.32): `/openapi/v2`,
//! which kubectl asks for as protobuf only (`explain
//! --output=plaintext-openapiv2`, and the patch metadata of `apply` for
//! Kubernetes' own kinds), and the same document as JSON.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::kubectl::{kubeconfig, kubectl, ok, require_recent_kubectl};
use common::server::Server;

#[test]
fn kubectl_reads_openapi_v2() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let out = ok(
        &kc,
        &[
            "explain",
            "machine.spec.bmc",
            "--output=plaintext-openapiv2",
        ],
    );
    assert!(out.contains("KIND:     Machine"), "{out}");
    assert!(
        out.contains("credentialsSecretRef\t<Object> -required-"),
        "{out}"
    );
    let out = ok(
        &kc,
        &["explain", "lease.spec", "--output=plaintext-openapiv2"],
    );
    assert!(out.contains("holderIdentity\t<string>"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&ok(&kc, &["get", "--raw", "/openapi/v2"])).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(
        doc["definitions"]["dev.metalherd.v1alpha1.MachineSet"]["x-kubernetes-group-version-kind"]
            [0]["kind"],
        "MachineSet"
    );
    // A Secret applied again: kubectl fetches /openapi/v2 for the patch.
    let sf = s.dir.path().join("secret.yaml");
    let secret = |v: &str| {
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  a: \"{v}\"\n")
    };
    std::fs::write(&sf, secret("1")).unwrap();
    let sf = sf.to_str().unwrap();
    ok(&kc, &["apply", "-f", sf]);
    std::fs::write(sf, secret("2")).unwrap();
    let (okay, out, log) = kubectl(&kc, &["apply", "-f", sf, "-v=6"]);
    assert!(okay && out.trim() == "secret/s configured", "{log}");
    let v2 = log
        .lines()
        .find(|l| l.contains("/openapi/v2"))
        .unwrap_or_else(|| panic!("kubectl did not ask for /openapi/v2:\n{log}"));
    assert!(v2.contains("200 OK"), "{v2}");
}
