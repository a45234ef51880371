//! The virtual rack's secret check: no declared secret value where an
//! operator or a log shipper could read it.

use serde_json::Value;

use super::lab::Lab;

impl Lab {
    /// Every secret value the lab declared (BMC passwords, the join token)
    /// is absent from metalherd's logs, its metrics, every Event and every
    /// Machine's status: where an operator or a log shipper could read it.
    pub fn assert_no_secret_leaks(&self) {
        let secrets: Value =
            serde_json::from_str(&self.api_get("/api/v1/secrets")).expect("secret list");
        let mut values = Vec::new();
        for s in secrets["items"].as_array().expect("secret items") {
            for (k, v) in s["data"].as_object().into_iter().flatten() {
                if k == "username" {
                    continue;
                }
                let raw = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    v.as_str().unwrap_or_default(),
                )
                .expect("base64 secret data");
                values.push(String::from_utf8_lossy(&raw).into_owned());
            }
        }
        assert!(
            values.len() >= 2,
            "the lab declares a join token and BMC passwords: {values:?}"
        );
        let events = self.api_get("/api/v1/events");
        assert!(events.contains("\"items\""), "no event list: {events}");
        let machines: Value =
            serde_json::from_str(&self.api_get("/apis/metalherd.dev/v1alpha1/machines"))
                .expect("machine list");
        let statuses: Vec<String> = machines["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| m["status"].to_string())
            .collect();
        let places = [
            ("metalherd's log", self.metalherd_log()),
            ("/metrics", self.metrics()),
            ("Events", events),
            ("Machine status", statuses.join("\n")),
        ];
        for v in &values {
            for (place, text) in &places {
                assert!(
                    !text.contains(v.as_str()),
                    "a secret value appears in {place}"
                );
            }
        }
    }
}
