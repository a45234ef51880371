use std::time::Duration;

use super::config::BmcConfig;
use super::version::compare;
use super::*;

fn id<'a>(protocol: Protocol, m: &'a str, model: &'a str, fw: &'a str) -> BmcIdentity<'a> {
    BmcIdentity {
        protocol,
        manufacturer: Some(m),
        oem_keys: Vec::new(),
        model: Some(model),
        firmware: Some(fw),
    }
}

fn settings(yaml: &str) -> Result<BmcSettings, QuirkConfigError> {
    let wire: BmcConfig = serde_yaml::from_str(yaml).unwrap();
    BmcSettings::try_from(wire)
}

#[test]
fn builtin_vendors_are_found_by_manufacturer_or_oem() {
    let t = QuirkTable::builtin();
    let r = |m: &str| t.resolve(&id(Protocol::Redfish, m, "x", "1"));
    assert_eq!(r("Dell Inc.").applied, ["dell-idrac"]);
    assert_eq!(
        r("Dell Inc.").boot_mode_with_override,
        BootModeWithOverride::Never
    );
    assert!(r("HPE").boot_needs_etag);
    assert_eq!(r("HPE").applied, ["hpe-ilo5"]);
    assert_eq!(r("HP").applied, ["hp-ilo4"]);
    assert_eq!(r("Supermicro").applied, ["supermicro-etag"]);
    assert_eq!(r("Lenovo").cycle_reset_types[0], "ForceRestart");
    assert_eq!(
        r("American Megatrends International").applied,
        ["ami-megarac-long-name"]
    );
    assert!(r("Sushy Emulator").once_kept_as_continuous);
    assert!(r("Contoso").applied.is_empty());
    let oem = BmcIdentity {
        protocol: Protocol::Redfish,
        oem_keys: vec!["Ami"],
        ..BmcIdentity::default()
    };
    assert_eq!(t.resolve(&oem).applied, ["ami-megarac"]);
    // Redfish entries do not apply to IPMI.
    assert!(
        t.resolve(&id(Protocol::Ipmi, "Dell Inc.", "x", "1"))
            .applied
            .is_empty()
    );
    assert_eq!(
        t.resolve(&BmcIdentity::default()),
        Quirks::standard(),
        "an unknown BMC gets the standard path"
    );
}

#[test]
fn config_entries_match_vendor_model_and_firmware_and_win_over_builtins() {
    let s = settings(
        r#"
quirks:
  - name: contoso-lx2-old
    protocol: redfish
    match: {vendor: Contoso, model: "LX2*", firmware: ">=2.0, <2.10"}
    onceKeptAsContinuous: true
    powerSettleSeconds: 8
    onResetTypes: [ForceOn]
  - name: dell-modern-mode
    match: {vendor: Dell, firmware: ">=7.0"}
    bootModeWithOverride: always
  - name: contoso-ipmi
    protocol: ipmi
    match: {vendor: contoso}
    powerSettleSeconds: 3
"#,
    )
    .unwrap();
    let t = &s.quirks;
    let q = t.resolve(&id(Protocol::Redfish, "Contoso Ltd", "LX2-1U", "2.9.1"));
    assert_eq!(q.applied, ["contoso-lx2-old"]);
    assert!(q.once_kept_as_continuous);
    assert_eq!(q.power_settle, Duration::from_secs(8));
    assert_eq!(q.on_reset_types, ["ForceOn"]);
    // Firmware outside the range, other model, other protocol.
    assert!(
        t.resolve(&id(Protocol::Redfish, "Contoso", "LX2", "2.10"))
            .applied
            .is_empty()
    );
    assert!(
        t.resolve(&id(Protocol::Redfish, "Contoso", "LX3", "2.1"))
            .applied
            .is_empty()
    );
    let ipmi = t.resolve(&id(Protocol::Ipmi, "Contoso", "LX2", "2.1"));
    assert_eq!(ipmi.applied, ["contoso-ipmi"]);
    assert_eq!(ipmi.power_settle, Duration::from_secs(3));
    // A config entry after a built-in one overrides its field.
    let dell = t.resolve(&id(Protocol::Redfish, "Dell Inc.", "R650", "7.00.30"));
    assert_eq!(dell.applied, ["dell-idrac", "dell-modern-mode"]);
    assert_eq!(dell.boot_mode_with_override, BootModeWithOverride::Always);
    let old_dell = t.resolve(&id(Protocol::Redfish, "Dell Inc.", "R640", "4.40"));
    assert_eq!(
        old_dell.boot_mode_with_override,
        BootModeWithOverride::Never
    );
}

#[test]
fn config_errors_name_the_field() {
    let field = |y: &str| settings(y).unwrap_err().field;
    assert_eq!(
        field("quirks: [{match: {vendor: X}, onceKeptAsContinuous: true}]"),
        "quirks[0].name"
    );
    assert_eq!(
        field("quirks: [{name: a, onceKeptAsContinuous: true}]"),
        "quirks[0].match.vendor"
    );
    assert_eq!(
        field(
            "quirks: [{name: a, match: {vendor: X, firmware: '>=<2'}, onceKeptAsContinuous: true}]"
        ),
        "quirks[0].match.firmware"
    );
    assert_eq!(
        field("quirks: [{name: a, match: {vendor: X}, onResetTypes: [On, Bogus]}]"),
        "quirks[0].onResetTypes[1]"
    );
    assert_eq!(
        field(
            "quirks: [{name: a, protocol: ipmi, match: {vendor: X}, cycleResetTypes: [PowerCycle]}]"
        ),
        "quirks[0].cycleResetTypes"
    );
    assert_eq!(
        field("quirks: [{name: a, match: {vendor: X}, powerSettleSeconds: 9000}]"),
        "quirks[0].powerSettleSeconds"
    );
    assert_eq!(
        field("quirks: [{name: a, match: {vendor: X}}]"),
        "quirks[0]"
    );
    assert_eq!(
        field(
            "quirks: [{name: a, match: {vendor: X}, bootNeedsEtag: true}, {name: a, match: {vendor: Y}, bootNeedsEtag: true}]"
        ),
        "quirks[1].name"
    );
    let e = settings("quirks: [{name: a, match: {vendor: X}}]").unwrap_err();
    assert!(e.to_string().starts_with("bmc.quirks[0]: "), "{e}");
}

#[test]
fn unknown_keys_are_refused_with_their_path() {
    let y = "quirks:\n  - name: a\n    match: {vendor: X}\n    onceKeptAsContinous: true\n";
    let de = serde_yaml::Deserializer::from_str(y);
    let e = serde_path_to_error::deserialize::<_, BmcConfig>(de).unwrap_err();
    assert_eq!(e.path().to_string(), "quirks[0].onceKeptAsContinous");
    assert!(e.inner().to_string().contains("onceKeptAsContinous"), "{e}");
}

#[test]
fn printed_entries_read_back_as_the_same_entry() {
    let s = settings(
        "quirks: [{name: a, protocol: redfish, match: {vendor: X, model: 'M*', firmware: '<3'}, powerSettleSeconds: 4, onceKeptAsContinuous: true}]",
    )
    .unwrap();
    let entry = s.quirks.entries().last().unwrap();
    let printed = serde_yaml::to_string(&vec![config::QuirkEntryConfig::from(entry)]).unwrap();
    let again = settings(&format!("quirks:\n{}", indent(&printed))).unwrap();
    assert_eq!(again.quirks.entries().last().unwrap(), entry);
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

#[test]
fn versions_compare_as_operators_read_them() {
    use std::cmp::Ordering::*;
    assert_eq!(compare("4.40", "4.4"), Greater);
    assert_eq!(compare("4.4", "4.4.1"), Less);
    assert_eq!(compare("2.86.86.86 (Build 12)", "2.86.86.86"), Greater);
    assert_eq!(compare("U46 v2.70", "u46 v2.70"), Equal);
    let r = VersionRange::parse(">=4.0, <4.40").unwrap();
    assert!(r.contains("4.10.10.10"));
    assert!(!r.contains("4.40.00.00"));
    assert!(!r.contains("3.99"));
    assert!(VersionRange::parse("2.1").unwrap().contains("2.1"));
    assert!(VersionRange::parse(">=").is_err());
    assert!(VersionRange::parse("1.0,,2").is_err());
}

#[test]
fn models_match_with_wildcards() {
    assert!(glob_matches("PowerEdge R6*", "PowerEdge R650"));
    assert!(glob_matches("*r650", "PowerEdge R650"));
    assert!(glob_matches("x*13*", "X13DEI"));
    assert!(!glob_matches("R6*", "PowerEdge R650"));
    assert!(glob_matches("sim-1", "Sim-1"));
}
