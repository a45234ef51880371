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

/// Message-type labels, in [`type_index`] order.
const TYPES: [&str; 9] = [
    "discover", "offer", "request", "decline", "ack", "nak", "release", "inform", "other",
];

/// Cheap to clone; every clone updates the same counters.
#[derive(Clone)]
pub struct DhcpMetrics {
    pub requests: Family<TypeLabel, Counter>,
    pub replies: Family<TypeLabel, Counter>,
    pub drops: Family<ReasonLabel, Counter>,
    pub lease_commits: Counter,
    pub lease_commit_errors: Counter,
    pub lease_sync_errors: Counter,
    pub lease_checkpoints: Counter,
    pub leases_bound: Gauge,
    pub discovered_dropped: Counter,
    /// The per-type counters resolved once, so the packet path does no
    /// label lookup.
    requests_by_type: [Counter; 9],
    replies_by_type: [Counter; 9],
    malformed: Counter,
}

impl Default for DhcpMetrics {
    fn default() -> Self {
        let requests = Family::<TypeLabel, Counter>::default();
        let replies = Family::<TypeLabel, Counter>::default();
        let each = |f: &Family<TypeLabel, Counter>| {
            TYPES.map(|t| f.get_or_create(&TypeLabel { message_type: t }).clone())
        };
        let requests_by_type = each(&requests);
        let replies_by_type = each(&replies);
        let malformed = requests
            .get_or_create(&TypeLabel {
                message_type: "malformed",
            })
            .clone();
        DhcpMetrics {
            requests,
            replies,
            drops: Family::default(),
            lease_commits: Counter::default(),
            lease_commit_errors: Counter::default(),
            lease_sync_errors: Counter::default(),
            lease_checkpoints: Counter::default(),
            leases_bound: Gauge::default(),
            discovered_dropped: Counter::default(),
            requests_by_type,
            replies_by_type,
            malformed,
        }
    }
}

impl DhcpMetrics {
    /// Count a request (`None`: it did not parse).
    pub fn requested(&self, t: Option<dhcproto::v4::MessageType>) {
        match t {
            Some(t) => self.requests_by_type[type_index(t)].inc(),
            None => self.malformed.inc(),
        };
    }

    /// Count a reply sent.
    pub fn replied(&self, t: dhcproto::v4::MessageType) {
        self.replies_by_type[type_index(t)].inc();
    }

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
            "Batches of lease writes journaled",
            self.lease_commits.clone(),
        );
        r.register(
            "lease_commit_errors",
            "Batches of lease writes that failed (replies withheld)",
            self.lease_commit_errors.clone(),
        );
        r.register(
            "lease_sync_errors",
            "Background flushes of the lease journal that failed",
            self.lease_sync_errors.clone(),
        );
        r.register(
            "lease_checkpoints",
            "Lease journal checkpoints committed into the lease database",
            self.lease_checkpoints.clone(),
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

fn type_index(t: dhcproto::v4::MessageType) -> usize {
    use dhcproto::v4::MessageType as M;
    match t {
        M::Discover => 0,
        M::Offer => 1,
        M::Request => 2,
        M::Decline => 3,
        M::Ack => 4,
        M::Nak => 5,
        M::Release => 6,
        M::Inform => 7,
        _ => 8,
    }
}

/// Stable label of a message type.
pub fn type_label(t: dhcproto::v4::MessageType) -> &'static str {
    TYPES[type_index(t)]
}
