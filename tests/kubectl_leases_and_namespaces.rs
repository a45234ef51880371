//! Story: a user who lives in kubectl manages what leader election and
//! namespaces need on metalherd, with the real kubectl (the suite targets
//! 1.32) through the kubeconfig `metalherd kubeconfig` prints: Leases in
//! coordination.k8s.io/v1 (discovered, applied, printed, deleted).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::kubectl::{kubeconfig, ok, require_recent_kubectl, rows};
use common::server::Server;

const LEASE: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: metalherd-controller
  namespace: default
spec:
  holderIdentity: HOLDER
  leaseDurationSeconds: 15
";

#[test]
fn kubectl_applies_gets_and_deletes_leases() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let out = ok(
        &kc,
        &["api-resources", "--api-group", "coordination.k8s.io"],
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("leases "))
        .unwrap_or_else(|| panic!("leases missing from api-resources:\n{out}"));
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        ["leases", "coordination.k8s.io/v1", "true", "Lease"]
    );

    let file = s.dir.path().join("lease.yaml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, LEASE.replace("HOLDER", "node-a")).unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", f]).trim(),
        "lease.coordination.k8s.io/metalherd-controller created"
    );
    assert_eq!(
        ok(&kc, &["apply", "-f", f]).trim(),
        "lease.coordination.k8s.io/metalherd-controller unchanged"
    );
    // Changed: kubectl sends the built-in kind a strategic merge patch.
    std::fs::write(&file, LEASE.replace("HOLDER", "node-b")).unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", f]).trim(),
        "lease.coordination.k8s.io/metalherd-controller configured"
    );
    let out = ok(&kc, &["get", "leases"]);
    let r = rows(&out);
    assert_eq!(r[0], ["NAME", "HOLDER", "AGE"], "{out}");
    assert_eq!(r[1][..2], ["metalherd-controller", "node-b"], "{out}");
    let out = ok(
        &kc,
        &[
            "get",
            "lease",
            "metalherd-controller",
            "-o",
            "jsonpath={.spec.leaseDurationSeconds}",
        ],
    );
    assert_eq!(out, "15");
    // An unknown field is refused with its path (server-side validation).
    std::fs::write(
        &file,
        LEASE.replace("HOLDER", "node-c").replace(
            "  leaseDurationSeconds",
            "  leaseSeconds: 3\n  leaseDurationSeconds",
        ),
    )
    .unwrap();
    let err = common::kubectl::fails(&kc, &["apply", "-f", f]);
    assert!(err.contains("spec.leaseSeconds"), "{err}");
    assert_eq!(
        ok(&kc, &["delete", "lease", "metalherd-controller"]).trim(),
        "lease.coordination.k8s.io \"metalherd-controller\" deleted"
    );
    assert!(
        ok(&kc, &["get", "leases", "-A", "-o", "name"])
            .trim()
            .is_empty()
    );
}
