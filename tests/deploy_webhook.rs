//! Story: the admission webhook of deploy/kubernetes/ fits together as a
//! cluster would use it: the ValidatingWebhookConfiguration names a Service
//! that selects the Deployment's pods and forwards to the API port, its
//! caBundle is the certificate the Deployment hands `serve`
//! (`--tls-cert/--tls-key` from the mounted Secret), and `serve` started
//! with that certificate answers an AdmissionReview at the webhook's path
//! to a client that trusts only the caBundle and checks the Service's DNS
//! name, refusing an invalid Machine with its field path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;

use common::deploy::{named, render, typed};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Secret, Service};
use serde_json::{Value, json};

#[test]
fn the_admission_webhook_is_reachable_and_trusted_as_the_cluster_would_call_it() {
    let rendered = render();
    let vwc: ValidatingWebhookConfiguration = typed(&rendered, "ValidatingWebhookConfiguration");
    let hook = &vwc.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.admission_review_versions, vec!["v1".to_string()]);
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(hook.side_effects, "None");
    let rules = hook.rules.as_ref().unwrap();
    let resources: BTreeSet<&str> = rules
        .iter()
        .flat_map(|r| r.resources.iter().flatten().map(String::as_str))
        .collect();
    assert_eq!(
        resources,
        BTreeSet::from(["machines", "machineclasses", "machinesets"])
    );
    let svc_ref = hook.client_config.service.as_ref().unwrap();
    assert_eq!(
        svc_ref.path.as_deref(),
        Some(metalherd::http::api::webhook::PATH)
    );
    // The Service it names exists, selects the Deployment's pods and
    // forwards to the API port.
    let svc: Service = named(&rendered, "Service", &svc_ref.name);
    assert_eq!(
        svc.metadata.namespace.as_deref(),
        Some(svc_ref.namespace.as_str())
    );
    let spec = svc.spec.unwrap();
    let port = spec
        .ports
        .iter()
        .flatten()
        .find(|p| Some(p.port) == svc_ref.port)
        .unwrap();
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("api".into()))
    );
    let d: Deployment = typed(&rendered, "Deployment");
    let pod_labels = d
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    for (k, v) in spec.selector.unwrap() {
        assert_eq!(pod_labels.get(&k), Some(&v), "the Service selects {k}={v}");
    }
    // The caBundle is the certificate in the Secret the Deployment mounts
    // and hands to `serve` as --tls-cert/--tls-key.
    let tls: Secret = named(&rendered, "Secret", "metalherd-webhook-tls");
    let data = tls.data.unwrap();
    let cert = &data["tls.crt"].0;
    let bundle = hook.client_config.ca_bundle.as_ref().unwrap().0.clone();
    assert_eq!(&bundle, cert, "caBundle is the served certificate");
    let pod = d.spec.unwrap().template.spec.unwrap();
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| {
            v.secret.as_ref().and_then(|s| s.secret_name.as_deref())
                == Some("metalherd-webhook-tls")
        })
        .expect("the Deployment mounts the webhook's Secret");
    let c = &pod.containers[0];
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == vol.name)
        .unwrap();
    let args = c.args.clone().unwrap();
    for (flag, file) in [("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")] {
        let want = format!("{flag}={}/{file}", mount.mount_path);
        assert!(args.contains(&want), "{want} missing from {args:?}");
    }

    // `serve` with that pair answers an AdmissionReview to a client that
    // trusts only the caBundle and checks the Service's DNS name, as the
    // kube-apiserver does.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &data["tls.key"].0).unwrap();
    std::fs::write(dir.path().join("ca.crt"), &bundle).unwrap();
    let port = common::free_port();
    let mut cmd = std::process::Command::new(common::metalherd_bin());
    cmd.arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert")
        .arg(dir.path().join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.path().join("tls.key"))
        .env("METALHERD_CONFIG", "/dev/null")
        .env("METALHERD_LOG", "info");
    let _serve =
        common::proc::ChildGuard::spawn("metalherd serve", &mut cmd, &dir.path().join("serve.log"));
    let host = format!("{}.{}.svc", svc_ref.name, svc_ref.namespace);
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE",
                    "kind": {"group": "metalherd.dev", "version": "v1alpha1", "kind": "Machine"},
                    "object": {"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
                               "metadata": {"name": "m1", "namespace": "metalherd"},
                               "spec": {"bootMACAddress": "52:54:00:12:34"}}}});
    let answer = common::proc::wait_for(std::time::Duration::from_secs(30), || {
        let out = std::process::Command::new("curl")
            .args(["-s", "--fail-with-body", "--cacert"])
            .arg(dir.path().join("ca.crt"))
            .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
            .args(["-H", "Content-Type: application/json", "--data-binary"])
            .arg(review.to_string())
            .arg(format!(
                "https://{host}:{port}{}",
                metalherd::http::api::webhook::PATH
            ))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| serde_json::from_slice::<Value>(&out.stdout).ok())?
    });
    let answer = answer.unwrap_or_else(|| {
        panic!(
            "no answer from the webhook; log:\n{}",
            std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default()
        )
    });
    assert_eq!(answer["response"]["uid"], "u-1", "{answer}");
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let fields: Vec<&Value> = answer["response"]["status"]["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["field"])
        .collect();
    assert!(fields.contains(&&json!("spec.bmc")), "{answer}");
    assert!(
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.bmc: required"),
        "{answer}"
    );
}
