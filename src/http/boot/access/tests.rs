use super::*;
use crate::api::{BootEvent, MachineNetwork, MachineStatus};

const TTL: Duration = Duration::from_secs(35 * 60);

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

/// A machine reserved at 10.77.0.50 with boot `boot-1` minted at t(0),
/// powered on for it at t(10) unless `armed` is false.
fn machine(completed: bool, armed: bool) -> Machine {
    let mut m = Machine::default();
    m.metadata.uid = Some("uid-1".into());
    m.spec.network = Some(MachineNetwork {
        address: Some("10.77.0.50/24".into()),
        ..Default::default()
    });
    let mut st = MachineStatus {
        boot: Some(BootRecord {
            id: "boot-1".into(),
            purpose: BootPurpose::Install,
            minted_at: t(0),
            completed_at: completed.then_some(t(100)),
            ..Default::default()
        }),
        ..Default::default()
    };
    if armed {
        st.progress.power_cycled_for = Some("boot-1".into());
        st.progress.powered_at = Some(t(10));
    }
    m.status = Some(st);
    m
}

fn ask(token: &str, peer: &str) -> Ask<'static> {
    Ask {
        token: Box::leak(token.to_string().into_boxed_str()),
        peer: peer.parse().unwrap(),
        leases: &[],
        need: Need::OpenBoot,
        now: t(20),
        ttl: TTL,
    }
}

#[test]
fn the_rule() {
    let k = TokenKey::from_bytes([1; 32]);
    let good = k.mint("uid-1", "boot-1");
    let m = machine(false, true);
    assert!(authorize(&k, &m, &ask(&good, "10.77.0.50")).is_ok());
    assert!(authorize(&k, &m, &ask(&good, "::ffff:10.77.0.50")).is_ok());
    assert_eq!(
        authorize(&k, &m, &ask(&good, "10.77.0.51")),
        Err(Refusal::WrongAddress)
    );
    // The lease address counts too.
    let leased = Ask {
        leases: &["10.77.0.51".parse().unwrap()],
        ..ask(&good, "10.77.0.51")
    };
    assert!(authorize(&k, &m, &leased).is_ok());
    let old = k.mint("uid-1", "boot-0");
    assert_eq!(
        authorize(&k, &m, &ask(&old, "10.77.0.50")),
        Err(Refusal::WrongToken)
    );
    assert_eq!(
        authorize(&k, &m, &ask("junk", "10.77.0.50")),
        Err(Refusal::WrongToken)
    );
    let done = machine(true, true);
    assert_eq!(
        authorize(&k, &done, &ask(&good, "10.77.0.50")),
        Err(Refusal::BootCompleted)
    );
    let any = Ask {
        need: Need::AnyBoot,
        ..ask(&good, "10.77.0.50")
    };
    assert!(authorize(&k, &done, &any).is_ok());
    let mut none = machine(false, true);
    none.status = None;
    assert_eq!(
        authorize(&k, &none, &ask(&good, "10.77.0.50")),
        Err(Refusal::NoBoot)
    );
}

#[test]
fn a_token_is_valid_only_once_the_server_was_powered_on_for_its_boot() {
    let k = TokenKey::from_bytes([1; 32]);
    let good = k.mint("uid-1", "boot-1");
    // Minted, but the old OS is still up (reimage): its token is useless.
    let waiting = machine(false, false);
    assert_eq!(
        authorize(&k, &waiting, &ask(&good, "10.77.0.50")),
        Err(Refusal::NotArmed)
    );
    // Powered on for an earlier boot only: still not this one's.
    let mut earlier = machine(false, false);
    let p = &mut earlier.status.as_mut().unwrap().progress;
    p.power_cycled_for = Some("boot-0".into());
    p.powered_at = Some(t(-50));
    assert_eq!(
        authorize(&k, &earlier, &ask(&good, "10.77.0.50")),
        Err(Refusal::NotArmed)
    );
}

#[test]
fn tokens_expire_a_ttl_after_power_on_or_completion() {
    let k = TokenKey::from_bytes([1; 32]);
    let good = k.mint("uid-1", "boot-1");
    let m = machine(false, true);
    let ttl = TTL.as_secs() as i64;
    let at = |now| Ask {
        now,
        ..ask(&good, "10.77.0.50")
    };
    assert!(authorize(&k, &m, &at(t(10 + ttl - 1))).is_ok());
    assert_eq!(authorize(&k, &m, &at(t(10 + ttl))), Err(Refusal::Expired));
    // `booted` comes after completion: the TTL runs from there.
    let done = machine(true, true);
    let booted = |now| Ask {
        need: Need::AnyBoot,
        ..at(now)
    };
    assert!(authorize(&k, &done, &booted(t(100 + ttl - 1))).is_ok());
    assert_eq!(
        authorize(&k, &done, &booted(t(100 + ttl))),
        Err(Refusal::Expired)
    );
}

fn history(step: BootStep, boot: &str) -> Vec<BootEvent> {
    vec![BootEvent {
        time: t(0),
        step,
        detail: String::new(),
        bytes: None,
        boot_id: Some(boot.into()),
    }]
}

#[test]
fn call_homes_come_in_the_order_the_boot_allows() {
    let open = machine(false, true).status.unwrap().boot.unwrap();
    let installed = BootRecord {
        completed_at: Some(t(100)),
        outcome: Some(BootOutcome::Installed),
        ..open.clone()
    };
    let wipe = BootRecord {
        purpose: BootPurpose::Deprovision,
        ..open.clone()
    };
    use CallHome::*;
    let rec = |o| Ok(Record(Some(o)));
    // An open install boot takes installed or failed, never wiped or booted.
    assert_eq!(
        callhome(&BootStep::Installed, &open, &[]),
        rec(BootOutcome::Installed)
    );
    assert_eq!(
        callhome(&BootStep::Failed, &open, &[]),
        rec(BootOutcome::Failed)
    );
    assert_eq!(
        callhome(&BootStep::Wiped, &open, &[]),
        Err(Refusal::WipedOutsideDeprovision)
    );
    assert_eq!(
        callhome(&BootStep::Booted, &open, &[]),
        Err(Refusal::BootedBeforeInstalled)
    );
    // installed once: a retry is answered, not recorded; failed after it is refused.
    assert_eq!(
        callhome(&BootStep::Installed, &installed, &[]),
        Ok(AlreadyRecorded)
    );
    assert_eq!(
        callhome(&BootStep::Failed, &installed, &[]),
        Err(Refusal::BootCompleted)
    );
    // booted after installed, once.
    assert_eq!(
        callhome(&BootStep::Booted, &installed, &[]),
        Ok(Record(None))
    );
    assert_eq!(
        callhome(
            &BootStep::Booted,
            &installed,
            &history(BootStep::Booted, "boot-1")
        ),
        Ok(AlreadyRecorded)
    );
    assert_eq!(
        callhome(
            &BootStep::Booted,
            &installed,
            &history(BootStep::Booted, "boot-0")
        ),
        Ok(Record(None))
    );
    // A deprovisioning boot takes wiped (or failed), never installed or booted.
    assert_eq!(
        callhome(&BootStep::Wiped, &wipe, &[]),
        rec(BootOutcome::Wiped)
    );
    assert_eq!(
        callhome(&BootStep::Failed, &wipe, &[]),
        rec(BootOutcome::Failed)
    );
    assert_eq!(
        callhome(&BootStep::Installed, &wipe, &[]),
        Err(Refusal::InstalledInDeprovision)
    );
    let wiped = BootRecord {
        completed_at: Some(t(100)),
        outcome: Some(BootOutcome::Wiped),
        ..wipe
    };
    assert_eq!(callhome(&BootStep::Wiped, &wiped, &[]), Ok(AlreadyRecorded));
    assert_eq!(
        callhome(&BootStep::Booted, &wiped, &[]),
        Err(Refusal::BootedBeforeInstalled)
    );
}

/// [`machine`] reserved at `address` instead.
fn machine_at(address: &str) -> Machine {
    let mut m = machine(false, true);
    m.spec.network = Some(MachineNetwork {
        address: Some(address.into()),
        ..Default::default()
    });
    m
}

#[test]
fn an_ipv6_machine_is_reached_from_its_ipv6_address_or_an_ipv6_lease() {
    let k = TokenKey::from_bytes([1; 32]);
    let good = k.mint("uid-1", "boot-1");
    let m = machine_at("fd00:89::7/64");
    assert!(authorize(&k, &m, &ask(&good, "fd00:89::7")).is_ok());
    for wrong in [
        "fd00:89::8",
        "fe80::5054:ff:fe00:7",
        "10.77.0.50",
        "::ffff:10.77.0.50",
    ] {
        assert_eq!(
            authorize(&k, &m, &ask(&good, wrong)),
            Err(Refusal::WrongAddress),
            "{wrong}"
        );
    }
    // A DHCPv6 lease counts like a DHCPv4 one, beside an IPv4 lease.
    let leases: [IpAddr; 2] = [
        "10.77.0.60".parse().unwrap(),
        "fd00:89::1:20".parse().unwrap(),
    ];
    let leased = Ask {
        leases: &leases,
        ..ask(&good, "fd00:89::1:20")
    };
    assert!(authorize(&k, &m, &leased).is_ok());
    // An IPv4 machine with only a DHCPv6 lease is reached over IPv6 too.
    let v4 = machine(false, true);
    let leased = Ask {
        leases: &leases[1..],
        ..ask(&good, "fd00:89::1:20")
    };
    assert!(authorize(&k, &v4, &leased).is_ok());
    // An IPv4 lease seen through a dual-stack socket, or handed over as a
    // mapped address by a lookup, still matches the IPv4 peer.
    let mapped: [IpAddr; 1] = ["::ffff:10.77.0.61".parse().unwrap()];
    let leased = Ask {
        leases: &mapped,
        ..ask(&good, "10.77.0.61")
    };
    assert!(authorize(&k, &v4, &leased).is_ok());
    assert_eq!(
        allowed_addresses(&m, &leases),
        vec![
            "fd00:89::7".parse::<IpAddr>().unwrap(),
            "10.77.0.60".parse().unwrap(),
            "fd00:89::1:20".parse().unwrap()
        ]
    );
}

#[test]
fn lease_lookups_answer_every_family_together() {
    struct Fixed(Vec<IpAddr>);
    impl LeaseLookup for Fixed {
        fn addresses_of(&self, mac: &[u8; 6]) -> Vec<IpAddr> {
            if *mac == [2, 0, 0, 0, 0, 1] {
                self.0.clone()
            } else {
                Vec::new()
            }
        }
    }
    let v4: Arc<dyn LeaseLookup> = Arc::new(Fixed(vec!["10.0.0.5".parse().unwrap()]));
    let v6: Arc<dyn LeaseLookup> = Arc::new(Fixed(vec!["fd00::5".parse().unwrap()]));
    let both = LeaseLookups(vec![v4, v6]);
    assert_eq!(
        both.addresses_of(&[2, 0, 0, 0, 0, 1]),
        vec![
            "10.0.0.5".parse::<IpAddr>().unwrap(),
            "fd00::5".parse().unwrap()
        ]
    );
    assert!(both.addresses_of(&[2, 0, 0, 0, 0, 2]).is_empty());
    // The DHCPv4 server's view answers through the trait as before.
    let view = crate::dhcp::LeaseView::new(&[]);
    assert!(LeaseLookup::addresses_of(&view, &[2, 0, 0, 0, 0, 1]).is_empty());
}
