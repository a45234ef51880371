//! BMC drivers behind one [`Bmc`] trait: Redfish and IPMI, with verified
//! actions (read back boot overrides, poll power state until reached).
//! Credentials never appear in errors, logs or Debug output.
//! Never imports `controller`.

pub mod ipmi;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

pub mod connector;
pub mod fake;
pub mod image_url;
pub mod metrics;
pub mod quirks;
pub mod redfish;

pub use connector::{BmcConnector, StoreConnector};
pub use fake::{FakeBmc, FakeConnector};

pub use crate::api::{Inventory, PowerState};

/// A power action. Drivers pick the vendor's word for it (ResetType,
/// chassis control code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    On,
    GracefulOff,
    ForceOff,
    /// Off then on (from any state: a server that is off is just powered on).
    Cycle,
    /// Warm reset.
    Reset,
}

impl PowerAction {
    /// The state the action must end in, when it has one.
    pub fn target(self) -> PowerState {
        match self {
            PowerAction::On | PowerAction::Cycle | PowerAction::Reset => PowerState::On,
            PowerAction::GracefulOff | PowerAction::ForceOff => PowerState::Off,
        }
    }
}

/// One-time boot device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootDevice {
    Network,
    Disk,
    /// The CD/DVD drive, virtual media included (Redfish `Cd`, IPMI boot
    /// device selector 0101b, `chassis bootdev cdrom`).
    Cd,
}

/// Firmware mode of a boot override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirmwareMode {
    Uefi,
    Legacy,
}

/// BMC username and password. Debug and Display never show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    password: String,
}

impl Credentials {
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }
    /// The password, for the one place that sends it.
    pub fn password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Deadlines and poll intervals for verified actions.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// How long a power action may take to show in the power state.
    pub power_deadline: Duration,
    pub poll_interval: Duration,
    /// Per-request timeout.
    pub request_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            power_deadline: Duration::from_secs(120),
            poll_interval: Duration::from_secs(1),
            request_timeout: Duration::from_secs(20),
        }
    }
}

/// What a [`BmcError::BootOverrideIgnored`] with `kept_continuous` adds to
/// its message: what the read-back means and what the operator can do.
pub const KEPT_CONTINUOUS_ADVICE: &str = ": it keeps the one-time override as persistent \
(Continuous) and no quirk entry for this BMC says so. Qualify the model with `metalherd hw-test \
--allow-power-actions`: where it finds this it prints a `bmc.quirks:` entry with \
`onceKeptAsContinuous: true` for this vendor, model and firmware; add it to the config file and \
restart metalherd";

/// What can go wrong talking to a BMC. Messages never include credentials.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BmcError {
    #[error("bad credentials for BMC {address}")]
    BadCredentials { address: String },
    #[error("no such system at BMC {address}: {detail}")]
    NoSuchSystem { address: String, detail: String },
    #[error("BMC {address} unreachable: {detail}")]
    Unreachable { address: String, detail: String },
    #[error("BMC {address} timed out after {after:?}")]
    Timeout { address: String, after: Duration },
    #[error("TLS to BMC {address} failed: {detail}")]
    Tls { address: String, detail: String },
    /// The override read back is not the one sent. `kept_continuous`: it
    /// is, but kept as persistent (`Continuous`) where one-time was asked
    /// and no quirk entry says this BMC does that; the message then says
    /// how to qualify the model and which quirk to add.
    #[error(
        "BMC {address} accepted boot override {wanted} but reads back {got}{advice}",
        advice = if *.kept_continuous { KEPT_CONTINUOUS_ADVICE } else { "" }
    )]
    BootOverrideIgnored {
        address: String,
        wanted: String,
        got: String,
        kept_continuous: bool,
    },
    #[error("BMC {address} did not reach power {wanted:?} within {after:?} (last seen {last:?})")]
    PowerStateNotReached {
        address: String,
        wanted: PowerState,
        last: PowerState,
        after: Duration,
    },
    #[error("BMC {address} answered HTTP {status}: {detail}")]
    Http {
        address: String,
        status: u16,
        detail: String,
    },
    #[error("BMC {address} sent a malformed answer: {detail}")]
    Protocol { address: String, detail: String },
    #[error("BMC {address} does not support {what}")]
    Unsupported { address: String, what: String },
    #[error("BMC configuration: {0}")]
    Config(String),
    #[error("BMC {address} task ended {state}: {detail}")]
    TaskFailed {
        address: String,
        state: String,
        detail: String,
    },
    /// This replica lost leadership: no action may reach a BMC any more
    /// (another replica may be acting on the same machine).
    #[error("power action on BMC {address} refused: this replica is no longer the leader")]
    NotLeader { address: String },
    /// The virtual CD does not read back the image just inserted (`wanted`
    /// and `got` show only scheme, host, port and file name: the URL may
    /// carry a token).
    #[error("BMC {address} accepted virtual media {wanted} but reads back {got}")]
    MediaNotInserted {
        address: String,
        wanted: String,
        got: String,
    },
    /// The virtual CD still reads back a media after an eject.
    #[error("BMC {address} accepted the virtual media eject but still reads back {got}")]
    MediaNotEjected { address: String, got: String },
    /// A test double got a call it was not told to expect.
    #[error("unexpected BMC call: expected {expected}, got {got}")]
    UnexpectedCall { expected: String, got: String },
}

impl BmcError {
    /// A short CamelCase reason for conditions, events and metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            BmcError::BadCredentials { .. } => "BadCredentials",
            BmcError::NoSuchSystem { .. } => "NoSuchSystem",
            BmcError::Unreachable { .. } => "BmcUnreachable",
            BmcError::Timeout { .. } => "BmcTimeout",
            BmcError::Tls { .. } => "TlsError",
            BmcError::BootOverrideIgnored { .. } => "BootOverrideIgnored",
            BmcError::PowerStateNotReached { .. } => "PowerStateNotReached",
            BmcError::Http { .. } => "BmcHttpError",
            BmcError::Protocol { .. } => "BmcProtocolError",
            BmcError::Unsupported { .. } => "Unsupported",
            BmcError::Config(_) => "BmcConfigError",
            BmcError::TaskFailed { .. } => "BmcTaskFailed",
            BmcError::UnexpectedCall { .. } => "UnexpectedBmcCall",
            BmcError::NotLeader { .. } => "NotLeader",
            BmcError::MediaNotInserted { .. } => "VirtualMediaNotInserted",
            BmcError::MediaNotEjected { .. } => "VirtualMediaNotEjected",
        }
    }

    /// Whether retrying later may help (the controller backs off on these).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BmcError::Unreachable { .. }
                | BmcError::Timeout { .. }
                | BmcError::Http { .. }
                | BmcError::PowerStateNotReached { .. }
                | BmcError::BootOverrideIgnored { .. }
                // Some BMCs attach the media a few seconds after they
                // acknowledge the action (iDRAC's remote file share does):
                // a later attempt ejects, inserts and reads again. One that
                // never attaches fails every attempt, visibly, like a boot
                // override it ignores.
                | BmcError::MediaNotInserted { .. }
                | BmcError::MediaNotEjected { .. }
        )
    }
}

/// One server's BMC. Every action is verified before it returns Ok.
#[async_trait]
pub trait Bmc: Send + Sync {
    async fn power_state(&self) -> Result<PowerState, BmcError>;
    /// Perform the action and poll until the target state is reached or the
    /// deadline passes (`PowerStateNotReached`).
    async fn power(&self, action: PowerAction) -> Result<(), BmcError>;
    /// Set a one-time boot override and read it back (`BootOverrideIgnored`).
    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError>;
    async fn inventory(&self) -> Result<Inventory, BmcError>;
    /// The BIOS attributes in effect (values as text).
    async fn bios(&self) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "BIOS attributes".into(),
        })
    }
    /// Ask for BIOS attributes to be set (pending: the next boot applies
    /// them, as Redfish `Bios/Settings` says).
    async fn set_bios(
        &self,
        attributes: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), BmcError> {
        let _ = attributes;
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "BIOS attributes".into(),
        })
    }
    /// Firmware versions per component: `BIOS` (the System's
    /// `BiosVersion`) and each `UpdateService/FirmwareInventory` member by
    /// its `Id`.
    async fn firmware_versions(
        &self,
    ) -> Result<std::collections::BTreeMap<String, String>, BmcError> {
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "firmware inventory".into(),
        })
    }
    /// Update one component from `image_url` (which the BMC fetches) and
    /// follow the BMC's task to its end (`TaskFailed` when it fails).
    async fn update_firmware(&self, component: &str, image_url: &str) -> Result<(), BmcError> {
        let _ = (component, image_url);
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "firmware updates".into(),
        })
    }
    /// The storage volumes of every Storage member.
    async fn volumes(&self) -> Result<Vec<crate::api::VolumeInfo>, BmcError> {
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "storage volumes".into(),
        })
    }
    /// Create a RAID volume from the drives its hints pick (and that are in
    /// no volume yet), following the BMC's task when it starts one.
    async fn create_volume(&self, volume: &crate::api::VolumeSpec) -> Result<(), BmcError> {
        let _ = volume;
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "storage volumes".into(),
        })
    }
    /// Insert `image_url` into the virtual CD (a media already inserted is
    /// ejected first), then read it back: `Inserted` and `Image` equal to
    /// the URL (`MediaNotInserted`). The BMC fetches the image itself,
    /// possibly all of it before it answers. A BMC without a virtual CD
    /// answers `Unsupported`. The URL may carry a token: drivers show only
    /// what [`image_url::redact`] keeps.
    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        let _ = image_url;
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "virtual media".into(),
        })
    }
    /// Eject the virtual CD (ejecting an empty drive is fine) and read it
    /// back: nothing inserted (`MediaNotEjected`).
    async fn eject_media(&self) -> Result<(), BmcError> {
        Err(BmcError::Unsupported {
            address: String::new(),
            what: "virtual media".into(),
        })
    }
    /// Names of the quirk entries that apply to this BMC (empty: the
    /// standard path). Drivers that match quirks connect when needed.
    async fn applied_quirks(&self) -> Result<Vec<String>, BmcError> {
        Ok(Vec::new())
    }
    /// End the session (Redfish logout, IPMI close). Idempotent.
    async fn close(&self) -> Result<(), BmcError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::BmcError;

    #[test]
    fn an_override_kept_as_continuous_says_which_quirk_and_how_to_find_it() {
        let e = |kept_continuous| BmcError::BootOverrideIgnored {
            address: "redfish+https://10.0.0.5".into(),
            wanted: "Pxe/Once/UEFI".into(),
            got: "Pxe/Continuous/UEFI".into(),
            kept_continuous,
        };
        let m = e(true).to_string();
        assert!(
            m.starts_with("BMC redfish+https://10.0.0.5 accepted boot override Pxe/Once/UEFI but reads back Pxe/Continuous/UEFI: ")
                && m.contains("metalherd hw-test")
                && m.contains("`bmc.quirks:`")
                && m.contains("onceKeptAsContinuous: true"),
            "{m}"
        );
        assert_eq!(
            e(false).to_string(),
            "BMC redfish+https://10.0.0.5 accepted boot override Pxe/Once/UEFI but reads back Pxe/Continuous/UEFI"
        );
    }
}
