//! The test BMC's storage: one controller with the boot drive `0` and, when
//! `raid_drives` says so, that many more SSDs (`R0`, `R1`, ...) free for
//! RAID volumes. Volumes are listed, read and created (201 with the new
//! volume's Location); a new volume gets an NAA durable name, the WWN the
//! host would see its disk by.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{S, authorize};

const STORAGE: &str = "/redfish/v1/Systems/1/Storage/1";

pub async fn storages(State(s): State<S>, headers: HeaderMap) -> Response {
    let _sim = auth!(s, headers);
    axum::Json(json!({"Members": [{"@odata.id": STORAGE}]})).into_response()
}

pub async fn storage(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let mut drives = vec![json!({"@odata.id": format!("{STORAGE}/Drives/0")})];
    for i in 0..sim.opts.raid_drives {
        drives.push(json!({"@odata.id": format!("{STORAGE}/Drives/R{i}")}));
    }
    let mut v = json!({"Drives": drives});
    if sim.opts.raid_drives > 0 {
        v["Volumes"] = json!({"@odata.id": format!("{STORAGE}/Volumes")});
    }
    axum::Json(v).into_response()
}

pub async fn drive(State(s): State<S>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let _sim = auth!(s, headers);
    if id.starts_with('R') {
        return axum::Json(json!({"Id": id, "Model": "SimRAID", "SerialNumber": id,
            "MediaType": "SSD", "CapacityBytes": 480103981056u64}))
        .into_response();
    }
    axum::Json(
        json!({"Id": id, "Model": "SimSSD", "SerialNumber": "D0", "MediaType": "SSD",
        "CapacityBytes": 960197124096u64}),
    )
    .into_response()
}

pub async fn volumes(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let members: Vec<Value> = (0..sim.volumes.len())
        .map(|i| json!({"@odata.id": format!("{STORAGE}/Volumes/{i}")}))
        .collect();
    axum::Json(json!({"Members": members})).into_response()
}

pub async fn volume(State(s): State<S>, Path(id): Path<usize>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    match sim.volumes.get(id) {
        Some(v) => axum::Json(v.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// POST a volume: a known RAID type and free drives of this controller.
pub async fn create_volume(
    State(s): State<S>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut sim = auth!(s, headers);
    sim.counters.volume_posts += 1;
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let (Some(name), Some(raid)) = (v["Name"].as_str(), v["RAIDType"].as_str()) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let drives: Vec<String> = v["Links"]["Drives"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["@odata.id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let taken: Vec<String> = sim
        .volumes
        .iter()
        .flat_map(|v| v["Links"]["Drives"].as_array().cloned().unwrap_or_default())
        .filter_map(|d| d["@odata.id"].as_str().map(str::to_string))
        .collect();
    let free = |d: &String| {
        d.strip_prefix(&format!("{STORAGE}/Drives/R"))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n < sim.opts.raid_drives)
            && !taken.contains(d)
    };
    let min = match raid {
        "RAID0" => 1,
        "RAID1" => 2,
        "RAID5" => 3,
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    if drives.len() < min || !drives.iter().all(free) {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let id = sim.volumes.len();
    let capacity = v["CapacityBytes"].as_u64().unwrap_or(480103981056);
    let link = format!("{STORAGE}/Volumes/{id}");
    sim.volumes.push(
        json!({"@odata.id": link, "Id": id.to_string(), "Name": name,
        "RAIDType": raid, "CapacityBytes": capacity,
        "Identifiers": [{"DurableNameFormat": "NAA", "DurableName": format!("0x6000c29{id:09x}")}],
        "Links": {"Drives": drives.iter().map(|d| json!({"@odata.id": d})).collect::<Vec<_>>()}}),
    );
    if sim.opts.volume_answers_lost > 0 {
        sim.opts.volume_answers_lost -= 1;
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (StatusCode::CREATED, [(header::LOCATION, link)]).into_response()
}
