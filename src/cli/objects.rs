//! `get`, `describe`, `delete`:
//! kubectl-style object commands over [`ApiClient`]. Tables and describe
//! text live in [`super::show`], apply's create-or-update in
//! [`super::apply`].

use anyhow::Context;
use clap::{Args, ValueEnum};
use futures::StreamExt;
use serde_json::{Value, json};

use super::GlobalArgs;
use super::client::ApiClient;
use super::kinds::parse_kind;
use super::show;
use crate::api::Kind;
use crate::store::DEFAULT_NAMESPACE;

/// Output formats of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Wide,
    Yaml,
    Json,
    Name,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// machines, machinesets, machineclasses, discovered, secrets, events.
    pub kind: String,
    /// One object by name (all when absent).
    pub name: Option<String>,
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Output>,
    /// Label selector, e.g. `rack=1,role!=storage`.
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// After listing, keep printing changes.
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// List across all namespaces.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    pub kind: String,
    pub name: String,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    pub kind: String,
    /// One or more names.
    #[arg(required = true)]
    pub names: Vec<String>,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

pub async fn apply(g: &GlobalArgs, a: super::apply::ApplyArgs) -> anyhow::Result<()> {
    super::apply::run(g, a).await
}

pub async fn get(g: &GlobalArgs, a: GetArgs) -> anyhow::Result<()> {
    let kind = parse_kind(&a.kind)?;
    let client = ApiClient::from_global(g)?;
    let ns = (!a.all_namespaces).then_some(a.namespace.as_str());
    let (items, rv) = match &a.name {
        Some(name) => {
            let obj = client.get(kind, &a.namespace, name).await?;
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            (vec![obj], rv)
        }
        None => {
            let list = client.list(kind, ns, a.selector.as_deref()).await?;
            let rv = list
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let items = list
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            (items, rv)
        }
    };
    let wide = a.output == Some(Output::Wide);
    let all_ns = a.all_namespaces && a.name.is_none();
    match a.output {
        None | Some(Output::Wide) => {
            if items.is_empty() && !a.watch {
                match ns {
                    Some(ns) => eprintln!("No resources found in {ns} namespace."),
                    None => eprintln!("No resources found"),
                }
            } else {
                print!("{}", show::table(kind, &items, wide, all_ns, true));
            }
        }
        Some(Output::Name) => {
            for o in &items {
                println!("{}/{}", kind.singular(), name_of(o));
            }
        }
        Some(fmt @ (Output::Json | Output::Yaml)) => {
            let doc = match (&a.name, items.first()) {
                (Some(_), Some(o)) => o.clone(),
                _ => json!({"apiVersion": "v1", "kind": "List",
                            "metadata": {"resourceVersion": ""}, "items": items}),
            };
            print_doc(fmt, &doc)?;
        }
    }
    if !a.watch {
        return Ok(());
    }
    let mut w = client
        .watch(kind, ns, a.selector.as_deref(), Some(&rv))
        .await?;
    while let Some(ev) = w.next().await {
        let ev = ev?;
        if let Some(n) = &a.name
            && name_of(&ev.object) != n
        {
            continue;
        }
        match a.output {
            None | Some(Output::Wide) => {
                print!(
                    "{}",
                    show::table(kind, std::slice::from_ref(&ev.object), wide, all_ns, false)
                );
            }
            Some(Output::Name) => println!("{}/{}", kind.singular(), name_of(&ev.object)),
            Some(fmt) => print_doc(fmt, &ev.object)?,
        }
    }
    Ok(())
}

fn print_doc(fmt: Output, doc: &Value) -> anyhow::Result<()> {
    // As kubectl does: the record of field managers is noise here.
    let doc = &without_managed_fields(doc);
    if fmt == Output::Yaml {
        print!("{}", serde_yaml::to_string(doc).context("encode YAML")?);
    } else {
        println!(
            "{}",
            serde_json::to_string_pretty(doc).context("encode JSON")?
        );
    }
    Ok(())
}

/// `doc` (an object or a List) without `metadata.managedFields`.
fn without_managed_fields(doc: &Value) -> Value {
    let mut doc = doc.clone();
    let strip = |o: &mut Value| {
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
    };
    strip(&mut doc);
    if let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    doc
}

pub(crate) fn name_of(o: &Value) -> &str {
    o.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub async fn describe(g: &GlobalArgs, a: DescribeArgs) -> anyhow::Result<()> {
    let kind = parse_kind(&a.kind)?;
    let client = ApiClient::from_global(g)?;
    let obj = client.get(kind, &a.namespace, &a.name).await?;
    let events = if kind == Kind::Event {
        Vec::new()
    } else {
        let list = client.list(Kind::Event, Some(&a.namespace), None).await?;
        list.get("items")
            .and_then(Value::as_array)
            .map(|evs| {
                evs.iter()
                    .filter(|e| {
                        e.pointer("/involvedObject/kind").and_then(Value::as_str)
                            == Some(kind.as_str())
                            && e.pointer("/involvedObject/name").and_then(Value::as_str)
                                == Some(a.name.as_str())
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    print!("{}", show::describe(kind, &obj, &events));
    Ok(())
}

pub async fn delete(g: &GlobalArgs, a: DeleteArgs) -> anyhow::Result<()> {
    let kind = parse_kind(&a.kind)?;
    let client = ApiClient::from_global(g)?;
    let mut failed = 0;
    for name in &a.names {
        match client.delete(kind, &a.namespace, name).await {
            Ok(last) => {
                let pending: Vec<&str> = last
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .map(|f| f.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if pending.is_empty() {
                    println!("{} \"{name}\" deleted", kind.singular());
                } else {
                    println!(
                        "{} \"{name}\" marked for deletion (waiting for finalizers: {})",
                        kind.singular(),
                        pending.join(", ")
                    );
                }
            }
            Err(e @ super::client::ClientError::Api(_)) => {
                eprintln!("{e}");
                failed += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} deletions failed", a.names.len());
    }
    Ok(())
}
