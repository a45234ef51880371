//! `metalherd hw-test`: the command line of the hardware qualification in
//! [`crate::hwtest`]. Reads the password from a file (never the command
//! line), prints progress to stderr and the report (table, or JSON with
//! `-o json`) to stdout; exits non-zero when the server is not qualified.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::bmc::redfish::TlsMode;
use crate::bmc::{Credentials, Timing};
use crate::hwtest::pxe::PxeOptions;
use crate::hwtest::{Options, run};

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum Output {
    #[default]
    Table,
    Json,
}

#[derive(Debug, Args)]
pub struct HwTestArgs {
    /// BMC address: `redfish+https://host[/redfish/v1/Systems/ID]`, `ipmi://host[:port]`.
    #[arg(long, env = "METALHERD_BMC_ADDRESS")]
    pub address: String,
    #[arg(long, env = "METALHERD_BMC_USERNAME")]
    pub username: String,
    /// File holding the password (one line).
    #[arg(long, env = "METALHERD_BMC_PASSWORD_FILE")]
    pub password_file: PathBuf,
    /// Skip TLS verification (the TLS check still reports what it found).
    #[arg(long, conflicts_with = "ca_file")]
    pub insecure: bool,
    /// PEM CA bundle that signs the BMC's certificate.
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// Config file whose `bmc.quirks` entries apply (after the built-in ones).
    #[arg(long, env = "METALHERD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Power the server off, on and cycle it, and set a one-time PXE boot.
    /// Without it nothing that changes the server is sent.
    #[arg(long)]
    pub allow_power_actions: bool,
    /// The BIOS attribute the bios-applied check writes (and restores
    /// after), as NAME=VALUE; default: the first attribute that reads
    /// Enabled or Disabled, flipped. Only with --allow-power-actions.
    #[arg(long, value_name = "NAME=VALUE", value_parser = parse_attribute)]
    pub bios_attribute: Option<(String, String)>,
    /// An image URL the BMC can fetch (an ISO): the virtual-media check
    /// inserts it, reads it back, sets a one-time boot from Cd and reads
    /// that back, ejects it and puts the boot override back. Nothing is
    /// booted. Only with --allow-power-actions.
    #[arg(long, value_name = "URL", value_parser = parse_image_url)]
    pub virtual_media_url: Option<String>,
    /// Find the session limit by opening up to N concurrent sessions (all
    /// are logged out again). A BMC out of sessions locks its operators out
    /// until they expire: keep N small.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=32))]
    pub probe_session_limit: Option<u32>,
    /// Seconds to keep reading the power state after an action is reported done.
    #[arg(long, default_value_t = 30)]
    pub settle_window: u64,
    /// Seconds a power action may take to show in the power state.
    #[arg(long, default_value_t = 300)]
    pub power_timeout: u64,
    /// Milliseconds between power-state reads while waiting and watching
    /// (smaller: finer timings, and short-lived states are not missed).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    pub poll_ms: u64,
    /// Watch the server PXE-boot on this interface (its boot network):
    /// metalherd's proxy DHCP listens there, answering nothing, and checks
    /// the one-time PXE override makes it PXE-boot once and only once.
    /// Binds UDP port 67 (root). Only with --allow-power-actions.
    #[arg(long, value_name = "IFACE")]
    pub interface: Option<String>,
    /// The MAC the server PXE-boots from (repeatable); default: every NIC
    /// MAC of its inventory.
    #[arg(long, value_name = "MAC", requires = "interface")]
    pub boot_mac: Vec<crate::api::MacAddr>,
    /// Seconds to wait for the PXE boot after power on, and to watch the
    /// next boot for a second one.
    #[arg(long, default_value_t = 300, requires = "interface")]
    pub pxe_timeout: u64,
    /// Report format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `NAME=VALUE`, both non-empty.
fn parse_attribute(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((n, v)) if !n.is_empty() && !v.is_empty() => Ok((n.to_string(), v.to_string())),
        _ => Err(format!("{s:?}: expected NAME=VALUE")),
    }
}

/// An http:// or https:// URL with a host (what InsertMedia can carry).
fn parse_image_url(s: &str) -> Result<String, String> {
    match url::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(s.to_string())
        }
        // Not echoed: the URL may carry a token.
        _ => Err("expected an http:// or https:// URL the BMC can fetch".into()),
    }
}

pub async fn run_cmd(args: HwTestArgs) -> anyhow::Result<()> {
    let password = std::fs::read_to_string(&args.password_file)
        .with_context(|| format!("reading password file {}", args.password_file.display()))?;
    let credentials = Credentials::new(
        args.username.clone(),
        password.trim_end_matches(['\r', '\n']),
    );
    let ca_pem = match &args.ca_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("reading CA bundle {}", p.display()))?,
        ),
        None => None,
    };
    let tls = if args.insecure {
        eprintln!("warning: TLS verification of the BMC is off (--insecure)");
        TlsMode::Insecure
    } else if let Some(pem) = &ca_pem {
        TlsMode::CaBundle(pem.clone())
    } else {
        TlsMode::SystemRoots
    };
    let opts = Options {
        address: args.address.clone(),
        credentials,
        tls,
        ca_pem,
        quirks: super::bmc::load_quirks(args.config.as_deref())?,
        timing: Timing {
            power_deadline: Duration::from_secs(args.power_timeout),
            poll_interval: Duration::from_millis(args.poll_ms),
            ..Timing::default()
        },
        allow_power_actions: args.allow_power_actions,
        bios_attribute: args.bios_attribute.clone(),
        session_limit_probe: args.probe_session_limit,
        settle_window: Duration::from_secs(args.settle_window),
        pxe: args.interface.clone().map(|interface| PxeOptions {
            interface,
            boot_macs: args.boot_mac.clone(),
            timeout: Duration::from_secs(args.pxe_timeout),
        }),
        virtual_media_url: args.virtual_media_url.clone(),
    };
    if !opts.allow_power_actions {
        eprintln!(
            "hw-test: read-only run (no power actions, no boot override); --allow-power-actions for the full qualification"
        );
    }
    let progress = |line: &str| eprintln!("hw-test: {line}");
    let report = run(&opts, &progress).await;
    match args.output {
        Output::Table => print!("{}", report.table()),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if !report.qualified {
        anyhow::bail!("{} is not qualified (see the FAIL rows)", args.address);
    }
    Ok(())
}
