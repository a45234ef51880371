//! GRUB configurations for Secure Boot machines. The signed shim loads
//! Debian's signed network GRUB, which has TFTP but no HTTP (and loads no
//! module under Secure Boot): it reads `grub/grub.cfg` over TFTP, which
//! sends it to `grub/<mac>.cfg`, this machine's own, picked exactly like an
//! iPXE script (install, local disk, wait; see `script_handler.rs`) and
//! rendered here from `templates/grub/`; the kernel and initrd come over
//! TFTP from the image cache (`/images/<sha256>/kernel`). Pure. The same
//! values are checked as for iPXE (no quote, whitespace or `$` reaches a
//! configuration), and every one is single-quoted, so GRUB expands nothing.

use askama::Template;

use super::script::{
    InstallParams, ScriptError, WaitReason, check_kernel_arg, shown_name, unsafe_value,
};
use crate::api::MacAddr;

/// The TFTP path of a machine's configuration, as `grub/grub.cfg` asks for
/// it (`${net_default_mac}`: lowercase, colons).
pub fn config_path(mac: &[u8; 6]) -> String {
    format!("/grub/{}.cfg", MacAddr(*mac))
}

/// The MAC of a configuration's TFTP path (`grub/52:54:00:12:34:56.cfg`).
pub fn mac_of_path(path: &str) -> Option<[u8; 6]> {
    let name = path.trim_start_matches('/').strip_prefix("grub/")?;
    let mac = name.strip_suffix(".cfg")?;
    mac.parse::<MacAddr>().ok().map(MacAddr::octets)
}

/// A TFTP path in a configuration: absolute, and a safe word.
fn check_path(field: &'static str, p: &str) -> Result<(), ScriptError> {
    check_kernel_arg(p).map_err(unsafe_value(field))?;
    if !p.starts_with('/') {
        return Err(ScriptError::GrubPath {
            field,
            path: p.to_string(),
        });
    }
    Ok(())
}

#[derive(Template)]
#[template(path = "grub/entry.cfg", escape = "none")]
struct EntryTemplate {
    wait_seconds: u32,
}

/// The TFTP `grub/grub.cfg` every Secure Boot machine reads first.
pub fn render_entry(wait_seconds: u32) -> Result<String, ScriptError> {
    Ok(EntryTemplate { wait_seconds }.render()?)
}

#[derive(Template)]
#[template(path = "grub/install.cfg", escape = "none")]
struct InstallTemplate<'a> {
    machine: &'a str,
    boot_id: &'a str,
    purpose: &'a str,
    os: &'a str,
    version: &'a str,
    kernel: &'a str,
    initrd: &'a str,
    kernel_args: &'a [String],
    retry: &'a str,
    wait_seconds: u32,
}

/// The install (or wipe) boot: the live kernel and initrd (TFTP paths in
/// `kernel_url`, `initrd_url`; `retry_url` is this configuration's) with
/// the boot's arguments; on failure, wait and read it again.
pub fn render_install(p: &InstallParams<'_>) -> Result<String, ScriptError> {
    check_path("kernel path", p.kernel_url)?;
    check_path("initrd path", p.initrd_url)?;
    check_path("retry path", p.retry_url)?;
    for a in p.kernel_args {
        check_kernel_arg(a).map_err(unsafe_value("kernelArgs"))?;
    }
    for (field, v) in [
        ("boot id", p.boot_id),
        ("purpose", p.purpose),
        ("image os", p.os),
        ("image version", p.version),
    ] {
        check_kernel_arg(v).map_err(unsafe_value(field))?;
    }
    Ok(InstallTemplate {
        machine: shown_name(p.machine),
        boot_id: p.boot_id,
        purpose: p.purpose,
        os: p.os,
        version: p.version,
        kernel: p.kernel_url,
        initrd: p.initrd_url,
        kernel_args: p.kernel_args,
        retry: p.retry_url,
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
