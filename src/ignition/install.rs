//! The install config: applied by Ignition in the network-booted live OS.
//! It carries a script (template `metalherd-install.sh`) and a unit that runs
//! it once: pick the root disk from the Machine's rootDeviceHints, write the
//! OS (flatcar-install or coreos-installer, by the class's `image.os`), keep
//! preserved partitions, hand over the node config (embedded or by URL), call
//! home `installed` or `failed` with the reason, reboot. Every value reaches
//! the script through an environment file whose values were checked. Pure.

use crate::api::{Machine, MachineClass};

use super::error::RenderError;
use super::node;
use super::render::{NodeConfigSource, Os, RenderContext, RenderSecrets, Resolved, to_json};
use super::spec::{Config, File, Passwd, PasswdUser, Unit};
use super::templates::{self as t, check_env, check_path, check_url, check_word, render};

pub(crate) fn install_config(
    r: &Resolved<'_>,
    machine: &Machine,
    class: &MachineClass,
    secrets: &RenderSecrets,
    ctx: &RenderContext,
) -> Result<Config, RenderError> {
    let img = r.image;
    let f = r.image_field;
    let mut vars: Vec<(&'static str, String)> = vec![("OS_VERSION", img.version.clone())];

    let Some(install) = &img.install else {
        return Err(RenderError::invalid(
            format!("{f}.install"),
            "required: the image written to disk",
        ));
    };
    check_url(&format!("{f}.install.url"), &install.url)?;
    // The digests are checked by the script with sha512sum/sha256sum.
    let sha512 = install.sha512.clone().unwrap_or_default();
    let sha256 = install.sha256.clone().unwrap_or_default();
    let hex = |s: &str, n: usize| {
        s.is_empty() || (s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    if !hex(&sha512, 128) {
        return Err(RenderError::invalid(
            format!("{f}.install.sha512"),
            "expected 128 hex digits",
        ));
    }
    if !hex(&sha256, 64) {
        return Err(RenderError::invalid(
            format!("{f}.install.sha256"),
            "expected 64 hex digits",
        ));
    }
    vars.push(("IMAGE_URL", install.url.clone()));
    vars.push(("IMAGE_SHA512", sha512.to_ascii_lowercase()));
    vars.push(("IMAGE_SHA256", sha256.to_ascii_lowercase()));
    if r.os == Os::Flatcar && install.sha512.is_none() && install.sha256.is_none() {
        // flatcar-install verifies the release signature itself, given the
        // mirror's base URL and the version.
        let suffix = format!("/{}/flatcar_production_image.bin.bz2", img.version);
        let base = install.url.strip_suffix(&suffix).ok_or_else(|| {
            RenderError::invalid(
                format!("{f}.install.url"),
                format!("without a sha256/sha512 the URL must end in {suffix} so flatcar-install can check its signature"),
            )
        })?;
        vars.push(("IMAGE_BASE_URL", base.to_string()));
    }

    let node_json = match &ctx.node_config {
        NodeConfigSource::Url(u) => {
            check_url("nodeConfigUrl", u)?;
            vars.push(("NODE_CONFIG_URL", u.clone()));
            None
        }
        NodeConfigSource::Embed => {
            let node = node::node_config(r, machine, class, secrets, ctx)?;
            Some(to_json(&node).map_err(|e| RenderError::invalid("nodeConfig", e.to_string()))?)
        }
    };

    vars.push(("PRESERVE_PARTLABELS", preserved_labels(class)?.join(" ")));
    if matches!(r.os, Os::Flatcar | Os::DebianCoreos) {
        vars.push(("KERNEL_ARGS", node::kernel_args(class)?.join(" ")));
    }

    vars.extend(hint_vars(machine)?);
    vars.extend(r.callhome_vars(ctx));
    for (k, v) in &vars {
        check_env(&format!("install.env {k}"), v)?;
    }

    let mut c = Config::new();
    c.add_file(File::text(
        "/etc/metalherd/install.env",
        0o600,
        &render("metalherd.env", &t::EnvFile { vars: &vars })?,
    ));
    let (installer, flatcar) = match r.os {
        Os::Flatcar => ("flatcar-install", true),
        Os::FedoraCoreos | Os::DebianCoreos => ("coreos-installer", false),
    };
    c.add_file(File::text(
        "/etc/metalherd/install.sh",
        0o700,
        &render(
            "metalherd-install.sh",
            &t::InstallScript {
                os_name: r.os.display(),
                installer,
                flatcar,
                grub_kargs: r.os == Os::DebianCoreos,
            },
        )?,
    ));
    c.add_file(File::text(
        "/etc/metalherd/callhome.sh",
        0o755,
        &render("metalherd-callhome.sh", &t::CallhomeScript)?,
    ));
    if let Some(json) = node_json {
        c.add_file(File::text("/etc/metalherd/node.ign", 0o600, &json));
    }
    c.add_unit(Unit::enabled(
        "metalherd-install.service",
        render(
            "metalherd-install.service",
            &t::InstallUnit {
                os_name: r.os.display(),
            },
        )?,
    ));
    if !class.spec.ssh_authorized_keys.is_empty() {
        // Reaching the live system helps when an install is stuck; the
        // node config checks the keys the same way.
        for (i, k) in class.spec.ssh_authorized_keys.iter().enumerate() {
            t::check_line(&format!("spec.sshAuthorizedKeys[{i}]"), k)?;
        }
        c.passwd = Some(Passwd {
            users: vec![PasswdUser {
                name: "core".into(),
                ssh_authorized_keys: class.spec.ssh_authorized_keys.clone(),
                groups: Vec::new(),
            }],
        });
    }
    Ok(c)
}

/// The class's `preservePartitions`, checked as GPT partition labels.
pub(crate) fn preserved_labels(class: &MachineClass) -> Result<Vec<String>, RenderError> {
    let mut labels = Vec::new();
    for (i, l) in class.spec.preserve_partitions.iter().enumerate() {
        let field = format!("spec.preservePartitions[{i}]");
        check_word(&field, l)?;
        if l.len() > 36 {
            return Err(RenderError::invalid(
                field,
                "GPT labels have at most 36 characters",
            ));
        }
        labels.push(l.clone());
    }
    Ok(labels)
}

/// The Machine's `rootDeviceHints` as `HINT_*` variables of the install
/// and wipe scripts (both pick the disk with them).
pub(crate) fn hint_vars(machine: &Machine) -> Result<Vec<(&'static str, String)>, RenderError> {
    let mut vars = Vec::new();
    if let Some(h) = &machine.spec.root_device_hints {
        let at = "spec.rootDeviceHints";
        if let Some(d) = &h.device_name {
            check_path(&format!("{at}.deviceName"), d)?;
            vars.push(("HINT_DEVICE_NAME", d.clone()));
        }
        if let Some(s) = &h.serial_number {
            vars.push((
                "HINT_SERIAL_NUMBER",
                check_env(&format!("{at}.serialNumber"), s)?.to_string(),
            ));
        }
        if let Some(m) = &h.model {
            vars.push((
                "HINT_MODEL",
                check_env(&format!("{at}.model"), m)?.to_string(),
            ));
        }
        if let Some(w) = &h.wwn {
            vars.push(("HINT_WWN", check_word(&format!("{at}.wwn"), w)?.to_string()));
        }
        // A volume the class creates: the disk with the WWN the BMC
        // reported for it (read after it was created, before this boot);
        // a BMC that reports none (sushy-tools, some controllers) gives
        // the volume's exact size instead, which one disk only may have.
        if let Some(v) = &h.volume {
            let field = format!("{at}.volume");
            if h.wwn.is_some() {
                return Err(RenderError::invalid(
                    field,
                    "set either volume or wwn, not both",
                ));
            }
            let found = machine
                .status
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .and_then(|s| s.volumes.iter().find(|x| &x.name == v));
            match found {
                None => {
                    return Err(RenderError::invalid(
                        field,
                        format!("the BMC reports no volume {v:?} (does the class create it?)"),
                    ));
                }
                Some(x) => match (&x.wwn, x.capacity_bytes) {
                    (Some(wwn), _) => {
                        vars.push(("HINT_WWN", check_word(&field, wwn)?.to_string()));
                    }
                    (None, Some(bytes)) if bytes > 0 => {
                        vars.push(("HINT_SIZE_BYTES", bytes.to_string()));
                    }
                    (None, _) => {
                        return Err(RenderError::invalid(
                            field,
                            format!(
                                "the BMC reports neither a WWN nor a size for volume {v:?}: \
                                 name the disk another way"
                            ),
                        ));
                    }
                },
            }
        }
        if let Some(g) = h.min_size_gigabytes {
            vars.push(("HINT_MIN_SIZE_GIB", g.to_string()));
        }
        if let Some(rot) = h.rotational {
            vars.push(("HINT_ROTATIONAL", rot.to_string()));
        }
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Machine whose hints name volume `os`, with the volumes its BMC
    /// reported.
    fn on_volume(volumes: serde_json::Value) -> Machine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metalherd.dev/v1alpha1",
            "kind": "Machine",
            "metadata": {"name": "m1", "namespace": "default"},
            "spec": {
                "bmc": {"address": "redfish://192.0.2.10", "credentialsSecretRef": {"name": "b"}},
                "rootDeviceHints": {"volume": "os"},
            },
            "status": {"volumes": {"volumes": volumes, "readAt": "2026-01-01T00:00:00Z"}},
        }))
        .unwrap()
    }

    #[test]
    fn a_volume_is_found_by_its_wwn_else_by_its_exact_size() {
        let m = on_volume(serde_json::json!([
            {"name": "os", "capacityBytes": 5368709120u64, "wwn": "0x600508b1001c4d2e"}
        ]));
        assert_eq!(
            hint_vars(&m).unwrap(),
            [("HINT_WWN", "0x600508b1001c4d2e".to_string())]
        );
        let m = on_volume(serde_json::json!([{"name": "os", "capacityBytes": 5368709120u64}]));
        assert_eq!(
            hint_vars(&m).unwrap(),
            [("HINT_SIZE_BYTES", "5368709120".to_string())]
        );
    }

    #[test]
    fn a_volume_with_neither_a_wwn_nor_a_size_or_none_at_all_is_refused() {
        let m = on_volume(serde_json::json!([{"name": "os"}]));
        let e = hint_vars(&m).unwrap_err().to_string();
        assert!(e.contains("neither a WWN nor a size"), "{e}");
        let m = on_volume(serde_json::json!([{"name": "data", "capacityBytes": 1}]));
        let e = hint_vars(&m).unwrap_err().to_string();
        assert!(e.contains("reports no volume \"os\""), "{e}");
    }
}
