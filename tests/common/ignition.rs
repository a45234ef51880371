//! Running the upstream Ignition validator (`ignition-validate`, Debian
//! package `ignition`) over rendered configs. It only *warns* about unknown
//! keys, so any output at all counts as a failure.

use std::io::Write;
use std::process::Command;

/// Validate one config; `Err` carries the validator's output.
pub fn validate(json: &str) -> Result<(), String> {
    let tool = super::require_tool("ignition-validate");
    let mut f = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    f.write_all(json.as_bytes()).map_err(|e| e.to_string())?;
    let out = Command::new(tool)
        .arg(f.path())
        .output()
        .map_err(|e| format!("could not run ignition-validate: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() || !text.trim().is_empty() {
        return Err(format!("ignition-validate ({}): {text}", out.status));
    }
    Ok(())
}
