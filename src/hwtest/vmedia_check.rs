//! The `virtual-media` check of `hw-test`: insert the image URL the
//! operator gave (`--virtual-media-url`), read it back, set a one-time boot
//! from Cd and read that back, eject and read back, then put the boot
//! override back as it was found. Nothing is powered or booted: the check
//! proves the BMC takes the media and the override, the two things a
//! virtual media install needs. Only with `allow_power_actions` (it changes
//! the next boot, as the boot-override check does).
//!
//! Through the [`Bmc`] seam (the driver reads back each step), so it runs
//! on either protocol: over IPMI it reports the BMC has no virtual media.
//! The URL may carry a token: it is shown only as
//! [`image_url::redact`] shows it.

use std::time::Instant;

use super::report::{Report, Status};
use super::{Options, OverrideReader, OverrideView, Progress, check, secs};
use crate::bmc::quirks::QuirkSet;
use crate::bmc::{Bmc, BmcError, BootDevice, FirmwareMode, image_url};

pub const NAME: &str = "virtual-media";

/// What puts the boot override back as it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restore {
    /// It named a device: set that one again (one-time: the seam sets no
    /// other kind).
    Set(BootDevice, FirmwareMode),
    /// There was none: clear it.
    Disable,
    /// It cannot be set again (a target metalherd does not set, or it could
    /// not be read): left as the check set it, and said so.
    Leave(String),
}

/// How to put back the override read before the check.
pub fn restore_plan(before: &Result<OverrideView, String>) -> Restore {
    match before {
        Err(e) => Restore::Leave(format!("the override could not be read before: {e}")),
        Ok(v) if !v.active => Restore::Disable,
        Ok(v) => match v.device {
            Some(d) => Restore::Set(d, v.mode.unwrap_or(FirmwareMode::Uefi)),
            None => Restore::Leave(format!("it was {}, which metalherd does not set", v.text)),
        },
    }
}

/// A boot override kept as Continuous where the boot-override check of
/// this run already named that quirk: not a second failure.
fn known_quirk(e: &BmcError, found: &QuirkSet) -> bool {
    matches!(
        e,
        BmcError::BootOverrideIgnored {
            kept_continuous: true,
            ..
        }
    ) && found.once_kept_as_continuous == Some(true)
}

pub async fn run(
    opts: &Options,
    bmc: &dyn Bmc,
    reader: &dyn OverrideReader,
    found: &QuirkSet,
    report: &mut Report,
    progress: Progress<'_>,
) {
    let Some(url) = opts.virtual_media_url.as_deref() else {
        let why = "no --virtual-media-url: no image to insert";
        report.push(check(NAME, Status::Skipped, None, why));
        return;
    };
    if !opts.allow_power_actions {
        let why = "inserts media and sets a one-time Cd boot: needs --allow-power-actions";
        report.push(check(NAME, Status::Skipped, None, why));
        return;
    }
    let shown = image_url::redact(url);
    let before = reader.read().await.map_err(|e| e.to_string());
    progress(&format!(
        "{NAME}: insert {shown}, read back; one-time boot Cd, read back; eject, read back; put the override back"
    ));
    let start = Instant::now();
    match bmc.insert_media(url).await {
        Ok(()) => {}
        Err(e @ BmcError::Unsupported { .. }) => {
            report.push(check(NAME, Status::NotSupported, None, e.to_string()));
            return;
        }
        Err(e) => {
            // Leave the drive empty whatever the BMC recorded.
            let _ = bmc.eject_media().await;
            let detail = format!("insert {shown}: {e}");
            report.push(check(NAME, Status::Fail, secs(start.elapsed()), detail));
            return;
        }
    }
    let inserted = start.elapsed();
    let mut failed = false;
    let mut steps = vec![format!(
        "inserted {shown} in {:.1} s and read it back",
        inserted.as_secs_f64()
    )];
    match bmc.set_boot_once(BootDevice::Cd, FirmwareMode::Uefi).await {
        Ok(()) => {
            let seen = reader
                .read()
                .await
                .map_or_else(|e| format!("unreadable ({e})"), |v| v.text);
            steps.push(format!("one-time boot Cd read back {seen}"));
        }
        Err(e) if known_quirk(&e, found) => steps.push(format!(
            "one-time boot Cd kept as Continuous (the quirk found above): {e}"
        )),
        Err(e) => {
            failed = true;
            steps.push(format!("one-time boot Cd: {e}"));
        }
    }
    match bmc.eject_media().await {
        Ok(()) => steps.push("ejected and read back empty".into()),
        Err(e) => {
            failed = true;
            steps.push(format!("eject: {e}"));
        }
    }
    let put_back = match restore_plan(&before) {
        Restore::Set(d, m) => Some(bmc.set_boot_once(d, m).await),
        Restore::Disable => Some(reader.disable().await),
        Restore::Leave(why) => {
            steps.push(format!("boot override left as Cd: {why}"));
            None
        }
    };
    let was = before.as_ref().map_or("?", |v| v.text.as_str());
    match put_back {
        None => {}
        Some(Ok(())) => steps.push(format!("boot override put back ({was})")),
        Some(Err(e)) if known_quirk(&e, found) => steps.push(format!(
            "boot override put back ({was}, kept as Continuous: the quirk found above)"
        )),
        Some(Err(e)) => {
            failed = true;
            steps.push(format!("putting the boot override back ({was}): {e}"));
        }
    }
    let status = if failed { Status::Fail } else { Status::Pass };
    report.push(check(NAME, status, secs(inserted), steps.join("; ")));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::bmc::quirks::{QuirkTable, Quirks};
    use crate::bmc::redfish::TlsMode;
    use crate::bmc::{Credentials, FakeBmc, Timing};

    const URL: &str = "http://10.89.0.1:8080/vmedia/s3cr3t/boot.iso";

    fn view(target: &str, device: Option<BootDevice>, active: bool) -> OverrideView {
        OverrideView {
            network: device == Some(BootDevice::Network),
            persistent: false,
            active,
            device,
            mode: Some(FirmwareMode::Uefi),
            text: format!("{target}/{}/UEFI", if active { "Once" } else { "Disabled" }),
        }
    }

    /// Reads back what the test says, in turn; counts `disable` calls.
    struct Reader {
        reads: std::sync::Mutex<Vec<OverrideView>>,
        disabled: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl OverrideReader for Reader {
        async fn read(&self) -> Result<OverrideView, BmcError> {
            let mut r = self.reads.lock().unwrap();
            Ok(if r.len() > 1 {
                r.remove(0)
            } else {
                r[0].clone()
            })
        }
        async fn quirks(&self) -> Result<Quirks, BmcError> {
            Ok(Quirks::standard())
        }
        async fn disable(&self) -> Result<(), BmcError> {
            self.disabled
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    fn reader(reads: Vec<OverrideView>) -> Reader {
        Reader {
            reads: std::sync::Mutex::new(reads),
            disabled: Default::default(),
        }
    }

    fn opts(url: Option<&str>, power: bool) -> Options {
        Options {
            address: "redfish+https://10.0.0.5".into(),
            credentials: Credentials::new("u", "p"),
            tls: TlsMode::Insecure,
            ca_pem: None,
            quirks: Arc::new(QuirkTable::builtin()),
            timing: Timing::default(),
            allow_power_actions: power,
            bios_attribute: None,
            session_limit_probe: None,
            settle_window: std::time::Duration::ZERO,
            pxe: None,
            virtual_media_url: url.map(str::to_string),
        }
    }

    async fn run_check(
        o: &Options,
        bmc: &FakeBmc,
        r: &Reader,
        found: &QuirkSet,
    ) -> super::super::Check {
        let mut report = Report::default();
        run(o, bmc, r, found, &mut report, &|_| {}).await;
        assert_eq!(report.checks.len(), 1);
        report.checks.remove(0)
    }

    #[tokio::test]
    async fn insert_boot_cd_eject_then_the_previous_override_is_set_again() {
        let bmc = FakeBmc::new();
        bmc.expect_insert_media(Ok(()))
            .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Ok(()))
            .expect_eject_media(Ok(()))
            .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Ok(()));
        let before = view("Pxe", Some(BootDevice::Network), true);
        let r = reader(vec![before, view("Cd", Some(BootDevice::Cd), true)]);
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &QuirkSet::default()).await;
        bmc.verify().unwrap();
        assert_eq!(bmc.inserted_media().as_deref(), Some(URL));
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(
            c.detail.contains("one-time boot Cd read back Cd/Once/UEFI"),
            "{}",
            c.detail
        );
        assert!(
            c.detail.contains("put back (Pxe/Once/UEFI)"),
            "{}",
            c.detail
        );
        assert!(
            c.detail.contains("http://10.89.0.1:8080/.../boot.iso"),
            "{}",
            c.detail
        );
        assert!(
            !c.detail.contains("s3cr3t"),
            "the token never shows: {}",
            c.detail
        );
    }

    #[tokio::test]
    async fn no_override_before_is_cleared_after_and_a_failed_eject_fails_the_check() {
        let bmc = FakeBmc::new();
        let not_ejected = BmcError::MediaNotEjected {
            address: "a".into(),
            got: "Inserted=true, Image http://10.89.0.1:8080/.../boot.iso".into(),
        };
        bmc.expect_insert_media(Ok(()))
            .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Ok(()))
            .expect_eject_media(Err(not_ejected));
        let r = reader(vec![view("None", None, false)]);
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &QuirkSet::default()).await;
        bmc.verify().unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail
                .contains("eject: BMC a accepted the virtual media eject"),
            "{}",
            c.detail
        );
        assert_eq!(r.disabled.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_bmc_without_virtual_media_is_not_supported_and_nothing_else_is_sent() {
        let bmc = FakeBmc::new();
        let none = BmcError::Unsupported {
            address: "ipmi://10.0.0.5:623".into(),
            what: "virtual media over IPMI (use the BMC's Redfish address)".into(),
        };
        bmc.expect_insert_media(Err(none));
        let r = reader(vec![view("Pxe", Some(BootDevice::Network), true)]);
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &QuirkSet::default()).await;
        bmc.verify().unwrap();
        assert_eq!(c.status, Status::NotSupported);
        assert!(
            c.detail.contains("does not support virtual media"),
            "{}",
            c.detail
        );
    }

    #[tokio::test]
    async fn a_refused_insert_fails_and_the_drive_is_emptied() {
        let bmc = FakeBmc::new();
        let refused = BmcError::Http {
            address: "a".into(),
            status: 400,
            detail: "Cannot download virtual media: got error 404 from the server".into(),
        };
        bmc.expect_insert_media(Err(refused))
            .expect_eject_media(Ok(()));
        let r = reader(vec![view("Pxe", Some(BootDevice::Network), true)]);
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &QuirkSet::default()).await;
        bmc.verify().unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.detail
                .starts_with("insert http://10.89.0.1:8080/.../boot.iso: "),
            "{}",
            c.detail
        );
    }

    #[tokio::test]
    async fn skipped_without_a_url_or_without_power_actions_and_nothing_is_sent() {
        let bmc = FakeBmc::new();
        let r = reader(vec![view("Pxe", Some(BootDevice::Network), true)]);
        let c = run_check(&opts(None, true), &bmc, &r, &QuirkSet::default()).await;
        assert_eq!(c.status, Status::Skipped);
        assert!(
            c.detail.starts_with("no --virtual-media-url"),
            "{}",
            c.detail
        );
        let c = run_check(&opts(Some(URL), false), &bmc, &r, &QuirkSet::default()).await;
        assert_eq!(c.status, Status::Skipped);
        assert!(
            c.detail.contains("needs --allow-power-actions"),
            "{}",
            c.detail
        );
        assert!(bmc.calls().is_empty());
    }

    #[tokio::test]
    async fn a_kept_continuous_override_already_found_is_no_second_failure() {
        let kept = || BmcError::BootOverrideIgnored {
            address: "a".into(),
            wanted: "Cd/Once/UEFI".into(),
            got: "Cd/Continuous/UEFI".into(),
            kept_continuous: true,
        };
        let bmc = FakeBmc::new();
        bmc.expect_insert_media(Ok(()))
            .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Err(kept()))
            .expect_eject_media(Ok(()))
            .expect_boot_once(BootDevice::Network, FirmwareMode::Uefi, Err(kept()));
        let r = reader(vec![view("Pxe", Some(BootDevice::Network), true)]);
        let found = QuirkSet {
            once_kept_as_continuous: Some(true),
            ..QuirkSet::default()
        };
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &found).await;
        bmc.verify().unwrap();
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
    }

    #[tokio::test]
    async fn an_override_metalherd_cannot_set_again_is_left_and_said_so() {
        let bmc = FakeBmc::new();
        bmc.expect_insert_media(Ok(()))
            .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Ok(()))
            .expect_eject_media(Ok(()));
        let r = reader(vec![view("BiosSetup", None, true)]);
        let c = run_check(&opts(Some(URL), true), &bmc, &r, &QuirkSet::default()).await;
        bmc.verify().unwrap();
        assert_eq!(c.status, Status::Pass, "{}", c.detail);
        assert!(
            c.detail.ends_with(
                "boot override left as Cd: it was BiosSetup/Once/UEFI, which metalherd does not set"
            ),
            "{}",
            c.detail
        );
    }

    #[test]
    fn the_override_found_decides_how_it_is_put_back() {
        let pxe = view("Pxe", Some(BootDevice::Network), true);
        assert_eq!(
            restore_plan(&Ok(pxe)),
            Restore::Set(BootDevice::Network, FirmwareMode::Uefi)
        );
        // No mode read back: UEFI, as the boot-override check sets it.
        let mut no_mode = view("Hdd", Some(BootDevice::Disk), true);
        no_mode.mode = None;
        assert_eq!(
            restore_plan(&Ok(no_mode)),
            Restore::Set(BootDevice::Disk, FirmwareMode::Uefi)
        );
        assert_eq!(
            restore_plan(&Ok(view("None", None, false))),
            Restore::Disable
        );
        let bios_setup = view("BiosSetup", None, true);
        assert!(
            matches!(restore_plan(&Ok(bios_setup)), Restore::Leave(w) if w.contains("BiosSetup/Once/UEFI"))
        );
        assert!(matches!(
            restore_plan(&Err("timeout".into())),
            Restore::Leave(_)
        ));
    }
}
