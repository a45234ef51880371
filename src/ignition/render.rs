//! Pure rendering of a Machine's Ignition configs from its MachineClass:
//! `Stage::Install` (runs in the network-booted live OS, writes the OS to
//! disk, calls home, reboots), `Stage::Node` (the installed system:
//! hostname, network, containerd, kubelet, `kubeadm join`, call-home) and
//! `Stage::Wipe` (the live OS of a deprovisioning boot: clears the disk,
//! calls home `wiped`, powers off).
//!
//! Inputs are values (Machine, MachineClass, the join token, the per-boot
//! context); the output is a typed [`Config`] or a [`RenderError`] naming the
//! field to fix. No I/O, no clock, no randomness: the same inputs always give
//! the same bytes. Secrets are never logged or put into errors.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;

use crate::api::MacAddr;
use crate::api::validate::{check_version, is_dns_label};
use crate::api::{Machine, MachineClass, OsImage};

use super::error::RenderError;
use super::spec::Config;
use super::templates::{check_env, check_url};
use super::{install, node, wipe};

/// Which of a machine's configs to render.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// For the live OS booted over the network: installs to disk.
    Install,
    /// For the installed OS: joins the cluster.
    Node,
    /// For the live OS of a deprovisioning boot: wipes the disk.
    Wipe,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Install => "install",
            Stage::Node => "node",
            Stage::Wipe => "wipe",
        }
    }
}

/// Secret inputs of a render. Debug never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderSecrets {
    join_token: String,
    /// Cluster API bootstrap data, an Ignition 3.x config
    /// ([`super::bootstrap::to_ignition3`]).
    bootstrap: Option<String>,
}

impl fmt::Debug for RenderSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderSecrets")
            .field("join_token", &"<redacted>")
            .field("bootstrap", &self.bootstrap.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Default key of the bootstrap-token Secret.
pub const TOKEN_KEY: &str = "token";

impl RenderSecrets {
    /// Wrap a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`). The value is
    /// checked at render time, so a malformed Secret is refused with its
    /// field named and without echoing the value.
    pub fn new(join_token: impl Into<String>) -> Self {
        RenderSecrets {
            join_token: join_token.into(),
            bootstrap: None,
        }
    }

    /// Cluster API bootstrap data (an Ignition 3.x config) in place of a
    /// join token: the node joins with it instead of metalherd's `kubeadm
    /// join`.
    pub fn from_bootstrap(ignition3: String) -> Self {
        RenderSecrets {
            join_token: String::new(),
            bootstrap: Some(ignition3),
        }
    }

    /// Read a Machine's `spec.bootstrapDataSecretRef` Secret (keys
    /// `value` and `format`) and translate it
    /// ([`super::bootstrap::to_ignition3`]).
    pub fn from_bootstrap_secret(
        machine: &Machine,
        secret: Option<&Secret>,
    ) -> Result<Self, RenderError> {
        let field = "spec.bootstrapDataSecretRef";
        let name = machine
            .spec
            .bootstrap_data_secret_ref
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default();
        let Some(secret) = secret else {
            return Err(RenderError::MissingSecret {
                field: field.into(),
                name,
            });
        };
        let get = |key: &str| -> Option<Vec<u8>> {
            secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|b| b.0.clone())
                .or_else(|| {
                    secret
                        .string_data
                        .as_ref()
                        .and_then(|d| d.get(key))
                        .map(|s| s.clone().into_bytes())
                })
        };
        let Some(value) = get(super::bootstrap::VALUE_KEY) else {
            return Err(RenderError::MissingSecretKey {
                field: field.into(),
                name,
                key: super::bootstrap::VALUE_KEY.into(),
            });
        };
        let format =
            get(super::bootstrap::FORMAT_KEY).map(|f| String::from_utf8_lossy(&f).into_owned());
        Ok(Self::from_bootstrap(super::bootstrap::to_ignition3(
            format.as_deref(),
            &value,
        )?))
    }

    /// The bootstrap data, when the node joins with Cluster API's.
    pub fn bootstrap(&self) -> Option<&str> {
        self.bootstrap.as_deref()
    }

    /// Read the join token from the class's `spec.join.tokenSecretRef`
    /// Secret (`None` when it does not exist).
    pub fn from_secret(class: &MachineClass, secret: Option<&Secret>) -> Result<Self, RenderError> {
        let r = &class.spec.join.token_secret_ref;
        let field = "spec.join.tokenSecretRef";
        let Some(secret) = secret else {
            return Err(RenderError::MissingSecret {
                field: field.into(),
                name: r.name.clone(),
            });
        };
        let key = r.key.as_deref().unwrap_or(TOKEN_KEY);
        let value = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .cloned()
            });
        match value {
            Some(v) => Ok(RenderSecrets::new(v.trim())),
            None => Err(RenderError::MissingSecretKey {
                field: field.into(),
                name: r.name.clone(),
                key: key.to_string(),
            }),
        }
    }

    pub fn join_token(&self) -> &str {
        &self.join_token
    }
}

/// Where the install config finds the node config.
#[derive(Clone, PartialEq, Eq)]
pub enum NodeConfigSource {
    /// Embedded in the install config (no second fetch).
    Embed,
    /// Fetched by the installer from this URL (it may carry the per-boot
    /// token, so Debug hides it).
    Url(String),
}

impl fmt::Debug for NodeConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeConfigSource::Embed => f.write_str("Embed"),
            NodeConfigSource::Url(_) => f.write_str("Url(<redacted>)"),
        }
    }
}

/// Per-boot inputs minted by the boot services. Debug hides the token.
#[derive(Clone, PartialEq, Eq)]
pub struct RenderContext {
    /// `http(s)://host[:port]` of metalherd's boot HTTP service; call-home
    /// goes to `POST {base}/callhome/{installed|failed|booted|wiped}?mac=..&token=..`.
    pub callhome_base: String,
    /// Per-boot token proving the caller is this boot of this machine.
    pub boot_token: String,
    /// Id of this boot (`status.boot.id`).
    pub boot_id: String,
    /// MAC the machine booted from; `spec.bootMACAddress` when absent.
    pub mac: Option<String>,
    pub node_config: NodeConfigSource,
}

impl fmt::Debug for RenderContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderContext")
            .field("callhome_base", &self.callhome_base)
            .field("boot_token", &"<redacted>")
            .field("boot_id", &self.boot_id)
            .field("mac", &self.mac)
            .field("node_config", &self.node_config)
            .finish()
    }
}

/// Render one of a machine's configs. Nothing half-rendered is returned: any
/// problem is an error naming its field.
pub fn render(
    stage: Stage,
    machine: &Machine,
    class: &MachineClass,
    secrets: &RenderSecrets,
    ctx: &RenderContext,
) -> Result<Config, RenderError> {
    let ns = machine.metadata.namespace.as_deref().unwrap_or("default");
    let name = machine.metadata.name.as_deref().unwrap_or_default();
    let span = tracing::debug_span!(
        "ignition.render",
        namespace = ns,
        machine = name,
        stage = stage.as_str()
    );
    let _g = span.enter();
    let result = Resolved::new(machine, class, ctx).and_then(|r| match stage {
        Stage::Install => install::install_config(&r, machine, class, secrets, ctx),
        Stage::Node => node::node_config(&r, machine, class, secrets, ctx),
        Stage::Wipe => wipe::wipe_config(&r, machine, ctx),
    });
    match &result {
        Ok(c) => tracing::debug!(
            files = c.storage.as_ref().map_or(0, |s| s.files.len()),
            units = c.systemd.as_ref().map_or(0, |s| s.units.len()),
            "rendered"
        ),
        Err(e) => tracing::debug!(reason = e.reason(), field = e.field(), "refused"),
    }
    result
}

/// The config as compact JSON (what a server fetches).
pub fn to_json(config: &Config) -> Result<String, serde_json::Error> {
    serde_json::to_string(config)
}

/// The operating systems metalherd installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Os {
    Flatcar,
    FedoraCoreos,
    /// A CoreOS-style Debian image (deploy/node-image/ builds one): a live
    /// kernel, initramfs and rootfs like Fedora CoreOS's, installed by
    /// coreos-installer; Ignition 2.14, systemd-networkd, its own containerd.
    DebianCoreos,
}

impl Os {
    pub fn display(self) -> &'static str {
        match self {
            Os::Flatcar => "Flatcar Container Linux",
            Os::FedoraCoreos => "Fedora CoreOS",
            Os::DebianCoreos => "Debian (CoreOS-style)",
        }
    }
    /// Where downloaded binaries go: writable, on PATH, right SELinux label.
    pub fn bin_dir(self) -> &'static str {
        match self {
            Os::Flatcar => "/opt/bin",
            Os::FedoraCoreos | Os::DebianCoreos => "/usr/local/bin",
        }
    }
    /// Prefix whose `bin/` is `bin_dir` (release tarballs unpack here).
    pub fn prefix(self) -> &'static str {
        match self {
            Os::Flatcar => "/opt",
            Os::FedoraCoreos | Os::DebianCoreos => "/usr/local",
        }
    }
}

/// The machine's effective settings: class values with the machine's
/// overrides applied, parsed and checked once.
pub(crate) struct Resolved<'a> {
    pub os: Os,
    pub image: &'a OsImage,
    /// `spec.image` or `spec.overrides.image`, for error fields.
    pub image_field: &'static str,
    pub k8s_version: String,
    pub k8s_minor: u64,
    pub containerd_version: String,
    pub containerd_major: u64,
    pub namespace: String,
    pub name: String,
    pub hostname: String,
    pub mac: String,
    pub callhome_base: String,
}

/// Numeric parts of a checked version (`v1.33.4` -> [1, 33, 4]).
pub(crate) fn version_parts(field: &str, v: &str) -> Result<Vec<u64>, RenderError> {
    let malformed = || RenderError::MalformedVersion {
        field: field.to_string(),
        version: v.to_string(),
    };
    check_version(v).map_err(|_| malformed())?;
    let core = v.strip_prefix('v').unwrap_or(v);
    let core = core.split(['-', '+']).next().unwrap_or_default();
    core.split('.')
        .map(|p| p.parse::<u64>().map_err(|_| malformed()))
        .collect()
}

impl<'a> Resolved<'a> {
    fn new(
        machine: &'a Machine,
        class: &'a MachineClass,
        ctx: &RenderContext,
    ) -> Result<Self, RenderError> {
        let spec = &class.spec;
        let overrides = machine.spec.overrides.as_ref();

        let (image, image_field) = match overrides.and_then(|o| o.image.as_ref()) {
            Some(img) => (img, "spec.overrides.image"),
            None => (&spec.image, "spec.image"),
        };
        let os = match image.os.as_str() {
            "flatcar" => Os::Flatcar,
            "fedora-coreos" => Os::FedoraCoreos,
            "debian-coreos" => Os::DebianCoreos,
            other => {
                return Err(RenderError::invalid(
                    format!("{image_field}.os"),
                    format!(
                        "unknown OS {other:?} (supported: {})",
                        crate::api::OS_NAMES.join(", ")
                    ),
                ));
            }
        };
        version_parts(&format!("{image_field}.version"), &image.version)?;
        check_env(&format!("{image_field}.version"), &image.version)?;

        // Kubernetes version: the class's, or the machine's override when the
        // class's binaries are not pinned to a version.
        let class_k8s = version_parts("spec.kubernetes.version", &spec.kubernetes.version)?;
        let k8s_version = match overrides.and_then(|o| o.kubelet_version.as_deref()) {
            Some(v) if v != spec.kubernetes.version => {
                version_parts("spec.overrides.kubeletVersion", v)?;
                let k = &spec.kubernetes;
                if k.kubelet.is_some() || k.kubeadm.is_some() || k.sysext.is_some() {
                    return Err(RenderError::invalid(
                        "spec.overrides.kubeletVersion",
                        format!(
                            "the class pins kubelet artifacts for {}; use a class with {v} artifacts",
                            spec.kubernetes.version
                        ),
                    ));
                }
                v.to_string()
            }
            _ => spec.kubernetes.version.clone(),
        };
        let k8s_minor = if k8s_version == spec.kubernetes.version {
            class_k8s.get(1).copied().unwrap_or_default()
        } else {
            version_parts("spec.overrides.kubeletVersion", &k8s_version)?
                .get(1)
                .copied()
                .unwrap_or_default()
        };
        // kubeadm, URLs and sysext names spell it with a leading `v`.
        let k8s_version = if k8s_version.starts_with('v') {
            k8s_version
        } else {
            format!("v{k8s_version}")
        };

        let (rt, rt_field) = match overrides.and_then(|o| o.container_runtime.as_ref()) {
            Some(rt) => (rt, "spec.overrides.containerRuntime"),
            None => (&spec.container_runtime, "spec.containerRuntime"),
        };
        if rt.name != "containerd" {
            return Err(RenderError::UnknownRuntime {
                field: format!("{rt_field}.name"),
                name: rt.name.clone(),
            });
        }
        let parts = version_parts(&format!("{rt_field}.version"), &rt.version)?;
        let containerd_major = parts.first().copied().unwrap_or_default();
        if !matches!(containerd_major, 1 | 2) {
            return Err(RenderError::invalid(
                format!("{rt_field}.version"),
                format!("containerd {} is not supported (1.x or 2.x)", rt.version),
            ));
        }
        if rt_field == "spec.overrides.containerRuntime"
            && rt.version != spec.container_runtime.version
            && spec.kubernetes.containerd.is_some()
        {
            return Err(RenderError::invalid(
                "spec.overrides.containerRuntime.version",
                format!(
                    "the class pins the containerd {} archive; use a class with {} artifacts",
                    spec.container_runtime.version, rt.version
                ),
            ));
        }

        let namespace = machine
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let name = machine.metadata.name.clone().unwrap_or_default();
        if !is_dns_label(&namespace) {
            return Err(RenderError::invalid(
                "metadata.namespace",
                "not a valid namespace",
            ));
        }
        if name.is_empty() || name.len() > 253 || name.split('.').any(|l| !is_dns_label(l)) {
            return Err(RenderError::invalid("metadata.name", "not a valid name"));
        }
        let hostname = match machine
            .spec
            .network
            .as_ref()
            .and_then(|n| n.hostname.clone())
        {
            Some(h) if is_dns_label(&h) => h,
            Some(h) => {
                return Err(RenderError::invalid(
                    "spec.network.hostname",
                    format!("{h:?} is not a valid host name"),
                ));
            }
            None if is_dns_label(&name) => name.clone(),
            None => {
                return Err(RenderError::invalid(
                    "spec.network.hostname",
                    "required when metadata.name is not a valid host name",
                ));
            }
        };

        let (mac_field, mac) = match (&ctx.mac, &machine.spec.boot_mac_address) {
            (Some(m), _) => ("bootMAC", m),
            (None, Some(m)) => ("spec.bootMACAddress", m),
            (None, None) => {
                return Err(RenderError::invalid(
                    "spec.bootMACAddress",
                    "required: the installer and the node call home with it",
                ));
            }
        };
        let mac = mac
            .parse::<MacAddr>()
            .map(|m| m.to_string())
            .map_err(|_| RenderError::invalid(mac_field, "malformed MAC address"))?;

        let base = ctx.callhome_base.trim_end_matches('/');
        check_url("callhomeBase", base)?;
        if base.contains(['?', '#']) {
            return Err(RenderError::invalid(
                "callhomeBase",
                "must not carry a query",
            ));
        }
        let token_ok = |s: &str| {
            !s.is_empty()
                && s.len() <= 256
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        if !token_ok(&ctx.boot_token) {
            return Err(RenderError::invalid(
                "bootToken",
                "expected URL-safe characters",
            ));
        }
        if !token_ok(&ctx.boot_id) {
            return Err(RenderError::invalid(
                "bootId",
                "expected URL-safe characters",
            ));
        }

        Ok(Resolved {
            os,
            image,
            image_field,
            k8s_version,
            k8s_minor,
            containerd_version: rt.version.trim_start_matches('v').to_string(),
            containerd_major,
            namespace,
            name,
            hostname,
            mac,
            callhome_base: base.to_string(),
        })
    }

    /// Variables of the call-home environment file.
    pub fn callhome_vars(&self, ctx: &RenderContext) -> Vec<(&'static str, String)> {
        vec![
            ("METALHERD_CALLHOME_URL", self.callhome_base.clone()),
            ("METALHERD_MAC", self.mac.clone()),
            ("METALHERD_TOKEN", ctx.boot_token.clone()),
            ("METALHERD_BOOT_ID", ctx.boot_id.clone()),
        ]
    }
}

/// `sha512-<hex>` (preferred) or `sha256-<hex>` for Ignition's verification.
pub(crate) fn artifact_hash(
    field: &str,
    a: &crate::api::Artifact,
) -> Result<Option<String>, RenderError> {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(h) = &a.sha512 {
        if !hex(h, 128) {
            return Err(RenderError::invalid(
                format!("{field}.sha512"),
                "expected 128 hex digits",
            ));
        }
        return Ok(Some(format!("sha512-{}", h.to_ascii_lowercase())));
    }
    if let Some(h) = &a.sha256 {
        if !hex(h, 64) {
            return Err(RenderError::invalid(
                format!("{field}.sha256"),
                "expected 64 hex digits",
            ));
        }
        return Ok(Some(format!("sha256-{}", h.to_ascii_lowercase())));
    }
    Ok(None)
}
