//! A TCP balancer in front of a highly available control plane: nginx's
//! stream module in the rack's namespace, as a site would run nginx or
//! HAProxy on a host beside its servers (metalherd runs no balancer). A
//! backend that refuses or does not answer within two seconds is skipped
//! for the next.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::proc::{ChildGuard, wait_for};

/// Where Debian's libnginx-mod-stream puts the module.
const STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

/// nginx in namespace `ns` listening on `listen` (`10.89.0.1:7443`) and
/// passing each connection to one of `backends` (`10.89.0.11:6443`, ...);
/// its config, pid file and logs in `dir`. Stopped when the guard drops.
pub fn start(ns: &str, dir: &Path, listen: &str, backends: &[String]) -> ChildGuard {
    assert!(
        Path::new(STREAM_MODULE).exists(),
        "{STREAM_MODULE} is missing: install libnginx-mod-stream (scripts/setup does)"
    );
    std::fs::create_dir_all(dir).unwrap();
    let d = dir.display();
    let servers: String = backends
        .iter()
        .map(|b| format!("    server {b} max_fails=1 fail_timeout=10s;\n"))
        .collect();
    let conf = format!(
        "load_module {STREAM_MODULE};\n\
         daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 1024; }}\n\
         stream {{\n  upstream control_plane {{\n{servers}  }}\n\
         \x20 log_format basic '$remote_addr $upstream_addr $status $session_time';\n\
         \x20 access_log {d}/access.log basic;\n\
         \x20 server {{\n    listen {listen};\n    proxy_pass control_plane;\n\
         \x20   proxy_connect_timeout 2s;\n    proxy_timeout 1h;\n  }}\n}}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, "nginx", "-e"])
        .arg(dir.join("error.log"))
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&path);
    let mut proc = ChildGuard::spawn("nginx (stream balancer)", &mut cmd, &dir.join("nginx.out"));
    let (host, port) = listen.rsplit_once(':').unwrap();
    let up = wait_for(Duration::from_secs(10), || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "ss",
                "-Hltn",
                &format!("sport = :{port}"),
            ])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .contains(host)
            .then_some(())
    });
    if up.is_none() || !proc.running() {
        panic!(
            "the balancer did not listen on {listen}:\n{}\n{}",
            std::fs::read_to_string(dir.join("nginx.out")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
    }
    proc
}
