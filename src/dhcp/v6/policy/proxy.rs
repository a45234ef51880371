//! Boot-options-only mode, beside a site's DHCPv6 server: metalherd never
//! hands out an address. EDK2 PXE and HTTP boot get an Advertise without an
//! IA_NA and without a status code (EDK2 drops an offer with any
//! non-success status), carrying our Server ID, the Boot File URL and the
//! Vendor Class; EDK2 combines it with the site server's address offer.
//! EDK2 PXE then sends its Request to port 4011 with our Server ID and
//! needs a Reply with the URL there. iPXE ignores an Advertise without an
//! address, so it is served only when it asks statelessly
//! (Information-Request, RA with O and not M).

use super::{Ctx, Outcome6, Skip6, Via6};
use crate::api::BootStep;
use crate::dhcp::v6::boot::ClientKind6;
use crate::dhcp::v6::message::MessageType;

pub(super) fn proxy(c: &Ctx) -> Result<Outcome6, Skip6> {
    if !c.kind.is_boot() {
        return Err(Skip6::NotBootClient);
    }
    let t = c.m.msg.msg_type.ok_or(Skip6::Unhandled)?;
    let ours = c.m.msg.server_id.as_ref() == Some(&c.p.server_duid);
    let reply = match (c.via, t) {
        (Via6::Port547, MessageType::Solicit) if c.kind != ClientKind6::Ipxe => {
            MessageType::Advertise
        }
        (Via6::Port4011, MessageType::Request) if ours => MessageType::Reply,
        (Via6::Port547, MessageType::InformationRequest) if ours || c.m.msg.server_id.is_none() => {
            MessageType::Reply
        }
        (_, MessageType::Request | MessageType::Renew | MessageType::Release)
        | (_, MessageType::Decline | MessageType::InformationRequest) => {
            return Err(Skip6::OtherServer);
        }
        _ => return Err(Skip6::Unhandled),
    };
    c.admit(None)?;
    let a = c.answer(reply, true, &[]);
    if a.boot_url.is_none() {
        return Err(Skip6::NoBootFile);
    }
    Ok(Outcome6 {
        notice: c.notice(
            if reply == MessageType::Advertise {
                BootStep::DhcpOffer
            } else {
                BootStep::DhcpAck
            },
            None,
        ),
        warning: c.warning(),
        reply: Some(c.finish(&a)),
        ..Outcome6::default()
    })
}
