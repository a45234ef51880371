//! Network namespaces for tests: a namespace (or two) joined by a veth pair
//! or a bridge, with addresses from a private test range that exists only
//! inside them. Everything is deleted on drop, also when the test fails.

use std::process::Command;

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2 missing? run scripts/setup)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace removed on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Netns {
        super::require_root();
        let name = super::unique(prefix);
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Run a command in the namespace and assert success; returns stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec");
        assert!(
            out.status.success(),
            "in netns {}: {}: {}",
            self.name,
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A `Command` that runs `program` inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Kill anything still running inside, then remove the namespace.
        if let Ok(out) = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
        {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(p) = pid.parse::<i32>() {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Two namespaces joined by a veth pair: `server` (the side metalherd runs
/// on) and `client`, with `server_ip`/`client_ip` in a /24 that exists only
/// between them. Interface names are returned for binding.
pub struct VethPair {
    pub server: Netns,
    pub client: Netns,
    pub server_if: String,
    pub client_if: String,
}

impl VethPair {
    /// `server_cidr` like "10.77.0.1/24"; the client side gets no address
    /// (DHCP tests) unless `client_cidr` is given.
    pub fn new(server_cidr: &str, client_cidr: Option<&str>) -> VethPair {
        let server = Netns::new("mhs");
        let client = Netns::new("mhc");
        let server_if = super::unique("vs");
        let client_if = super::unique("vc");
        ip(&[
            "link",
            "add",
            &server_if,
            "netns",
            &server.name,
            "type",
            "veth",
            "peer",
            "name",
            &client_if,
            "netns",
            &client.name,
        ]);
        server.exec(&["ip", "addr", "add", server_cidr, "dev", &server_if]);
        server.exec(&["ip", "link", "set", &server_if, "up"]);
        if let Some(c) = client_cidr {
            client.exec(&["ip", "addr", "add", c, "dev", &client_if]);
        }
        client.exec(&["ip", "link", "set", &client_if, "up"]);
        VethPair {
            server,
            client,
            server_if,
            client_if,
        }
    }
}
