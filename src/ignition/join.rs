//! The kubeadm JoinConfiguration of a node: API server endpoint, CA
//! certificate hashes, the bootstrap token from the class's Secret, node
//! name, providerID `metalherd://NAMESPACE/NAME`, node labels and taints.
//! Every value is checked (Kubernetes label/taint syntax, token shape) and
//! YAML-quoted before it reaches the template. Pure.

use crate::api::MachineClass;

use super::error::RenderError;
use super::render::{RenderSecrets, Resolved};
use super::templates::{self as t, check_word, render, yaml_str};

/// Is `s` a Kubernetes qualified name (optionally `prefix/`name)?
fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && name
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric);
    let prefix_ok = prefix
        .is_none_or(|p| p.len() <= 253 && p.split('.').all(crate::api::validate::is_dns_label));
    name_ok && prefix_ok
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && s.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && s.as_bytes().last().is_some_and(u8::is_ascii_alphanumeric))
}

/// Bootstrap tokens: `[a-z0-9]{6}.[a-z0-9]{16}`.
fn is_bootstrap_token(s: &str) -> bool {
    let ok = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    matches!(s.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
}

pub(crate) fn join_configuration(
    r: &Resolved<'_>,
    class: &MachineClass,
    secrets: &RenderSecrets,
) -> Result<String, RenderError> {
    let join = &class.spec.join;
    let ep = check_word("spec.join.apiServerEndpoint", &join.api_server_endpoint)?;
    let (host, port) = ep
        .rsplit_once(':')
        .ok_or_else(|| RenderError::invalid("spec.join.apiServerEndpoint", "expected host:port"))?;
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(RenderError::invalid(
            "spec.join.apiServerEndpoint",
            "expected host:port",
        ));
    }
    if join.ca_cert_hashes.is_empty() {
        return Err(RenderError::invalid(
            "spec.join.caCertHashes",
            "at least one sha256:<hex> hash of the cluster CA is required",
        ));
    }
    for (i, h) in join.ca_cert_hashes.iter().enumerate() {
        let ok = h
            .strip_prefix("sha256:")
            .is_some_and(|x| x.len() == 64 && x.bytes().all(|b| b.is_ascii_hexdigit()));
        if !ok {
            return Err(RenderError::invalid(
                format!("spec.join.caCertHashes[{i}]"),
                "expected sha256:<64 hex digits>",
            ));
        }
    }
    if !is_bootstrap_token(secrets.join_token()) {
        return Err(RenderError::invalid(
            "spec.join.tokenSecretRef",
            format!(
                "Secret {:?} does not hold a bootstrap token ([a-z0-9]{{6}}.[a-z0-9]{{16}})",
                join.token_secret_ref.name
            ),
        ));
    }

    let mut labels = Vec::new();
    for (k, v) in &class.spec.node_labels {
        if !is_qualified_name(k) || !is_label_value(v) {
            return Err(RenderError::invalid(
                format!("spec.nodeLabels[{k:?}]"),
                "not a valid Kubernetes label",
            ));
        }
        labels.push(format!("{k}={v}"));
    }
    let mut kubelet_args = vec![(
        yaml_str("provider-id"),
        yaml_str(&format!("metalherd://{}/{}", r.namespace, r.name)),
    )];
    if !labels.is_empty() {
        kubelet_args.push((yaml_str("node-labels"), yaml_str(&labels.join(","))));
    }
    let mut taints = Vec::new();
    for (i, tn) in class.spec.node_taints.iter().enumerate() {
        if !is_qualified_name(&tn.key) {
            return Err(RenderError::invalid(
                format!("spec.nodeTaints[{i}].key"),
                "not a valid taint key",
            ));
        }
        if let Some(v) = &tn.value
            && !is_label_value(v)
        {
            return Err(RenderError::invalid(
                format!("spec.nodeTaints[{i}].value"),
                "not a valid taint value",
            ));
        }
        if !matches!(
            tn.effect.as_str(),
            "NoSchedule" | "PreferNoSchedule" | "NoExecute"
        ) {
            return Err(RenderError::invalid(
                format!("spec.nodeTaints[{i}].effect"),
                format!("unknown effect {:?}", tn.effect),
            ));
        }
        taints.push(t::YamlTaint {
            key: yaml_str(&tn.key),
            value: tn.value.as_deref().map(yaml_str),
            effect: yaml_str(&tn.effect),
        });
    }
    // kubeadm v1beta4 (Kubernetes 1.31+) takes kubeletExtraArgs as a list.
    let v1beta4 = r.k8s_minor >= 31;
    render(
        "kubeadm-join.yaml",
        &t::JoinConfig {
            api_version: if v1beta4 { "v1beta4" } else { "v1beta3" },
            v1beta4,
            endpoint: yaml_str(ep),
            token: yaml_str(secrets.join_token()),
            ca_cert_hashes: join.ca_cert_hashes.iter().map(|h| yaml_str(h)).collect(),
            node_name: yaml_str(&r.hostname),
            kubelet_args,
            taints,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens() {
        assert!(is_bootstrap_token("abcdef.0123456789abcdef"));
        assert!(!is_bootstrap_token("abcdef.0123456789abcde"));
        assert!(!is_bootstrap_token("ABCDEF.0123456789abcdef"));
        assert!(!is_bootstrap_token("abcdef0123456789abcdef"));
    }

    #[test]
    fn labels() {
        assert!(is_qualified_name("node-role.kubernetes.io/worker"));
        assert!(is_qualified_name("rack"));
        assert!(!is_qualified_name("bad key"));
        assert!(!is_qualified_name("-x"));
        assert!(is_label_value(""));
        assert!(!is_label_value("a,b=c"));
    }
}
