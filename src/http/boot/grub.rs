//! GRUB configurations for Secure Boot machines: the signed network GRUB
//! (loaded by the signed shim) reads `grub/grub.cfg` over TFTP, which asks
//! `/boot.grub?mac=` on the boot HTTP server for the machine's own; that
//! one is picked exactly like an iPXE script (install, local disk, wait)
//! and rendered here from `templates/grub/`. Pure. The same values are
//! checked as for iPXE (no quote, whitespace or `$` can reach a
//! configuration), and every one is single-quoted, so GRUB expands nothing.

use askama::Template;

use super::script::{
    InstallParams, ScriptError, WaitReason, check_install, check_url, shown_name, unsafe_value,
};

/// `http://host[:port]/path?query` in GRUB's device syntax:
/// `(http,host:port)/path?query`. GRUB has no TLS: `https` is refused.
pub fn grub_url(field: &'static str, url: &str) -> Result<String, ScriptError> {
    check_url(url).map_err(unsafe_value(field))?;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ScriptError::GrubNeedsHttp {
            field,
            url: url.to_string(),
        })?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    Ok(format!("(http,{host}){path}"))
}

#[derive(Template)]
#[template(path = "grub/entry.cfg", escape = "none")]
struct EntryTemplate<'a> {
    server: &'a str,
    path: &'a str,
    wait_seconds: u32,
}

/// The TFTP `grub/grub.cfg` every Secure Boot machine reads first: load
/// `{base_url}/boot.grub?mac=${net_default_mac}`.
pub fn render_entry(base_url: &str, wait_seconds: u32) -> Result<String, ScriptError> {
    let u = grub_url("baseUrl", base_url.trim_end_matches('/'))?;
    let (server, path) = u.split_at(u.find(')').map_or(0, |i| i + 1));
    let path = path.trim_end_matches('/');
    Ok(EntryTemplate {
        server,
        path,
        wait_seconds,
    }
    .render()?)
}

#[derive(Template)]
#[template(path = "grub/install.cfg", escape = "none")]
struct InstallTemplate<'a> {
    machine: &'a str,
    boot_id: &'a str,
    purpose: &'a str,
    os: &'a str,
    version: &'a str,
    kernel: String,
    initrd: String,
    kernel_args: &'a [String],
    retry: String,
    wait_seconds: u32,
}

/// The install (or wipe) boot: the live kernel and initrd over HTTP with
/// the boot's arguments; on failure, wait and ask again.
pub fn render_install(p: &InstallParams<'_>) -> Result<String, ScriptError> {
    check_install(p)?;
    Ok(InstallTemplate {
        machine: shown_name(p.machine),
        boot_id: p.boot_id,
        purpose: p.purpose,
        os: p.os,
        version: p.version,
        kernel: grub_url("kernel URL", p.kernel_url)?,
        initrd: grub_url("initrd URL", p.initrd_url)?,
        kernel_args: p.kernel_args,
        retry: grub_url("retry URL", p.retry_url)?,
        wait_seconds: p.wait_seconds,
    }
    .render()?)
}

#[derive(Template)]
#[template(path = "grub/local.cfg", escape = "none")]
struct LocalTemplate<'a> {
    machine: &'a str,
}

/// Boot from the local disk: GRUB exits to the firmware, which tries its
/// next boot option.
pub fn render_local(machine: &str) -> Result<String, ScriptError> {
    Ok(LocalTemplate {
        machine: shown_name(machine),
    }
    .render()?)
}

#[derive(Template)]
#[template(path = "grub/wait.cfg", escape = "none")]
struct WaitTemplate<'a> {
    reason: &'a str,
    mac: &'a str,
    message: &'a str,
    wait_seconds: u32,
}

/// A machine that gets no OS: say why, wait, hand back to the firmware.
pub fn render_wait(
    mac: &[u8; 6],
    why: WaitReason,
    wait_seconds: u32,
) -> Result<String, ScriptError> {
    let (reason, message) = why.words();
    Ok(WaitTemplate {
        reason,
        mac: &crate::api::MacAddr(*mac).to_string(),
        message,
        wait_seconds,
    }
    .render()?)
}

#[cfg(test)]
mod tests;
