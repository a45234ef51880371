//! `metalherd reimage NAME`: ask for an in-place reimage of a Ready
//! Machine by setting the `metalherd.dev/reimage` annotation to a new value
//! (the controller acts on each new value once). Talks only to the API.

use clap::Args;
use serde_json::json;

use super::GlobalArgs;
use super::client::ApiClient;
use crate::api::Kind;
use crate::api::machine::REIMAGE_ANNOTATION;
use crate::store::DEFAULT_NAMESPACE;

#[derive(Debug, Args)]
pub struct ReimageArgs {
    /// The Machine to reimage.
    pub name: String,
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
}

pub async fn run(g: &GlobalArgs, a: ReimageArgs) -> anyhow::Result<()> {
    let client = ApiClient::from_global(g)?;
    let request = jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {REIMAGE_ANNOTATION: request}}});
    client
        .patch(Kind::Machine, &a.namespace, &a.name, &patch)
        .await?;
    println!(
        "machine \"{}\" reimage requested ({REIMAGE_ANNOTATION}={request})",
        a.name
    );
    Ok(())
}
