//! Typed Ignition spec v3.3.0: the subset metalherd emits (storage disks,
//! partitions, filesystems, files, links, directories; systemd units and
//! drop-ins; passwd users with ssh keys; kernel arguments; `ignition.config`
//! merge/replace). JSON comes from serde, never from pasted text; every
//! optional field is skipped when empty so output stays minimal.
//!
//! Also owns RFC 2397 `data:` URLs (percent-encoded, so plain-text secrets
//! stay findable for redaction). No I/O here.

use serde::{Deserialize, Serialize};

/// The spec version every rendered config carries. Debian's
/// `ignition-validate` accepts 3.0–3.3; Flatcar and Fedora CoreOS both read it.
pub const SPEC_VERSION: &str = "3.3.0";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub ignition: Ignition,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_arguments: Option<KernelArguments>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd: Option<Passwd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd: Option<Systemd>,
}

impl Config {
    /// An empty config of [`SPEC_VERSION`].
    pub fn new() -> Self {
        Config {
            ignition: Ignition {
                version: SPEC_VERSION.to_string(),
                config: None,
            },
            ..Config::default()
        }
    }

    pub fn storage_mut(&mut self) -> &mut Storage {
        self.storage.get_or_insert_with(Storage::default)
    }

    pub fn systemd_mut(&mut self) -> &mut Systemd {
        self.systemd.get_or_insert_with(Systemd::default)
    }

    pub fn add_file(&mut self, file: File) {
        self.storage_mut().files.push(file);
    }

    pub fn add_unit(&mut self, unit: Unit) {
        self.systemd_mut().units.push(unit);
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ignition {
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<IgnitionConfig>,
}

/// `ignition.config`: other configs merged into (or replacing) this one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IgnitionConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merge: Vec<Resource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<Resource>,
}

/// A fetchable resource: a `data:`, `http(s):` (or other) URL, optionally
/// pinned by a hash Ignition checks before using it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
}

impl Resource {
    /// Inline contents as a `data:` URL.
    pub fn data(contents: &[u8]) -> Self {
        Resource {
            source: Some(data_url(contents)),
            ..Resource::default()
        }
    }

    /// A remote resource, pinned by `hash` (`sha512-<hex>` or `sha256-<hex>`)
    /// when given.
    pub fn remote(url: &str, hash: Option<String>) -> Self {
        Resource {
            source: Some(url.to_string()),
            compression: None,
            verification: hash.map(|h| Verification { hash: Some(h) }),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// `sha512-<128 hex>` or `sha256-<64 hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KernelArguments {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub should_exist: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub should_not_exist: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Passwd {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<PasswdUser>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PasswdUser {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Storage {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystems: Vec<Filesystem>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<Directory>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<File>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disk {
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe_table: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Partition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Partition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    #[serde(default, rename = "sizeMiB", skip_serializing_if = "Option::is_none")]
    pub size_mib: Option<u64>,
    #[serde(default, rename = "startMiB", skip_serializing_if = "Option::is_none")]
    pub start_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_guid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe_partition_entry: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_exist: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Filesystem {
    pub device: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe_filesystem: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_options: Vec<String>,
}

/// Owner of a file, directory or link, by id or name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOwner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct File {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// Decimal form of the octal mode (`420` = 0644).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<Resource>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub append: Vec<Resource>,
}

impl File {
    /// A file replaced with the given text (any previous file at `path` is
    /// overwritten: metalherd owns it).
    pub fn text(path: &str, mode: u32, contents: &str) -> Self {
        File {
            path: path.to_string(),
            overwrite: Some(true),
            mode: Some(mode),
            contents: Some(Resource::data(contents.as_bytes())),
            ..File::default()
        }
    }

    /// A file fetched from `url`, pinned by `hash` when given.
    pub fn remote(path: &str, mode: u32, url: &str, hash: Option<String>) -> Self {
        File {
            path: path.to_string(),
            overwrite: Some(true),
            mode: Some(mode),
            contents: Some(Resource::remote(url, hash)),
            ..File::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Directory {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Link {
    pub path: String,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<NodeOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<NodeOwner>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Systemd {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<Unit>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Unit {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
}

impl Unit {
    /// An enabled unit with the given contents.
    pub fn enabled(name: &str, contents: String) -> Self {
        Unit {
            name: name.to_string(),
            enabled: Some(true),
            contents: Some(contents),
            ..Unit::default()
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dropin {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<String>,
}

/// Bytes left literal in a `data:` URL: RFC 3986 unreserved characters.
/// Everything else is percent-encoded, so the URL is one safe token while
/// plain-text values made of these characters stay searchable.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Encode bytes as an RFC 2397 `data:,` URL (percent-encoded, no base64).
pub fn data_url(contents: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(6 + contents.len() * 2);
    out.push_str("data:,");
    for &b in contents {
        if is_unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        }
    }
    out
}

/// Decode a `data:` URL (percent-encoded or `;base64`). `None` when `url`
/// is not a well-formed data URL.
pub fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    let rest = url.strip_prefix("data:")?;
    let (meta, payload) = rest.split_once(',')?;
    if meta.ends_with(";base64") {
        use base64::Engine;
        return base64::engine::general_purpose::STANDARD
            .decode(payload)
            .ok();
    }
    let bytes = payload.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_config_is_minimal() {
        let s = serde_json::to_string(&Config::new()).unwrap();
        assert_eq!(s, r#"{"ignition":{"version":"3.3.0"}}"#);
    }

    #[test]
    fn partition_units_are_mib() {
        let p = Partition {
            label: Some("data".into()),
            number: Some(10),
            size_mib: Some(1024),
            start_mib: Some(0),
            ..Partition::default()
        };
        let s = serde_json::to_string(&p).unwrap();
        assert_eq!(
            s,
            r#"{"label":"data","number":10,"sizeMiB":1024,"startMiB":0}"#
        );
    }

    #[test]
    fn data_url_keeps_unreserved_literal() {
        assert_eq!(data_url(b"a.b-c_d~e"), "data:,a.b-c_d~e");
        assert_eq!(data_url(b"x y\n\"%"), "data:,x%20y%0A%22%25");
    }

    #[test]
    fn decodes_base64_data_urls() {
        assert_eq!(
            decode_data_url("data:text/plain;base64,aGk=").unwrap(),
            b"hi"
        );
        assert!(decode_data_url("data:,%zz").is_none());
        assert!(decode_data_url("https://x").is_none());
    }

    proptest! {
        #[test]
        fn data_url_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let url = data_url(&bytes);
            prop_assert!(url.bytes().all(|b| b.is_ascii_graphic()));
            prop_assert_eq!(decode_data_url(&url).unwrap(), bytes);
        }
    }
}
