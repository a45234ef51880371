//! `metalherd render ignition MACHINE [--stage install|node|wipe] [--show-secrets]
//! [-n NS] [-f FILE]...`: prints the Ignition config metalherd would serve a
//! Machine, with secrets redacted unless `--show-secrets`.
//!
//! Objects come from the API server (`src/cli/client.rs`), or from local
//! manifests with `-f`
//! (an offline preview of a class before it is applied). Rendering itself is
//! [`render_ignition`], a pure function of the fetched objects.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::api::{Machine, MachineClass};
use crate::ignition::{self, NodeConfigSource, RenderContext, RenderSecrets, Stage};

#[derive(Debug, Args)]
pub struct RenderArgs {
    #[command(subcommand)]
    pub what: RenderWhat,
}

#[derive(Debug, Subcommand)]
pub enum RenderWhat {
    /// Print a Machine's Ignition config (install, node or wipe stage).
    Ignition(IgnitionArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StageArg {
    Install,
    Node,
    Wipe,
}

#[derive(Debug, Args)]
pub struct IgnitionArgs {
    /// Machine name.
    pub machine: String,
    /// Which config: `install` (live OS, writes the disk), `node`, or
    /// `wipe` (live OS of a deprovisioning boot, clears the disk).
    #[arg(long, value_enum, default_value = "install")]
    pub stage: StageArg,
    /// Print the join token and per-boot token instead of `<redacted>`.
    #[arg(long)]
    pub show_secrets: bool,
    /// Namespace of the Machine (its class and Secret live there too).
    #[arg(
        short = 'n',
        long,
        env = "METALHERD_NAMESPACE",
        default_value = "default"
    )]
    pub namespace: String,
    /// Read the Machine, its class and the join Secret from these manifests
    /// instead of the API server.
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,
    /// Base URL the config calls home to (default: the server URL).
    #[arg(long)]
    pub callhome_url: Option<String>,
}

/// What a render needs, however it was fetched.
#[derive(Debug)]
pub struct RenderInputs {
    pub machine: Machine,
    pub class: MachineClass,
    /// The class's join Secret, `None` when it does not exist.
    pub secret: Option<Secret>,
}

pub async fn run(global: &super::GlobalArgs, args: RenderArgs) -> anyhow::Result<()> {
    match args.what {
        RenderWhat::Ignition(a) => {
            let inputs = if a.files.is_empty() {
                fetch_from_api(global, &a.namespace, &a.machine).await?
            } else {
                inputs_from_files(&a.files, &a.namespace, &a.machine)?
            };
            let base = a
                .callhome_url
                .clone()
                .or_else(|| global.server.clone())
                .unwrap_or_else(|| "http://127.0.0.1:7080".to_string());
            let out = render_ignition(&inputs, a.stage, a.show_secrets, &base)?;
            println!("{out}");
            Ok(())
        }
    }
}

/// Fetch the Machine, its class and the join Secret through the API.
async fn fetch_from_api(
    global: &super::GlobalArgs,
    namespace: &str,
    machine: &str,
) -> anyhow::Result<RenderInputs> {
    use crate::api::Kind;
    let client = super::client::ApiClient::from_global(global)?;
    let m = client
        .get(Kind::Machine, namespace, machine)
        .await
        .with_context(|| format!("reading Machine {namespace}/{machine}"))?;
    let machine: Machine = serde_json::from_value(m).context("decoding the Machine")?;
    let class_name = machine
        .spec
        .class_ref
        .as_ref()
        .map(|c| c.name.clone())
        .context("the Machine has no spec.classRef: nothing to render")?;
    let c = client
        .get(Kind::MachineClass, namespace, &class_name)
        .await
        .with_context(|| format!("reading MachineClass {namespace}/{class_name}"))?;
    let class: MachineClass = serde_json::from_value(c).context("decoding the MachineClass")?;
    let secret_name = secret_name(&machine, &class);
    let secret = match client.get(Kind::Secret, namespace, &secret_name).await {
        Ok(v) => Some(serde_json::from_value(v).context("decoding the Secret")?),
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            return Err(
                anyhow::Error::new(e).context(format!("reading Secret {namespace}/{secret_name}"))
            );
        }
    };
    Ok(RenderInputs {
        machine,
        class,
        secret,
    })
}

/// The Secret a render reads: the Machine's Cluster API bootstrap data,
/// else the class's join token.
fn secret_name(machine: &Machine, class: &MachineClass) -> String {
    match &machine.spec.bootstrap_data_secret_ref {
        Some(r) => r.name.clone(),
        None => class.spec.join.token_secret_ref.name.clone(),
    }
}

/// Find the Machine, its class and the join (or bootstrap data) Secret in
/// local manifests.
pub fn inputs_from_files(
    files: &[PathBuf],
    namespace: &str,
    machine: &str,
) -> anyhow::Result<RenderInputs> {
    let mut docs = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = <Value as serde::Deserialize>::deserialize(doc)
                .with_context(|| format!("parsing {}", f.display()))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let find = |kind: &str, name: &str| {
        docs.iter().find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"] == name
                && d["metadata"]["namespace"].as_str().unwrap_or("default") == namespace
        })
    };
    let m = find("Machine", machine)
        .with_context(|| format!("Machine {namespace}/{machine} not found in the given files"))?;
    let machine: Machine = serde_json::from_value(m.clone()).context("decoding the Machine")?;
    let class_name = machine
        .spec
        .class_ref
        .as_ref()
        .map(|c| c.name.clone())
        .context("the Machine has no spec.classRef: nothing to render")?;
    let c = find("MachineClass", &class_name).with_context(|| {
        format!("MachineClass {namespace}/{class_name} not found in the given files")
    })?;
    let class: MachineClass =
        serde_json::from_value(c.clone()).context("decoding the MachineClass")?;
    let secret = match find("Secret", &secret_name(&machine, &class)) {
        Some(s) => Some(serde_json::from_value(s.clone()).context("decoding the Secret")?),
        None => None,
    };
    Ok(RenderInputs {
        machine,
        class,
        secret,
    })
}

/// Render and print-format one config. Pure. The per-boot token is a
/// stand-in (real ones are minted per boot); the node config is embedded.
pub fn render_ignition(
    inputs: &RenderInputs,
    stage: StageArg,
    show_secrets: bool,
    callhome_base: &str,
) -> anyhow::Result<String> {
    let secrets = if inputs.machine.spec.bootstrap_data_secret_ref.is_some() {
        RenderSecrets::from_bootstrap_secret(&inputs.machine, inputs.secret.as_ref())?
    } else {
        RenderSecrets::from_secret(&inputs.class, inputs.secret.as_ref())?
    };
    let boot_id = inputs
        .machine
        .status
        .as_ref()
        .and_then(|s| s.boot.as_ref())
        .map(|b| b.id.clone())
        .unwrap_or_else(|| "preview".to_string());
    let ctx = RenderContext {
        callhome_base: callhome_base.to_string(),
        boot_token: "preview-boot-token".to_string(),
        boot_id,
        mac: None,
        node_config: NodeConfigSource::Embed,
    };
    let stage = match stage {
        StageArg::Install => Stage::Install,
        StageArg::Node => Stage::Node,
        StageArg::Wipe => Stage::Wipe,
    };
    let config = ignition::render(stage, &inputs.machine, &inputs.class, &secrets, &ctx)?;
    let shown = if show_secrets {
        config
    } else {
        ignition::redacted(&config, &secrets, &ctx)
    };
    Ok(serde_json::to_string_pretty(&shown)?)
}
