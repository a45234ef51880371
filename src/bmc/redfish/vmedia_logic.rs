//! Pure virtual media decisions, in [`super::logic`]'s style: where the
//! VirtualMedia collection is (the System's link, else its Manager's), which
//! member is the CD, where its actions go, what InsertMedia carries, and
//! whether a read-back holds the image sent (or nothing, after an eject).
//! Messages show an image only as [`crate::bmc::image_url::redact`] does.
//! No I/O.

use serde_json::{Value, json};

use super::model::{ComputerSystem, Link, Manager, VirtualMedia};

/// Where to look for the VirtualMedia collection, from the System.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaLookup {
    /// The System links it.
    Collection(String),
    /// The System does not: ask its (first) Manager, as iDRAC, iLO and
    /// Supermicro keep it there.
    Manager(String),
}

/// Why a BMC has no virtual CD; reported as `Unsupported`, so the message
/// completes "BMC ... does not support".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoVirtualMedia {
    #[error("virtual media: the System has no VirtualMedia collection and links no Manager")]
    NoManager,
    #[error("virtual media: the System has no VirtualMedia collection and neither has its Manager")]
    NoCollection,
    #[error("virtual media: the VirtualMedia collection {0} is linked but not found")]
    Gone(String),
    /// Every member, as `Id [MediaTypes]`.
    #[error("virtual media on a CD: no VirtualMedia member takes CD or DVD (members: {})",
        if .0.is_empty() { "none".to_string() } else { .0.join(", ") })]
    NoCd(Vec<String>),
}

fn non_empty(l: &Option<Link>) -> Option<String> {
    l.as_ref()
        .map(|l| l.odata_id.clone())
        .filter(|p| !p.is_empty())
}

/// The System's own VirtualMedia link, else its first Manager to ask.
pub fn media_lookup(sys: &ComputerSystem) -> Result<MediaLookup, NoVirtualMedia> {
    if let Some(p) = non_empty(&sys.virtual_media) {
        return Ok(MediaLookup::Collection(p));
    }
    sys.links
        .managed_by
        .first()
        .map(|m| m.odata_id.clone())
        .filter(|p| !p.is_empty())
        .map(MediaLookup::Manager)
        .ok_or(NoVirtualMedia::NoManager)
}

/// The Manager's VirtualMedia link (`None`: the Manager could not be
/// found, which counts as having none).
pub fn manager_media(m: Option<&Manager>) -> Result<String, NoVirtualMedia> {
    m.and_then(|m| non_empty(&m.virtual_media))
        .ok_or(NoVirtualMedia::NoCollection)
}

/// The first member whose MediaTypes has `CD` or `DVD` (real BMCs name
/// their drives `Cd`, `CD1`, `1`, ...: the type decides, not the name).
pub fn pick_cd(members: &[VirtualMedia]) -> Result<&VirtualMedia, NoVirtualMedia> {
    let is_cd = |t: &String| t.eq_ignore_ascii_case("CD") || t.eq_ignore_ascii_case("DVD");
    members
        .iter()
        .find(|m| m.media_types.iter().any(is_cd))
        .ok_or_else(|| {
            NoVirtualMedia::NoCd(
                members
                    .iter()
                    .map(|m| {
                        let id = m.id.clone().unwrap_or_else(|| m.odata_id.clone());
                        format!("{id} [{}]", m.media_types.join(", "))
                    })
                    .collect(),
            )
        })
}

/// The two virtual media actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaAction {
    Insert,
    Eject,
}

/// Where to POST an action: the target the member names, else the
/// schema's `<member>/Actions/VirtualMedia.<Action>`.
pub fn media_action_target(m: &VirtualMedia, action: MediaAction) -> String {
    let (named, word) = match action {
        MediaAction::Insert => (&m.actions.insert, "InsertMedia"),
        MediaAction::Eject => (&m.actions.eject, "EjectMedia"),
    };
    named
        .as_ref()
        .and_then(|a| a.target.clone())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| {
            format!(
                "{}/Actions/VirtualMedia.{word}",
                m.odata_id.trim_end_matches('/')
            )
        })
}

/// An image URL InsertMedia cannot carry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("virtual media image URL must be http:// or https://, not {0}")]
pub struct BadImageScheme(pub String);

/// The InsertMedia body: the image, inserted, write-protected, and the
/// transfer protocol its scheme says (BMCs that default to another one,
/// such as CIFS, need it).
pub fn insert_body(image_url: &str) -> Result<Value, BadImageScheme> {
    let scheme = image_url
        .split_once("://")
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default();
    let protocol = match scheme.as_str() {
        "http" => "HTTP",
        "https" => "HTTPS",
        other => {
            let shown = if other.is_empty() { "no scheme" } else { other };
            return Err(BadImageScheme(shown.to_string()));
        }
    };
    Ok(json!({
        "Image": image_url,
        "Inserted": true,
        "WriteProtected": true,
        "TransferProtocolType": protocol,
    }))
}

/// Whether the drive holds a media: `Inserted`, or (a BMC that does not
/// report `Inserted`) an `Image`.
pub fn holds_media(m: &VirtualMedia) -> bool {
    match m.inserted {
        Some(i) => i,
        None => m.image.as_deref().is_some_and(|i| !i.is_empty()),
    }
}

/// What a drive reads back, for messages: the image as
/// [`crate::bmc::image_url::redact`] shows it, never the whole URL.
pub fn media_text(m: &VirtualMedia) -> String {
    let inserted = match m.inserted {
        Some(i) => format!("Inserted={i}"),
        None => "Inserted not reported".to_string(),
    };
    match m.image.as_deref().filter(|i| !i.is_empty()) {
        Some(i) => format!("{inserted}, Image {}", crate::bmc::image_url::redact(i)),
        None => format!("{inserted}, no Image"),
    }
}

/// The read-back after an insert: the drive holds a media and its `Image`
/// is the URL sent. `Err`: what it reads instead ([`media_text`]).
pub fn check_inserted(image_url: &str, got: &VirtualMedia) -> Result<(), String> {
    if holds_media(got) && got.image.as_deref() == Some(image_url) {
        Ok(())
    } else {
        Err(media_text(got))
    }
}

/// The read-back after an eject: nothing held. `Err`: what it reads.
pub fn check_ejected(got: &VirtualMedia) -> Result<(), String> {
    if holds_media(got) {
        Err(media_text(got))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bmc::redfish::model::{ActionTarget, VirtualMediaActions, decode};

    fn drive(id: &str, types: &[&str]) -> VirtualMedia {
        VirtualMedia {
            odata_id: format!("/redfish/v1/Managers/1/VirtualMedia/{id}"),
            id: Some(id.into()),
            media_types: types.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_cd_is_found_by_its_media_types_not_its_name() {
        let members = [
            drive("Floppy", &["Floppy", "USBStick"]),
            drive("1", &["dvd"]),
            drive("Cd", &["CD", "DVD"]),
        ];
        assert_eq!(pick_cd(&members).unwrap().id.as_deref(), Some("1"));
        let e = pick_cd(&members[..1]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "virtual media on a CD: no VirtualMedia member takes CD or DVD (members: Floppy [Floppy, USBStick])"
        );
        assert!(
            pick_cd(&[])
                .unwrap_err()
                .to_string()
                .ends_with("(members: none)")
        );
    }

    #[test]
    fn the_collection_is_the_systems_else_its_managers() {
        let sys: ComputerSystem = decode(
            br#"{"VirtualMedia": {"@odata.id": "/redfish/v1/Systems/1/VirtualMedia"},
                 "Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/1"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            media_lookup(&sys),
            Ok(MediaLookup::Collection(
                "/redfish/v1/Systems/1/VirtualMedia".into()
            ))
        );
        // iDRAC, iLO: only the Manager has it.
        let sys: ComputerSystem = decode(
            br#"{"Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/iDRAC.Embedded.1"},
                                          {"@odata.id": "/redfish/v1/Managers/2"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            media_lookup(&sys),
            Ok(MediaLookup::Manager(
                "/redfish/v1/Managers/iDRAC.Embedded.1".into()
            ))
        );
        let mgr: Manager =
            decode(br#"{"VirtualMedia": {"@odata.id": "/redfish/v1/Managers/1/VirtualMedia"}}"#)
                .unwrap();
        assert_eq!(
            manager_media(Some(&mgr)).unwrap(),
            "/redfish/v1/Managers/1/VirtualMedia"
        );
        // Neither: the message says where it looked.
        let e = manager_media(Some(&Manager::default())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "virtual media: the System has no VirtualMedia collection and neither has its Manager"
        );
        assert_eq!(manager_media(None), Err(NoVirtualMedia::NoCollection));
        let empty_link: ComputerSystem =
            decode(br#"{"VirtualMedia": {"@odata.id": ""}, "Links": {"ManagedBy": []}}"#).unwrap();
        assert_eq!(media_lookup(&empty_link), Err(NoVirtualMedia::NoManager));
        assert!(
            NoVirtualMedia::NoManager
                .to_string()
                .contains("the System has no VirtualMedia collection")
        );
    }

    #[test]
    fn actions_go_to_the_named_targets_else_the_schemas_paths() {
        let mut cd = drive("Cd", &["CD"]);
        assert_eq!(
            media_action_target(&cd, MediaAction::Insert),
            "/redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia"
        );
        assert_eq!(
            media_action_target(&cd, MediaAction::Eject),
            "/redfish/v1/Managers/1/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia"
        );
        cd.actions = VirtualMediaActions {
            insert: Some(ActionTarget {
                target: Some("/redfish/v1/Managers/1/VirtualMedia/Cd/Oem/Insert".into()),
            }),
            eject: Some(ActionTarget { target: None }),
        };
        assert_eq!(
            media_action_target(&cd, MediaAction::Insert),
            "/redfish/v1/Managers/1/VirtualMedia/Cd/Oem/Insert"
        );
        assert!(media_action_target(&cd, MediaAction::Eject).ends_with("/VirtualMedia.EjectMedia"));
    }

    #[test]
    fn the_insert_body_names_the_protocol_its_scheme_says() {
        let b = insert_body("https://10.0.0.1:8443/vmedia/t/boot.iso").unwrap();
        assert_eq!(
            b,
            json!({"Image": "https://10.0.0.1:8443/vmedia/t/boot.iso", "Inserted": true,
                   "WriteProtected": true, "TransferProtocolType": "HTTPS"})
        );
        assert_eq!(
            insert_body("HTTP://h/b.iso").unwrap()["TransferProtocolType"],
            "HTTP"
        );
        assert_eq!(
            insert_body("nfs://h/b.iso").unwrap_err().to_string(),
            "virtual media image URL must be http:// or https://, not nfs"
        );
        assert!(insert_body("/local/b.iso").is_err());
    }

    #[test]
    fn a_read_back_holds_the_url_sent_and_an_eject_leaves_nothing() {
        let url = "http://10.89.0.1:8080/vmedia/s3cr3t/boot.iso";
        // What sushy-tools reads back after the insert, and after the eject.
        let inserted: VirtualMedia = decode(
            format!(
                r#"{{"Id": "Cd", "MediaTypes": ["CD", "DVD"], "Image": "{url}",
                        "ImageName": "boot.iso", "ConnectedVia": "URI", "Inserted": true,
                        "WriteProtected": true}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let ejected: VirtualMedia = decode(
            br#"{"Id": "Cd", "MediaTypes": ["CD", "DVD"], "Image": "", "ImageName": "",
                 "ConnectedVia": "URI", "Inserted": false, "WriteProtected": false}"#,
        )
        .unwrap();
        assert_eq!(check_inserted(url, &inserted), Ok(()));
        assert!(holds_media(&inserted) && !holds_media(&ejected));
        assert_eq!(check_ejected(&ejected), Ok(()));
        let got = check_inserted(url, &ejected).unwrap_err();
        assert_eq!(got, "Inserted=false, no Image");
        // Another image: named without its secret path.
        let other = VirtualMedia {
            image: Some("http://10.89.0.1:8080/vmedia/0ther/old.iso".into()),
            inserted: Some(true),
            ..Default::default()
        };
        let got = check_inserted(url, &other).unwrap_err();
        assert_eq!(
            got,
            "Inserted=true, Image http://10.89.0.1:8080/.../old.iso"
        );
        assert!(!check_ejected(&inserted).unwrap_err().contains("s3cr3t"));
        // Inserted says false although the Image is ours: not inserted.
        let half = VirtualMedia {
            inserted: Some(false),
            ..inserted.clone()
        };
        assert!(check_inserted(url, &half).is_err());
        // A BMC that does not report Inserted: the Image decides.
        let no_flag = VirtualMedia {
            inserted: None,
            ..inserted.clone()
        };
        assert_eq!(check_inserted(url, &no_flag), Ok(()));
        assert_eq!(
            media_text(&no_flag),
            "Inserted not reported, Image http://10.89.0.1:8080/.../boot.iso"
        );
    }
}
