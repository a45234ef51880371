//! Checks shared by several kinds: names, versions, MAC addresses, and the
//! image, runtime and override blocks a Machine, a MachineClass and a
//! MachineSet's template all carry.

use super::ValidationErrors;
use crate::api::common::{Artifact, ContainerRuntime};
use crate::api::machine::MachineOverrides;
use crate::api::machine_class::OsImage;

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

/// A version string that is not dotted numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed version {0:?} (expected dotted numbers like \"v1.33.2\")")]
pub struct MalformedVersion(pub String);

/// Check a version string like `v1.33.2`, `1.7.27` or `4230.2.3`: dotted
/// numbers, optional leading `v`, optional `-suffix`.
pub fn check_version(s: &str) -> Result<(), MalformedVersion> {
    let core = s.strip_prefix('v').unwrap_or(s);
    let core = core.split(['-', '+']).next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    if s.is_empty()
        || parts.len() < 2
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(MalformedVersion(s.to_string()));
    }
    Ok(())
}

pub(super) fn validate_overrides(o: &MachineOverrides, at: &str, errs: &mut ValidationErrors) {
    if let Some(v) = &o.kubelet_version
        && let Err(e) = check_version(v)
    {
        errs.push(format!("{at}.kubeletVersion"), e.to_string());
    }
    if let Some(rt) = &o.container_runtime {
        validate_runtime(rt, &format!("{at}.containerRuntime"), errs);
    }
    if let Some(img) = &o.image {
        validate_image(img, &format!("{at}.image"), errs);
    }
}

pub(super) fn validate_runtime(rt: &ContainerRuntime, at: &str, errs: &mut ValidationErrors) {
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
        errs.push(format!("{at}.version"), e.to_string());
    }
}

fn validate_artifact(a: &Artifact, at: &str, errs: &mut ValidationErrors) {
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
    if let Some(u) = &a.checksums_url {
        match url::Url::parse(u) {
            Ok(p) if matches!(p.scheme(), "http" | "https" | "file") => {}
            _ => errs.push(
                format!("{at}.checksumsUrl"),
                "expected an http, https or file URL of a checksum file",
            ),
        }
    }
}

/// An artifact the image cache serves at boot must be pinned: by its own
/// digest or by the distribution's checksum file. Refused here, not with a
/// failed boot later.
fn require_pinned(a: &Artifact, at: &str, errs: &mut ValidationErrors) {
    if a.sha256.is_none() && a.sha512.is_none() && a.checksums_url.is_none() {
        errs.push(
            at,
            "not pinned: set sha256, sha512, or checksumsUrl (the distribution's checksum file, \
             e.g. Flatcar's <file>.DIGESTS or Fedora CoreOS stream metadata); the image cache \
             serves only verified artifacts",
        );
    }
}

/// An artifact the image cache serves: well formed and pinned.
pub(super) fn validate_served_artifact(a: &Artifact, at: &str, errs: &mut ValidationErrors) {
    validate_artifact(a, at, errs);
    require_pinned(a, at, errs);
}

pub(super) fn validate_image(img: &OsImage, at: &str, errs: &mut ValidationErrors) {
    if !crate::api::OS_NAMES.contains(&img.os.as_str()) {
        errs.push(
            format!("{at}.os"),
            format!(
                "unknown OS {:?} (supported: {})",
                img.os,
                crate::api::OS_NAMES.join(", ")
            ),
        );
    }
    if let Err(e) = check_version(&img.version) {
        errs.push(format!("{at}.version"), e.to_string());
    }
    for (a, name) in [(&img.kernel, "kernel"), (&img.initrd, "initrd")] {
        let at = format!("{at}.{name}");
        validate_artifact(a, &at, errs);
        require_pinned(a, &at, errs);
    }
    if let Some(a) = &img.install {
        validate_artifact(a, &format!("{at}.install"), errs);
    }
    if let Some(a) = &img.rootfs {
        validate_artifact(a, &format!("{at}.rootfs"), errs);
    }
}

/// A remediation policy at `path`: durations and counts in range,
/// `maxUnhealthy` a count or a percentage.
pub(super) fn validate_remediation(
    r: &crate::api::RemediationPolicy,
    path: &str,
    errs: &mut ValidationErrors,
) {
    for (f, v, min) in [
        ("unhealthySeconds", r.unhealthy_seconds, 0),
        ("recoverySeconds", r.recovery_seconds, 1),
        ("powerCycles", r.power_cycles.map(i64::from), 0),
        ("reimages", r.reimages.map(i64::from), 0),
    ] {
        if let Some(v) = v
            && v < min
        {
            errs.push(
                format!("{path}.{f}"),
                format!("must be {min} or more, got {v}"),
            );
        }
    }
    if let Some(m) = &r.max_unhealthy
        && let Err(e) = crate::api::remediation::parse_max_unhealthy(m)
    {
        errs.push(format!("{path}.maxUnhealthy"), e.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(check_version("v1.33.2").is_ok());
        assert!(check_version("1.7.27").is_ok());
        assert!(check_version("4230.2.3").is_ok());
        assert!(check_version("latest").is_err());
        assert!(check_version("v1..2").is_err());
        assert!(check_version("").is_err());
    }
}
