//! Field paths and sets of them, the unit of ownership in server-side
//! apply: a path is the map keys from the object's root to a field
//! (`spec.holderIdentity`, `metadata.labels.team`). Maps are walked into;
//! everything else is one field as a whole: scalars, `null`, empty maps
//! and lists (lists are atomic here, where kube-apiserver merges lists by
//! key for the kinds that declare it). Also what sets look like as
//! `fieldsV1` in `metadata.managedFields` (`{"f:spec": {"f:x": {}}}`, a
//! `"."` key when a map is owned as well as fields in it). Pure.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub type Path = Vec<String>;
pub type FieldSet = BTreeSet<Path>;

/// Which part of an object a write owns fields of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The object; `status` is not part of it when the kind has a status
    /// subresource.
    Object { status_apart: bool },
    /// The `/status` subresource: `status` only.
    Status,
}

impl Scope {
    /// The `subresource` of a managedFields entry.
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Object { .. } => None,
            Scope::Status => Some("status"),
        }
    }

    /// Whether `path` can be owned in this scope: identity and the
    /// fields the server sets are nobody's.
    pub fn owns(self, path: &[String]) -> bool {
        let first = path.first().map(String::as_str);
        let in_scope = match self {
            Scope::Status => first == Some("status"),
            Scope::Object { status_apart } => !(status_apart && first == Some("status")),
        };
        let server_set = match path {
            [] => true,
            [k] => matches!(k.as_str(), "apiVersion" | "kind" | "metadata"),
            [m, f, ..] if m == "metadata" => matches!(
                f.as_str(),
                "name"
                    | "namespace"
                    | "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "managedFields"
                    | "selfLink"
            ),
            _ => false,
        };
        in_scope && !server_set
    }
}

/// The fields set in `v` that `scope` can own (`null`s are not set).
pub fn fields_of(v: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), scope, &mut out);
    out
}

fn walk(v: &Value, at: &mut Path, scope: Scope, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                at.push(k.clone());
                walk(child, at, scope, out);
                at.pop();
            }
        }
        Value::Null => {}
        _ => {
            if scope.owns(at) {
                out.insert(at.clone());
            }
        }
    }
}

/// Whether `a` is `b` or a map holding it.
pub fn is_prefix(a: &[String], b: &[String]) -> bool {
    b.starts_with(a)
}

/// Whether owning one of the two fields touches the other.
pub fn overlaps(a: &[String], b: &[String]) -> bool {
    is_prefix(a, b) || is_prefix(b, a)
}

pub fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |cur, k| cur.as_object()?.get(k))
        .filter(|v| !v.is_null())
}

/// Set the field at `path` to `value`, creating the maps on the way (a
/// non-map in the way is replaced by one). An empty map only makes sure
/// the map exists: it never clears fields others set in it.
pub fn set(v: &mut Value, path: &[String], value: &Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for k in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Some(m) = cur.as_object_mut() else {
            return;
        };
        cur = m
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    let Some(m) = cur.as_object_mut() else {
        return;
    };
    match value {
        Value::Object(o) if o.is_empty() => {
            let slot = m
                .entry(last.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
        }
        _ => {
            m.insert(last.clone(), value.clone());
        }
    }
}

/// Remove the field at `path`; maps left empty by it go too.
pub fn remove(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(m) = v.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        m.remove(first);
        return;
    }
    if let Some(child) = m.get_mut(first) {
        remove(child, rest);
        if child.as_object().is_some_and(Map::is_empty) {
            m.remove(first);
        }
    }
}

/// What a write changed, field by field: fields set or changed in `new`,
/// and fields `old` had that `new` has not.
pub fn diff(old: &Value, new: &Value, scope: Scope) -> (FieldSet, FieldSet) {
    let (mut changed, mut removed) = (FieldSet::new(), FieldSet::new());
    diff_at(old, new, &mut Vec::new(), scope, &mut changed, &mut removed);
    (changed, removed)
}

fn diff_at(
    old: &Value,
    new: &Value,
    at: &mut Path,
    scope: Scope,
    changed: &mut FieldSet,
    removed: &mut FieldSet,
) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) if !o.is_empty() && !n.is_empty() => {
            for (k, nv) in n {
                at.push(k.clone());
                match o.get(k) {
                    Some(ov) => diff_at(ov, nv, at, scope, changed, removed),
                    None => walk(nv, at, scope, changed),
                }
                at.pop();
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                at.push(k.clone());
                removed.insert(at.clone());
                at.pop();
            }
        }
        _ if old == new => {}
        _ => {
            let before = fields_of_at(old, at, scope);
            let after = fields_of_at(new, at, scope);
            removed.extend(before.difference(&after).cloned());
            changed.extend(after);
        }
    }
}

fn fields_of_at(v: &Value, at: &Path, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    walk(v, &mut at.clone(), scope, &mut out);
    out
}

/// A field path as kube-apiserver prints it: `.spec.holderIdentity`.
pub fn display(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// `fieldsV1` of a set of fields.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    #[derive(Default)]
    struct Node {
        owned: bool,
        children: std::collections::BTreeMap<String, Node>,
    }
    fn render(n: &Node) -> Value {
        let mut m = Map::new();
        if n.owned && !n.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &n.children {
            m.insert(format!("f:{k}"), render(c));
        }
        Value::Object(m)
    }
    let mut root = Node::default();
    for path in set {
        let mut cur = &mut root;
        for k in path {
            cur = cur.children.entry(k.clone()).or_default();
        }
        cur.owned = true;
    }
    render(&root)
}

/// The set of fields `fieldsV1` names (keys other than `f:` and `.`,
/// which metalherd never writes, make their map owned as a whole).
pub fn from_fields_v1(v: &Value) -> FieldSet {
    fn read(v: &Value, at: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else {
            return;
        };
        if m.is_empty() {
            if !at.is_empty() {
                out.insert(at.clone());
            }
            return;
        }
        for (k, child) in m {
            match k.strip_prefix("f:") {
                Some(name) => {
                    at.push(name.to_string());
                    read(child, at, out);
                    at.pop();
                }
                None if !at.is_empty() => {
                    out.insert(at.clone());
                }
                None => {}
            }
        }
    }
    let mut out = FieldSet::new();
    read(v, &mut Vec::new(), &mut out);
    out
}
