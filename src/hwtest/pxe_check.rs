//! The `pxe-boot` and `pxe-once` checks of a power-action run: starts the
//! [`PxeWatch`] before the override is set, then, after power on, waits
//! for the boot MAC's PXE DISCOVER, and after the power cycle watches that
//! the next boot does not PXE-boot again. Report rows only; the watching
//! is in [`super::pxe`].

use std::time::{Duration, Instant};

use super::pxe::{PxeWatch, SecondBoot, judge_second_boot};
use super::report::{Report, Status};
use super::{Options, OverrideView, Progress, check, covering, secs};
use crate::api::MacAddr;
use crate::bmc::quirks::{QuirkSet, Quirks};

/// The check names, in report order.
pub const FIRST: &str = "pxe-boot";
pub const SECOND: &str = "pxe-once";

pub struct PxeCheck {
    watch: PxeWatch,
    macs: String,
    timeout: Duration,
    /// Seconds after power on of the first PXE DISCOVER, once seen.
    first: Option<f64>,
}

impl PxeCheck {
    /// Start watching, or explain in the report why the PXE checks cannot run.
    pub async fn start(
        opts: &Options,
        report: &mut Report,
        progress: Progress<'_>,
    ) -> Option<PxeCheck> {
        let Some(p) = &opts.pxe else {
            for name in [FIRST, SECOND] {
                report.push(check(
                    name,
                    Status::Skipped,
                    None,
                    "watching the PXE boot needs --interface (the server's boot network)",
                ));
            }
            return None;
        };
        let macs: Vec<MacAddr> = if p.boot_macs.is_empty() {
            report
                .inventory
                .iter()
                .flat_map(|i| i.nics.iter())
                .filter_map(|n| n.mac.parse().ok())
                .collect()
        } else {
            p.boot_macs.clone()
        };
        let fail = |report: &mut Report, why: String| {
            report.push(check(FIRST, Status::Fail, None, why));
            report.push(check(SECOND, Status::Skipped, None, "no PXE watch"));
        };
        if macs.is_empty() {
            fail(
                report,
                "the inventory lists no NIC MAC: give the boot MAC with --boot-mac".into(),
            );
            return None;
        }
        let names: Vec<String> = macs.iter().map(ToString::to_string).collect();
        progress(&format!(
            "pxe: watching {} for PXE DISCOVERs from {} (proxy DHCP, answering nothing)",
            p.interface,
            names.join(", ")
        ));
        match PxeWatch::start(&p.interface, macs.iter().map(|m| m.0).collect()).await {
            Ok(watch) => Some(PxeCheck {
                watch,
                macs: names.join(", "),
                timeout: p.timeout,
                first: None,
            }),
            Err(e) => {
                fail(report, e.to_string());
                None
            }
        }
    }

    /// After the power on that follows the one-time PXE override.
    pub async fn first_boot(
        &mut self,
        on_at: Instant,
        report: &mut Report,
        progress: Progress<'_>,
    ) {
        progress(&format!(
            "{FIRST}: waiting up to {} s for a PXE DISCOVER from {}",
            self.timeout.as_secs(),
            self.macs
        ));
        match self.watch.first_since(on_at, on_at + self.timeout).await {
            Some(s) => {
                let t = s.at.duration_since(on_at);
                self.first = secs(t);
                report.push(check(
                    FIRST,
                    Status::Pass,
                    secs(t),
                    format!(
                        "{} sent a PXE DISCOVER ({}) {:.1} s after power on",
                        MacAddr(s.seen.mac),
                        s.seen.vendor_class.unwrap_or_default(),
                        t.as_secs_f64()
                    ),
                ));
            }
            None => report.push(check(
                FIRST,
                Status::Fail,
                None,
                format!(
                    "no PXE DISCOVER from {} within {} s of power on: the one-time PXE override was acknowledged but not honoured",
                    self.macs,
                    self.timeout.as_secs()
                ),
            )),
        }
    }

    /// After the power cycle that follows the PXE boot: it must not
    /// PXE-boot again. `after_boot` is the override read back after the
    /// first boot.
    #[allow(clippy::too_many_arguments)]
    pub async fn second_boot(
        &self,
        cycle_at: Instant,
        after_boot: Option<&OverrideView>,
        opts: &Options,
        quirks: &Quirks,
        set: &mut QuirkSet,
        report: &mut Report,
        progress: Progress<'_>,
    ) {
        if self.first.is_none() {
            report.push(check(
                SECOND,
                Status::Skipped,
                None,
                "the server did not PXE-boot the first time",
            ));
            return;
        }
        progress(&format!(
            "{SECOND}: watching {} s for a second PXE boot (there must be none)",
            self.timeout.as_secs()
        ));
        let again = self
            .watch
            .first_since(cycle_at, cycle_at + self.timeout)
            .await;
        let inv = report.inventory.clone().unwrap_or_default();
        let bmc = [
            inv.manufacturer.as_deref(),
            inv.model.as_deref(),
            inv.firmware_version.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        let judged = judge_second_boot(&SecondBoot {
            read_back: after_boot.map_or_else(|| "?".into(), |v| v.text.clone()),
            reports_network: after_boot.is_some_and(|v| v.network && v.active),
            reports_persistent: after_boot.is_some_and(|v| v.persistent),
            pxe_again_after: again.map(|s| s.at.duration_since(cycle_at).as_secs_f64()),
            window: self.timeout,
            bmc: if bmc.is_empty() {
                opts.address.clone()
            } else {
                bmc
            },
        });
        let (status, detail, finding) = judged;
        if let Some(mut f) = finding {
            f.covered_by = covering(opts.quirks.as_ref(), quirks, |s| {
                s.once_kept_as_continuous == Some(true)
            });
            report.findings.push(f);
            set.once_kept_as_continuous = Some(true);
        }
        report.push(check(SECOND, status, None, detail));
    }
}
