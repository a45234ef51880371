//! `metalherd bmc ...`: racking-day BMC checks.

use clap::Args;

#[derive(Debug, Args)]
pub struct BmcArgs {}

pub async fn run(_global: &super::GlobalArgs, _args: BmcArgs) -> anyhow::Result<()> {
    anyhow::bail!("metalherd bmc is not available yet")
}
