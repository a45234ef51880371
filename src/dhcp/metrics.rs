//! DHCP metrics (prometheus-client), under `metalherd_dhcp_`. Labels are
//! bounded: message type, drop reason, client kind; never a MAC or an IP.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub message_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// Cheap to clone; every clone updates the same counters.
#[derive(Clone, Default)]
pub struct DhcpMetrics {
    pub requests: Family<TypeLabel, Counter>,
    pub replies: Family<TypeLabel, Counter>,
    pub drops: Family<ReasonLabel, Counter>,
    pub lease_commits: Counter,
    pub lease_commit_errors: Counter,
    pub leases_bound: Gauge,
    pub discovered_dropped: Counter,
}

impl DhcpMetrics {
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("dhcp");
        r.register(
            "requests",
            "DHCP requests by message type",
            self.requests.clone(),
        );
        r.register(
            "replies",
            "DHCP replies sent by message type",
            self.replies.clone(),
        );
        r.register(
            "drops",
            "Packets dropped without a reply, by reason",
            self.drops.clone(),
        );
        r.register(
            "lease_commits",
            "Lease write transactions committed",
            self.lease_commits.clone(),
        );
        r.register(
            "lease_commit_errors",
            "Lease write transactions that failed",
            self.lease_commit_errors.clone(),
        );
        r.register(
            "leases_bound",
            "Bound, unexpired leases",
            self.leases_bound.clone(),
        );
        r.register(
            "discovered_dropped",
            "Discovered-hardware records dropped (queue full)",
            self.discovered_dropped.clone(),
        );
    }

    pub fn drop(&self, reason: &'static str) {
        self.drops.get_or_create(&ReasonLabel { reason }).inc();
    }
}

/// Stable label of a message type.
pub fn type_label(t: dhcproto::v4::MessageType) -> &'static str {
    use dhcproto::v4::MessageType as M;
    match t {
        M::Discover => "discover",
        M::Offer => "offer",
        M::Request => "request",
        M::Decline => "decline",
        M::Ack => "ack",
        M::Nak => "nak",
        M::Release => "release",
        M::Inform => "inform",
        _ => "other",
    }
}
