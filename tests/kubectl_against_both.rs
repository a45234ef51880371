//! Story: a user who lives in kubectl sees no difference between metalherd
//! and Kubernetes. The same kubectl (the system's, which the kubectl suites
//! target) runs the same commands against a real kube-apiserver with
//! metalherd's CRDs installed and against standalone `metalherd serve`,
//! and what it prints and exits with is compared, with only what two
//! servers legitimately differ in masked (ages, resourceVersions, uids,
//! timestamps, addresses; `tests/common/kubectl_diff.rs`): get with the
//! printer columns, `-o wide`, `-A`, `-l`, `-w`; explain; apply, client-side
//! and server-side (with a field-manager conflict and the move from one to
//! the other); patch (merge, JSON, strategic); edit; wait; scale;
//! namespaces; leases; secrets; delete. Every difference is either in
//! [`KNOWN`] (which each run proves still true) or a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::kubectl_diff::{Diff, Known, Side};

/// What kubectl prints differently for metalherd than for kube-apiserver,
/// and why: the command as the test runs it, a part of kube-apiserver's
/// transcript, a part of metalherd's (masked as compared). README's
/// "Differences from kube-apiserver" is this table in sentences.
const KNOWN: &[Known] = &[
    // metalherd speaks the API of Kubernetes 1.32, and says it is metalherd.
    Known {
        command: "kubectl version",
        kube: "Server Version: v1.34.4",
        metalherd: "Server Version: v1.32.0+metalherd",
    },
    // No kind metalherd serves is in the `all` category (kube-apiserver's
    // Services and Pods are), so kubectl knows no such resource.
    Known {
        command: "kubectl get all",
        kube: "service/kubernetes",
        metalherd: "error: the server doesn't have a resource type \"all\"",
    },
    // kube-apiserver has namespaces of its own; metalherd has `default`
    // and the ones users create.
    Known {
        command: "kubectl get namespaces",
        kube: "kube-system Active",
        metalherd: "",
    },
    // kube-apiserver keeps a Lease of its own in kube-system.
    Known {
        command: "kubectl get leases -A",
        kube: "kube-system apiserver-",
        metalherd: "",
    },
    // metalherd deletes a namespace at once (never `Terminating`), so it
    // sets no `kubernetes` finalizer on it.
    Known {
        command: "kubectl get namespace lab2 -o yaml",
        kube: "spec:\n  finalizers:\n  - kubernetes",
        metalherd: "",
    },
    // metalherd serves no ResourceQuotas or LimitRanges to describe.
    Known {
        command: "kubectl describe namespace lab2",
        kube: "No resource quota.",
        metalherd: "",
    },
    // Deleting a namespace never retires servers on metalherd: refused
    // while it holds Machines; kube-apiserver deletes them with it.
    Known {
        command: "kubectl delete namespace lab",
        kube: "namespace \"lab\" deleted",
        metalherd: "Error from server (Conflict): namespace \"lab\" still holds 1 Machine (rack1-u09)",
    },
    // Label selector syntax errors are worded differently.
    Known {
        command: "kubectl get machines -l 'bad label==='",
        kube: "unable to parse requirement: found 'label', expected: in, notin, =, ==, !=, gt, lt",
        metalherd: "invalid label selector \"bad label===\": bad key \"bad label\"",
    },
    // An unsupported field selector: metalherd names the supported ones.
    Known {
        command: "kubectl get machines --field-selector spec.online=true",
        kube: "field label not supported: spec.online",
        metalherd: "field label not supported: \"spec.online\" (supported: metadata.name, metadata.namespace)",
    },
    // A JSON patch whose `test` fails: metalherd says which and why.
    Known {
        command: r#"kubectl patch machine rack1-u07 --type json -p '[{"op":"test","path":"/spec/online","value":true}]'"#,
        kube: "The request is invalid: the server rejected our request due to an error in our request",
        metalherd: "The request is invalid: the JSON patch cannot be applied: operation '/0' failed at path '/spec/online': value did not match",
    },
    // metalherd validates every write strictly (fieldValidation=Strict):
    // an unknown field is refused where kube-apiserver, asked for no
    // validation (`kubectl patch`) or `--validate=false`, drops it with a
    // warning or silently.
    Known {
        command: r#"kubectl patch machine rack1-u07 --type merge -p '{"spec":{"bogus":1}}'"#,
        kube: "Warning: unknown field \"spec.bogus\"",
        metalherd: "The Machine \"rack1-u07\" is invalid: spec.bogus: unknown field `bogus`",
    },
    Known {
        command: "kubectl apply -f lease-unknown.yaml --validate=false",
        kube: "lease.coordination.k8s.io/metalherd-controller configured",
        metalherd: "The Lease \"metalherd-controller\" is invalid: spec.leaseSeconds: unknown field",
    },
    // The same refusal in other words.
    Known {
        command: "kubectl apply -f lease-unknown.yaml",
        kube: "strict decoding error: unknown field \"spec.leaseSeconds\"",
        metalherd: "The Lease \"metalherd-controller\" is invalid: spec.leaseSeconds: unknown field",
    },
    Known {
        command: "kubectl apply --server-side -f lease-unknown.yaml",
        kube: ".spec.leaseSeconds: field not declared in schema",
        metalherd: "The Lease \"metalherd-controller\" is invalid: spec.leaseSeconds: unknown field",
    },
    // kube-apiserver's OpenAPI v2 leaves the type out of optional
    // (`nullable`) fields of a CRD schema; metalherd's keeps it.
    Known {
        command: "kubectl explain machine --output=plaintext-openapiv2",
        kube: "status <>",
        metalherd: "status <Object>",
    },
    // kube-apiserver leaves apiVersion and kind out of the items of a
    // built-in kind's list (it keeps them for custom resources); metalherd
    // keeps them for every kind. Clients fill them in from the list.
    Known {
        command: "kubectl get --raw /api/v1/namespaces/default/secrets?limit=1",
        kube: "\"items\":[{\"data\"",
        metalherd: "\"items\":[{\"apiVersion\":\"v1\"",
    },
];

const MACHINE: &str = "apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: rack1-u07
  namespace: default
  labels:
    rack: r1
    pool: POOL
spec:
  bmc:
    address: redfish+https://127.0.0.1:9/redfish/v1/Systems/1
    credentialsSecretRef:
      name: rack1-u07-bmc
  bootMACAddress: \"52:54:00:12:34:56\"
  network:
    address: 10.0.0.7/24
    gateway: 10.0.0.1
";

/// Without a namespace: applied to the current one, or `-n`.
const OTHER: &str = "apiVersion: metalherd.dev/v1alpha1
kind: Machine
metadata:
  name: NAME
  labels:
    rack: r1
spec:
  online: ONLINE
  bmc:
    address: redfish+https://10.0.0.5/redfish/v1/Systems/1
    credentialsSecretRef:
      name: NAME-bmc
";

const SET: &str = "apiVersion: metalherd.dev/v1alpha1
kind: MachineSet
metadata:
  name: workers
spec:
  replicas: 3
  selector:
    matchLabels:
      role: worker
  template:
    classRef:
      name: flatcar
";

const LEASE: &str = "apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: metalherd-controller
spec:
  holderIdentity: HOLDER
  leaseDurationSeconds: 15
";

const NAMESPACE: &str =
    "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: lab2\n  labels:\n    team: a\n";

fn manifests(d: &Diff) {
    d.file("machine.yaml", &MACHINE.replace("POOL", "a"));
    d.file("machine-b.yaml", &MACHINE.replace("POOL", "b"));
    let other = |name: &str, online: &str| OTHER.replace("NAME", name).replace("ONLINE", online);
    d.file("u08.yaml", &other("rack1-u08", "false"));
    d.file("u08-ssa.yaml", &other("rack1-u08", "true"));
    let unlabelled = other("rack1-u08", "true").replace("  labels:\n    rack: r1\n", "");
    d.file("u08-unlabelled.yaml", &unlabelled);
    d.file("u09.yaml", &other("rack1-u09", "false"));
    d.file("machineset.yaml", SET);
    d.file("lease.yaml", &LEASE.replace("HOLDER", "node-a"));
    d.file("lease-b.yaml", &LEASE.replace("HOLDER", "node-b"));
    d.file(
        "lease-unknown.yaml",
        &LEASE.replace("HOLDER", "node-b").replace(
            "  leaseDurationSeconds",
            "  leaseSeconds: 3\n  leaseDurationSeconds",
        ),
    );
    d.file("namespace.yaml", NAMESPACE);
    let class = common::manifests::machine_class("flatcar");
    d.file("class.json", &class.to_string());
    // Recorded now: metalherd expires Events an hour after they were last
    // seen (its expiry runs every minute), and this binary runs longer.
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    d.file("event.yaml", &EVENT.replace("NOW", &now));
}

/// An Event about rack1-u07, as the controller records them.
const EVENT: &str = "apiVersion: v1
kind: Event
metadata:
  name: rack1-u07.1
  namespace: default
involvedObject:
  apiVersion: metalherd.dev/v1alpha1
  kind: Machine
  name: rack1-u07
  namespace: default
type: Normal
reason: Provisioning
message: Available to Provisioning
count: 1
firstTimestamp: \"NOW\"
lastTimestamp: \"NOW\"
source:
  component: metalherd
";

const STATUS: &str =
    r#"'{"status":{"phase":"Ready","powerState":"On","nodeRef":{"name":"rack1-u07"}}}'"#;

fn get_and_print(d: &Diff) {
    d.check("version");
    d.check("api-resources --api-group=metalherd.dev");
    d.check("api-resources --api-group=coordination.k8s.io");
    d.check("get all");
    d.check("apply -f machine.yaml");
    d.check("apply -f machine.yaml");
    // Changed: a JSON merge patch, as the published OpenAPI says.
    d.check("apply -f machine-b.yaml");
    d.check(&format!(
        "patch machine rack1-u07 --subresource=status --type=merge -p {STATUS}"
    ));
    for line in [
        "apply -f class.json",
        "get machineclasses",
        "get mc -o wide",
        "create -f event.yaml",
        "get events",
        "get events -o wide",
        "describe machine rack1-u07",
        "get machines",
        "get machine rack1-u07",
        "get machines -o wide",
        "get machines -A",
        "get mach -A -o wide",
        "get machines -l rack=r1",
        "get machines -l 'rack in (r1,r2),pool!=a' --show-labels",
        "get machines -l !pool",
        "get machines -l rack=r2",
        "label machine rack1-u07 gen=4",
        "get machines -l gen>3 -o name",
        "get machines -l gen<4 -o name",
        "get machines -l 'bad label==='",
        "get machines --field-selector metadata.name=rack1-u07",
        "get machines --field-selector spec.online=true",
        "get metalherd",
        "get machine rack1-u07 -o yaml",
        "get machines -o json",
        "get machine rack1-u07 -o jsonpath={.status.phase}/{.spec.online}",
        "get machines -o custom-columns=NAME:.metadata.name,MAC:.spec.bootMACAddress",
        "get machine nope",
        "get machines -n nowhere",
    ] {
        d.check(line);
    }
}

fn explain(d: &Diff) {
    for what in [
        "machine",
        "machine.spec.bmc",
        "machine.metadata",
        "machineset.spec",
        "machineclass.spec.image",
        "secret",
        "namespace",
        "lease.spec",
        "machines --recursive",
        "machine --output=plaintext-openapiv2",
        "lease --output=plaintext-openapiv2",
    ] {
        d.check(&format!("explain {what}"));
    }
}

fn patch_and_edit(d: &Diff) {
    for line in [
        r#"patch machine rack1-u07 --type json -p '[{"op":"add","path":"/metadata/labels/x","value":"y"}]'"#,
        r#"patch machine rack1-u07 --type json -p '[{"op":"test","path":"/spec/online","value":true}]'"#,
        r#"patch machine rack1-u07 --type merge -p '{"spec":{"online":true}}'"#,
        r#"patch machine rack1-u07 --type merge -p '{"spec":{"online":true}}'"#,
        // kubectl's default is a strategic merge patch: not for custom kinds.
        r#"patch machine rack1-u07 -p '{"spec":{"online":false}}'"#,
        r#"patch machine rack1-u07 --type merge -p '{"spec":{"bogus":1}}'"#,
    ] {
        d.check(line);
    }
    let off = d.editor(
        "online-off.sh",
        "sed -i 's/online: true/online: false/' \"$1\"",
    );
    d.check_env("edit machine rack1-u07", &[("EDITOR", &off)]);
    // Nothing changed: kubectl says so, sending nothing.
    d.check_env("edit machine rack1-u07", &[("EDITOR", &off)]);
    let bad = d.editor("bogus.sh", "sed -i 's/^spec:/spec:\\n  bogus: 1/' \"$1\"");
    d.check_env("edit machine rack1-u07", &[("EDITOR", &bad)]);
    d.check("get machine rack1-u07 -o 'jsonpath={.spec.online} {.metadata.labels}'");
}

const MANAGERS: &str =
    "-o 'jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation} {end}'";

fn server_side_apply(d: &Diff) {
    let managers = |what: &str| d.check_unordered(&format!("get {what} {MANAGERS}"));
    d.check("apply --server-side -f lease.yaml");
    d.check("apply --server-side -f lease.yaml");
    managers("lease metalherd-controller");
    // Another manager may not take a field without forcing it.
    d.check("apply --server-side --field-manager elector-b -f lease-b.yaml");
    d.check("apply --server-side --field-manager elector-b --force-conflicts -f lease-b.yaml");
    managers("lease metalherd-controller");
    d.check("get leases");
    d.check("get lease metalherd-controller -o yaml");
    d.check("apply --server-side -f lease-unknown.yaml");
    // From client-side to server-side apply: kubectl's own manager takes
    // over what its client-side apply set (kubectl rewrites the managers);
    // another manager conflicts with the client-side one.
    d.check("apply -f u08.yaml");
    managers("machine rack1-u08");
    d.check("apply --server-side --field-manager other -f u08-ssa.yaml");
    d.check("apply --server-side -f u08-ssa.yaml");
    d.check("get machine rack1-u08 -o yaml");
    managers("machine rack1-u08");
    // Dropped from the manifest: kubectl's alone now, so it goes.
    d.check("apply --server-side -f u08-unlabelled.yaml");
    d.check("get machine rack1-u08 --show-labels");
}

fn wait_and_scale(d: &Diff) {
    d.check("wait --for=jsonpath={.status.phase}=Ready machine/rack1-u07 --timeout=5s");
    d.check("wait --for=condition=Ready machine/rack1-u07 --timeout=1s");
    d.check("wait --for=delete machine/nope --timeout=1s");
    let ready = r#"'{"status":{"conditions":[{"type":"Ready","status":"True","reason":"NodeReady","message":"its Node is Ready","lastTransitionTime":"2026-11-22T03:00:00Z"}]}}'"#;
    d.blocked_until(
        "wait --for=condition=Ready machine/rack1-u07 --timeout=60s",
        &format!("patch machine rack1-u07 --subresource=status --type=merge -p {ready}"),
    );
    let provisioning = r#"'{"status":{"phase":"Provisioning"}}'"#;
    d.blocked_until(
        "wait --for=jsonpath={.status.phase}=Provisioning machine/rack1-u07 --timeout=60s",
        &format!("patch machine rack1-u07 --subresource=status --type=merge -p {provisioning}"),
    );
    for line in [
        "apply -f machineset.yaml",
        "get machinesets",
        "get ms -o wide",
        "scale machineset/workers --replicas 5",
        "scale ms/workers --current-replicas 3 --replicas 1",
        "get ms workers --subresource=scale -o json",
        "scale ms workers --replicas 0",
        "get ms workers --subresource=scale -o yaml",
        "get ms workers -o jsonpath={.spec.replicas}",
        "describe ms workers",
    ] {
        d.check(line);
    }
}

fn namespaces(d: &Diff) {
    for line in [
        "create namespace lab",
        "create namespace lab",
        "apply -f namespace.yaml",
        "apply -f namespace.yaml",
        "get namespaces",
        "get namespaces default lab lab2",
        "get ns -l team=a -o name",
        "get ns --field-selector status.phase=Active -l team -o name",
        "get namespace lab2 -o yaml",
        "get namespace lab2 -o jsonpath={.metadata.labels}",
        "describe namespace lab2",
        "apply -f u09.yaml -n nope",
        "delete namespace default",
        "apply -f u09.yaml -n lab",
        "get machines -A",
        "delete namespace lab",
    ] {
        d.check(line);
    }
    // metalherd kept the namespace and its Machine: retire them there.
    d.on(Side::Metalherd, "delete machine rack1-u09 -n lab");
    d.on(Side::Metalherd, "delete namespace lab");
    d.check("get namespace lab");
    d.check("get machines -A -o name");
}

fn leases_and_secrets(d: &Diff) {
    for line in [
        "delete lease metalherd-controller",
        "apply -f lease.yaml",
        "apply -f lease.yaml",
        "apply -f lease-b.yaml",
        "get leases",
        "get leases -A",
        "get lease metalherd-controller -o jsonpath={.spec.leaseDurationSeconds}",
        "apply -f lease-unknown.yaml",
        "apply -f lease-unknown.yaml --validate=false",
        "create secret generic s1 --from-literal=a=b",
        "create secret generic s2 --from-literal=a=b --from-literal=c=d",
        "get secret s1 -o yaml",
        "describe secret s1",
        "describe lease metalherd-controller",
        "get secrets",
        "get secrets --field-selector type=Opaque -o name",
        "label secret s2 del=yes",
        r#"patch secret s2 -p '{"data":{"e":"Zg=="}}'"#,
        "get secret s2 -o jsonpath={.data}",
    ] {
        d.check(line);
    }
}

/// Each watch prints a header (tables) and a row per object, then a row
/// for the change.
fn watches(d: &Diff) {
    let machines = |line: &str, change: &str| d.watch(line, change, 3, 4);
    machines("get machines -w", "label machine rack1-u07 watched=yes");
    machines(
        "get machines -A -w",
        "label machine rack1-u07 watched=again --overwrite",
    );
    d.watch(
        "get machine rack1-u07 -w -o name",
        "label machine rack1-u07 watched-",
        1,
        2,
    );
    let one = |line: &str, change: &str| d.watch(line, change, 2, 3);
    one(
        "get leases -w --output-watch-events",
        "annotate lease metalherd-controller seen=yes",
    );
    one("get ns -l team=a -w", "label ns lab2 seen=yes");
}

/// List paging, watch bookmarks and initial events, deletecollection and
/// server-side dry runs.
fn paging_bookmarks_collections_dry_runs(d: &Diff) {
    for line in [
        "get --raw /api/v1/namespaces/default/secrets?limit=1",
        "get --raw '/api/v1/namespaces/default/secrets?watch=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=2'",
        "delete --raw /api/v1/namespaces/default/secrets?labelSelector=nothing%3Dhere",
    ] {
        d.check_json(line);
    }
    for line in [
        // kubectl pages through with the continue tokens.
        "get secrets --chunk-size=1 -o name",
        "create secret generic s9 --from-literal=a=b --dry-run=server",
        "delete secret s1 --dry-run=server",
        "get secrets -o name",
        "apply --dry-run=server -f machine.yaml",
        "get machines -o name",
    ] {
        d.check(line);
    }
}

fn delete(d: &Diff) {
    for line in [
        "delete machine rack1-u07",
        "delete machine rack1-u07",
        "delete machine rack1-u07 --ignore-not-found",
        "delete secrets -l del=yes",
        "delete ms workers -o name",
        "delete lease metalherd-controller --wait=false",
        "delete secret --all",
        "delete machines --all",
        "delete namespace lab2",
        "delete machineclass flatcar",
        "delete event rack1-u07.1",
        "get machines,machinesets,machineclasses,leases,secrets",
    ] {
        d.check(line);
    }
}

#[test]
fn kubectl_prints_the_same_for_metalherd_as_for_kube_apiserver() {
    let t0 = Instant::now();
    let d = Diff::new(KNOWN);
    manifests(&d);
    get_and_print(&d);
    explain(&d);
    patch_and_edit(&d);
    server_side_apply(&d);
    wait_and_scale(&d);
    namespaces(&d);
    leases_and_secrets(&d);
    watches(&d);
    paging_bookmarks_collections_dry_runs(&d);
    delete(&d);
    let equal = d.finish();
    eprintln!(
        "kubectl against kube-apiserver and metalherd: {equal} commands print the same, {} known differences, in {:.1} s",
        KNOWN.len(),
        t0.elapsed().as_secs_f64()
    );
}
