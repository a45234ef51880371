//! Objects for boot tests: a MachineClass whose kernel and initrd are local
//! files pinned by sha256, and Machines with a reserved address and an open
//! boot (as the controller mints it, and powered on for it).

use metalherd::api::{
    Artifact, BmcSpec, BootRecord, ContainerRuntime, JoinSpec, KubernetesSpec,
    LocalObjectReference, Machine, MachineClass, MachineClassSpec, MachineNetwork, MachinePhase,
    MachineSpec, MachineStatus, OsImage, SecretReference,
};
use metalherd::store::{Store, TypedStore};
use sha2::Digest;

pub fn file_artifact(path: &std::path::Path) -> Artifact {
    let bytes = std::fs::read(path).expect("read artifact");
    Artifact {
        url: format!("file://{}", path.display()),
        sha256: Some(hex::encode(sha2::Sha256::digest(&bytes))),
        sha512: None,
        checksums_url: None,
    }
}

pub fn class(name: &str, kernel: Artifact, initrd: Artifact, kernel_args: &[&str]) -> MachineClass {
    let mut c = MachineClass::new(
        name,
        MachineClassSpec {
            image: OsImage {
                os: "flatcar".into(),
                version: "4230.2.3".into(),
                kernel,
                // What an installer would download and write to disk; the
                // test OS only checks its Ignition and never fetches it.
                install: Some(Artifact {
                    url: "http://127.0.0.1/assets/os.img".into(),
                    sha256: initrd.sha256.clone(),
                    sha512: None,
                    checksums_url: None,
                }),
                initrd,
                rootfs: None,
            },
            kubernetes: KubernetesSpec {
                version: "v1.33.2".into(),
                ..Default::default()
            },
            container_runtime: ContainerRuntime {
                name: "containerd".into(),
                version: "1.7.27".into(),
            },
            join: JoinSpec {
                api_server_endpoint: "10.0.0.10:6443".into(),
                ca_cert_hashes: vec![format!("sha256:{}", "ab".repeat(32))],
                token_secret_ref: SecretReference {
                    name: "join".into(),
                    key: None,
                },
            },
            kernel_args: kernel_args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("default".into());
    c
}

pub fn machine(name: &str, mac: &str, address: &str, class: &str) -> Machine {
    let mut m = Machine::new(
        name,
        MachineSpec {
            bmc: BmcSpec {
                address: "ipmi://127.0.0.1:623".into(),
                credentials_secret_ref: SecretReference {
                    name: "bmc".into(),
                    key: None,
                },
                ..Default::default()
            },
            boot_mac_address: Some(mac.into()),
            network: Some(MachineNetwork {
                address: Some(address.into()),
                hostname: Some(name.into()),
                ..Default::default()
            }),
            class_ref: Some(LocalObjectReference { name: class.into() }),
            ..Default::default()
        },
    );
    m.metadata.namespace = Some("default".into());
    m
}

/// Create the Machine, then give it an open boot with `boot_id`.
pub async fn create_booting(store: &dyn Store, m: &Machine, boot_id: &str) -> Machine {
    let created: Machine = store.create_obj(m).await.expect("create machine");
    set_boot(store, &created, boot_id).await
}

pub async fn set_boot(store: &dyn Store, m: &Machine, boot_id: &str) -> Machine {
    set_boot_for(store, m, boot_id, metalherd::api::BootPurpose::Install).await
}

/// Give the Machine an open boot with `boot_id` for `purpose`, powered on
/// for it (its token valid from now).
pub async fn set_boot_for(
    store: &dyn Store,
    m: &Machine,
    boot_id: &str,
    purpose: metalherd::api::BootPurpose,
) -> Machine {
    // The boot recorder may write the Machine's status between our read and
    // our write: read again and retry on a conflict, as production writers do.
    for _ in 0..20 {
        let mut cur: Machine = store
            .get_obj("default", m.metadata.name.as_deref().unwrap_or_default())
            .await
            .expect("get machine");
        let st = cur.status.get_or_insert_with(MachineStatus::default);
        st.phase = Some(match purpose {
            metalherd::api::BootPurpose::Install => MachinePhase::Provisioning,
            metalherd::api::BootPurpose::Reimage => MachinePhase::Reimaging,
            metalherd::api::BootPurpose::Deprovision => MachinePhase::Deprovisioning,
        });
        let now = jiff::Timestamp::now();
        st.boot = Some(BootRecord {
            id: boot_id.into(),
            purpose,
            minted_at: now,
            ..Default::default()
        });
        // Powered on for this boot: its token is valid from now.
        st.progress.power_cycled_for = Some(boot_id.into());
        st.progress.powered_at = Some(now);
        match store.update_status_obj(&cur).await {
            Ok(m) => return m,
            Err(e) if e.is_conflict() => continue,
            Err(e) => panic!("set boot: {e}"),
        }
    }
    panic!("set boot: still conflicting after 20 attempts")
}

/// The bootstrap-token Secret the class's join settings name (`join`).
pub fn join_secret() -> k8s_openapi::api::core::v1::Secret {
    let mut s = k8s_openapi::api::core::v1::Secret::default();
    s.metadata.name = Some("join".into());
    s.metadata.namespace = Some("default".into());
    s.data = Some(
        [(
            "token".to_string(),
            k8s_openapi::ByteString(b"abcdef.0123456789abcdef".to_vec()),
        )]
        .into_iter()
        .collect(),
    );
    s
}
