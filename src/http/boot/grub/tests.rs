use super::*;

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
        retry_url: "http://10.77.0.1:8080/boot.grub?mac=52-54-00-12-34-56",
        wait_seconds: 10,
    }
}

#[test]
fn urls_in_grub_syntax() {
    assert_eq!(
        grub_url("u", "http://10.0.0.1:8080/boot.grub?mac=a&b=c").unwrap(),
        "(http,10.0.0.1:8080)/boot.grub?mac=a&b=c"
    );
    assert_eq!(grub_url("u", "http://boot.example").unwrap(), "(http,boot.example)/");
    assert!(matches!(
        grub_url("u", "https://10.0.0.1/k"),
        Err(ScriptError::GrubNeedsHttp { field: "u", .. })
    ));
    assert!(grub_url("u", "http://10.0.0.1/k'x").is_err());
}

#[test]
fn snapshot_entry() {
    insta::assert_snapshot!(render_entry("http://10.77.0.1:8080", 10).unwrap());
    let prefixed = render_entry("http://10.77.0.1:8080/metalherd/", 10).unwrap();
    assert!(
        prefixed.contains("\"(http,10.77.0.1:8080)/metalherd/boot.grub?mac=${net_default_mac}\""),
        "{prefixed}"
    );
    assert!(render_entry("https://10.77.0.1", 10).is_err());
}

#[test]
fn snapshot_install() {
    let a: Vec<String> = vec![
        "console=ttyS0,115200n8".into(),
        "ignition.config.url=http://10.77.0.1:8080/ignition?mac=52-54-00-12-34-56&token=0123abcd"
            .into(),
    ];
    let mut p = install();
    p.kernel_args = &a;
    insta::assert_snapshot!(render_install(&p).unwrap());
}

#[test]
fn snapshot_local_and_wait() {
    insta::assert_snapshot!("local", render_local("rack1-u07").unwrap());
    let mac = [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc];
    insta::assert_snapshot!("idle", render_wait(&mac, WaitReason::Idle, 30).unwrap());
}

#[test]
fn injection_is_refused() {
    for bad in ["a'b", "a b", "${prefix}", "a\nlinux x", "a;b", "a\"b", ""] {
        let a = vec![bad.to_string()];
        let mut p = install();
        p.kernel_args = &a;
        assert!(render_install(&p).is_err(), "{bad:?} rendered");
    }
    let mut p = install();
    p.kernel_url = "http://x/k'; reboot; '";
    assert!(render_install(&p).is_err());
    let mut p = install();
    p.machine = "evil'\nreboot";
    assert!(!render_install(&p).unwrap().contains("evil"));
}
