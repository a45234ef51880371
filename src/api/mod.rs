//! Object types of group `metalherd.dev/v1alpha1` (Machine, MachineClass,
//! MachineSet), the Kubernetes objects we reuse (Secret, Event, Namespace,
//! and coordination.k8s.io's Lease), and validation of manifests with field
//! paths. Pure data: no I/O here.

// kube-derive's repeated `printcolumn(type_ = ...)` trips this lint by design.
#![allow(clippy::duplicated_attributes)]

pub mod boot;
mod common;
pub mod condition;
pub mod discovered;
pub mod event;
pub mod mac;
pub mod machine;
pub mod machine_class;
pub mod machine_set;
pub mod progress;
pub mod remediation;
pub mod validate;

pub use boot::{BootOutcome, BootPurpose, BootStep};
pub use common::*;
pub use condition::{Condition, ConditionStatus};
pub use discovered::{DiscoveredMachine, DiscoveredMachineSpec};
pub use event::Event;
pub use mac::{MacAddr, MacParseError};
pub use machine::*;
pub use machine_class::*;
pub use machine_set::*;
pub use progress::{BootProgress, Mark, MarkKey};
pub use remediation::{MachineRemediation, RemediationAction, RemediationPolicy};
pub use validate::{FieldError, ValidationErrors};

/// API group of metalherd's own objects.
pub const GROUP: &str = "metalherd.dev";
/// API version of metalherd's own objects.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of metalherd's own objects.
pub const API_VERSION: &str = "metalherd.dev/v1alpha1";

/// API group of Leases (leader election).
pub const COORDINATION_GROUP: &str = "coordination.k8s.io";

/// Every kind the store keeps. The API, the CLI and the store agree on these
/// names; `Secret`, `Event` and `Namespace` are core/v1, `Lease` is
/// `coordination.k8s.io/v1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Machine,
    MachineClass,
    MachineSet,
    Secret,
    Event,
    DiscoveredMachine,
    Lease,
    Namespace,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Machine,
        Kind::MachineClass,
        Kind::MachineSet,
        Kind::Secret,
        Kind::Event,
        Kind::DiscoveredMachine,
        Kind::Lease,
        Kind::Namespace,
    ];

    /// The `kind` field value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Machine => "Machine",
            Kind::MachineClass => "MachineClass",
            Kind::MachineSet => "MachineSet",
            Kind::Secret => "Secret",
            Kind::Event => "Event",
            Kind::DiscoveredMachine => "DiscoveredMachine",
            Kind::Lease => "Lease",
            Kind::Namespace => "Namespace",
        }
    }

    /// The lower-case plural used in URL paths.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Machine => "machines",
            Kind::MachineClass => "machineclasses",
            Kind::MachineSet => "machinesets",
            Kind::Secret => "secrets",
            Kind::Event => "events",
            Kind::DiscoveredMachine => "discoveredmachines",
            Kind::Lease => "leases",
            Kind::Namespace => "namespaces",
        }
    }

    /// The `apiVersion` objects of this kind carry.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Secret | Kind::Event | Kind::Namespace => "v1",
            Kind::Lease => "coordination.k8s.io/v1",
            _ => API_VERSION,
        }
    }

    /// The kind whose `kind` field value is `s` (exact, as stored).
    pub fn from_kind_field(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The API group (`""` for core/v1).
    pub fn group(self) -> &'static str {
        match self.api_version().split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    /// The group's version (`v1`, `v1alpha1`).
    pub fn version(self) -> &'static str {
        match self.api_version().split_once('/') {
            Some((_, version)) => version,
            None => self.api_version(),
        }
    }

    /// Kubernetes' own kinds (core/v1, coordination.k8s.io), as opposed to
    /// metalherd's custom resources: strategic merge patches apply to them.
    pub fn is_builtin(self) -> bool {
        self.group() != GROUP
    }

    /// `plural.group` (`leases.coordination.k8s.io`), or the plural alone
    /// in core/v1: how kube-apiserver names a resource in its messages.
    pub fn qualified_plural(self) -> String {
        match self.group() {
            "" => self.plural().to_string(),
            g => format!("{}.{g}", self.plural()),
        }
    }

    /// Whether a replace (PUT) must name the `resourceVersion` it replaces
    /// (kube-apiserver's `AllowUnconditionalUpdate() == false`) and creates
    /// the object when it is missing (`AllowCreateOnUpdate() == true`): so
    /// for Leases, which leader election writes only with a precondition.
    /// metalherd's own kinds keep unconditional PUTs (the CLI relies on it).
    pub fn conditional_put_creates(self) -> bool {
        self == Kind::Lease
    }

    /// Whether the kind has a `/status` subresource (status is only written
    /// through it, and spec updates never touch status).
    pub fn has_status(self) -> bool {
        matches!(
            self,
            Kind::Machine | Kind::MachineClass | Kind::MachineSet | Kind::DiscoveredMachine
        )
    }

    /// Whether objects of the kind live in a namespace: all but
    /// Namespaces themselves, which the store keeps under namespace `""`.
    /// One arm per kind, so a new kind has to say.
    pub fn namespaced(self) -> bool {
        match self {
            Kind::Machine
            | Kind::MachineClass
            | Kind::MachineSet
            | Kind::Secret
            | Kind::Event
            | Kind::Lease
            | Kind::DiscoveredMachine => true,
            Kind::Namespace => false,
        }
    }

    /// Whether the kind has a `/scale` subresource (`spec.replicas`,
    /// `status.replicas`, `status.selector`), as its CRD declares.
    pub fn has_scale(self) -> bool {
        self == Kind::MachineSet
    }

    /// Parse what a user types on the command line or a `kind:` field:
    /// singular, plural, short name, any case.
    pub fn parse(s: &str) -> Option<Kind> {
        let l = s.to_ascii_lowercase();
        let l = l.split('.').next().unwrap_or_default();
        Some(match l {
            "machine" | "machines" | "m" | "mach" => Kind::Machine,
            "machineclass" | "machineclasses" | "mc" => Kind::MachineClass,
            "machineset" | "machinesets" | "ms" => Kind::MachineSet,
            "secret" | "secrets" => Kind::Secret,
            "event" | "events" | "ev" => Kind::Event,
            "discovered" | "discoveredmachine" | "discoveredmachines" | "dm" => {
                Kind::DiscoveredMachine
            }
            "lease" | "leases" => Kind::Lease,
            "namespace" | "namespaces" | "ns" => Kind::Namespace,
            _ => return None,
        })
    }

    /// Lower-case singular, as printed by `apply` (`machine/rack1-u07 created`).
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Machine => "machine",
            Kind::MachineClass => "machineclass",
            Kind::MachineSet => "machineset",
            Kind::Secret => "secret",
            Kind::Event => "event",
            Kind::DiscoveredMachine => "discoveredmachine",
            Kind::Lease => "lease",
            Kind::Namespace => "namespace",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The CustomResourceDefinitions of every metalherd kind (the API's
/// discovery, OpenAPI documents and tables are built from them), generated
/// once.
pub fn crds() -> &'static [k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition]{
    use kube::CustomResourceExt;
    static CRDS: std::sync::OnceLock<
        [k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition; 4],
    > = std::sync::OnceLock::new();
    CRDS.get_or_init(|| {
        [
            Machine::crd(),
            MachineClass::crd(),
            MachineSet::crd(),
            DiscoveredMachine::crd(),
        ]
    })
}

/// The CustomResourceDefinitions of every metalherd kind, as one
/// multi-document YAML (what `metalherd crds` prints and deploy/crds/ holds).
pub fn crds_yaml() -> anyhow::Result<String> {
    yaml_documents(crds())
}

/// CRDs as one multi-document YAML, kubectl-safe.
pub fn yaml_documents(
    crds: &[k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition],
) -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        for line in serde_yaml::to_string(crd)?.lines() {
            out.push_str(&quote_yaml11_booleans(line));
            out.push('\n');
        }
    }
    Ok(out)
}

/// A list item that YAML 1.2 (serde_yaml) writes bare but YAML 1.1 reads
/// as a boolean, quoted: kubectl's YAML reader is YAML 1.1, so a bare
/// `- On` in an enum of strings would reach kube-apiserver as `true` (and
/// the Machine CRD's `powerState` would refuse "On").
fn quote_yaml11_booleans(line: &str) -> std::borrow::Cow<'_, str> {
    // true/false are booleans in YAML 1.2 too, so serde_yaml quotes them.
    const BOOLISH: [&str; 16] = [
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
        "OFF",
    ];
    let trimmed = line.trim_start();
    let indent = &line[..line.len() - trimmed.len()];
    match trimmed.strip_prefix("- ") {
        Some(item) if BOOLISH.contains(&item) => format!("{indent}- '{item}'").into(),
        _ => line.into(),
    }
}

#[cfg(test)]
mod crd_yaml_tests {
    #[test]
    fn enum_words_yaml_1_1_reads_as_booleans_are_quoted() {
        let yaml = super::crds_yaml().unwrap_or_default();
        assert!(yaml.contains("- 'On'") && yaml.contains("- 'Off'"));
        assert!(
            !yaml
                .lines()
                .any(|l| l.trim() == "- On" || l.trim() == "- Off")
        );
        // The same CRDs come back.
        let back: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap_or_default())
            .collect();
        let want: Vec<serde_json::Value> = super::crds()
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect();
        assert_eq!(back, want);
    }
}
