//! The wipe config: applied by Ignition in the network-booted live OS of a
//! deprovisioning boot (a retire or scale-down of a class with
//! `wipeOnDeprovision`). It carries a script (template `metalherd-wipe.sh`)
//! and a unit that runs it once: pick the disk the installer wrote (the
//! Machine's rootDeviceHints), clear the filesystem signatures and
//! partition tables, call home `wiped` or `failed` with the reason, power
//! off. Values reach the script through an environment file whose values
//! were checked. Pure.
//!
//! Which partitions survive is the operation's choice, not the class's: a
//! reimage (the install config) keeps `preservePartitions`; a wipe clears
//! everything, so `PRESERVE_PARTLABELS` is written empty on purpose (the
//! script and the lab's test OS read it from here, never from defaults).

use crate::api::Machine;

use super::error::RenderError;
use super::install::hint_vars;
use super::render::{RenderContext, Resolved};
use super::spec::{Config, File, Unit};
use super::templates::{self as t, check_env, render};

pub(crate) fn wipe_config(
    r: &Resolved<'_>,
    machine: &Machine,
    ctx: &RenderContext,
) -> Result<Config, RenderError> {
    let mut vars: Vec<(&'static str, String)> = vec![("PRESERVE_PARTLABELS", String::new())];
    vars.extend(hint_vars(machine)?);
    vars.extend(r.callhome_vars(ctx));
    for (k, v) in &vars {
        check_env(&format!("wipe.env {k}"), v)?;
    }
    let mut c = Config::new();
    c.add_file(File::text(
        "/etc/metalherd/wipe.env",
        0o600,
        &render("metalherd.env", &t::EnvFile { vars: &vars })?,
    ));
    c.add_file(File::text(
        "/etc/metalherd/wipe.sh",
        0o700,
        &render("metalherd-wipe.sh", &t::WipeScript)?,
    ));
    c.add_file(File::text(
        "/etc/metalherd/callhome.sh",
        0o755,
        &render("metalherd-callhome.sh", &t::CallhomeScript)?,
    ));
    c.add_unit(Unit::enabled(
        "metalherd-wipe.service",
        render("metalherd-wipe.service", &t::WipeUnit)?,
    ));
    Ok(c)
}
