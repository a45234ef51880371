//! `metalherd kubeconfig`: a kubeconfig for kubectl and kube-rs that points
//! at this data directory's server (its URL, its CA, its token) with a
//! context whose namespace is `default`.

use serde_json::json;

use super::GlobalArgs;

/// The name of the cluster, user and context in the printed kubeconfig.
pub const CONTEXT: &str = "metalherd";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KubeconfigError {
    #[error(
        "cannot read {path}: {source}. Start the server once (metalherd serve --data-dir {data_dir}) so it writes it"
    )]
    Missing {
        path: String,
        data_dir: String,
        source: std::io::Error,
    },
    #[error(
        "the server URL {0} is plain HTTP: kubectl never sends a token over it. Serve over TLS (the default, without --insecure-http)"
    )]
    PlainHttp(String),
    #[error("cannot render the kubeconfig: {0}")]
    Render(#[from] serde_yaml::Error),
}

/// The kubeconfig YAML for the server of `g.data_dir` (or `--server`).
pub fn render(g: &GlobalArgs) -> Result<String, KubeconfigError> {
    use base64::Engine;
    let read = |name: &str| {
        let p = g.data_dir.join(name);
        std::fs::read_to_string(&p).map_err(|source| KubeconfigError::Missing {
            path: p.display().to_string(),
            data_dir: g.data_dir.display().to_string(),
            source,
        })
    };
    let server = match &g.server {
        Some(s) => s.clone(),
        None => read(crate::datadir::SERVER_URL_FILE)?.trim().to_string(),
    };
    if !server.starts_with("https://") {
        return Err(KubeconfigError::PlainHttp(server));
    }
    let token = match std::env::var("METALHERD_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
    {
        Some(t) => t,
        None => read(crate::datadir::TOKEN_FILE)?.trim().to_string(),
    };
    let mut cluster = json!({ "server": server });
    // A user's own certificate (--tls-cert) may chain to a public root: the
    // CA file is then absent and the system's roots apply.
    if let Ok(ca) = read(crate::datadir::CA_CERT_FILE) {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(ca));
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {
            "cluster": CONTEXT, "user": CONTEXT, "namespace": "default"
        }}],
        "current-context": CONTEXT,
        "preferences": {},
    });
    Ok(serde_yaml::to_string(&doc)?)
}
