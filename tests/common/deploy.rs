//! deploy/kubernetes/ as kubectl's kustomize renders it, for the
//! deployment stories (tests/deploy_manifests.rs, tests/deploy_webhook.rs).

use serde_json::Value;

use super::server::text;

/// A copy of deploy/ with what the kustomization's header asks a user to
/// write first (the token key, the webhook's certificate); the
/// kustomization is `copy/deploy/kubernetes`.
pub fn prepared() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("deploy");
    let out = std::process::Command::new("cp")
        .args(["-r"])
        .arg(super::repo_root().join("deploy"))
        .arg(&copy)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(copy.join("kubernetes/boot-token.key"), [7u8; 32]).unwrap();
    // The webhook's certificate, made with the kustomization's own command.
    let k = copy.join("kubernetes");
    let out = std::process::Command::new(super::require_tool("openssl"))
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "825",
            "-subj",
            "/CN=metalherd-webhook.metalherd.svc",
            "-addext",
            "subjectAltName=DNS:metalherd-webhook.metalherd.svc",
            "-keyout",
        ])
        .arg(k.join("webhook-tls.key"))
        .arg("-out")
        .arg(k.join("webhook-tls.crt"))
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl: {}", text(&out).1);
    dir
}

/// `kubectl kustomize deploy/kubernetes` on a [`prepared`] copy.
pub fn render() -> Vec<Value> {
    let dir = prepared();
    let k = dir.path().join("deploy/kubernetes");
    let out = std::process::Command::new(super::require_tool("kubectl"))
        .env("HOME", dir.path())
        .arg("kustomize")
        .arg(&k)
        .output()
        .unwrap();
    let (o, e) = text(&out);
    assert!(out.status.success(), "kubectl kustomize: {e}");
    let mut d = docs(&o);
    d.iter_mut().for_each(join_base64_lines);
    d
}

/// kustomize folds long base64 values (Secret data, a caBundle) over
/// several lines; the API server's decoder skips the line breaks (Go's
/// base64), k8s-openapi's does not, so join them as the server reads them.
fn join_base64_lines(d: &mut Value) {
    let join = |v: &mut Value| {
        if let Some(s) = v.as_str() {
            *v = Value::String(s.split_whitespace().collect());
        }
    };
    if d["kind"] == "Secret"
        && let Some(data) = d.get_mut("data").and_then(Value::as_object_mut)
    {
        data.values_mut().for_each(join);
    }
    if let Some(hooks) = d.get_mut("webhooks").and_then(Value::as_array_mut) {
        for h in hooks {
            if let Some(b) = h.pointer_mut("/clientConfig/caBundle") {
                join(b);
            }
        }
    }
}

pub fn docs(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The rendered object of `kind` called `name`, as its k8s-openapi type.
pub fn named<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str, name: &str) -> T {
    let d = docs
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"));
    serde_json::from_value(d.clone()).unwrap()
}

/// The one rendered object of `kind`, as its k8s-openapi type.
pub fn typed<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str) -> T {
    let mut found = docs.iter().filter(|d| d["kind"] == kind);
    let d = found.next().unwrap_or_else(|| panic!("no {kind} rendered"));
    assert!(found.next().is_none(), "more than one {kind}");
    serde_json::from_value(d.clone()).unwrap()
}
