//! `metalherd export` and `metalherd import`: flags, where the store is,
//! the file. The work is in [`crate::backup`].
//!
//! Where the objects are read from or written to:
//! - default: the running server of `--data-dir` (or `--server`), through
//!   its Kubernetes-compatible API with the kubeconfig `metalherd
//!   kubeconfig` prints;
//! - `--kubeconfig FILE`: a Kubernetes API server (Kubernetes mode);
//! - `--stopped`: the store file of `--data-dir` itself, while no server
//!   runs on it (read-only for export; for import it must hold no object:
//!   that is a restore).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::GlobalArgs;
use crate::backup::export::{self, ExportOptions};
use crate::backup::{Snapshot, import};
use crate::store::{Store, StoreConfig};

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Write to FILE (mode 0600: it holds the Secrets) instead of stdout.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Read from the Kubernetes API server of this kubeconfig (Kubernetes
    /// mode) instead of the running server of --data-dir.
    #[arg(long, conflicts_with = "stopped")]
    pub kubeconfig: Option<PathBuf>,
    /// Read the store file of --data-dir directly (read-only); no server
    /// may be running on it.
    #[arg(long)]
    pub stopped: bool,
    /// Also export the Events about the exported objects.
    #[arg(long)]
    pub events: bool,
    /// Export Machines in the middle of a boot too: their boot cannot
    /// finish after an import (its token dies with the Machine's uid).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The file `metalherd export` wrote (`-` for stdin).
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Create the objects on the Kubernetes API server of this kubeconfig
    /// (Kubernetes mode) instead of the running server of --data-dir.
    #[arg(long, conflicts_with = "stopped")]
    pub kubeconfig: Option<PathBuf>,
    /// Write into the store file of --data-dir directly (created when
    /// missing; it must hold no object): restores a backup. No server may
    /// be running on it.
    #[arg(long)]
    pub stopped: bool,
}

/// The running server of `g`, reached as kube-rs reaches any API server.
async fn running_server(g: &GlobalArgs) -> anyhow::Result<Arc<dyn Store>> {
    let yaml = super::kubeconfig::render(g)?;
    let kc = kube::config::Kubeconfig::from_yaml(&yaml).context("the server's kubeconfig")?;
    let what = format!("of the server of {}", g.data_dir.display());
    let store = crate::store::kubernetes::KubernetesStore::connect_with(kc, &what, None)
        .await
        .with_context(|| {
            format!(
                "cannot reach the metalherd server of {}",
                g.data_dir.display()
            )
        })?;
    Ok(Arc::new(store))
}

async fn cluster(kubeconfig: &std::path::Path) -> anyhow::Result<Arc<dyn Store>> {
    crate::store::open(&StoreConfig::Kubernetes {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        namespace: None,
    })
    .await
    .context("cannot reach the Kubernetes API server")
}

/// `metalherd export`.
pub async fn export(g: &GlobalArgs, a: ExportArgs) -> anyhow::Result<()> {
    let opts = ExportOptions {
        events: a.events,
        force: a.force,
        cluster: a.kubeconfig.is_some(),
    };
    let snap = if a.stopped {
        let path = g.data_dir.join(crate::datadir::STORE_FILE);
        tokio::task::spawn_blocking(move || export::from_stopped(&path, opts)).await??
    } else {
        let store = match &a.kubeconfig {
            Some(kc) => cluster(kc).await?,
            None => running_server(g).await?,
        };
        export::from_store(store.as_ref(), opts).await?
    };
    let text = serde_yaml::to_string(&snap.to_document())?;
    match &a.output {
        Some(path) => write_private(path, &text)?,
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    eprintln!(
        "exported {} objects at resourceVersion {}{}",
        snap.items.len(),
        snap.resource_version,
        a.output
            .as_ref()
            .map(|p| format!(" to {} (it holds Secrets: keep it private)", p.display()))
            .unwrap_or_default()
    );
    Ok(())
}

/// Write `text` to `path`, readable by its owner only, atomically
/// ([`crate::private_file`]).
fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    // A device or other special file is never replaced by a regular one.
    if let Ok(m) = std::fs::symlink_metadata(path)
        && !m.is_file()
    {
        anyhow::bail!(
            "cannot write {}: not a regular file (use -o - for standard output)",
            path.display()
        );
    }
    crate::private_file::replace(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// `metalherd import`.
pub async fn import(g: &GlobalArgs, a: ImportArgs) -> anyhow::Result<()> {
    let text = if a.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(&a.file)
            .with_context(|| format!("cannot read {}", a.file.display()))?
    };
    let snap = Snapshot::from_document(&text)?;
    let store: Arc<dyn Store> = if a.stopped {
        crate::datadir::prepare_data_dir(&g.data_dir)?;
        let path = g.data_dir.join(crate::datadir::STORE_FILE);
        crate::store::open(&StoreConfig::Embedded {
            path: path.clone(),
            history: crate::store::embedded::DEFAULT_HISTORY,
        })
        .await
        .with_context(|| {
            format!(
                "cannot open {} (is a server running on it?)",
                path.display()
            )
        })?
    } else {
        match &a.kubeconfig {
            Some(kc) => cluster(kc).await?,
            None => running_server(g).await?,
        }
    };
    import::check_target(store.as_ref(), &snap, a.stopped).await?;
    let done = import::import(store.as_ref(), &snap).await?;
    let counts: Vec<String> = done
        .created
        .iter()
        .map(|(k, n)| format!("{n} {}", k.plural()))
        .collect();
    println!(
        "imported {} ({} new uids)",
        counts.join(", "),
        done.uids.len()
    );
    Ok(())
}
