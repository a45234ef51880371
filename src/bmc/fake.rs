//! Test doubles for the BMC seam: [`FakeBmc`] is a queue of expected calls,
//! each with the answer to give; a call that is not the next expected one is
//! an `UnexpectedCall` error (and is recorded), so a controller test fails
//! on a missing, extra or reordered BMC action. [`FakeConnector`] hands out
//! fakes by Machine name.
//!
//! No I/O, no clocks.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::connector::BmcConnector;
use super::{Bmc, BmcError, BootDevice, FirmwareMode, PowerAction, PowerState};
use crate::api::{Inventory, Machine};

/// One call on the [`Bmc`] trait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    PowerState,
    Power(PowerAction),
    SetBootOnce(BootDevice, FirmwareMode),
    Inventory,
    /// `insert_media`, whatever the URL ([`FakeBmc::inserted_media`] has it).
    InsertMedia,
    EjectMedia,
    Close,
}

#[derive(Debug)]
enum Answer {
    Power(Result<PowerState, BmcError>),
    Unit(Result<(), BmcError>),
    Inventory(Box<Result<Inventory, BmcError>>),
}

#[derive(Debug, Default)]
struct State {
    expected: VecDeque<(Call, Answer)>,
    seen: Vec<Call>,
    unexpected: Vec<String>,
    /// Every image URL `insert_media` was given, in order.
    media: Vec<String>,
}

/// A BMC that answers exactly the calls it was told to expect, in order.
#[derive(Debug, Default)]
pub struct FakeBmc {
    state: Mutex<State>,
}

impl FakeBmc {
    pub fn new() -> Arc<FakeBmc> {
        Arc::new(FakeBmc::default())
    }

    fn push(&self, call: Call, answer: Answer) -> &Self {
        if let Ok(mut s) = self.state.lock() {
            s.expected.push_back((call, answer));
        }
        self
    }

    pub fn expect_power_state(&self, answer: Result<PowerState, BmcError>) -> &Self {
        self.push(Call::PowerState, Answer::Power(answer))
    }
    pub fn expect_power(&self, action: PowerAction, answer: Result<(), BmcError>) -> &Self {
        self.push(Call::Power(action), Answer::Unit(answer))
    }
    pub fn expect_boot_once(
        &self,
        device: BootDevice,
        mode: FirmwareMode,
        answer: Result<(), BmcError>,
    ) -> &Self {
        self.push(Call::SetBootOnce(device, mode), Answer::Unit(answer))
    }
    pub fn expect_inventory(&self, answer: Result<Inventory, BmcError>) -> &Self {
        self.push(Call::Inventory, Answer::Inventory(Box::new(answer)))
    }
    /// An insert of any URL: the caller makes it up with a fresh token, so
    /// a test reads it afterwards from [`FakeBmc::inserted_media`].
    pub fn expect_insert_media(&self, answer: Result<(), BmcError>) -> &Self {
        self.push(Call::InsertMedia, Answer::Unit(answer))
    }
    pub fn expect_eject_media(&self, answer: Result<(), BmcError>) -> &Self {
        self.push(Call::EjectMedia, Answer::Unit(answer))
    }
    pub fn expect_close(&self) -> &Self {
        self.push(Call::Close, Answer::Unit(Ok(())))
    }

    /// Every call made, expected or not, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state
            .lock()
            .map(|s| s.seen.clone())
            .unwrap_or_default()
    }

    /// The image URL of the last `insert_media` call, expected or not.
    pub fn inserted_media(&self) -> Option<String> {
        self.state.lock().ok().and_then(|s| s.media.last().cloned())
    }

    /// Expected calls that have not happened yet.
    pub fn remaining(&self) -> Vec<Call> {
        self.state
            .lock()
            .map(|s| s.expected.iter().map(|(c, _)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// Ok when every expected call happened and nothing unexpected did.
    pub fn verify(&self) -> Result<(), BmcError> {
        let s = self.state.lock().map_err(|_| BmcError::UnexpectedCall {
            expected: "a usable fake".into(),
            got: "a poisoned lock".into(),
        })?;
        if let Some(u) = s.unexpected.first() {
            return Err(BmcError::UnexpectedCall {
                expected: "only expected calls".into(),
                got: u.clone(),
            });
        }
        if !s.expected.is_empty() {
            let left: Vec<_> = s.expected.iter().map(|(c, _)| format!("{c:?}")).collect();
            return Err(BmcError::UnexpectedCall {
                expected: left.join(", "),
                got: "no further calls".into(),
            });
        }
        Ok(())
    }

    fn take(&self, call: Call) -> Result<Answer, BmcError> {
        let mut s = self.state.lock().map_err(|_| BmcError::UnexpectedCall {
            expected: "a usable fake".into(),
            got: "a poisoned lock".into(),
        })?;
        s.seen.push(call.clone());
        match s.expected.front() {
            Some((c, _)) if *c == call => {
                let (_, a) = s
                    .expected
                    .pop_front()
                    .ok_or_else(|| BmcError::UnexpectedCall {
                        expected: "nothing".into(),
                        got: format!("{call:?}"),
                    })?;
                Ok(a)
            }
            other => {
                let expected = other
                    .map(|(c, _)| format!("{c:?}"))
                    .unwrap_or_else(|| "no call".into());
                let got = format!("{call:?}");
                s.unexpected.push(got.clone());
                Err(BmcError::UnexpectedCall { expected, got })
            }
        }
    }

    fn mismatch(call: &str) -> BmcError {
        BmcError::UnexpectedCall {
            expected: "an answer of the right kind".into(),
            got: call.into(),
        }
    }
}

#[async_trait]
impl Bmc for FakeBmc {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        match self.take(Call::PowerState)? {
            Answer::Power(r) => r,
            _ => Err(Self::mismatch("PowerState")),
        }
    }
    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        match self.take(Call::Power(action))? {
            Answer::Unit(r) => r,
            _ => Err(Self::mismatch("Power")),
        }
    }
    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError> {
        match self.take(Call::SetBootOnce(device, mode))? {
            Answer::Unit(r) => r,
            _ => Err(Self::mismatch("SetBootOnce")),
        }
    }
    async fn inventory(&self) -> Result<Inventory, BmcError> {
        match self.take(Call::Inventory)? {
            Answer::Inventory(r) => *r,
            _ => Err(Self::mismatch("Inventory")),
        }
    }
    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        if let Ok(mut s) = self.state.lock() {
            s.media.push(image_url.to_string());
        }
        match self.take(Call::InsertMedia)? {
            Answer::Unit(r) => r,
            _ => Err(Self::mismatch("InsertMedia")),
        }
    }
    async fn eject_media(&self) -> Result<(), BmcError> {
        match self.take(Call::EjectMedia)? {
            Answer::Unit(r) => r,
            _ => Err(Self::mismatch("EjectMedia")),
        }
    }
    async fn close(&self) -> Result<(), BmcError> {
        match self.take(Call::Close)? {
            Answer::Unit(r) => r,
            _ => Err(Self::mismatch("Close")),
        }
    }
}

/// A shared handle, so a test keeps the fake it gave away.
#[derive(Debug, Clone)]
struct Shared(Arc<FakeBmc>);

#[async_trait]
impl Bmc for Shared {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        self.0.power_state().await
    }
    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        self.0.power(action).await
    }
    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError> {
        self.0.set_boot_once(device, mode).await
    }
    async fn inventory(&self) -> Result<Inventory, BmcError> {
        self.0.inventory().await
    }
    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        self.0.insert_media(image_url).await
    }
    async fn eject_media(&self) -> Result<(), BmcError> {
        self.0.eject_media().await
    }
    async fn close(&self) -> Result<(), BmcError> {
        self.0.close().await
    }
}

/// Hands out [`FakeBmc`]s by Machine name (`namespace/name` or `name`); a
/// Machine it does not know is an `UnexpectedCall`.
#[derive(Debug, Default)]
pub struct FakeConnector {
    bmcs: Mutex<HashMap<String, Arc<FakeBmc>>>,
    connects: Mutex<Vec<String>>,
}

impl FakeConnector {
    pub fn new() -> FakeConnector {
        FakeConnector::default()
    }

    /// Serve `bmc` for the Machine called `name`.
    pub fn with(self, name: &str, bmc: Arc<FakeBmc>) -> FakeConnector {
        if let Ok(mut m) = self.bmcs.lock() {
            m.insert(name.to_string(), bmc);
        }
        self
    }

    /// Names of the Machines connected to, in order.
    pub fn connects(&self) -> Vec<String> {
        self.connects.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl BmcConnector for FakeConnector {
    async fn connect(&self, machine: &Machine) -> Result<Box<dyn Bmc>, BmcError> {
        let name = machine.metadata.name.clone().unwrap_or_default();
        let ns = machine.metadata.namespace.clone().unwrap_or_default();
        if let Ok(mut c) = self.connects.lock() {
            c.push(name.clone());
        }
        let found = self.bmcs.lock().ok().and_then(|m| {
            m.get(&format!("{ns}/{name}"))
                .or_else(|| m.get(&name))
                .cloned()
        });
        match found {
            Some(b) => Ok(Box::new(Shared(b))),
            None => Err(BmcError::UnexpectedCall {
                expected: "a Machine the fake connector knows".into(),
                got: format!("connect({ns}/{name})"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_in_order_and_rejects_the_unexpected() {
        let f = FakeBmc::new();
        f.expect_power_state(Ok(PowerState::Off))
            .expect_power(PowerAction::On, Ok(()));
        assert_eq!(f.power_state().await.unwrap(), PowerState::Off);
        let e = f
            .set_boot_once(BootDevice::Network, FirmwareMode::Uefi)
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "UnexpectedBmcCall");
        f.power(PowerAction::On).await.unwrap();
        assert!(f.verify().is_err(), "the unexpected call is remembered");
    }

    #[tokio::test]
    async fn missing_calls_fail_verify() {
        let f = FakeBmc::new();
        f.expect_inventory(Ok(Inventory::default())).expect_close();
        f.inventory().await.unwrap();
        assert_eq!(f.remaining(), vec![Call::Close]);
        assert!(f.verify().is_err());
        f.close().await.unwrap();
        f.verify().unwrap();
    }

    #[tokio::test]
    async fn virtual_media_calls_are_expected_in_order_and_the_url_is_kept() {
        let f = FakeBmc::new();
        f.expect_insert_media(Ok(()))
            .expect_boot_once(BootDevice::Cd, FirmwareMode::Uefi, Ok(()))
            .expect_eject_media(Ok(()));
        let c = FakeConnector::new().with("m1", f.clone());
        let mut m = Machine::default();
        m.metadata.name = Some("m1".into());
        // Through the connector's handle, as the controller holds it.
        let b = c.connect(&m).await.unwrap();
        let e = b.eject_media().await.unwrap_err();
        assert_eq!(e.reason(), "UnexpectedBmcCall", "eject before the insert");
        b.insert_media("http://10.0.0.1:8080/vmedia/t/boot.iso")
            .await
            .unwrap();
        assert_eq!(
            f.inserted_media().as_deref(),
            Some("http://10.0.0.1:8080/vmedia/t/boot.iso")
        );
        b.set_boot_once(BootDevice::Cd, FirmwareMode::Uefi)
            .await
            .unwrap();
        b.eject_media().await.unwrap();
        assert!(f.remaining().is_empty());
        assert!(f.verify().is_err(), "the early eject is remembered");
    }

    #[tokio::test]
    async fn connector_serves_known_machines_only() {
        let f = FakeBmc::new();
        f.expect_power_state(Ok(PowerState::On));
        let c = FakeConnector::new().with("m1", f.clone());
        let mut m = Machine::default();
        m.metadata.name = Some("m1".into());
        let b = c.connect(&m).await.unwrap();
        assert_eq!(b.power_state().await.unwrap(), PowerState::On);
        m.metadata.name = Some("m2".into());
        assert!(c.connect(&m).await.is_err());
        assert_eq!(c.connects(), vec!["m1", "m2"]);
        f.verify().unwrap();
    }
}
