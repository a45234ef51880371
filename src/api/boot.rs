//! The boot vocabulary the boot services (DHCP, TFTP, HTTP) write and the
//! controller and the boot directory read: [`BootStep`] (a
//! `status.bootHistory[].step`), [`BootPurpose`] (`status.boot.purpose`)
//! and [`BootOutcome`] (`status.boot.outcome`). The words on the wire are
//! the ones this file names, and nowhere else: a misspelt step does not
//! compile, and a test keeps string literals of these words out of src/.
//!
//! Steps and outcomes are open: a stored object may hold a word written by
//! another version, which decodes as `Other` and is written back unchanged.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An enum of known words plus `Other(String)`, serialised as the word.
macro_rules! open_words {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $word:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $var,)*
            /// A word this version does not know (kept as written).
            Other(String),
        }

        impl $name {
            /// Every known value.
            pub const KNOWN: &'static [$name] = &[$($name::$var),*];

            /// The word on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$var => $word,)*
                    $name::Other(s) => s,
                }
            }

            /// The value a word names (unknown words become `Other`).
            pub fn parse(s: &str) -> $name {
                match s {
                    $($word => $name::$var,)*
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(s: &str) -> Result<$name, Self::Err> {
                Ok($name::parse(s))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                $name::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                Ok($name::parse(&String::deserialize(d)?))
            }
        }
    };
}

open_words! {
    /// A step of a network boot (`status.bootHistory[].step`), in the order
    /// a boot usually takes them.
    BootStep {
        /// DHCP offered the machine its address (and boot file).
        DhcpOffer = "DHCPOffer",
        /// DHCP acknowledged the address.
        DhcpAck = "DHCPAck",
        /// A TFTP transfer (the iPXE binary) completed.
        Tftp = "TFTP",
        /// An iPXE script was served.
        Script = "Script",
        /// The installer kernel was served.
        Kernel = "Kernel",
        /// The installer initrd was served.
        Initrd = "Initrd",
        /// Another cached image was served.
        Image = "Image",
        /// The controller inserted the boot ISO into the BMC's virtual CD
        /// (the detail names the drive's new image, without its token).
        MediaInserted = "MediaInserted",
        /// The boot ISO was served (to the BMC, with the boot's media
        /// token); recorded once per boot.
        Media = "Media",
        /// The controller ejected the boot ISO after the boot.
        MediaEjected = "MediaEjected",
        /// A file from the assets directory was served.
        Asset = "Asset",
        /// An Ignition config was served.
        Ignition = "Ignition",
        /// Call-home: the installer wrote the disk.
        Installed = "Installed",
        /// Call-home: the installer failed.
        Failed = "Failed",
        /// Call-home: the installed OS came up.
        Booted = "Booted",
        /// The disk was wiped (a deprovisioning boot's success).
        Wiped = "Wiped",
        /// The controller power-cycled the server on request (the detail
        /// is the request: who asked and why).
        PowerCycled = "PowerCycled",
        /// The controller started a reimage on request (the detail is the
        /// request).
        ReimageRequested = "ReimageRequested",
    }
}

impl BootStep {
    /// The steps a machine reports itself, by `POST /callhome/{word}`.
    pub const CALLHOME: [BootStep; 4] = [
        BootStep::Installed,
        BootStep::Failed,
        BootStep::Booted,
        BootStep::Wiped,
    ];

    /// Whether only a request carrying the boot's token (the Ignition
    /// config and the call-homes) or the controller itself (a requested
    /// power cycle or reimage) can cause this step. Anyone on the boot
    /// network can cause the others (DHCP, TFTP, script, kernel, assets), so
    /// they must never crowd these out of a Machine's history.
    pub fn is_authenticated(&self) -> bool {
        matches!(
            self,
            BootStep::Ignition
                | BootStep::MediaInserted
                | BootStep::Media
                | BootStep::MediaEjected
                | BootStep::Installed
                | BootStep::Failed
                | BootStep::Booted
                | BootStep::Wiped
                | BootStep::PowerCycled
                | BootStep::ReimageRequested
        )
    }

    /// The call-home word of this step (`installed`, `failed`, `booted`,
    /// `wiped`), as the installer and wipe scripts and the lab's test OS
    /// post it.
    pub fn callhome_word(&self) -> Option<&'static str> {
        Some(match self {
            BootStep::Installed => "installed",
            BootStep::Failed => "failed",
            BootStep::Booted => "booted",
            BootStep::Wiped => "wiped",
            _ => return None,
        })
    }

    /// The step a call-home word reports.
    pub fn from_callhome(word: &str) -> Option<BootStep> {
        BootStep::CALLHOME
            .into_iter()
            .find(|s| s.callhome_word() == Some(word))
    }
}

open_words! {
    /// How a network boot ended (`status.boot.outcome`).
    BootOutcome {
        /// The installer called home `installed`.
        Installed = "installed",
        /// The disk was wiped.
        Wiped = "wiped",
        /// The installer called home `failed`.
        Failed = "failed",
        /// No call-home before the install deadline.
        TimedOut = "timeout",
        /// The target revision moved while the boot ran.
        Superseded = "superseded",
        /// The run the boot served was given up (class removed, deprovision).
        Abandoned = "abandoned",
    }
}

/// Why a network boot is minted (`status.boot.purpose`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BootPurpose {
    #[default]
    Install,
    Reimage,
    Deprovision,
}

impl BootPurpose {
    /// Every purpose.
    pub const ALL: [BootPurpose; 3] = [
        BootPurpose::Install,
        BootPurpose::Reimage,
        BootPurpose::Deprovision,
    ];

    /// The word in `status.boot.purpose`.
    pub fn as_str(self) -> &'static str {
        match self {
            BootPurpose::Install => "install",
            BootPurpose::Reimage => "reimage",
            BootPurpose::Deprovision => "deprovision",
        }
    }
}

impl fmt::Display for BootPurpose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long the stages of a provisioning may take, unless
/// `controller.installDeadlineSeconds` and `joinDeadlineSeconds` say
/// otherwise. The Machine controller fails a boot that overruns them, and
/// boot HTTP's tokens are valid for the install deadline by default (plus
/// a margin), so both read them from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootDeadlines {
    /// From power-on to the installer's `installed` call-home.
    pub install: Duration,
    /// From `installed` to a Ready Node (or the `booted` call-home).
    pub join: Duration,
}

impl Default for BootDeadlines {
    fn default() -> Self {
        BootDeadlines {
            install: Duration::from_secs(30 * 60),
            join: Duration::from_secs(20 * 60),
        }
    }
}

/// Add steps to a history in time order (a step noted directly with its
/// call-home may be written before earlier steps still held), keeping the
/// last [`super::BOOT_HISTORY_LIMIT`].
pub fn insert_boot_events(h: &mut Vec<super::BootEvent>, evs: &[super::BootEvent]) {
    for ev in evs {
        let at = h.partition_point(|e| e.time <= ev.time);
        h.insert(at, ev.clone());
    }
    trim_history(h, super::BOOT_HISTORY_LIMIT);
}

/// Keep at most `limit` steps: the oldest unauthenticated ones go first,
/// so requests anyone can make never push a boot's Ignition or call-home
/// steps out; only when those alone are over the limit do the oldest of
/// them go.
pub fn trim_history(h: &mut Vec<super::BootEvent>, limit: usize) {
    let mut excess = h.len().saturating_sub(limit);
    if excess == 0 {
        return;
    }
    h.retain(|e| {
        if excess > 0 && !e.step.is_authenticated() {
            excess -= 1;
            false
        } else {
            true
        }
    });
    let n = h.len();
    if n > limit {
        h.drain(..n - limit);
    }
}

#[cfg(test)]
mod tests;
