//! `metalherd hw-test`: qualify one server model through its BMC before
//! trusting a rack of them. Built on the same drivers `metalherd bmc` and
//! the controller use, it checks and times login (Redfish session and
//! Basic; IPMI cipher suites 3 and 17; optionally the session limit, every
//! probe session logged out), inventory, boot mode, TLS, and, only with
//! `allow_power_actions`, the one-time boot override and power off/on/cycle,
//! plus, on Redfish, what day two needs (BIOS attributes, SimpleUpdate,
//! storage volumes; with power actions, a BIOS attribute written and
//! applied at a power cycle), and, with power actions and an image URL,
//! virtual media inserted, booted once from and ejected, each read back and
//! watched for a while after the BMC says it is done.
//! What it finds that the quirk table does not yet cover becomes a proposed
//! `bmc.quirks:` entry. Progress goes to the caller's callback.

pub mod day_two;
pub mod power;
pub mod pxe;
pub mod pxe_check;
pub mod redfish;
pub mod report;
pub mod tls;
pub mod vmedia_check;

use std::sync::Arc;
use std::time::Duration;

use crate::api::validate::{BmcAddress, parse_bmc_address};
use crate::bmc::ipmi::{CipherSuite, IpmiBmc};
use crate::bmc::quirks::{Protocol, QuirkSet, QuirkTable, Quirks};
use crate::bmc::redfish::TlsMode;
use crate::bmc::{Bmc, BmcError, BootDevice, Credentials, FirmwareMode, Timing};
pub use report::{Check, Finding, Report, Status};

/// What to test and how far to go.
#[derive(Clone, Debug)]
pub struct Options {
    pub address: String,
    pub credentials: Credentials,
    pub tls: TlsMode,
    /// The CA bundle the operator means to use (for the TLS advice).
    pub ca_pem: Option<String>,
    pub quirks: Arc<QuirkTable>,
    pub timing: Timing,
    /// Power off/on/cycle and set a one-time boot override.
    pub allow_power_actions: bool,
    /// The BIOS attribute `bios-applied` writes, and its value; `None`:
    /// the first that reads `Enabled` or `Disabled`, flipped.
    pub bios_attribute: Option<(String, String)>,
    /// Open up to this many concurrent sessions to find the limit.
    pub session_limit_probe: Option<u32>,
    /// How long to keep reading the power state after the BMC reports an
    /// action done, to catch a state that settles late.
    pub settle_window: Duration,
    /// Watch the server PXE-boot (once) through proxy DHCP on an interface.
    pub pxe: Option<pxe::PxeOptions>,
    /// The image the `virtual-media` check inserts (the BMC fetches it);
    /// `None` skips the check.
    pub virtual_media_url: Option<String>,
}

/// Where progress lines go (the CLI prints them to stderr).
pub type Progress<'a> = &'a (dyn Fn(&str) + Send + Sync);

pub(crate) fn secs(d: Duration) -> Option<f64> {
    Some((d.as_secs_f64() * 10.0).round() / 10.0)
}

pub(crate) fn check(
    name: &str,
    status: Status,
    seconds: Option<f64>,
    detail: impl Into<String>,
) -> Check {
    Check {
        name: name.to_string(),
        status,
        seconds,
        detail: detail.into(),
    }
}

/// The entry in effect that sets a quirk field, for "already covered".
pub(crate) fn covering(
    table: &QuirkTable,
    q: &Quirks,
    field: impl Fn(&QuirkSet) -> bool,
) -> Option<String> {
    table
        .entries()
        .iter()
        .filter(|e| q.applied.contains(&e.name) && field(&e.set))
        .map(|e| e.name.clone())
        .next_back()
}

/// Run the qualification. Never panics; a failing step is a FAIL row.
pub async fn run(opts: &Options, progress: Progress<'_>) -> Report {
    let mut report = Report {
        address: opts.address.clone(),
        ..Report::default()
    };
    match parse_bmc_address(&opts.address) {
        Err(e) => {
            report.protocol = "?".into();
            report.push(check("address", Status::Fail, None, e.to_string()));
            report.finish(Protocol::Any, QuirkSet::default());
        }
        Ok(BmcAddress::Redfish { base, system_path }) => {
            report.protocol = "redfish".into();
            let set = redfish::run(opts, base, system_path, &mut report, progress).await;
            report.finish(Protocol::Redfish, set);
        }
        Ok(BmcAddress::Ipmi { host, port }) => {
            report.protocol = "ipmi".into();
            let set = run_ipmi(opts, &host, port, &mut report, progress).await;
            report.finish(Protocol::Ipmi, set);
        }
    }
    report
}

async fn run_ipmi(
    opts: &Options,
    host: &str,
    port: u16,
    report: &mut Report,
    progress: Progress<'_>,
) -> QuirkSet {
    let mut working = None;
    for suite in [CipherSuite::try_from(3u8), CipherSuite::try_from(17u8)] {
        let Ok(suite) = suite else { continue };
        let name = format!("login-suite-{}", suite.id());
        progress(&format!("{name}: opening an RMCP+ session"));
        let start = std::time::Instant::now();
        match IpmiBmc::connect(host, port, opts.credentials.clone(), suite, opts.timing).await {
            Ok(b) => {
                let _ = b.close().await;
                report.push(check(
                    &name,
                    Status::Pass,
                    secs(start.elapsed()),
                    "session opened and closed",
                ));
                working = Some(suite);
            }
            Err(BmcError::Unsupported { what, .. }) => {
                report.push(check(
                    &name,
                    Status::NotSupported,
                    None,
                    format!("refused: {what}"),
                ));
            }
            Err(e) => report.push(check(&name, Status::Fail, None, e.to_string())),
        }
    }
    let Some(suite) = working else {
        report.push(check(
            "inventory",
            Status::Skipped,
            None,
            "no cipher suite logged in",
        ));
        return QuirkSet::default();
    };
    if let Some(cap) = opts.session_limit_probe {
        progress(&format!("session-limit: opening up to {cap} sessions"));
        let mut open = Vec::new();
        let mut refused = None;
        for i in 0..cap {
            match IpmiBmc::connect(host, port, opts.credentials.clone(), suite, opts.timing).await {
                Ok(b) => open.push(b),
                Err(e) => {
                    refused = Some((i + 1, e.to_string()));
                    break;
                }
            }
        }
        let opened = open.len();
        for b in open {
            let _ = b.close().await;
        }
        let detail = match refused {
            Some((n, e)) => format!("session {n} refused ({e}); {opened} probe sessions closed"),
            None => {
                format!("all {cap} sessions accepted (the cap); {opened} probe sessions closed")
            }
        };
        report.push(check("session-limit", Status::Pass, None, detail));
    }
    let bmc = IpmiBmc::new(
        host,
        port,
        opts.credentials.clone(),
        Some(suite),
        opts.timing,
    )
    .with_quirks(opts.quirks.clone());
    let reader = IpmiOverride(&bmc);
    let set = power::common(opts, &bmc, &reader, report, progress).await;
    // IPMI has no virtual media: the check says so, and sends nothing.
    vmedia_check::run(opts, &bmc, &reader, &set, report, progress).await;
    let _ = bmc.close().await;
    set
}

/// How the one-time override reads back, whatever the protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideView {
    /// The override targets the network.
    pub network: bool,
    /// The BMC reports it as Continuous / persistent.
    pub persistent: bool,
    /// An override is set at all.
    pub active: bool,
    /// The device it names, when metalherd can set that one again.
    pub device: Option<BootDevice>,
    /// The firmware mode it names, when it names one.
    pub mode: Option<FirmwareMode>,
    pub text: String,
}

/// Reads the boot override as the BMC reports it.
#[async_trait::async_trait]
pub trait OverrideReader: Send + Sync {
    async fn read(&self) -> Result<OverrideView, BmcError>;
    /// Quirks the driver uses (resolved through the driver).
    async fn quirks(&self) -> Result<Quirks, BmcError>;
    /// Clear the override, to leave a server with none as it was found.
    async fn disable(&self) -> Result<(), BmcError> {
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "clearing the boot override".into(),
        })
    }
}

struct IpmiOverride<'a>(&'a IpmiBmc);

#[async_trait::async_trait]
impl OverrideReader for IpmiOverride<'_> {
    async fn read(&self) -> Result<OverrideView, BmcError> {
        let f = self.0.boot_flags().await?;
        use crate::bmc::ipmi::commands::BootFlags;
        let valid = f.0[0] & BootFlags::VALID != 0;
        Ok(OverrideView {
            network: f.device_selector() == 1,
            persistent: valid && f.0[0] & BootFlags::PERSISTENT != 0,
            active: valid || f.device_selector() != 0,
            device: f.device(),
            // Without the valid bit the flags say nothing of the mode.
            mode: valid.then(|| {
                if f.0[0] & BootFlags::EFI != 0 {
                    FirmwareMode::Uefi
                } else {
                    FirmwareMode::Legacy
                }
            }),
            text: f.hex(),
        })
    }
    async fn quirks(&self) -> Result<Quirks, BmcError> {
        Ok(self.0.quirks().await?.clone())
    }
}
