//! The fence between leadership and the BMCs: a [`BmcConnector`] wrapper
//! whose BMCs check "do we still lead?" right before every action that
//! changes a server (power, boot override, BIOS, firmware, volumes, virtual
//! media). Once the elector clears the flag, such a call fails with
//! [`BmcError::NotLeader`] without reaching the BMC, whatever the
//! controller decided earlier. Reads (power state, inventory) are harmless
//! and pass. Every method of the [`Bmc`] trait is forwarded here: one the
//! wrapper forgets falls to the trait's default (`Unsupported`), silently.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::watch;

use crate::api::Machine;
use crate::bmc::PowerState;
use crate::bmc::{Bmc, BmcConnector, BmcError, BootDevice, FirmwareMode, Inventory, PowerAction};

/// Wraps a connector; `leading` is the elector's fence.
pub struct FencedConnector {
    inner: Arc<dyn BmcConnector>,
    leading: watch::Receiver<bool>,
}

impl FencedConnector {
    pub fn new(inner: Arc<dyn BmcConnector>, leading: watch::Receiver<bool>) -> FencedConnector {
        FencedConnector { inner, leading }
    }
}

#[async_trait]
impl BmcConnector for FencedConnector {
    async fn connect(&self, machine: &Machine) -> Result<Box<dyn Bmc>, BmcError> {
        let inner = self.inner.connect(machine).await?;
        Ok(Box::new(FencedBmc {
            inner,
            leading: self.leading.clone(),
            address: machine.spec.bmc.address.clone(),
        }))
    }
}

struct FencedBmc {
    inner: Box<dyn Bmc>,
    leading: watch::Receiver<bool>,
    address: String,
}

impl FencedBmc {
    fn check(&self) -> Result<(), BmcError> {
        if *self.leading.borrow() {
            Ok(())
        } else {
            Err(BmcError::NotLeader {
                address: self.address.clone(),
            })
        }
    }
}

#[async_trait]
impl Bmc for FencedBmc {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        self.inner.power_state().await
    }
    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        self.check()?;
        self.inner.power(action).await
    }
    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError> {
        self.check()?;
        self.inner.set_boot_once(device, mode).await
    }
    async fn inventory(&self) -> Result<Inventory, BmcError> {
        self.inner.inventory().await
    }
    async fn bios(&self) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        self.inner.bios().await
    }
    async fn set_bios(
        &self,
        attributes: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BmcError> {
        self.check()?;
        self.inner.set_bios(attributes).await
    }
    async fn firmware_versions(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        self.inner.firmware_versions().await
    }
    async fn update_firmware(&self, component: &str, image_url: &str) -> Result<(), BmcError> {
        self.check()?;
        self.inner.update_firmware(component, image_url).await
    }
    async fn volumes(&self) -> Result<Vec<crate::api::VolumeInfo>, BmcError> {
        self.inner.volumes().await
    }
    async fn create_volume(&self, volume: &crate::api::VolumeSpec) -> Result<(), BmcError> {
        self.check()?;
        self.inner.create_volume(volume).await
    }
    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        self.check()?;
        self.inner.insert_media(image_url).await
    }
    async fn eject_media(&self) -> Result<(), BmcError> {
        self.check()?;
        self.inner.eject_media().await
    }
    async fn applied_quirks(&self) -> Result<Vec<String>, BmcError> {
        self.inner.applied_quirks().await
    }
    async fn close(&self) -> Result<(), BmcError> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bmc::{FakeBmc, FakeConnector};

    fn machine() -> Machine {
        let mut m = Machine::default();
        m.metadata.name = Some("m1".into());
        m
    }

    /// The controller plans a power-on while leading; the Lease is lost
    /// before the action: the BMC never sees it.
    #[tokio::test]
    async fn a_lease_lost_between_plan_and_power_action_stops_the_action() {
        let bmc = FakeBmc::new();
        bmc.expect_power_state(Ok(PowerState::Off));
        let (tx, rx) = watch::channel(true);
        let c = FencedConnector::new(Arc::new(FakeConnector::new().with("m1", bmc.clone())), rx);
        let conn = c.connect(&machine()).await.unwrap();
        // Plan: the machine is off, so power it on.
        assert_eq!(conn.power_state().await.unwrap(), PowerState::Off);
        // The elector loses the Lease.
        tx.send_replace(false);
        let e = conn.power(PowerAction::On).await.unwrap_err();
        assert!(matches!(e, BmcError::NotLeader { .. }), "{e}");
        let e = conn
            .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
            .await
            .unwrap_err();
        assert!(matches!(e, BmcError::NotLeader { .. }), "{e}");
        // Only the read reached the BMC, and nothing it expected is left.
        bmc.verify().unwrap();
        assert_eq!(bmc.calls().len(), 1);
    }

    /// BIOS, firmware and volume writes are fenced like power actions; reads and
    /// a leader's writes reach the driver (this fake has no BIOS or
    /// firmware: it answers Unsupported).
    #[tokio::test]
    async fn bios_firmware_and_volume_writes_are_fenced_and_otherwise_reach_the_driver() {
        let (tx, rx) = watch::channel(true);
        let c = FencedConnector::new(
            Arc::new(FakeConnector::new().with("m1", FakeBmc::new())),
            rx,
        );
        let conn = c.connect(&machine()).await.unwrap();
        let reached = |e: BmcError| matches!(e, BmcError::Unsupported { .. });
        assert!(reached(conn.bios().await.unwrap_err()));
        assert!(reached(
            conn.set_bios(&Default::default()).await.unwrap_err()
        ));
        assert!(reached(conn.firmware_versions().await.unwrap_err()));
        assert!(reached(
            conn.update_firmware("BIOS", "http://x/f")
                .await
                .unwrap_err()
        ));
        tx.send_replace(false);
        let fenced = |e: BmcError| matches!(e, BmcError::NotLeader { .. });
        assert!(fenced(
            conn.set_bios(&Default::default()).await.unwrap_err()
        ));
        assert!(fenced(
            conn.update_firmware("BIOS", "http://x/f")
                .await
                .unwrap_err()
        ));
        assert!(reached(conn.firmware_versions().await.unwrap_err()));
    }

    /// Virtual media changes what a server boots: fenced like a boot
    /// override, and forwarded (URL and all) while leading.
    #[tokio::test]
    async fn virtual_media_is_fenced_and_otherwise_reaches_the_driver() {
        let bmc = FakeBmc::new();
        bmc.expect_insert_media(Ok(())).expect_eject_media(Ok(()));
        let (tx, rx) = watch::channel(true);
        let c = FencedConnector::new(Arc::new(FakeConnector::new().with("m1", bmc.clone())), rx);
        let conn = c.connect(&machine()).await.unwrap();
        conn.insert_media("http://10.0.0.1/vmedia/t/boot.iso")
            .await
            .unwrap();
        conn.eject_media().await.unwrap();
        bmc.verify().unwrap();
        assert_eq!(
            bmc.inserted_media().as_deref(),
            Some("http://10.0.0.1/vmedia/t/boot.iso")
        );
        tx.send_replace(false);
        let fenced = |e: BmcError| matches!(e, BmcError::NotLeader { .. });
        assert!(fenced(
            conn.insert_media("http://x/b.iso").await.unwrap_err()
        ));
        assert!(fenced(conn.eject_media().await.unwrap_err()));
        assert_eq!(bmc.calls().len(), 2, "nothing reached the BMC once fenced");
    }

    #[tokio::test]
    async fn a_leader_acts() {
        let bmc = FakeBmc::new();
        bmc.expect_power(PowerAction::On, Ok(()));
        let (_tx, rx) = watch::channel(true);
        let c = FencedConnector::new(Arc::new(FakeConnector::new().with("m1", bmc.clone())), rx);
        let conn = c.connect(&machine()).await.unwrap();
        conn.power(PowerAction::On).await.unwrap();
        bmc.verify().unwrap();
    }
}
