//! Counters of the IPMI client, `metalherd_ipmi_*` once registered. Labels
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

/// Register the IPMI counters in the process registry (which carries the
/// `metalherd` prefix): `metalherd_ipmi_*`. Clones share the same values.
pub fn register(registry: &mut Registry) {
    let r = registry.sub_registry_with_prefix("ipmi");
    r.register(
        "dropped_packets",
        "IPMI datagrams dropped (stray, garbled, unauthenticated), by reason",
        METRICS.dropped.clone(),
    );
    r.register(
        "retransmits",
        "IPMI requests sent again after a silent attempt",
        METRICS.retransmits.clone(),
    );
    r.register(
        "sessions",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_metalherd_ipmi_prefix() {
        let mut reg = Registry::with_prefix("metalherd");
        register(&mut reg);
        dropped(&IpmiError::Replay { seq: 1 });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
        assert!(
            text.contains("metalherd_ipmi_dropped_packets_total{reason=\"replay\"}"),
            "{text}"
        );
        assert!(text.contains("metalherd_ipmi_sessions_total"), "{text}");
    }
}
