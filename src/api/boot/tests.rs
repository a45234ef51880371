//! Unit tests of the boot vocabulary: wire words, words from other
//! versions, the call-home words the scripts and the lab's test OS post,
//! and no copies of the words elsewhere in src/.

use std::path::Path;

use serde_json::json;

use super::*;

#[test]
fn wire_words_are_unchanged() {
    let steps: Vec<&str> = BootStep::KNOWN.iter().map(BootStep::as_str).collect();
    assert_eq!(
        steps,
        [
            "DHCPOffer",
            "DHCPAck",
            "TFTP",
            "Script",
            "Kernel",
            "Initrd",
            "Image",
            "MediaInserted",
            "Media",
            "MediaEjected",
            "Asset",
            "Ignition",
            "Installed",
            "Failed",
            "Booted",
            "Wiped",
            "PowerCycled",
            "ReimageRequested"
        ]
    );
    let outcomes: Vec<&str> = BootOutcome::KNOWN.iter().map(BootOutcome::as_str).collect();
    assert_eq!(
        outcomes,
        [
            "installed",
            "wiped",
            "failed",
            "timeout",
            "superseded",
            "abandoned"
        ]
    );
    for p in BootPurpose::ALL {
        assert_eq!(serde_json::to_value(p).unwrap(), json!(p.as_str()));
        assert_eq!(
            serde_json::from_value::<BootPurpose>(json!(p.as_str())).unwrap(),
            p
        );
    }
    assert_eq!(
        serde_json::to_value(BootStep::DhcpAck).unwrap(),
        json!("DHCPAck")
    );
}

#[test]
fn words_from_other_versions_decode_and_round_trip() {
    for s in BootStep::KNOWN {
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(&serde_json::from_value::<BootStep>(v).unwrap(), s);
    }
    for o in BootOutcome::KNOWN {
        let v = serde_json::to_value(o).unwrap();
        assert_eq!(&serde_json::from_value::<BootOutcome>(v).unwrap(), o);
    }
    let old: BootOutcome = serde_json::from_value(json!("vanished")).unwrap();
    assert_eq!(old, BootOutcome::Other("vanished".into()));
    assert_eq!(serde_json::to_value(&old).unwrap(), json!("vanished"));
    let old: BootStep = serde_json::from_value(json!("PXE")).unwrap();
    assert_eq!(old, BootStep::Other("PXE".into()));
    assert_eq!(old.to_string(), "PXE");
}

#[test]
fn call_home_words_name_steps() {
    for s in BootStep::CALLHOME {
        let w = s.callhome_word().unwrap();
        assert_eq!(BootStep::from_callhome(w), Some(s.clone()));
        assert_eq!(w, s.as_str().to_ascii_lowercase());
    }
    assert_eq!(BootStep::from_callhome("Installed"), None);
    assert_eq!(BootStep::from_callhome("wiped"), Some(BootStep::Wiped));
    assert_eq!(BootStep::from_callhome("Wiped"), None);
    assert_eq!(BootStep::DhcpAck.callhome_word(), None);
}

/// The words after `marker` in `text` (up to a character that cannot be
/// in a word).
fn words_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .map(|(i, _)| {
            let rest = &text[i + marker.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric())
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every step the installer scripts, the installed OS's unit and the lab's
/// test OS call home with is a step this enum knows, and each call-home
/// step is used by them. The web page shows whatever steps the status
/// holds and names none itself.
#[test]
fn scripts_and_the_lab_os_call_home_with_known_steps() {
    let callhome_sh = include_str!("../../../ignition/metalherd-callhome.sh");
    let files: [(&str, &str, &str); 5] = [
        (
            "ignition/metalherd-callhome.sh",
            callhome_sh,
            "callhome.sh ",
        ),
        (
            "ignition/metalherd-install.sh",
            include_str!("../../../ignition/metalherd-install.sh"),
            "callhome.sh ",
        ),
        (
            "ignition/metalherd-wipe.sh",
            include_str!("../../../ignition/metalherd-wipe.sh"),
            "callhome.sh ",
        ),
        (
            "ignition/metalherd-booted.service",
            include_str!("../../../ignition/metalherd-booted.service"),
            "callhome.sh ",
        ),
        (
            "deploy/lab/init",
            include_str!("../../../deploy/lab/init"),
            "printf \"$CALL\" ",
        ),
    ];
    let mut used = Vec::new();
    for (name, text, marker) in files {
        let words = words_after(text, marker);
        assert!(
            !words.is_empty(),
            "{name}: no call-home found after {marker:?}"
        );
        used.extend(words.into_iter().map(|w| (name, w)));
    }
    // The word list callhome.sh accepts: `  installed|failed|booted|wiped) ;;`.
    let accepted = callhome_sh
        .lines()
        .skip_while(|l| !l.starts_with("case \"$event\" in"))
        .nth(1)
        .and_then(|l| l.trim().strip_suffix(") ;;"))
        .expect("callhome.sh: the accepted words follow `case \"$event\" in`");
    used.extend(accepted.split('|').map(|w| ("callhome.sh case", w)));
    for (name, w) in &used {
        assert!(
            BootStep::from_callhome(w).is_some(),
            "{name} calls home {w:?}, which is not a call-home step of BootStep"
        );
    }
    for s in BootStep::CALLHOME {
        let w = s.callhome_word().unwrap();
        assert!(
            used.iter().any(|(_, u)| *u == w),
            "no script calls home {w:?}"
        );
    }
}

/// Words that are also another vocabulary's (`install` names an Ignition
/// stage and an iPXE script; `timeout` is a TFTP option and a metric
/// label): not searched for.
const SHARED_WORDS: [&str; 2] = ["install", "timeout"];

/// Lines where one of the words belongs to another vocabulary: (file, a
/// piece of the line).
const OTHER_VOCABULARIES: [(&str, &str); 7] = [
    // Redfish VirtualMedia's `Image` property (the inserted URL).
    ("src/bmc/redfish/vmedia_logic.rs", "\"Image\": image_url"),
    ("src/bmc/redfish/vmedia.rs", "body[\"Image\"]"),
    // A MachineSet's rollout state.
    (
        "src/api/machine_set.rs",
        "RolloutState::Failed => \"Failed\"",
    ),
    // A MachineSet metric's outcome label.
    (
        "src/controller/machine_set/metrics.rs",
        "pub const FAILED: &str = \"failed\"",
    ),
    // The request named in a refusal event's message.
    (
        "src/http/boot/ignition.rs",
        "\"IgnitionRefused\", \"Ignition\"",
    ),
    // A kubectl column.
    ("src/api/machine_class.rs", "printcolumn(name = \"Image\""),
    // The Provisioned condition's reason.
    (
        "src/controller/machine/boot.rs",
        "ConditionStatus::True, \"Installed\"",
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// No string literal of a step, outcome, purpose or call-home word outside
/// this module (test code aside): new code uses the enums.
#[test]
fn no_boot_word_literals_outside_this_module() {
    let mut words: Vec<String> = Vec::new();
    words.extend(BootStep::KNOWN.iter().map(|s| s.as_str().to_string()));
    words.extend(BootOutcome::KNOWN.iter().map(|s| s.as_str().to_string()));
    words.extend(BootPurpose::ALL.iter().map(|s| s.as_str().to_string()));
    words.extend(
        BootStep::CALLHOME
            .iter()
            .filter_map(|s| s.callhome_word().map(str::to_string)),
    );
    words.retain(|w| !SHARED_WORDS.contains(&w.as_str()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    assert!(files.len() > 20, "src/ not found under {root:?}");
    let mut found = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let stem = f.file_stem().unwrap().to_string_lossy();
        if rel == "src/api/boot.rs"
            || stem.contains("tests")
            || rel.split('/').any(|c| c == "tests")
        {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            if line.trim_start().starts_with("//")
                || OTHER_VOCABULARIES
                    .iter()
                    .any(|(f, piece)| rel == *f && line.contains(piece))
            {
                continue;
            }
            for w in &words {
                if line.contains(&format!("\"{w}\"")) {
                    found.push(format!("{rel}:{}: \"{w}\"", n + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "boot words as string literals (use api::boot's enums):\n{}",
        found.join("\n")
    );
}
