//! A small switched LAN for tests: a bridge in its own "switch" namespace
//! and any number of hosts, each in its own namespace with one veth port on
//! the bridge. Everything is removed on drop (the namespaces own the links).

use std::process::Command;

use super::netns::Netns;

/// One host on the LAN: its namespace and interface name.
pub struct Host {
    pub ns: Netns,
    pub iface: String,
}

pub struct Lan {
    pub hosts: Vec<Host>,
    pub switch: Netns,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// One host per entry; `Some(cidr)` gives it a static address.
    pub fn new(addrs: &[Option<&str>]) -> Lan {
        let switch = Netns::new("mhw");
        switch.exec(&["ip", "link", "add", "br0", "type", "bridge"]);
        switch.exec(&["ip", "link", "set", "br0", "up"]);
        let mut hosts = Vec::new();
        for a in addrs {
            let ns = Netns::new("mhh");
            let iface = super::unique("h");
            let port = super::unique("p");
            ip(&[
                "link",
                "add",
                &iface,
                "netns",
                &ns.name,
                "type",
                "veth",
                "peer",
                "name",
                &port,
                "netns",
                &switch.name,
            ]);
            switch.exec(&["ip", "link", "set", &port, "master", "br0"]);
            switch.exec(&["ip", "link", "set", &port, "up"]);
            if let Some(c) = a {
                ns.exec(&["ip", "addr", "add", c, "dev", &iface]);
            }
            ns.exec(&["ip", "link", "set", &iface, "up"]);
            hosts.push(Host { ns, iface });
        }
        Lan { hosts, switch }
    }
}
