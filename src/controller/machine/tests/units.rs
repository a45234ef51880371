//! The pure helpers next to `decide`: revisions, boot outcomes, timelines,
//! applying status steps, and the messages people read.

use super::super::plan::{
    BootOutcome, BootPurpose, boot_outcome, boot_timeline, desired_revision, failed_detail,
    node_name,
};
use super::*;

fn class() -> MachineClass {
    MachineClass::new(
        "workers",
        MachineClassSpec {
            image: OsImage {
                os: "flatcar".into(),
                version: "4230.2.3".into(),
                ..OsImage::default()
            },
            kubernetes: KubernetesSpec {
                version: "v1.33.2".into(),
                ..KubernetesSpec::default()
            },
            container_runtime: ContainerRuntime {
                name: "containerd".into(),
                version: "2.0.5".into(),
            },
            ..MachineClassSpec::default()
        },
    )
}

#[test]
fn desired_revision_follows_image_kubelet_runtime_and_overrides() {
    let m = machine().0;
    let base = desired_revision(&m, &class());
    assert_eq!(base.len(), 16);
    assert_eq!(base, desired_revision(&m, &class()), "stable");

    let mut k = class();
    k.spec.kubernetes.version = "v1.33.3".into();
    let mut i = class();
    i.spec.image.version = "4230.2.4".into();
    let mut r = class();
    r.spec.container_runtime.version = "2.1.0".into();
    let revs = [
        desired_revision(&m, &k),
        desired_revision(&m, &i),
        desired_revision(&m, &r),
    ];
    for rev in &revs {
        assert_ne!(rev, &base);
    }
    assert_ne!(revs[0], revs[1]);

    // Fields outside the revision do not change it.
    let mut other = class();
    other.spec.ssh_authorized_keys = vec!["ssh-ed25519 AAAA".into()];
    other.spec.node_labels.insert("zone".into(), "a".into());
    assert_eq!(desired_revision(&m, &other), base);

    // A machine override counts, and equals the class carrying the same value.
    let mut mo = machine().0;
    mo.spec.overrides = Some(MachineOverrides {
        kubelet_version: Some("v1.33.3".into()),
        ..MachineOverrides::default()
    });
    assert_eq!(desired_revision(&mo, &class()), revs[0]);
    let view = ClassView::new(&mo, &class());
    assert_eq!(view.kubelet_version, "v1.33.3");
    assert_eq!(view.revision, revs[0]);
    assert_eq!(ClassView::new(&m, &class()).kubelet_version, "v1.33.2");
}

#[test]
fn node_name_is_the_hostname_or_the_machine_name() {
    let mut m = machine().0;
    assert_eq!(node_name(&m), "m1");
    m.spec.network = Some(MachineNetwork {
        hostname: Some("rack1-u07".into()),
        ..MachineNetwork::default()
    });
    assert_eq!(node_name(&m), "rack1-u07");
}

#[test]
fn boot_outcome_reads_the_record_first_then_the_history() {
    let m = machine().boot("b1", "install", Some("r2"), 0);
    let st = m.0.status.clone().unwrap();
    let b = st.boot.clone().unwrap();
    assert_eq!(boot_outcome(&st, &b), None);

    let st2 = m
        .clone()
        .history("Installed", "b0", 5, "")
        .0
        .status
        .unwrap();
    assert_eq!(boot_outcome(&st2, &b), None, "another boot's call-home");

    let st3 = m
        .clone()
        .history("Failed", "b1", 5, "disk")
        .0
        .status
        .unwrap();
    assert_eq!(boot_outcome(&st3, &b), Some(BootOutcome::Failed));
    assert_eq!(failed_detail(&st3, "b1"), "disk");

    let closed = m
        .clone()
        .history("Failed", "b1", 5, "disk")
        .completed(6, "failed");
    let st4 = closed.0.status.unwrap();
    assert_eq!(
        boot_outcome(&st4, st4.boot.as_ref().unwrap()),
        Some(BootOutcome::Failed)
    );
    assert_eq!(failed_detail(&st4, "b1"), "disk");

    let sup = m.completed(6, "superseded").0.status.unwrap();
    assert_eq!(
        boot_outcome(&sup, sup.boot.as_ref().unwrap()),
        Some(BootOutcome::Superseded)
    );
}

#[test]
fn timeline_lists_this_boots_steps() {
    let st = machine()
        .history("DHCPAck", "b1", 0, "")
        .history("TFTP", "b1", 2, "ipxe.efi")
        .history("DHCPAck", "b0", 3, "")
        .0
        .status
        .unwrap();
    let t = boot_timeline(&st, "b1");
    assert_eq!(
        t, "boot steps: DHCPAck@08:00:00Z, TFTP ipxe.efi@08:00:02Z",
        "T0 is 2027-01-15T08:00:00Z"
    );
    assert_eq!(
        boot_timeline(&st, "b9"),
        "no network boot activity was seen"
    );
}

#[test]
fn timeout_and_failure_messages_carry_the_timeline() {
    let m = booting_with_marker()
        .history("DHCPAck", "b1", 30, "")
        .history("Script", "b1", 40, "install");
    let plan = decide(&m.0, &obs().0, at(31 * MIN));
    let msg = error_message(&plan);
    assert!(
        msg.starts_with("no call-home within 30m; boot steps: DHCPAck@"),
        "{msg}"
    );
    assert!(msg.contains("Script install@"), "{msg}");

    let m = booting_with_marker().history("Failed", "b1", 60, "no disk matches the hints");
    let msg = error_message(&decide(&m.0, &obs().0, at(2 * MIN)));
    assert!(
        msg.starts_with("the installer reported failure: no disk matches the hints; boot steps:"),
        "{msg}"
    );
}

fn booting_with_marker() -> M {
    machine()
        .class()
        .phase(MachinePhase::Provisioning)
        .progress("previousBoot", "none")
        .boot("b1", "install", Some("r2"), 0)
        .progress("powerCycledFor", "b1")
        .progress("poweredAt", &at(0).to_string())
}

fn error_message(plan: &Plan) -> String {
    plan.steps
        .iter()
        .find_map(|s| match s {
            Step::RecordError { message, .. } => Some(message.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error in {plan}"))
}

#[test]
fn apply_status_edits_only_status() {
    let mut st = MachineStatus::default();
    let now = at(0);
    for s in [
        Step::SetPhase(MachinePhase::Ready),
        Step::SetProgress(crate::api::Mark::Attempts(2)),
        Step::MarkProvisioned {
            revision: "r2".into(),
            installs: "i2".into(),
        },
        Step::SetNodeRef("m1".into()),
        Step::RecordError {
            reason: "X".into(),
            message: "y".into(),
        },
        Step::PowerCycle,
        Step::AddFinalizer,
    ] {
        apply_status(&mut st, &s, now);
    }
    assert_eq!(st.phase, Some(MachinePhase::Ready));
    let ready = crate::api::condition::find_condition(&st.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "NodeReady")
    );
    apply_status(&mut st, &Step::SetPhase(MachinePhase::Reimaging), now);
    let ready = crate::api::condition::find_condition(&st.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Reimaging")
    );
    apply_status(&mut st, &Step::SetPhase(MachinePhase::Ready), now);
    assert_eq!(st.progress.attempts, Some(2));
    assert_eq!(st.provisioned_revision.as_deref(), Some("r2"));
    assert_eq!(st.last_error.as_ref().unwrap().reason, "X");
    apply_status(
        &mut st,
        &Step::ClearProgress(crate::api::MarkKey::Attempts),
        now,
    );
    apply_status(&mut st, &Step::ClearError, now);
    apply_status(&mut st, &Step::ClearProvisioned, now);
    assert!(st.progress.is_empty() && st.last_error.is_none());
    assert!(st.provisioned_revision.is_none() && st.node_ref.is_none());
}

#[test]
fn steps_have_a_kind_and_a_compact_form() {
    assert_eq!(Step::PowerCycle.kind(), StepKind::Effect);
    assert_eq!(Step::AddFinalizer.kind(), StepKind::Metadata);
    assert_eq!(Step::SetPhase(MachinePhase::Ready).kind(), StepKind::Status);
    let mint = Step::MintBoot {
        purpose: BootPurpose::Reimage,
        revision: Some("r2".into()),
    };
    assert_eq!(mint.kind(), StepKind::Status);
    assert_eq!(mint.to_string(), "MintBoot(reimage,r2)");
    let plan = Plan {
        steps: vec![
            Step::CordonNode("n1".into()),
            Step::WaitFor {
                after: Duration::from_secs(5),
                what: "drain",
            },
        ],
    };
    assert_eq!(plan.to_string(), "CordonNode(n1) → WaitFor(drain)");
    assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
    assert_eq!(plan.effects().count(), 1);
}

#[test]
fn retry_backoff_doubles_to_its_cap() {
    let l = Limits::default();
    let d: Vec<u64> = (1..=9).map(|n| l.retry_after(n).as_secs()).collect();
    assert_eq!(d, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
}

#[test]
fn power_off_looks_double_from_a_quarter_second_to_the_poll() {
    use super::super::boot::power_look;
    let poll = Duration::from_secs(15);
    let looks: Vec<u128> = [0, 100, 250, 600, 3_000, 40_000]
        .map(|ms| power_look(Duration::from_millis(ms), poll).as_millis())
        .to_vec();
    assert_eq!(looks, [250, 250, 250, 600, 3_000, 15_000]);
    // A poll shorter than the first look wins.
    assert_eq!(
        power_look(Duration::ZERO, Duration::from_millis(100)),
        Duration::from_millis(100)
    );
}

#[test]
fn every_effect_but_the_inventory_read_needs_its_record_written_first() {
    assert!(Step::PowerOn.needs_record_before());
    assert!(Step::PowerOff.needs_record_before());
    assert!(Step::DrainNode("n1".into()).needs_record_before());
    assert!(!Step::ReadInventory.needs_record_before());
    assert!(Step::SetBootOnce(crate::bmc::BootDevice::Network).needs_record_before());
}

#[test]
fn a_plan_continues_at_once_only_without_power_or_node_steps() {
    let again = Step::Requeue {
        after: Duration::ZERO,
    };
    let plan = |steps: Vec<Step>| Plan { steps };
    assert!(plan(vec![Step::SetPhase(MachinePhase::Available), again.clone()]).continues_at_once());
    assert!(plan(vec![Step::ReadInventory, again.clone()]).continues_at_once());
    assert!(!plan(vec![Step::PowerOn, again.clone()]).continues_at_once());
    assert!(!plan(vec![Step::DeleteNode("n1".into()), again.clone()]).continues_at_once());
    let wait = Step::WaitFor {
        after: Duration::from_secs(1),
        what: "install",
    };
    assert!(!plan(vec![Step::SetPhase(MachinePhase::Available), wait]).continues_at_once());
}
