//! `metalherd serve`: compose the store, the API server, the boot services
//! and the controllers under one cancellation token; fail fast on binds.

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the API server.
    #[arg(long, env = "METALHERD_LISTEN", default_value = "127.0.0.1:7080")]
    pub listen: String,
    /// Config file (YAML) for the boot services.
    #[arg(long, env = "METALHERD_CONFIG")]
    pub config: Option<std::path::PathBuf>,
}

pub async fn serve(_global: &crate::cli::GlobalArgs, _args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("serve is not available yet")
}
