//! Table tests of `decide`: one row per situation. `want` lists steps that
//! must appear in this order (each matches a step whose compact form starts
//! with it); `not` lists steps that must not appear at all.

use super::*;
use MachinePhase::*;
use PowerState::Off;

struct Case {
    name: &'static str,
    m: M,
    o: O,
    now: i64,
    want: &'static [&'static str],
    not: &'static [&'static str],
}

fn c(
    name: &'static str,
    m: M,
    o: O,
    now: i64,
    want: &'static [&'static str],
    not: &'static [&'static str],
) -> Case {
    Case {
        name,
        m,
        o,
        now,
        want,
        not,
    }
}

fn run(cases: Vec<Case>) {
    let mut failures = vec![];
    for case in cases {
        let now = at(case.now);
        let plan = decide(&case.m.0, &case.o.0, now);
        check_invariants(case.name, &plan);
        check_settles(case.name, &case.m.0, &case.o.0, now, &plan);
        let got: Vec<String> = plan.steps.iter().map(Step::to_string).collect();
        let mut it = got.iter();
        for w in case.want {
            if !it.any(|g| g.starts_with(w)) {
                failures.push(format!("{}: wanted {w} (in order) in {plan}", case.name));
                break;
            }
        }
        for n in case.not {
            if got.iter().any(|g| g.starts_with(n)) {
                failures.push(format!("{}: must not {n}: {plan}", case.name));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// A machine in Provisioning with boot b1 (install, r2) minted at 0.
fn booting() -> M {
    machine()
        .class()
        .phase(Provisioning)
        .progress("previousBoot", "none")
        .boot("b1", "install", Some("r2"), 0)
}

/// `booting()` after the power cycle at 0.
fn cycled() -> M {
    booting()
        .progress("powerCycledFor", "b1")
        .progress("poweredAt", &at(0).to_string())
}

/// A machine that installed b1 (r2) at minute 10 and is Provisioned.
fn installed() -> M {
    machine()
        .class()
        .phase(Provisioned)
        .progress("previousBoot", "none")
        .boot("b1", "install", Some("r2"), 0)
        .completed(10 * MIN, "installed")
        .provisioned("r2")
}

/// Reimaging from b1 (r1) to r2; boot b2 minted at 0.
fn reimage_run() -> M {
    machine()
        .class()
        .phase(Reimaging)
        .provisioned("r1")
        .node_ref("m1")
        .progress("previousBoot", "b1")
        .boot("b2", "reimage", Some("r2"), 0)
}

// The tables below are kept one row per case on purpose (rustfmt would
// spread each row over a dozen lines and bury the situation it describes).

#[rustfmt::skip]
#[test]
fn registering() {
    run(vec![
        c("a new machine gets the finalizer and its inventory read",
          machine().fresh(), obs().off(), 0,
          &["AddFinalizer", "SetCondition(BmcReachable=True", "SetPhase(Registering)", "ReadInventory", "Requeue(0s)"], &[]),
        c("bad BMC credentials give a condition and an error, not a crash loop",
          machine().fresh(), obs().bmc_err("BmcBadCredentials"), 0,
          &["SetCondition(BmcReachable=False:BmcBadCredentials)", "RecordError(BmcBadCredentials)", "WaitFor(BMC)"],
          &["ReadInventory"]),
        c("an unreachable BMC already recorded writes nothing new",
          machine().phase(Registering)
              .condition("BmcReachable", "False", "BmcUnreachable", "BmcUnreachable at 127.0.0.1:8000")
              .last_error("BmcUnreachable", "BmcUnreachable at 127.0.0.1:8000"),
          obs().bmc_err("BmcUnreachable"), 0,
          &["WaitFor(BMC)"], &["SetCondition", "RecordError"]),
        c("a BMC that answers again clears its error",
          machine().phase(Registering).no_inventory()
              .last_error("BmcUnreachable", "BmcUnreachable at 127.0.0.1:8000"),
          obs(), 0, &["ClearError", "ReadInventory"], &[]),
        c("the boot MAC is learned from inventory when absent",
          machine().phase(Registering).no_mac().nics(&["", "52:54:00:AA:BB:CC"]), obs(), 0,
          &["SetBootMac(52:54:00:aa:bb:cc)", "SetPhase(Available)", "Requeue(0s)"], &[]),
        c("no MAC anywhere is an error that says what to do",
          machine().phase(Registering).no_mac().nics(&[]), obs(), 0,
          &["RecordError(NoBootMac)", "WaitFor(boot MAC)"], &["SetPhase(Available)"]),
        c("a registered machine with a MAC becomes Available",
          machine().phase(Registering), obs(), 0,
          &["SetPhase(Available)"], &["SetBootMac"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn available() {
    run(vec![
        c("without a class it is powered off", machine().phase(Available), obs().no_class(), 0,
          &["SetPowerState(On)", "PowerOff", "WaitFor(power state)"], &["PowerOn"]),
        c("online without a class it is powered on", machine().phase(Available).online(),
          obs().no_class().off(), 0, &["PowerOn"], &["PowerOff"]),
        c("settled in the pool it only waits", machine().phase(Available).power(Off)
              .condition("BmcReachable", "True", "Reachable", "").condition("PowerState", "False", "Off", ""),
          obs().no_class().off(), 0, &["Requeue(300s)"], &["Power", "Set"]),
        c("a missing class says so and waits", machine().class().phase(Available),
          obs().class_missing(), 0, &["SetCondition(Provisioned=False:ClassNotFound)", "Requeue(300s)"],
          &["SetPhase"]),
        c("a class starts provisioning", machine().class().phase(Available), obs(), 0,
          &["SetCondition(Provisioned=False:Provisioning)", "SetProgress(previousBoot=none)",
            "SetPhase(Provisioning)", "Requeue(0s)"], &["MintBoot"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn provisioning() {
    let failed_recently = || {
        booting().completed(40 * MIN, "timeout").progress("attempts", "1")
            .progress("retryAt", &at(41 * MIN).to_string())
    };
    run(vec![
        c("a boot is minted for the desired revision",
          machine().class().phase(Provisioning).progress("previousBoot", "none"), obs(), 0,
          &["MintBoot(install,r2)", "Requeue(0s)"], &["Power"]),
        c("the boot-storm limit keeps it waiting in Provisioning with a condition",
          machine().class().phase(Provisioning).progress("previousBoot", "none"), obs().no_slot(), 0,
          &["SetCondition(Waiting=True:BootStormLimit)", "WaitFor(boot slot)"], &["MintBoot", "SetPhase"]),
        c("a granted slot clears the Waiting condition",
          machine().class().phase(Provisioning).progress("previousBoot", "none")
              .condition("Waiting", "True", "BootStormLimit", "x"), obs(), 0,
          &["SetCondition(Waiting=False:SlotAcquired)", "MintBoot(install,r2)"], &[]),
        c("a minted boot on a running server: off first, no marker yet (the token waits)", booting(), obs(), 0,
          &["PowerOff", "WaitFor(power off)"], &["PowerCycle", "PowerOn", "SetBootOnce", "SetProgress(powerCycledFor"]),
        c("the power-off request is recorded with the write before it", booting(), obs(), 0,
          &["SetProgress(powerOffAt=", "PowerOff", "WaitFor(power off)"], &["PowerOn"]),
        c("asked to power off a moment ago and still on: look again soon, do not ask again",
          booting().progress("powerOffAt", &at(1).to_string()), obs(), 3,
          &["WaitFor(power off)"], &["PowerOff", "SetProgress", "PowerOn"]),
        c("still on a whole poll after the request: the request was lost, ask again",
          booting().progress("powerOffAt", &at(1).to_string()), obs(), 1 + MIN,
          &["SetProgress(powerOffAt=", "PowerOff", "WaitFor(power off)"], &["PowerOn"]),
        c("a power-off request recorded before this boot's mint belongs to an earlier run",
          booting().progress("powerOffAt", &at(-5).to_string()), obs(), 1,
          &["SetProgress(powerOffAt=", "PowerOff"], &["PowerOn"]),
        c("seen off: PXE once, marker, then power on", booting(), obs().off(), 0,
          &["SetBootOnce(Network)", "SetProgress(powerCycledFor=b1)", "SetProgress(poweredAt=",
            "PowerOn", "WaitFor(install)"], &["PowerCycle", "PowerOff"]),
        c("with the marker for this boot there is no second power cycle", cycled(), obs(), 5 * MIN,
          &["WaitFor(install)"], &["PowerCycle", "PowerOn", "SetBootOnce"]),
        c("marker but the server is off and silent: power on (repeatable), never cycle",
          cycled(), obs().off(), 5 * MIN, &["PowerOn", "WaitFor(install)"], &["PowerCycle"]),
        c("marker and the server is off after it was heard: leave the power alone",
          cycled().history("DHCPAck", "b1", 60, ""), obs().off(), 5 * MIN,
          &["WaitFor(install)"], &["PowerOn", "PowerCycle"]),
        c("an unreachable BMC holds the power cycle", booting(), obs().bmc_err("BmcUnreachable"), 0,
          &["WaitFor(BMC)"], &["PowerCycle", "SetProgress(powerCycledFor"]),
        c("a boot override the BMC refused for this boot fails it, kept as the reason: no power-on",
          booting().last_error("BmcBootOverrideIgnored", "SetBootOnce(Network): reads back Pxe/Continuous/UEFI"),
          obs().off(), 30,
          &["CompleteBoot(abandoned)", "SetProgress(attempts=1)", "SetProgress(retryAt=",
            "WaitFor(retry backoff)"],
          &["ClearError", "RecordError", "SetBootOnce", "PowerOn", "SetPhase(Error)"]),
        c("the third refused override in a row is an Error",
          booting().progress("attempts", "2")
              .last_error("BmcBootOverrideIgnored", "SetBootOnce(Network): reads back Pxe/Continuous/UEFI"),
          obs().off(), 30,
          &["CompleteBoot(abandoned)", "SetProgress(attempts=3)", "SetProgress(errorFrom=Provisioning)",
            "SetPhase(Error)", "WaitFor(retry backoff)"], &["SetBootOnce", "PowerOn"]),
        c("a refusal from before this boot is tried again, and cleared once the override goes through",
          machine().class().phase(Provisioning).progress("previousBoot", "none")
              .boot("b1", "install", Some("r2"), 60)
              .last_error("BmcBootOverrideIgnored", "SetBootOnce(Network): reads back Pxe/Continuous/UEFI"),
          obs().off(), 60,
          &["SetBootOnce(Network)", "SetProgress(powerCycledFor=b1)", "ClearError", "PowerOn"],
          &["CompleteBoot"]),
        c("a step before the power-on that just failed waits for its retry, its error kept",
          booting().last_error("BmcTaskFailed", "UpdateFirmware(BIOS=3.0.0): task ended Exception: bad image"),
          obs().off(), 10,
          &["WaitFor(BMC retry)"], &["ClearError", "SetBootOnce", "PowerOn"]),
        c("a step before the power-on that failed is tried again once its retry is due",
          booting().last_error("BmcTaskFailed", "UpdateFirmware(BIOS=3.0.0): task ended Exception: bad image"),
          obs().off(), 40,
          &["ClearError", "SetBootOnce(Network)", "PowerOn"], &[]),
        c("the installed call-home moves it to Provisioned",
          cycled().history("Installed", "b1", 9 * MIN, ""), obs(), 10 * MIN,
          &["CompleteBoot(installed)", "MarkProvisioned(r2)", "SetCondition(Provisioned=True:Installed)",
            "SetPhase(Provisioned)", "Requeue(0s)"], &["Power"]),
        c("a boot the boot services closed as installed counts too",
          cycled().completed(9 * MIN, "installed"), obs(), 10 * MIN,
          &["MarkProvisioned(r2)", "SetPhase(Provisioned)"], &["CompleteBoot"]),
        c("a loader fetched and never run is warned about once, with the Secure Boot hint",
          cycled().history("TFTP", "b1", MIN, "ipxe.efi"), obs(), 3 * MIN,
          &["Warn(BootLoaderNotRun)", "RecordError(BootLoaderNotRun)", "WaitFor(install)"],
          &["CompleteBoot", "PowerCycle"]),
        c("a loader that asked for its script is not warned about",
          cycled().history("TFTP", "b1", MIN, "ipxe.efi").history("Script", "b1", MIN + 5, "install"),
          obs(), 3 * MIN, &["WaitFor(install)"], &["Warn", "RecordError"]),
        c("the install deadline fails the boot and backs off",
          cycled(), obs(), 31 * MIN,
          &["CompleteBoot(timeout)", "RecordError(InstallTimeout)", "SetProgress(attempts=1)",
            "SetProgress(retryAt=", "WaitFor(retry backoff)"], &["SetPhase(Error)", "PowerCycle"]),
        c("the third failure in a row is an Error with the reason",
          cycled().progress("attempts", "2"), obs(), 31 * MIN,
          &["RecordError(InstallTimeout)", "SetProgress(attempts=3)", "SetProgress(errorFrom=Provisioning)",
            "SetPhase(Error)", "WaitFor(retry backoff)"], &[]),
        c("an installer failure is recorded with the boot closed",
          cycled().history("Failed", "b1", 4 * MIN, "no disk matches the hints"), obs(), 5 * MIN,
          &["CompleteBoot(failed)", "RecordError(InstallFailed)", "SetProgress(attempts=1)"], &["MintBoot"]),
        c("during the backoff nothing is minted", failed_recently(), obs(), 40 * MIN + 30,
          &["WaitFor(retry backoff)"], &["MintBoot", "Power"]),
        c("after the backoff a new boot is minted", failed_recently(), obs(), 42 * MIN,
          &["MintBoot(install,r2)"], &[]),
        c("a class change while booting closes the stale boot",
          machine().class().phase(Provisioning).progress("previousBoot", "none")
              .boot("b1", "install", Some("r1"), 0), obs(), 60,
          &["CompleteBoot(superseded)", "Requeue(0s)"], &["MintBoot", "Power"]),
        c("a boot from before this run does not count",
          machine().class().phase(Provisioning).progress("previousBoot", "b0")
              .boot("b0", "install", Some("r2"), 0).completed(60, "installed"), obs(), 5 * MIN,
          &["MintBoot(install,r2)"], &["MarkProvisioned"]),
        c("the class taken away mid-install returns the machine to the pool",
          cycled(), obs().no_class(), 60,
          &["CompleteBoot(abandoned)", "SetPhase(Available)"], &["MintBoot"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn error_phase() {
    let failed = || booting().phase(Error).completed(60, "timeout").progress("errorFrom", "Provisioning")
        .progress("retryAt", &at(10 * MIN).to_string());
    run(vec![
        c("an Error waits out its backoff", failed(), obs(), 5 * MIN,
          &["WaitFor(retry backoff)"], &["SetPhase", "MintBoot"]),
        c("then retries from the phase that failed", failed(), obs(), 11 * MIN,
          &["SetPhase(Provisioning)", "Requeue(0s)"], &[]),
    ]);
}

#[rustfmt::skip]
#[test]
fn provisioned() {
    run(vec![
        c("after the install it boots from the disk, once", installed(), obs(), 12 * MIN,
          &["SetBootOnce(Disk)", "SetProgress(diskBootFor=b1)", "WaitFor(node Ready)"], &["PowerCycle", "SetPhase"]),
        c("an installer that powered off is powered on from the disk", installed().progress("diskBootFor", "b1"),
          obs().off(), 12 * MIN, &["PowerOn", "WaitFor(node Ready)"], &["SetBootOnce", "PowerCycle"]),
        c("without a target cluster it waits for the booted call-home", installed().progress("diskBootFor", "b1"),
          obs(), 12 * MIN, &["WaitFor(node Ready)"], &["SetPhase", "SetBootOnce", "PowerOn"]),
        c("once booted, the disk boot is not set again", installed().history("Booted", "b1", 11 * MIN, ""),
          obs(), 12 * MIN, &["SetPhase(Ready)"], &["SetBootOnce", "PowerOn"]),
        c("the booted call-home makes it Ready", installed().history("Booted", "b1", 11 * MIN, ""),
          obs(), 12 * MIN, &["SetPhase(Ready)"], &[]),
        c("a Ready Node makes it Ready with nodeRef and versions", installed(),
          obs().node(node(true, "v1.33.2")), 12 * MIN,
          &["SetNodeRef(m1)", "SetObserved(v1.33.2)", "SetCondition(NodeReady=True:KubeletReady)",
            "SetPhase(Ready)"], &[]),
        c("a Node not Ready yet is waited for", installed(), obs().node(node(false, "v1.33.2")), 12 * MIN,
          &["SetCondition(NodeReady=False:KubeletNotReady)", "WaitFor(node Ready)"], &["SetPhase"]),
        c("no Node by the join deadline is an Error with the reason", installed(), obs().node_absent(),
          31 * MIN,
          &["SetCondition(NodeReady=False:NodeNotFound)", "RecordError(JoinTimeout)",
            "SetProgress(previousBoot=b1)", "SetPhase(Error)"], &["SetPhase(Ready)"]),
        c("an unreachable cluster is waited for", installed(), obs().node_unknown(), 12 * MIN,
          &["SetCondition(NodeReady=Unknown:ClusterUnreachable)", "WaitFor(target cluster)"], &["SetPhase"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn ready() {
    let up = || obs().node(node(true, "v1.33.2"));
    run(vec![
        c("a settled Ready machine gets no writes", machine().settled_ready(), up(), 60 * MIN,
          &["Requeue(300s)"], &["Set", "Record", "Clear"]),
        c("a new class revision starts an in-place reimage", machine().settled_ready().provisioned("r1"),
          up(), 60 * MIN,
          &["SetProgress(previousBoot=b1)", "SetPhase(Reimaging)",
            "SetCondition(UpToDate=False:RevisionChanged)", "Requeue(0s)"], &["MintBoot", "CordonNode"]),
        c("the reimage annotation starts a reimage of the same revision",
          machine().settled_ready().annotate("metalherd.dev/reimage", "req-1"), up(), 60 * MIN,
          &["SetProgress(reimageRequest=req-1)", "SetPhase(Reimaging)"], &[]),
        c("an annotation already acted on does nothing",
          machine().settled_ready().annotate("metalherd.dev/reimage", "req-1")
              .progress("reimageRequest", "req-1"), up(), 60 * MIN, &["Requeue(300s)"], &["SetPhase"]),
        c("the reimage request is noted in the boot history",
          machine().settled_ready().annotate("metalherd.dev/reimage", "req-2"), up(), 60 * MIN,
          &["SetProgress(reimageRequest=req-2)", "Note(ReimageRequested)", "SetPhase(Reimaging)"], &[]),
        c("the power-cycle annotation cycles a Ready machine once, its marker first",
          machine().settled_ready().annotate("metalherd.dev/power-cycle", "set web: PowerCycle 1 of 1"),
          obs().node(node(false, "v1.33.2")), 60 * MIN,
          &["SetProgress(powerCycleRequest=set web: PowerCycle 1 of 1)", "Note(PowerCycled)", "PowerCycle",
            "WaitFor(power cycle)"], &["SetPhase"]),
        c("a power-cycle request already acted on does nothing",
          machine().settled_ready().annotate("metalherd.dev/power-cycle", "p1")
              .progress("powerCycleRequest", "p1"), up(), 60 * MIN, &["Requeue(300s)"], &["PowerCycle"]),
        c("a power-cycle request waits for an unreachable BMC",
          machine().settled_ready().annotate("metalherd.dev/power-cycle", "p1"),
          up().bmc_err("BmcUnreachable"), 60 * MIN, &["WaitFor(BMC)"], &["PowerCycle", "SetProgress(powerCycleRequest"]),
        c("a paused machine is not power-cycled",
          machine().settled_ready().annotate("metalherd.dev/power-cycle", "p1")
              .annotate("metalherd.dev/paused", ""), up(), 60 * MIN, &[], &["PowerCycle"]),
        c("a Node going NotReady is a condition, not a phase change", machine().settled_ready(),
          obs().node(node(false, "v1.33.2")), 60 * MIN,
          &["SetCondition(NodeReady=False:KubeletNotReady)"], &["SetPhase"]),
        c("a missing class leaves a Ready machine alone", machine().settled_ready(),
          obs().class_missing().node(node(true, "v1.33.2")), 60 * MIN, &["Requeue(300s)"], &["SetPhase"]),
        c("the class taken away returns the machine to the pool", machine().settled_ready(),
          obs().no_class().node(node(true, "v1.33.2")), 60 * MIN,
          &["SetPhase(Deprovisioning)", "Requeue(0s)"], &[]),
    ]);
}

#[rustfmt::skip]
#[test]
fn reimaging() {
    let old_node = || obs().node(node(true, "v1.32.5"));
    let before_boot = || machine().class().phase(Reimaging).provisioned("r1").progress("previousBoot", "b1")
        .boot("b1", "install", Some("r1"), 0).completed(60, "installed");
    let removed = || reimage_run().progress("nodeRemovedFor", "b2");
    run(vec![
        c("a reimage waits for a boot slot before touching the Node", before_boot(), old_node().no_slot(),
          60 * MIN, &["SetCondition(Waiting=True:BootStormLimit)", "WaitFor(boot slot)"],
          &["CordonNode", "MintBoot"]),
        c("with a slot it mints the reimage boot first", before_boot(), old_node(), 60 * MIN,
          &["MintBoot(reimage,r2)"], &["CordonNode"]),
        c("then cordons, drains and deletes the Node, marking it done", reimage_run(), old_node(), 60,
          &["CordonNode(m1)", "DrainNode(m1)", "DeleteNode(m1)", "SetProgress(nodeRemovedFor=b2)", "Requeue(0s)"],
          &["PowerCycle", "UncordonNode"]),
        c("without a target cluster there is nothing to drain", reimage_run(), obs(), 60,
          &["SetProgress(nodeRemovedFor=b2)"], &["CordonNode", "DrainNode"]),
        c("an unreachable cluster holds the drain", reimage_run(), obs().node_unknown(), 60,
          &["WaitFor(target cluster)"], &["CordonNode", "PowerCycle"]),
        c("the marker means the Node is not drained again; the old OS goes off first", removed(), old_node(), 60,
          &["PowerOff", "WaitFor(power off)"], &["DrainNode", "CordonNode", "PowerCycle", "SetProgress(powerCycledFor"]),
        c("the old OS seen off: the reimage's power-on and marker", removed(), old_node().off(), 60,
          &["SetBootOnce(Network)", "SetProgress(powerCycledFor=b2)", "PowerOn"], &["DrainNode", "PowerCycle"]),
        c("both markers: just wait for the install",
          removed().progress("powerCycledFor", "b2").progress("poweredAt", &at(60).to_string()),
          obs().node_absent(), 5 * MIN, &["WaitFor(install)"], &["PowerCycle", "DrainNode"]),
        c("installed, but the Node still runs the old kubelet: wait",
          removed().progress("powerCycledFor", "b2").history("Installed", "b2", 9 * MIN, ""),
          old_node(), 10 * MIN,
          &["CompleteBoot(installed)", "MarkProvisioned(r2)", "WaitFor(node Ready)"],
          &["SetPhase(Ready)", "UncordonNode"]),
        c("back Ready with the new kubelet: uncordon and Ready",
          removed().completed(9 * MIN, "installed").provisioned("r2"),
          obs().node(node(true, "v1.33.2")), 10 * MIN,
          &["UncordonNode(m1)", "SetPhase(Ready)", "SetCondition(UpToDate=True:RevisionInstalled)"], &[]),
        c("not healthy by the deadline: Error with the reason, never back to Ready",
          removed().completed(9 * MIN, "installed").provisioned("r2"), obs().node_absent(), 40 * MIN,
          &["RecordError(JoinTimeout)", "SetProgress(previousBoot=b2)", "SetProgress(errorFrom=Reimaging)",
            "SetPhase(Error)"], &["SetPhase(Ready)", "UncordonNode"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn deprovisioning() {
    let retiring = || machine().settled_ready().deleting().phase(Deprovisioning);
    run(vec![
        c("deleting a Ready machine cordons, drains and deletes its Node",
          machine().settled_ready().deleting(), obs().node(node(true, "v1.33.2")), 60 * MIN,
          &["SetPhase(Deprovisioning)", "CordonNode(m1)", "DrainNode(m1)", "DeleteNode(m1)", "Requeue(0s)"],
          &["PowerOff", "RemoveFinalizer"]),
        c("with the Node gone it powers off", retiring(), obs().node_absent(), 60 * MIN,
          &["PowerOff", "WaitFor(power off)"], &["RemoveFinalizer", "CordonNode"]),
        c("powered off: release the address, then remove the finalizer", retiring(),
          obs().node_absent().off(), 60 * MIN, &["ReleaseAddress", "RemoveFinalizer"], &["PowerOff"]),
        c("an unreachable BMC holds the retirement", retiring(),
          obs().node_absent().bmc_err("BmcUnreachable"), 60 * MIN, &["WaitFor(BMC)"], &["RemoveFinalizer"]),
        c("an unreachable cluster holds the drain", machine().settled_ready().deleting(), obs().node_unknown(),
          60 * MIN, &["WaitFor(target cluster)"], &["RemoveFinalizer", "PowerOff"]),
        c("without our finalizer a deleted machine is left alone",
          machine().settled_ready().deleting().no_finalizer(), obs(), 60 * MIN, &["Requeue(300s)"],
          &["Set", "Power"]),
        c("a machine never provisioned does not touch a Node of the same name",
          machine().phase(Available).deleting(), obs().node(node(true, "v1.33.2")).off(), 0,
          &["ReleaseAddress", "RemoveFinalizer"], &["CordonNode", "DrainNode", "DeleteNode"]),
        c("a class that asks for a wipe boots the wiper", retiring().progress("previousBoot", "b1"),
          obs().node_absent().wipe(), 60 * MIN, &["MintBoot(deprovision,-)"], &["PowerOff"]),
        c("once wiped it powers off",
          retiring().progress("previousBoot", "b1").boot("b3", "deprovision", None, 60 * MIN)
              .progress("powerCycledFor", "b3").history("Wiped", "b3", 70 * MIN, ""),
          obs().node_absent().wipe(), 71 * MIN, &["CompleteBoot(wiped)", "PowerOff"], &["MintBoot"]),
        c("deleting during an install abandons the boot", cycled().deleting(), obs(), 60,
          &["CompleteBoot(abandoned)", "SetPhase(Deprovisioning)", "PowerOff"], &["CordonNode"]),
        c("back to the pool: forget the install and become Available",
          machine().settled_ready().phase(Deprovisioning), obs().no_class().node_absent().off(), 60 * MIN,
          &["ReleaseAddress", "ClearProvisioned", "SetCondition(Provisioned=False:Deprovisioned)",
            "SetPhase(Available)"], &["RemoveFinalizer"]),
    ]);
}

#[rustfmt::skip]
#[test]
fn paused() {
    let bmc_steps: &[&str] = &["AddFinalizer", "ReadInventory", "SetBootOnce", "PowerOn", "PowerCycle", "PowerOff", "MintBoot", "SetPhase", "SetCondition(BmcReachable"];
    run(vec![
        c("a new paused machine is only told it is paused: no finalizer, no BMC",
          machine().fresh().annotate(PAUSED_ANNOTATION, "true"), O(Observed { bmc: BmcObserved::NotAsked, ..obs().0 }), 0,
          &["SetCondition(Paused=True:Annotation)", "Requeue(300s)"], bmc_steps),
        c("a paused machine with a class and power wanted does not boot",
          machine().class().online().phase(Available).annotate(PAUSED_ANNOTATION, ""), O(Observed { bmc: BmcObserved::NotAsked, ..obs().0 }), 0,
          &["SetCondition(Paused=True:Annotation)"], bmc_steps),
        c("a paused machine being deleted keeps its finalizer until resumed",
          machine().phase(Available).deleting().annotate(PAUSED_ANNOTATION, "true"), O(Observed { bmc: BmcObserved::NotAsked, ..obs().0 }), 0,
          &["SetCondition(Paused=True:Annotation)"], &["RemoveFinalizer", "PowerOff"]),
        c("removing the annotation resumes the lifecycle and says so",
          machine().fresh().condition("Paused", "True", "Annotation", "x"), obs().off(), 0,
          &["SetCondition(Paused=False:Resumed)", "AddFinalizer", "SetCondition(BmcReachable=True", "ReadInventory"], &[]),
    ]);
}
