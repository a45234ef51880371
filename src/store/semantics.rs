//! Kubernetes object semantics, shared by every backend that has to
//! implement them itself: what create, update, update-status and delete do
//! to metadata (uid, resourceVersion, generation, timestamps, finalizers),
//! decided from the stored object and the next resourceVersion. Pure.

use serde_json::{Map, Value};

use super::{StoreError, WatchEvent, key_of};
use crate::api::{Kind, validate};

/// What a write does to the stored object.
#[derive(Debug)]
pub enum Change {
    /// Nothing changed: no new resourceVersion, no event.
    Unchanged(Value),
    Put {
        object: Value,
        event: ChangeType,
    },
    Remove {
        last: Value,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum ChangeType {
    Added,
    Modified,
}

impl ChangeType {
    pub fn into_event(self, obj: Value) -> WatchEvent {
        match self {
            ChangeType::Added => WatchEvent::Added(obj),
            ChangeType::Modified => WatchEvent::Modified(obj),
        }
    }
}

/// Kubernetes' timestamp format (RFC 3339, seconds, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn meta_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    let o = obj
        .as_object_mut()
        .ok_or_else(|| StoreError::Malformed("an object must be a JSON map".into()))?;
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    m.as_object_mut()
        .ok_or_else(|| StoreError::Malformed("metadata must be a map".into()))
}

fn meta_get<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata").and_then(|m| m.get(field))
}

/// Normalise and validate what a client sent for create/update: apiVersion
/// and kind filled in, default namespace (none for cluster-scoped kinds),
/// Secret `stringData` folded into base64 `data` and its type defaulted,
/// then the kind's validation.
pub fn prepare_input(kind: Kind, mut obj: Value) -> Result<Value, StoreError> {
    {
        let o = obj
            .as_object_mut()
            .ok_or_else(|| StoreError::Malformed("an object must be a JSON map".into()))?;
        o.insert("apiVersion".into(), kind.api_version().into());
        o.insert("kind".into(), kind.as_str().into());
    }
    let (ns, _) = key_of(&obj);
    if kind.namespaced() {
        meta_mut(&mut obj)?.insert("namespace".into(), ns.into());
    } else {
        meta_mut(&mut obj)?.remove("namespace");
    }
    if kind == Kind::Secret {
        fold_string_data(&mut obj)?;
        default_secret_type(&mut obj);
    }
    validate::validate(kind, &obj)?;
    Ok(obj)
}

/// A Secret without a type is `Opaque`, as kube-apiserver's defaulting
/// makes it (`kubectl get secret -o yaml` shows it).
fn default_secret_type(obj: &mut Value) {
    if let Some(o) = obj.as_object_mut()
        && o.get("type")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        o.insert("type".into(), "Opaque".into());
    }
}

fn fold_string_data(obj: &mut Value) -> Result<(), StoreError> {
    use base64::Engine;
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    let Some(sd) = o.remove("stringData") else {
        return Ok(());
    };
    let sd = sd
        .as_object()
        .ok_or_else(|| StoreError::Malformed("stringData must be a map".into()))?
        .clone();
    let data = o.entry("data").or_insert_with(|| Value::Object(Map::new()));
    let data = data
        .as_object_mut()
        .ok_or_else(|| StoreError::Malformed("data must be a map".into()))?;
    for (k, v) in sd {
        let s = v
            .as_str()
            .ok_or_else(|| StoreError::Malformed(format!("stringData.{k} must be a string")))?;
        data.insert(
            k,
            base64::engine::general_purpose::STANDARD.encode(s).into(),
        );
    }
    Ok(())
}

/// Everything but metadata and status: a change here moves `generation`.
fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn check_rv(kind: Kind, cur: &Value, new: &Value) -> Result<(), StoreError> {
    let Some(want) = meta_get(new, "resourceVersion").and_then(Value::as_str) else {
        return Ok(());
    };
    if want.is_empty() {
        return Ok(());
    }
    let have = meta_get(cur, "resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if want != have {
        let (ns, name) = key_of(cur);
        return Err(StoreError::Conflict {
            kind,
            namespace: ns,
            name,
            expected: want.to_string(),
            current: have.to_string(),
        });
    }
    Ok(())
}

fn not_found(kind: Kind, obj: &Value) -> StoreError {
    let (namespace, name) = key_of(obj);
    StoreError::NotFound {
        kind,
        namespace,
        name,
    }
}

fn set_rv(obj: &mut Value, rv: u64) -> Result<(), StoreError> {
    meta_mut(obj)?.insert("resourceVersion".into(), rv.to_string().into());
    Ok(())
}

fn finalizers_empty(obj: &Value) -> bool {
    meta_get(obj, "finalizers")
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty())
}

/// Whether objects of `kind` have a `metadata.generation`: the metalherd
/// kinds do, as kube-apiserver keeps one for every custom resource;
/// Kubernetes' own kinds served here (Secrets, Events, Leases, Namespaces)
/// have none there, so none here either.
pub fn tracks_generation(kind: Kind) -> bool {
    !kind.is_builtin()
}

pub fn create(
    kind: Kind,
    cur: Option<Value>,
    mut obj: Value,
    rv: u64,
) -> Result<Change, StoreError> {
    if cur.is_some() {
        let (namespace, name) = key_of(&obj);
        return Err(StoreError::AlreadyExists {
            kind,
            namespace,
            name,
        });
    }
    {
        let m = meta_mut(&mut obj)?;
        m.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        m.insert("resourceVersion".into(), rv.to_string().into());
        if tracks_generation(kind) {
            m.insert("generation".into(), 1.into());
        } else {
            m.remove("generation");
        }
        m.insert("creationTimestamp".into(), now_rfc3339().into());
        m.remove("deletionTimestamp");
    }
    if kind.has_status()
        && let Some(o) = obj.as_object_mut()
    {
        // Status is written only through the status subresource.
        o.remove("status");
    }
    Ok(Change::Put {
        object: obj,
        event: ChangeType::Added,
    })
}

pub fn update(
    kind: Kind,
    cur: Option<Value>,
    mut obj: Value,
    rv: u64,
) -> Result<Change, StoreError> {
    let cur = cur.ok_or_else(|| not_found(kind, &obj))?;
    check_rv(kind, &cur, &obj)?;
    let generation = meta_get(&cur, "generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let spec_changed = spec_part(&cur) != spec_part(&obj);
    {
        let m = meta_mut(&mut obj)?;
        for f in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "resourceVersion",
        ] {
            match meta_get(&cur, f) {
                Some(v) => m.insert(f.into(), v.clone()),
                None => m.remove(f),
            };
        }
        let g = if spec_changed {
            generation + 1
        } else {
            generation
        };
        if tracks_generation(kind) {
            m.insert("generation".into(), g.into());
        } else {
            m.remove("generation");
        }
    }
    if kind.has_status()
        && let Some(o) = obj.as_object_mut()
    {
        match cur.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
    }
    if meta_get(&obj, "deletionTimestamp").is_some() && finalizers_empty(&obj) {
        set_rv(&mut obj, rv)?;
        return Ok(Change::Remove { last: obj });
    }
    if obj == cur {
        return Ok(Change::Unchanged(cur));
    }
    set_rv(&mut obj, rv)?;
    Ok(Change::Put {
        object: obj,
        event: ChangeType::Modified,
    })
}

pub fn update_status(
    kind: Kind,
    cur: Option<Value>,
    obj: Value,
    rv: u64,
) -> Result<Change, StoreError> {
    if !kind.has_status() {
        return Err(StoreError::Malformed(format!(
            "{kind} has no status subresource"
        )));
    }
    let cur = cur.ok_or_else(|| not_found(kind, &obj))?;
    check_rv(kind, &cur, &obj)?;
    let mut new = cur.clone();
    if let Some(o) = new.as_object_mut() {
        match obj.get("status") {
            Some(s) if !s.is_null() => o.insert("status".into(), s.clone()),
            _ => o.remove("status"),
        };
    }
    // The record of who owns which status fields changes with them (a
    // writer that sends none keeps it as it is).
    if let Some(mf) = meta_get(&obj, "managedFields") {
        meta_mut(&mut new)?.insert("managedFields".into(), mf.clone());
    }
    if new == cur {
        return Ok(Change::Unchanged(cur));
    }
    set_rv(&mut new, rv)?;
    Ok(Change::Put {
        object: new,
        event: ChangeType::Modified,
    })
}

pub fn delete(
    kind: Kind,
    namespace: &str,
    name: &str,
    cur: Option<Value>,
    rv: u64,
) -> Result<Change, StoreError> {
    let Some(mut cur) = cur else {
        return Err(StoreError::NotFound {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        });
    };
    if finalizers_empty(&cur) {
        set_rv(&mut cur, rv)?;
        return Ok(Change::Remove { last: cur });
    }
    if meta_get(&cur, "deletionTimestamp").is_some() {
        return Ok(Change::Unchanged(cur));
    }
    meta_mut(&mut cur)?.insert("deletionTimestamp".into(), now_rfc3339().into());
    set_rv(&mut cur, rv)?;
    Ok(Change::Put {
        object: cur,
        event: ChangeType::Modified,
    })
}
