//! The fault proxy ([`super::bmc_proxy`]) inside a network namespace, in
//! front of a BMC emulator that listens on that namespace's loopback (the
//! virtual rack's sushy-tools). A thread enters the namespace and runs
//! the proxy on its own current-thread runtime, so its listener and its
//! upstream connections are opened there. Stopped on drop.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::bmc_proxy::{BmcProxy, Recorder, Rule};

pub struct NsProxy {
    pub port: u16,
    /// What the proxy saw (requests with a body).
    pub seen: Recorder,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NsProxy {
    /// Proxy `upstream` (an address inside namespace `ns`) with `rules`,
    /// listening on 127.0.0.1 inside `ns`.
    pub fn start(ns: &str, upstream: url::Url, rules: Vec<Rule>) -> NsProxy {
        let path = format!("/var/run/netns/{ns}");
        let (port_tx, port_rx) = mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let proxy = BmcProxy::start(upstream).await;
                for r in rules {
                    proxy.add(r);
                }
                port_tx.send((proxy.port, proxy.recorder())).expect("port");
                let _ = stop_rx.await;
            });
        });
        let (port, seen) = port_rx.recv().expect("the proxy did not start");
        NsProxy {
            port,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for NsProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
