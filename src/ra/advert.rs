//! The router advertisement's bytes (RFC 4861 §4.2) and the one message it
//! reads (a router solicitation, §4.1). Pure: no sockets here.
//!
//! Layout written by [`Advertisement::encode`]:
//!
//! ```text
//!  0      type 134        1  code 0          2..4  checksum (0: the kernel fills it)
//!  4      cur hop limit 0 (unspecified)      5     flags: M 0x80, O 0x40
//!  6..8   router lifetime, seconds           8..12 reachable time 0, 12..16 retrans timer 0
//! then one Prefix Information option per prefix (RFC 4861 §4.6.2), 32 bytes:
//!  0      type 3          1  length 4 (units of 8 bytes)
//!  2      prefix length   3  flags: L (on-link) 0x80, A (autonomous) 0x40
//!  4..8   valid lifetime  8..12 preferred lifetime  12..16 reserved
//!  16..32 the prefix (host bits zero)
//! ```

use std::net::Ipv6Addr;

use ipnet::Ipv6Net;

const ICMPV6_ROUTER_SOLICITATION: u8 = 133;
const ICMPV6_ROUTER_ADVERTISEMENT: u8 = 134;
const OPT_PREFIX_INFORMATION: u8 = 3;
const FLAG_MANAGED: u8 = 0x80;
const FLAG_OTHER: u8 = 0x40;
const FLAG_ON_LINK: u8 = 0x80;
const FLAG_AUTONOMOUS: u8 = 0x40;
/// Bytes of the advertisement before its options.
pub const HEADER_LEN: usize = 16;
/// Bytes of one Prefix Information option.
pub const PIO_LEN: usize = 32;

/// One prefix advertised in a Prefix Information option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Written with its host bits cleared.
    pub prefix: Ipv6Net,
    /// L: hosts treat the prefix as on-link (a route to it on this link),
    /// which EDK2's network stack needs to reach a server in it.
    pub on_link: bool,
    /// A: hosts form their own (SLAAC) address in it (a /64 only).
    pub autonomous: bool,
    /// Seconds; `u32::MAX` is infinity.
    pub valid_lifetime: u32,
    /// Seconds, at most `valid_lifetime`.
    pub preferred_lifetime: u32,
}

/// What an advertisement says. [`Advertisement::default`] is the minimal
/// one: not a default router, no flags, no prefixes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advertisement {
    /// M: addresses come from DHCPv6 (iPXE then runs stateful DHCPv6).
    pub managed: bool,
    /// O: other configuration comes from DHCPv6 (iPXE: stateless DHCPv6
    /// when M is clear).
    pub other: bool,
    /// Seconds hosts may use the sender as a default router; 0: none.
    pub router_lifetime: u16,
    pub prefixes: Vec<Prefix>,
}

impl Advertisement {
    /// The message as an ICMPv6 raw socket sends it (no IPv6 header; the
    /// kernel fills the checksum).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(HEADER_LEN + PIO_LEN * self.prefixes.len());
        p.extend_from_slice(&[ICMPV6_ROUTER_ADVERTISEMENT, 0, 0, 0, 0]);
        let mut flags = 0;
        if self.managed {
            flags |= FLAG_MANAGED;
        }
        if self.other {
            flags |= FLAG_OTHER;
        }
        p.push(flags);
        p.extend_from_slice(&self.router_lifetime.to_be_bytes());
        p.extend_from_slice(&[0; 8]);
        for x in &self.prefixes {
            let mut f = 0;
            if x.on_link {
                f |= FLAG_ON_LINK;
            }
            if x.autonomous {
                f |= FLAG_AUTONOMOUS;
            }
            p.extend_from_slice(&[OPT_PREFIX_INFORMATION, 4, x.prefix.prefix_len(), f]);
            p.extend_from_slice(&x.valid_lifetime.to_be_bytes());
            p.extend_from_slice(&x.preferred_lifetime.to_be_bytes());
            p.extend_from_slice(&[0; 4]);
            p.extend_from_slice(&x.prefix.trunc().addr().octets());
        }
        p
    }
}

/// Whether an ICMPv6 message (as a raw socket delivers it, without the IPv6
/// header) is a router solicitation.
pub fn is_solicitation(msg: &[u8]) -> bool {
    msg.len() >= 8 && msg[0] == ICMPV6_ROUTER_SOLICITATION && msg[1] == 0
}

/// The all-nodes multicast address, where advertisements go.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The all-routers multicast address, where solicitations arrive.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_minimal_advertisement() {
        let p = Advertisement::default().encode();
        assert_eq!(p.len(), HEADER_LEN);
        assert_eq!(p[0], 134);
        assert!(
            p[1..].iter().all(|b| *b == 0),
            "lifetime 0, no flags, no options"
        );
    }

    #[test]
    fn flags_lifetime_and_a_prefix_are_laid_out_as_rfc_4861_says() {
        let a = Advertisement {
            managed: true,
            other: true,
            router_lifetime: 1800,
            prefixes: vec![Prefix {
                // Host bits are cleared on the wire.
                prefix: "fd00:89::1/64".parse().unwrap(),
                on_link: true,
                autonomous: false,
                valid_lifetime: 86_400,
                preferred_lifetime: 14_400,
            }],
        };
        let p = a.encode();
        let mut want = vec![134, 0, 0, 0, 0, 0xc0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&[3, 4, 64, 0x80]);
        want.extend_from_slice(&[0, 1, 0x51, 0x80]); // 86400
        want.extend_from_slice(&[0, 0, 0x38, 0x40]); // 14400
        want.extend_from_slice(&[0, 0, 0, 0]);
        want.extend_from_slice(&[0xfd, 0, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p, want);
    }

    #[test]
    fn each_flag_has_its_own_bit() {
        let only_m = Advertisement {
            managed: true,
            ..Default::default()
        };
        assert_eq!(only_m.encode()[5], 0x80);
        let only_o = Advertisement {
            other: true,
            ..Default::default()
        };
        assert_eq!(only_o.encode()[5], 0x40);
        let two = Advertisement {
            prefixes: vec![
                Prefix {
                    prefix: "2001:db8:1::/48".parse().unwrap(),
                    on_link: false,
                    autonomous: true,
                    valid_lifetime: u32::MAX,
                    preferred_lifetime: u32::MAX,
                },
                Prefix {
                    prefix: "fd00::/8".parse().unwrap(),
                    on_link: true,
                    autonomous: true,
                    valid_lifetime: 0,
                    preferred_lifetime: 0,
                },
            ],
            ..Default::default()
        };
        let p = two.encode();
        assert_eq!(p.len(), HEADER_LEN + 2 * PIO_LEN);
        let (a, b) = (&p[16..48], &p[48..80]);
        assert_eq!(&a[..4], &[3, 4, 48, 0x40]);
        assert_eq!(&a[4..12], &[0xff; 8], "infinite lifetimes");
        assert_eq!(&a[16..22], &[0x20, 0x01, 0x0d, 0xb8, 0, 1]);
        assert_eq!(&b[..4], &[3, 4, 8, 0xc0]);
        assert_eq!(b[16], 0xfd);
    }

    #[test]
    fn solicitations_are_recognised() {
        assert!(is_solicitation(&[133, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!is_solicitation(&[134, 0, 0, 0, 0, 0, 0, 0]));
        assert!(!is_solicitation(&[133, 0]));
        assert!(!is_solicitation(&[133, 1, 0, 0, 0, 0, 0, 0]));
    }
}
