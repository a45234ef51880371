//! The text files inside rendered configs (systemd units, scripts, kubeadm
//! JoinConfiguration, containerd config, network files) as askama templates
//! under `ignition/` at the repository root, plus the checks every value
//! passes before it is rendered into them: no newline, quote or shell/systemd
//! metacharacter ever reaches a template where it could inject a line.
//!
//! Scripts take their values from environment files (`metalherd.env`), so
//! the only values pasted into unit files are paths and versions that were
//! checked here. Pure: no I/O.

use askama::Template;

use super::error::RenderError;

/// Render a template, naming it in the error, with a final newline.
pub(crate) fn render<T: Template>(name: &'static str, t: &T) -> Result<String, RenderError> {
    let mut s = t.render().map_err(|source| RenderError::Template {
        template: name,
        source,
    })?;
    if !s.ends_with('\n') {
        s.push('\n');
    }
    Ok(s)
}

/// A value for one line of a text file: non-empty, no control characters
/// (newlines included).
pub(crate) fn check_line<'a>(field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    if value.is_empty() {
        return Err(RenderError::invalid(field, "must not be empty"));
    }
    if value.chars().any(char::is_control) {
        return Err(RenderError::invalid(
            field,
            "must not contain newlines or control characters",
        ));
    }
    Ok(value)
}

/// A value for a double-quoted `KEY="value"` line of a systemd environment
/// file that a shell script then reads: additionally no quote, backslash,
/// `$` or backtick.
pub(crate) fn check_env<'a>(field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    if value.is_empty() {
        return Ok(value);
    }
    check_line(field, value)?;
    if let Some(c) = value
        .chars()
        .find(|c| matches!(c, '"' | '\'' | '\\' | '$' | '`'))
    {
        return Err(RenderError::invalid(
            field,
            format!("must not contain {c:?}"),
        ));
    }
    Ok(value)
}

/// A single word (no whitespace) safe for an env file, a unit file and a
/// kernel command line.
pub(crate) fn check_word<'a>(field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    check_env(field, value)?;
    if value.is_empty() || value.chars().any(char::is_whitespace) {
        return Err(RenderError::invalid(
            field,
            "must be one word without whitespace",
        ));
    }
    Ok(value)
}

/// An http(s) URL a server will fetch: parsed, no whitespace or quotes.
pub(crate) fn check_url<'a>(field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    check_word(field, value)?;
    match url::Url::parse(value) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(value),
        Ok(u) => Err(RenderError::invalid(
            field,
            format!(
                "unsupported scheme {:?}: a server fetches this, use http or https",
                u.scheme()
            ),
        )),
        Err(e) => Err(RenderError::invalid(field, format!("not a URL ({e})"))),
    }
}

/// An absolute path safe for unit files and scripts.
pub(crate) fn check_path<'a>(field: &str, value: &'a str) -> Result<&'a str, RenderError> {
    check_word(field, value)?;
    if !value.starts_with('/') || value.split('/').any(|c| c == "..") {
        return Err(RenderError::invalid(
            field,
            "must be an absolute path without '..'",
        ));
    }
    Ok(value)
}

/// A YAML double-quoted scalar: JSON string syntax is valid YAML, and serde
/// escapes everything that could end the scalar.
pub(crate) fn yaml_str(value: &str) -> String {
    serde_json::Value::String(value.to_string()).to_string()
}

#[derive(Template)]
#[template(path = "metalherd-install.sh", escape = "none")]
pub(crate) struct InstallScript<'a> {
    pub os_name: &'a str,
    pub installer: &'a str,
    pub flatcar: bool,
    /// Kernel arguments go into `boot:/grub/metalherd-kargs.cfg` (the
    /// Debian image's grub.cfg reads it).
    pub grub_kargs: bool,
}

#[derive(Template)]
#[template(path = "metalherd-callhome.sh", escape = "none")]
pub(crate) struct CallhomeScript;

#[derive(Template)]
#[template(path = "metalherd-wipe.sh", escape = "none")]
pub(crate) struct WipeScript;

#[derive(Template)]
#[template(path = "metalherd-wipe.service", escape = "none")]
pub(crate) struct WipeUnit;

#[derive(Template)]
#[template(path = "metalherd.env", escape = "none")]
pub(crate) struct EnvFile<'a> {
    /// Keys are constants; values passed [`check_env`].
    pub vars: &'a [(&'static str, String)],
}

#[derive(Template)]
#[template(path = "metalherd-install.service", escape = "none")]
pub(crate) struct InstallUnit<'a> {
    pub os_name: &'a str,
}

#[derive(Template)]
#[template(path = "kubelet.service", escape = "none")]
pub(crate) struct KubeletUnit<'a> {
    pub version: &'a str,
    pub kubelet: &'a str,
    pub bin_dir: &'a str,
    pub unpack: bool,
}

#[derive(Template)]
#[template(path = "containerd.service", escape = "none")]
pub(crate) struct ContainerdUnit<'a> {
    pub version: &'a str,
    pub bin_dir: &'a str,
}

#[derive(Template)]
#[template(path = "containerd-dropin.conf", escape = "none")]
pub(crate) struct ContainerdDropin;

pub(crate) struct Archive {
    pub dest: String,
    pub path: String,
}

#[derive(Template)]
#[template(path = "metalherd-unpack.service", escape = "none")]
pub(crate) struct UnpackUnit<'a> {
    pub archives: &'a [Archive],
}

#[derive(Template)]
#[template(path = "metalherd-kubeadm-join.service", escape = "none")]
pub(crate) struct JoinUnit<'a> {
    pub kubeadm: &'a str,
    pub bin_dir: &'a str,
    pub unpack: bool,
}

#[derive(Template)]
#[template(path = "kubeadm-bootstrap.conf", escape = "none")]
pub(crate) struct BootstrapDropin<'a> {
    pub bin_dir: &'a str,
    pub unpack: bool,
}

#[derive(Template)]
#[template(path = "metalherd-booted.service", escape = "none")]
pub(crate) struct BootedUnit<'a> {
    pub boot_id: &'a str,
    /// The unit that joins the node: metalherd's, or Cluster API's
    /// `kubeadm.service`.
    pub join_unit: &'a str,
    /// Call home only once the join unit succeeded: Cluster API's
    /// `kubeadm.service` runs once and fails for good (metalherd's own
    /// join retries, so `booted` only waits for it).
    pub require_join: bool,
}

/// One taint, its strings already YAML-quoted.
pub(crate) struct YamlTaint {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// kubeadm JoinConfiguration; every string field is already YAML-quoted
/// with [`yaml_str`].
#[derive(Template)]
#[template(path = "kubeadm-join.yaml", escape = "none")]
pub(crate) struct JoinConfig<'a> {
    pub api_version: &'a str,
    pub v1beta4: bool,
    pub endpoint: String,
    pub token: String,
    pub ca_cert_hashes: Vec<String>,
    pub node_name: String,
    pub kubelet_args: Vec<(String, String)>,
    pub taints: Vec<YamlTaint>,
}

#[derive(Template)]
#[template(path = "containerd-config.toml", escape = "none")]
pub(crate) struct ContainerdConfig<'a> {
    pub version: &'a str,
    pub v3: bool,
}

#[derive(Template)]
#[template(path = "metalherd-networkd.network", escape = "none")]
pub(crate) struct NetworkdFile<'a> {
    pub mac: Option<&'a str>,
    pub address: &'a str,
    pub gateway: Option<&'a str>,
    pub dns: &'a [String],
    pub domain: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "metalherd.nmconnection", escape = "none")]
pub(crate) struct NmFile<'a> {
    pub mac: Option<&'a str>,
    pub family: &'a str,
    pub other_family: &'a str,
    pub other_method: &'a str,
    pub address: &'a str,
    pub gateway: Option<&'a str>,
    pub dns: &'a [String],
    pub domain: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "k8s-modules.conf", escape = "none")]
pub(crate) struct ModulesFile;

#[derive(Template)]
#[template(path = "k8s-sysctl.conf", escape = "none")]
pub(crate) struct SysctlFile;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_values_reject_newlines() {
        assert!(check_line("f", "a\nExecStart=/bin/evil").is_err());
        assert!(check_line("f", "").is_err());
        assert!(check_line("f", "ok value").is_ok());
    }

    #[test]
    fn env_values_reject_quotes_and_expansion() {
        for bad in ["a\"b", "a$b", "a`b`", "a\\b", "a'b", "a\rb"] {
            let e = check_env("spec.x", bad).unwrap_err().to_string();
            assert!(e.starts_with("spec.x: "), "{e}");
        }
        assert_eq!(
            check_env("f", "Samsung SSD 860").unwrap(),
            "Samsung SSD 860"
        );
    }

    #[test]
    fn urls_must_be_http() {
        assert!(
            check_url(
                "f",
                "https://dl.k8s.io/release/v1.33.4/bin/linux/amd64/kubelet"
            )
            .is_ok()
        );
        assert!(check_url("f", "file:///etc/passwd").is_err());
        assert!(check_url("f", "https://x/a b").is_err());
        assert!(check_url("f", "https://x/\"").is_err());
    }

    #[test]
    fn paths_are_absolute() {
        assert!(check_path("f", "/etc/x").is_ok());
        assert!(check_path("f", "etc/x").is_err());
        assert!(check_path("f", "/etc/../x").is_err());
    }

    #[test]
    fn yaml_strings_are_quoted() {
        assert_eq!(yaml_str("a\"b\nc"), r#""a\"b\nc""#);
    }

    #[test]
    fn env_file_renders_quoted_lines() {
        let vars = [("A", "1".to_string()), ("B", "x y".to_string())];
        let s = render("metalherd.env", &EnvFile { vars: &vars }).unwrap();
        assert!(s.ends_with("A=\"1\"\nB=\"x y\"\n"), "{s}");
    }
}
