//! What `get` and `describe` print: kubectl-style tables per kind and the
//! describe text (fields, conditions, boot history, last error, events).
//! Pure formatting over JSON values; `now` is read once per call. Secret
//! values are never printed here, only their key names and sizes.

use jiff::Timestamp;
use serde_json::Value;

use super::kinds::LAST_APPLIED;
use crate::api::Kind;

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn num(o: &Value, ptr: &str) -> String {
    o.pointer(ptr)
        .and_then(Value::as_i64)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "0".into())
}

fn ts(o: &Value, ptr: &str) -> Option<Timestamp> {
    o.pointer(ptr)?.as_str()?.parse().ok()
}

/// kubectl's short human duration (`45s`, `3m12s`, `2h`, `5d3h`), as the
/// server's tables print ages.
pub use crate::http::api::table::human_age;

fn age_of(t: Option<Timestamp>, now: Timestamp) -> String {
    match t {
        Some(t) => human_age(now.as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

/// Column headers of a kind's table.
fn headers(kind: Kind, wide: bool) -> Vec<&'static str> {
    let (base, extra): (&[&str], &[&str]) = match kind {
        Kind::Machine => (
            &["NAME", "PHASE", "POWER", "NODE", "CLASS", "AGE"],
            &["BMC", "MAC", "ADDRESS", "ERROR"],
        ),
        Kind::MachineSet => (
            &[
                "NAME",
                "DESIRED",
                "READY",
                "UPDATED",
                "AVAILABLE",
                "STATE",
                "AGE",
            ],
            &["CLASS", "REVISION"],
        ),
        Kind::MachineClass => (&["NAME", "OS", "IMAGE", "KUBELET", "AGE"], &["RUNTIME"]),
        Kind::DiscoveredMachine => (
            &["MAC", "ARCH", "VENDOR", "LAST-SEEN"],
            &["NAME", "ADDRESS", "FIRST-SEEN"],
        ),
        Kind::Secret => (&["NAME", "TYPE", "DATA", "AGE"], &[]),
        Kind::Lease => (&["NAME", "HOLDER", "AGE"], &[]),
        Kind::Namespace => (&["NAME", "STATUS", "AGE"], &[]),
        Kind::Event => (
            &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            &["COUNT"],
        ),
    };
    let mut h = base.to_vec();
    if wide {
        h.extend_from_slice(extra);
    }
    h
}

/// A Machine's PHASE column: `PAUSED` while the pause annotation is set
/// (with the phase it stays in, if it has one).
fn machine_phase(o: &Value) -> String {
    let phase = s(o, "/status/phase");
    let paused = o
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(crate::api::PAUSED_ANNOTATION));
    match (paused, phase.is_empty()) {
        (false, _) => phase.to_string(),
        (true, true) => "PAUSED".into(),
        (true, false) => format!("PAUSED({phase})"),
    }
}

fn row(kind: Kind, o: &Value, wide: bool, now: Timestamp) -> Vec<String> {
    let age = age_of(ts(o, "/metadata/creationTimestamp"), now);
    let name = s(o, "/metadata/name").to_string();
    let mut r: Vec<String> = match kind {
        Kind::Machine => vec![
            name,
            machine_phase(o),
            s(o, "/status/powerState").into(),
            s(o, "/status/nodeRef/name").into(),
            s(o, "/spec/classRef/name").into(),
            age,
        ],
        Kind::MachineSet => vec![
            name,
            num(o, "/spec/replicas"),
            num(o, "/status/readyReplicas"),
            num(o, "/status/updatedReplicas"),
            num(o, "/status/availableReplicas"),
            s(o, "/status/rolloutState").into(),
            age,
        ],
        Kind::MachineClass => vec![
            name,
            s(o, "/spec/image/os").into(),
            s(o, "/spec/image/version").into(),
            s(o, "/spec/kubernetes/version").into(),
            age,
        ],
        Kind::DiscoveredMachine => vec![
            s(o, "/spec/macAddress").into(),
            s(o, "/spec/architecture").into(),
            s(o, "/spec/vendorClass").into(),
            age_of(ts(o, "/spec/lastSeen"), now),
        ],
        Kind::Secret => vec![
            name,
            match s(o, "/type") {
                "" => "Opaque".into(),
                t => t.into(),
            },
            o.get("data")
                .and_then(Value::as_object)
                .map_or(0, |d| d.len())
                .to_string(),
            age,
        ],
        Kind::Lease => vec![name, s(o, "/spec/holderIdentity").into(), age],
        Kind::Namespace => vec![name, s(o, "/status/phase").into(), age],
        Kind::Event => vec![
            age_of(
                ts(o, "/lastTimestamp").or_else(|| ts(o, "/firstTimestamp")),
                now,
            ),
            s(o, "/type").into(),
            s(o, "/reason").into(),
            format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_ascii_lowercase(),
                s(o, "/involvedObject/name")
            ),
            s(o, "/message").into(),
        ],
    };
    if wide {
        match kind {
            Kind::Machine => r.extend([
                s(o, "/spec/bmc/address").to_string(),
                s(o, "/spec/bootMACAddress").to_string(),
                s(o, "/spec/network/address").to_string(),
                s(o, "/status/lastError/reason").to_string(),
            ]),
            Kind::MachineSet => r.extend([
                s(o, "/spec/template/classRef/name").to_string(),
                num(o, "/status/updateRevision"),
            ]),
            Kind::MachineClass => r.push(format!(
                "{} {}",
                s(o, "/spec/containerRuntime/name"),
                s(o, "/spec/containerRuntime/version")
            )),
            Kind::DiscoveredMachine => r.extend([
                name_plain(o),
                s(o, "/spec/address").to_string(),
                age_of(ts(o, "/spec/firstSeen"), now),
            ]),
            Kind::Secret | Kind::Lease | Kind::Namespace => {}
            Kind::Event => r.push(num(o, "/count")),
        }
    }
    r
}

fn name_plain(o: &Value) -> String {
    s(o, "/metadata/name").to_string()
}

/// A kubectl-style table of `items` (with a header line when asked).
pub fn table(kind: Kind, items: &[Value], wide: bool, all_ns: bool, header: bool) -> String {
    let now = Timestamp::now();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut head: Vec<String> = headers(kind, wide).into_iter().map(String::from).collect();
    if all_ns {
        head.insert(0, "NAMESPACE".into());
    }
    let mut items: Vec<&Value> = items.iter().collect();
    if kind == Kind::Event {
        items.sort_by_key(|e| ts(e, "/lastTimestamp"));
    }
    for o in items {
        let mut r = row(kind, o, wide, now);
        if all_ns {
            r.insert(0, s(o, "/metadata/namespace").to_string());
        }
        rows.push(r);
    }
    render(&head, &rows, header)
}

fn render(head: &[String], rows: &[Vec<String>], header: bool) -> String {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[String]| {
        let n = cells.len();
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i + 1 < n {
                let pad = widths
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(c.chars().count())
                    + 3;
                l.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    if header {
        line(head);
    }
    for r in rows {
        line(r);
    }
    out
}

fn indent_yaml(v: &Value, by: usize) -> String {
    let text = serde_yaml::to_string(v).unwrap_or_default();
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

/// The text of `describe KIND NAME`.
pub fn describe(kind: Kind, o: &Value, events: &[Value]) -> String {
    let now = Timestamp::now();
    let mut out = String::new();
    let mut field = |k: &str, v: &str| out.push_str(&format!("{:<14}{v}\n", format!("{k}:")));
    field("Name", s(o, "/metadata/name"));
    field("Namespace", s(o, "/metadata/namespace"));
    field("Kind", kind.as_str());
    field("API Version", kind.api_version());
    let map_lines = |ptr: &str, hide: &[&str]| -> String {
        let pairs: Vec<String> = o
            .pointer(ptr)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !hide.contains(&k.as_str()))
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        if pairs.is_empty() {
            "<none>".into()
        } else {
            pairs.join(&format!("\n{:14}", ""))
        }
    };
    field("Labels", &map_lines("/metadata/labels", &[]));
    field(
        "Annotations",
        &map_lines("/metadata/annotations", &[LAST_APPLIED]),
    );
    let created = ts(o, "/metadata/creationTimestamp");
    field(
        "Created",
        &match created {
            Some(t) => format!("{t} ({} ago)", age_of(Some(t), now)),
            None => "<unknown>".into(),
        },
    );
    if let Some(g) = o.pointer("/metadata/generation").and_then(Value::as_i64) {
        field("Generation", &g.to_string());
    }
    if let Some(f) = o.pointer("/metadata/finalizers").and_then(Value::as_array)
        && !f.is_empty()
    {
        let names: Vec<&str> = f.iter().filter_map(Value::as_str).collect();
        field("Finalizers", &names.join(", "));
    }
    if let Some(t) = ts(o, "/metadata/deletionTimestamp") {
        field("Deleting", &format!("since {t} (waiting for finalizers)"));
    }
    match kind {
        Kind::Secret => {
            field(
                "Type",
                match s(o, "/type") {
                    "" => "Opaque",
                    t => t,
                },
            );
            out.push_str("Data:\n");
            // Sizes only, as kubectl describe does: values stay secret.
            if let Some(d) = o.get("data").and_then(Value::as_object) {
                for (k, v) in d {
                    let len = v
                        .as_str()
                        .and_then(|b| {
                            use base64::Engine;
                            base64::engine::general_purpose::STANDARD.decode(b).ok()
                        })
                        .map_or(0, |b| b.len());
                    out.push_str(&format!("  {k}:  {len} bytes\n"));
                }
            }
        }
        Kind::Event => {
            for k in ["type", "reason", "message", "count"] {
                if let Some(v) = o.get(k) {
                    let text = v.as_str().map(String::from).unwrap_or(v.to_string());
                    out.push_str(&format!("{:<14}{text}\n", format!("{k}:")));
                }
            }
        }
        _ => {
            if let Some(spec) = o.get("spec") {
                out.push_str("Spec:\n");
                out.push_str(&indent_yaml(spec, 2));
            }
            if kind == Kind::MachineSet {
                // Revisions (whole class snapshots) and batches, summarized.
                let mut brief = o.clone();
                if let Some(st) = brief.get_mut("status").and_then(Value::as_object_mut) {
                    for k in [
                        "revisions",
                        "currentBatch",
                        "completedBatches",
                        "lastFailure",
                    ] {
                        st.remove(k);
                    }
                }
                describe_status(&brief, now, &mut out);
                out.push_str(&super::rollout::describe_rollout(o));
            } else {
                describe_status(o, now, &mut out);
            }
        }
    }
    if kind != Kind::Event {
        out.push_str("Events:");
        if events.is_empty() {
            out.push_str("  <none>\n");
        } else {
            out.push('\n');
            let mut evs: Vec<&Value> = events.iter().collect();
            evs.sort_by_key(|e| ts(e, "/lastTimestamp"));
            let head: Vec<String> = ["TYPE", "REASON", "AGE", "COUNT", "MESSAGE"]
                .into_iter()
                .map(String::from)
                .collect();
            let rows: Vec<Vec<String>> = evs
                .iter()
                .map(|e| {
                    vec![
                        s(e, "/type").into(),
                        s(e, "/reason").into(),
                        age_of(ts(e, "/lastTimestamp"), now),
                        num(e, "/count"),
                        s(e, "/message").into(),
                    ]
                })
                .collect();
            for l in render(&head, &rows, true).lines() {
                out.push_str(&format!("  {l}\n"));
            }
        }
    }
    out
}

fn describe_status(o: &Value, now: Timestamp, out: &mut String) {
    let Some(status) = o.get("status").and_then(Value::as_object) else {
        out.push_str("Status:       <none>\n");
        return;
    };
    let mut rest = status.clone();
    for k in ["conditions", "bootHistory", "lastError", "bmcQuirks"] {
        rest.remove(k);
    }
    if !rest.is_empty() {
        out.push_str("Status:\n");
        out.push_str(&indent_yaml(&Value::Object(rest), 2));
    }
    // Which quirk entries the BMC driver applies (known once the inventory
    // was read through the driver).
    let quirks: Vec<&str> = status
        .get("bmcQuirks")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !quirks.is_empty() {
        out.push_str(&format!("BMC Quirks:   {}\n", quirks.join(", ")));
    } else if status.contains_key("inventory") {
        out.push_str("BMC Quirks:   none (standard path)\n");
    }
    if let Some(e) = status.get("lastError") {
        out.push_str(&format!(
            "Last Error:   {}: {} ({} ago)\n",
            s(e, "/reason"),
            s(e, "/message"),
            age_of(ts(e, "/time"), now)
        ));
    }
    if let Some(cs) = status.get("conditions").and_then(Value::as_array) {
        out.push_str("Conditions:\n");
        let head: Vec<String> = ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]
            .into_iter()
            .map(String::from)
            .collect();
        let rows: Vec<Vec<String>> = cs
            .iter()
            .map(|c| {
                vec![
                    s(c, "/type").into(),
                    s(c, "/status").into(),
                    s(c, "/reason").into(),
                    age_of(ts(c, "/lastTransitionTime"), now),
                    s(c, "/message").into(),
                ]
            })
            .collect();
        for l in render(&head, &rows, true).lines() {
            out.push_str(&format!("  {l}\n"));
        }
    }
    if let Some(bh) = status.get("bootHistory").and_then(Value::as_array) {
        out.push_str("Boot History:\n");
        let head: Vec<String> = ["TIME", "STEP", "DETAIL"]
            .into_iter()
            .map(String::from)
            .collect();
        let rows: Vec<Vec<String>> = bh
            .iter()
            .map(|b| {
                let mut detail = s(b, "/detail").to_string();
                if let Some(n) = b.get("bytes").and_then(Value::as_u64) {
                    detail = format!("{detail} ({n} bytes)").trim().to_string();
                }
                vec![s(b, "/time").into(), s(b, "/step").into(), detail]
            })
            .collect();
        for l in render(&head, &rows, true).lines() {
            out.push_str(&format!("  {l}\n"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_like_kubectl() {
        assert_eq!(human_age(45), "45s");
        assert_eq!(human_age(192), "3m12s");
        assert_eq!(human_age(3600 * 2), "120m");
        assert_eq!(human_age(3600 * 5 + 60), "5h1m");
        assert_eq!(human_age(86400 * 3 + 3600), "3d1h");
    }

    #[test]
    fn machine_table_columns() {
        let m = json!({"metadata": {"name": "rack1-u07", "namespace": "default"},
            "spec": {"classRef": {"name": "flatcar"}},
            "status": {"phase": "Ready", "powerState": "On", "nodeRef": {"name": "n7"}}});
        let t = table(Kind::Machine, &[m], false, false, true);
        let mut lines = t.lines();
        let head: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(head, ["NAME", "PHASE", "POWER", "NODE", "CLASS", "AGE"]);
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(&row[..5], ["rack1-u07", "Ready", "On", "n7", "flatcar"]);
    }

    #[test]
    fn describe_machine_shows_conditions_boot_history_last_error_events() {
        let m = json!({"metadata": {"name": "m1", "namespace": "default",
                "annotations": {LAST_APPLIED: "{}"}},
            "spec": {"bmc": {"address": "ipmi://h"}},
            "status": {"phase": "Provisioning", "bmcQuirks": ["sushy-tools", "lab-settle"],
                "conditions": [{"type": "BmcReachable", "status": "True", "reason": "Connected",
                    "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "lastError": {"reason": "InstallTimeout", "message": "no call-home",
                    "time": "2026-01-01T00:00:00Z"},
                "bootHistory": [{"time": "2026-01-01T00:00:05Z", "step": "TFTP",
                    "detail": "ipxe.efi", "bytes": 1024}]}});
        let ev = json!({"type": "Normal", "reason": "PoweredOn", "message": "power on",
            "count": 2, "lastTimestamp": "2026-01-01T00:00:01Z"});
        let d = describe(Kind::Machine, &m, &[ev]);
        for want in [
            "phase: Provisioning",
            "Last Error:   InstallTimeout: no call-home",
            "BmcReachable   True",
            "TFTP   ipxe.efi (1024 bytes)",
            "Normal   PoweredOn",
            "Annotations:  <none>",
            "BMC Quirks:   sushy-tools, lab-settle",
        ] {
            assert!(d.contains(want), "{want:?} missing:\n{d}");
        }
    }

    #[test]
    fn describe_secret_shows_sizes_not_values() {
        let sec = json!({"metadata": {"name": "bmc", "namespace": "default"},
            "type": "Opaque", "data": {"password": "aHVudGVyMg=="}});
        let d = describe(Kind::Secret, &sec, &[]);
        assert!(d.contains("password:  7 bytes"), "{d}");
        assert!(!d.contains("aHVudGVyMg"));
    }
}
