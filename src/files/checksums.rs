//! Distribution checksum files: find the digest of one artifact (by its file
//! name) in the file a distribution publishes beside its images. Pure: the
//! image cache fetches the file and hands the bytes in.
//!
//! Two shapes are read:
//! - text lines `<hex>  <file>` as written by `sha256sum`/`sha512sum`, with
//!   or without `# SHA512 HASH` section headers: Flatcar's `.DIGESTS`
//!   (MD5, SHA1 and SHA512 sections; only the SHA-2 lines are used, told
//!   apart by their length);
//! - JSON: Fedora CoreOS stream metadata (`streams/stable.json`, objects with
//!   `location` and `sha256`) and a build's `meta.json` (objects with `path`
//!   and `sha256`), searched at any depth.
//!
//! The checksum file itself is trusted as far as its transport is (https):
//! signatures (`.DIGESTS.asc`, `.sig`) are not checked here.

use serde_json::Value;

/// A digest the cache verifies an artifact against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    Sha256(String),
    Sha512(String),
}

impl Expected {
    /// From hex of either length (64 = SHA-256, 128 = SHA-512).
    pub fn from_hex(h: &str) -> Option<Expected> {
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let h = h.to_ascii_lowercase();
        match h.len() {
            64 => Some(Expected::Sha256(h)),
            128 => Some(Expected::Sha512(h)),
            _ => None,
        }
    }

    /// Lower-case hex, which is also the artifact's name in the cache.
    pub fn hex(&self) -> &str {
        match self {
            Expected::Sha256(h) | Expected::Sha512(h) => h,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChecksumError {
    #[error("lists no SHA-256 or SHA-512 digest for {file:?}")]
    NotListed { file: String },
    #[error("lists two different digests for {file:?}")]
    Conflict { file: String },
    #[error("artifact URL has no file name to look up")]
    NoFileName,
}

/// The last path segment of an artifact URL: the name checksum files list.
pub fn file_name(url: &str) -> Result<String, ChecksumError> {
    let last = match url::Url::parse(url) {
        Ok(u) => u
            .path_segments()
            .and_then(|mut s| s.next_back())
            .map(str::to_string),
        // A relative path, as in a build's meta.json.
        Err(_) => url.rsplit('/').next().map(str::to_string),
    };
    last.filter(|n| !n.is_empty())
        .ok_or(ChecksumError::NoFileName)
}

/// The digest `body` lists for `file`; SHA-512 preferred when both are.
pub fn find(body: &[u8], file: &str) -> Result<Expected, ChecksumError> {
    let mut found = Vec::new();
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => walk_json(&v, file, &mut found),
        Err(_) => text_lines(&String::from_utf8_lossy(body), file, &mut found),
    }
    let pick = |want512: bool| -> Result<Option<Expected>, ChecksumError> {
        let mut it = found
            .iter()
            .filter(|e| matches!(e, Expected::Sha512(_)) == want512);
        let Some(first) = it.next() else {
            return Ok(None);
        };
        if it.any(|e| e != first) {
            return Err(ChecksumError::Conflict {
                file: file.to_string(),
            });
        }
        Ok(Some(first.clone()))
    };
    let sha512 = pick(true)?;
    let sha256 = pick(false)?;
    sha512.or(sha256).ok_or_else(|| ChecksumError::NotListed {
        file: file.to_string(),
    })
}

fn text_lines(text: &str, file: &str, found: &mut Vec<Expected>) {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(hex), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        // `sha256sum -b` marks binary mode with `*`; a path may precede.
        let name = name.trim_start_matches('*');
        let base = name.rsplit('/').next().unwrap_or(name);
        if base == file
            && let Some(e) = Expected::from_hex(hex)
        {
            found.push(e);
        }
    }
}

fn walk_json(v: &Value, file: &str, found: &mut Vec<Expected>) {
    match v {
        Value::Object(o) => {
            let named = ["location", "path"].iter().any(|k| {
                o.get(*k)
                    .and_then(Value::as_str)
                    .and_then(|s| file_name(s).ok())
                    .is_some_and(|n| n == file)
            });
            if named {
                for k in ["sha256", "sha512"] {
                    if let Some(e) = o
                        .get(k)
                        .and_then(Value::as_str)
                        .and_then(Expected::from_hex)
                    {
                        found.push(e);
                    }
                }
            }
            for child in o.values() {
                walk_json(child, file, found);
            }
        }
        Value::Array(a) => {
            for child in a {
                walk_json(child, file, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(c: char, n: usize) -> String {
        std::iter::repeat_n(c, n).collect()
    }

    #[test]
    fn flatcar_digests_yield_the_sha512_line() {
        let body = format!(
            "# MD5 HASH\n{md5}  flatcar_production_pxe.vmlinuz\n# SHA1 HASH\n{sha1}  flatcar_production_pxe.vmlinuz\n# SHA512 HASH\n{sha512}  flatcar_production_pxe.vmlinuz\n",
            md5 = h('a', 32),
            sha1 = h('b', 40),
            sha512 = h('C', 128)
        );
        assert_eq!(
            find(body.as_bytes(), "flatcar_production_pxe.vmlinuz"),
            Ok(Expected::Sha512(h('c', 128)))
        );
        assert_eq!(
            find(body.as_bytes(), "flatcar_production_pxe_image.cpio.gz"),
            Err(ChecksumError::NotListed {
                file: "flatcar_production_pxe_image.cpio.gz".into()
            })
        );
    }

    #[test]
    fn sha256sums_with_binary_marks_and_conflicts() {
        let body = format!("{}  *dir/kernel\n{} initrd\n", h('1', 64), h('2', 64));
        assert_eq!(
            find(body.as_bytes(), "kernel"),
            Ok(Expected::Sha256(h('1', 64)))
        );
        let twice = format!("{}  kernel\n{}  kernel\n", h('1', 64), h('3', 64));
        assert_eq!(
            find(twice.as_bytes(), "kernel"),
            Err(ChecksumError::Conflict {
                file: "kernel".into()
            })
        );
    }

    #[test]
    fn fcos_stream_metadata_by_location() {
        let body = serde_json::json!({
            "stream": "stable",
            "architectures": {"x86_64": {"artifacts": {"metal": {"formats": {"pxe": {
                "kernel": {"location": "https://b/x/fedora-coreos-42-live-kernel.x86_64",
                           "signature": "https://b/x/fedora-coreos-42-live-kernel.x86_64.sig",
                           "sha256": h('d', 64)},
                "initramfs": {"location": "https://b/x/fedora-coreos-42-live-initramfs.x86_64.img",
                              "sha256": h('e', 64)}
            }}}}}}
        });
        let body = serde_json::to_vec(&body).unwrap();
        assert_eq!(
            find(&body, "fedora-coreos-42-live-initramfs.x86_64.img"),
            Ok(Expected::Sha256(h('e', 64)))
        );
        // A build's meta.json names files by `path`.
        let meta = serde_json::json!({"images": {"live-kernel": {"path": "k.x86_64", "sha256": h('f', 64)}}});
        assert_eq!(
            find(&serde_json::to_vec(&meta).unwrap(), "k.x86_64"),
            Ok(Expected::Sha256(h('f', 64)))
        );
    }

    #[test]
    fn file_names() {
        assert_eq!(file_name("https://h/a/b.img?x=1").unwrap(), "b.img");
        assert_eq!(file_name("https://h/a/"), Err(ChecksumError::NoFileName));
        assert_eq!(Expected::from_hex("xyz"), None);
    }
}
