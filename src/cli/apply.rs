//! `apply -f FILE|DIR|-`: create or update every document of multi-document
//! YAML. Updates are three-way merge patches (last applied manifest, this
//! manifest, live object), as kubectl does for custom resources, so fields
//! controllers set (finalizers, claim labels) survive a re-apply. An invalid
//! document prints its field-path errors and changes nothing; the others
//! still apply, and the command exits non-zero.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::GlobalArgs;
use super::client::{ApiClient, ClientError};
use super::kinds::LAST_APPLIED;
use crate::api::validate::validate;
use crate::api::{Kind, ValidationErrors};
use crate::http::api::normalize::normalize;
use crate::store::DEFAULT_NAMESPACE;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Manifest file, directory of manifests (*.yaml, *.yml, *.json), or `-`
    /// for stdin. Repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
    /// Namespace for documents that name none.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// One document read from a manifest source.
struct Doc {
    source: String,
    value: Value,
}

pub async fn run(g: &GlobalArgs, a: ApplyArgs) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    let mut failed = 0usize;
    for f in &a.files {
        match read_source(f) {
            Ok(mut d) => docs.append(&mut d),
            Err(e) => {
                eprintln!("error: {e:#}");
                failed += 1;
            }
        }
    }
    let client = ApiClient::from_global(g)?;
    let total = docs.len();
    for d in docs {
        // A directory may hold config files next to manifests (deploy/examples
        // does): a document with neither apiVersion nor kind is not an object.
        if d.value.get("apiVersion").is_none() && d.value.get("kind").is_none() {
            eprintln!(
                "skipped: {}: not an object manifest (no apiVersion or kind)",
                d.source
            );
            continue;
        }
        match apply_one(&client, &d.value, a.namespace.as_deref()).await {
            Ok(line) => println!("{line}"),
            // The server is unreachable or refuses us: nothing else will work.
            Err(ApplyError::Client(
                e @ (ClientError::NotRunning { .. } | ClientError::Unauthorized { .. }),
            )) => {
                return Err(e.into());
            }
            Err(e) => {
                eprintln!("error: {}: {e}", d.source);
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {total} documents were not applied");
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
enum ApplyError {
    #[error("{0}")]
    Doc(String),
    #[error("{what} is invalid:{}", fmt_causes(.errs))]
    Invalid {
        what: String,
        errs: ValidationErrors,
    },
    #[error(transparent)]
    Client(ClientError),
}

fn fmt_causes(e: &ValidationErrors) -> String {
    e.0.iter().map(|c| format!("\n  {c}")).collect()
}

/// Read every document of a file, a directory (its *.yaml, *.yml, *.json,
/// sorted) or stdin.
fn read_source(f: &str) -> anyhow::Result<Vec<Doc>> {
    if f == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read stdin")?;
        return parse_docs("<stdin>", &text);
    }
    let p = Path::new(f);
    if p.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(p)
            .with_context(|| format!("cannot read directory {f}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(
                        p.extension().and_then(|e| e.to_str()),
                        Some("yaml" | "yml" | "json")
                    )
            })
            .collect();
        files.sort();
        let mut out = Vec::new();
        for file in files {
            out.append(&mut read_file(&file)?);
        }
        return Ok(out);
    }
    read_file(p)
}

fn read_file(p: &Path) -> anyhow::Result<Vec<Doc>> {
    let text =
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
    parse_docs(&p.display().to_string(), &text)
}

fn parse_docs(source: &str, text: &str) -> anyhow::Result<Vec<Doc>> {
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = Value::deserialize(de)
            .with_context(|| format!("{source}: document {} is not valid YAML", i + 1))?;
        if v.is_null() {
            continue;
        }
        out.push(Doc {
            source: format!("{source} (document {})", i + 1),
            value: v,
        });
    }
    Ok(out)
}

/// The kind a manifest declares, checked against its apiVersion.
fn manifest_kind(v: &Value) -> Result<Kind, ApplyError> {
    let k = v.get("kind").and_then(Value::as_str).unwrap_or_default();
    let kind = Kind::ALL
        .into_iter()
        .find(|x| x.as_str() == k)
        .ok_or_else(|| {
            ApplyError::Doc(format!(
                "kind: unknown kind {k:?} (metalherd keeps Machine, MachineClass, MachineSet, DiscoveredMachine, Secret, Event, Lease)"
            ))
        })?;
    let av = v
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if av != kind.api_version() {
        return Err(ApplyError::Doc(format!(
            "apiVersion: {av:?} is not the apiVersion of {kind} (expected {:?})",
            kind.api_version()
        )));
    }
    Ok(kind)
}

async fn apply_one(
    client: &ApiClient,
    doc: &Value,
    default_ns: Option<&str>,
) -> Result<String, ApplyError> {
    let kind = manifest_kind(doc)?;
    let mut doc = doc.clone();
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let what = format!("{}/{}", kind.singular(), name);
    let doc_ns = doc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(String::from);
    let ns = match (doc_ns, default_ns) {
        (Some(d), Some(f)) if d != f => {
            return Err(ApplyError::Doc(format!(
                "{what}: metadata.namespace {d:?} does not match -n {f:?}"
            )));
        }
        (Some(d), _) => d,
        (None, Some(f)) => f.to_string(),
        (None, None) => DEFAULT_NAMESPACE.to_string(),
    };
    if let Some(m) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("namespace".into(), ns.clone().into());
    }
    validate(kind, &doc).map_err(|errs| ApplyError::Invalid {
        what: what.clone(),
        errs,
    })?;
    let full = normalize(kind, &doc).map_err(|errs| ApplyError::Invalid {
        what: what.clone(),
        errs,
    })?;
    let modified = applied_part(&full);
    let last = last_applied_text(kind, &modified);
    let server = |e: ClientError| match e {
        ClientError::Api(s) if !s.causes.is_empty() => ApplyError::Invalid {
            what: what.clone(),
            errs: ValidationErrors(s.causes),
        },
        e => ApplyError::Client(e),
    };
    match client.get(kind, &ns, &name).await {
        Err(e) if e.is_not_found() => {
            let mut obj = full;
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
            set_annotation(&mut obj, &last);
            client.create(kind, &obj).await.map_err(server)?;
            Ok(format!("{what} created"))
        }
        Err(e) => Err(server(e)),
        Ok(current) => {
            let original = current
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(LAST_APPLIED))
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .map(|v| applied_part(&v));
            let mut patch = three_way(original.as_ref(), &modified, &current);
            if patch.is_empty() {
                return Ok(format!("{what} unchanged"));
            }
            let mut patch = Value::Object(std::mem::take(&mut patch));
            set_annotation(&mut patch, &last);
            client
                .patch(kind, &ns, &name, &patch)
                .await
                .map_err(server)?;
            Ok(format!("{what} configured"))
        }
    }
}

/// The part of an object a manifest owns: everything but apiVersion, kind
/// and status, and of metadata only labels and annotations (without the
/// last-applied one).
fn applied_part(v: &Value) -> Value {
    let mut out = Map::new();
    if let Some(o) = v.as_object() {
        for (k, val) in o {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "status" | "metadata") {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    let mut meta = Map::new();
    if let Some(l) = v.pointer("/metadata/labels").filter(|l| l.is_object()) {
        meta.insert("labels".into(), l.clone());
    }
    if let Some(a) = v
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        let mut a = a.clone();
        a.remove(LAST_APPLIED);
        if !a.is_empty() {
            meta.insert("annotations".into(), Value::Object(a));
        }
    }
    if !meta.is_empty() {
        out.insert("metadata".into(), Value::Object(meta));
    }
    Value::Object(out)
}

/// The last-applied annotation's text. Secret values are blanked: only the
/// key names are needed to notice a removed key, and values must not be
/// copied into metadata.
fn last_applied_text(kind: Kind, modified: &Value) -> String {
    let mut v = modified.clone();
    if kind == Kind::Secret
        && let Some(d) = v.get_mut("data").and_then(Value::as_object_mut)
    {
        for val in d.values_mut() {
            *val = Value::String(String::new());
        }
    }
    serde_json::to_string(&v).unwrap_or_default()
}

fn set_annotation(obj: &mut Value, last: &str) {
    if let Some(o) = obj.as_object_mut() {
        let meta = o
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(m) = meta.as_object_mut() {
            let ann = m
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(a) = ann.as_object_mut() {
                a.insert(LAST_APPLIED.into(), last.into());
            }
        }
    }
}

/// A JSON merge patch taking `current` to `modified`, deleting only what
/// `original` (the last applied manifest) had and `modified` dropped.
fn three_way(original: Option<&Value>, modified: &Value, current: &Value) -> Map<String, Value> {
    let mut patch = Map::new();
    let Some(m) = modified.as_object() else {
        return patch;
    };
    for (k, mv) in m {
        let cv = current.get(k);
        match (mv, cv) {
            (Value::Object(_), Some(cv @ Value::Object(_))) => {
                let sub = three_way(original.and_then(|o| o.get(k)), mv, cv);
                if !sub.is_empty() {
                    patch.insert(k.clone(), Value::Object(sub));
                }
            }
            _ if cv == Some(mv) => {}
            _ => {
                patch.insert(k.clone(), mv.clone());
            }
        }
    }
    if let Some(o) = original.and_then(Value::as_object) {
        for k in o.keys() {
            if !m.contains_key(k) && current.get(k).is_some() {
                patch.insert(k.clone(), Value::Null);
            }
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_way_keeps_fields_others_set() {
        let original = json!({"metadata": {"labels": {"rack": "1"}}, "spec": {"online": false}});
        let modified = json!({"metadata": {"labels": {"rack": "2"}}, "spec": {"online": false}});
        let current = json!({"metadata": {"labels": {"rack": "1", "claimed-by": "ms"},
            "finalizers": ["x"]}, "spec": {"online": false, "classRef": {"name": "c"}}});
        let p = three_way(Some(&original), &modified, &current);
        assert_eq!(
            Value::Object(p),
            json!({"metadata": {"labels": {"rack": "2"}}})
        );
    }

    #[test]
    fn three_way_deletes_what_the_manifest_dropped() {
        let original = json!({"spec": {"a": 1, "b": 2}});
        let modified = json!({"spec": {"a": 1}});
        let current = json!({"spec": {"a": 1, "b": 2, "c": 3}});
        let p = three_way(Some(&original), &modified, &current);
        assert_eq!(Value::Object(p), json!({"spec": {"b": null}}));
    }

    #[test]
    fn unchanged_is_empty_patch() {
        let m = json!({"spec": {"a": 1}});
        assert!(three_way(Some(&m), &m, &json!({"spec": {"a": 1}, "status": {}})).is_empty());
    }

    #[test]
    fn secret_values_stay_out_of_last_applied() {
        let s = json!({"data": {"password": "aHVudGVyMg=="}, "type": "Opaque"});
        let t = last_applied_text(Kind::Secret, &s);
        assert!(!t.contains("aHVudGVyMg"), "{t}");
        assert!(t.contains("password"));
    }

    #[test]
    fn multi_doc_yaml_skips_empty_documents() {
        let docs = parse_docs("t", "---\na: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(docs.len(), 2);
    }
}
