//! DHCPv6 for tests: an IPv6-only link between two namespaces (duplicate
//! address detection off, so link-locals are usable at once), a client
//! built on metalherd's DHCPv6 codec that sends what OVMF PXE, OVMF HTTP
//! boot and iPXE send (exact options), and the real clients: ISC
//! `dhclient -6` (bounded) and `perfdhcp -6`.

use std::collections::HashMap;
use std::net::{Ipv6Addr, SocketAddrV6, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use metalherd::dhcp::v6::Msg;

/// A decoded server message.
pub type Msg6 = Msg;
use socket2::{Domain, Protocol, Socket, Type};

use super::netns::Netns;
use super::proc::{ChildGuard, wait_for};

/// The boot network's prefix inside the test namespaces.
pub const PREFIX: &str = "fd00:77::";
pub const SERVER_ADDR: &str = "fd00:77::1";

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair: the server side has
/// `fd00:77::1/64`, the client side only its link-local.
pub struct Link6 {
    pub server: Netns,
    pub client: Netns,
    pub server_if: String,
    pub client_if: String,
    pub client_mac: [u8; 6],
}

impl Link6 {
    pub fn new() -> Link6 {
        let server = Netns::new("mh6s");
        let client = Netns::new("mh6c");
        for ns in [&server, &client] {
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0"]);
            ns.exec(&["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"]);
        }
        let server_if = super::unique("v6s");
        let client_if = super::unique("v6c");
        run(&[
            "ip",
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
        server.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{SERVER_ADDR}/64"),
            "dev",
            &server_if,
            "nodad",
        ]);
        server.exec(&["ip", "link", "set", &server_if, "up"]);
        client.exec(&["ip", "link", "set", &client_if, "up"]);
        let show = client.exec(&["ip", "link", "show", &client_if]);
        let mac = show
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .and_then(|m| m.parse::<metalherd::api::MacAddr>().ok())
            .expect("client MAC")
            .octets();
        Link6 {
            server,
            client,
            server_if,
            client_if,
            client_mac: mac,
        }
    }
}

/// The firmware a crafted client imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// OVMF PXE: arch 7, `PXEClient`, ORO [59, 60, 23, 16].
    OvmfPxe,
    /// OVMF HTTP boot: arch 16, `HTTPClient`.
    OvmfHttp,
    /// iPXE: `PXEClient` vendor class, User Class `iPXE`.
    Ipxe,
}

fn opt(out: &mut Vec<u8>, code: u16, d: &[u8]) {
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(&(d.len() as u16).to_be_bytes());
    out.extend_from_slice(d);
}

fn vendor(s: &str) -> Vec<u8> {
    let mut v = 343u32.to_be_bytes().to_vec();
    v.extend_from_slice(&(s.len() as u16).to_be_bytes());
    v.extend_from_slice(s.as_bytes());
    v
}

/// A client message as the firmware sends it: type `t` (1 Solicit, 3
/// Request, 5 Renew, ...), its DUID (DUID-UUID, no MAC in it: the server
/// finds the MAC from the link-local source), one IA_NA (with `addr` when
/// given) and the firmware's boot options.
pub fn message(
    fw: Firmware,
    t: u8,
    xid: u32,
    duid: &[u8],
    iaid: u32,
    addr: Option<Ipv6Addr>,
    server_id: Option<&[u8]>,
) -> Vec<u8> {
    let mut b = vec![t];
    b.extend_from_slice(&xid.to_be_bytes()[1..]);
    opt(&mut b, 1, duid);
    if let Some(s) = server_id {
        opt(&mut b, 2, s);
    }
    let mut ia = iaid.to_be_bytes().to_vec();
    ia.extend_from_slice(&[0; 8]);
    if let Some(a) = addr {
        let mut d = a.octets().to_vec();
        d.extend_from_slice(&[0; 8]);
        opt(&mut ia, 5, &d);
    }
    opt(&mut b, 3, &ia);
    opt(&mut b, 8, &[0, 0]);
    match fw {
        Firmware::OvmfPxe => {
            opt(&mut b, 6, &[0, 59, 0, 60, 0, 23, 0, 16]);
            opt(&mut b, 62, &[1, 3, 0]);
            opt(&mut b, 61, &[0, 7]);
            opt(&mut b, 16, &vendor("PXEClient:Arch:00007:UNDI:003000"));
        }
        Firmware::OvmfHttp => {
            opt(&mut b, 6, &[0, 59, 0, 60, 0, 23, 0, 16]);
            opt(&mut b, 62, &[1, 3, 0]);
            opt(&mut b, 61, &[0, 16]);
            opt(&mut b, 16, &vendor("HTTPClient:Arch:00016:UNDI:003000"));
        }
        Firmware::Ipxe => {
            opt(&mut b, 6, &[0, 23, 0, 24, 0, 59, 0, 60]);
            opt(&mut b, 16, &vendor("PXEClient:Arch:00007:UNDI:003010"));
            opt(&mut b, 61, &[0, 7]);
            opt(&mut b, 62, &[1, 3, 10]);
            opt(&mut b, 15, &[0, 4, b'i', b'P', b'X', b'E']);
        }
    }
    b
}

/// `b` without its IA_NA, as EDK2 sends its boot-service Request.
pub fn without_ia(b: &[u8]) -> Vec<u8> {
    let mut out = b[..4].to_vec();
    for (code, data) in metalherd::dhcp::v6::message::options(&b[4..]) {
        if code != 3 {
            opt(&mut out, code, data.unwrap());
        }
    }
    out
}

/// A UDP socket on `[::]:port` on `iface`, in the calling thread's namespace.
pub fn socket(iface: &str, port: u16) -> UdpSocket {
    let s = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.set_only_v6(true).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind_device(Some(iface.as_bytes())).unwrap();
    s.bind(&SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0).into())
        .unwrap();
    let s: UdpSocket = s.into();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s
}

/// Send `b` to `to` and wait (up to `wait`) for a reply with the same
/// transaction id; the reply decoded.
pub fn exchange(s: &UdpSocket, b: &[u8], to: SocketAddrV6, wait: Duration) -> Option<Msg> {
    let xid = u32::from_be_bytes([0, b[1], b[2], b[3]]);
    let deadline = std::time::Instant::now() + wait;
    let mut buf = [0u8; 2048];
    while std::time::Instant::now() < deadline {
        s.send_to(b, to).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(1);
        while std::time::Instant::now() < until {
            if let Ok((n, _)) = s.recv_from(&mut buf)
                && let Ok(m) = Msg::decode(&buf[..n])
                && m.xid == xid
            {
                return Some(m);
            }
        }
    }
    None
}

/// ff02::1:2 on the interface `iface` (of the calling thread's namespace).
pub fn all_servers(iface: &str) -> SocketAddrV6 {
    let index = nix::net::if_::if_nametoindex(iface).unwrap();
    SocketAddrV6::new("ff02::1:2".parse().unwrap(), 547, 0, index)
}

/// The first address of the first IA of a reply.
pub fn leased(m: &Msg) -> Option<Ipv6Addr> {
    m.ia_na.first().and_then(|ia| ia.addrs.first().copied())
}

/// ISC `dhclient -6`, one attempt of at most 10 s, that leaves the
/// interface alone and writes what it was given to an env file; its
/// variables (`new_ip6_address`, `new_dhcp6_bootfile_url`, ...) once
/// bound, `None` when it got nothing.
pub fn dhclient6(
    ns: &Netns,
    iface: &str,
    dir: &Path,
    extra_conf: &str,
) -> Option<HashMap<String, String>> {
    let dhclient = super::require_tool("dhclient");
    let conf = dir.join("dh6.conf");
    let script = dir.join("dh6.sh");
    let env = dir.join("dh6.env");
    std::fs::write(
        &conf,
        format!("timeout 10;\nalso request dhcp6.bootfile-url;\n{extra_conf}"),
    )
    .unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$reason\" in BOUND6|REBOOT6|RENEW6) env > '{0}.tmp'; mv '{0}.tmp' '{0}';; esac\nexit 0\n",
            env.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = ns.command("timeout");
    cmd.args(["-s", "TERM", "20"])
        .arg(&dhclient)
        .args(["-6", "-1", "-d", "-v", "-cf"])
        .arg(&conf)
        .arg("-lf")
        .arg(dir.join("dh6.leases"))
        .arg("-pf")
        .arg(dir.join("dh6.pid"))
        .arg("-sf")
        .arg(&script)
        .arg(iface);
    let mut g = ChildGuard::spawn("dhclient6", &mut cmd, &dir.join("dh6.log"));
    let got = wait_for(Duration::from_secs(25), || {
        if env.exists() {
            return Some(true);
        }
        (!g.running()).then_some(false)
    });
    // SIGTERM reaches dhclient through `timeout`; a SIGKILL would leave it
    // running, holding port 546 on the interface.
    g.terminate(Duration::from_secs(5));
    if let Some(pid) = std::fs::read_to_string(dir.join("dh6.pid"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        && std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .is_ok_and(|c| c.trim() == "dhclient")
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    if got != Some(true) {
        return None;
    }
    let text = std::fs::read_to_string(&env).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
            .collect(),
    )
}

/// `perfdhcp -6`: Solicit-Advertise-Request-Reply exchanges of one client
/// (DUID-LLT with `mac`) on `iface`, two started a second apart (`-n 1`
/// alone stops sending once its exit condition is met, which can be before
/// the Advertise arrives, so its Request may never go out); the addresses
/// of its leases from the Request-Reply exchanges (`-x l`), and its output.
pub fn perfdhcp6(ns: &Netns, iface: &str, mac: &str) -> (Vec<Ipv6Addr>, String) {
    let perfdhcp = super::require_tool("perfdhcp");
    let out = ns
        .command("timeout")
        .args(["-s", "KILL", "30"])
        .arg(&perfdhcp)
        .args([
            "-6", "-l", iface, "-r", "1", "-n", "2", "-R", "1", "-W", "2000000",
        ])
        .args(["-x", "l", "-b"])
        .arg(format!("mac={mac}"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let leases = text
        .split("***Leases for REQUEST-REPLY***")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(',').nth(1)?.parse().ok())
        .collect();
    (leases, text)
}
