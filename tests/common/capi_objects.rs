//! Cluster API objects for the provider's stories: kubectl apply/get/list
//! against a test's kube-apiserver, the provider's object shapes, and a
//! loopback file server for artifacts a node config fetches.

use serde_json::{Value, json};

use super::control_plane::ControlPlane;

/// The namespace the stories use.
pub const NS: &str = "default";
/// The provider's API group.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io";

pub fn apply(cp: &ControlPlane, docs: &[Value]) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("objects.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
    std::fs::write(&f, list.to_string()).unwrap();
    let (ok, out, err) = cp.kubectl(&["apply", "-f", f.to_str().unwrap()]);
    assert!(ok, "kubectl apply: {out}{err}");
}

pub fn get(cp: &ControlPlane, resource: &str, name: &str) -> Value {
    let (ok, out, err) = cp.kubectl(&["get", resource, name, "-n", NS, "-o", "json"]);
    if !ok {
        return json!({"error": err});
    }
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

pub fn list(cp: &ControlPlane, resource: &str, selector: &str) -> Vec<Value> {
    let mut args = vec!["get", resource, "-n", NS, "-o", "json"];
    if !selector.is_empty() {
        args.extend(["-l", selector]);
    }
    let (ok, out, err) = cp.kubectl(&args);
    assert!(ok, "kubectl get {resource}: {err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"].as_array().cloned().unwrap_or_default()
}

pub fn condition<'a>(o: &'a Value, type_: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

pub fn infra(kind: &str, name: &str) -> Value {
    json!({"apiGroup": INFRA, "kind": kind, "name": name})
}

pub fn template(name: &str, pool: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdMachineTemplate",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": {
            "hostSelector": {"matchLabels": {"pool": pool}},
            "classRef": {"name": "flatcar"}}}}})
}

pub fn metalherd_cluster(name: &str, host: &str) -> Value {
    json!({"apiVersion": format!("{INFRA}/v1alpha1"), "kind": "MetalherdCluster",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}}})
}

/// A loopback HTTP server answering GET /<name> with its body, for the
/// test's lifetime; returns `127.0.0.1:port`.
pub fn serve_files(files: &[(&'static str, &'static [u8])]) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let files: Vec<(&'static str, &'static [u8])> = files.to_vec();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let reply = match files.iter().find(|(f, _)| path == format!("/{f}")) {
                Some((_, body)) => {
                    let mut r = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    r.extend_from_slice(body);
                    r
                }
                None => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = conn.write_all(&reply);
        }
    });
    addr
}
