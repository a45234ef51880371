//! Where Kubernetes-mode replicas elect their leader, for the failover
//! stories that run once against kube-apiserver and once against the
//! stand-in: the API server, the kubeconfig the replicas reach it with,
//! the namespace of their Lease, and the `serve` flags that keep a
//! replica to that namespace. Replicas are started and the Lease read
//! through [`Target`]; the story itself never knows which server it has.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::Api;
use super::control_plane::ControlPlane;
use super::netns::Netns;
use super::server::Server;

/// What the leader logs once it has won and starts acting.
pub const LEADING: &str = "leading: starting the boot services and controllers";

/// The Lease every replica competes for (`serve --lease-name` default).
const LEASE_NAME: &str = "metalherd";

pub struct Target<A> {
    /// The API server, for the test's own requests.
    pub api: A,
    /// Which one it is, for printed timings.
    pub name: &'static str,
    /// The kubeconfig every replica gets.
    pub kubeconfig: PathBuf,
    /// The namespace of the Lease and of the boot-token key Secret.
    pub namespace: String,
    /// `serve` flags every replica gets beyond [`super::rack::replica_args`].
    pub args: Vec<String>,
    /// Holds the kubeconfig when it is not the API server's own file.
    _dir: Option<tempfile::TempDir>,
}

impl Target<Arc<ControlPlane>> {
    /// kube-apiserver, the replicas reaching it as the `metalherd` user.
    /// With `namespace` (created here) they keep to it
    /// (`--watch-namespace`, which also puts their Lease and boot-token
    /// key Secret there), so stories sharing one control plane never see
    /// each other's objects or Lease; without, they watch every namespace
    /// and lead on the Lease in `default`, as on the stand-in.
    pub fn kube_apiserver(cp: Arc<ControlPlane>, namespace: Option<&str>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        // A file of this story's own: the control plane's
        // metalherd.kubeconfig is rewritten by every story that asks for it.
        let kubeconfig = dir.path().join("kubeconfig");
        cp.write_kubeconfig(&kubeconfig, &cp.metalherd_token);
        let args = match namespace {
            Some(ns) => {
                cp.namespace(ns);
                vec!["--watch-namespace".to_string(), ns.to_string()]
            }
            None => Vec::new(),
        };
        Target {
            api: cp,
            name: "kube-apiserver",
            kubeconfig,
            namespace: namespace.unwrap_or("default").to_string(),
            args,
            _dir: Some(dir),
        }
    }
}

impl Target<Server> {
    /// The stand-in (`metalherd serve`, a separate process) through the
    /// kubeconfig `metalherd kubeconfig` prints; the Lease in `default`.
    pub fn stand_in(api: Server) -> Self {
        Target {
            kubeconfig: api.kubeconfig_file(),
            api,
            name: "the stand-in",
            namespace: "default".to_string(),
            args: Vec::new(),
            _dir: None,
        }
    }
}

impl<A: Api> Target<A> {
    fn replica_args(&self) -> Vec<String> {
        let kc = self.kubeconfig.to_str().expect("utf-8 path");
        super::rack::replica_args(kc)
            .iter()
            .map(|a| a.to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }

    /// A replica with the config file `config`.
    pub fn replica(&self, config: &str) -> Server {
        let args = self.replica_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_with_args(Some(config), &args)
    }

    /// A replica with the config file `config`, inside `ns`.
    pub fn replica_in(&self, ns: &Arc<Netns>, config: &str) -> Server {
        let args = self.replica_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Server::start_in_netns(Some(config), ns.clone(), &args)
    }

    /// A replica whose config file holds only a boot listen address of
    /// its own.
    pub fn plain_replica(&self) -> Server {
        let port = super::free_port();
        self.replica(&format!("boot:\n  listen: 127.0.0.1:{port}\n"))
    }

    /// The API path of a core object in the Lease's namespace.
    pub fn path(&self, plural: &str, name: &str) -> String {
        format!("/api/v1/namespaces/{}/{plural}/{name}", self.namespace)
    }

    /// The Lease, once some replica has written it.
    pub fn lease(&self) -> Option<Value> {
        let (code, lease) = self.api.req(
            "GET",
            &format!(
                "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{LEASE_NAME}",
                self.namespace
            ),
            None,
        );
        (code == 200).then_some(lease)
    }

    /// Who holds the Lease, if anyone.
    pub fn holder(&self) -> Option<String> {
        self.lease()?["spec"]["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }
}

/// The process id a replica's identity (`<hostname>-<pid>`) ends in.
pub fn identity_pid(identity: &str) -> u32 {
    identity
        .rsplit('-')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("identity {identity:?} does not end in a pid"))
}

/// The replica of `replicas` the Lease holder `identity` names.
pub fn which(replicas: &[Server], identity: &str) -> usize {
    replicas
        .iter()
        .position(|r| r.guard.pid() == identity_pid(identity))
        .unwrap_or_else(|| panic!("the Lease names {identity}, none of the replicas"))
}
