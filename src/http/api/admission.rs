//! What this server's deployment requires of objects beyond their schema:
//! rules that depend on how `serve` was configured, checked when users
//! create or change objects through the API (the controller's own writes
//! and status updates are not subject to them).

use serde_json::Value;

use crate::api::Kind;
use crate::api::validate::ValidationErrors;

/// The deployment facts the rules need.
#[derive(Clone, Debug, Default)]
pub struct Admission {
    /// DHCP runs in proxy mode: the site's DHCP server hands out addresses,
    /// so metalherd leases none and knows a Machine's address only from
    /// `spec.network.address`.
    pub dhcp_proxy: bool,
}

impl Admission {
    /// Refuse what this deployment cannot serve, with field paths.
    pub fn admit(&self, kind: Kind, v: &Value) -> Result<(), ValidationErrors> {
        if self.dhcp_proxy && kind == Kind::Machine {
            let address = v
                .pointer("/spec/network/address")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty());
            if address.is_none() {
                return Err(ValidationErrors::single(
                    "spec.network.address",
                    "required while metalherd runs DHCP in proxy mode (dhcp.mode: proxy): \
                     the site's DHCP server leases the addresses, and a Machine's install \
                     script and Ignition config are served only to its own address, so \
                     set the address the site's DHCP server gives this machine \
                     (a reservation there), as CIDR",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn machine(network: Value) -> Value {
        json!({"apiVersion": "metalherd.dev/v1alpha1", "kind": "Machine",
               "metadata": {"name": "m1"}, "spec": {"network": network}})
    }

    #[test]
    fn proxy_mode_needs_a_machines_address() {
        let proxy = Admission { dhcp_proxy: true };
        let e = proxy.admit(Kind::Machine, &machine(json!({}))).unwrap_err();
        assert_eq!(e.0[0].field, "spec.network.address");
        assert!(e.0[0].message.contains("proxy mode"), "{e}");
        assert!(
            proxy
                .admit(Kind::Machine, &machine(json!({"address": ""})))
                .is_err()
        );
        let ok = machine(json!({"address": "10.0.0.7/24"}));
        assert!(proxy.admit(Kind::Machine, &ok).is_ok());
        // Other kinds, and authoritative mode, are not concerned.
        assert!(proxy.admit(Kind::MachineClass, &json!({})).is_ok());
        let authoritative = Admission::default();
        assert!(
            authoritative
                .admit(Kind::Machine, &machine(json!({})))
                .is_ok()
        );
    }
}
