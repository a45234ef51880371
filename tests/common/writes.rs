//! What a write to a Machine changed, as one line: for the stories that
//! count Machine writes in Kubernetes mode (BENCHMARKS.md, "Writes per
//! provisioned Machine in Kubernetes mode").

use serde_json::Value;

/// The Machine after a write (`now`), and the paths where it differs from
/// the one before (`prev`, `Null` for a create).
pub fn describe_write(prev: &Value, now: &Value) -> String {
    let mut changed = Vec::new();
    diff("", prev, now, &mut changed);
    changed
        .retain(|p| !p.starts_with("/metadata/managedFields") && p != "/metadata/resourceVersion");
    format!("{} | changed: {}", summary(now), changed.join(" "))
}

/// The paths where `a` and `b` differ (objects compared key by key).
fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    if let (Some(x), Some(y)) = (a.as_object(), b.as_object()) {
        for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
            let n = serde_json::Value::Null;
            diff(
                &format!("{path}/{k}"),
                x.get(k).unwrap_or(&n),
                y.get(k).unwrap_or(&n),
                out,
            );
        }
    } else if a != b {
        out.push(path.to_string());
    }
}

/// A Machine as one line: phase, power, finalizers, boot record fields,
/// history steps.
fn summary(m: &serde_json::Value) -> String {
    let st = &m["status"];
    let keys = |v: &serde_json::Value| {
        v.as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    };
    let steps: Vec<String> = st["bootHistory"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|e| e["step"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default();
    format!(
        "phase={} power={} finalizers={} boot=[{}] progress=[{}] history=[{}]",
        st["phase"],
        st["powerState"],
        m["metadata"]["finalizers"],
        keys(&st["boot"]),
        keys(&st["progress"]),
        steps.join(" ")
    )
}

/// The writes to the object named `name` in the output of `kubectl get
/// KIND --watch --output-watch-events -o json` (one JSON event after
/// another; the first list's ADDED events included), each described as
/// [`describe_write`] does; `pointer` locates the name in the object.
pub fn from_kubectl_watch(output: &str, pointer: &str, name: &str) -> Vec<String> {
    let mut prev = Value::Null;
    let mut lines = Vec::new();
    for ev in serde_json::Deserializer::from_str(output)
        .into_iter::<Value>()
        .map_while(Result::ok)
    {
        let obj = &ev["object"];
        if obj.pointer(pointer).and_then(Value::as_str) != Some(name) {
            continue;
        }
        lines.push(describe_write(&prev, obj));
        prev = obj.clone();
    }
    lines
}
