use serde_json::{Value, json};

use super::*;

/// The shape Cluster API's kubeadm bootstrap provider writes for a worker
/// (`format: ignition`), trimmed.
fn cabpk_join() -> Value {
    json!({
        "ignition": {"config": {}, "security": {"tls": {}}, "timeouts": {}, "version": "2.3.0"},
        "networkd": {},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA test"]}]},
        "storage": {"files": [
            {"filesystem": "root", "path": "/etc/kubeadm.sh", "contents": {"source": "data:,%23!%2Fbin%2Fbash%0Akubeadm%20join", "verification": {}}, "mode": 448},
            {"filesystem": "root", "path": "/etc/kubeadm.yml", "contents": {"source": "data:,---%0Akind%3A%20JoinConfiguration", "verification": {}}, "mode": 384},
            {"filesystem": "root", "path": "/etc/motd", "append": true, "contents": {"source": "data:,hello"}}
        ]},
        "systemd": {"units": [{"name": "kubeadm.service", "enabled": true, "contents": "[Unit]\nDescription=kubeadm\n"}]}
    })
}

fn convert(v: &Value) -> Result<Value, RenderError> {
    let s = to_ignition3(Some("ignition"), v.to_string().as_bytes())?;
    Ok(serde_json::from_str(&s).unwrap_or_default())
}

#[test]
fn a_bootstrap_providers_2_3_config_becomes_3_3() {
    let v = convert(&cabpk_join()).unwrap();
    assert_eq!(v["ignition"]["version"], "3.3.0");
    let files = v["storage"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert_eq!(files[0]["path"], "/etc/kubeadm.sh");
    assert_eq!(files[0]["mode"], 448);
    assert_eq!(files[0]["overwrite"], true);
    assert!(files[0].get("filesystem").is_none());
    assert_eq!(
        files[0]["contents"]["source"],
        "data:,%23!%2Fbin%2Fbash%0Akubeadm%20join"
    );
    // Appended, not overwritten.
    assert_eq!(files[2]["append"][0]["source"], "data:,hello");
    assert!(files[2].get("overwrite").is_none());
    assert_eq!(v["systemd"]["units"][0]["name"], "kubeadm.service");
    assert_eq!(v["passwd"]["users"][0]["name"], "core");
}

#[test]
fn a_3_x_config_is_kept_as_it_is() {
    let c = json!({"ignition": {"version": "3.2.0"}, "storage": {"files": [{"path": "/x"}]}});
    assert_eq!(convert(&c).unwrap(), c);
}

#[test]
fn cloud_config_and_unknown_formats_are_refused_by_name() {
    let e = to_ignition3(Some("cloud-config"), b"#cloud-config\n").unwrap_err();
    assert!(
        e.to_string().contains("cloud-config is not supported"),
        "{e}"
    );
    assert!(e.to_string().contains("spec.format"), "{e}");
    let e = to_ignition3(Some("shell"), b"{}").unwrap_err();
    assert!(e.to_string().contains("unknown format \"shell\""), "{e}");
}

#[test]
fn disks_other_filesystems_and_remote_configs_are_refused() {
    let mut c = cabpk_join();
    c["storage"]["disks"] = json!([{"device": "/dev/sdb", "wipeTable": true}]);
    let e = convert(&c).unwrap_err();
    assert!(e.to_string().contains("storage.disks"), "{e}");
    assert!(e.to_string().contains("disk layout"), "{e}");

    let mut c = cabpk_join();
    c["storage"]["files"][0]["filesystem"] = json!("data");
    let e = convert(&c).unwrap_err();
    assert!(e.to_string().contains("storage.files[0].filesystem"), "{e}");

    let mut c = cabpk_join();
    c["ignition"]["config"] = json!({"append": [{"source": "http://x/y.ign"}]});
    let e = convert(&c).unwrap_err();
    assert!(e.to_string().contains("ignition.config"), "{e}");

    let mut c = cabpk_join();
    c["networkd"] = json!({"units": [{"name": "a.network"}]});
    let e = convert(&c).unwrap_err();
    assert!(e.to_string().contains("networkd"), "{e}");
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for bad in [
        &b""[..],
        b"null",
        b"[]",
        b"{\"ignition\":{}}",
        b"{\"ignition\":{\"version\":\"9\"}}",
        b"\xff\xfe",
    ] {
        assert!(
            to_ignition3(None, bad).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let c =
        json!({"ignition": {"version": "2.3.0"}, "storage": {"files": [{"filesystem": "root"}]}});
    assert!(convert(&c).unwrap_err().to_string().contains("path"));
    let c = json!({"ignition": {"version": "2.3.0"}, "systemd": {"units": [{"enabled": true}]}});
    assert!(convert(&c).unwrap_err().to_string().contains("name"));
}
