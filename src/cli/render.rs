//! `metalherd render ignition MACHINE`.

use clap::Args;

#[derive(Debug, Args)]
pub struct RenderArgs {}

pub async fn run(_global: &super::GlobalArgs, _args: RenderArgs) -> anyhow::Result<()> {
    anyhow::bail!("metalherd render is not available yet")
}
