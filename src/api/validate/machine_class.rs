//! MachineClass validation: the OS image, Kubernetes and runtime versions,
//! the join settings, files, taints, kernel arguments and Ignition fragments.

use serde_json::Value;

use super::ValidationErrors;
use super::common::{check_version, validate_image, validate_runtime, validate_served_artifact};
use crate::api::machine_class::MachineClassSpec;

pub(super) fn validate_class_spec(spec: &MachineClassSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    validate_image(&spec.image, "spec.image", &mut errs);
    if let Err(e) = check_version(&spec.kubernetes.version) {
        errs.push("spec.kubernetes.version", e.to_string());
    }
    validate_runtime(&spec.container_runtime, "spec.containerRuntime", &mut errs);
    if spec.join.api_server_endpoint.is_empty() {
        errs.push("spec.join.apiServerEndpoint", "required (host:port)");
    }
    if spec.join.token_secret_ref.name.is_empty() {
        errs.push(
            "spec.join.tokenSecretRef.name",
            "required: the Secret with the bootstrap token",
        );
    }
    for (i, h) in spec.join.ca_cert_hashes.iter().enumerate() {
        let ok = h
            .strip_prefix("sha256:")
            .is_some_and(|x| x.len() == 64 && x.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            errs.push(
                format!("spec.join.caCertHashes[{i}]"),
                "expected sha256:<64 hex digits>",
            );
        }
    }
    for (i, f) in spec.files.iter().enumerate() {
        if !f.path.starts_with('/') {
            errs.push(format!("spec.files[{i}].path"), "must be absolute");
        }
        if f.contents.is_some() == f.source.is_some() {
            errs.push(
                format!("spec.files[{i}]"),
                "set exactly one of contents and source",
            );
        }
    }
    for (i, t) in spec.node_taints.iter().enumerate() {
        if !matches!(
            t.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            errs.push(
                format!("spec.nodeTaints[{i}].effect"),
                format!("unknown effect {:?}", t.effect),
            );
        }
    }
    for (i, a) in spec.kernel_args.iter().enumerate() {
        if a.is_empty() || a.chars().any(|c| c.is_whitespace() || c.is_control()) {
            errs.push(
                format!("spec.kernelArgs[{i}]"),
                "one argument per entry, without whitespace",
            );
        }
    }
    for (i, f) in spec.ignition_fragments.iter().enumerate() {
        if f.inline.is_some() == f.source.is_some() {
            errs.push(
                format!("spec.ignitionFragments[{i}]"),
                "set exactly one of inline and source",
            );
        }
        if let Some(s) = &f.inline
            && serde_json::from_str::<Value>(s).is_err()
        {
            errs.push(
                format!("spec.ignitionFragments[{i}].inline"),
                "does not parse as JSON",
            );
        }
    }
    let mut components = std::collections::BTreeSet::new();
    for (i, f) in spec.firmware.iter().enumerate() {
        let at = format!("spec.firmware[{i}]");
        if f.component.is_empty() || f.component.chars().any(|c| c.is_whitespace() || c == '/') {
            errs.push(
                format!("{at}.component"),
                "required: BIOS, or the Id of a FirmwareInventory member (no spaces or slashes)",
            );
        } else if !components.insert(f.component.as_str()) {
            errs.push(
                format!("{at}.component"),
                format!("{} is named twice", f.component),
            );
        }
        if f.version.trim().is_empty() {
            errs.push(
                format!("{at}.version"),
                "required: the version the component reports once updated",
            );
        }
        validate_served_artifact(&f.image, &format!("{at}.image"), &mut errs);
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, v) in spec.volumes.iter().enumerate() {
        let at = format!("spec.volumes[{i}]");
        if v.name.is_empty() || v.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            errs.push(format!("{at}.name"), "required, without whitespace");
        } else if !names.insert(v.name.as_str()) {
            errs.push(format!("{at}.name"), format!("{} is named twice", v.name));
        }
        match crate::api::RAID_TYPES
            .iter()
            .find(|(t, _)| *t == v.raid_type)
        {
            None => errs.push(
                format!("{at}.raidType"),
                format!(
                    "unknown RAID type {:?} (RAID0, RAID1, RAID5, RAID6, RAID10)",
                    v.raid_type
                ),
            ),
            Some((t, min)) if v.drives.count < *min => errs.push(
                format!("{at}.drives.count"),
                format!("{t} needs at least {min} drives"),
            ),
            Some(_) => {}
        }
        if v.size_gigabytes == Some(0) {
            errs.push(format!("{at}.sizeGigabytes"), "must be positive");
        }
    }
    errs.into_result()
}
