//! The test BMC's firmware update service: `UpdateService.SimpleUpdate`
//! fetches the image from the URI it is given (as a BMC does), answers 202
//! with a task monitor that runs until the download ends, and a completed
//! update takes effect at the next boot (as a BIOS flash does). An image
//! is the text `BiosVersion=X`; the version becomes X.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{S, Sim, authorize};

/// A firmware update task: still fetching, or done (the version, or why not).
#[derive(Clone, Debug)]
pub enum Update {
    Fetching,
    Done(Result<String, String>),
}

pub async fn service(State(s): State<S>, headers: HeaderMap) -> Response {
    let _sim = auth!(s, headers);
    axum::Json(
        json!({"@odata.id": "/redfish/v1/UpdateService", "Id": "UpdateService",
        "Actions": {"#UpdateService.SimpleUpdate": {
            "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}}}),
    )
    .into_response()
}

pub async fn simple_update(
    State(s): State<S>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (id, uri) = {
        let mut sim = auth!(s, headers);
        let Ok(v) = serde_json::from_slice::<Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let (Some(uri), Some(targets)) = (v["ImageURI"].as_str(), v["Targets"].as_array()) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        if targets != &[json!("/redfish/v1/Systems/1")] {
            return StatusCode::BAD_REQUEST.into_response();
        }
        sim.image_uris.push(uri.to_string());
        let id = sim.next_id;
        sim.next_id += 1;
        sim.updates.insert(id, Update::Fetching);
        (id, uri.to_string())
    };
    let state = s.clone();
    tokio::spawn(async move {
        let got = fetch(&uri).await;
        let mut sim = state.lock().expect("lock");
        let done = match got {
            Err(e) => Err(format!("image download failed: {e}")),
            Ok(_) if sim.opts.firmware_refused => {
                Err("image rejected: signature check failed".to_string())
            }
            Ok(text) => match text.trim().strip_prefix("BiosVersion=") {
                Some(v) if !v.is_empty() => Ok(v.to_string()),
                _ => Err("not a firmware image for this system".to_string()),
            },
        };
        sim.updates.insert(id, Update::Done(done));
    });
    (
        StatusCode::ACCEPTED,
        [(
            header::LOCATION,
            format!("/redfish/v1/TaskService/TaskMonitors/{id}"),
        )],
        axum::Json(json!({"TaskState": "New"})),
    )
        .into_response()
}

async fn fetch(uri: &str) -> Result<String, String> {
    let r = reqwest::get(uri).await.map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("HTTP {}", r.status()));
    }
    r.text().await.map_err(|e| e.to_string())
}

/// The monitor of update task `id`, if it is one.
pub fn monitor(sim: &mut Sim, id: u32) -> Option<Response> {
    let u = sim.updates.get(&id)?.clone();
    Some(match u {
        Update::Fetching => (
            StatusCode::ACCEPTED,
            [(
                header::LOCATION,
                format!("/redfish/v1/TaskService/TaskMonitors/{id}"),
            )],
            axum::Json(json!({"TaskState": "Running", "PercentComplete": 30})),
        )
            .into_response(),
        Update::Done(Ok(v)) => {
            sim.updates.remove(&id);
            sim.firmware_pending = Some(v);
            axum::Json(json!({"TaskState": "Completed", "TaskStatus": "OK"})).into_response()
        }
        Update::Done(Err(e)) => {
            sim.updates.remove(&id);
            axum::Json(json!({"TaskState": "Exception", "TaskStatus": "Critical",
                "Messages": [{"Message": e}]}))
            .into_response()
        }
    })
}

/// A boot: a completed update takes effect (unless this BMC ignores them).
pub fn apply_at_boot(sim: &mut Sim) {
    if let Some(v) = sim.firmware_pending.take()
        && !sim.opts.firmware_ignored
    {
        sim.firmware = v;
    }
}
