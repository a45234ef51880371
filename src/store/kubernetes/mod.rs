//! The Kubernetes backend: every object is a resource on a Kubernetes API
//! server (metalherd's kinds as the CRDs in deploy/crds/, Secrets and
//! Events from core/v1), reached with kube-rs. This process keeps no object
//! state of its own: every call is one or more API requests.
//!
//! Only what a real kube-apiserver serves is used: POST to create, PUT with
//! `metadata.resourceVersion` as the precondition to update, PUT on
//! `/status` for status, DELETE (the server marks objects that still have
//! finalizers), GET and list with label selectors, and watches resumed
//! from a resourceVersion. The server's answers are mapped to
//! [`StoreError`] in [`resource`]; validation is the server's (a 422's
//! field causes become [`StoreError::Invalid`] with the same paths).
//!
//! Where the trait promises more than one request does:
//! - `update`/`update_status` without a resourceVersion are unconditional
//!   in the trait, but a kube-apiserver refuses an unconditional PUT of a
//!   custom resource: the backend reads the current version and retries on
//!   a conflict, as [`crate::store::modify`] does.
//! - `watch` from `None` starts at the current version: the backend lists
//!   (one item) for that version first, since a Kubernetes watch without
//!   one replays every object as `ADDED`.
//! - `watch` from a version the server no longer keeps, or never gave, is
//!   `Gone` or `BadResourceVersion` from the call when the server refuses
//!   the request (the stand-in does), and the stream's first and last item
//!   when it answers with an `ERROR` event instead (a kube-apiserver does
//!   for `410`); [`crate::store::reflect`] lists again either way.
//!
//! The shared store suite runs against this backend from the integration
//! test tests/store_kubernetes.rs, against a `metalherd serve` started as a
//! separate process (the stand-in API server; the binary is only built for
//! integration tests); what the stand-in cannot show (403s, compacted
//! watches, conflicts at an exact moment) is tested here against a
//! tower-test mock (`tests.rs`).

mod resource;
#[cfg(test)]
mod tests;
mod watch;

use std::path::Path;

use async_trait::async_trait;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::params::{DeleteParams, GetParams, ListParams, PostParams};
use kube::core::request::Request;
use serde_json::Value;
use tracing::Instrument;

use super::{
    Deleted, ListOptions, ObjectList, Store, StoreError, WatchStream, key_of, modify,
    resource_version_of,
};
use crate::api::Kind;
use resource::{Call, collection_path};

/// The store on a Kubernetes API server.
#[derive(Clone)]
pub struct KubernetesStore {
    client: Client,
    /// Lists and watches across all namespaces stay in this one when set
    /// (a namespaced Role is then enough).
    namespace: Option<String>,
}

impl KubernetesStore {
    /// Use an existing client (tests hand in one backed by a mock).
    pub fn new(client: Client, namespace: Option<String>) -> KubernetesStore {
        KubernetesStore { client, namespace }
    }

    /// Connect with a kubeconfig file (its current context), or with the
    /// Pod's in-cluster configuration when `kubeconfig` is `None`.
    pub async fn connect(
        kubeconfig: Option<&Path>,
        namespace: Option<String>,
    ) -> Result<KubernetesStore, StoreError> {
        crate::cluster::kube::install_crypto_provider();
        let config = match kubeconfig {
            Some(path) => {
                let kc = Kubeconfig::read_from(path).map_err(|e| {
                    StoreError::Backend(format!("kubeconfig {}: {e}", path.display()))
                })?;
                return KubernetesStore::connect_with(kc, &path.display().to_string(), namespace)
                    .await;
            }
            None => kube::Config::incluster().map_err(|e| {
                StoreError::Backend(format!(
                    "no --kubeconfig given and no in-cluster configuration: {e}"
                ))
            })?,
        };
        KubernetesStore::connect_config(config, namespace).await
    }

    /// Connect with a kubeconfig already read (`what` names where it came
    /// from in errors): `metalherd export` and `import` reach a running
    /// standalone server through the kubeconfig `metalherd kubeconfig`
    /// renders, without a file.
    pub async fn connect_with(
        kc: Kubeconfig,
        what: &str,
        namespace: Option<String>,
    ) -> Result<KubernetesStore, StoreError> {
        crate::cluster::kube::install_crypto_provider();
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| StoreError::Backend(format!("kubeconfig {what}: {e}")))?;
        KubernetesStore::connect_config(config, namespace).await
    }

    async fn connect_config(
        config: kube::Config,
        namespace: Option<String>,
    ) -> Result<KubernetesStore, StoreError> {
        let url = config.cluster_url.clone();
        let client = Client::try_from(config)
            .map_err(|e| StoreError::Backend(format!("Kubernetes client: {e}")))?;
        let store = KubernetesStore::new(client, namespace);
        match store.check().await {
            Err(StoreError::Backend(e)) => Err(StoreError::Backend(format!(
                "the Kubernetes API server at {url}: {e}"
            ))),
            r => r.map(|()| store),
        }
    }

    /// Fail at start rather than in every reflector: the API server must
    /// answer, take our credentials and serve the Machine CRD.
    async fn check(&self) -> Result<(), StoreError> {
        match self
            .current_version(Kind::Machine, &ListOptions::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => Err(StoreError::Backend(format!(
                "the API server does not serve {}.{}: install the CRDs (kubectl apply -f deploy/crds/)",
                Kind::Machine.plural(),
                crate::api::GROUP
            ))),
            Err(e) => Err(e),
        }
    }

    /// The namespace a list or watch reads: the caller's, else ours.
    fn scope<'a>(&'a self, opts: &'a ListOptions) -> Option<&'a str> {
        opts.namespace.as_deref().or(self.namespace.as_deref())
    }

    /// Send one request and decode its JSON answer, in a span naming it.
    async fn send(
        &self,
        call: &Call<'_>,
        req: http::Request<Vec<u8>>,
    ) -> Result<Value, StoreError> {
        let span = tracing::debug_span!("kube", verb = call.verb, kind = %call.kind,
            namespace = call.namespace.unwrap_or_default(), name = call.name);
        self.client
            .request::<Value>(req)
            .instrument(span)
            .await
            .map_err(|e| call.error(e))
    }

    /// PUT `obj` (to `/status` when `status`); an object without a
    /// resourceVersion is written over the current one, retrying on a
    /// conflict.
    async fn put(&self, kind: Kind, mut obj: Value, status: bool) -> Result<Value, StoreError> {
        if status && !kind.has_status() {
            return Err(StoreError::Malformed(format!(
                "{kind} has no status subresource"
            )));
        }
        let (ns, name) = key_of(&obj);
        prepare(kind, &mut obj, &ns)?;
        let conditional = resource_version_of(&obj).is_some();
        let mut attempts = 0;
        loop {
            if !conditional {
                let cur = self.get(kind, &ns, &name).await?;
                let rv = resource_version_of(&cur).unwrap_or_default().to_string();
                obj["metadata"]["resourceVersion"] = Value::String(rv);
            }
            let rv = resource_version_of(&obj).map(str::to_string);
            let call = Call {
                verb: "update",
                kind,
                namespace: Some(&ns),
                name: &name,
                subresource: status.then_some("status"),
                resource_version: rv.as_deref(),
            };
            let body =
                serde_json::to_vec(&obj).map_err(|e| StoreError::Malformed(e.to_string()))?;
            let r = Request::new(collection_path(kind, Some(&ns)));
            let pp = PostParams::default();
            let req = if status {
                r.replace_subresource("status", &name, &pp, body)
            } else {
                r.replace(&name, &pp, body)
            }
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
            match self.send(&call, req).await {
                Err(e) if e.is_conflict() && !conditional && attempts < modify::ATTEMPTS => {
                    attempts += 1;
                }
                r => return r.map(|v| set_type(kind, v)),
            }
        }
    }
}

/// Give an object its `apiVersion`, `kind` and namespace, as a
/// kube-apiserver wants them in a request body.
fn prepare(kind: Kind, obj: &mut Value, ns: &str) -> Result<(), StoreError> {
    let o = obj
        .as_object_mut()
        .ok_or_else(|| StoreError::Malformed(format!("a {kind} must be a JSON object")))?;
    o.insert("apiVersion".into(), kind.api_version().into());
    o.insert("kind".into(), kind.as_str().into());
    let meta = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let meta = meta
        .as_object_mut()
        .ok_or_else(|| StoreError::Malformed("metadata must be an object".into()))?;
    if kind.namespaced() {
        meta.insert("namespace".into(), ns.into());
    }
    Ok(())
}

/// Objects in lists (and, for core kinds, elsewhere) may come without
/// `apiVersion` and `kind`; the store's callers expect both.
fn set_type(kind: Kind, mut obj: Value) -> Value {
    if let Some(o) = obj.as_object_mut() {
        o.entry("apiVersion")
            .or_insert_with(|| kind.api_version().into());
        o.entry("kind").or_insert_with(|| kind.as_str().into());
    }
    obj
}

/// Whether a DELETE's answer is an object the server only marked.
fn is_marked(obj: &Value) -> bool {
    let meta = &obj["metadata"];
    meta["deletionTimestamp"].is_string()
        && meta["finalizers"].as_array().is_some_and(|f| !f.is_empty())
}

#[async_trait]
impl Store for KubernetesStore {
    async fn get(&self, kind: Kind, namespace: &str, name: &str) -> Result<Value, StoreError> {
        // The store keeps cluster-scoped objects under namespace "": one in
        // a namespace does not exist (the server would ignore it).
        if !kind.namespaced() && !namespace.is_empty() {
            return Err(StoreError::NotFound {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            });
        }
        let call = Call {
            verb: "get",
            kind,
            namespace: Some(namespace),
            name,
            subresource: None,
            resource_version: None,
        };
        let req = Request::new(collection_path(kind, Some(namespace)))
            .get(name, &GetParams::default())
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        self.send(&call, req).await.map(|v| set_type(kind, v))
    }

    async fn list(&self, kind: Kind, opts: &ListOptions) -> Result<ObjectList, StoreError> {
        let ns = self.scope(opts);
        let call = Call {
            verb: "list",
            kind,
            namespace: ns,
            name: "",
            subresource: None,
            resource_version: None,
        };
        let mut lp = ListParams::default();
        let selector = opts.selector.to_string();
        if !selector.is_empty() {
            lp = lp.labels(&selector);
        }
        let req = Request::new(collection_path(kind, ns))
            .list(&lp)
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let mut list = self.send(&call, req).await?;
        let resource_version = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let items = match list.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items.into_iter().map(|o| set_type(kind, o)).collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(_) => {
                return Err(StoreError::Malformed(format!(
                    "the list of {} has no items array",
                    kind.plural()
                )));
            }
        };
        Ok(ObjectList {
            items,
            resource_version,
        })
    }

    async fn create(&self, kind: Kind, mut obj: Value) -> Result<Value, StoreError> {
        let (ns, name) = key_of(&obj);
        prepare(kind, &mut obj, &ns)?;
        // A kube-apiserver refuses a create that carries a resourceVersion.
        if let Some(meta) = obj["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let call = Call {
            verb: "create",
            kind,
            namespace: Some(&ns),
            name: &name,
            subresource: None,
            resource_version: None,
        };
        let body = serde_json::to_vec(&obj).map_err(|e| StoreError::Malformed(e.to_string()))?;
        let req = Request::new(collection_path(kind, Some(&ns)))
            .create(&PostParams::default(), body)
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        self.send(&call, req).await.map(|v| set_type(kind, v))
    }

    async fn update(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.put(kind, obj, false).await
    }

    async fn update_status(&self, kind: Kind, obj: Value) -> Result<Value, StoreError> {
        self.put(kind, obj, true).await
    }

    async fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Result<Deleted, StoreError> {
        let call = Call {
            verb: "delete",
            kind,
            namespace: Some(namespace),
            name,
            subresource: None,
            resource_version: None,
        };
        let req = Request::new(collection_path(kind, Some(namespace)))
            .delete(name, &DeleteParams::default())
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let span = tracing::debug_span!("kube", verb = "delete", kind = %kind, namespace, name);
        let text = self
            .client
            .request_text(req)
            .instrument(span)
            .await
            .map_err(|e| call.error(e))?;
        let answer: Value = serde_json::from_str(&text).map_err(|e| {
            StoreError::Malformed(format!("the answer to delete {kind} {name}: {e}"))
        })?;
        // An object back: deleted (its last state) or only marked. A Status
        // back: deleted, by a kind whose storage does not return objects.
        Ok(if answer["kind"] == "Status" {
            let status: kube::core::Status = serde_json::from_value(answer).map_err(|e| {
                StoreError::Malformed(format!("the answer to delete {kind} {name}: {e}"))
            })?;
            Deleted::Gone(resource::deleted_stub(kind, namespace, name, &status))
        } else if is_marked(&answer) {
            Deleted::Marked(set_type(kind, answer))
        } else {
            Deleted::Gone(set_type(kind, answer))
        })
    }

    async fn watch(
        &self,
        kind: Kind,
        opts: &ListOptions,
        from: Option<&str>,
    ) -> Result<WatchStream, StoreError> {
        let from = match from {
            Some(rv) => rv.to_string(),
            None => self.current_version(kind, opts).await?,
        };
        let ns = self.scope(opts);
        let target = watch::Target {
            client: self.client.clone(),
            kind,
            namespace: ns.map(str::to_string),
            selector: opts.selector.to_string(),
            path: collection_path(kind, ns),
        };
        watch::watch(target, from).await
    }
}

impl KubernetesStore {
    /// The version a watch from "now" starts at: that of a one-item list.
    async fn current_version(&self, kind: Kind, opts: &ListOptions) -> Result<String, StoreError> {
        let ns = self.scope(opts);
        let call = Call {
            verb: "list",
            kind,
            namespace: ns,
            name: "",
            subresource: None,
            resource_version: None,
        };
        let req = Request::new(collection_path(kind, ns))
            .list(&ListParams::default().limit(1))
            .map_err(|e| StoreError::Malformed(e.to_string()))?;
        let list = self.send(&call, req).await?;
        Ok(list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string())
    }
}
