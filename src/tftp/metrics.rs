//! TFTP metrics (prometheus-client) under `metalherd_tftp_`: transfers by
//! outcome, bytes, retransmissions, duplicate ACKs, malformed packets and
//! dropped requests. Labels are fixed words, never peers or file names.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// Cheap to clone: every clone updates the same counters.
#[derive(Clone, Default, Debug)]
pub struct TftpMetrics {
    /// Finished transfers by outcome: `complete`, `client_error`,
    /// `client_gone`, `timed_out`, `not_found`, `forbidden`, `write_refused`,
    /// `read_error`, `socket_error`, `shutdown`.
    pub transfers: Family<OutcomeLabel, Counter>,
    /// File bytes sent (first transmissions only).
    pub bytes: Counter,
    pub retransmissions: Counter,
    pub duplicate_acks: Counter,
    /// Datagrams that are not TFTP, by decode error.
    pub malformed: Family<ReasonLabel, Counter>,
    /// Requests not served: `busy` (too many transfers), `client_busy`
    /// (too many from one client address), `duplicate` (a
    /// retransmitted request for a transfer already running), and
    /// refusals left unanswered: `error_rate_limited` (the ERROR reply
    /// budget was spent).
    pub dropped_requests: Family<ReasonLabel, Counter>,
    pub active: Gauge,
    /// Send calls on transfer sockets: `single` (one datagram) or `gso`
    /// (a window of DATA packets in one UDP GSO send).
    pub send_calls: Family<KindLabel, Counter>,
    /// Transfers that fell back from GSO to one datagram per send.
    pub gso_fallbacks: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

impl TftpMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tftp");
        r.register(
            "transfers",
            "Finished TFTP transfers by outcome",
            self.transfers.clone(),
        );
        r.register("bytes", "File bytes sent over TFTP", self.bytes.clone());
        r.register(
            "retransmissions",
            "DATA or OACK packets sent again",
            self.retransmissions.clone(),
        );
        r.register(
            "duplicate_acks",
            "ACKs ignored as duplicate or stale",
            self.duplicate_acks.clone(),
        );
        r.register(
            "malformed_packets",
            "Malformed datagrams, by reason (requests among them are refused with an ERROR)",
            self.malformed.clone(),
        );
        r.register(
            "dropped_requests",
            "Read requests not served, by reason",
            self.dropped_requests.clone(),
        );
        r.register(
            "active_transfers",
            "Transfers in flight",
            self.active.clone(),
        );
        r.register(
            "send_calls",
            "Send calls on transfer sockets, by kind (single or gso)",
            self.send_calls.clone(),
        );
        r.register(
            "gso_fallbacks",
            "Transfers that fell back from UDP GSO to one datagram per send",
            self.gso_fallbacks.clone(),
        );
    }

    pub fn send_calls(&self, kind: &'static str) {
        self.send_calls.get_or_create(&KindLabel { kind }).inc();
    }

    pub fn send_calls_with(&self, kind: &'static str) -> u64 {
        self.send_calls
            .get(&KindLabel { kind })
            .map(|c| c.get())
            .unwrap_or(0)
    }

    pub fn transfer(&self, outcome: &'static str) {
        self.transfers
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    pub fn transfers_with(&self, outcome: &'static str) -> u64 {
        self.transfers
            .get(&OutcomeLabel { outcome })
            .map(|c| c.get())
            .unwrap_or(0)
    }

    pub fn malformed(&self, reason: &'static str) {
        self.malformed.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// All malformed datagrams, whatever the reason.
    pub fn malformed_total(&self) -> u64 {
        // Family has no iterator; sum the known reasons.
        [
            "truncated",
            "unknown_opcode",
            "unterminated",
            "not_utf8",
            "empty_filename",
            "bad_mode",
            "malformed_option",
            "odd_options",
            "trailing",
            "unexpected",
        ]
        .iter()
        .filter_map(|&reason| self.malformed.get(&ReasonLabel { reason }).map(|c| c.get()))
        .sum()
    }

    pub fn dropped(&self, reason: &'static str) {
        self.dropped_requests
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_under_the_metalherd_prefix() {
        let m = TftpMetrics::default();
        let mut reg = Registry::with_prefix("metalherd");
        m.register(&mut reg);
        m.transfer("complete");
        m.malformed("truncated");
        m.bytes.inc_by(10);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        assert!(
            s.contains("metalherd_tftp_transfers_total{outcome=\"complete\"} 1"),
            "{s}"
        );
        assert!(s.contains("metalherd_tftp_bytes_total 10"), "{s}");
        assert_eq!(m.malformed_total(), 1);
    }
}
