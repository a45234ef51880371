//! Manifests the API and CLI tests share: a valid Machine, its Secret, and
//! one bad manifest per validation rule with the field path it must name.

use serde_json::{Value, json};

pub fn machine(name: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": "default", "labels": {"rack": "r1"}},
        "spec": {
            "bmc": {"address": "redfish+https://127.0.0.1:9/redfish/v1/Systems/1",
                    "credentialsSecretRef": {"name": format!("{name}-bmc")}},
            "bootMACAddress": "52:54:00:12:34:56",
            "network": {"address": "10.0.0.7/24", "gateway": "10.0.0.1"}
        }
    })
}

pub fn machine_set(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"role": "worker"}},
                 "template": {"classRef": {"name": "flatcar"}}}
    })
}

/// A bad manifest: what is wrong, its URL plural, the document, and the
/// field path the refusal must name.
pub struct Bad {
    pub case: &'static str,
    pub plural: &'static str,
    pub doc: Value,
    pub field: &'static str,
    /// Words the message must contain.
    pub says: &'static str,
}

pub fn bad_manifests() -> Vec<Bad> {
    let mut v = Vec::new();
    let mut m = machine("bad-unknown");
    m["spec"]["bmc"]["adress"] = json!("x");
    v.push(Bad {
        case: "unknown field",
        plural: "machines",
        doc: m,
        field: "spec.bmc.adress",
        says: "unknown field",
    });
    let mut m = machine("bad-scheme");
    m["spec"]["bmc"]["address"] = json!("ftp://10.0.0.5/");
    v.push(Bad {
        case: "bad BMC URL scheme",
        plural: "machines",
        doc: m,
        field: "spec.bmc.address",
        says: "unsupported scheme \"ftp\"",
    });
    let mut m = machine("bad-mac");
    m["spec"]["bootMACAddress"] = json!("52:54:00:zz:34:56");
    v.push(Bad {
        case: "malformed MAC",
        plural: "machines",
        doc: m,
        field: "spec.bootMACAddress",
        says: "malformed MAC",
    });
    let mut m = machine("bad-gateway");
    m["spec"]["network"]["gateway"] = json!("10.9.0.1");
    v.push(Bad {
        case: "gateway outside subnet",
        plural: "machines",
        doc: m,
        field: "spec.network.gateway",
        says: "outside the subnet",
    });
    v.push(Bad {
        case: "negative replicas",
        plural: "machinesets",
        doc: machine_set("bad-replicas", -1),
        field: "spec.replicas",
        says: "must be 0 or more",
    });
    let mut m = machine("bad-creds");
    m["spec"]["bmc"]["credentialsSecretRef"]["name"] = json!("");
    v.push(Bad {
        case: "missing credentials reference",
        plural: "machines",
        doc: m,
        field: "spec.bmc.credentialsSecretRef.name",
        says: "required",
    });
    let mut m = machine("bad-no-creds");
    if let Some(b) = m["spec"]["bmc"].as_object_mut() {
        b.remove("credentialsSecretRef");
    }
    v.push(Bad {
        case: "absent credentials reference",
        plural: "machines",
        doc: m,
        field: "spec.bmc.credentialsSecretRef",
        says: "required",
    });
    let mut m = machine("bad-version");
    m["spec"]["overrides"] = json!({"kubeletVersion": "latest"});
    v.push(Bad {
        case: "bad version string",
        plural: "machines",
        doc: m,
        field: "spec.overrides.kubeletVersion",
        says: "malformed version",
    });
    v
}

/// A MachineClass no controller writes to: API semantics tests use it where
/// a Machine would race with the machine controller.
pub fn machine_class(name: &str) -> Value {
    json!({
        "apiVersion": "metalherd.dev/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "default", "labels": {"os": "flatcar"}},
        "spec": {
            "image": {"os": "flatcar", "version": "4593.2.4",
                      "kernel": {"url": "http://127.0.0.1:9/vmlinuz",
                                 "checksumsUrl": "http://127.0.0.1:9/vmlinuz.DIGESTS"},
                      "initrd": {"url": "http://127.0.0.1:9/initrd",
                                 "sha256": "5bd1b4e7a4bba1d9ab9e1f3d1a0d0bcf1dcf0bd17e3f0d2fb4f5b6a0d4c3b2a1"}},
            "kubernetes": {"version": "v1.33.2"},
            "containerRuntime": {"name": "containerd", "version": "2.1.4"},
            "join": {"apiServerEndpoint": "127.0.0.1:6443", "tokenSecretRef": {"name": "join-token"},
                     "caCertHashes": ["sha256:ed5bdd5dc7c2c2c56c41668b5f5a07389c0c7be2627992a37a5eb02462ec011c"]}
        }
    })
}
