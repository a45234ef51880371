//! BMC metrics: operations by driver, operation and outcome (an error's
//! reason, never an address), their durations, and HTTP retries. One
//! process-wide set, registered into the serving registry by `register`.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::BmcError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub driver: &'static str,
    pub op: &'static str,
    /// `ok` or a `BmcError::reason()`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverLabels {
    pub driver: &'static str,
}

type HistogramFamily = Family<DriverOpLabels, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriverOpLabels {
    pub driver: &'static str,
    pub op: &'static str,
}

pub struct BmcMetrics {
    pub operations: Family<OpLabels, Counter>,
    pub duration: HistogramFamily,
    pub retries: Family<DriverLabels, Counter>,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0])
}

static METRICS: LazyLock<BmcMetrics> = LazyLock::new(|| BmcMetrics {
    operations: Family::default(),
    duration: Family::new_with_constructor(duration_histogram),
    retries: Family::default(),
});

pub fn global() -> &'static BmcMetrics {
    &METRICS
}

/// Add the BMC metrics to a registry (unprefixed registry: the names carry
/// `metalherd_`).
pub fn register(registry: &mut Registry) {
    let m = global();
    registry.register(
        "metalherd_bmc_operations",
        "BMC operations by driver, operation and outcome",
        m.operations.clone(),
    );
    registry.register(
        "metalherd_bmc_operation_seconds",
        "Duration of BMC operations, verification included",
        m.duration.clone(),
    );
    registry.register(
        "metalherd_bmc_http_retries",
        "HTTP requests to BMCs retried after a 5xx or a dropped connection",
        m.retries.clone(),
    );
}

/// Record one finished operation.
pub fn observe<T>(driver: &'static str, op: &'static str, took: Duration, r: &Result<T, BmcError>) {
    let m = global();
    let outcome = match r {
        Ok(_) => "ok",
        Err(e) => e.reason(),
    };
    m.operations
        .get_or_create(&OpLabels {
            driver,
            op,
            outcome,
        })
        .inc();
    m.duration
        .get_or_create(&DriverOpLabels { driver, op })
        .observe(took.as_secs_f64());
}

pub fn retried(driver: &'static str) {
    global()
        .retries
        .get_or_create(&DriverLabels { driver })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_labelled_by_reason() {
        observe::<()>("redfish", "power", Duration::from_millis(5), &Ok(()));
        observe::<()>(
            "redfish",
            "power",
            Duration::from_millis(5),
            &Err(BmcError::BadCredentials {
                address: "https://10.0.0.5".into(),
            }),
        );
        let mut reg = Registry::default();
        register(&mut reg);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains("outcome=\"BadCredentials\""), "{out}");
        assert!(out.contains("metalherd_bmc_operations_total"), "{out}");
        assert!(!out.contains("10.0.0.5"), "no addresses in labels");
    }
}
