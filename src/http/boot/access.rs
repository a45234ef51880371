//! Who may fetch a Machine's install script or Ignition config, or call
//! home for it. Pure: decided from the Machine, the presented token, the
//! peer address, the DHCP lease (when known) and the clock.
//!
//! The rule:
//! - the token must be the one minted for the Machine's *current* boot,
//!   `HMAC(key, uid | status.boot.id)`: a token from an earlier boot, or one
//!   minted for another machine, is refused;
//! - the request must come from the Machine's address: its reserved address
//!   (`spec.network.address`, IPv4 or IPv6) or an address a current DHCP
//!   lease gave it, when a [`LeaseLookup`] is wired in (`serve` wires the
//!   DHCP server's [`LeaseView`](crate::dhcp::LeaseView) when DHCP runs in
//!   the process). A peer is compared as the address it is: IPv6 with
//!   IPv6, and an IPv4-mapped IPv6 peer (`::ffff:a.b.c.d`, how a dual-stack
//!   `[::]` listener sees an IPv4 client) as its IPv4 address. A machine
//!   with no address is refused. The install script, which carries the
//!   token, is handed out under the same address rule;
//! - the token becomes valid when the controller powers the server on for
//!   this boot, which it does only after it has seen the server off (so the
//!   OS a reimage replaces cannot use the new boot's token), and expires a
//!   TTL after that (or after the boot completed, for `booted`);
//! - for Ignition and for the `installed`/`failed`/`wiped` call-homes the
//!   boot must still be open (`status.boot.completedAt` unset): once it
//!   completes, its token is useless for them;
//! - each config of a boot (install, node) is served in full once, and the
//!   call-homes come in the order the boot allows ([`callhome`]).
//!
//! A refused client is told only [`REFUSED`]; the [`Refusal`] goes into the
//! server's log and a Warning event on the Machine.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{BootOutcome, BootPurpose, BootRecord, BootStep, Machine};
use crate::directory::plain_ip;

use super::token::TokenKey;

/// What every refused client is told, whatever the reason.
pub const REFUSED: &str = "forbidden";

/// Where the boot services ask which addresses a MAC holds by lease, in
/// either family: the DHCPv4 server's view answers the IPv4 address it
/// leased, a DHCPv6 server's view the IPv6 address(es) its IA_NA leases
/// gave (a MAC may hold more than one: firmware and iPXE use different
/// IAIDs). The answer is every address of a *current* lease (bound, not
/// expired) of `mac`, in any order; empty when there is none. Answer from
/// memory: it is asked on every script, Ignition and call-home request.
///
/// When more than one server runs, hand boot HTTP a [`LeaseLookups`] of
/// all of them (`BootDeps::leases`).
pub trait LeaseLookup: Send + Sync + 'static {
    fn addresses_of(&self, mac: &[u8; 6]) -> Vec<IpAddr>;
}

/// The DHCPv4 server's bound, unexpired leases.
impl LeaseLookup for crate::dhcp::LeaseView {
    fn addresses_of(&self, mac: &[u8; 6]) -> Vec<IpAddr> {
        crate::dhcp::LeaseView::address_of(self, mac, crate::dhcp::server::unix_now())
            .map(IpAddr::V4)
            .into_iter()
            .collect()
    }
}

/// Several lease lookups asked as one (DHCPv4 and DHCPv6 side by side):
/// the addresses of all of them.
#[derive(Clone, Default)]
pub struct LeaseLookups(pub Vec<Arc<dyn LeaseLookup>>);

impl LeaseLookup for LeaseLookups {
    fn addresses_of(&self, mac: &[u8; 6]) -> Vec<IpAddr> {
        self.0.iter().flat_map(|l| l.addresses_of(mac)).collect()
    }
}

/// Why a request was refused. The text goes into the log and a Warning
/// event, never to the client; it names what was wrong, never the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the MAC is not a known machine's")]
    UnknownMachine,
    #[error("no network boot is in progress for this machine")]
    NoBoot,
    #[error("the token was not minted for this machine's current boot")]
    WrongToken,
    #[error("the boot this token was minted for has completed")]
    BootCompleted,
    #[error("the request did not come from the machine's address")]
    WrongAddress,
    #[error("the server has not been powered on for this boot yet")]
    NotArmed,
    #[error("the token has expired")]
    Expired,
    #[error("this config of the boot was already served in full")]
    AlreadyServed,
    #[error("this boot's purpose does not call for this config")]
    NotThisBootsConfig,
    #[error("`booted` before `installed`")]
    BootedBeforeInstalled,
    #[error("`wiped` outside a deprovisioning boot")]
    WipedOutsideDeprovision,
    #[error("`installed` in a deprovisioning boot")]
    InstalledInDeprovision,
}

/// Whether the boot must still be open for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    OpenBoot,
    AnyBoot,
}

/// A request to check: what it presented, where it came from, and when.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub token: &'a str,
    pub peer: IpAddr,
    /// The addresses DHCP (v4 or v6) leased to the machine's MAC.
    pub leases: &'a [IpAddr],
    pub need: Need,
    pub now: Timestamp,
    /// How long a token stays valid (see [`valid_until`]).
    pub ttl: Duration,
}

/// The Machine's addresses a request may come from: its reserved address
/// (either family) and its leased ones, IPv4-mapped ones as IPv4.
pub fn allowed_addresses(m: &Machine, leases: &[IpAddr]) -> Vec<IpAddr> {
    let mut v: Vec<IpAddr> = m
        .spec
        .network
        .as_ref()
        .and_then(|n| n.address.as_deref())
        .and_then(|a| a.parse::<ipnet::IpNet>().ok())
        .map(|n| n.addr())
        .into_iter()
        .collect();
    v.extend(leases.iter().copied().map(plain_ip));
    v
}

/// Whether `peer` is one of the Machine's addresses.
pub fn from_machine(m: &Machine, peer: IpAddr, leases: &[IpAddr]) -> bool {
    allowed_addresses(m, leases).contains(&plain_ip(peer))
}

/// When the token of `boot` became valid: when the controller powered the
/// server on for it (`status.progress`), which it does only after seeing the
/// server off. `None`: not yet.
pub fn armed_at(m: &Machine, boot: &BootRecord) -> Option<Timestamp> {
    let p = &m.status.as_ref()?.progress;
    if p.power_cycled_for.as_ref() != Some(&boot.id) {
        return None;
    }
    Some(p.powered_at.unwrap_or(boot.minted_at))
}

/// When the token of `boot` stops being valid: `ttl` after it became valid,
/// or after the boot completed (the installed OS's `booted` comes then).
pub fn valid_until(armed: Timestamp, boot: &BootRecord, ttl: Duration) -> Timestamp {
    let from = boot.completed_at.map_or(armed, |c| c.max(armed));
    let ttl = jiff::SignedDuration::try_from(ttl).unwrap_or(jiff::SignedDuration::MAX);
    from.saturating_add(ttl).unwrap_or(Timestamp::MAX)
}

/// Decide; on success returns the boot the token belongs to.
pub fn authorize<'m>(
    key: &TokenKey,
    m: &'m Machine,
    ask: &Ask<'_>,
) -> Result<&'m BootRecord, Refusal> {
    let boot = m
        .status
        .as_ref()
        .and_then(|s| s.boot.as_ref())
        .ok_or(Refusal::NoBoot)?;
    let uid = m.metadata.uid.as_deref().unwrap_or_default();
    if uid.is_empty() || !key.verify(uid, &boot.id, ask.token) {
        return Err(Refusal::WrongToken);
    }
    if !from_machine(m, ask.peer, ask.leases) {
        return Err(Refusal::WrongAddress);
    }
    let armed = armed_at(m, boot).ok_or(Refusal::NotArmed)?;
    if ask.need == Need::OpenBoot && boot.completed_at.is_some() {
        return Err(Refusal::BootCompleted);
    }
    if ask.now >= valid_until(armed, boot, ask.ttl) {
        return Err(Refusal::Expired);
    }
    Ok(boot)
}

/// What to do with an authorized call-home.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallHome {
    /// Record the step; `Some` closes the boot with this outcome.
    Record(Option<BootOutcome>),
    /// The same call-home was already recorded (a retry): answer as before,
    /// record nothing.
    AlreadyRecorded,
}

/// Whether a call-home fits where its boot stands: `installed`, `failed`
/// and `wiped` close an open boot (`wiped` only a deprovisioning one,
/// `installed` only another), and are taken once; `booted` only after
/// `installed`, once. `history` is the Machine's `status.bootHistory`.
pub fn callhome(
    step: &BootStep,
    boot: &BootRecord,
    history: &[crate::api::BootEvent],
) -> Result<CallHome, Refusal> {
    let deprovision = boot.purpose == BootPurpose::Deprovision;
    let closes = match step {
        BootStep::Installed if deprovision => return Err(Refusal::InstalledInDeprovision),
        BootStep::Installed => BootOutcome::Installed,
        BootStep::Wiped if !deprovision => return Err(Refusal::WipedOutsideDeprovision),
        BootStep::Wiped => BootOutcome::Wiped,
        BootStep::Failed => BootOutcome::Failed,
        BootStep::Booted => {
            if deprovision || boot.outcome != Some(BootOutcome::Installed) {
                return Err(Refusal::BootedBeforeInstalled);
            }
            let again = boot.booted_at.is_some()
                || history
                    .iter()
                    .any(|e| e.step == BootStep::Booted && e.boot_id.as_deref() == Some(&boot.id));
            return Ok(if again {
                CallHome::AlreadyRecorded
            } else {
                CallHome::Record(None)
            });
        }
        _ => return Err(Refusal::BootCompleted),
    };
    match &boot.outcome {
        Some(o) if *o == closes => Ok(CallHome::AlreadyRecorded),
        _ if boot.completed_at.is_some() => Err(Refusal::BootCompleted),
        _ => Ok(CallHome::Record(Some(closes))),
    }
}

#[cfg(test)]
mod tests;
