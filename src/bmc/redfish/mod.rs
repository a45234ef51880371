//! Redfish driver: finds the System (from the address path, or the only one
//! the service has), logs in, and performs verified actions — power with
//! polling until reached, one-time boot override with read-back ([`boot`]),
//! virtual media inserted and ejected with read-back ([`vmedia`]) — and
//! reads inventory. Decisions are pure functions in [`logic`] and
//! [`vmedia_logic`]; HTTP lives in [`client`]; vendor differences are rows
//! of the [`QuirkTable`] (built-in plus config), resolved once per
//! connection.

pub mod boot;
pub mod client;
mod clients;
pub mod firmware;
pub mod logic;
pub mod model;
#[cfg(test)]
mod tests;
pub mod vmedia;
pub mod vmedia_logic;
pub mod volumes;

use async_trait::async_trait;
use reqwest::Method;
use tokio::sync::OnceCell;
use tokio::time::Instant;
use tracing::Instrument;

use crate::bmc::quirks::{BmcIdentity, Protocol, QuirkTable, Quirks};
pub use client::{TlsMode, Transport};
use logic::{PowerPlan, RetryPolicy};
use model::{
    ActionInfo, Collection, ComputerSystem, Drive, EthernetInterface, ServiceRoot, SimpleStorage,
    Storage,
};
use std::sync::Arc;

use super::{
    Bmc, BmcError, BootDevice, Credentials, FirmwareMode, PowerAction, PowerState, Timing,
};
use crate::api::Inventory;

const SERVICE_ROOT: &str = "/redfish/v1/";

/// What was learned once per connection.
#[derive(Debug)]
struct Resolved {
    system_path: String,
    quirks: Quirks,
}

/// A Redfish BMC.
#[derive(Debug)]
pub struct RedfishBmc {
    t: Transport,
    /// From the address (`/redfish/v1/Systems/ID`), or discovered.
    system_path: Option<String>,
    table: Arc<QuirkTable>,
    resolved: OnceCell<Resolved>,
}

impl RedfishBmc {
    /// A driver for `base` (`https://host:port`); nothing is sent until the
    /// first call.
    pub fn new(
        base: url::Url,
        system_path: Option<String>,
        creds: Credentials,
        tls: &TlsMode,
        timing: Timing,
    ) -> Result<RedfishBmc, BmcError> {
        Self::with_retry(
            base,
            system_path,
            creds,
            tls,
            timing,
            RetryPolicy::default(),
        )
    }

    pub fn with_retry(
        base: url::Url,
        system_path: Option<String>,
        creds: Credentials,
        tls: &TlsMode,
        timing: Timing,
        retry: RetryPolicy,
    ) -> Result<RedfishBmc, BmcError> {
        Ok(RedfishBmc {
            t: Transport::new(base, creds, tls, timing, retry)?,
            system_path,
            table: Arc::new(QuirkTable::builtin()),
            resolved: OnceCell::new(),
        })
    }

    /// Match quirks against `table` instead of the built-in one.
    pub fn with_quirks(mut self, table: Arc<QuirkTable>) -> RedfishBmc {
        self.table = table;
        self
    }

    /// The quirks in effect for this BMC (connects when needed).
    pub async fn quirks(&self) -> Result<Quirks, BmcError> {
        Ok(self.resolve().await?.quirks.clone())
    }

    /// Raw GET of a Redfish path, for checks that read what the driver
    /// does not model (hw-test).
    pub async fn get_value(&self, path: &str) -> Result<serde_json::Value, BmcError> {
        self.resolve().await?;
        Ok(self.t.get_json::<serde_json::Value>(path).await?.0)
    }

    pub fn address(&self) -> &str {
        self.t.address()
    }

    /// The System's path once resolved (connects when needed).
    pub async fn system_path(&self) -> Result<String, BmcError> {
        Ok(self.resolve().await?.system_path.clone())
    }

    /// Whether requests ride on a SessionService token (else Basic auth).
    pub async fn uses_session(&self) -> bool {
        self.t.has_session().await
    }

    fn protocol(&self, detail: impl Into<String>) -> BmcError {
        BmcError::Protocol {
            address: self.address().to_string(),
            detail: detail.into(),
        }
    }

    async fn resolve(&self) -> Result<&Resolved, BmcError> {
        self.resolved
            .get_or_try_init(|| async {
                let (root, _) = self.t.get_json::<ServiceRoot>(SERVICE_ROOT).await?;
                let sessions = root.links.sessions.as_ref().map(|l| l.odata_id.clone());
                let sessions = match (sessions, &root.session_service) {
                    (Some(s), _) if !s.is_empty() => Some(s),
                    (_, Some(svc)) if !svc.odata_id.is_empty() => {
                        Some(format!("{}/Sessions", svc.odata_id.trim_end_matches('/')))
                    }
                    _ => None,
                };
                if let Some(path) = sessions {
                    self.t.login(&path).await?;
                }
                let system_path = match &self.system_path {
                    Some(p) => p.clone(),
                    None => self.discover_system(&root).await?,
                };
                let (sys, _) = self.t.get_json::<ComputerSystem>(&system_path).await?;
                let quirks = self.table.resolve(&BmcIdentity {
                    protocol: Protocol::Redfish,
                    manufacturer: sys.manufacturer.as_deref(),
                    oem_keys: sys.oem.keys().map(String::as_str).collect(),
                    model: sys.model.as_deref(),
                    firmware: sys.bios_version.as_deref(),
                });
                tracing::debug!(address = %self.address(), system = %system_path, quirks = %quirks.label(), "redfish system resolved");
                Ok(Resolved {
                    system_path,
                    quirks,
                })
            })
            .await
    }

    async fn discover_system(&self, root: &ServiceRoot) -> Result<String, BmcError> {
        let systems = root
            .systems
            .as_ref()
            .map(|l| l.odata_id.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "/redfish/v1/Systems".to_string());
        let (coll, _) = self.t.get_json::<Collection>(&systems).await?;
        match coll.members.as_slice() {
            [one] if !one.odata_id.is_empty() => Ok(one.odata_id.clone()),
            [] => Err(BmcError::NoSuchSystem {
                address: self.address().to_string(),
                detail: "the service lists no systems".to_string(),
            }),
            many => Err(BmcError::Config(format!(
                "BMC {} has {} systems; name one in the address (…/redfish/v1/Systems/ID): {}",
                self.address(),
                many.len(),
                many.iter()
                    .map(|l| l.odata_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    async fn system(&self) -> Result<(ComputerSystem, &Quirks), BmcError> {
        let r = self.resolve().await?;
        let (sys, _) = self.t.get_json::<ComputerSystem>(&r.system_path).await?;
        Ok((sys, &r.quirks))
    }

    fn power_of(&self, sys: &ComputerSystem) -> Result<PowerState, BmcError> {
        logic::parse_power_state(sys.power_state.as_deref())
            .map_err(|e| self.protocol(e.to_string()))
    }

    /// ResetTypes the BMC allows: inline AllowableValues, else its ActionInfo.
    async fn allowed_reset_types(&self, sys: &ComputerSystem) -> Vec<String> {
        let Some(reset) = &sys.actions.reset else {
            return Vec::new();
        };
        if !reset.allowable_values.is_empty() {
            return reset.allowable_values.clone();
        }
        if let Some(info) = &reset.action_info
            && let Some(ai) = self.t.get_optional::<ActionInfo>(info).await
        {
            return ai
                .parameters
                .into_iter()
                .find(|p| p.name == "ResetType")
                .map(|p| p.allowable_values)
                .unwrap_or_default();
        }
        Vec::new()
    }

    /// Poll until the power state is `wanted` and has held for the quirks'
    /// settle time (zero on the standard path).
    async fn wait_power(&self, wanted: PowerState) -> Result<(), BmcError> {
        let timing = self.t.timing;
        let settle = self.resolve().await?.quirks.power_settle;
        let start = Instant::now();
        let mut last = PowerState::Unknown;
        let mut held_since: Option<Instant> = None;
        loop {
            let (sys, _) = self.system().await?;
            // An unknown value mid-transition is not fatal while polling.
            last = self.power_of(&sys).unwrap_or(last);
            if last == wanted {
                let since = *held_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= settle {
                    return Ok(());
                }
            } else {
                held_since = None;
            }
            if start.elapsed() >= timing.power_deadline + settle {
                return Err(BmcError::PowerStateNotReached {
                    address: self.address().to_string(),
                    wanted,
                    last,
                    after: timing.power_deadline + settle,
                });
            }
            tokio::time::sleep(timing.poll_interval).await;
        }
    }

    async fn do_power(&self, action: PowerAction) -> Result<(), BmcError> {
        let (sys, quirks) = self.system().await?;
        let current = self.power_of(&sys)?;
        let allowed = self.allowed_reset_types(&sys).await;
        let plan = logic::plan_power(action, current, &allowed, quirks).map_err(|e| {
            BmcError::Unsupported {
                address: self.address().to_string(),
                what: e.to_string(),
            }
        })?;
        let PowerPlan::Reset(reset_type) = plan else {
            tracing::debug!(?action, ?current, "already in the wanted power state");
            return Ok(());
        };
        let target = sys
            .actions
            .reset
            .as_ref()
            .and_then(|r| r.target.clone())
            .unwrap_or_else(|| {
                format!(
                    "{}/Actions/ComputerSystem.Reset",
                    sys.odata_id.trim_end_matches('/')
                )
            });
        tracing::info!(?action, reset_type = %reset_type, "redfish reset");
        self.t
            .act(
                Method::POST,
                &target,
                &serde_json::json!({"ResetType": reset_type}),
                None,
            )
            .await?;
        self.wait_power(action.target()).await
    }

    async fn do_inventory(&self) -> Result<Inventory, BmcError> {
        let (sys, _) = self.system().await?;
        let mut inv = logic::system_inventory(&sys);
        if let Some(link) = &sys.ethernet_interfaces {
            let (coll, _) = self.t.get_json::<Collection>(&link.odata_id).await?;
            let nics = futures::future::join_all(
                coll.members
                    .iter()
                    .map(|m| self.t.get_json::<EthernetInterface>(&m.odata_id)),
            )
            .await;
            for n in nics {
                let (n, _) = n?;
                if let Some(info) = logic::nic_info(&n) {
                    inv.nics.push(info);
                }
            }
        }
        if let Some(link) = &sys.simple_storage
            && let Some(coll) = self.t.get_optional::<Collection>(&link.odata_id).await
        {
            for m in &coll.members {
                if let Some(s) = self.t.get_optional::<SimpleStorage>(&m.odata_id).await {
                    inv.disks.extend(logic::disks_from_simple_storage(&s));
                }
            }
        }
        if inv.disks.is_empty()
            && let Some(link) = &sys.storage
            && let Some(coll) = self.t.get_optional::<Collection>(&link.odata_id).await
        {
            for m in &coll.members {
                let Some(st) = self.t.get_optional::<Storage>(&m.odata_id).await else {
                    continue;
                };
                for d in &st.drives {
                    if let Some(drive) = self.t.get_optional::<Drive>(&d.odata_id).await {
                        inv.disks.push(logic::disk_from_drive(&drive));
                    }
                }
            }
        }
        // A BMC without the resource (or one that fails it) leaves the
        // state unknown: the Machine's spec decides then.
        if let Some(link) = &sys.secure_boot
            && let Some(sb) = self
                .t
                .get_optional::<model::SecureBoot>(&link.odata_id)
                .await
        {
            inv.secure_boot = sb.secure_boot_enable;
        }
        Ok(inv)
    }

    /// The System's `Bios` resource and its path.
    async fn bios_resource(&self) -> Result<(model::Bios, String), BmcError> {
        let (sys, _) = self.system().await?;
        let path = sys
            .bios
            .as_ref()
            .map(|l| l.odata_id.clone())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| BmcError::Unsupported {
                address: self.address().to_string(),
                what: "BIOS attributes (the System links no Bios resource)".into(),
            })?;
        let (bios, _) = self.t.get_json::<model::Bios>(&path).await?;
        Ok((bios, path))
    }

    async fn do_bios(&self) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        let (bios, _) = self.bios_resource().await?;
        Ok(bios
            .attributes
            .iter()
            .map(|(k, v)| (k.clone(), logic::bios_text(v)))
            .collect())
    }

    async fn do_set_bios(
        &self,
        wanted: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BmcError> {
        let (bios, path) = self.bios_resource().await?;
        // Changes go to the settings object the resource names, else to
        // `{Bios}/Settings`, as the Redfish schema puts it.
        let target = model::settings_path(&bios.settings)
            .unwrap_or_else(|| format!("{}/Settings", path.trim_end_matches('/')));
        let body = logic::bios_patch(&bios.attributes, wanted);
        self.t.act(Method::PATCH, &target, &body, None).await?;
        Ok(())
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        tracing::info_span!("bmc", driver = "redfish", op, address = %self.address())
    }
}

/// Run one operation inside its span and record its outcome.
async fn observed<T>(
    span: tracing::Span,
    op: &'static str,
    f: impl std::future::Future<Output = Result<T, BmcError>>,
) -> Result<T, BmcError> {
    let start = std::time::Instant::now();
    let r = f.instrument(span).await;
    super::metrics::observe("redfish", op, start.elapsed(), &r);
    r
}

#[async_trait]
impl Bmc for RedfishBmc {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        observed(self.span("power_state"), "power_state", async {
            let (sys, _) = self.system().await?;
            self.power_of(&sys)
        })
        .await
    }

    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        observed(self.span("power"), "power", self.do_power(action)).await
    }

    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError> {
        observed(
            self.span("set_boot_once"),
            "set_boot_once",
            self.do_boot(device, mode),
        )
        .await
    }

    async fn inventory(&self) -> Result<Inventory, BmcError> {
        observed(self.span("inventory"), "inventory", self.do_inventory()).await
    }

    async fn bios(&self) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        observed(self.span("bios"), "bios", self.do_bios()).await
    }

    async fn set_bios(
        &self,
        attributes: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BmcError> {
        observed(
            self.span("set_bios"),
            "set_bios",
            self.do_set_bios(attributes),
        )
        .await
    }

    async fn firmware_versions(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        observed(
            self.span("firmware_versions"),
            "firmware_versions",
            self.do_firmware_versions(),
        )
        .await
    }

    async fn update_firmware(&self, component: &str, image_url: &str) -> Result<(), BmcError> {
        observed(
            self.span("update_firmware"),
            "update_firmware",
            self.do_update_firmware(component, image_url),
        )
        .await
    }

    async fn volumes(&self) -> Result<Vec<crate::api::VolumeInfo>, BmcError> {
        observed(self.span("volumes"), "volumes", self.do_volumes()).await
    }

    async fn create_volume(&self, volume: &crate::api::VolumeSpec) -> Result<(), BmcError> {
        observed(
            self.span("create_volume"),
            "create_volume",
            self.do_create_volume(volume),
        )
        .await
    }

    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        observed(
            self.span("insert_media"),
            "insert_media",
            self.do_insert_media(image_url),
        )
        .await
    }

    async fn eject_media(&self) -> Result<(), BmcError> {
        observed(
            self.span("eject_media"),
            "eject_media",
            self.do_eject_media(),
        )
        .await
    }

    async fn applied_quirks(&self) -> Result<Vec<String>, BmcError> {
        Ok(self.resolve().await?.quirks.applied.clone())
    }

    async fn close(&self) -> Result<(), BmcError> {
        observed(self.span("close"), "close", self.t.logout()).await
    }
}
