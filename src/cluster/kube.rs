//! [`TargetCluster`] with kube-rs: a `kube::Client` built from a kubeconfig
//! (or handed in, which is how tests put a mock API server behind it).
//! Only thin request/response mapping lives here; the drain algorithm is in
//! [`super::drain`].

use std::path::Path;
use std::sync::Once;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::Eviction as EvictionBody;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tracing::Instrument;

use super::drain::{Eviction, PodOps, drain_node};
use super::{ClusterError, DrainOptions, DrainReport, NodeState, TargetCluster};

/// Annotation the kubelet puts on the API-server mirror of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The target cluster reached through kube-rs.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
}

/// Install rustls' ring provider for the process, once (kube and reqwest
/// would otherwise disagree about the default).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error means some other part of the process installed one first.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl KubeCluster {
    /// Use an existing client (tests hand in one backed by a mock service).
    pub fn new(client: Client) -> KubeCluster {
        KubeCluster { client }
    }

    /// Build a client from a kubeconfig file, using its current context.
    pub async fn from_kubeconfig(path: &Path) -> Result<KubeCluster, ClusterError> {
        let err = |detail: String| ClusterError::Kubeconfig {
            path: path.display().to_string(),
            detail,
        };
        let kc = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
        install_crypto_provider();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))?;
        let client = Client::try_from(config).map_err(|e| err(e.to_string()))?;
        Ok(KubeCluster { client })
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }
}

/// Map a kube error to ours, naming the operation and its target.
fn map_err(op: &'static str, target: &str, e: kube::Error) -> ClusterError {
    match e {
        kube::Error::Api(s) => ClusterError::Api {
            op,
            target: target.to_string(),
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
        },
        other => ClusterError::Transport {
            op,
            target: target.to_string(),
            detail: other.to_string(),
        },
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The facts we keep from a Node object.
pub fn node_state(node: &Node) -> NodeState {
    let status = node.status.clone().unwrap_or_default();
    let info = status.node_info.unwrap_or_default();
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    NodeState {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready,
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        kubelet_version: info.kubelet_version,
        container_runtime_version: info.container_runtime_version,
        os_image: info.os_image,
        kernel_version: info.kernel_version,
    }
}

/// The facts a drain needs from a Pod.
pub fn pod_summary(pod: &Pod) -> super::PodSummary {
    let m = &pod.metadata;
    super::PodSummary {
        namespace: m.namespace.clone().unwrap_or_default(),
        name: m.name.clone().unwrap_or_default(),
        daemonset: m
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "DaemonSet" && o.controller == Some(true)),
        mirror: m
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
    }
}

#[async_trait]
impl PodOps for KubeCluster {
    async fn pods_on_node(&self, node: &str) -> Result<Vec<super::PodSummary>, ClusterError> {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let list = pods
            .list(&lp)
            .await
            .map_err(|e| map_err("list pods on node", node, e))?;
        Ok(list.items.iter().map(pod_summary).collect())
    }

    async fn evict(&self, pod: &super::PodSummary) -> Result<Eviction, ClusterError> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let body = EvictionBody {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            delete_options: None,
        };
        let res: Result<serde_json::Value, _> = pods
            .create_subresource("eviction", &pod.name, &PostParams::default(), &body)
            .await;
        match res {
            Ok(_) => Ok(Eviction::Accepted),
            Err(e) if api_code(&e) == Some(404) => Ok(Eviction::Gone),
            Err(kube::Error::Api(s)) if s.code == 429 => Ok(Eviction::Refused {
                message: s.message.clone(),
            }),
            Err(e) => Err(map_err("evict pod", &pod.key(), e)),
        }
    }
}

#[async_trait]
impl TargetCluster for KubeCluster {
    async fn get_node(&self, name: &str) -> Result<Option<NodeState>, ClusterError> {
        match self.nodes().get_opt(name).await {
            Ok(n) => Ok(n.as_ref().map(node_state)),
            Err(e) => Err(map_err("get node", name, e)),
        }
    }

    async fn cordon(&self, name: &str) -> Result<(), ClusterError> {
        match self.nodes().cordon(name).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(404) => Err(ClusterError::NodeNotFound {
                node: name.to_string(),
            }),
            Err(e) => Err(map_err("cordon node", name, e)),
        }
    }

    async fn uncordon(&self, name: &str) -> Result<(), ClusterError> {
        match self.nodes().uncordon(name).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(404) => Err(ClusterError::NodeNotFound {
                node: name.to_string(),
            }),
            Err(e) => Err(map_err("uncordon node", name, e)),
        }
    }

    async fn drain(&self, name: &str, opts: &DrainOptions) -> Result<DrainReport, ClusterError> {
        drain_node(self, name, opts)
            .instrument(tracing::info_span!("drain", node = %name))
            .await
    }

    async fn delete_node(&self, name: &str) -> Result<(), ClusterError> {
        match self.nodes().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(e) if api_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(map_err("delete node", name, e)),
        }
    }
}
