//! `POST /callhome/{installed|failed|booted|wiped}?mac=..&token=..[&reason=..]`:
//! the installer (installed / failed, with a reason in the query or the
//! body), the installed OS (booted) and the wiper of a deprovisioning boot
//! (wiped / failed) report back (which word fits which boot: see
//! `access::callhome`). `installed`, `wiped` and `failed`
//! close the boot (`status.boot.completedAt`, `outcome`), which kills its
//! token for everything but `booted`; the controller acts on that. Every
//! accepted call-home is a boot step, taken once and only in the order the
//! boot allows (see `access::callhome`). Same access rule as Ignition
//! (see `access.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use tracing::Instrument;

use super::access::{self, CallHome, Need};
use super::metrics::Endpoint;
use super::{BootState, Params, boot_event, reply};
use crate::api::{BootPurpose, BootStep, MacAddr, Machine};
use crate::store::TypedStore;
use crate::store::events::EventType;

/// A reason as given by the machine, made safe for status and events:
/// printable ASCII, at most 200 characters.
fn clean_reason(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                ' '
            }
        })
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
}

pub async fn handler(
    State(st): State<Arc<BootState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(what): Path<String>,
    RawQuery(q): RawQuery,
    body: Bytes,
) -> Response {
    let r = serve(&st, peer, &what, q.as_deref().unwrap_or_default(), &body).await;
    st.metrics.request(Endpoint::callhome, r.status());
    r
}

async fn serve(st: &BootState, peer: SocketAddr, what: &str, q: &str, body: &[u8]) -> Response {
    let Some(what) = BootStep::from_callhome(what) else {
        return st.bad_request("call-home must be installed, failed, booted or wiped");
    };
    let p = Params::parse(q);
    let mac = match p.mac() {
        Ok(m) => m,
        Err(r) => return st.bad_request(r),
    };
    let Some(token) = p.get("token") else {
        return st.bad_request("token: missing");
    };
    let reason = clean_reason(p.get("reason").unwrap_or(&String::from_utf8_lossy(body)));
    let span = tracing::info_span!("callhome", mac = %MacAddr(mac).hyphenated(), peer = %peer.ip(), what = what.as_str());
    record(st, peer, what, mac, token, reason)
        .instrument(span)
        .await
}

/// A well-formed call-home, inside its span: check it and record it.
async fn record(
    st: &BootState,
    peer: SocketAddr,
    what: BootStep,
    mac: [u8; 6],
    token: &str,
    reason: String,
) -> Response {
    let Some(entry) = st.directory.by_mac(&mac) else {
        return st.refuse_unknown("call-home", peer);
    };
    let m: Machine = match st.store.get_obj(&entry.namespace, &entry.name).await {
        Ok(m) => m,
        Err(e) => return st.store_error(e),
    };
    let checked = st
        .authorize(&m, &mac, token, peer, Need::AnyBoot)
        .and_then(|b| {
            let history = m
                .status
                .as_ref()
                .map(|s| s.boot_history.as_slice())
                .unwrap_or_default();
            Ok((b.clone(), access::callhome(&what, b, history)?))
        });
    let (boot, outcome) = match checked {
        Ok((b, CallHome::Record(o))) => (b, o),
        Ok((_, CallHome::AlreadyRecorded)) => return reply(StatusCode::OK, "already recorded"),
        Err(why) => {
            return st
                .refuse(
                    &m,
                    "CallHomeRefused",
                    &format!("call-home {}", what.callhome_word().unwrap_or_default()),
                    peer,
                    why,
                )
                .await;
        }
    };
    // The step goes into the boot record's write when there is one.
    let note = boot_event(what.clone(), &reason, None, Some(&boot.id));
    let mut noted = false;
    if outcome.is_none() {
        // `booted`, once: a retry racing this one finds it noted.
        let r = st
            .update_boot_noting(&entry, &boot.id, &note, |b| {
                if b.booted_at.is_some() {
                    return false;
                }
                b.booted_at = Some(jiff::Timestamp::now());
                true
            })
            .await;
        match r {
            Ok(true) => noted = true,
            Ok(false) => return reply(StatusCode::OK, "already recorded"),
            Err(e) => return st.store_error(e),
        }
    }
    if let Some(outcome) = outcome {
        let r = st
            .update_boot_noting(&entry, &boot.id, &note, |b| {
                if b.completed_at.is_some() {
                    return false;
                }
                b.completed_at = Some(jiff::Timestamp::now());
                b.outcome = Some(outcome.clone());
                true
            })
            .await;
        match r {
            Ok(n) => noted = n,
            Err(e) => return st.store_error(e),
        }
        if what == BootStep::Failed {
            let msg = if reason.is_empty() {
                "no reason given".to_string()
            } else {
                reason.clone()
            };
            let why = if boot.purpose == BootPurpose::Deprovision {
                "WipeFailed"
            } else {
                "InstallFailed"
            };
            st.event(&m, EventType::Warning, why, &msg).await;
        }
    }
    if !noted {
        st.record_event(&entry, note);
    }
    tracing::info!("call-home recorded");
    reply(StatusCode::OK, "recorded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_cleaned() {
        assert_eq!(clean_reason("disk\nnot found\0"), "disk not found");
        assert_eq!(clean_reason(&"x".repeat(500)).len(), 200);
        assert_eq!(
            BootStep::from_callhome("installed"),
            Some(BootStep::Installed)
        );
        assert_eq!(BootStep::from_callhome("wiped"), Some(BootStep::Wiped));
        assert_eq!(BootStep::from_callhome("nope"), None);
    }
}
