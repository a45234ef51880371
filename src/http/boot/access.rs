//! Who may fetch a Machine's Ignition config or call home for it. Pure:
//! decided from the Machine, the presented token, the peer address and the
//! DHCP lease (when known).
//!
//! The rule:
//! - the token must be the one minted for the Machine's *current* boot,
//!   `HMAC(key, uid | status.boot.id)`: a token from an earlier boot, or one
//!   minted for another machine, is refused;
//! - for Ignition and for the `installed`/`failed` call-homes the boot must
//!   still be open (`status.boot.completedAt` unset): once it completes, its
//!   token is useless;
//! - the request must come from the Machine's address: its reserved address
//!   (`spec.network.address`) or the address its current DHCP lease gave it,
//!   when a lease lookup is wired in (`serve` wires the DHCP server's
//!   [`LeaseView`](crate::dhcp::LeaseView) when DHCP runs in the process).
//!   A machine with neither is refused.

use std::net::{IpAddr, Ipv4Addr};

use crate::api::{BootRecord, Machine};

use super::token::TokenKey;

/// Where the boot services can ask which address a MAC leased (DHCP).
pub trait LeaseLookup: Send + Sync + 'static {
    fn address_of(&self, mac: &[u8; 6]) -> Option<Ipv4Addr>;
}

/// The DHCP server's bound, unexpired leases.
impl LeaseLookup for crate::dhcp::LeaseView {
    fn address_of(&self, mac: &[u8; 6]) -> Option<Ipv4Addr> {
        crate::dhcp::LeaseView::address_of(self, mac, crate::dhcp::server::unix_now())
    }
}

/// Why a request was refused. The text goes into a Warning event, so it
/// names what was wrong, never the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no network boot is in progress for this machine")]
    NoBoot,
    #[error("the token was not minted for this machine's current boot")]
    WrongToken,
    #[error("the boot this token was minted for has completed")]
    BootCompleted,
    #[error("the request did not come from the machine's address")]
    WrongAddress,
}

/// Whether the boot must still be open for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    OpenBoot,
    AnyBoot,
}

/// The Machine's addresses a request may come from.
pub fn allowed_addresses(m: &Machine, lease: Option<Ipv4Addr>) -> Vec<Ipv4Addr> {
    let mut v: Vec<Ipv4Addr> = m
        .spec
        .network
        .as_ref()
        .and_then(|n| n.address.as_deref())
        .and_then(|a| a.parse::<ipnet::Ipv4Net>().ok())
        .map(|n| n.addr())
        .into_iter()
        .collect();
    v.extend(lease);
    v
}

fn v4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped(),
    }
}

/// Decide; on success returns the boot the token belongs to.
pub fn authorize<'m>(
    key: &TokenKey,
    m: &'m Machine,
    token: &str,
    peer: IpAddr,
    lease: Option<Ipv4Addr>,
    need: Need,
) -> Result<&'m BootRecord, Refusal> {
    let boot = m
        .status
        .as_ref()
        .and_then(|s| s.boot.as_ref())
        .ok_or(Refusal::NoBoot)?;
    let uid = m.metadata.uid.as_deref().unwrap_or_default();
    if uid.is_empty() || !key.verify(uid, &boot.id, token) {
        return Err(Refusal::WrongToken);
    }
    let ok = v4(peer).is_some_and(|p| allowed_addresses(m, lease).contains(&p));
    if !ok {
        return Err(Refusal::WrongAddress);
    }
    if need == Need::OpenBoot && boot.completed_at.is_some() {
        return Err(Refusal::BootCompleted);
    }
    Ok(boot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MachineNetwork, MachineStatus};

    fn machine(completed: bool) -> Machine {
        let mut m = Machine::default();
        m.metadata.uid = Some("uid-1".into());
        m.spec.network = Some(MachineNetwork {
            address: Some("10.77.0.50/24".into()),
            ..Default::default()
        });
        m.status = Some(MachineStatus {
            boot: Some(BootRecord {
                id: "boot-1".into(),
                purpose: crate::api::BootPurpose::Install,
                minted_at: jiff::Timestamp::UNIX_EPOCH,
                completed_at: completed.then_some(jiff::Timestamp::UNIX_EPOCH),
                ..Default::default()
            }),
            ..Default::default()
        });
        m
    }

    #[test]
    fn the_rule() {
        let k = TokenKey::from_bytes([1; 32]);
        let good = k.mint("uid-1", "boot-1");
        let me: IpAddr = "10.77.0.50".parse().unwrap();
        let other: IpAddr = "10.77.0.51".parse().unwrap();
        let m = machine(false);
        assert!(authorize(&k, &m, &good, me, None, Need::OpenBoot).is_ok());
        let mapped: IpAddr = "::ffff:10.77.0.50".parse().unwrap();
        assert!(authorize(&k, &m, &good, mapped, None, Need::OpenBoot).is_ok());
        assert_eq!(
            authorize(&k, &m, &good, other, None, Need::OpenBoot),
            Err(Refusal::WrongAddress)
        );
        // The lease address counts too.
        let lease = "10.77.0.51".parse().ok();
        assert!(authorize(&k, &m, &good, other, lease, Need::OpenBoot).is_ok());
        let old = k.mint("uid-1", "boot-0");
        assert_eq!(
            authorize(&k, &m, &old, me, None, Need::OpenBoot),
            Err(Refusal::WrongToken)
        );
        assert_eq!(
            authorize(&k, &m, "junk", me, None, Need::OpenBoot),
            Err(Refusal::WrongToken)
        );
        let done = machine(true);
        assert_eq!(
            authorize(&k, &done, &good, me, None, Need::OpenBoot),
            Err(Refusal::BootCompleted)
        );
        assert!(authorize(&k, &done, &good, me, None, Need::AnyBoot).is_ok());
        let mut none = machine(false);
        none.status = None;
        assert_eq!(
            authorize(&k, &none, &good, me, None, Need::OpenBoot),
            Err(Refusal::NoBoot)
        );
    }
}
