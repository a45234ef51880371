//! Machine validation: the BMC address and credentials, the boot MAC, the
//! static network and the per-machine overrides.

use std::net::IpAddr;

use super::ValidationErrors;
use super::common::{is_dns_label, is_dns_subdomain, validate_overrides, validate_remediation};
use crate::api::machine::{MachineNetwork, MachineSpec};

/// Parsed BMC address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BmcAddress {
    Redfish {
        /// `https://host:port` (or http) of the service.
        base: url::Url,
        /// `/redfish/v1/Systems/ID` when the address names a system.
        system_path: Option<String>,
    },
    Ipmi {
        host: String,
        port: u16,
    },
}

/// Why a `spec.bmc.address` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BmcAddressError {
    #[error("not a URL ({source}): {address:?}")]
    NotAUrl {
        address: String,
        source: url::ParseError,
    },
    #[error("{0:?} has no host")]
    NoHost(String),
    #[error("path {0:?} is not a Redfish path (expected /redfish/v1/Systems/ID)")]
    NotRedfishPath(String),
    #[error("unsupported scheme {0:?} (use redfish+https, redfish+http or ipmi)")]
    UnsupportedScheme(String),
}

/// Parse and check a `spec.bmc.address`.
pub fn parse_bmc_address(s: &str) -> Result<BmcAddress, BmcAddressError> {
    let not_a_url = |source| BmcAddressError::NotAUrl {
        address: s.to_string(),
        source,
    };
    let u = url::Url::parse(s).map_err(not_a_url)?;
    let host = match u.host_str() {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => return Err(BmcAddressError::NoHost(s.to_string())),
    };
    match u.scheme() {
        "redfish+https" | "redfish+http" | "redfish" => {
            let scheme = if u.scheme() == "redfish+http" {
                "http"
            } else {
                "https"
            };
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let base = url::Url::parse(&format!("{scheme}://{host}{port}")).map_err(not_a_url)?;
            let path = u.path().trim_end_matches('/');
            let system_path = if path.is_empty() {
                None
            } else if path.starts_with("/redfish/v1/") {
                Some(path.to_string())
            } else {
                return Err(BmcAddressError::NotRedfishPath(path.to_string()));
            };
            Ok(BmcAddress::Redfish { base, system_path })
        }
        "ipmi" => Ok(BmcAddress::Ipmi {
            host,
            port: u.port().unwrap_or(623),
        }),
        other => Err(BmcAddressError::UnsupportedScheme(other.to_string())),
    }
}

pub(super) fn validate_machine_spec(spec: &MachineSpec) -> Result<(), ValidationErrors> {
    let mut errs = ValidationErrors::default();
    if let Some(r) = &spec.remediation {
        validate_remediation(r, "spec.remediation", &mut errs);
        if r.max_unhealthy.is_some() {
            errs.push(
                "spec.remediation.maxUnhealthy",
                "is a MachineSet's (how many of its machines may be unhealthy); a Machine has no pool",
            );
        }
        if r.unhealthy_when
            .contains(&crate::api::remediation::UnhealthySignal::ProbeFailing)
        {
            errs.push(
                "spec.remediation.unhealthyWhen",
                "ProbeFailing needs a MachineSet's health probe; a Machine's policy acts on NodeNotReady",
            );
        }
    }
    if let Err(e) = parse_bmc_address(&spec.bmc.address) {
        errs.push("spec.bmc.address", e.to_string());
    }
    if spec.bmc.credentials_secret_ref.name.is_empty() {
        errs.push(
            "spec.bmc.credentialsSecretRef.name",
            "required: the Secret with the BMC's username and password",
        );
    }
    if let Some(cs) = spec.bmc.cipher_suite
        && cs != 3
        && cs != 17
    {
        errs.push(
            "spec.bmc.cipherSuite",
            format!("unsupported cipher suite {cs} (use 3 or 17)"),
        );
    }
    if spec.bmc.insecure_skip_verify && spec.bmc.ca_bundle.is_some() {
        errs.push(
            "spec.bmc.insecureSkipVerify",
            "set either caBundle or insecureSkipVerify, not both",
        );
    }
    if let Some(mac) = &spec.boot_mac_address
        && mac.parse::<crate::api::MacAddr>().is_err()
    {
        errs.push(
            "spec.bootMACAddress",
            format!("malformed MAC address {mac:?} (expected aa:bb:cc:dd:ee:ff)"),
        );
    }
    if let Some(net) = &spec.network {
        validate_network(net, &mut errs);
    }
    if let Some(c) = &spec.class_ref
        && !is_dns_subdomain(&c.name)
    {
        errs.push(
            "spec.classRef.name",
            format!("{:?} is not a valid name", c.name),
        );
    }
    if let Some(o) = &spec.overrides {
        validate_overrides(o, "spec.overrides", &mut errs);
    }
    errs.into_result()
}

fn validate_network(net: &MachineNetwork, errs: &mut ValidationErrors) {
    let mut subnet: Option<ipnet::IpNet> = None;
    if let Some(a) = &net.address {
        match a.parse::<ipnet::IpNet>() {
            Ok(n) => subnet = Some(n),
            Err(_) => errs.push(
                "spec.network.address",
                format!("{a:?} is not an address with prefix length (expected 10.0.0.7/24)"),
            ),
        }
    }
    if let Some(g) = &net.gateway {
        match g.parse::<IpAddr>() {
            Ok(gw) => {
                if let Some(n) = subnet
                    && !n.trunc().contains(&gw)
                {
                    errs.push(
                        "spec.network.gateway",
                        // Worded as the CRD's CEL rule can say it (a
                        // masked prefix costs more than kube-apiserver's
                        // CEL budget allows).
                        format!("{g} is outside the subnet of spec.network.address {n}"),
                    );
                }
            }
            Err(_) => errs.push(
                "spec.network.gateway",
                format!("{g:?} is not an IP address"),
            ),
        }
    }
    if let Some(n) = subnet
        && (n.addr() == n.network() || n.addr() == n.broadcast())
        && n.prefix_len() < n.max_prefix_len() - 1
    {
        errs.push(
            "spec.network.address",
            format!(
                "{} is the network or broadcast address of {}",
                n.addr(),
                n.trunc()
            ),
        );
    }
    for (i, d) in net.dns.iter().enumerate() {
        if d.parse::<IpAddr>().is_err() {
            errs.push(
                format!("spec.network.dns[{i}]"),
                format!("{d:?} is not an IP address"),
            );
        }
    }
    if let Some(h) = &net.hostname
        && !is_dns_label(h)
    {
        errs.push(
            "spec.network.hostname",
            format!("{h:?} is not a valid host name"),
        );
    }
    if let Some(d) = &net.domain
        && !is_dns_subdomain(d)
    {
        errs.push(
            "spec.network.domain",
            format!("{d:?} is not a valid domain"),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::api::Kind;
    use crate::api::validate::validate;

    fn machine(spec: Value) -> Value {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
               "metadata": {"name": "m1", "namespace": "default"}, "spec": spec})
    }

    fn good_spec() -> Value {
        json!({"bmc": {"address": "redfish+https://10.0.0.5/redfish/v1/Systems/1",
                        "credentialsSecretRef": {"name": "bmc"}},
               "bootMACAddress": "52:54:00:12:34:56",
               "network": {"address": "10.0.0.7/24", "gateway": "10.0.0.1"}})
    }

    fn first(kind: Kind, v: &Value) -> String {
        validate(kind, v).unwrap_err().0[0].to_string()
    }

    #[test]
    fn a_machines_remediation_has_no_pool_and_no_probe() {
        let mut spec = good_spec();
        spec["remediation"] = json!({"unhealthySeconds": 60, "powerCycles": 2});
        assert!(validate(Kind::Machine, &machine(spec.clone())).is_ok());
        spec["remediation"] = json!({"maxUnhealthy": 1, "unhealthyWhen": ["ProbeFailing"],
            "recoverySeconds": 0});
        let errs: Vec<String> = validate(Kind::Machine, &machine(spec))
            .unwrap_err()
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs[0].starts_with("spec.remediation.recoverySeconds: must be 1 or more"));
        assert!(errs[1].starts_with("spec.remediation.maxUnhealthy: is a MachineSet's"));
        assert!(errs[2].starts_with("spec.remediation.unhealthyWhen: ProbeFailing needs"));
    }

    #[test]
    fn good_machine_passes() {
        validate(Kind::Machine, &machine(good_spec())).unwrap();
    }

    #[test]
    fn bad_scheme_names_field() {
        let mut s = good_spec();
        s["bmc"]["address"] = json!("ftp://x/y");
        assert_eq!(
            first(Kind::Machine, &machine(s)),
            "spec.bmc.address: unsupported scheme \"ftp\" (use redfish+https, redfish+http or ipmi)"
        );
    }

    #[test]
    fn unknown_field_names_path() {
        let mut s = good_spec();
        s["bmc"]["adress"] = json!("x");
        let e = first(Kind::Machine, &machine(s));
        assert!(
            e.starts_with("spec.bmc.adress: unknown field `adress`"),
            "{e}"
        );
    }

    #[test]
    fn malformed_mac() {
        let mut s = good_spec();
        s["bootMACAddress"] = json!("52:54:00:12:34");
        assert!(
            first(Kind::Machine, &machine(s)).starts_with("spec.bootMACAddress: malformed MAC")
        );
    }

    #[test]
    fn gateway_outside_subnet() {
        let mut s = good_spec();
        s["network"]["gateway"] = json!("10.0.1.1");
        assert!(
            first(Kind::Machine, &machine(s))
                .starts_with("spec.network.gateway: 10.0.1.1 is outside")
        );
    }

    #[test]
    fn missing_credentials() {
        let mut s = good_spec();
        s["bmc"]
            .as_object_mut()
            .unwrap()
            .remove("credentialsSecretRef");
        assert!(
            first(Kind::Machine, &machine(s))
                .starts_with("spec.bmc.credentialsSecretRef: required")
        );
    }
}
