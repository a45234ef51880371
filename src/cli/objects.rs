//! `apply`, `get`, `describe`, `delete`: kubectl-style object commands.

use clap::Args;

#[derive(Debug, Args)]
pub struct ApplyArgs {}
#[derive(Debug, Args)]
pub struct GetArgs {}
#[derive(Debug, Args)]
pub struct DescribeArgs {}
#[derive(Debug, Args)]
pub struct DeleteArgs {}

pub async fn apply(_g: &super::GlobalArgs, _a: ApplyArgs) -> anyhow::Result<()> {
    anyhow::bail!("not available yet")
}
pub async fn get(_g: &super::GlobalArgs, _a: GetArgs) -> anyhow::Result<()> {
    anyhow::bail!("not available yet")
}
pub async fn describe(_g: &super::GlobalArgs, _a: DescribeArgs) -> anyhow::Result<()> {
    anyhow::bail!("not available yet")
}
pub async fn delete(_g: &super::GlobalArgs, _a: DeleteArgs) -> anyhow::Result<()> {
    anyhow::bail!("not available yet")
}
