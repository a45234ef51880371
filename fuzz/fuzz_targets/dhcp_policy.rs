//! Any datagram fed to the DHCP policy (authoritative with discovery, and
//! proxy, on both ports) gives a reply or nothing, never a panic, and every
//! reply decodes.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::LazyLock;

use dhcproto::{Decodable, Decoder};
use libfuzzer_sys::fuzz_target;
use metalherd::dhcp::lease::LeaseTable;
use metalherd::dhcp::policy::{Policy, Via};
use metalherd::dhcp::{DhcpConfig, DhcpSettings};
use metalherd::directory::Directory;

fn policy(yaml: &str) -> Policy {
    let c: DhcpConfig = serde_yaml::from_str(yaml).unwrap();
    Policy::new(DhcpSettings::try_from(c).unwrap(), Ipv4Addr::new(10, 0, 0, 1))
}

/// Built once: parsing the YAML per input would cost more than the policy.
static POLICIES: LazyLock<[Policy; 2]> = LazyLock::new(|| {
    [
        policy(
            "interface: eth0\nhttpBootUrl: http://10.0.0.1:8080\ndiscovery: {enabled: true}\n\
             subnets: [{subnet: 10.0.0.0/24, ranges: [{start: 10.0.0.100, end: 10.0.0.110}],\
             relays: [10.0.0.254]}]\n",
        ),
        policy("interface: eth0\nmode: proxy\nhttpBootUrl: http://10.0.0.1:8080\ndiscovery: {enabled: true}\n"),
    ]
});
static DIRECTORY: LazyLock<Directory> = LazyLock::new(Directory::new);

fuzz_target!(|data: &[u8]| {
    let dir = &*DIRECTORY;
    for p in POLICIES.iter() {
        let mut leases = LeaseTable::new();
        for via in [Via::Port67, Via::Port4011] {
            let out = p.handle(data, via, dir, &mut leases, 1_000);
            if let Some(r) = out.reply {
                assert!(dhcproto::v4::Message::decode(&mut Decoder::new(&r.bytes)).is_ok());
            }
        }
    }
});
