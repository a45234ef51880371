//! Command payloads and FRU parsing.

use super::*;
use crate::bmc::ipmi::commands::{BootFlags, chassis_control_code, parse_device_id};
use crate::bmc::ipmi::fru;
use crate::bmc::{BootDevice, FirmwareMode, PowerAction, PowerState};

#[test]
fn boot_flags_and_read_back_rule() {
    let uefi_pxe = BootFlags::one_time(BootDevice::Network, FirmwareMode::Uefi);
    assert_eq!(uefi_pxe.hex(), "a004000000");
    assert_eq!(
        BootFlags::one_time(BootDevice::Disk, FirmwareMode::Legacy).hex(),
        "8008000000"
    );
    // Echoes everything: honoured.
    assert!(BootFlags([0xa0, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // Echoes the valid bit but dropped EFI (pyghmi): ignored.
    assert!(!BootFlags([0x80, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // Only the device, no flags (ipmi_sim): the device decides.
    assert!(BootFlags([0x00, 0x04, 0, 0, 0]).honours(&uefi_pxe));
    // No override at all, or another device: ignored.
    assert!(!BootFlags([0x00, 0x00, 0, 0, 0]).honours(&uefi_pxe));
    assert!(!BootFlags([0xa0, 0x08, 0, 0, 0]).honours(&uefi_pxe));
}

#[test]
fn cd_is_boot_device_selector_five_as_ipmitool_sends_cdrom() {
    // `ipmitool chassis bootdev cdrom options=efiboot`: a0 14 00 00 00.
    let cd = BootFlags::one_time(BootDevice::Cd, FirmwareMode::Uefi);
    assert_eq!(cd.hex(), "a014000000");
    assert_eq!(cd.device_selector(), 0x05);
    for d in [BootDevice::Network, BootDevice::Disk, BootDevice::Cd] {
        assert_eq!(
            BootFlags::one_time(d, FirmwareMode::Legacy).device(),
            Some(d)
        );
    }
    assert_eq!(BootFlags([0x80, 0x00, 0, 0, 0]).device(), None);
    assert!(!BootFlags([0xa0, 0x04, 0, 0, 0]).honours(&cd));
}

#[test]
fn chassis_control_codes() {
    use PowerAction::*;
    assert_eq!(chassis_control_code(On, PowerState::Off), 1);
    assert_eq!(chassis_control_code(ForceOff, PowerState::On), 0);
    assert_eq!(chassis_control_code(GracefulOff, PowerState::On), 5);
    assert_eq!(chassis_control_code(Cycle, PowerState::On), 2);
    assert_eq!(chassis_control_code(Cycle, PowerState::Off), 1);
    assert_eq!(chassis_control_code(Reset, PowerState::On), 3);
    assert_eq!(chassis_control_code(Reset, PowerState::Off), 1);
}

#[test]
fn device_id_fields() {
    let d =
        parse_device_id(&[0, 3, 9, 0x08, 0x02, 0x9f, 0x91, 0x12, 0, 0x02, 0x0f]).expect("parse");
    assert_eq!(d.firmware, "9.08");
    assert_eq!(d.ipmi_version, "2.0");
    assert_eq!(d.manufacturer_id, 0x1291);
    assert_eq!(d.product_id, 0x0f02);
    assert!(matches!(
        parse_device_id(&[0, 1]),
        Err(IpmiError::Truncated { .. })
    ));
}

#[test]
fn fru_board_and_product_areas() {
    let info = fru::parse(&fixture_fru()).expect("parse");
    assert_eq!(info.board_manufacturer.as_deref(), Some("Metalherd Labs"));
    assert_eq!(info.board_product.as_deref(), Some("MH-Board-1"));
    assert_eq!(info.board_serial.as_deref(), Some("BRD0001"));
    assert_eq!(info.product_name.as_deref(), Some("MH-1000"));
    assert_eq!(info.product_part.as_deref(), Some("M1000"));
    assert_eq!(info.product_serial.as_deref(), Some("SN-0042"));
}

#[test]
fn fru_errors_are_typed() {
    let mut f = fixture_fru();
    f[7] ^= 1;
    assert_eq!(fru::parse(&f), Err(IpmiError::BadChecksum("FRU header")));
    let mut f = fixture_fru();
    f[20] ^= 1;
    assert_eq!(fru::parse(&f), Err(IpmiError::BadChecksum("FRU area")));
    assert!(matches!(
        fru::parse(&f[..5]),
        Err(IpmiError::Truncated { .. })
    ));
    assert!(fru::parse(&f[..30]).is_err());
}
