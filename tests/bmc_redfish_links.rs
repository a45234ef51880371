//! Story: a BMC (or whoever answers in its place) links elsewhere. Absolute
//! `@odata.id` links, session locations and task monitors naming another
//! host are refused with an error saying so, and that host never sees a
//! connection (no password, no session token leaves for it); an oversized
//! answer is refused rather than read into memory. Against the local fake
//! BMC in tests/common/redfish_server.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::redfish_server::{RedfishServer, ServerOptions};
use metalherd::bmc::redfish::logic::RetryPolicy;
use metalherd::bmc::redfish::{RedfishBmc, TlsMode};
use metalherd::bmc::{Bmc, BmcError, Credentials, PowerAction, Timing};

/// Another host: counts every connection made to it.
async fn elsewhere() -> (String, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let seen = Arc::new(AtomicUsize::new(0));
    let n = seen.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = l.accept().await {
            n.fetch_add(1, Ordering::SeqCst);
        }
    });
    (url, seen)
}

fn bmc(srv: &RedfishServer, pw: &str, system: Option<&str>) -> RedfishBmc {
    RedfishBmc::with_retry(
        srv.base(),
        system.map(str::to_string),
        Credentials::new("root", pw),
        &TlsMode::SystemRoots,
        Timing {
            power_deadline: Duration::from_secs(10),
            poll_interval: Duration::from_millis(50),
            request_timeout: Duration::from_secs(5),
        },
        RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        },
    )
    .unwrap()
}

fn refused_elsewhere(e: &BmcError) {
    let text = e.to_string();
    assert!(matches!(e, BmcError::Protocol { .. }), "{e:?}");
    assert!(
        text.contains("another host") && text.contains("127.0.0.2"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_to_another_host_are_refused_and_that_host_sees_nothing() {
    let (foreign, seen) = elsewhere().await;
    let opts = ServerOptions {
        foreign: Some(foreign),
        ..Default::default()
    };
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;

    // The Systems collection names a system on another host.
    let b = bmc(&srv, &pw, None);
    refused_elsewhere(&b.power_state().await.unwrap_err());
    // The session's location is elsewhere: logging out does not go there.
    refused_elsewhere(&b.close().await.unwrap_err());
    // A power action's task monitor is elsewhere: not polled.
    let b = bmc(&srv, &pw, Some("/redfish/v1/Systems/1"));
    refused_elsewhere(&b.power(PowerAction::On).await.unwrap_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a request went to the other host"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_answer_is_refused() {
    let opts = ServerOptions {
        system_padding: 5 << 20,
        ..Default::default()
    };
    let pw = opts.password.clone();
    let srv = RedfishServer::start(opts).await;
    let b = bmc(&srv, &pw, Some("/redfish/v1/Systems/1"));
    let e = b.power_state().await.unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}
