//! DHCPv6 metrics (prometheus-client), under `metalherd_dhcp6_`. Labels
//! are bounded: message type, drop reason; never a MAC, DUID or address.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::message::MessageType;
use crate::dhcp::metrics::{ReasonLabel, TypeLabel};

/// Stable label of a message type.
pub fn type_label(t: MessageType) -> &'static str {
    use MessageType::*;
    match t {
        Solicit => "solicit",
        Advertise => "advertise",
        Request => "request",
        Confirm => "confirm",
        Renew => "renew",
        Rebind => "rebind",
        Reply => "reply",
        Release => "release",
        Decline => "decline",
        InformationRequest => "information_request",
        RelayForw => "relay_forw",
        Reconfigure | RelayRepl => "other",
    }
}

/// Cheap to clone; every clone updates the same counters.
#[derive(Clone, Default)]
pub struct Dhcp6Metrics {
    pub requests: Family<TypeLabel, Counter>,
    pub replies: Family<TypeLabel, Counter>,
    pub drops: Family<ReasonLabel, Counter>,
    pub lease_commits: Counter,
    pub lease_commit_errors: Counter,
    pub lease_sync_errors: Counter,
    pub leases_bound: Gauge,
}

impl Dhcp6Metrics {
    /// Count a request (`None`: it did not parse).
    pub fn requested(&self, t: Option<MessageType>) {
        let message_type = t.map(type_label).unwrap_or("malformed");
        self.requests
            .get_or_create(&TypeLabel { message_type })
            .inc();
    }

    pub fn replied(&self, t: MessageType) {
        let message_type = type_label(t);
        self.replies
            .get_or_create(&TypeLabel { message_type })
            .inc();
    }

    pub fn drop(&self, reason: &'static str) {
        self.drops.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("dhcp6");
        r.register("requests", "DHCPv6 messages by type", self.requests.clone());
        r.register(
            "replies",
            "DHCPv6 replies sent by type",
            self.replies.clone(),
        );
        r.register(
            "drops",
            "DHCPv6 messages dropped without a reply, by reason",
            self.drops.clone(),
        );
        r.register(
            "lease_commits",
            "Batches of DHCPv6 lease writes journaled",
            self.lease_commits.clone(),
        );
        r.register(
            "lease_commit_errors",
            "Batches of DHCPv6 lease writes that failed (replies withheld)",
            self.lease_commit_errors.clone(),
        );
        r.register(
            "lease_sync_errors",
            "Background flushes of the DHCPv6 lease journal that failed",
            self.lease_sync_errors.clone(),
        );
        r.register(
            "leases_bound",
            "Bound, unexpired DHCPv6 leases",
            self.leases_bound.clone(),
        );
    }
}
