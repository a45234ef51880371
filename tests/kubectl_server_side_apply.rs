//! Story: a user applies with `kubectl apply --server-side` against
//! metalherd (the real kubectl, targeting 1.32): objects are created and
//! updated by field manager, a field another manager owns is not taken
//! without `--force-conflicts` (the refusal names the manager and the
//! field, and kubectl explains the way out), a field dropped from the
//! manifest goes, and after a client-side `kubectl apply` kubectl's own
//! manager takes over the fields it set while any other conflicts with it,
//! as with kube-apiserver.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::kubectl::{fails, kubeconfig, ok, require_recent_kubectl};
use common::server::Server;

const LEASE: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: metalherd-controller
spec:
  holderIdentity: HOLDER
  leaseDurationSeconds: 15
";

fn managers(kc: &std::path::Path, what: &[&str]) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend([
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}",
    ]);
    ok(kc, &args).trim().to_string()
}

#[test]
fn kubectl_server_side_apply_owns_fields_and_refuses_conflicts() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let file = s.dir.path().join("lease.yaml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, LEASE.replace("HOLDER", "node-a")).unwrap();
    let applied = "lease.coordination.k8s.io/metalherd-controller serverside-applied";
    assert_eq!(
        ok(&kc, &["apply", "--server-side", "-f", f]).trim(),
        applied
    );
    assert_eq!(
        ok(&kc, &["apply", "--server-side", "-f", f]).trim(),
        applied
    );
    let lease = ["lease", "metalherd-controller"];
    assert_eq!(managers(&kc, &lease), "kubectl/Apply");
    let rv = ok(
        &kc,
        &[
            "get",
            "lease",
            "metalherd-controller",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );

    // Another manager may not take the holder without forcing it.
    std::fs::write(&file, LEASE.replace("HOLDER", "node-b")).unwrap();
    let err = fails(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "elector-b",
            "-f",
            f,
        ],
    );
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.holderIdentity"#
        ),
        "{err}"
    );
    assert!(err.contains("--force-conflicts"), "kubectl's advice: {err}");
    let holder = [
        "get",
        "lease",
        "metalherd-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ];
    assert_eq!(ok(&kc, &holder), "node-a");
    let now = ok(
        &kc,
        &[
            "get",
            "lease",
            "metalherd-controller",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );
    assert_eq!(now, rv, "a refused apply changes nothing");
    ok(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "elector-b",
            "--force-conflicts",
            "-f",
            f,
        ],
    );
    assert_eq!(ok(&kc, &holder), "node-b");
    // Both, in kube-apiserver's order: by time to the second, then name.
    let both = managers(&kc, &lease);
    assert!(
        both == "kubectl/Apply elector-b/Apply" || both == "elector-b/Apply kubectl/Apply",
        "{both}"
    );
    // The duration, applied by both with the same value, is shared: when
    // kubectl's manifest drops it, it stays (elector-b still applies it).
    std::fs::write(
        &file,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: metalherd-controller\nspec: {}\n",
    )
    .unwrap();
    ok(&kc, &["apply", "--server-side", "-f", f]);
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
}

const MACHINE: &str = "apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: rack1-u07
  labels:
    rack: r1
spec:
  online: ONLINE
  bmc:
    address: redfish+https://10.0.0.5/redfish/v1/Systems/1
    credentialsSecretRef:
      name: rack1-u07-bmc
";

/// kube-apiserver's way from client-side to server-side apply: kubectl's
/// own manager (`kubectl`) takes over what its client-side apply set, and
/// kubectl hands it the client-side manager's record; any other manager
/// conflicts with the client-side one.
#[test]
fn server_side_apply_after_a_client_side_apply_takes_over_its_fields() {
    require_recent_kubectl();
    let s = Server::start();
    let kc = kubeconfig(&s);
    let file = s.dir.path().join("machine.yaml");
    let f = file.to_str().unwrap();
    std::fs::write(&file, MACHINE.replace("ONLINE", "false")).unwrap();
    ok(&kc, &["apply", "-f", f]);
    let machine = ["machine", "rack1-u07"];
    assert_eq!(managers(&kc, &machine), "kubectl-client-side-apply/Update");
    std::fs::write(&file, MACHINE.replace("ONLINE", "true")).unwrap();
    let err = fails(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            f,
        ],
    );
    assert!(
        err.contains(r#"conflict with "kubectl-client-side-apply" using metalherd.dev/v1alpha1"#)
            && err.contains(".spec.online"),
        "{err}"
    );
    ok(&kc, &["apply", "--server-side", "-f", f]);
    let online = [
        "get",
        "machine",
        "rack1-u07",
        "-o",
        "jsonpath={.spec.online}",
    ];
    assert_eq!(ok(&kc, &online), "true");
    let mut now: Vec<String> = managers(&kc, &machine)
        .split(' ')
        .map(String::from)
        .collect();
    now.sort();
    assert_eq!(now, ["kubectl-last-applied/Apply", "kubectl/Apply"]);
    // The last-applied annotation follows, for a client-side apply later.
    let applied = ok(
        &kc,
        &[
            "get",
            "machine",
            "rack1-u07",
            "-o",
            "jsonpath={.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}",
        ],
    );
    assert!(applied.contains(r#""online":true"#), "{applied}");
    // A label dropped from the manifest goes: kubectl's alone now.
    std::fs::write(
        &file,
        MACHINE
            .replace("ONLINE", "true")
            .replace("    rack: r1\n", "    pool: a\n"),
    )
    .unwrap();
    ok(&kc, &["apply", "--server-side", "-f", f]);
    let labels = ok(
        &kc,
        &[
            "get",
            "machine",
            "rack1-u07",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert_eq!(labels, r#"{"pool":"a"}"#);
    // An edit is a manager of what it changes.
    ok(
        &kc,
        &[
            "patch",
            "machine",
            "rack1-u07",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"online":false}}"#,
        ],
    );
    assert!(
        managers(&kc, &machine).contains("kubectl-patch/Update"),
        "{}",
        managers(&kc, &machine)
    );
    let err = fails(&kc, &["apply", "--server-side", "-f", f]);
    assert!(err.contains(r#"conflict with "kubectl-patch""#), "{err}");
}
