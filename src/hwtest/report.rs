//! The result of a hardware qualification: one row per check (status,
//! time, detail), the findings that call for a quirk, and the proposed
//! `bmc.quirks:` entry in the config file's format. Rendered as a table or
//! as JSON. Pure: no I/O.

use serde::Serialize;

use crate::api::Inventory;
use crate::bmc::quirks::config::{QuirkEntryConfig, QuirkMatchConfig};
use crate::bmc::quirks::{Protocol, QuirkSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    Pass,
    /// Works, but only thanks to (or calling for) a quirk.
    Quirk,
    Fail,
    /// The BMC lacks the feature.
    NotSupported,
    /// Not run (needs a flag, or an earlier step failed).
    Skipped,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Quirk => "QUIRK",
            Status::Fail => "FAIL",
            Status::NotSupported => "not supported",
            Status::Skipped => "skipped",
        }
    }
}

/// One check's outcome.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    pub name: String,
    pub status: Status,
    /// Seconds the step took (for power steps: until the state was reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    pub detail: String,
}

/// A quirk the run found, with the evidence.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The quirk field (`onceKeptAsContinuous`, `powerSettleSeconds`, ...).
    pub quirk: String,
    pub evidence: String,
    /// Entry already in effect that covers it (built-in or config).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub covered_by: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub address: String,
    pub protocol: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
    /// Quirk entries in effect before the run.
    pub quirks_in_effect: Vec<String>,
    pub checks: Vec<Check>,
    pub findings: Vec<Finding>,
    /// The `bmc.quirks:` entry that makes metalherd work with this model,
    /// when something was found that no entry covers yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposed_quirk: Option<QuirkEntryConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<super::tls::TlsReport>,
    /// Whether every check passed or needs only a quirk.
    pub qualified: bool,
}

impl Report {
    pub fn push(&mut self, c: Check) {
        self.checks.push(c);
    }

    /// Fill `proposed_quirk` and `qualified` from the checks and findings.
    pub fn finish(&mut self, protocol: Protocol, set: QuirkSet) {
        self.qualified = !self.checks.iter().any(|c| c.status == Status::Fail);
        let uncovered = self.findings.iter().any(|f| f.covered_by.is_none());
        if !uncovered || set.is_empty() {
            return;
        }
        let inv = self.inventory.clone().unwrap_or_default();
        let vendor = inv
            .manufacturer
            .as_deref()
            .map(|m| m.split_whitespace().next().unwrap_or(m).to_string())
            .unwrap_or_else(|| "UNKNOWN-VENDOR".into());
        let name = proposal_name(&[
            Some(vendor.as_str()),
            inv.model.as_deref(),
            inv.firmware_version.as_deref(),
        ]);
        self.proposed_quirk = Some(QuirkEntryConfig {
            name,
            protocol,
            matches: QuirkMatchConfig {
                vendor,
                model: inv.model.clone(),
                firmware: inv.firmware_version.as_ref().map(|f| format!("={f}")),
            },
            once_kept_as_continuous: set.once_kept_as_continuous,
            power_settle_seconds: set.power_settle_seconds,
            on_reset_types: set.on_reset_types,
            cycle_reset_types: set.cycle_reset_types,
            graceful_off_reset_types: set.graceful_off_reset_types,
            boot_mode_with_override: set.boot_mode_with_override,
            boot_needs_etag: set.boot_needs_etag,
        });
    }

    /// The proposed entry as config text (`bmc:\n  quirks:\n    - ...`).
    pub fn proposed_config(&self) -> Option<String> {
        let q = self.proposed_quirk.as_ref()?;
        let yaml = serde_yaml::to_string(&vec![q]).ok()?;
        let mut out = String::from("bmc:\n  quirks:\n");
        for l in yaml.lines() {
            out.push_str("    ");
            out.push_str(l);
            out.push('\n');
        }
        Some(out)
    }

    /// The human-readable report.
    pub fn table(&self) -> String {
        let mut out = format!("hw-test of {} ({})\n", self.address, self.protocol);
        if let Some(inv) = &self.inventory {
            out.push_str(&format!(
                "  {} {} serial {} firmware {}\n",
                inv.manufacturer.as_deref().unwrap_or("?"),
                inv.model.as_deref().unwrap_or("?"),
                inv.serial_number.as_deref().unwrap_or("?"),
                inv.firmware_version.as_deref().unwrap_or("?"),
            ));
        }
        out.push_str(&format!(
            "  quirks in effect: {}\n\n",
            if self.quirks_in_effect.is_empty() {
                "none (standard path)".to_string()
            } else {
                self.quirks_in_effect.join(", ")
            }
        ));
        let w = self
            .checks
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        out.push_str(&format!(
            "{:<w$}  {:<13}  {:>7}  DETAIL\n",
            "CHECK", "RESULT", "SECONDS"
        ));
        for c in &self.checks {
            let secs = c
                .seconds
                .map(|s| format!("{s:.1}"))
                .unwrap_or_else(|| "-".into());
            out.push_str(&format!(
                "{:<w$}  {:<13}  {:>7}  {}\n",
                c.name,
                c.status.word(),
                secs,
                c.detail
            ));
        }
        if !self.findings.is_empty() {
            out.push_str("\nFindings:\n");
            for f in &self.findings {
                let cov = f
                    .covered_by
                    .as_ref()
                    .map(|c| format!(" (already handled by quirk entry {c})"))
                    .unwrap_or_default();
                out.push_str(&format!("  {}: {}{}\n", f.quirk, f.evidence, cov));
            }
        }
        if let Some(tls) = &self.tls {
            out.push_str(&format!("\nTLS advice: {}\n", tls.advice));
        }
        if let Some(cfg) = self.proposed_config() {
            out.push_str("\nProposed quirk entry (add to the config file given to `metalherd serve --config`):\n\n");
            out.push_str(&cfg);
        }
        out.push_str(&format!(
            "\nResult: {}\n",
            if self.qualified {
                "qualified"
            } else {
                "NOT qualified (see FAIL rows)"
            }
        ));
        out
    }
}

/// `vendor-model-firmware`, lower case, only `[a-z0-9.-]`.
fn proposal_name(parts: &[Option<&str>]) -> String {
    let raw: Vec<String> = parts
        .iter()
        .flatten()
        .map(|p| {
            p.to_ascii_lowercase()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '.' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
        })
        .collect();
    let joined = raw.join("-");
    let mut out = String::new();
    for c in joined.chars() {
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_no_entry_covers_becomes_a_config_entry_that_parses() {
        let mut r = Report {
            address: "redfish+https://bmc".into(),
            protocol: "redfish".into(),
            inventory: Some(Inventory {
                manufacturer: Some("Contoso Ltd".into()),
                model: Some("LX2 1U".into()),
                firmware_version: Some("2.3.4".into()),
                ..Inventory::default()
            }),
            ..Report::default()
        };
        r.findings.push(Finding {
            quirk: "powerSettleSeconds".into(),
            evidence: "On, then Off".into(),
            covered_by: None,
        });
        r.finish(
            Protocol::Redfish,
            QuirkSet {
                power_settle_seconds: Some(12),
                ..QuirkSet::default()
            },
        );
        let text = r.proposed_config().unwrap();
        assert!(text.contains("name: contoso-lx2-1u-2.3.4"), "{text}");
        let file: crate::config::ConfigFile = serde_yaml::from_str(&text).unwrap();
        let s = crate::bmc::quirks::BmcSettings::try_from(file.bmc.unwrap()).unwrap();
        let e = s.quirks.entries().last().unwrap();
        assert_eq!(e.set.power_settle_seconds, Some(12));
        assert!(e.matches.firmware.as_ref().unwrap().contains("2.3.4"));
        assert!(!e.matches.firmware.as_ref().unwrap().contains("2.3.5"));
        assert!(r.table().contains("Proposed quirk entry"));
    }

    #[test]
    fn covered_findings_propose_nothing() {
        let mut r = Report::default();
        r.findings.push(Finding {
            quirk: "onceKeptAsContinuous".into(),
            evidence: "read back Continuous".into(),
            covered_by: Some("sushy-tools".into()),
        });
        r.finish(
            Protocol::Redfish,
            QuirkSet {
                once_kept_as_continuous: Some(true),
                ..QuirkSet::default()
            },
        );
        assert!(r.proposed_quirk.is_none());
        assert!(r.qualified);
    }
}
