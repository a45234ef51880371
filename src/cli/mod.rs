//! Command line: `metalherd serve` and the client commands that talk to a
//! running server's API.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub mod apply;
pub mod backup;
pub mod bmc;
pub mod client;
pub mod hwtest;
pub mod kinds;
pub mod kubeconfig;
pub mod objects;
pub mod reimage;
pub mod render;
pub mod rollout;
pub mod rollout_status;
pub mod serve;
pub mod show;

/// Bare-metal provisioning: declare Machines; metalherd powers, boots,
/// installs and joins them, and reimages them in place.
#[derive(Debug, Parser)]
#[command(name = "metalherd", version, about)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command understands.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// API server URL (default: from the data directory, else http://127.0.0.1:7080).
    #[arg(long, global = true, env = "METALHERD_SERVER")]
    pub server: Option<String>,
    /// Data directory (the store, the API token).
    #[arg(
        long,
        global = true,
        env = "METALHERD_DATA_DIR",
        default_value = "./metalherd-data"
    )]
    pub data_dir: PathBuf,
    /// Plain HTTP instead of TLS: `serve` listens without TLS (loopback
    /// only) and client commands send the token over plain HTTP.
    #[arg(long, global = true, env = "METALHERD_INSECURE_HTTP")]
    pub insecure_http: bool,
    /// Log as JSON lines.
    #[arg(long, global = true, env = "METALHERD_LOG_JSON")]
    pub log_json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run metalherd: store, API, boot services, controllers.
    Serve(serve::ServeArgs),
    /// Create or update objects from YAML (file, directory or `-`).
    Apply(apply::ApplyArgs),
    /// List or show objects.
    Get(objects::GetArgs),
    /// Show one object with its events.
    Describe(objects::DescribeArgs),
    /// Delete an object.
    Delete(objects::DeleteArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crds(CrdsArgs),
    /// Print the version.
    Version,
    /// Print a kubeconfig for kubectl and kube-rs (server, CA, token,
    /// namespace `default`).
    Kubeconfig,
    /// Talk to a BMC directly (racking day).
    Bmc(bmc::BmcArgs),
    /// Qualify a server model through its BMC: login, inventory, power,
    /// boot override, boot mode, TLS; proposes the quirk entry it needs.
    HwTest(hwtest::HwTestArgs),
    /// Render generated artifacts (Ignition configs).
    Render(render::RenderArgs),
    /// Reinstall a Machine in place (same name and address).
    Reimage(reimage::ReimageArgs),
    /// Set a MachineSet's replicas (through its scale subresource).
    Scale(rollout::ScaleArgs),
    /// Follow, list, pause, resume or undo a MachineSet's rollouts.
    Rollout(rollout::RolloutArgs),
    /// Write every object (with status and Secrets) of a server, a cluster
    /// or a stopped data directory to one file; Machines in the middle of
    /// a boot are refused until they settle.
    Export(backup::ExportArgs),
    /// Recreate the objects of an export in a server, a cluster or an
    /// empty data directory (restores a backup).
    Import(backup::ImportArgs),
}

/// `metalherd crds`.
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// The Cluster API provider's CRDs (MetalherdCluster, MetalherdMachine,
    /// MetalherdMachineTemplate) instead of metalherd's own.
    #[arg(long)]
    pub cluster_api: bool,
}
