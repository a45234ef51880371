//! DHCP clients for tests, all running inside the test's network namespaces:
//! a thread that joins a namespace, a small client that crafts PXE-like
//! requests (option 60/93/97, relays with giaddr and option 82), a capture
//! of every DHCP reply on a link (AF_PACKET), and busybox udhcpc.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dhcproto::v4::{Message, MessageType};
use dhcproto::{Decodable, Decoder};
use socket2::{Domain, Protocol, Socket, Type};

/// Run `f` on a thread that has joined network namespace `ns`.
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).expect("open netns");
        nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        f()
    })
}

/// A request to craft.
#[derive(Clone, Debug)]
pub struct Req {
    pub msg_type: u8,
    pub mac: [u8; 6],
    pub xid: u32,
    pub ciaddr: Ipv4Addr,
    pub giaddr: Ipv4Addr,
    pub hops: u8,
    pub broadcast: bool,
    pub opts: Vec<(u8, Vec<u8>)>,
}

impl Req {
    pub fn new(msg_type: u8, mac: [u8; 6]) -> Req {
        Req {
            msg_type,
            mac,
            xid: u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) ^ 0x5a5a_0000,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            hops: 0,
            broadcast: true,
            opts: Vec::new(),
        }
    }

    /// PXE firmware's options: vendor class `PXEClient`, architecture, UUID.
    pub fn pxe(mut self, arch: u16) -> Req {
        self.opts.push((
            60,
            format!("PXEClient:Arch:{arch:05}:UNDI:003016").into_bytes(),
        ));
        self.opts.push((93, arch.to_be_bytes().to_vec()));
        self.opts.push((94, vec![1, 3, 16]));
        let mut uuid = vec![0u8];
        uuid.extend_from_slice(&[0x11; 16]);
        self.opts.push((97, uuid));
        self
    }

    pub fn opt(mut self, code: u8, data: &[u8]) -> Req {
        self.opts.push((code, data.to_vec()));
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; 240];
        b[0] = 1;
        b[1] = 1;
        b[2] = 6;
        b[3] = self.hops;
        b[4..8].copy_from_slice(&self.xid.to_be_bytes());
        if self.broadcast {
            b[10] = 0x80;
        }
        b[12..16].copy_from_slice(&self.ciaddr.octets());
        b[24..28].copy_from_slice(&self.giaddr.octets());
        b[28..34].copy_from_slice(&self.mac);
        b[236..240].copy_from_slice(&[99, 130, 83, 99]);
        b.extend_from_slice(&[53, 1, self.msg_type]);
        for (c, d) in &self.opts {
            b.push(*c);
            b.push(d.len() as u8);
            b.extend_from_slice(d);
        }
        b.push(255);
        b.resize(b.len().max(300), 0);
        b
    }
}

/// A UDP socket bound to `port` on `iface` (in the current namespace).
pub fn bound_socket(iface: &str, ip: Ipv4Addr, port: u16) -> UdpSocket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).expect("socket");
    s.set_reuse_address(true).unwrap();
    s.set_broadcast(true).unwrap();
    s.bind_device(Some(iface.as_bytes())).unwrap();
    s.bind(&SocketAddrV4::new(ip, port).into())
        .unwrap_or_else(|e| panic!("bind {ip}:{port} on {iface}: {e}"));
    let u: UdpSocket = s.into();
    u.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    u
}

pub fn decode(b: &[u8]) -> Message {
    Message::decode(&mut Decoder::new(b)).expect("reply decodes")
}

/// Send `req` to `to` and wait up to `wait` for a reply with its xid.
/// Retries the send every second, as clients do.
pub fn exchange(
    sock: &UdpSocket,
    req: &Req,
    to: SocketAddr,
    wait: Duration,
) -> Option<(Message, Vec<u8>, SocketAddr)> {
    let deadline = Instant::now() + wait;
    let mut next_send = Instant::now();
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        if Instant::now() >= next_send {
            sock.send_to(&req.bytes(), to).expect("send");
            next_send = Instant::now() + Duration::from_secs(1);
        }
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let m = decode(&buf[..n]);
            if m.xid() == req.xid && m.opcode() == dhcproto::v4::Opcode::BootReply {
                return Some((m, buf[..n].to_vec(), from));
            }
        }
    }
    None
}

/// Raw bytes of option `code` in an encoded message (first occurrence).
pub fn raw_option(b: &[u8], code: u8) -> Option<Vec<u8>> {
    let mut i = 240;
    while i < b.len() {
        match b[i] {
            0 => i += 1,
            255 => return None,
            c => {
                let len = *b.get(i + 1)? as usize;
                let d = b.get(i + 2..i + 2 + len)?;
                if c == code {
                    return Some(d.to_vec());
                }
                i += 2 + len;
            }
        }
    }
    None
}

/// One DHCP reply seen on a link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub msg_type: MessageType,
    pub mac: [u8; 6],
    pub yiaddr: Ipv4Addr,
    pub lease_time: Option<u32>,
}

/// Captures every DHCP reply (to port 68, or 67 for relays) seen in a namespace,
/// until dropped.
pub struct ReplyCapture {
    pub seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReplyCapture {
    pub fn start(ns: &str) -> ReplyCapture {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, st2) = (seen.clone(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = in_netns(ns, move || {
            let proto = Protocol::from(i32::from(0x0800u16.to_be()));
            let mut s = Socket::new(Domain::PACKET, Type::DGRAM, Some(proto)).expect("AF_PACKET");
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let _ = s.set_recv_buffer_size(8 << 20);
            ready_tx.send(()).unwrap();
            let mut buf = [0u8; 4096];
            while !st2.load(Ordering::Relaxed) {
                let Ok(n) = s.read(&mut buf) else { continue };
                if let Some(x) = parse_ip_dhcp(&buf[..n]) {
                    s2.lock().unwrap().push(x);
                }
            }
        });
        ready_rx.recv().unwrap();
        ReplyCapture {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub fn snapshot(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for ReplyCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn parse_ip_dhcp(p: &[u8]) -> Option<Seen> {
    let ihl = usize::from(*p.first()? & 0x0f) * 4;
    if *p.get(9)? != 17 {
        return None;
    }
    let udp = p.get(ihl..)?;
    let dport = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    // Port 68 for clients, 67 for relays (perfdhcp acts as one).
    if dport != 68 && dport != 67 {
        return None;
    }
    let m = Message::decode(&mut Decoder::new(udp.get(8..)?)).ok()?;
    if m.opcode() != dhcproto::v4::Opcode::BootReply {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(m.chaddr().get(..6)?);
    let lease_time = match m.opts().get(dhcproto::v4::OptionCode::AddressLeaseTime) {
        Some(dhcproto::v4::DhcpOption::AddressLeaseTime(t)) => Some(*t),
        _ => None,
    };
    Some(Seen {
        msg_type: m.opts().msg_type()?,
        mac,
        yiaddr: m.yiaddr(),
        lease_time,
    })
}

/// Every address ACKed to more than one client: `ip -> macs`.
pub fn double_holders(seen: &[Seen]) -> HashMap<Ipv4Addr, Vec<[u8; 6]>> {
    let mut by_ip: HashMap<Ipv4Addr, Vec<[u8; 6]>> = HashMap::new();
    for s in seen.iter().filter(|s| s.msg_type == MessageType::Ack) {
        let v = by_ip.entry(s.yiaddr).or_default();
        if !v.contains(&s.mac) {
            v.push(s.mac);
        }
    }
    by_ip.retain(|_, v| v.len() > 1);
    by_ip
}

/// Run busybox udhcpc once in `ns` on `iface` (no address is configured:
/// the script only records what it got). Returns the variables of the
/// `bound` event, or None when no lease was obtained.
pub fn udhcpc(
    ns: &str,
    iface: &str,
    dir: &Path,
    extra: &[&str],
) -> Option<HashMap<String, String>> {
    let udhcpc = super::require_tool("udhcpc");
    let script = dir.join("udhcpc.sh");
    let out = dir.join("udhcpc.env");
    let _ = std::fs::remove_file(&out);
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ \"$1\" = bound ]; then env > {}.tmp; mv {}.tmp {}; fi\nexit 0\n",
            out.display(),
            out.display(),
            out.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = std::process::Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(&udhcpc)
        .args(["-f", "-q", "-n", "-t", "4", "-T", "1", "-i", iface, "-s"])
        .arg(&script)
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run udhcpc");
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(&out).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// Send `req` once to `to` and collect every reply with its xid for `wait`.
pub fn collect(
    sock: &UdpSocket,
    req: &Req,
    to: SocketAddr,
    wait: Duration,
) -> Vec<(Message, Vec<u8>, SocketAddr)> {
    sock.send_to(&req.bytes(), to).expect("send");
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 2048];
    let mut out = Vec::new();
    while Instant::now() < deadline {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let m = decode(&buf[..n]);
            if m.xid() == req.xid && m.opcode() == dhcproto::v4::Opcode::BootReply {
                out.push((m, buf[..n].to_vec(), from));
            }
        }
    }
    out
}

/// Option 54 of a reply.
pub fn server_id(m: &Message) -> Option<Ipv4Addr> {
    match m.opts().get(dhcproto::v4::OptionCode::ServerIdentifier) {
        Some(dhcproto::v4::DhcpOption::ServerIdentifier(ip)) => Some(*ip),
        _ => None,
    }
}

/// The boot file of a reply: option 67, else the `file` field.
pub fn boot_file(m: &Message) -> Option<String> {
    match m.opts().get(dhcproto::v4::OptionCode::BootfileName) {
        Some(dhcproto::v4::DhcpOption::BootfileName(b)) => {
            Some(String::from_utf8_lossy(b).into_owned())
        }
        _ => m
            .fname()
            .map(|f| {
                String::from_utf8_lossy(f)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .filter(|f| !f.is_empty()),
    }
}

/// A busybox udhcpc that keeps running in `ns` on `iface` as a host's DHCP
/// client does: it puts the address it is given on the interface (so it
/// answers pings), renews at T1, rebinds, and drops the address on a NAK.
/// Its script appends one line per event to `events`:
/// `SECONDS EVENT [IP SERVER]`. Killed (by its PID) on drop.
pub struct UdhcpcDaemon {
    pub name: String,
    pub events: std::path::PathBuf,
    _guard: super::proc::ChildGuard,
}

impl UdhcpcDaemon {
    pub fn start(name: &str, ns: &str, iface: &str, dir: &Path, extra: &[&str]) -> UdhcpcDaemon {
        let udhcpc = super::require_tool("udhcpc");
        let script = dir.join(format!("{name}.sh"));
        let events = dir.join(format!("{name}.events"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\n\
                 now=$(date +%s.%N)\n\
                 case \"$1\" in\n\
                 deconfig) ip addr flush dev \"$interface\"; echo \"$now deconfig\" >> {ev} ;;\n\
                 bound|renew) ip addr flush dev \"$interface\"; ip addr add \"$ip/${{mask:-24}}\" dev \"$interface\"; echo \"$now $1 $ip $serverid\" >> {ev} ;;\n\
                 *) echo \"$now $1\" >> {ev} ;;\n\
                 esac\n\
                 exit 0\n",
                ev = events.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", ns])
            .arg(&udhcpc)
            .args(["-f", "-t", "3", "-T", "1", "-A", "1", "-i", iface, "-s"])
            .arg(&script)
            .args(extra);
        let guard =
            super::proc::ChildGuard::spawn(name, &mut cmd, &dir.join(format!("{name}.log")));
        UdhcpcDaemon {
            name: name.to_string(),
            events,
            _guard: guard,
        }
    }

    /// Every event so far: (seconds since the epoch, event, address).
    pub fn events(&self) -> Vec<(f64, String, Option<Ipv4Addr>)> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let t = f.next()?.parse().ok()?;
                let ev = f.next()?.to_string();
                Some((t, ev, f.next().and_then(|a| a.parse().ok())))
            })
            .collect()
    }

    /// The address of the last `bound` or `renew`, unless a later event
    /// took it away.
    pub fn address(&self) -> Option<Ipv4Addr> {
        let mut held = None;
        for (_, ev, ip) in self.events() {
            match ev.as_str() {
                "bound" | "renew" => held = ip,
                "deconfig" | "nak" | "leasefail" => held = None,
                _ => {}
            }
        }
        held
    }
}

/// Replays the events of every client in time order and returns each
/// moment two of them held the same address: (time, address, clients).
pub fn shared_addresses(clients: &[&UdhcpcDaemon]) -> Vec<(f64, Ipv4Addr, Vec<String>)> {
    let mut all: Vec<(f64, usize, String, Option<Ipv4Addr>)> = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        all.extend(c.events().into_iter().map(|(t, e, ip)| (t, i, e, ip)));
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut held: Vec<Option<Ipv4Addr>> = vec![None; clients.len()];
    let mut out = Vec::new();
    for (t, i, ev, ip) in all {
        match ev.as_str() {
            "bound" | "renew" => held[i] = ip,
            "deconfig" | "nak" | "leasefail" => held[i] = None,
            _ => {}
        }
        if let Some(a) = held[i] {
            let with: Vec<String> = (0..clients.len())
                .filter(|j| held[*j] == Some(a))
                .map(|j| clients[j].name.clone())
                .collect();
            if with.len() > 1 {
                out.push((t, a, with));
            }
        }
    }
    out
}
