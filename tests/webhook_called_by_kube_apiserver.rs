//! Story: a cluster admin registers metalherd's validating admission
//! webhook (the ValidatingWebhookConfiguration of deploy/kubernetes/, its
//! caBundle the CA of a running `metalherd serve`, its client config a URL
//! to that process instead of the in-cluster Service) on a real
//! kube-apiserver with deploy/crds/ installed. Then `kubectl apply` of
//! every bad manifest of the validation suite (tests/common/manifests.rs)
//! is refused by kube-apiserver and by standalone metalherd alike, naming
//! the same field; where kube-apiserver's own schema check refuses first,
//! its words differ from standalone's and the test says which (README,
//! "Differences from kube-apiserver"). A valid Machine passes the webhook;
//! with metalherd stopped, `failurePolicy: Fail` refuses it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::control_plane::{ControlPlane, Options};
use common::kubectl::kubectl;
use common::manifests::{bad_manifests, machine};
use common::proc::wait_for;
use common::server::Server;
use serde_json::{Value, json};

/// The cases kube-apiserver refuses before calling the webhook (its
/// structural schema or a CEL rule), and the words it uses instead of
/// standalone's; every other case must carry standalone's words.
const SCHEMA_WORDS: &[(&str, &str)] = &[
    ("unknown field", "unknown field \"spec.bmc.adress\""),
    ("malformed MAC", "should match"),
    ("negative replicas", "should be greater than or equal to 0"),
    ("absent credentials reference", "Required value"),
];

#[test]
fn webhook_called_by_kube_apiserver() {
    let cp = ControlPlane::start(Options::default());
    cp.install_crds();
    // Standalone metalherd, its controller off (the manifests name BMCs
    // nobody runs).
    let mut standalone = Server::start();
    let standalone_kc = common::kubectl::kubeconfig(&standalone);
    // kube-apiserver reaches the webhook on loopback, outside the
    // standalone server's namespace: a second `serve` on the host.
    let hook = Server::start();
    let ca = std::fs::read(hook.data_dir.join("ca.crt")).unwrap();

    // The ValidatingWebhookConfiguration of deploy/kubernetes/, pointed at
    // the test's `serve`.
    let rendered = common::deploy::render();
    let mut vwc = rendered
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap()
        .clone();
    {
        use base64::Engine;
        let cc = &mut vwc["webhooks"][0]["clientConfig"];
        let path = cc["service"]["path"].as_str().unwrap().to_string();
        *cc = json!({
            "url": format!("{}{path}", hook.url),
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
        });
    }
    let file = cp.dir.path().join("webhook.json");
    std::fs::write(&file, vwc.to_string()).unwrap();
    let (ok, out, err) = cp.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "register the webhook: {out}{err}");

    // The webhook is live once a case only it can refuse is refused (the
    // configuration reaches kube-apiserver's admission chain shortly after
    // it is stored).
    let bad = bad_manifests();
    let scheme = bad.iter().find(|b| b.case == "bad BMC URL scheme").unwrap();
    let scheme_file = cp.dir.path().join("scheme.json");
    std::fs::write(&scheme_file, scheme.doc.to_string()).unwrap();
    let mut last = String::new();
    let live = wait_for(Duration::from_secs(30), || {
        let (ok, out, err) = cp.kubectl(&[
            "create",
            "--dry-run=server",
            "-f",
            scheme_file.to_str().unwrap(),
        ]);
        last = format!("{out}{err}");
        // No schema rule knows BMC URL schemes: only metalherd's words.
        (!ok && err.contains(scheme.says)).then_some(())
    });
    assert!(
        live.is_some(),
        "the webhook never refused {}: {last}\nkube-apiserver: {}",
        scheme.case,
        common::rack::tail(&cp.log("kube-apiserver"), 20)
    );

    let mut differences = Vec::new();
    for b in &bad {
        let f = cp.dir.path().join(format!(
            "{}.json",
            b.doc["metadata"]["name"].as_str().unwrap()
        ));
        std::fs::write(&f, b.doc.to_string()).unwrap();
        let (ok_k, out_k, err_k) = cp.kubectl(&["apply", "-f", f.to_str().unwrap()]);
        let (ok_s, out_s, err_s) = kubectl(&standalone_kc, &["apply", "-f", f.to_str().unwrap()]);
        assert!(!ok_k, "{}: kube-apiserver took it: {out_k}", b.case);
        assert!(!ok_s, "{}: standalone took it: {out_s}", b.case);
        assert!(
            err_s.contains(b.field) && err_s.contains(b.says),
            "{}: standalone: {err_s}",
            b.case
        );
        assert!(
            err_k.contains(b.field),
            "{}: kube-apiserver names no {}: {err_k}",
            b.case,
            b.field
        );
        match SCHEMA_WORDS.iter().find(|(c, _)| *c == b.case) {
            Some((_, words)) => {
                assert!(err_k.contains(words), "{}: kube-apiserver: {err_k}", b.case);
                differences.push(format!(
                    "{}: kube-apiserver: {} | standalone: {}",
                    b.case,
                    err_k.trim(),
                    err_s.trim()
                ));
            }
            None => assert!(
                err_k.contains(b.says),
                "{}: kube-apiserver's refusal lacks standalone's words {:?}: {err_k}",
                b.case,
                b.says
            ),
        }
        // Nothing stored.
        let name = b.doc["metadata"]["name"].as_str().unwrap();
        let (code, _) = cp.req(
            "GET",
            &format!(
                "/apis/metalherd.dev/v1alpha1/namespaces/default/{}/{name}",
                b.plural
            ),
            None,
        );
        assert_eq!(code, 404, "{}: stored", b.case);
    }
    for d in &differences {
        eprintln!("refused by the schema, in other words: {d}");
    }

    // A valid Machine passes the webhook.
    let good = cp.dir.path().join("good.json");
    std::fs::write(&good, machine("hooked").to_string()).unwrap();
    let (ok, out, err) = cp.kubectl(&["apply", "-f", good.to_str().unwrap()]);
    assert!(ok, "{out}{err}");

    // failurePolicy Fail: with metalherd gone, nothing unchecked is stored.
    drop(hook);
    let mut m: Value = machine("unchecked");
    m["metadata"]["labels"] = json!({"rack": "r2"});
    std::fs::write(&good, m.to_string()).unwrap();
    let (ok, _, err) = cp.kubectl(&["apply", "-f", good.to_str().unwrap()]);
    assert!(!ok, "stored without the webhook");
    assert!(
        err.contains("failed calling webhook \"validate.metalherd.dev\""),
        "{err}"
    );
    standalone.guard.kill9();
}
