//! Bootstrap data from Cluster API's bootstrap provider, made mergeable into
//! a node config.
//!
//! Cluster API's kubeadm bootstrap provider writes, with `format: ignition`,
//! an Ignition **2.3** config (Flatcar's spec): files on the `root`
//! filesystem, systemd units (`kubeadm.service` running `/etc/kubeadm.sh`,
//! which runs `kubeadm init|join` and creates
//! `/run/cluster-api/bootstrap-success.complete`) and users. The Ignition
//! that installs metalherd's nodes reads spec 3.x only, so this module
//! translates the parts a bootstrap provider emits, one for one:
//!
//! - `storage.files`: `filesystem` must be `root` and is dropped; `append:
//!   true` becomes an `append` entry; every file is `overwrite: true` (2.x
//!   replaced existing files, 3.x refuses them by default); `mode`, `user`,
//!   `group` and `contents.verification` are kept.
//! - `storage.directories` and `storage.links`: as files.
//! - `systemd.units` and `passwd`: the same shape in both specs (`create`
//!   of a 2.x user, deprecated there, is refused).
//!
//! Anything else (disks, filesystems, RAID, networkd, remote configs to
//! append) is refused with the field named: metalherd owns the disk
//! layout, and a silently dropped part would be a node half set up.
//! `cloud-config` is refused: metalherd's nodes run Ignition, not
//! cloud-init. Pure: no I/O.

use serde_json::{Map, Value, json};

use super::error::RenderError;

/// The key of a Cluster API bootstrap Secret holding the data.
pub const VALUE_KEY: &str = "value";
/// The key of a Cluster API bootstrap Secret naming its format.
pub const FORMAT_KEY: &str = "format";

/// The field errors name (the Secret's key).
const FIELD: &str = "bootstrap data";

fn bad(path: &str, message: impl Into<String>) -> RenderError {
    RenderError::invalid(format!("{FIELD} {path}"), message)
}

/// Bootstrap data (the Secret's `format` and `value`) as an Ignition 3.3.0
/// config, compact JSON, ready to merge into a node config.
pub fn to_ignition3(format: Option<&str>, value: &[u8]) -> Result<String, RenderError> {
    match format.map(str::trim) {
        None | Some("ignition") => {}
        Some("cloud-config") => {
            return Err(RenderError::invalid(
                format!("{FIELD} format"),
                "cloud-config is not supported: metalherd's nodes run Ignition, not cloud-init; set the KubeadmConfig's spec.format to ignition",
            ));
        }
        Some(other) => {
            return Err(RenderError::invalid(
                format!("{FIELD} format"),
                format!("unknown format {other:?} (supported: ignition)"),
            ));
        }
    }
    let v: Value = serde_json::from_slice(value)
        .map_err(|e| bad("value", format!("is not JSON (an Ignition config): {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad("value", "expected a JSON object (an Ignition config)"));
    };
    let version = obj
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad("ignition.version", "missing"))?;
    let out = match version {
        "3.0.0" | "3.1.0" | "3.2.0" | "3.3.0" => v.clone(),
        "2.0.0" | "2.1.0" | "2.2.0" | "2.3.0" => from_v2(obj)?,
        other => {
            return Err(bad(
                "ignition.version",
                format!("{other:?} is not supported (2.x is translated, 3.0.0 to 3.3.0 merged)"),
            ));
        }
    };
    serde_json::to_string(&out).map_err(|e| bad("value", e.to_string()))
}

fn from_v2(v2: &Map<String, Value>) -> Result<Value, RenderError> {
    for (key, val) in v2 {
        if !matches!(key.as_str(), "ignition" | "storage" | "systemd" | "passwd") && !is_empty(val)
        {
            return Err(bad(key, "is not supported in bootstrap data"));
        }
    }
    let mut ign = json!({ "version": "3.3.0" });
    if let Some(i) = v2.get("ignition").and_then(Value::as_object) {
        for (k, val) in i {
            match k.as_str() {
                "version" => {}
                "timeouts" => ign["timeouts"] = val.clone(),
                _ if is_empty(val) => {}
                _ => {
                    return Err(bad(
                        &format!("ignition.{k}"),
                        "is not supported in bootstrap data",
                    ));
                }
            }
        }
    }
    let mut out = json!({ "ignition": ign });
    if let Some(s) = v2.get("storage") {
        out["storage"] = storage(s)?;
    }
    if let Some(s) = v2.get("systemd") {
        out["systemd"] = systemd(s)?;
    }
    if let Some(p) = v2.get("passwd") {
        out["passwd"] = passwd(p)?;
    }
    Ok(out)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
        _ => false,
    }
}

fn obj<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, RenderError> {
    v.as_object().ok_or_else(|| bad(path, "expected an object"))
}

fn list<'a>(v: &'a Value, path: &str) -> Result<&'a Vec<Value>, RenderError> {
    v.as_array().ok_or_else(|| bad(path, "expected a list"))
}

fn storage(s: &Value) -> Result<Value, RenderError> {
    let mut out = Map::new();
    for (k, val) in obj(s, "storage")? {
        let path = format!("storage.{k}");
        match k.as_str() {
            "files" | "directories" | "links" => {
                let mut items = Vec::new();
                for (i, item) in list(val, &path)?.iter().enumerate() {
                    items.push(node(k, item, &format!("{path}[{i}]"))?);
                }
                if !items.is_empty() {
                    out.insert(k.clone(), Value::Array(items));
                }
            }
            _ if is_empty(val) => {}
            _ => {
                return Err(bad(
                    &path,
                    "is not supported: metalherd owns the disk layout (set disks in the MachineClass)",
                ));
            }
        }
    }
    Ok(Value::Object(out))
}

/// One file, directory or link.
fn node(kind: &str, item: &Value, path: &str) -> Result<Value, RenderError> {
    let mut out = Map::new();
    let mut append = false;
    let mut contents = None;
    for (k, val) in obj(item, path)? {
        match (k.as_str(), kind) {
            ("filesystem", _) => {
                if val.as_str() != Some("root") {
                    return Err(bad(
                        &format!("{path}.filesystem"),
                        format!("{val} is not supported (only \"root\")"),
                    ));
                }
            }
            ("path" | "mode" | "user" | "group", _) => {
                out.insert(k.clone(), val.clone());
            }
            ("overwrite", _) => {}
            ("contents", "files") => contents = Some(val.clone()),
            ("append", "files") => append = val.as_bool().unwrap_or(false),
            ("target" | "hard", "links") => {
                out.insert(k.clone(), val.clone());
            }
            _ => {
                return Err(bad(
                    &format!("{path}.{k}"),
                    "is not supported in bootstrap data",
                ));
            }
        }
    }
    if !out.get("path").is_some_and(Value::is_string) {
        return Err(bad(&format!("{path}.path"), "missing"));
    }
    if let Some(c) = contents {
        let c = contents_v3(&c, &format!("{path}.contents"))?;
        if append {
            out.insert("append".into(), json!([c]));
        } else {
            out.insert("contents".into(), c);
        }
    }
    if !append {
        out.insert("overwrite".into(), Value::Bool(true));
    }
    Ok(Value::Object(out))
}

fn contents_v3(c: &Value, path: &str) -> Result<Value, RenderError> {
    let mut out = Map::new();
    for (k, val) in obj(c, path)? {
        match k.as_str() {
            "source" | "verification" | "compression" => {
                if !(k == "compression" && val.as_str() == Some("")) {
                    out.insert(k.clone(), val.clone());
                }
            }
            "httpHeaders" if is_empty(val) => {}
            _ => {
                return Err(bad(
                    &format!("{path}.{k}"),
                    "is not supported in bootstrap data",
                ));
            }
        }
    }
    Ok(Value::Object(out))
}

fn systemd(s: &Value) -> Result<Value, RenderError> {
    let mut units = Vec::new();
    for (k, val) in obj(s, "systemd")? {
        if k != "units" {
            return Err(bad(
                &format!("systemd.{k}"),
                "is not supported in bootstrap data",
            ));
        }
        for (i, u) in list(val, "systemd.units")?.iter().enumerate() {
            let path = format!("systemd.units[{i}]");
            for (uk, uv) in obj(u, &path)? {
                match uk.as_str() {
                    "name" | "enabled" | "mask" | "contents" => {}
                    "dropins" => {
                        for (j, d) in list(uv, &format!("{path}.dropins"))?.iter().enumerate() {
                            for dk in obj(d, &format!("{path}.dropins[{j}]"))?.keys() {
                                if dk != "name" && dk != "contents" {
                                    return Err(bad(
                                        &format!("{path}.dropins[{j}].{dk}"),
                                        "is not supported in bootstrap data",
                                    ));
                                }
                            }
                        }
                    }
                    _ => {
                        return Err(bad(
                            &format!("{path}.{uk}"),
                            "is not supported in bootstrap data",
                        ));
                    }
                }
            }
            if !u.get("name").is_some_and(Value::is_string) {
                return Err(bad(&format!("{path}.name"), "missing"));
            }
            units.push(u.clone());
        }
    }
    Ok(json!({ "units": units }))
}

fn passwd(p: &Value) -> Result<Value, RenderError> {
    const USER_KEYS: [&str; 13] = [
        "name",
        "passwordHash",
        "sshAuthorizedKeys",
        "uid",
        "gecos",
        "homeDir",
        "noCreateHome",
        "primaryGroup",
        "groups",
        "noUserGroup",
        "noLogInit",
        "shell",
        "system",
    ];
    const GROUP_KEYS: [&str; 4] = ["name", "gid", "passwordHash", "system"];
    let mut out = Map::new();
    for (k, val) in obj(p, "passwd")? {
        let keys: &[&str] = match k.as_str() {
            "users" => &USER_KEYS,
            "groups" => &GROUP_KEYS,
            _ => {
                return Err(bad(
                    &format!("passwd.{k}"),
                    "is not supported in bootstrap data",
                ));
            }
        };
        let mut items = Vec::new();
        for (i, item) in list(val, &format!("passwd.{k}"))?.iter().enumerate() {
            let path = format!("passwd.{k}[{i}]");
            for ik in obj(item, &path)?.keys() {
                if !keys.contains(&ik.as_str()) {
                    return Err(bad(
                        &format!("{path}.{ik}"),
                        "is not supported in bootstrap data",
                    ));
                }
            }
            items.push(item.clone());
        }
        out.insert(k.clone(), Value::Array(items));
    }
    Ok(Value::Object(out))
}

/// The decoded contents of every file in a (translated) bootstrap config,
/// for redaction.
pub fn secret_contents(ignition3: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<Value>(ignition3) else {
        return Vec::new();
    };
    let files = v["storage"]["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    files
        .iter()
        .flat_map(|f| {
            let mut sources = vec![f["contents"]["source"].clone()];
            sources.extend(
                f["append"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|a| a["source"].clone()),
            );
            sources
        })
        .filter_map(|s| s.as_str().and_then(super::spec::decode_data_url))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .filter(|t| t.trim().len() >= 8)
        .collect()
}

#[cfg(test)]
mod tests;
