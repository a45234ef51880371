//! The [`IgnitionSource`] of `serve`: `crate::ignition`'s pure renderer,
//! fed the join token from the class's Secret (or a Machine's Cluster API
//! bootstrap data from its Secret), read from the store, and
//! this boot's context (call-home base, per-boot token, boot id, MAC, and
//! the node config URL the installer fetches).

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Secret;

use super::ignition::{IgnitionContext, IgnitionSource, IgnitionSourceError, IgnitionStage};
use crate::api::{Machine, MachineClass};
use crate::ignition::{NodeConfigSource, RenderContext, RenderSecrets, Stage, render, to_json};
use crate::store::{Store, TypedStore};

pub struct Renderer {
    pub store: Arc<dyn Store>,
}

impl Renderer {
    async fn secret(
        &self,
        ns: &str,
        name: &str,
        what: &str,
    ) -> Result<Option<Secret>, IgnitionSourceError> {
        match self.store.get_obj::<Secret>(ns, name).await {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(IgnitionSourceError(format!(
                "reading the {what} Secret: {e}"
            ))),
        }
    }
}

#[async_trait]
impl IgnitionSource for Renderer {
    async fn render(
        &self,
        machine: &Machine,
        class: &MachineClass,
        stage: IgnitionStage,
        ctx: &IgnitionContext,
    ) -> Result<Vec<u8>, IgnitionSourceError> {
        let secrets = match &machine.spec.bootstrap_data_secret_ref {
            // Cluster API's bootstrap data joins the node.
            Some(r) => {
                let ns = machine.metadata.namespace.as_deref().unwrap_or("default");
                let secret = self.secret(ns, &r.name, "bootstrap data").await?;
                RenderSecrets::from_bootstrap_secret(machine, secret.as_ref())
            }
            None => {
                let ns = class.metadata.namespace.as_deref().unwrap_or("default");
                let name = &class.spec.join.token_secret_ref.name;
                let secret = self.secret(ns, name, "join").await?;
                RenderSecrets::from_secret(class, secret.as_ref())
            }
        }
        .map_err(|e| IgnitionSourceError(e.to_string()))?;
        let rctx = RenderContext {
            callhome_base: ctx.base_url.clone(),
            boot_token: ctx.token.clone(),
            boot_id: ctx.boot_id.clone(),
            mac: Some(ctx.mac.clone()),
            node_config: NodeConfigSource::Url(ctx.node_config_url.clone()),
        };
        let stage = match stage {
            IgnitionStage::Install => Stage::Install,
            IgnitionStage::Node => Stage::Node,
            IgnitionStage::Wipe => Stage::Wipe,
        };
        let config = render(stage, machine, class, &secrets, &rctx)
            .map_err(|e| IgnitionSourceError(e.to_string()))?;
        to_json(&config)
            .map(String::into_bytes)
            .map_err(|e| IgnitionSourceError(e.to_string()))
    }
}
