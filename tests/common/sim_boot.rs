//! A simulated server's network boot below HTTP, for fleet-scale runs:
//! the firmware's and then iPXE's DHCP DISCOVER/REQUEST answered by
//! metalherd's DHCP policy (the sans-IO core `serve` runs behind its UDP
//! socket, with the real boot directory and a lease table), and a TFTP
//! read of the boot file from metalherd's TFTP server over loopback with a
//! minimal RFC 1350 client (lock-step, 512-byte blocks, bounded retries).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::time::Duration;

use dhcproto::v4::{self, DhcpOption, MessageType};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};
use metalherd::dhcp::config::{DhcpConfig, DhcpSettings};
use metalherd::dhcp::lease::LeaseTable;
use metalherd::dhcp::policy::{Policy, Via};
use metalherd::directory::{BootRecorder, Directory};
use tokio::net::UdpSocket;

/// metalherd's DHCP decision with its lease table, answering in-process.
pub struct DhcpSim {
    policy: Policy,
    leases: Mutex<LeaseTable>,
    directory: Directory,
    recorder: BootRecorder,
}

/// What a DHCP exchange ended with.
#[derive(Debug)]
pub struct Ack {
    pub address: Ipv4Addr,
    /// The boot file (`file` field): a TFTP name or an HTTP URL.
    pub file: String,
}

impl DhcpSim {
    /// Authoritative for `subnet` (which must hold the machines'
    /// reservations), iPXE chained to `http_boot_url`.
    pub fn new(
        subnet: &str,
        http_boot_url: &str,
        directory: Directory,
        recorder: BootRecorder,
    ) -> DhcpSim {
        let y =
            format!("interface: lo\nhttpBootUrl: {http_boot_url}\nsubnets:\n- subnet: {subnet}\n");
        let c: DhcpConfig = serde_yaml::from_str(&y).expect("DHCP config");
        let settings = DhcpSettings::try_from(c).expect("DHCP settings");
        DhcpSim {
            policy: Policy::new(settings, Ipv4Addr::LOCALHOST),
            leases: Mutex::new(LeaseTable::new()),
            directory,
            recorder,
        }
    }

    fn handle(&self, msg: &v4::Message) -> Result<v4::Message, String> {
        let mut buf = Vec::new();
        msg.encode(&mut Encoder::new(&mut buf))
            .map_err(|e| e.to_string())?;
        let now = jiff::Timestamp::now().as_second().max(0) as u64;
        let out = {
            let mut leases = self.leases.lock().unwrap();
            self.policy
                .handle(&buf, Via::Port67, &self.directory, &mut leases, now)
        };
        // As the DHCP server does: boot-history notes go to the recorder.
        if let Some(n) = out.notice {
            metalherd::dhcp::server::record_notice(&self.recorder, n);
        }
        let reply = out
            .reply
            .ok_or_else(|| format!("no reply: {:?}", out.dropped))?;
        v4::Message::decode(&mut Decoder::new(&reply.bytes)).map_err(|e| e.to_string())
    }

    /// DISCOVER, OFFER, REQUEST, ACK for `mac`, as PXE firmware (UEFI
    /// x86-64) or, with `ipxe`, as the iPXE it chain-loads.
    pub fn exchange(&self, mac: [u8; 6], xid: u32, ipxe: bool) -> Result<Ack, String> {
        let request = |t: MessageType, extra: &[DhcpOption]| {
            let mut m = v4::Message::default();
            m.set_xid(xid).set_chaddr(&mac);
            m.set_flags(v4::Flags::default().set_broadcast());
            let o = m.opts_mut();
            o.insert(DhcpOption::MessageType(t));
            o.insert(DhcpOption::ClassIdentifier(
                b"PXEClient:Arch:00007:UNDI:003016".to_vec(),
            ));
            o.insert(DhcpOption::ClientSystemArchitecture(7u16.into()));
            if ipxe {
                o.insert(DhcpOption::UserClass(b"iPXE".to_vec()));
            }
            for e in extra {
                o.insert(e.clone());
            }
            m
        };
        let offer = self.handle(&request(MessageType::Discover, &[]))?;
        if offer.opts().msg_type() != Some(MessageType::Offer) {
            return Err(format!("expected OFFER, got {:?}", offer.opts().msg_type()));
        }
        let server = match offer.opts().get(v4::OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(ip)) => *ip,
            _ => return Err("OFFER without a server identifier".into()),
        };
        let ack = self.handle(&request(
            MessageType::Request,
            &[
                DhcpOption::ServerIdentifier(server),
                DhcpOption::RequestedIpAddress(offer.yiaddr()),
            ],
        ))?;
        if ack.opts().msg_type() != Some(MessageType::Ack) {
            return Err(format!("expected ACK, got {:?}", ack.opts().msg_type()));
        }
        let file = String::from_utf8_lossy(ack.fname().unwrap_or_default())
            .trim_end_matches('\0')
            .to_string();
        Ok(Ack {
            address: ack.yiaddr(),
            file,
        })
    }
}

/// Read `file` from the TFTP server at `server`, from address `me`
/// (octet mode, no options); returns its size. Bounded: each packet is
/// retried at most 8 times.
pub async fn tftp_get(me: Ipv4Addr, server: SocketAddr, file: &str) -> Result<usize, String> {
    let sock = UdpSocket::bind(SocketAddr::from((me, 0)))
        .await
        .map_err(|e| e.to_string())?;
    let mut rrq = vec![0, 1];
    rrq.extend_from_slice(file.as_bytes());
    rrq.push(0);
    rrq.extend_from_slice(b"octet\0");
    let mut last: Vec<u8> = rrq;
    let mut to = server;
    let mut expect: u16 = 1;
    let mut size = 0usize;
    let mut buf = vec![0u8; 600];
    let mut tries = 0;
    loop {
        sock.send_to(&last, to).await.map_err(|e| e.to_string())?;
        let got = tokio::time::timeout(Duration::from_secs(2), sock.recv_from(&mut buf)).await;
        let Ok(Ok((n, from))) = got else {
            tries += 1;
            if tries > 8 {
                return Err(format!("TFTP {file}: no answer"));
            }
            continue;
        };
        let p = &buf[..n];
        match (p.first(), p.get(1)) {
            (Some(0), Some(3)) if n >= 4 => {
                let block = u16::from_be_bytes([p[2], p[3]]);
                to = from;
                let ack = vec![0, 4, p[2], p[3]];
                if block == expect {
                    tries = 0;
                    size += n - 4;
                    expect = expect.wrapping_add(1);
                    if n - 4 < 512 {
                        sock.send_to(&ack, to).await.map_err(|e| e.to_string())?;
                        return Ok(size);
                    }
                }
                last = ack;
            }
            (Some(0), Some(5)) => {
                return Err(format!(
                    "TFTP {file}: error {}",
                    String::from_utf8_lossy(&p[4..])
                ));
            }
            _ => {
                tries += 1;
                if tries > 8 {
                    return Err(format!("TFTP {file}: unexpected packets"));
                }
            }
        }
    }
}
