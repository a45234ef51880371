//! Server-side apply and field ownership, kept in `metadata.managedFields`
//! in kube-apiserver's format (manager, operation `Apply` or `Update`,
//! apiVersion, time, `subresource: status`, `fieldsV1`).
//!
//! The model is a simplified one (see [`paths`]): a field is a path of map
//! keys; lists are owned as a whole (kube-apiserver merges some lists by
//! key: `conditions` by `type`, for one; here an applier that sets a list
//! sets all of it, and another manager changing the list conflicts). With
//! that:
//!
//! - An apply ([`apply`]) sets the fields of the applied configuration and
//!   owns them; the fields it owned before and no longer applies are
//!   removed from the object unless another manager owns them too. A field
//!   another manager owns and the apply would change is a conflict (409,
//!   naming the manager and the field) unless `force`, which takes it
//!   over. Applying the value already there shares ownership.
//! - Every other write through the API ([`track_update`]: create, PUT,
//!   merge/JSON/strategic patches, `/status`, `/scale`) is an `Update`:
//!   its manager (`fieldManager`, else the client's User-Agent product)
//!   takes the fields it changed from everyone else, and removed fields
//!   leave every set.
//! - The controllers write through the store, not the API: their writes
//!   are nobody's and keep the entries as they read them.
//! - `metadata.managedFields` sent by a client with an update replaces the
//!   server's record when it is a well-formed, non-empty list, as with
//!   kube-apiserver (kubectl rewrites it when moving an object from
//!   client-side to server-side apply); otherwise the server's is kept.
//!   Never on `/status` or an apply.
//!
//! Pure: values in, values out; the handlers in `patch.rs` and
//! `handlers.rs` read and write the store.

pub mod paths;

use serde_json::{Value, json};

pub use paths::Scope;
use paths::{FieldSet, Path};

/// `Apply` or `Update`, as in a managedFields entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One managedFields entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: String,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    fn is(&self, w: &Write<'_>, op: Operation) -> bool {
        self.manager == w.manager
            && self.operation == op
            && self.subresource.as_deref() == w.scope.subresource()
    }

    /// How kube-apiserver names a manager in a conflict.
    fn label(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        // Never the time: kube-apiserver leaves it out of the manager's
        // identity, so its conflicts do not show it either.
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    fn to_value(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": paths::to_fields_v1(&self.fields),
        });
        if let Some(s) = &self.subresource {
            v["subresource"] = s.as_str().into();
        }
        v
    }

    fn from_value(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let operation = match s("operation")? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        Some(Entry {
            manager: s("manager").unwrap_or_default().to_string(),
            operation,
            api_version: s("apiVersion").unwrap_or_default().to_string(),
            time: s("time").unwrap_or_default().to_string(),
            subresource: s("subresource").filter(|s| !s.is_empty()).map(String::from),
            fields: v
                .get("fieldsV1")
                .map(paths::from_fields_v1)
                .unwrap_or_default(),
        })
    }
}

/// The entries recorded on `obj`.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::from_value).collect())
        .unwrap_or_default()
}

/// Record `entries` on `obj` (no key at all when there are none), in
/// kube-apiserver's order: applies before updates, then by time (to the
/// second), manager, apiVersion and subresource.
pub fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut kept: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    kept.sort_by(|a, b| {
        let key = |e: &'_ Entry| {
            (
                e.operation.as_str(),
                e.time.clone(),
                e.manager.clone(),
                e.api_version.clone(),
                e.subresource.clone().unwrap_or_default(),
            )
        };
        key(a).cmp(&key(b))
    });
    let kept: Vec<Value> = kept.into_iter().map(Entry::to_value).collect();
    if kept.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(kept));
    }
}

/// Who writes what, and when.
#[derive(Clone, Copy, Debug)]
pub struct Write<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub scope: Scope,
    /// RFC 3339, seconds.
    pub now: &'a str,
}

/// The record a client wrote into `metadata.managedFields`, when it is one
/// (a non-empty list whose every entry reads); kube-apiserver takes it as
/// the record to bring up to date, which is how kubectl moves an object
/// from client-side to server-side apply. Anything else is no record.
pub fn sent(obj: &Value) -> Option<Vec<Entry>> {
    let list = obj.pointer("/metadata/managedFields")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    list.iter().map(Entry::from_value).collect()
}

/// `obj` with the server's record brought up to date for an `Update` from
/// `old` (none when creating) to `obj` by `w.manager`: the record the
/// client `sent` ([`sent`]), else `old`'s.
pub fn track_update(old: Option<&Value>, sent: Option<Vec<Entry>>, obj: &mut Value, w: &Write<'_>) {
    let mut list = sent.unwrap_or_else(|| old.map(entries).unwrap_or_default());
    let empty = json!({});
    let (changed, removed) = paths::diff(old.unwrap_or(&empty), obj, w.scope);
    let changed: FieldSet = changed.into_iter().filter(|p| w.scope.owns(p)).collect();
    for e in &mut list {
        e.fields
            .retain(|q| !removed.iter().any(|r| paths::is_prefix(r, q)));
        if !e.is(w, Operation::Update) {
            e.fields
                .retain(|q| !changed.iter().any(|p| paths::is_prefix(p, q)));
        }
    }
    if !changed.is_empty() {
        match list.iter_mut().find(|e| e.is(w, Operation::Update)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = w.now.to_string();
                e.api_version = w.api_version.to_string();
            }
            None => list.push(Entry {
                manager: w.manager.to_string(),
                operation: Operation::Update,
                api_version: w.api_version.to_string(),
                time: w.now.to_string(),
                subresource: w.scope.subresource().map(String::from),
                fields: changed,
            }),
        }
    }
    set_entries(obj, &list);
}

/// A field another manager owns that an apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// As kube-apiserver names it: `"kubectl-edit" using v1`.
    pub manager: String,
    pub field: Path,
}

/// kube-apiserver's message for a refused apply.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager,
            paths::display(&c.field)
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        for c in conflicts.iter().filter(|c| c.manager == m) {
            lines.push(format!("- {}", paths::display(&c.field)));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Apply `config` (the manager's whole intent for its fields) to `live`
/// (`None`: the object is created from it). Returns the object to write,
/// its managedFields recorded, or the conflicts when not `force`d.
pub fn apply(
    live: Option<&Value>,
    config: &Value,
    w: &Write<'_>,
    force: bool,
) -> Result<Value, Vec<Conflict>> {
    let mut list = live.map(entries).unwrap_or_default();
    let applied = paths::fields_of(config, w.scope);
    let mine = |e: &Entry| e.is(w, Operation::Apply);

    let mut conflicts = Vec::new();
    if let Some(live) = live {
        for e in list.iter().filter(|e| !mine(e)) {
            for q in &e.fields {
                let differs = applied
                    .iter()
                    .any(|p| paths::overlaps(p, q) && changes(Some(live), config, p));
                if differs {
                    conflicts.push(Conflict {
                        manager: e.label(),
                        field: q.clone(),
                    });
                }
            }
        }
    }
    let mut force = force;
    if !conflicts.is_empty() && !force && w.manager == LAST_APPLIED_MANAGER {
        // kube-apiserver's move from client-side apply: kubectl's apply may
        // take the fields its last client-side apply set, as long as they
        // still hold what it set then.
        let allowed = last_applied_fields(live, w);
        conflicts.retain(|c| !allowed.contains(&c.field));
        force = conflicts.is_empty();
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    if force {
        // Forced: the fields change hands (none do without conflicts).
        for e in list.iter_mut().filter(|e| !mine(e)) {
            e.fields.retain(|q| {
                !applied
                    .iter()
                    .any(|p| paths::overlaps(p, q) && changes(live, config, p))
            });
        }
    }

    let mut obj = match live {
        Some(l) => l.clone(),
        None => json!({
            "apiVersion": config.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": config.get("kind").cloned().unwrap_or(Value::Null),
            "metadata": {
                "name": config.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
                "namespace": config.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
            },
        }),
    };
    // Fields this manager applied before and no longer does go, unless
    // someone else owns them too.
    let before = list
        .iter()
        .find(|e| mine(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for q in before.difference(&applied) {
        let shared = list
            .iter()
            .filter(|e| !mine(e))
            .any(|e| e.fields.iter().any(|o| paths::overlaps(o, q)));
        if !shared {
            paths::remove(&mut obj, q);
        }
    }
    for p in &applied {
        if let Some(v) = paths::get(config, p) {
            paths::set(&mut obj, p, v);
        }
    }
    list.retain(|e| !mine(e));
    list.push(Entry {
        manager: w.manager.to_string(),
        operation: Operation::Apply,
        api_version: w.api_version.to_string(),
        time: w.now.to_string(),
        subresource: w.scope.subresource().map(String::from),
        fields: applied,
    });
    set_entries(&mut obj, &list);
    if w.manager == LAST_APPLIED_MANAGER {
        sync_last_applied(&mut obj, config);
    }
    Ok(obj)
}

/// The manager whose applies kube-apiserver reconciles with client-side
/// apply's annotation: kubectl's default for `apply --server-side`.
const LAST_APPLIED_MANAGER: &str = "kubectl";

/// The annotation where client-side `kubectl apply` keeps what it applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The fields of `live`'s last-applied annotation (of the same apiVersion)
/// that still hold the values it names: those kubectl's server-side apply
/// may take from the client-side apply that set them.
fn last_applied_fields(live: Option<&Value>, w: &Write<'_>) -> FieldSet {
    let Some(live) = live else {
        return FieldSet::new();
    };
    let Some(la) = last_applied(live).and_then(|s| serde_json::from_str::<Value>(s).ok()) else {
        return FieldSet::new();
    };
    if la.get("apiVersion").and_then(Value::as_str) != Some(w.api_version) {
        return FieldSet::new();
    }
    paths::fields_of(&la, w.scope)
        .into_iter()
        .filter(|p| paths::get(&la, p) == paths::get(live, p))
        .collect()
}

/// After kubectl's server-side apply, the last-applied annotation (when
/// the object has one) holds the configuration just applied, as
/// kube-apiserver keeps it, so a later client-side apply diffs against it.
fn sync_last_applied(obj: &mut Value, config: &Value) {
    if last_applied(obj).is_none() {
        return;
    }
    let mut applied = config.clone();
    if let Some(a) = applied
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    // Encoded as kube-apiserver encodes it: keys sorted, a newline last.
    let text = format!("{applied}\n");
    if let Some(a) = obj
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.insert(LAST_APPLIED.into(), text.into());
    }
}

/// Whether applying `config`'s field `p` changes `live`. An empty map
/// only asks for the map to exist: it changes nothing in one that does.
fn changes(live: Option<&Value>, config: &Value, p: &[String]) -> bool {
    let (l, c) = (live.and_then(|l| paths::get(l, p)), paths::get(config, p));
    match c {
        Some(Value::Object(m)) if m.is_empty() => !matches!(l, Some(Value::Object(_))),
        _ => l != c,
    }
}

/// Whether two versions of an object are the same write: equal apart from
/// the times in their managedFields.
pub fn same_but_times(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        let es: Vec<Entry> = entries(&v)
            .into_iter()
            .map(|mut e| {
                e.time.clear();
                e
            })
            .collect();
        set_entries(&mut v, &es);
        v
    };
    strip(a) == strip(b)
}

/// The manager of a write: `fieldManager`, else the product of the
/// client's User-Agent (`kubectl/v1.32.4 (linux/amd64)` is `kubectl`), as
/// kube-apiserver names it.
pub fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    field_manager
        .filter(|m| !m.is_empty())
        .or_else(|| {
            user_agent
                .and_then(|u| u.split('/').next())
                .filter(|p| !p.is_empty())
        })
        .unwrap_or("unknown")
        .to_string()
}

#[cfg(test)]
mod tests;
