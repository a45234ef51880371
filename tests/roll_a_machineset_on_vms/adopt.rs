//! Story: adopt running servers, on the busybox rack before its first
//! rollout. vm3 and vm4 already run their OS: they are declared with
//! `spec.externallyProvisioned: true` and class `lab`, metalherd registers
//! them (inventory and power state through sushy-tools) and they are
//! Ready; then they are started from their disks by hand (libvirt, not
//! their BMC), as servers someone else installed. vm1 and vm2 are declared
//! without a class (the pool). The set `workers` then claims all four: it
//! installs vm1 and vm2 and takes vm3 and vm4 as they are. Their BMCs were
//! never asked for a power action or a boot override, and their boot
//! histories hold no install. The roll that follows (roll_a_machineset)
//! reinstalls them like the others.

use std::time::Duration;

use crate::common::lab::Lab;
use crate::common::out_of_service::new_installs;
use crate::common::proc::wait_for;
use serde_json::Value;

/// The VMs declared as externally provisioned.
pub const ADOPTED: [usize; 2] = [3, 4];

/// Declare vm1 and vm2 without a class and the [`ADOPTED`] ones as
/// externally provisioned with class `lab`; wait until the first are
/// Available and the others Ready, then start the others from their disks.
pub fn declare(lab: &Lab) {
    lab.write_manifests(&[]);
    let path = lab.run.join("machines.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<String> = yaml
        .split("\n---\n")
        .map(|d| {
            let adopted = ADOPTED
                .iter()
                .any(|i| d.contains(&format!("kind: Machine\nmetadata: {{name: vm{i},")));
            if adopted {
                format!("{}\n  externallyProvisioned: true", d.trim_end())
            } else {
                d.lines()
                    .filter(|l| !l.trim_start().starts_with("classRef:"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        })
        .collect();
    let out = docs.join("\n---\n") + "\n";
    assert_eq!(
        out.matches("externallyProvisioned: true").count(),
        ADOPTED.len(),
        "{out}"
    );
    std::fs::write(&path, out).unwrap();
    let r = lab.run.display();
    lab.cli_ok(&["apply", "-f", &format!("{r}/class.yaml")]);
    lab.cli_ok(&["apply", "-f", &format!("{r}/machines.yaml")]);
    for i in 1..=crate::VMS {
        let want = if ADOPTED.contains(&i) {
            "Ready"
        } else {
            "Available"
        };
        lab.wait_phase(
            &format!("vm{i}"),
            want,
            Duration::from_secs(300),
            &mut Vec::new(),
        );
    }
    for i in ADOPTED {
        lab.virsh(&["start", &format!("{}-vm{i}", lab.ns)]);
    }
    for i in ADOPTED {
        let up = wait_for(Duration::from_secs(600), || {
            (crate::probe(lab, i) == "200").then_some(())
        });
        assert!(
            up.is_some(),
            "vm{i} never answered its probe:\n{}",
            lab.console(i)
        );
    }
}

/// After the first rollout: the adopted servers were claimed as they are.
pub fn adopted_as_they_are(lab: &Lab) {
    for i in ADOPTED {
        let name = format!("vm{i}");
        let m = lab.machine(&name).unwrap();
        assert_eq!(m["status"]["phase"], "Ready", "{m:#}");
        assert_eq!(
            m["metadata"]["labels"]["metalherd.dev/machineset"], "workers",
            "{name}"
        );
        // Their OS asked metalherd's DHCP for its address; nothing was
        // network-booted or installed.
        let history = &m["status"]["bootHistory"];
        assert_eq!(new_installs(&Value::Null, history), 0, "{name}: {history}");
        let steps: Vec<&str> = history
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["step"].as_str())
            .collect();
        assert!(
            !steps
                .iter()
                .any(|s| ["TFTP", "Script", "Kernel", "Initrd", "Ignition"].contains(s)),
            "{name} was network-booted: {steps:?}"
        );
        let uuid = &lab.uuids[i - 1];
        assert_eq!(
            lab.bmc_calls("POST", &format!("{uuid}/Actions/ComputerSystem.Reset")),
            0,
            "{name}'s BMC was asked for a power action"
        );
        assert_eq!(
            lab.bmc_calls("PATCH", &format!("Systems/{uuid} ")),
            0,
            "{name}'s BMC was asked for a boot override"
        );
    }
    for i in 1..=crate::VMS {
        if !ADOPTED.contains(&i) {
            let uuid = &lab.uuids[i - 1];
            assert!(
                lab.bmc_calls("POST", &format!("{uuid}/Actions/ComputerSystem.Reset")) > 0,
                "vm{i} was installed without a power action?"
            );
        }
    }
}
