//! `metalherd bmc status|power|bootdev|inventory`: racking-day checks of a
//! BMC, for a Machine by name (its spec and Secret read through the API) or
//! directly with `--address URL --username U --password-file F`.
//!
//! Never prints, logs or echoes the password; errors come from `BmcError`,
//! whose messages carry no credentials.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Secret;

use crate::api::Kind;
use crate::api::Machine;
use crate::bmc::connector::{
    ConnectOptions, connect_address, connect_spec, credentials_from_secret,
};
use crate::bmc::quirks::{BmcSettings, QuirkTable};
use crate::bmc::redfish::TlsMode;
use crate::bmc::{Bmc, BootDevice, Credentials, FirmwareMode, PowerAction, Timing};
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct BmcArgs {
    #[command(subcommand)]
    pub action: BmcAction,
}

#[derive(Debug, Subcommand)]
pub enum BmcAction {
    /// Show the power state.
    Status(Target),
    /// Power on, off (graceful), force-off, cycle or reset, and wait until
    /// the BMC reports the resulting state.
    Power {
        #[arg(value_enum)]
        action: PowerArg,
        #[command(flatten)]
        target: Target,
    },
    /// Set a one-time boot device and read it back.
    Bootdev {
        #[arg(value_enum)]
        device: DeviceArg,
        /// Legacy BIOS boot instead of UEFI.
        #[arg(long)]
        legacy: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Read the hardware inventory (YAML; `--json` for JSON).
    Inventory(Target),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PowerArg {
    On,
    Off,
    ForceOff,
    Cycle,
    Reset,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DeviceArg {
    Pxe,
    Disk,
    /// The CD/DVD drive, virtual media included.
    Cd,
}

/// Which BMC: a Machine by name, or an address with credentials.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Machine name (its `spec.bmc` and credentials Secret are read through the API).
    #[arg(required_unless_present = "address")]
    pub machine: Option<String>,
    /// Namespace of the Machine.
    #[arg(short = 'n', long, default_value = crate::store::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// BMC address: `redfish+https://host/redfish/v1/Systems/ID`, `ipmi://host`.
    #[arg(long, env = "METALHERD_BMC_ADDRESS", conflicts_with = "machine")]
    pub address: Option<String>,
    #[arg(long, env = "METALHERD_BMC_USERNAME", requires = "address")]
    pub username: Option<String>,
    /// File holding the password (one line). Never given on the command line.
    #[arg(long, env = "METALHERD_BMC_PASSWORD_FILE", requires = "address")]
    pub password_file: Option<PathBuf>,
    /// Skip TLS verification (an explicit, visible choice).
    #[arg(long, conflicts_with = "ca_file")]
    pub insecure: bool,
    /// PEM CA bundle that signs the BMC's certificate.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// IPMI cipher suite (3 or 17; 17 by default).
    #[arg(long)]
    pub cipher_suite: Option<u8>,
    /// metalherd config file whose `bmc.quirks` entries apply (after the
    /// built-in ones).
    #[arg(long, env = "METALHERD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Seconds a power action may take to show in the power state.
    #[arg(long, default_value_t = 120)]
    pub power_timeout: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &super::GlobalArgs, args: BmcArgs) -> anyhow::Result<()> {
    let target = match &args.action {
        BmcAction::Status(t) | BmcAction::Inventory(t) => t,
        BmcAction::Power { target, .. } | BmcAction::Bootdev { target, .. } => target,
    };
    let bmc = connect(global, target).await?;
    let result = act(bmc.as_ref(), &args.action, target).await;
    // Log out whatever happened; a failed logout is not worth hiding the result.
    if let Err(e) = bmc.close().await {
        tracing::debug!(reason = e.reason(), "BMC logout failed");
    }
    let out = result?;
    println!("{out}");
    Ok(())
}

async fn act(bmc: &dyn Bmc, action: &BmcAction, target: &Target) -> anyhow::Result<String> {
    Ok(match action {
        BmcAction::Status(_) => {
            let st = bmc.power_state().await?;
            if target.json {
                serde_json::json!({ "powerState": st }).to_string()
            } else {
                format!("power: {st:?}")
            }
        }
        BmcAction::Power { action, .. } => {
            let a = match action {
                PowerArg::On => PowerAction::On,
                PowerArg::Off => PowerAction::GracefulOff,
                PowerArg::ForceOff => PowerAction::ForceOff,
                PowerArg::Cycle => PowerAction::Cycle,
                PowerArg::Reset => PowerAction::Reset,
            };
            bmc.power(a).await?;
            format!("power {a:?}: done, power is {:?}", a.target())
        }
        BmcAction::Bootdev { device, legacy, .. } => {
            let d = match device {
                DeviceArg::Pxe => BootDevice::Network,
                DeviceArg::Disk => BootDevice::Disk,
                DeviceArg::Cd => BootDevice::Cd,
            };
            let m = if *legacy {
                FirmwareMode::Legacy
            } else {
                FirmwareMode::Uefi
            };
            bmc.set_boot_once(d, m).await?;
            format!("next boot: {d:?} ({m:?}), read back and verified")
        }
        BmcAction::Inventory(_) => {
            let inv = bmc.inventory().await?;
            if target.json {
                serde_json::to_string_pretty(&inv)?
            } else {
                serde_yaml::to_string(&inv)?.trim_end().to_string()
            }
        }
    })
}

fn timing(target: &Target) -> Timing {
    Timing {
        power_deadline: Duration::from_secs(target.power_timeout),
        ..Timing::default()
    }
}

async fn connect(global: &super::GlobalArgs, t: &Target) -> anyhow::Result<Box<dyn Bmc>> {
    if let Some(address) = &t.address {
        let username = t
            .username
            .clone()
            .context("--username is required with --address")?;
        let pw_file = t
            .password_file
            .as_ref()
            .context("--password-file is required with --address")?;
        let password = std::fs::read_to_string(pw_file)
            .with_context(|| format!("reading password file {}", pw_file.display()))?;
        let creds = Credentials::new(username, password.trim_end_matches(['\r', '\n']));
        let tls = if t.insecure {
            eprintln!("warning: TLS verification of the BMC is off (--insecure)");
            TlsMode::Insecure
        } else if let Some(ca) = &t.ca_file {
            TlsMode::CaBundle(
                std::fs::read_to_string(ca)
                    .with_context(|| format!("reading CA bundle {}", ca.display()))?,
            )
        } else {
            TlsMode::SystemRoots
        };
        let opts = ConnectOptions {
            tls,
            cipher_suite: t.cipher_suite,
            quirks: load_quirks(t.config.as_deref())?,
        };
        return Ok(connect_address(address, creds, &opts, timing(t)).await?);
    }
    let name = t
        .machine
        .as_deref()
        .context("name a Machine, or give --address")?;
    let (machine, secret) = fetch_machine(global, &t.namespace, name).await?;
    connect_machine(&machine, &secret, t).await
}

/// A driver for a Machine and its credentials Secret.
async fn connect_machine(
    machine: &Machine,
    secret: &Secret,
    t: &Target,
) -> anyhow::Result<Box<dyn Bmc>> {
    let ns = machine
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(&t.namespace);
    let secret_name = &machine.spec.bmc.credentials_secret_ref.name;
    let creds = credentials_from_secret(secret, ns, secret_name)?;
    let mut spec = machine.spec.bmc.clone();
    if t.insecure {
        spec.insecure_skip_verify = true;
        spec.ca_bundle = None;
    }
    if t.cipher_suite.is_some() {
        spec.cipher_suite = t.cipher_suite;
    }
    let quirks = load_quirks(t.config.as_deref())?;
    Ok(connect_spec(&spec, creds, timing(t), &quirks).await?)
}

/// The quirk table: built-in entries, then the config file's `bmc.quirks`.
pub fn load_quirks(config: Option<&std::path::Path>) -> anyhow::Result<Arc<QuirkTable>> {
    let Some(path) = config else {
        return Ok(QuirkTable::builtin().shared());
    };
    let file = crate::config::ConfigFile::load(path)?;
    let settings = BmcSettings::try_from(file.bmc.unwrap_or_default())
        .with_context(|| format!("config file {}", path.display()))?;
    Ok(settings.quirks)
}

/// Read the Machine and its Secret through the API server.
async fn fetch_machine(
    global: &super::GlobalArgs,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(Machine, Secret)> {
    let api = super::client::ApiClient::from_global(global)?;
    let m = api
        .get(Kind::Machine, namespace, name)
        .await
        .with_context(|| format!("reading Machine {namespace}/{name}"))?;
    let machine: Machine = serde_json::from_value(m)
        .with_context(|| format!("Machine {namespace}/{name} is malformed"))?;
    let secret_name = machine.spec.bmc.credentials_secret_ref.name.clone();
    let s = api
        .get(Kind::Secret, namespace, &secret_name)
        .await
        .with_context(|| format!("reading Secret {namespace}/{secret_name}"))?;
    // The error names the Secret only: its contents never reach a message.
    let secret: Secret = serde_json::from_value(s)
        .map_err(|_| anyhow::anyhow!("Secret {namespace}/{secret_name} is malformed"))?;
    Ok((machine, secret))
}
