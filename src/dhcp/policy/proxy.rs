//! proxyDHCP mode: beside a site's DHCP server, metalherd answers
//! PXE-capable clients with boot information only (ProxyDHCP offers on port
//! 67, acknowledgements on 4011), never an address.

use dhcproto::v4::{DhcpOption, MessageType};

use super::{Ctx, Outcome, Via, admit, finish, notice};
use crate::api::BootStep;
use crate::dhcp::options::{self, ClientKind};
use crate::dhcp::packet::DropReason;

/// Boot information only, never an address; PXE-capable clients only.
pub(super) fn proxy(c: &Ctx) -> Result<Outcome, DropReason> {
    if ClientKind::of(c.req) == ClientKind::Plain {
        return Err(DropReason::NotPxe);
    }
    admit(c)?;
    let t = match (c.via, c.req.msg_type) {
        (Via::Port67, MessageType::Discover) => MessageType::Offer,
        (Via::Port4011, MessageType::Request | MessageType::Inform) => MessageType::Ack,
        (Via::Port67, MessageType::Request) if c.req.server_id() == Some(c.p.server_ip) => {
            MessageType::Ack
        }
        (Via::Port67, MessageType::Request) => return Err(DropReason::OtherServer),
        _ => return Err(DropReason::Unhandled),
    };
    let b = options::boot_info(c.req, &c.p.cfg, c.p.server_ip, c.secure_boot())?
        .ok_or(DropReason::NotPxe)?;
    let mut m = options::reply(c.req, t, c.p.server_ip);
    options::add_boot(&mut m, c.req, &b);
    // A proxy offer must say PXEClient even to iPXE, or firmware ignores it.
    if b.vendor_class.is_none() {
        m.opts_mut()
            .insert(DhcpOption::ClassIdentifier(b"PXEClient".to_vec()));
    }
    options::echo_relay_info(&mut m, c.req);
    Ok(Outcome {
        notice: notice(
            c,
            if t == MessageType::Offer {
                BootStep::DhcpOffer
            } else {
                BootStep::DhcpAck
            },
            &m,
        ),
        reply: Some(finish(c, &m, t)?),
        ..Outcome::default()
    })
}
