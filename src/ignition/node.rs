//! The node config: what the installed OS applies on its first boot.
//! Hostname, static network (systemd-networkd on Flatcar, NetworkManager on
//! Fedora CoreOS), kernel modules and sysctls, containerd with its config,
//! kubelet/kubeadm (downloaded and verified, or a systemd-sysext image),
//! `kubeadm join` with a JoinConfiguration, ssh keys, the class's files,
//! units and fragments, and a unit that calls home `booted`. Pure.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::api::{Machine, MachineClass};

use super::error::RenderError;
use super::render::{Os, RenderContext, RenderSecrets, Resolved, artifact_hash};
use super::spec::{
    Config, Dropin, File, IgnitionConfig, KernelArguments, Link, Passwd, PasswdUser, Resource, Unit,
};
use super::templates::{self as t, Archive, check_line, check_path, check_url, check_word, render};
use super::{join, merge};

const JOIN_CONFIG: &str = "/etc/metalherd/kubeadm-join.yaml";

pub(crate) fn node_config(
    r: &Resolved<'_>,
    machine: &Machine,
    class: &MachineClass,
    secrets: &RenderSecrets,
    ctx: &RenderContext,
) -> Result<Config, RenderError> {
    let spec = &class.spec;
    let mut c = Config::new();

    c.add_file(File::text(
        "/etc/hostname",
        0o644,
        &format!("{}\n", r.hostname),
    ));
    network(r, machine, &mut c)?;
    c.add_file(File::text(
        "/etc/modules-load.d/metalherd-k8s.conf",
        0o644,
        &render("k8s-modules.conf", &t::ModulesFile)?,
    ));
    c.add_file(File::text(
        "/etc/sysctl.d/90-metalherd-k8s.conf",
        0o644,
        &render("k8s-sysctl.conf", &t::SysctlFile)?,
    ));

    // Container runtime and Kubernetes binaries.
    let bin_dir = r.os.bin_dir();
    let mut archives = Vec::new();
    let k = &spec.kubernetes;
    c.add_file(File::text(
        "/etc/containerd/config.toml",
        0o644,
        &render(
            "containerd-config.toml",
            &t::ContainerdConfig {
                version: &r.containerd_version,
                v3: r.containerd_major >= 2,
            },
        )?,
    ));
    if let Some(a) = &k.containerd {
        let path = "/opt/metalherd/archives/containerd.tar.gz";
        c.add_file(remote_file(path, 0o644, a, "spec.kubernetes.containerd")?);
        archives.push(Archive {
            dest: r.os.prefix().to_string(),
            path: path.to_string(),
        });
    }
    if let Some(a) = &k.cni_plugins {
        let path = "/opt/metalherd/archives/cni-plugins.tgz";
        c.add_file(remote_file(path, 0o644, a, "spec.kubernetes.cniPlugins")?);
        archives.push(Archive {
            dest: "/opt/cni/bin".to_string(),
            path: path.to_string(),
        });
    }
    let unpack = !archives.is_empty();
    if unpack {
        c.add_unit(Unit::enabled(
            "metalherd-unpack.service",
            render(
                "metalherd-unpack.service",
                &t::UnpackUnit {
                    archives: &archives,
                },
            )?,
        ));
    }
    if k.containerd.is_some() {
        c.add_unit(Unit::enabled(
            "containerd.service",
            render(
                "containerd.service",
                &t::ContainerdUnit {
                    version: &r.containerd_version,
                    bin_dir,
                },
            )?,
        ));
    } else {
        // The OS's own containerd, pointed at our config (Flatcar reads
        // CONTAINERD_CONFIG; Fedora CoreOS reads /etc/containerd/config.toml).
        let mut unit = Unit {
            name: "containerd.service".into(),
            enabled: Some(true),
            ..Unit::default()
        };
        if r.os == Os::Flatcar {
            unit.dropins.push(Dropin {
                name: "10-metalherd.conf".into(),
                contents: Some(render("containerd-dropin.conf", &t::ContainerdDropin)?),
            });
        }
        c.add_unit(unit);
    }

    let (kubelet, kubeadm) = kube_binaries(r, class, &mut c)?;
    let mut bootstrap_merge = None;
    c.add_unit(Unit::enabled(
        "kubelet.service",
        render(
            "kubelet.service",
            &t::KubeletUnit {
                version: &r.k8s_version,
                kubelet: &kubelet,
                bin_dir,
                unpack,
            },
        )?,
    ));

    if let Some(bootstrap) = secrets.bootstrap() {
        // Cluster API's bootstrap data runs kubeadm; the kubelet registers
        // with the provider ID Cluster API matches its Node by.
        let ns = machine.metadata.namespace.as_deref().unwrap_or("default");
        let name = machine.metadata.name.as_deref().unwrap_or_default();
        c.add_file(File::text(
            "/etc/default/kubelet",
            0o644,
            &format!(
                "KUBELET_EXTRA_ARGS=--provider-id={}\n",
                crate::capi::api::provider_id(ns, name)
            ),
        ));
        c.add_unit(Unit {
            name: "kubeadm.service".into(),
            dropins: vec![Dropin {
                name: "10-metalherd.conf".into(),
                contents: Some(render(
                    "kubeadm-bootstrap.conf",
                    &t::BootstrapDropin { bin_dir, unpack },
                )?),
            }],
            ..Unit::default()
        });
        bootstrap_merge = Some(Resource::data(bootstrap.as_bytes()));
    } else {
        // kubeadm join.
        let mut join = File::text(
            JOIN_CONFIG,
            0o600,
            &join::join_configuration(r, class, secrets)?,
        );
        join.overwrite = Some(true);
        c.add_file(join);
        c.add_unit(Unit::enabled(
            "metalherd-kubeadm-join.service",
            render(
                "metalherd-kubeadm-join.service",
                &t::JoinUnit {
                    kubeadm: &kubeadm,
                    bin_dir,
                    unpack,
                },
            )?,
        ));
    }

    // Call home `booted` once the kubelet runs.
    c.add_file(File::text(
        "/etc/metalherd/callhome.sh",
        0o755,
        &render("metalherd-callhome.sh", &t::CallhomeScript)?,
    ));
    c.add_file(File::text(
        "/etc/metalherd/callhome.env",
        0o600,
        &render(
            "metalherd.env",
            &t::EnvFile {
                vars: &r.callhome_vars(ctx),
            },
        )?,
    ));
    c.add_unit(Unit::enabled(
        "metalherd-booted.service",
        render(
            "metalherd-booted.service",
            &t::BootedUnit {
                boot_id: &ctx.boot_id,
                join_unit: if secrets.bootstrap().is_some() {
                    "kubeadm.service"
                } else {
                    "metalherd-kubeadm-join.service"
                },
                require_join: secrets.bootstrap().is_some(),
            },
        )?,
    ));

    ssh_keys(class, &mut c)?;
    if r.os == Os::FedoraCoreos && !spec.kernel_args.is_empty() {
        // Flatcar and the Debian image get them from the installer (a
        // grub.cfg fragment).
        let args = kernel_args(class)?;
        c.kernel_arguments = Some(KernelArguments {
            should_exist: args,
            should_not_exist: Vec::new(),
        });
    }
    class_files_and_units(class, &mut c)?;

    let mut merges = merge::fragments(class)?;
    // Merged last: the bootstrap provider's files and units win.
    merges.extend(bootstrap_merge);
    if !merges.is_empty() {
        c.ignition.config = Some(IgnitionConfig {
            merge: merges,
            replace: None,
        });
    }
    Ok(c)
}

/// A remote file pinned by the artifact's digest.
fn remote_file(
    path: &str,
    mode: u32,
    a: &crate::api::Artifact,
    field: &str,
) -> Result<File, RenderError> {
    check_url(&format!("{field}.url"), &a.url)?;
    Ok(File::remote(path, mode, &a.url, artifact_hash(field, a)?))
}

/// Place kubelet and kubeadm; returns their paths.
fn kube_binaries(
    r: &Resolved<'_>,
    class: &MachineClass,
    c: &mut Config,
) -> Result<(String, String), RenderError> {
    let k = &class.spec.kubernetes;
    if let Some(a) = &k.sysext {
        if r.os != Os::Flatcar {
            return Err(RenderError::invalid(
                "spec.kubernetes.sysext",
                "systemd-sysext images are used on Flatcar only; give kubelet and kubeadm URLs",
            ));
        }
        let file = a
            .url
            .rsplit('/')
            .next()
            .filter(|f| f.ends_with(".raw") && !f.is_empty())
            .ok_or_else(|| {
                RenderError::invalid("spec.kubernetes.sysext.url", "must name a .raw image")
            })?;
        if !file.contains(r.k8s_version.as_str()) {
            return Err(RenderError::invalid(
                "spec.kubernetes.sysext.url",
                format!("{file} does not carry Kubernetes {}", r.k8s_version),
            ));
        }
        let path = format!("/opt/extensions/kubernetes/{file}");
        c.add_file(remote_file(&path, 0o644, a, "spec.kubernetes.sysext")?);
        c.storage_mut().links.push(Link {
            path: "/etc/extensions/kubernetes.raw".into(),
            target: path,
            hard: Some(false),
            overwrite: Some(true),
            ..Link::default()
        });
        return Ok(("/usr/bin/kubelet".into(), "/usr/bin/kubeadm".into()));
    }
    let bin = r.os.bin_dir();
    let (Some(kubelet), Some(kubeadm)) = (&k.kubelet, &k.kubeadm) else {
        return Err(RenderError::invalid(
            "spec.kubernetes",
            "set sysext (Flatcar), or both kubelet and kubeadm URLs",
        ));
    };
    for (name, a) in [("kubelet", kubelet), ("kubeadm", kubeadm)] {
        c.add_file(remote_file(
            &format!("{bin}/{name}"),
            0o755,
            a,
            &format!("spec.kubernetes.{name}"),
        )?);
    }
    if let Some(a) = &k.kubectl {
        c.add_file(remote_file(
            &format!("{bin}/kubectl"),
            0o755,
            a,
            "spec.kubernetes.kubectl",
        )?);
    }
    Ok((format!("{bin}/kubelet"), format!("{bin}/kubeadm")))
}

fn network(r: &Resolved<'_>, machine: &Machine, c: &mut Config) -> Result<(), RenderError> {
    let Some(net) = &machine.spec.network else {
        return Ok(());
    };
    let Some(address) = &net.address else {
        return Ok(()); // DHCP, the OS default.
    };
    let addr: ipnet::IpNet = address.parse().map_err(|_| {
        RenderError::invalid(
            "spec.network.address",
            "expected an address with prefix length",
        )
    })?;
    let address = addr.to_string();
    let gateway = match &net.gateway {
        Some(g) => Some(
            g.parse::<IpAddr>()
                .map_err(|_| RenderError::invalid("spec.network.gateway", "not an IP address"))?
                .to_string(),
        ),
        None => None,
    };
    let mut dns = Vec::new();
    for (i, d) in net.dns.iter().enumerate() {
        let ip: IpAddr = d.parse().map_err(|_| {
            RenderError::invalid(format!("spec.network.dns[{i}]"), "not an IP address")
        })?;
        dns.push(ip.to_string());
    }
    if let Some(d) = &net.domain
        && !crate::api::validate::is_dns_subdomain(d)
    {
        return Err(RenderError::invalid(
            "spec.network.domain",
            "not a valid domain",
        ));
    }
    let mac = Some(r.mac.as_str());
    match r.os {
        Os::Flatcar | Os::DebianCoreos => c.add_file(File::text(
            "/etc/systemd/network/10-metalherd.network",
            0o644,
            &render(
                "metalherd-networkd.network",
                &t::NetworkdFile {
                    mac,
                    address: &address,
                    gateway: gateway.as_deref(),
                    dns: &dns,
                    domain: net.domain.as_deref(),
                },
            )?,
        )),
        Os::FedoraCoreos => {
            let v6 = matches!(addr, ipnet::IpNet::V6(_));
            let upper = r.mac.to_ascii_uppercase();
            c.add_file(File::text(
                "/etc/NetworkManager/system-connections/metalherd.nmconnection",
                0o600,
                &render(
                    "metalherd.nmconnection",
                    &t::NmFile {
                        mac: Some(&upper),
                        family: if v6 { "ipv6" } else { "ipv4" },
                        other_family: if v6 { "ipv4" } else { "ipv6" },
                        other_method: if v6 { "disabled" } else { "auto" },
                        address: &address,
                        gateway: gateway.as_deref(),
                        dns: &dns,
                        domain: net.domain.as_deref(),
                    },
                )?,
            ))
        }
    }
    Ok(())
}

fn ssh_keys(class: &MachineClass, c: &mut Config) -> Result<(), RenderError> {
    let keys = &class.spec.ssh_authorized_keys;
    if keys.is_empty() {
        return Ok(());
    }
    for (i, k) in keys.iter().enumerate() {
        let field = format!("spec.sshAuthorizedKeys[{i}]");
        check_line(&field, k)?;
        if !(k.starts_with("ssh-") || k.starts_with("ecdsa-") || k.starts_with("sk-")) {
            return Err(RenderError::invalid(field, "not an OpenSSH public key"));
        }
    }
    c.passwd = Some(Passwd {
        users: vec![PasswdUser {
            name: "core".into(),
            ssh_authorized_keys: keys.clone(),
            groups: Vec::new(),
        }],
    });
    Ok(())
}

pub(crate) fn kernel_args(class: &MachineClass) -> Result<Vec<String>, RenderError> {
    class
        .spec
        .kernel_args
        .iter()
        .enumerate()
        .map(|(i, a)| check_word(&format!("spec.kernelArgs[{i}]"), a).map(str::to_string))
        .collect()
}

fn is_unit_name(s: &str) -> bool {
    const KINDS: [&str; 7] = [
        ".service", ".socket", ".timer", ".mount", ".path", ".target", ".slice",
    ];
    KINDS.iter().any(|k| s.len() > k.len() && s.ends_with(k))
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b':' | b'\\')
        })
}

fn class_files_and_units(class: &MachineClass, c: &mut Config) -> Result<(), RenderError> {
    let ours: BTreeSet<String> = c
        .storage
        .iter()
        .flat_map(|s| {
            s.files
                .iter()
                .map(|f| f.path.clone())
                .chain(s.links.iter().map(|l| l.path.clone()))
        })
        .collect();
    let mut seen = BTreeSet::new();
    for (i, f) in class.spec.files.iter().enumerate() {
        let field = format!("spec.files[{i}]");
        check_path(&format!("{field}.path"), &f.path)?;
        if ours.contains(&f.path) || !seen.insert(f.path.clone()) {
            return Err(RenderError::invalid(
                format!("{field}.path"),
                format!(
                    "{} is already written (by metalherd or an earlier entry)",
                    f.path
                ),
            ));
        }
        let mode = f.mode.unwrap_or(0o644);
        if mode > 0o7777 {
            return Err(RenderError::invalid(
                format!("{field}.mode"),
                "not a file mode",
            ));
        }
        let file = match (&f.contents, &f.source) {
            (Some(text), None) => File::text(&f.path, mode, text),
            (None, Some(a)) => remote_file(&f.path, mode, a, &format!("{field}.source"))?,
            _ => {
                return Err(RenderError::invalid(
                    field,
                    "set exactly one of contents and source",
                ));
            }
        };
        c.add_file(file);
    }
    for (i, u) in class.spec.units.iter().enumerate() {
        let field = format!("spec.units[{i}]");
        if !is_unit_name(&u.name) {
            return Err(RenderError::invalid(
                format!("{field}.name"),
                "not a systemd unit name",
            ));
        }
        let mut dropins = Vec::new();
        for (j, d) in u.dropins.iter().enumerate() {
            if !d.name.ends_with(".conf")
                || d.name.contains('/')
                || d.name.chars().any(char::is_whitespace)
            {
                return Err(RenderError::invalid(
                    format!("{field}.dropins[{j}].name"),
                    "expected a file name ending in .conf",
                ));
            }
            dropins.push(Dropin {
                name: d.name.clone(),
                contents: Some(d.contents.clone()),
            });
        }
        let units = &mut c.systemd_mut().units;
        if let Some(existing) = units.iter_mut().find(|x| x.name == u.name) {
            // Drop-ins (and enabling) on a unit metalherd writes are fine;
            // replacing its contents is not.
            if u.contents.is_some()
                || existing
                    .dropins
                    .iter()
                    .any(|d| dropins.iter().any(|x| x.name == d.name))
            {
                return Err(RenderError::invalid(
                    format!("{field}.name"),
                    format!("{} is written by metalherd; add drop-ins instead", u.name),
                ));
            }
            existing.dropins.extend(dropins);
            if u.enabled.is_some() {
                existing.enabled = u.enabled;
            }
        } else {
            units.push(Unit {
                name: u.name.clone(),
                enabled: u.enabled,
                mask: None,
                contents: u.contents.clone(),
                dropins,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_names() {
        assert!(is_unit_name("foo.service"));
        assert!(is_unit_name("getty@tty1.service"));
        assert!(!is_unit_name(".service"));
        assert!(!is_unit_name("foo"));
        assert!(!is_unit_name("a b.service"));
    }
}
