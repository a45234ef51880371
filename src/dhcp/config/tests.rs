//! Validation of the `dhcp:` section.
use super::*;

fn parse(y: &str) -> Result<DhcpSettings, ConfigError> {
    let c: DhcpConfig = serde_yaml::from_str(y).unwrap();
    DhcpSettings::try_from(c)
}

#[test]
fn full_config_validates() {
    let s = parse(
        "interface: eth1\nhttpBootUrl: http://10.0.0.1:8080/\nbootFiles: {11: arm.efi}\n\
         discovery: {enabled: true}\nsubnets:\n- subnet: 10.0.0.0/24\n  ranges: [{start: 10.0.0.100, end: 10.0.0.199}]\n  router: 10.0.0.1\n  dns: [10.0.0.1]\n  domain: lab.example\n",
    )
    .unwrap();
    assert_eq!(s.http_boot_url.as_deref(), Some("http://10.0.0.1:8080"));
    assert_eq!(s.boot_files[&11], "arm.efi");
    assert_eq!(s.boot_files[&0], "undionly.kpxe");
    assert_eq!(s.subnets[0].pool_size(), 100);
    assert!(s.discovery);
}

/// The PE machine type a UEFI boot file must have for an option-93
/// architecture (RFC 4578 / IANA), `None` for legacy BIOS.
fn pe_machine_for(arch: u16) -> Option<u16> {
    match arch {
        0 => None,
        6 | 15 => Some(0x014c),
        7 | 9 | 16 => Some(0x8664),
        10 | 18 => Some(0x01c2),
        11 | 19 => Some(0xaa64),
        other => panic!("no PE machine known for architecture {other}"),
    }
}

#[test]
fn default_boot_files_exist_and_match_their_architecture() {
    let assets = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("boot-assets");
    for (arch, file) in default_boot_files() {
        let bytes = std::fs::read(assets.join(&file))
            .unwrap_or_else(|e| panic!("boot-assets/{file} (arch {arch}): {e}"));
        let Some(want) = pe_machine_for(arch) else {
            assert_ne!(&bytes[..2], b"MZ", "{file}: BIOS gets a PXE image, not PE");
            continue;
        };
        assert_eq!(&bytes[..2], b"MZ", "{file}: not a PE image");
        let pe = u32::from_le_bytes(bytes[0x3c..0x40].try_into().unwrap()) as usize;
        assert_eq!(&bytes[pe..pe + 4], b"PE\0\0", "{file}");
        let machine = u16::from_le_bytes([bytes[pe + 4], bytes[pe + 5]]);
        assert_eq!(
            machine, want,
            "boot-assets/{file} is built for PE machine {machine:#06x}, \
             but architecture {arch} needs {want:#06x}"
        );
    }
}

#[test]
fn example_config_validates() {
    let f: crate::config::ConfigFile =
        serde_yaml::from_str(include_str!("../../../deploy/config/dhcp.yaml")).unwrap();
    let s = DhcpSettings::try_from(f.dhcp.unwrap()).unwrap();
    assert_eq!(s.subnets.len(), 2);
    assert_eq!(s.boot_files[&16], "ipxe.efi");
}

#[test]
fn errors_name_the_field() {
    let e = parse("interface: ''\n").unwrap_err();
    assert_eq!(e.field, "interface");
    let e = parse("interface: eth1\nsubnets: [{subnet: 10.0.0.0/24, ranges: [{start: 10.0.1.1, end: 10.0.1.5}]}]\n").unwrap_err();
    assert_eq!(e.field, "subnets[0].ranges[0]");
    let e = parse("interface: eth1\n").unwrap_err();
    assert_eq!(e.field, "subnets");
    let e = parse("interface: eth1\nmode: proxy\nhttpBootUrl: 'ftp://x'\n").unwrap_err();
    assert_eq!(e.field, "httpBootUrl");
    assert!(parse("interface: eth1\nmode: proxy\n").is_ok());
}

#[test]
fn lease_sync_modes() {
    let base = "interface: eth1\nmode: proxy\n";
    assert_eq!(parse(base).unwrap().lease_sync, LeaseSync::default());
    let s = parse(&format!("{base}leaseSync: {{mode: always}}\n")).unwrap();
    assert_eq!(s.lease_sync, LeaseSync::Always);
    let s = parse(&format!("{base}leaseSync: {{intervalMs: 200}}\n")).unwrap();
    assert_eq!(
        s.lease_sync,
        LeaseSync::Batch {
            interval: std::time::Duration::from_millis(200)
        }
    );
    let e = parse(&format!("{base}leaseSync: {{intervalMs: 0}}\n")).unwrap_err();
    assert_eq!(e.field, "leaseSync.intervalMs");
    let e = parse(&format!(
        "{base}leaseSync: {{mode: always, intervalMs: 5}}\n"
    ))
    .unwrap_err();
    assert_eq!(e.field, "leaseSync.intervalMs");
}
