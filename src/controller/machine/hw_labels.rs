//! Hardware labels: facts from a Machine's inventory written as labels
//! (`metalherd.dev/vendor`, `model`, `cpus`, `memory-gib`, `disks`) so a
//! MachineSet's selector can claim by hardware ("every Dell with 512 GiB"),
//! as MAAS users select by tags. Pure: values in, labels out.
//!
//! The BMC's strings are untrusted: each value is cut down to what a
//! Kubernetes label value allows (at most 63 characters of `[A-Za-z0-9._-]`,
//! beginning and ending with a letter or digit); a fact with nothing left
//! gets no label. Vendors lose their corporate suffix (`Dell Inc.` is
//! `Dell`) so selectors read the way people name them.
//!
//! The labels are not fought over: only these keys are ever touched, and
//! only when the inventory's facts change. The annotation
//! [`APPLIED_ANNOTATION`] records the facts last written; a user who sets
//! one of these labels by hand keeps their value until the fact itself
//! changes.

use std::collections::BTreeMap;

use crate::api::Inventory;

pub const VENDOR: &str = "metalherd.dev/vendor";
pub const MODEL: &str = "metalherd.dev/model";
pub const CPUS: &str = "metalherd.dev/cpus";
pub const MEMORY_GIB: &str = "metalherd.dev/memory-gib";
pub const DISKS: &str = "metalherd.dev/disks";
/// The facts last written as labels, `key=value` pairs joined by `,`.
pub const APPLIED_ANNOTATION: &str = "metalherd.dev/hardware-labels";

/// Every label key this module owns.
pub const KEYS: [&str; 5] = [VENDOR, MODEL, CPUS, MEMORY_GIB, DISKS];

/// Longest label value Kubernetes accepts.
const MAX_VALUE: usize = 63;

/// `s` as a valid label value: characters outside `[A-Za-z0-9._-]` become
/// `-`, runs of `-` shrink to one, at most 63 characters, and no leading or
/// trailing non-alphanumeric. `None` when nothing is left.
pub fn label_value(s: &str) -> Option<String> {
    let mut out = String::new();
    for c in s.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
            c
        } else {
            '-'
        };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let out: String = out
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .chars()
        .take(MAX_VALUE)
        .collect();
    // Cutting at 63 may leave a separator at the end.
    let out = out.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    (!out.is_empty()).then(|| out.to_string())
}

/// The vendor as people name it: corporate suffixes dropped
/// (`Dell Inc.` -> `Dell`, `Super Micro Computer, Inc.` -> `Super Micro
/// Computer`), then made a label value.
pub fn vendor_value(manufacturer: &str) -> Option<String> {
    const SUFFIXES: [&str; 10] = [
        "inc",
        "inc.",
        "corp",
        "corp.",
        "corporation",
        "co.",
        "ltd",
        "ltd.",
        "llc",
        "gmbh",
    ];
    let mut words: Vec<&str> = manufacturer
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    while words.len() > 1
        && words
            .last()
            .is_some_and(|w| SUFFIXES.contains(&w.to_ascii_lowercase().as_str()))
    {
        words.pop();
    }
    label_value(&words.join(" "))
}

/// The labels `inv` calls for, by key; a fact the BMC did not report (or
/// that sanitizes to nothing) is absent.
pub fn hardware_labels(inv: &Inventory) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            l.insert(k.to_string(), v);
        }
    };
    put(VENDOR, inv.manufacturer.as_deref().and_then(vendor_value));
    put(MODEL, inv.model.as_deref().and_then(label_value));
    put(
        CPUS,
        inv.cpu
            .as_ref()
            .filter(|c| c.count > 0)
            .map(|c| c.count.to_string()),
    );
    // Rounded to the nearest GiB: BMCs report 511.9 for 512.
    put(
        MEMORY_GIB,
        inv.memory_mib
            .filter(|m| *m > 0)
            .map(|m| (m.saturating_add(512) / 1024).to_string()),
    );
    put(
        DISKS,
        (!inv.disks.is_empty()).then(|| inv.disks.len().to_string()),
    );
    l
}

/// The annotation's text for `facts`.
pub fn applied_text(facts: &BTreeMap<String, String>) -> String {
    facts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_applied(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What to change: for each of our keys whose fact differs from the one
/// recorded in `applied` (the annotation, if any), the new value (`None`:
/// remove the label). Empty when nothing changed, so a settled Machine is
/// never written.
pub fn changes(
    facts: &BTreeMap<String, String>,
    applied: Option<&str>,
) -> BTreeMap<String, Option<String>> {
    let before = applied.map(parse_applied).unwrap_or_default();
    KEYS.iter()
        .filter(|k| {
            facts.get(**k) != before.get(**k) || applied.is_none() && facts.contains_key(**k)
        })
        .map(|k| (k.to_string(), facts.get(*k).cloned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CpuInfo, DiskInfo};

    fn valid(v: &str) -> bool {
        v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric())
    }

    #[test]
    fn hostile_strings_become_valid_label_values_or_nothing() {
        for (input, want) in [
            ("PowerEdge R650", Some("PowerEdge-R650")),
            (
                "ProLiant DL360 Gen10 Plus",
                Some("ProLiant-DL360-Gen10-Plus"),
            ),
            ("  --Sim-1--  ", Some("Sim-1")),
            ("a/b=c,d\"e'f;g\nh", Some("a-b-c-d-e-f-g-h")),
            ("x\u{0}y\u{7f}z", Some("x-y-z")),
            ("Größe", Some("Gr-e")),
            ("日本", None),
            ("", None),
            ("...", None),
            ("$(reboot)", Some("reboot")),
        ] {
            let got = label_value(input);
            assert_eq!(got.as_deref(), want, "{input:?}");
            if let Some(g) = &got {
                assert!(valid(g), "{g:?}");
            }
        }
        // Long values are cut to 63 without ending on a separator.
        let long = format!("{}.{}", "a".repeat(62), "b".repeat(10));
        let v = label_value(&long).unwrap();
        assert_eq!(v, "a".repeat(62));
        assert!(valid(&label_value(&"ab-".repeat(40)).unwrap()));
    }

    #[test]
    fn vendors_lose_their_corporate_suffix() {
        for (input, want) in [
            ("Dell Inc.", Some("Dell")),
            ("Super Micro Computer, Inc.", Some("Super-Micro-Computer")),
            ("HPE", Some("HPE")),
            ("Lenovo", Some("Lenovo")),
            ("Inc.", Some("Inc")),
            (
                "Fujitsu Technology Solutions GmbH",
                Some("Fujitsu-Technology-Solutions"),
            ),
            (" ,, ", None),
        ] {
            assert_eq!(vendor_value(input).as_deref(), want, "{input:?}");
        }
    }

    fn inv() -> Inventory {
        Inventory {
            manufacturer: Some("Dell Inc.".into()),
            model: Some("PowerEdge R650".into()),
            cpu: Some(CpuInfo {
                count: 2,
                ..Default::default()
            }),
            memory_mib: Some(512 * 1024 - 100),
            disks: vec![DiskInfo::default(), DiskInfo::default()],
            ..Default::default()
        }
    }

    #[test]
    fn facts_from_inventory() {
        let l = hardware_labels(&inv());
        let want: BTreeMap<String, String> = [
            (VENDOR, "Dell"),
            (MODEL, "PowerEdge-R650"),
            (CPUS, "2"),
            (MEMORY_GIB, "512"),
            (DISKS, "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(l, want);
        // Unreported facts get no label.
        assert!(hardware_labels(&Inventory::default()).is_empty());
    }

    #[test]
    fn changes_only_when_the_facts_change() {
        let facts = hardware_labels(&inv());
        // First time: every fact.
        let first = changes(&facts, None);
        assert_eq!(first.len(), 5);
        assert!(first.values().all(Option::is_some));
        // Settled: nothing, whatever the labels say now (a user's edit
        // of one of them stands).
        let applied = applied_text(&facts);
        assert!(changes(&facts, Some(&applied)).is_empty());
        // Memory grew and a disk went: only those two keys.
        let mut i = inv();
        i.memory_mib = Some(1024 * 1024);
        i.disks.clear();
        let c = changes(&hardware_labels(&i), Some(&applied));
        let want: BTreeMap<String, Option<String>> = [
            (MEMORY_GIB.to_string(), Some("1024".to_string())),
            (DISKS.to_string(), None),
        ]
        .into_iter()
        .collect();
        assert_eq!(c, want);
        // Nothing reported and nothing applied: nothing to write.
        assert!(changes(&BTreeMap::new(), None).is_empty());
    }
}
