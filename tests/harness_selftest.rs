//! The test harness itself: namespaces come and go, processes die with guards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[test]
fn veth_pair_connects_two_namespaces() {
    let pair = common::netns::VethPair::new("10.231.0.1/24", Some("10.231.0.2/24"));
    let out = pair
        .client
        .exec(&["ping", "-c", "1", "-W", "2", "10.231.0.1"]);
    assert!(out.contains("1 received"), "{out}");
    let name = pair.server.name.clone();
    drop(pair);
    let list = String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(!list.contains(&name), "namespace {name} left behind");
}

/// The DNS-over-TCP query the Cluster API story asks CoreDNS with reads a
/// real resolver's answer (dnsmasq in a namespace), and its refusal.
#[test]
fn dns_over_tcp_reads_a_real_resolvers_answer() {
    let ns = common::netns::Netns::new("mhdns");
    let dnsmasq = common::require_tool("dnsmasq");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dnsmasq.log");
    let mut cmd = ns.command(dnsmasq.to_str().unwrap());
    cmd.args([
        "--keep-in-foreground",
        "--no-resolv",
        "--no-hosts",
        "--conf-file=/dev/null",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--port=5353",
        "--pid-file=",
        "--address=/kubernetes.default.svc.cluster.local/10.96.0.1",
    ]);
    let _dnsmasq = common::proc::ChildGuard::spawn("dnsmasq", &mut cmd, &log);
    let name = "kubernetes.default.svc.cluster.local";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let answer = loop {
        match common::dns_tcp::resolve_a(&ns.name, 5353, name) {
            Ok(a) => break a,
            Err(e) if std::time::Instant::now() > deadline => panic!(
                "{e}; dnsmasq: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    };
    assert_eq!(answer, [std::net::Ipv4Addr::new(10, 96, 0, 1)]);
    // No upstream for other names: dnsmasq refuses (rcode 5).
    let refused = common::dns_tcp::resolve_a(&ns.name, 5353, "example.test").unwrap_err();
    assert_eq!(refused, "rcode 5", "{refused}");
}

/// The control-plane balancer the highly available story puts in front of
/// its servers passes every connection to a backend that answers, past
/// one that refuses (nginx's stream module, in a namespace).
#[test]
fn balancer_skips_a_backend_that_refuses() {
    let ns = common::netns::Netns::new("mhlb");
    let dir = tempfile::tempdir().unwrap();
    let mut http = ns.command("python3");
    http.args(["-m", "http.server", "17002", "--bind", "127.0.0.1"])
        .current_dir(dir.path());
    let _http = common::proc::ChildGuard::spawn(
        "python3 http.server",
        &mut http,
        &dir.path().join("http.log"),
    );
    let lb_dir = dir.path().join("balancer");
    let _lb = common::balancer::start(
        &ns.name,
        &lb_dir,
        "127.0.0.1:17443",
        &["127.0.0.1:17001".to_string(), "127.0.0.1:17002".to_string()],
    );
    let curl = |url: &str| {
        let out = ns
            .command("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                url,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The backend may take a moment to listen.
    common::proc::wait_for(std::time::Duration::from_secs(20), || {
        (curl("http://127.0.0.1:17002/") == "200").then_some(())
    })
    .expect("the backend did not answer");
    for _ in 0..4 {
        assert_eq!(curl("http://127.0.0.1:17443/"), "200");
    }
    // nginx logs a connection once both sides closed it.
    let access = common::proc::wait_for(std::time::Duration::from_secs(10), || {
        let log = std::fs::read_to_string(lb_dir.join("access.log")).unwrap_or_default();
        (log.lines().count() == 4).then_some(log)
    })
    .expect("the balancer logged fewer than four connections");
    assert!(
        access.contains("127.0.0.1:17001, 127.0.0.1:17002"),
        "no connection tried the refusing backend first:\n{access}"
    );
}
