//! The kernel command line's spelling of a Machine's static network
//! (`spec.network`): what a live system booted without DHCP (virtual
//! media), or without a DHCP client for its family (IPv6: the lab's
//! busybox installer has no DHCPv6 client), configures itself from. Pure.

use crate::api::{MacAddr, MachineNetwork};

/// Kernel arguments for `spec.network`'s static address, as dracut,
/// systemd's network generator and metalherd's test OS read them:
/// `ifname=boot0:<mac>` names the boot NIC (when known), then
/// `ip=<address>::<gateway>:<netmask>:<hostname>:boot0:none` and one
/// `nameserver=` per DNS server. IPv6 addresses go in brackets with a
/// prefix length. Nothing without an address (the live system then asks
/// DHCP, as over PXE).
pub fn network_args(net: Option<&MachineNetwork>, mac: Option<[u8; 6]>) -> Vec<String> {
    let Some(net) = net else {
        return Vec::new();
    };
    let Some(addr) = net
        .address
        .as_deref()
        .and_then(|a| a.parse::<ipnet::IpNet>().ok())
    else {
        return Vec::new();
    };
    let (ip, gw, mask) = match addr {
        ipnet::IpNet::V4(n) => (
            n.addr().to_string(),
            net.gateway.clone().unwrap_or_default(),
            n.netmask().to_string(),
        ),
        ipnet::IpNet::V6(n) => (
            format!("[{}]", n.addr()),
            net.gateway
                .as_deref()
                .map(|g| format!("[{g}]"))
                .unwrap_or_default(),
            n.prefix_len().to_string(),
        ),
    };
    let host = net.hostname.clone().unwrap_or_default();
    let mut args = Vec::new();
    let dev = match mac {
        Some(mac) => {
            args.push(format!("ifname=boot0:{}", MacAddr(mac)));
            "boot0"
        }
        None => "",
    };
    args.push(format!("ip={ip}::{gw}:{mask}:{host}:{dev}:none"));
    args.extend(net.dns.iter().map(|d| format!("nameserver={d}")));
    args
}

/// The IPv6 address of `spec.network.address`, when it is one.
pub fn address6(net: Option<&MachineNetwork>) -> Option<ipnet::Ipv6Net> {
    match net?.address.as_deref()?.parse::<ipnet::IpNet>().ok()? {
        ipnet::IpNet::V6(n) => Some(n),
        ipnet::IpNet::V4(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(addr: &str, gw: Option<&str>, dns: &[&str]) -> MachineNetwork {
        MachineNetwork {
            address: Some(addr.into()),
            gateway: gw.map(Into::into),
            dns: dns.iter().map(|s| s.to_string()).collect(),
            hostname: Some("vm1".into()),
            domain: None,
        }
    }

    #[test]
    fn a_static_ipv4_address_becomes_ip_and_nameserver_arguments() {
        let mac = [0x52, 0x54, 0, 0, 0, 1];
        assert_eq!(
            network_args(
                Some(&net("10.89.0.11/24", Some("10.89.0.1"), &["10.89.0.1"])),
                Some(mac)
            ),
            [
                "ifname=boot0:52:54:00:00:00:01",
                "ip=10.89.0.11::10.89.0.1:255.255.255.0:vm1:boot0:none",
                "nameserver=10.89.0.1",
            ]
        );
        assert_eq!(
            network_args(Some(&net("10.0.0.7/16", None, &[])), None),
            ["ip=10.0.0.7:::255.255.0.0:vm1::none"]
        );
    }

    #[test]
    fn ipv6_goes_in_brackets_with_its_prefix_length() {
        assert_eq!(
            network_args(
                Some(&net("2001:db8::11/64", Some("2001:db8::1"), &[])),
                None
            ),
            ["ip=[2001:db8::11]::[2001:db8::1]:64:vm1::none"]
        );
    }

    #[test]
    fn an_ipv6_machine_names_its_nic_and_may_have_no_gateway() {
        let n = net("fd00:89::7/64", None, &["fd00:89::53"]);
        assert_eq!(
            network_args(Some(&n), Some([0x52, 0x54, 0, 0x89, 0, 7])),
            [
                "ifname=boot0:52:54:00:89:00:07",
                "ip=[fd00:89::7]:::64:vm1:boot0:none",
                "nameserver=fd00:89::53",
            ]
        );
        assert_eq!(address6(Some(&n)), Some("fd00:89::7/64".parse().unwrap()));
        assert_eq!(address6(Some(&net("10.0.0.7/24", None, &[]))), None);
        assert_eq!(address6(None), None);
    }

    #[test]
    fn no_address_no_arguments() {
        assert!(network_args(None, None).is_empty());
        let mut n = net("10.0.0.7/24", None, &[]);
        n.address = None;
        assert!(network_args(Some(&n), None).is_empty());
        n.address = Some("not an address".into());
        assert!(network_args(Some(&n), None).is_empty());
    }
}
