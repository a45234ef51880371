//! Counters of the IPMI client under the `metalherd_ipmi_` prefix. Labels
//! are bounded: the error kind from [`IpmiError::label`], never an address.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::error::IpmiError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

struct Metrics {
    dropped: Family<ReasonLabels, Counter>,
    retransmits: Counter,
    sessions: Counter,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| Metrics {
    dropped: Family::default(),
    retransmits: Counter::default(),
    sessions: Counter::default(),
});

/// Register the IPMI counters (clones share the same values).
pub fn register(registry: &mut Registry) {
    registry.register(
        "metalherd_ipmi_dropped_packets",
        "IPMI datagrams dropped (stray, garbled, unauthenticated), by reason",
        METRICS.dropped.clone(),
    );
    registry.register(
        "metalherd_ipmi_retransmits",
        "IPMI requests sent again after a silent attempt",
        METRICS.retransmits.clone(),
    );
    registry.register(
        "metalherd_ipmi_sessions",
        "RMCP+ sessions established",
        METRICS.sessions.clone(),
    );
}

pub(crate) fn dropped(e: &IpmiError) {
    tracing::debug!(reason = e.label(), error = %e, "dropped IPMI datagram");
    METRICS
        .dropped
        .get_or_create(&ReasonLabels { reason: e.label() })
        .inc();
}

pub(crate) fn retransmitted() {
    METRICS.retransmits.inc();
}

pub(crate) fn session_opened() {
    METRICS.sessions.inc();
}

/// Current count of drops for one reason (tests read this).
pub fn dropped_count(reason: &'static str) -> u64 {
    METRICS
        .dropped
        .get_or_create(&ReasonLabels { reason })
        .get()
}

/// Retransmissions so far (tests read this).
pub fn retransmit_count() -> u64 {
    METRICS.retransmits.get()
}
