//! The virtual rack's configuration: metalherd's config file merged with a
//! test's fragment, and its firmware as its BMC emulator sees it.

/// sushy-tools config lines for a rack of `fw` VMs (`uefi`, `secboot`).
pub fn sushy_extra(fw: &str) -> &'static str {
    // sushy-tools reads a System's Secure Boot state from the VARS
    // template of its NVRAM, and rewrites loader and NVRAM on every
    // boot-mode change (metalherd's one-time boot override names the
    // mode), to the map's loader and, Secure Boot not being asked for,
    // its "disabled" VARS: a Secure Boot rack maps both to the Secure
    // Boot build and Microsoft's keys, so the server stays as shipped.
    if fw == "secboot" {
        "SUSHY_EMULATOR_SECURE_BOOT_ENABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.ms.fd'\n\
             SUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.ms.fd'\n\
             SUSHY_EMULATOR_BOOT_LOADER_MAP = {'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE_4M.secboot.fd'}, 'Legacy': {'x86_64': None}}"
    } else {
        "SUSHY_EMULATOR_SECURE_BOOT_ENABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.ms.fd'"
    }
}

/// `extra`'s keys into `base`: mappings merge, anything else replaces.
pub fn merge_yaml(base: &mut serde_yaml::Value, extra: serde_yaml::Value) {
    match (base, extra) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(e)) => {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(old) => merge_yaml(old, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, e) => *b = e,
    }
}
