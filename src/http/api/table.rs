//! Server-side printing: `Accept: application/json;as=Table;g=meta.k8s.io;v=v1`
//! answers a `meta.k8s.io/v1` Table, as kube-apiserver does. The metalherd
//! kinds' columns are their CRDs' `additionalPrinterColumns` (a Name column
//! first, `priority: 1` columns only shown by `kubectl get -o wide`); cells
//! are the columns' JSON paths evaluated on the object, `date` columns as
//! ages. Secrets, Events, Namespaces and Leases get kube-apiserver's own
//! columns for them.

use axum::http::{HeaderMap, header};
use jiff::Timestamp;
use serde_json::{Value, json};

use crate::api::Kind;

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// What each row carries beside its cells (`?includeObject=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    /// The default: a `PartialObjectMetadata` with the object's metadata.
    Metadata,
    Object,
}

impl IncludeObject {
    pub fn parse(s: Option<&str>) -> IncludeObject {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether the client accepts a `meta.k8s.io/v1` Table (kubectl lists it
/// first, before plain JSON).
pub fn wanted(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.first() == Some(&"application/json")
                && params.contains(&"as=Table")
                && params.contains(&"g=meta.k8s.io")
                && params.contains(&"v=v1")
        })
}

struct Column {
    name: String,
    type_: String,
    format: String,
    description: String,
    priority: i32,
    /// `None` for the columns computed in [`builtin_cells`].
    path: Option<String>,
}

fn column(name: &str, type_: &str, priority: i32, path: Option<&str>) -> Column {
    Column {
        name: name.into(),
        type_: type_.into(),
        format: if name == "Name" {
            "name".into()
        } else {
            String::new()
        },
        description: if name == "Name" {
            NAME_DESCRIPTION.into()
        } else {
            String::new()
        },
        priority,
        path: path.map(String::from),
    }
}

fn columns(kind: Kind) -> Vec<Column> {
    match kind {
        Kind::Secret => vec![
            column("Name", "string", 0, Some(".metadata.name")),
            column("Type", "string", 0, Some(".type")),
            column("Data", "string", 0, None),
            column("Age", "string", 0, Some(".metadata.creationTimestamp")),
        ],
        Kind::Namespace => vec![
            column("Name", "string", 0, Some(".metadata.name")),
            column("Status", "string", 0, Some(".status.phase")),
            column("Age", "string", 0, Some(".metadata.creationTimestamp")),
        ],
        Kind::Lease => vec![
            column("Name", "string", 0, Some(".metadata.name")),
            column("Holder", "string", 0, Some(".spec.holderIdentity")),
            column("Age", "string", 0, Some(".metadata.creationTimestamp")),
        ],
        Kind::Event => vec![
            column("Last Seen", "string", 0, None),
            column("Type", "string", 0, Some(".type")),
            column("Reason", "string", 0, Some(".reason")),
            column("Object", "string", 0, None),
            column("Subobject", "string", 1, None),
            column("Source", "string", 1, Some(".source.component")),
            column("Message", "string", 0, Some(".message")),
            column("First Seen", "string", 1, Some(".firstTimestamp")),
            column("Count", "string", 1, None),
            column("Name", "string", 1, Some(".metadata.name")),
        ],
        _ => crd_columns(kind),
    }
}

fn crd_columns(kind: Kind) -> Vec<Column> {
    let mut cols = vec![column("Name", "string", 0, Some(".metadata.name"))];
    let version = crate::api::crds()
        .iter()
        .find(|c| c.spec.names.kind == kind.as_str())
        .and_then(|c| {
            c.spec
                .versions
                .iter()
                .find(|v| v.name == crate::api::VERSION)
        });
    for c in version
        .and_then(|v| v.additional_printer_columns.as_ref())
        .into_iter()
        .flatten()
    {
        cols.push(Column {
            name: c.name.clone(),
            type_: c.type_.clone(),
            format: c.format.clone().unwrap_or_default(),
            description: c.description.clone().unwrap_or_default(),
            priority: c.priority.unwrap_or(0),
            path: Some(c.json_path.clone()),
        });
    }
    cols
}

/// Evaluate a simple JSON path (`.status.nodeRef.name`, `.items[0].x`).
pub fn eval<'a>(o: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = o;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (field, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        for idx in indexes.split('[').filter(|s| !s.is_empty()) {
            let n: usize = idx.trim_end_matches(']').parse().ok()?;
            cur = cur.get(n)?;
        }
    }
    (!cur.is_null()).then_some(cur)
}

/// kubectl's short human duration (`45s`, `3m12s`, `2h`, `5d3h`), as
/// kube-apiserver prints ages in tables.
pub fn human_age(secs: i64) -> String {
    if secs < 0 {
        return "0s".into();
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        match secs % 60 {
            0 => format!("{m}m"),
            r => format!("{m}m{r}s"),
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            r => format!("{d}d{r}h"),
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

fn age(v: &Value, now: Timestamp) -> Value {
    match v.as_str().and_then(|s| s.parse::<Timestamp>().ok()) {
        Some(t) => json!(human_age(now.as_second() - t.as_second())),
        None => Value::Null,
    }
}

/// A cell as kube-apiserver's CRD table convertor makes it.
fn cell(col: &Column, v: Option<&Value>, now: Timestamp) -> Value {
    let Some(v) = v else {
        return Value::Null;
    };
    match col.type_.as_str() {
        "date" => age(v, now),
        "integer" => v.as_i64().map_or(Value::Null, Value::from),
        "number" => v.as_f64().map_or(Value::Null, Value::from),
        "boolean" => v.as_bool().map_or(Value::Null, Value::from),
        _ => match v {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

/// Cells the built-in kinds compute rather than read from one path.
fn builtin_cell(kind: Kind, col: &Column, o: &Value, now: Timestamp) -> Value {
    match (kind, col.name.as_str()) {
        (Kind::Secret, "Data") => json!(
            o.get("data")
                .and_then(Value::as_object)
                .map_or(0, |d| d.len())
        ),
        (Kind::Secret, "Type") => json!(o.get("type").and_then(Value::as_str).unwrap_or("Opaque")),
        (k, "Age") if k.is_builtin() => {
            eval(o, ".metadata.creationTimestamp").map_or(Value::Null, |v| age(v, now))
        }
        (Kind::Event, "Last Seen") => eval(o, ".lastTimestamp")
            .or_else(|| eval(o, ".firstTimestamp"))
            .map_or(Value::Null, |v| age(v, now)),
        (Kind::Event, "Subobject") => json!(
            eval(o, ".involvedObject.fieldPath")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
        (Kind::Event, "Count") => eval(o, ".count").cloned().unwrap_or(Value::Null),
        (Kind::Event, "First Seen") => {
            eval(o, ".firstTimestamp").map_or(Value::Null, |v| age(v, now))
        }
        (Kind::Event, "Object") => json!(format!(
            "{}/{}",
            eval(o, ".involvedObject.kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_ascii_lowercase(),
            eval(o, ".involvedObject.name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )),
        _ => cell(col, col.path.as_deref().and_then(|p| eval(o, p)), now),
    }
}

fn row_object(o: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => o.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

/// The Table of `items` (a list, or one object for a GET).
pub fn table(
    kind: Kind,
    items: &[Value],
    resource_version: Option<&str>,
    include: IncludeObject,
) -> Value {
    let now = Timestamp::now();
    let cols = columns(kind);
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| builtin_cell(kind, c, o, now)).collect();
            let mut row = json!({"cells": cells});
            let obj = row_object(o, include);
            if !obj.is_null() {
                row["object"] = obj;
            }
            row
        })
        .collect();
    let mut meta = json!({});
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_header_asks_for_a_table() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert!(wanted(&h));
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        assert!(!wanted(&h));
    }

    #[test]
    fn machine_table_has_printer_columns_wide_ones_at_priority_1() {
        let m = json!({
            "metadata": {"name": "rack1-u07", "namespace": "default",
                         "creationTimestamp": Timestamp::now().to_string()},
            "spec": {"bmc": {"address": "ipmi://10.0.0.5"}, "classRef": {"name": "worker"}},
            "status": {"phase": "Ready", "powerState": "On"}
        });
        let t = table(Kind::Machine, &[m], Some("7"), IncludeObject::Metadata);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            &names[..6],
            ["Name", "Phase", "Power", "Node", "Class", "Age"]
        );
        let bmc = names
            .iter()
            .position(|n| *n == "BMC")
            .expect("wide BMC column");
        assert_eq!(t["columnDefinitions"][bmc]["priority"], 1);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "rack1-u07");
        assert_eq!(cells[1], "Ready");
        assert_eq!(cells[3], Value::Null, "no node yet");
        assert_eq!(cells[4], "worker");
        assert_eq!(cells[5], "0s");
        assert_eq!(cells[bmc], "ipmi://10.0.0.5");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn simple_json_paths() {
        let v = json!({"a": {"b": [{"c": 1}]}});
        assert_eq!(eval(&v, ".a.b[0].c"), Some(&json!(1)));
        assert_eq!(eval(&v, ".a.x"), None);
    }
}
