//! Any response body a BMC sends decodes into the Redfish model types or
//! gives an error (never a panic), and what decodes goes through the
//! driver's sans-IO logic (inventory, power plan, boot override checks,
//! task outcome).
#![no_main]

use libfuzzer_sys::fuzz_target;
use metalherd::api::PowerState;
use metalherd::bmc::quirks::Quirks;
use metalherd::bmc::redfish::{logic, model};
use metalherd::bmc::{BootDevice, FirmwareMode, PowerAction};

fuzz_target!(|data: &[u8]| {
    let quirks = Quirks::default();
    let _ = model::decode::<model::ServiceRoot>(data);
    let _ = model::decode::<model::Collection>(data);
    let _ = model::decode::<model::ErrorBody>(data);
    let _ = model::decode::<model::ActionInfo>(data);
    if let Ok(s) = model::decode::<model::ComputerSystem>(data) {
        let _ = logic::system_inventory(&s);
        let current = logic::parse_power_state(s.power_state.as_deref()).unwrap_or(PowerState::Unknown);
        let allowed = s.actions.reset.as_ref().map(|r| r.allowable_values.clone()).unwrap_or_default();
        for a in [PowerAction::On, PowerAction::GracefulOff, PowerAction::ForceOff, PowerAction::Cycle, PowerAction::Reset] {
            let _ = logic::plan_power(a, current, &allowed, &quirks);
        }
        for (d, m) in [(BootDevice::Network, FirmwareMode::Uefi), (BootDevice::Disk, FirmwareMode::Legacy)] {
            let _ = logic::boot_patch(d, m, &s.boot, &quirks);
            let sent = logic::boot_sends_mode(&s.boot, &quirks);
            let _ = logic::check_boot_readback(d, m, sent, false, &s.boot);
        }
    }
    if let Ok(n) = model::decode::<model::EthernetInterface>(data) {
        let _ = logic::nic_info(&n);
    }
    if let Ok(s) = model::decode::<model::SimpleStorage>(data) {
        let _ = logic::disks_from_simple_storage(&s);
    }
    let _ = model::decode::<model::Storage>(data);
    if let Ok(d) = model::decode::<model::Drive>(data) {
        let _ = logic::disk_from_drive(&d);
    }
    if let Ok(t) = model::decode::<model::Task>(data) {
        let _ = logic::task_outcome(t.task_state.as_deref());
    }
});
