//! Story: a user who lives in kubectl manages what leader election and
//! namespaces need on metalherd, with the real kubectl (the suite targets
//! 1.32) through the kubeconfig `metalherd kubeconfig` prints: Leases in
//! coordination.k8s.io/v1 (discovered, applied, printed, deleted), and
//! namespaces as objects (`default` from the start, also in a data
//! directory from before; created, listed, refused when missing; not
//! deleted while they hold Machines).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::kubectl::{fails, kubeconfig, ok, require_recent_kubectl, rows};
use common::server::{Server, text};

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
    let err = fails(&kc, &["apply", "-f", f]);
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

const MACHINE: &str = "apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: rack1-u07
spec:
  bmc:
    address: redfish+https://10.0.0.5/redfish/v1/Systems/1
    credentialsSecretRef:
      name: rack1-u07-bmc
";

#[test]
fn kubectl_manages_namespaces_and_never_retires_servers_with_one() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let out = ok(&kc, &["get", "ns"]);
    let r = rows(&out);
    assert_eq!(r[0], ["NAME", "STATUS", "AGE"], "{out}");
    assert_eq!(r[1][..2], ["default", "Active"], "{out}");
    assert_eq!(r.len(), 2, "{out}");

    // kubectl create namespace (protobuf) and a manifest (apply).
    assert_eq!(
        ok(&kc, &["create", "ns", "lab"]).trim(),
        "namespace/lab created"
    );
    let nsf = s.dir.path().join("ns.yaml");
    std::fs::write(
        &nsf,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: lab2\n  labels:\n    team: a\n",
    )
    .unwrap();
    let nsf = nsf.to_str().unwrap();
    assert_eq!(
        ok(&kc, &["apply", "-f", nsf]).trim(),
        "namespace/lab2 created"
    );
    assert_eq!(
        ok(&kc, &["apply", "-f", nsf]).trim(),
        "namespace/lab2 unchanged"
    );
    assert_eq!(
        ok(&kc, &["get", "ns", "-l", "team=a", "-o", "name"]).trim(),
        "namespace/lab2"
    );
    let out = ok(
        &kc,
        &["get", "ns", "lab", "-o", "jsonpath={.metadata.labels}"],
    );
    assert!(
        out.contains(r#""kubernetes.io/metadata.name":"lab""#),
        "{out}"
    );
    // The CLI sees them too.
    let out = s.cli(&["get", "namespaces"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("lab2") && stdout.contains("Active"),
        "{stdout}"
    );

    // An object in a namespace that does not exist is refused, naming it.
    let mf = s.dir.path().join("machine.yaml");
    std::fs::write(&mf, MACHINE).unwrap();
    let mf = mf.to_str().unwrap();
    let err = fails(&kc, &["apply", "-f", mf, "-n", "nope"]);
    assert!(err.contains(r#"namespaces "nope" not found"#), "{err}");

    // A namespace with a Machine is not deleted; the refusal lists it.
    assert_eq!(
        ok(&kc, &["apply", "-f", mf, "-n", "lab"]).trim(),
        "machine.metalherd.dev/rack1-u07 created"
    );
    ok(
        &kc,
        &[
            "create",
            "secret",
            "generic",
            "rack1-u07-bmc",
            "--from-literal=username=admin",
            "-n",
            "lab",
        ],
    );
    let err = fails(&kc, &["delete", "ns", "lab"]);
    assert!(
        err.contains("Conflict") && err.contains("1 Machine (rack1-u07)"),
        "{err}"
    );
    assert!(err.contains("never retires servers"), "{err}");
    let out = ok(&kc, &["get", "machines", "-n", "lab", "-o", "name"]);
    assert_eq!(out.trim(), "machine.metalherd.dev/rack1-u07");
    // Without it, the namespace goes, and its Secret with it.
    ok(&kc, &["delete", "machine", "rack1-u07", "-n", "lab"]);
    assert_eq!(
        ok(&kc, &["delete", "ns", "lab"]).trim(),
        "namespace \"lab\" deleted"
    );
    let err = fails(&kc, &["get", "ns", "lab"]);
    assert!(err.contains("NotFound"), "{err}");
    let out = ok(&kc, &["get", "secrets", "-A", "-o", "name"]);
    assert!(!out.contains("rack1-u07-bmc"), "{out}");
    // `default` stays.
    let err = fails(&kc, &["delete", "ns", "default"]);
    assert!(
        err.contains("Forbidden") && err.contains("may not be deleted"),
        "{err}"
    );
}

/// A data directory from before namespaces were objects: its objects' namespaces
/// (and `default`) become Namespaces on the next start.
#[test]
fn an_older_data_directory_gets_its_namespaces() {
    use metalherd::api::Kind;
    use metalherd::store::Store;
    require_recent_kubectl();
    let mut s = Server::start();
    s.restart_after(|data| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = metalherd::store::embedded::EmbeddedStore::open(
                &data.join(metalherd::datadir::STORE_FILE),
            )
            .unwrap();
            store.delete(Kind::Namespace, "", "default").await.unwrap();
            let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "bmc", "namespace": "rack2"}, "stringData": {"a": "b"}});
            store.create(Kind::Secret, secret).await.unwrap();
        });
    });
    let kc = kubeconfig(&s);
    let out = ok(&kc, &["get", "ns", "-o", "name"]);
    assert_eq!(
        out.trim(),
        "namespace/default\nnamespace/rack2",
        "{}",
        s.log()
    );
    assert!(s.log().contains("namespaces created"), "{}", s.log());
}
