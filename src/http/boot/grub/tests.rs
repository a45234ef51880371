use super::*;

fn install() -> InstallParams<'static> {
    InstallParams {
        machine: "rack1-u07",
        boot_id: "b-0001",
        purpose: "install",
        os: "flatcar",
        version: "4230.2.3",
        kernel_url: "/images/aa/kernel",
        initrd_url: "/images/bb/initrd",
        kernel_args: &[],
        retry_url: "/grub/52:54:00:12:34:56.cfg",
        wait_seconds: 10,
    }
}

#[test]
fn configuration_paths() {
    let mac = [0x52, 0x54, 0, 0x12, 0x34, 0x56];
    assert_eq!(config_path(&mac), "/grub/52:54:00:12:34:56.cfg");
    assert_eq!(mac_of_path("grub/52:54:00:12:34:56.cfg"), Some(mac));
    assert_eq!(mac_of_path("/grub/52:54:00:12:34:56.cfg"), Some(mac));
    for bad in [
        "grub/grub.cfg",
        "grub/52:54:00:12:34.cfg",
        "x/52:54:00:12:34:56.cfg",
        "grub/52:54:00:12:34:56",
    ] {
        assert_eq!(mac_of_path(bad), None, "{bad}");
    }
}

#[test]
fn snapshot_entry() {
    insta::assert_snapshot!(render_entry(10).unwrap());
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
    p.kernel_url = "/k'; reboot; '";
    assert!(render_install(&p).is_err());
    let mut p = install();
    p.kernel_url = "(http,evil)/k";
    assert!(render_install(&p).is_err());
    let mut p = install();
    p.initrd_url = "images/relative";
    assert!(matches!(
        render_install(&p),
        Err(ScriptError::GrubPath { .. })
    ));
    let mut p = install();
    p.machine = "evil'\nreboot";
    assert!(!render_install(&p).unwrap().contains("evil"));
}
