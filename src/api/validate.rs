//! Manifest validation with field paths. Every error names the field it is
//! about (`spec.bmc.address: unsupported scheme "ftp" ...`) so a user can fix
//! the manifest without reading code. Pure: no store access; references to
//! other objects (class, Secret) are checked by their consumers.

use std::fmt;
use std::net::IpAddr;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Kind;
use super::machine::{Machine, MachineSpec};
use super::machine_class::{MachineClass, MachineClassSpec};
use super::machine_set::{MachineSet, MachineSetSpec};

/// One problem with one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All problems found in one manifest.
#[derive(Clone, Debug, Default, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|e| e.to_string()).collect();
        f.write_str(&parts.join("; "))
    }
}

impl ValidationErrors {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }
    fn into_result(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
    pub fn single(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = ValidationErrors::default();
        e.push(field, message);
        e
    }
}

/// Decode a value into a typed object, reporting the path of the first field
/// serde rejects (unknown fields, wrong types).
pub fn decode<T: DeserializeOwned>(v: &Value) -> Result<T, ValidationErrors> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            "<root>".to_string()
        } else {
            path
        };
        let msg = e.into_inner().to_string();
        // serde's own message ends with " at line x column y" only for text
        // input; values have none. Trim the list of expected fields, which is
        // noisy for large structs.
        let msg = match msg.find(", expected one of") {
            Some(i) => msg[..i].to_string(),
            None => msg,
        };
        ValidationErrors::single(field, msg)
    })
}

/// Validate a manifest of the given kind: shape (unknown fields, types),
/// then meaning (addresses, versions, references).
pub fn validate(kind: Kind, obj: &Value) -> Result<(), ValidationErrors> {
    validate_meta(obj)?;
    match kind {
        Kind::Machine => {
            let m: Machine = decode(obj)?;
            validate_machine_spec(&m.spec)
        }
        Kind::MachineClass => {
            let c: MachineClass = decode(obj)?;
            validate_class_spec(&c.spec)
        }
        Kind::MachineSet => {
            let s: MachineSet = decode(obj)?;
            validate_set_spec(&s.spec)
        }
        Kind::Secret => validate_secret(obj),
        Kind::Event | Kind::DiscoveredMachine => Ok(()),
    }
}

fn validate_meta(obj: &Value) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        errs.push("metadata.name", "required");
    } else if !is_dns_subdomain(name) {
        errs.push(
            "metadata.name",
            format!("{name:?} is not a valid name (lower-case letters, digits, '-' and '.', at most 253 characters)"),
        );
    }
    if let Some(ns) = obj
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        && !is_dns_label(ns)
    {
        errs.push(
            "metadata.namespace",
            format!("{ns:?} is not a valid namespace"),
        );
    }
    errs.into_result()
}

/// RFC 1123 label: what Kubernetes accepts for namespaces and host names.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what Kubernetes accepts for object names.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Parse a MAC address written `aa:bb:cc:dd:ee:ff` or `aa-bb-...`, any case.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut out = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        if p.len() != 2 {
            return None;
        }
        out[i] = u8::from_str_radix(p, 16).ok()?;
    }
    Some(out)
}

/// Canonical lower-case colon form of a MAC.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Check a version string like `v1.33.2`, `1.7.27` or `4230.2.3`: dotted
/// numbers, optional leading `v`, optional `-suffix`.
pub fn check_version(s: &str) -> Result<(), String> {
    let core = s.strip_prefix('v').unwrap_or(s);
    let core = core.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    if s.is_empty()
        || parts.len() < 2
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!(
            "malformed version {s:?} (expected dotted numbers like \"v1.33.2\")"
        ));
    }
    Ok(())
}

/// Parsed BMC address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BmcAddress {
    Redfish {
        /// `https://host:port` (or http) of the service.
        base: url::Url,
        /// `/redfish/v1/Systems/ID` when the address names a system.
        system_path: Option<String>,
    },
    Ipmi {
        host: String,
        port: u16,
    },
}

/// Parse and check a `spec.bmc.address`.
pub fn parse_bmc_address(s: &str) -> Result<BmcAddress, String> {
    let u = url::Url::parse(s).map_err(|e| format!("not a URL ({e}): {s:?}"))?;
    let host = match u.host_str() {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => return Err(format!("{s:?} has no host")),
    };
    match u.scheme() {
        "redfish+https" | "redfish+http" | "redfish" => {
            let scheme = if u.scheme() == "redfish+http" {
                "http"
            } else {
                "https"
            };
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let base = url::Url::parse(&format!("{scheme}://{host}{port}"))
                .map_err(|e| format!("not a URL ({e}): {s:?}"))?;
            let path = u.path().trim_end_matches('/');
            let system_path = if path.is_empty() {
                None
            } else if path.starts_with("/redfish/v1/") {
                Some(path.to_string())
            } else {
                return Err(format!(
                    "path {path:?} is not a Redfish path (expected /redfish/v1/Systems/ID)"
                ));
            };
            Ok(BmcAddress::Redfish { base, system_path })
        }
        "ipmi" => Ok(BmcAddress::Ipmi {
            host,
            port: u.port().unwrap_or(623),
        }),
        other => Err(format!(
            "unsupported scheme {other:?} (use redfish+https, redfish+http or ipmi)"
        )),
    }
}

fn validate_machine_spec(spec: &MachineSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    if let Err(e) = parse_bmc_address(&spec.bmc.address) {
        errs.push("spec.bmc.address", e);
    }
    if spec.bmc.credentials_secret_ref.name.is_empty() {
        errs.push(
            "spec.bmc.credentialsSecretRef.name",
            "required: the Secret with the BMC's username and password",
        );
    }
    if let Some(cs) = spec.bmc.cipher_suite
        && cs != 3
        && cs != 17
    {
        errs.push(
            "spec.bmc.cipherSuite",
            format!("unsupported cipher suite {cs} (use 3 or 17)"),
        );
    }
    if spec.bmc.insecure_skip_verify && spec.bmc.ca_bundle.is_some() {
        errs.push(
            "spec.bmc.insecureSkipVerify",
            "set either caBundle or insecureSkipVerify, not both",
        );
    }
    if let Some(mac) = &spec.boot_mac_address
        && parse_mac(mac).is_none()
    {
        errs.push(
            "spec.bootMACAddress",
            format!("malformed MAC address {mac:?} (expected aa:bb:cc:dd:ee:ff)"),
        );
    }
    if let Some(net) = &spec.network {
        validate_network(net, &mut errs);
    }
    if let Some(c) = &spec.class_ref
        && !is_dns_subdomain(&c.name)
    {
        errs.push(
            "spec.classRef.name",
            format!("{:?} is not a valid name", c.name),
        );
    }
    if let Some(o) = &spec.overrides {
        validate_overrides(o, "spec.overrides", &mut errs);
    }
    errs.into_result()
}

fn validate_overrides(o: &super::machine::MachineOverrides, at: &str, errs: &mut ValidationErrors) {
    if let Some(v) = &o.kubelet_version
        && let Err(e) = check_version(v)
    {
        errs.push(format!("{at}.kubeletVersion"), e);
    }
    if let Some(rt) = &o.container_runtime {
        validate_runtime(rt, &format!("{at}.containerRuntime"), errs);
    }
    if let Some(img) = &o.image {
        validate_image(img, &format!("{at}.image"), errs);
    }
}

fn validate_network(net: &super::machine::MachineNetwork, errs: &mut ValidationErrors) {
    let mut subnet: Option<ipnet::IpNet> = None;
    if let Some(a) = &net.address {
        match a.parse::<ipnet::IpNet>() {
            Ok(n) => subnet = Some(n),
            Err(_) => errs.push(
                "spec.network.address",
                format!("{a:?} is not an address with prefix length (expected 10.0.0.7/24)"),
            ),
        }
    }
    if let Some(g) = &net.gateway {
        match g.parse::<IpAddr>() {
            Ok(gw) => {
                if let Some(n) = subnet
                    && !n.trunc().contains(&gw)
                {
                    errs.push(
                        "spec.network.gateway",
                        format!(
                            "{gw} is outside the subnet {} of spec.network.address",
                            n.trunc()
                        ),
                    );
                }
            }
            Err(_) => errs.push(
                "spec.network.gateway",
                format!("{g:?} is not an IP address"),
            ),
        }
    }
    if let Some(n) = subnet
        && (n.addr() == n.network() || n.addr() == n.broadcast())
        && n.prefix_len() < n.max_prefix_len() - 1
    {
        errs.push(
            "spec.network.address",
            format!(
                "{} is the network or broadcast address of {}",
                n.addr(),
                n.trunc()
            ),
        );
    }
    for (i, d) in net.dns.iter().enumerate() {
        if d.parse::<IpAddr>().is_err() {
            errs.push(
                format!("spec.network.dns[{i}]"),
                format!("{d:?} is not an IP address"),
            );
        }
    }
    if let Some(h) = &net.hostname
        && !is_dns_label(h)
    {
        errs.push(
            "spec.network.hostname",
            format!("{h:?} is not a valid host name"),
        );
    }
    if let Some(d) = &net.domain
        && !is_dns_subdomain(d)
    {
        errs.push(
            "spec.network.domain",
            format!("{d:?} is not a valid domain"),
        );
    }
}

fn validate_runtime(rt: &super::common::ContainerRuntime, at: &str, errs: &mut ValidationErrors) {
    if rt.name != "containerd" {
        errs.push(
            format!("{at}.name"),
            format!(
                "unknown container runtime {:?} (supported: containerd)",
                rt.name
            ),
        );
    }
    if let Err(e) = check_version(&rt.version) {
        errs.push(format!("{at}.version"), e);
    }
}

fn validate_artifact(a: &super::common::Artifact, at: &str, errs: &mut ValidationErrors) {
    match url::Url::parse(&a.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https" | "file") => {}
        Ok(u) => errs.push(
            format!("{at}.url"),
            format!(
                "unsupported scheme {:?} (use http, https or file)",
                u.scheme()
            ),
        ),
        Err(e) => errs.push(format!("{at}.url"), format!("not a URL ({e})")),
    }
    if a.url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        errs.push(format!("{at}.url"), "must not contain whitespace");
    }
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some(h) = &a.sha256
        && !hex(h, 64)
    {
        errs.push(format!("{at}.sha256"), "expected 64 hex digits");
    }
    if let Some(h) = &a.sha512
        && !hex(h, 128)
    {
        errs.push(format!("{at}.sha512"), "expected 128 hex digits");
    }
}

fn validate_image(img: &super::machine_class::OsImage, at: &str, errs: &mut ValidationErrors) {
    if !matches!(img.os.as_str(), "flatcar" | "fedora-coreos") {
        errs.push(
            format!("{at}.os"),
            format!(
                "unknown OS {:?} (supported: flatcar, fedora-coreos)",
                img.os
            ),
        );
    }
    if let Err(e) = check_version(&img.version) {
        errs.push(format!("{at}.version"), e);
    }
    validate_artifact(&img.kernel, &format!("{at}.kernel"), errs);
    validate_artifact(&img.initrd, &format!("{at}.initrd"), errs);
    if let Some(a) = &img.install {
        validate_artifact(a, &format!("{at}.install"), errs);
    }
    if let Some(a) = &img.rootfs {
        validate_artifact(a, &format!("{at}.rootfs"), errs);
    }
}

fn validate_class_spec(spec: &MachineClassSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    validate_image(&spec.image, "spec.image", &mut errs);
    if let Err(e) = check_version(&spec.kubernetes.version) {
        errs.push("spec.kubernetes.version", e);
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
    errs.into_result()
}

fn validate_set_spec(spec: &MachineSetSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    if spec.replicas < 0 {
        errs.push(
            "spec.replicas",
            format!("must be 0 or more, got {}", spec.replicas),
        );
    }
    if spec.template.class_ref.name.is_empty() {
        errs.push("spec.template.classRef.name", "required");
    }
    if let Some(o) = &spec.template.overrides {
        validate_overrides(o, "spec.template.overrides", &mut errs);
    }
    if let Some(us) = &spec.update_strategy {
        if let Some(t) = &us.type_
            && !matches!(t.as_str(), "InPlace" | "Replace")
        {
            errs.push(
                "spec.updateStrategy.type",
                format!("unknown strategy {t:?} (use InPlace or Replace)"),
            );
        }
        if let Some(m) = us.max_unavailable
            && m < 1
        {
            errs.push("spec.updateStrategy.maxUnavailable", "must be 1 or more");
        }
        if let Some(d) = us.progress_deadline_seconds
            && d < 1
        {
            errs.push(
                "spec.updateStrategy.progressDeadlineSeconds",
                "must be 1 or more",
            );
        }
    }
    errs.into_result()
}

fn validate_secret(obj: &Value) -> Result<(), ValidationErrors> {
    let _: k8s_openapi::api::core::v1::Secret = decode(obj)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(spec: Value) -> Value {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
               "metadata": {"name": "m1", "namespace": "default"}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({"bmc": {"address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                        "credentialsSecretRef": {"name": "bmc"}},
               "bootMACAddress": "52:54:00:12:34:56",
               "network": {"address": "10.0.0.7/24", "gateway": "10.0.0.1"}})
    }

    fn first(kind: Kind, v: &Value) -> String {
        validate(kind, v).unwrap_err().0[0].to_string()
    }

    #[test]
    fn good_machine_passes() {
        validate(Kind::Machine, &machine(good_spec())).unwrap();
    }

    #[test]
    fn bad_scheme_names_field() {
        let mut s = good_spec();
        s["bmc"]["address"] = json!("ftp://x/y");
        assert_eq!(
            first(Kind::Machine, &machine(s)),
            "spec.bmc.address: unsupported scheme \"ftp\" (use redfish+https, redfish+http or ipmi)"
        );
    }

    #[test]
    fn unknown_field_names_path() {
        let mut s = good_spec();
        s["bmc"]["adress"] = json!("x");
        let e = first(Kind::Machine, &machine(s));
        assert!(
            e.starts_with("spec.bmc.adress: unknown field `adress`"),
            "{e}"
        );
    }

    #[test]
    fn malformed_mac() {
        let mut s = good_spec();
        s["bootMACAddress"] = json!("52:54:00:12:34");
        assert!(
            first(Kind::Machine, &machine(s)).starts_with("spec.bootMACAddress: malformed MAC")
        );
    }

    #[test]
    fn gateway_outside_subnet() {
        let mut s = good_spec();
        s["network"]["gateway"] = json!("10.0.1.1");
        assert!(
            first(Kind::Machine, &machine(s))
                .starts_with("spec.network.gateway: 10.0.1.1 is outside")
        );
    }

    #[test]
    fn missing_credentials() {
        let mut s = good_spec();
        s["bmc"]
            .as_object_mut()
            .unwrap()
            .remove("credentialsSecretRef");
        assert!(
            first(Kind::Machine, &machine(s))
                .starts_with("spec.bmc: missing field `credentialsSecretRef`")
        );
    }

    #[test]
    fn versions() {
        assert!(check_version("v1.33.2").is_ok());
        assert!(check_version("1.7.27").is_ok());
        assert!(check_version("4230.2.3").is_ok());
        assert!(check_version("latest").is_err());
        assert!(check_version("v1..2").is_err());
        assert!(check_version("").is_err());
    }

    #[test]
    fn negative_replicas() {
        let v = json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "w"},
            "spec": {"replicas": -1, "selector": {}, "template": {"classRef": {"name": "c"}}}});
        assert_eq!(
            first(Kind::MachineSet, &v),
            "spec.replicas: must be 0 or more, got -1"
        );
    }

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("AA-bb-cc-00-11-22"),
            Some([0xaa, 0xbb, 0xcc, 0, 0x11, 0x22])
        );
        assert_eq!(parse_mac("aa:bb:cc:00:11"), None);
        assert_eq!(parse_mac("aa:bb:cc:00:11:2g"), None);
        assert_eq!(
            format_mac(&[0xaa, 0xbb, 0xcc, 0, 0x11, 0x22]),
            "aa:bb:cc:00:11:22"
        );
    }
}
