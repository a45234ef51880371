//! The checks both protocols share, through the [`Bmc`] driver: inventory,
//! and (only with `allow_power_actions`) the one-time boot override read
//! back, power off / on / cycle timed and then watched for a settle window,
//! whether the override was still set after the server booted, and (with
//! an interface to watch, see [`super::pxe_check`]) whether the server
//! really PXE-booted once and only once.

use std::time::{Duration, Instant};

use super::pxe_check::PxeCheck;
use super::report::{Finding, Report, Status};
use super::{Options, OverrideReader, OverrideView, Progress, check, covering, secs};
use crate::bmc::quirks::{QuirkSet, Quirks};
use crate::bmc::{Bmc, BootDevice, FirmwareMode, PowerAction, PowerState};

/// How the state looked while watched after an action was reported done.
#[derive(Debug, PartialEq)]
pub struct Watch {
    /// Seconds after "done" when another state was first read.
    pub left_at: Option<f64>,
    /// Seconds after "done" when the wanted state was read again for good.
    pub back_at: Option<f64>,
    /// The state at the end of the window.
    pub last: PowerState,
}

async fn watch(bmc: &dyn Bmc, wanted: PowerState, window: Duration, poll: Duration) -> Watch {
    let start = Instant::now();
    let mut w = Watch {
        left_at: None,
        back_at: None,
        last: wanted,
    };
    while start.elapsed() < window {
        tokio::time::sleep(poll).await;
        let Ok(st) = bmc.power_state().await else {
            continue;
        };
        let t = start.elapsed().as_secs_f64();
        if st != wanted {
            if w.left_at.is_none() {
                w.left_at = Some(t);
            }
            w.back_at = None;
        } else if w.left_at.is_some() && w.back_at.is_none() {
            w.back_at = Some(t);
        }
        w.last = st;
    }
    w
}

pub async fn common(
    opts: &Options,
    bmc: &dyn Bmc,
    reader: &dyn OverrideReader,
    report: &mut Report,
    progress: Progress<'_>,
) -> QuirkSet {
    let mut set = QuirkSet::default();
    progress("inventory: reading serial, model, firmware, NICs, disks");
    let start = Instant::now();
    match bmc.inventory().await {
        Ok(inv) => {
            let nics: Vec<String> = inv.nics.iter().map(|n| n.mac.clone()).collect();
            report.push(check(
                "inventory",
                Status::Pass,
                secs(start.elapsed()),
                format!(
                    "serial {}, model {}, firmware {}, NICs [{}], {} disks",
                    inv.serial_number.as_deref().unwrap_or("?"),
                    inv.model.as_deref().unwrap_or("?"),
                    inv.firmware_version.as_deref().unwrap_or("?"),
                    nics.join(", "),
                    inv.disks.len()
                ),
            ));
            report.inventory = Some(inv);
        }
        Err(e) => {
            report.push(check("inventory", Status::Fail, None, e.to_string()));
            return set;
        }
    }
    let quirks = match reader.quirks().await {
        Ok(q) => q,
        Err(e) => {
            report.push(check("quirks", Status::Fail, None, e.to_string()));
            Quirks::standard()
        }
    };
    report.quirks_in_effect = quirks.applied.clone();
    if !opts.allow_power_actions {
        for name in [
            "boot-override",
            "power-off",
            "power-on",
            "override-after-boot",
            "power-cycle",
            super::pxe_check::FIRST,
            super::pxe_check::SECOND,
        ] {
            report.push(check(
                name,
                Status::Skipped,
                None,
                "changes power or the next boot: needs --allow-power-actions",
            ));
        }
        return set;
    }
    let table = opts.quirks.as_ref();
    let initial = bmc.power_state().await.unwrap_or(PowerState::Unknown);
    // Watching starts before the override is set: nothing is missed.
    let mut pxe = PxeCheck::start(opts, report, progress).await;
    let mut after_boot: Option<OverrideView> = None;

    // One-time network boot, read back.
    progress("boot-override: one-time PXE (UEFI), read back");
    let start = Instant::now();
    let r = bmc
        .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
        .await;
    let took = secs(start.elapsed());
    let view = reader.read().await;
    match (&r, &view) {
        (_, Ok(v)) if v.network && v.persistent => {
            let covered = covering(table, &quirks, |s| s.once_kept_as_continuous == Some(true));
            report.findings.push(Finding {
                quirk: "onceKeptAsContinuous".into(),
                evidence: format!(
                    "asked for a one-time PXE boot, read back {} (persistent)",
                    v.text
                ),
                covered_by: covered.clone(),
            });
            set.once_kept_as_continuous = Some(true);
            report.push(check(
                "boot-override",
                Status::Quirk,
                took,
                format!("read back {}: kept as Continuous", v.text),
            ));
        }
        (Ok(()), Ok(v)) => report.push(check(
            "boot-override",
            Status::Pass,
            took,
            format!("read back {}", v.text),
        )),
        (Err(e), _) => report.push(check("boot-override", Status::Fail, took, e.to_string())),
        (Ok(()), Err(e)) => report.push(check(
            "boot-override",
            Status::Fail,
            took,
            format!("read back failed: {e}"),
        )),
    }

    let mut settle_needed: Option<u32> = None;
    let steps = [
        ("power-off", PowerAction::ForceOff),
        ("power-on", PowerAction::On),
        ("override-after-boot", PowerAction::On),
        ("power-cycle", PowerAction::Cycle),
    ];
    for (name, action) in steps {
        if name == "override-after-boot" {
            // The server booted once since the override was set: a one-time
            // override is gone now.
            let read = reader.read().await;
            after_boot = read.as_ref().ok().cloned();
            match read {
                Ok(v) if v.network && v.active => {
                    let covered =
                        covering(table, &quirks, |s| s.once_kept_as_continuous == Some(true));
                    report.findings.push(Finding {
                        quirk: "onceKeptAsContinuous".into(),
                        evidence: format!("the one-time PXE override still reads {} after the server booted: it would PXE-boot again", v.text),
                        covered_by: covered,
                    });
                    set.once_kept_as_continuous = Some(true);
                    report.push(check(
                        name,
                        Status::Quirk,
                        None,
                        format!("still {} after a boot: not one-time", v.text),
                    ));
                }
                Ok(v) => report.push(check(
                    name,
                    Status::Pass,
                    None,
                    format!("cleared by the boot ({})", v.text),
                )),
                Err(e) => report.push(check(name, Status::Fail, None, e.to_string())),
            }
            continue;
        }
        progress(&format!(
            "{name}: {action:?}, then watching the state for {:?}",
            opts.settle_window
        ));
        let start = Instant::now();
        let r = bmc.power(action).await;
        let took = start.elapsed();
        if let Err(e) = r {
            report.push(check(name, Status::Fail, secs(took), e.to_string()));
            // The PXE check still needs its second boot: off, then on.
            if let (PowerAction::Cycle, Some(p)) = (action, pxe.as_ref()) {
                progress("power-cycle failed: second boot by ForceOff, then On");
                let _ = bmc.power(PowerAction::ForceOff).await;
                let start = Instant::now();
                if let Err(e) = bmc.power(PowerAction::On).await {
                    report.push(check(
                        super::pxe_check::SECOND,
                        Status::Fail,
                        None,
                        format!("no second boot: power on failed: {e}"),
                    ));
                    continue;
                }
                p.second_boot(
                    start,
                    after_boot.as_ref(),
                    opts,
                    &quirks,
                    &mut set,
                    report,
                    progress,
                )
                .await;
            }
            continue;
        }
        let wanted = action.target();
        let w = watch(bmc, wanted, opts.settle_window, opts.timing.poll_interval).await;
        match (w.left_at, w.back_at, w.last == wanted) {
            (None, _, _) => report.push(check(name, Status::Pass, secs(took), format!("reported {wanted:?} and stayed so"))),
            (Some(left), Some(back), true) => {
                let total = took.as_secs_f64() + back;
                let need = (total.ceil() as u32).saturating_add(2);
                settle_needed = Some(settle_needed.unwrap_or(0).max(need));
                report.findings.push(Finding {
                    quirk: "powerSettleSeconds".into(),
                    evidence: format!(
                        "{action:?} reported {wanted:?} after {:.1} s, read other states {left:.1} s later, settled {back:.1} s after that report",
                        took.as_secs_f64()
                    ),
                    covered_by: None,
                });
                report.push(check(name, Status::Quirk, secs(took), format!("reported {wanted:?} early; settled {back:.1} s later")));
            }
            (Some(left), _, _) => report.push(check(
                name,
                Status::Fail,
                secs(took),
                format!("reported {wanted:?}, then {:?} from {left:.1} s on until the end of the window", w.last),
            )),
        }
        match (name, pxe.as_mut()) {
            ("power-on", Some(p)) => p.first_boot(start, report, progress).await,
            ("power-cycle", Some(p)) => {
                p.second_boot(
                    start,
                    after_boot.as_ref(),
                    opts,
                    &quirks,
                    &mut set,
                    report,
                    progress,
                )
                .await
            }
            _ => {}
        }
    }
    set.power_settle_seconds = settle_needed;
    // Leave the server as it was found (off stays off).
    if initial == PowerState::Off {
        let _ = bmc.power(PowerAction::ForceOff).await;
    }
    set
}
