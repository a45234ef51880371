//! The IPMI commands the driver sends, as pure request builders and reply
//! parsers: chassis status and control, system boot options (with the
//! read-back rule), device ID, system GUID, FRU inventory reads.

use super::error::IpmiError;
use crate::bmc::{BootDevice, FirmwareMode, PowerAction, PowerState};

pub const NETFN_CHASSIS: u8 = 0x00;
pub const NETFN_APP: u8 = 0x06;
pub const NETFN_STORAGE: u8 = 0x0a;

pub const CMD_CHASSIS_STATUS: u8 = 0x01;
pub const CMD_CHASSIS_CONTROL: u8 = 0x02;
pub const CMD_SET_BOOT_OPTIONS: u8 = 0x08;
pub const CMD_GET_BOOT_OPTIONS: u8 = 0x09;
pub const CMD_DEVICE_ID: u8 = 0x01;
pub const CMD_SYSTEM_GUID: u8 = 0x37;
pub const CMD_SET_SESSION_PRIVILEGE: u8 = 0x3b;
pub const CMD_CLOSE_SESSION: u8 = 0x3c;
pub const CMD_FRU_INFO: u8 = 0x10;
pub const CMD_FRU_READ: u8 = 0x11;

/// Boot options parameter numbers.
pub const PARAM_SET_IN_PROGRESS: u8 = 0;
pub const PARAM_BOOT_INFO_ACK: u8 = 4;
pub const PARAM_BOOT_FLAGS: u8 = 5;

fn malformed(what: &'static str, detail: impl Into<String>) -> IpmiError {
    IpmiError::Malformed {
        what,
        detail: detail.into(),
    }
}

/// Power state from a Get Chassis Status reply.
pub fn parse_chassis_status(data: &[u8]) -> Result<PowerState, IpmiError> {
    let b = data
        .first()
        .ok_or_else(|| malformed("chassis status", "empty"))?;
    Ok(if b & 0x01 != 0 {
        PowerState::On
    } else {
        PowerState::Off
    })
}

/// Chassis Control code for an action, given the current power state:
/// a cycle or reset of a server that is off is a power up (BMCs refuse a
/// cycle of a powered-off chassis).
pub fn chassis_control_code(action: PowerAction, current: PowerState) -> u8 {
    match (action, current) {
        (PowerAction::ForceOff, _) => 0x00,
        (PowerAction::On, _) => 0x01,
        (PowerAction::Cycle | PowerAction::Reset, PowerState::Off) => 0x01,
        (PowerAction::Cycle, _) => 0x02,
        (PowerAction::Reset, _) => 0x03,
        (PowerAction::GracefulOff, _) => 0x05,
    }
}

/// The five bytes of boot options parameter 5 (boot flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootFlags(pub [u8; 5]);

impl BootFlags {
    pub const VALID: u8 = 0x80;
    pub const PERSISTENT: u8 = 0x40;
    pub const EFI: u8 = 0x20;

    /// One-time override (no persistent bit), as ipmitool's
    /// `chassis bootdev pxe|disk|cdrom [options=efiboot]` sends it.
    pub fn one_time(device: BootDevice, mode: FirmwareMode) -> BootFlags {
        let mut b0 = Self::VALID;
        if mode == FirmwareMode::Uefi {
            b0 |= Self::EFI;
        }
        let dev = match device {
            BootDevice::Network => 0x04,
            BootDevice::Disk => 0x08,
            // Selector 0101b: CD/DVD.
            BootDevice::Cd => 0x14,
        };
        BootFlags([b0, dev, 0, 0, 0])
    }

    /// The device the selector names, when it is one metalherd sets.
    pub fn device(&self) -> Option<BootDevice> {
        match self.device_selector() {
            0x01 => Some(BootDevice::Network),
            0x02 => Some(BootDevice::Disk),
            0x05 => Some(BootDevice::Cd),
            _ => None,
        }
    }

    /// Boot device selector (bits 5:2 of byte 2).
    pub fn device_selector(&self) -> u8 {
        (self.0[1] >> 2) & 0x0f
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Whether the BMC's read-back honours `wanted`. The device selector
    /// must match. The EFI bit is compared only when the BMC echoes the
    /// valid bit: some BMCs (OpenIPMI's ipmi_sim) read back only the
    /// device and leave byte 1 zero, which says nothing about the flags
    /// they keep; a BMC that echoes the flags but drops EFI did ignore it.
    pub fn honours(&self, wanted: &BootFlags) -> bool {
        if self.device_selector() != wanted.device_selector() {
            return false;
        }
        if self.0[0] & Self::VALID != 0 {
            return self.0[0] & Self::EFI == wanted.0[0] & Self::EFI;
        }
        true
    }
}

/// Request data of Set System Boot Options for one parameter.
pub fn set_boot_param(param: u8, value: &[u8]) -> Vec<u8> {
    let mut v = vec![param & 0x7f];
    v.extend_from_slice(value);
    v
}

/// Request data of Get System Boot Options for parameter 5.
pub fn get_boot_flags_request() -> [u8; 3] {
    [PARAM_BOOT_FLAGS, 0, 0]
}

/// Parse a Get System Boot Options reply for parameter 5.
pub fn parse_boot_flags(data: &[u8]) -> Result<BootFlags, IpmiError> {
    if data.len() < 7 {
        return Err(IpmiError::Truncated {
            what: "boot flags",
            need: 7,
            got: data.len(),
        });
    }
    if data[1] & 0x7f != PARAM_BOOT_FLAGS {
        return Err(malformed(
            "boot flags",
            format!("reply for parameter {}", data[1] & 0x7f),
        ));
    }
    let mut b = [0u8; 5];
    b.copy_from_slice(&data[2..7]);
    Ok(BootFlags(b))
}

/// Get Device ID reply fields used for inventory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceId {
    pub firmware: String,
    pub ipmi_version: String,
    pub manufacturer_id: u32,
    pub product_id: u16,
}

pub fn parse_device_id(d: &[u8]) -> Result<DeviceId, IpmiError> {
    if d.len() < 11 {
        return Err(IpmiError::Truncated {
            what: "device ID",
            need: 11,
            got: d.len(),
        });
    }
    Ok(DeviceId {
        firmware: format!("{}.{:02x}", d[2] & 0x7f, d[3]),
        ipmi_version: format!("{}.{}", d[4] & 0x0f, d[4] >> 4),
        manufacturer_id: u32::from_le_bytes([d[6], d[7], d[8] & 0x0f, 0]),
        product_id: u16::from_le_bytes([d[9], d[10]]),
    })
}

/// A few IANA enterprise numbers of server vendors, for a readable
/// manufacturer when the FRU has none.
pub fn manufacturer_name(iana: u32) -> Option<&'static str> {
    Some(match iana {
        2 => "IBM",
        11 => "HPE",
        343 => "Intel",
        674 => "Dell",
        4753 => "MontaVista",
        7244 => "Quanta",
        10876 => "Supermicro",
        19046 => "Lenovo",
        20974 => "American Megatrends",
        47196 => "HPE",
        49622 => "OpenBMC",
        _ => return None,
    })
}

/// System GUID (sent least significant byte first, like SMBIOS).
pub fn parse_system_guid(d: &[u8]) -> Result<String, IpmiError> {
    let b: [u8; 16] = d
        .get(..16)
        .and_then(|s| <[u8; 16]>::try_from(s).ok())
        .ok_or(IpmiError::Truncated {
            what: "system GUID",
            need: 16,
            got: d.len(),
        })?;
    Ok(uuid::Uuid::from_bytes_le(b).to_string())
}

/// FRU inventory area size in bytes (Get FRU Inventory Area Info).
pub fn parse_fru_info(d: &[u8]) -> Result<usize, IpmiError> {
    if d.len() < 3 {
        return Err(IpmiError::Truncated {
            what: "FRU area info",
            need: 3,
            got: d.len(),
        });
    }
    Ok(u16::from_le_bytes([d[0], d[1]]) as usize)
}

pub fn fru_read_request(fru_id: u8, offset: u16, count: u8) -> [u8; 4] {
    let o = offset.to_le_bytes();
    [fru_id, o[0], o[1], count]
}

/// Data of a Read FRU Data reply (count byte, then the bytes).
pub fn parse_fru_read(d: &[u8]) -> Result<&[u8], IpmiError> {
    let n = *d.first().ok_or(IpmiError::Truncated {
        what: "FRU data",
        need: 1,
        got: 0,
    })? as usize;
    d.get(1..1 + n).ok_or(IpmiError::Truncated {
        what: "FRU data",
        need: 1 + n,
        got: d.len(),
    })
}
