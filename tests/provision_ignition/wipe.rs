//! Cleaning is chosen per operation: the install config keeps the class's
//! preserved partitions, the wipe config none, and says so itself.

use crate::common::ignition::{BOOT_TOKEN, JOIN_TOKEN, examples, secrets, url_ctx};
use crate::{file, json};
use metalherd::ignition::{Stage, render};

/// The value of `key` in an environment file as metalherd writes it
/// (`KEY="value"`).
fn env_value(env: &str, key: &str) -> Option<String> {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=\"")))
        .map(|v| v.trim_end_matches('"').to_string())
}

/// Cleaning is chosen per operation: an install (or reimage) keeps the
/// partitions the class preserves; a wipe keeps none, whatever the class
/// says, and says so in its config (the wiper reads it from there).
#[test]
fn the_operation_chooses_which_partitions_survive() {
    let mut checked = 0;
    for (name, m, class) in examples() {
        let labels = class.spec.preserve_partitions.join(" ");
        let install = render(Stage::Install, &m, &class, &secrets(), &url_ctx()).unwrap();
        let env = file(&install, "/etc/metalherd/install.env");
        assert_eq!(
            env_value(&env, "PRESERVE_PARTLABELS").as_deref(),
            Some(labels.as_str()),
            "{name}: {env}"
        );
        let wipe = render(Stage::Wipe, &m, &class, &secrets(), &url_ctx()).unwrap();
        let env = file(&wipe, "/etc/metalherd/wipe.env");
        assert_eq!(
            env_value(&env, "PRESERVE_PARTLABELS").as_deref(),
            Some(""),
            "{name}: {env}"
        );
        assert_eq!(
            env_value(&env, "METALHERD_TOKEN").as_deref(),
            Some(BOOT_TOKEN),
            "{name}: the wiper calls home with this boot's token"
        );
        let script = file(&wipe, "/etc/metalherd/wipe.sh");
        for piece in [
            "sgdisk --zap-all \"$DEV\"",
            "wipefs --all --force \"$DEV\"",
            "callhome.sh wiped",
            "select_disk",
        ] {
            assert!(script.contains(piece), "{name}: wipe.sh lacks {piece}");
        }
        let units: Vec<_> = wipe
            .systemd
            .iter()
            .flat_map(|s| s.units.iter())
            .map(|u| (u.name.clone(), u.enabled))
            .collect();
        assert_eq!(units, [("metalherd-wipe.service".to_string(), Some(true))]);
        // Nothing of the node: no join token, no install.
        let all = json(&wipe);
        assert!(!all.contains(JOIN_TOKEN), "{name}");
        assert!(!all.contains("install.sh"), "{name}");
        if !labels.is_empty() {
            checked += 1;
        }
    }
    assert!(checked > 0, "no example class preserves a partition");
}

/// The wiper picks the disk the installer wrote: the Machine's
/// rootDeviceHints reach the wipe config as they reach the install config,
/// checked the same way (a bad hint is refused with its field).
#[test]
fn the_wipe_config_names_the_disk_the_installer_wrote() {
    for (name, mut m, class) in examples() {
        let hints = m
            .spec
            .root_device_hints
            .get_or_insert_with(Default::default);
        hints.device_name = Some("/dev/disk/by-id/wwn-0x5000c500a1b2c3d4".into());
        let wipe = render(Stage::Wipe, &m, &class, &secrets(), &url_ctx()).unwrap();
        let install = render(Stage::Install, &m, &class, &secrets(), &url_ctx()).unwrap();
        for (cfg, path) in [
            (&wipe, "/etc/metalherd/wipe.env"),
            (&install, "/etc/metalherd/install.env"),
        ] {
            let env = file(cfg, path);
            assert_eq!(
                env_value(&env, "HINT_DEVICE_NAME").as_deref(),
                Some("/dev/disk/by-id/wwn-0x5000c500a1b2c3d4"),
                "{name} {path}: {env}"
            );
        }
        let mut bad = m.clone();
        if let Some(h) = bad.spec.root_device_hints.as_mut() {
            h.device_name = Some("sda; rm -rf /".into());
        }
        let e = render(Stage::Wipe, &bad, &class, &secrets(), &url_ctx()).unwrap_err();
        assert_eq!(
            e.field(),
            Some("spec.rootDeviceHints.deviceName"),
            "{name}: {e}"
        );
    }
}
