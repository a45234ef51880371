//! A small Redfish BMC in axum for what sushy-tools lacks: a SessionService
//! (login, X-Auth-Token, logout, server-side expiry), a real task monitor
//! (Reset answers 202 + Location; power changes when the task completes),
//! ResetType advertised through ActionInfo only, and Boot changes through a
//! `@Redfish.Settings` object that demands If-Match. Counters let tests see
//! what the driver did. One System, `/redfish/v1/Systems/1`; every instance
//! is independent, so a benchmark can run many.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use base64::Engine;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub username: String,
    pub password: String,
    /// Accept Basic auth on resources (sessions always work).
    pub allow_basic: bool,
    /// Polls of a task monitor that still answer 202.
    pub task_polls: u32,
    /// Power state at start: "On" or "Off".
    pub power: &'static str,
    /// Offer sessions; when false, a login answers 405 (Basic only).
    pub sessions: bool,
    /// MAC address of the first NIC (the one with a link).
    pub mac: String,
    /// Another host (`http://ip:port`): the Systems member, the session's
    /// Location and task monitors are absolute links there (a hostile or
    /// broken BMC steering the client's credentials elsewhere).
    pub foreign: Option<String>,
    /// Bytes of filler in the System document (an oversized answer).
    pub system_padding: usize,
    /// What the System reports as its `Manufacturer`.
    pub manufacturer: String,
    /// What the System reports as `MemorySummary.TotalSystemMemoryGiB`.
    pub memory_gib: u64,
    /// BIOS attributes this BMC accepts into its pending settings but
    /// drops when a boot applies them (as firmware drops a value it does
    /// not support).
    pub bios_dropped: Vec<String>,
    /// Firmware updates fail (the task ends in Exception).
    pub firmware_refused: bool,
    /// Firmware updates complete but a boot does not apply them.
    pub firmware_ignored: bool,
    /// SSDs besides the boot drive, free for RAID volumes (and, when
    /// any, a `Volumes` collection).
    pub raid_drives: u32,
    /// This many volume POSTs make their volume, then answer 500 (an
    /// answer lost after the controller acted).
    pub volume_answers_lost: u32,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            username: "root".into(),
            password: "calvin-9d2e".into(),
            allow_basic: false,
            task_polls: 2,
            power: "Off",
            sessions: true,
            mac: "AA:BB:CC:00:00:01".into(),
            foreign: None,
            system_padding: 0,
            manufacturer: "metalherd test BMC".into(),
            memory_gib: 64,
            bios_dropped: Vec::new(),
            firmware_refused: false,
            firmware_ignored: false,
            raid_drives: 0,
            volume_answers_lost: 0,
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub logins: u32,
    pub failed_logins: u32,
    pub logouts: u32,
    pub token_requests: u32,
    pub basic_requests: u32,
    pub rejected_tokens: u32,
    pub resets: u32,
    pub monitor_polls: u32,
    pub patches_without_if_match: u32,
    pub patches_with_if_match: u32,
    /// Resets that start the server (On while off, or PowerCycle): each
    /// is a boot a simulated server walks.
    pub power_ons: u32,
    /// Volume POSTs received, answered or not.
    pub volume_posts: u32,
}

#[derive(Debug)]
pub struct Sim {
    pub opts: ServerOptions,
    pub counters: Counters,
    /// token -> session id
    pub sessions: HashMap<String, u32>,
    next_id: u32,
    pub power: String,
    /// (target, enabled, mode) in effect
    pub boot: (String, String, String),
    etag: u32,
    /// task id -> (polls left, power state to apply, fail?)
    tasks: HashMap<u32, (u32, String)>,
    /// When set, the next task ends in Exception.
    pub fail_next_task: bool,
    /// BIOS attributes in effect, and those a boot applies next.
    pub bios: serde_json::Map<String, Value>,
    pub bios_pending: serde_json::Map<String, Value>,
    /// The BIOS firmware version in effect, and the one a boot applies next.
    pub firmware: String,
    pub firmware_pending: Option<String>,
    /// Firmware update tasks, and every image URI an update was given.
    pub updates: HashMap<u32, update::Update>,
    pub image_uris: Vec<String>,
    /// RAID volumes, as the BMC serves them.
    pub volumes: Vec<Value>,
}

pub struct RedfishServer {
    pub port: u16,
    pub sim: Arc<Mutex<Sim>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RedfishServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type S = Arc<Mutex<Sim>>;

impl RedfishServer {
    pub async fn start(opts: ServerOptions) -> RedfishServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        Self::serve(opts, listener)
    }

    pub fn serve(opts: ServerOptions, listener: tokio::net::TcpListener) -> RedfishServer {
        let port = listener.local_addr().expect("addr").port();
        let sim = Arc::new(Mutex::new(Sim {
            power: opts.power.to_string(),
            opts,
            counters: Counters::default(),
            sessions: HashMap::new(),
            next_id: 1,
            boot: ("None".into(), "Disabled".into(), "UEFI".into()),
            etag: 1,
            tasks: HashMap::new(),
            fail_next_task: false,
            bios: json!({"ProcTurboMode": "Enabled", "BootMode": "Uefi", "NumCores": 10,
                "SriovEnable": false})
            .as_object()
            .cloned()
            .unwrap_or_default(),
            bios_pending: serde_json::Map::new(),
            firmware: "2.3.4".into(),
            firmware_pending: None,
            updates: HashMap::new(),
            image_uris: Vec::new(),
            volumes: Vec::new(),
        }));
        let app = Router::new()
            .route("/redfish/v1/", get(root))
            .route("/redfish/v1", get(root))
            .route("/redfish/v1/SessionService/Sessions", post(login))
            .route(
                "/redfish/v1/SessionService/Sessions/{id}",
                axum::routing::delete(logout),
            )
            .route("/redfish/v1/Systems", get(systems))
            .route("/redfish/v1/Systems/1", get(system))
            .route(
                "/redfish/v1/Systems/1/Settings",
                get(settings).patch(patch_settings),
            )
            .route("/redfish/v1/Systems/1/Bios", get(bios))
            .route("/redfish/v1/Systems/1/Bios/Settings", patch(bios_settings))
            .route("/redfish/v1/Systems/1/ResetActionInfo", get(action_info))
            .route("/redfish/v1/UpdateService", get(update::service))
            .route(
                "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                post(update::simple_update),
            )
            .route(
                "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                post(reset),
            )
            .route("/redfish/v1/TaskService/TaskMonitors/{id}", get(monitor))
            .route("/redfish/v1/Systems/1/EthernetInterfaces", get(nics))
            .route("/redfish/v1/Systems/1/EthernetInterfaces/{id}", get(nic))
            .route("/redfish/v1/Systems/1/Storage", get(storage::storages))
            .route("/redfish/v1/Systems/1/Storage/1", get(storage::storage))
            .route(
                "/redfish/v1/Systems/1/Storage/1/Drives/{id}",
                get(storage::drive),
            )
            .route(
                "/redfish/v1/Systems/1/Storage/1/Volumes",
                get(storage::volumes).post(storage::create_volume),
            )
            .route(
                "/redfish/v1/Systems/1/Storage/1/Volumes/{id}",
                get(storage::volume),
            )
            .with_state(sim.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RedfishServer { port, sim, task }
    }

    pub fn base(&self) -> url::Url {
        url::Url::parse(&format!("http://127.0.0.1:{}", self.port)).expect("url")
    }

    pub fn counters(&self) -> Counters {
        self.sim.lock().expect("lock").counters.clone()
    }

    /// Forget every session, as a BMC does when tokens time out.
    pub fn expire_sessions(&self) {
        self.sim.lock().expect("lock").sessions.clear();
    }

    pub fn live_sessions(&self) -> usize {
        self.sim.lock().expect("lock").sessions.len()
    }

    pub fn power(&self) -> String {
        self.sim.lock().expect("lock").power.clone()
    }

    /// The device a boot starting now uses, as a server's firmware takes
    /// its override: `BootSourceOverrideTarget` (`Pxe`, `Hdd`, `None`), a
    /// `Once` override consumed by this boot (back to `Disabled`), as the
    /// Redfish schema says.
    pub fn take_boot_target(&self) -> String {
        let mut sim = self.sim.lock().expect("lock");
        match sim.boot.1.as_str() {
            "Disabled" => "None".to_string(),
            "Once" => {
                sim.boot.1 = "Disabled".into();
                sim.etag += 1;
                sim.boot.0.clone()
            }
            _ => sim.boot.0.clone(),
        }
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(
            json!({"error": {"code": "Base.1.0.NoValidSession", "message": "no valid session"}}),
        ),
    )
        .into_response()
}

/// Check X-Auth-Token (or Basic when allowed).
fn authorize(sim: &mut Sim, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if let Some(tok) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) {
        if sim.sessions.contains_key(tok) {
            sim.counters.token_requests += 1;
            return Ok(());
        }
        sim.counters.rejected_tokens += 1;
        return Err(Box::new(unauthorized()));
    }
    if let Some(b) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        && sim.opts.allow_basic
    {
        let want = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", sim.opts.username, sim.opts.password));
        if b == want {
            sim.counters.basic_requests += 1;
            return Ok(());
        }
    }
    Err(Box::new(unauthorized()))
}

macro_rules! auth {
    ($s:expr, $h:expr) => {{
        let mut sim = $s.lock().expect("lock");
        if let Err(r) = authorize(&mut sim, &$h) {
            return *r;
        }
        sim
    }};
}

mod storage;
mod update;

async fn root() -> Response {
    axum::Json(json!({
        "@odata.id": "/redfish/v1/", "RedfishVersion": "1.15.0",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}
    }))
    .into_response()
}

async fn login(State(s): State<S>, body: axum::body::Bytes) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    let mut sim = s.lock().expect("lock");
    if !sim.opts.sessions {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    if v["UserName"] != sim.opts.username.as_str() || v["Password"] != sim.opts.password.as_str() {
        sim.counters.failed_logins += 1;
        return unauthorized();
    }
    sim.counters.logins += 1;
    let id = sim.next_id;
    sim.next_id += 1;
    let token = format!("tok-{id}-{}", rand_hex());
    sim.sessions.insert(token.clone(), id);
    let loc = format!(
        "{}/redfish/v1/SessionService/Sessions/{id}",
        sim.opts.foreign.as_deref().unwrap_or_default()
    );
    (
        StatusCode::CREATED,
        [
            ("x-auth-token", token),
            (header::LOCATION.as_str(), loc.clone()),
        ],
        axum::Json(json!({"@odata.id": loc, "Id": id.to_string(), "UserName": sim.opts.username})),
    )
        .into_response()
}

fn rand_hex() -> String {
    format!("{:016x}", rand::random::<u64>())
}

async fn logout(State(s): State<S>, Path(id): Path<u32>, headers: HeaderMap) -> Response {
    let mut sim = auth!(s, headers);
    let before = sim.sessions.len();
    sim.sessions.retain(|_, v| *v != id);
    if sim.sessions.len() == before {
        return StatusCode::NOT_FOUND.into_response();
    }
    sim.counters.logouts += 1;
    StatusCode::NO_CONTENT.into_response()
}

async fn systems(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let host = sim.opts.foreign.as_deref().unwrap_or_default();
    axum::Json(
        json!({"Members": [{"@odata.id": format!("{host}/redfish/v1/Systems/1")}], "Members@odata.count": 1}),
    )
    .into_response()
}

async fn system(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let (t, e, m) = &sim.boot;
    axum::Json(json!({
        "@odata.id": "/redfish/v1/Systems/1", "Id": "1",
        "Manufacturer": sim.opts.manufacturer, "Model": "Sim-1", "SerialNumber": "SIM0001",
        "UUID": "00000000-0000-4000-8000-000000000001", "BiosVersion": sim.firmware,
        "PowerState": sim.power,
        "Boot": {"BootSourceOverrideTarget": t, "BootSourceOverrideEnabled": e,
                 "BootSourceOverrideMode": m,
                 "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd"]},
        "@Redfish.Settings": {"SettingsObject": {"@odata.id": "/redfish/v1/Systems/1/Settings"}},
        "ProcessorSummary": {"Count": 2, "Model": "Sim CPU"},
        "MemorySummary": {"TotalSystemMemoryGiB": sim.opts.memory_gib},
        "EthernetInterfaces": {"@odata.id": "/redfish/v1/Systems/1/EthernetInterfaces"},
        "Storage": {"@odata.id": "/redfish/v1/Systems/1/Storage"},
        "Bios": {"@odata.id": "/redfish/v1/Systems/1/Bios"},
        "Actions": {"#ComputerSystem.Reset": {
            "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo"}},
        "Oem": {"Filler": "x".repeat(sim.opts.system_padding)}
    }))
    .into_response()
}

async fn settings(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let (t, e, m) = &sim.boot;
    (
        [(header::ETAG, format!("W/\"{}\"", sim.etag))],
        axum::Json(json!({"@odata.id": "/redfish/v1/Systems/1/Settings",
            "Boot": {"BootSourceOverrideTarget": t, "BootSourceOverrideEnabled": e,
                     "BootSourceOverrideMode": m}})),
    )
        .into_response()
}

async fn patch_settings(
    State(s): State<S>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut sim = auth!(s, headers);
    match headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok()) {
        None => {
            sim.counters.patches_without_if_match += 1;
            return StatusCode::PRECONDITION_REQUIRED.into_response();
        }
        Some(tag) if tag != format!("W/\"{}\"", sim.etag) => {
            return StatusCode::PRECONDITION_FAILED.into_response();
        }
        Some(_) => sim.counters.patches_with_if_match += 1,
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let b = &v["Boot"];
    if let Some(t) = b["BootSourceOverrideTarget"].as_str() {
        sim.boot.0 = t.into();
    }
    if let Some(e) = b["BootSourceOverrideEnabled"].as_str() {
        sim.boot.1 = e.into();
    }
    if let Some(m) = b["BootSourceOverrideMode"].as_str() {
        sim.boot.2 = m.into();
    }
    sim.etag += 1;
    StatusCode::NO_CONTENT.into_response()
}

async fn bios(State(s): State<S>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    axum::Json(json!({"@odata.id": "/redfish/v1/Systems/1/Bios", "Id": "Bios",
        "Attributes": sim.bios,
        "@Redfish.Settings": {"SettingsObject": {"@odata.id": "/redfish/v1/Systems/1/Bios/Settings"}}}))
    .into_response()
}

async fn bios_settings(
    State(s): State<S>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut sim = auth!(s, headers);
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(a) = v["Attributes"].as_object() else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    for (k, v) in a {
        sim.bios_pending.insert(k.clone(), v.clone());
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn action_info(State(s): State<S>, headers: HeaderMap) -> Response {
    let _sim = auth!(s, headers);
    axum::Json(
        json!({"Parameters": [{"Name": "ResetType", "Required": true,
        "AllowableValues": ["On", "ForceOff", "GracefulShutdown", "PowerCycle"]}]}),
    )
    .into_response()
}

async fn reset(State(s): State<S>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    let mut sim = auth!(s, headers);
    let v: Value = serde_json::from_slice(&body).unwrap_or_default();
    let target = match v["ResetType"].as_str() {
        Some("On") | Some("PowerCycle") => "On",
        Some("ForceOff") | Some("GracefulShutdown") => "Off",
        _ => return StatusCode::BAD_REQUEST.into_response(),
    };
    sim.counters.resets += 1;
    if target == "On" && (sim.power != "On" || v["ResetType"] == "PowerCycle") {
        sim.counters.power_ons += 1;
        // The boot applies the pending BIOS settings, but those it drops.
        update::apply_at_boot(&mut sim);
        let pending = std::mem::take(&mut sim.bios_pending);
        for (k, v) in pending {
            if !sim.opts.bios_dropped.contains(&k) {
                sim.bios.insert(k, v);
            }
        }
    }
    let id = sim.next_id;
    sim.next_id += 1;
    let polls = sim.opts.task_polls;
    sim.tasks.insert(id, (polls, target.to_string()));
    (
        StatusCode::ACCEPTED,
        [(
            header::LOCATION,
            format!(
                "{}/redfish/v1/TaskService/TaskMonitors/{id}",
                sim.opts.foreign.as_deref().unwrap_or_default()
            ),
        )],
        axum::Json(json!({"TaskState": "New"})),
    )
        .into_response()
}

async fn monitor(State(s): State<S>, Path(id): Path<u32>, headers: HeaderMap) -> Response {
    let mut sim = auth!(s, headers);
    sim.counters.monitor_polls += 1;
    if let Some(r) = update::monitor(&mut sim, id) {
        return r;
    }
    let Some((left, target)) = sim.tasks.get(&id).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if left > 0 {
        sim.tasks.insert(id, (left - 1, target));
        return (
            StatusCode::ACCEPTED,
            [(
                header::LOCATION,
                format!(
                    "{}/redfish/v1/TaskService/TaskMonitors/{id}",
                    sim.opts.foreign.as_deref().unwrap_or_default()
                ),
            )],
            axum::Json(json!({"TaskState": "Running", "PercentComplete": 50})),
        )
            .into_response();
    }
    sim.tasks.remove(&id);
    if sim.fail_next_task {
        sim.fail_next_task = false;
        return axum::Json(json!({"TaskState": "Exception", "TaskStatus": "Critical",
            "Messages": [{"Message": "power supply fault"}]}))
        .into_response();
    }
    sim.power = target;
    axum::Json(json!({"TaskState": "Completed", "TaskStatus": "OK"})).into_response()
}

async fn nics(State(s): State<S>, headers: HeaderMap) -> Response {
    let _sim = auth!(s, headers);
    axum::Json(json!({"Members": [
        {"@odata.id": "/redfish/v1/Systems/1/EthernetInterfaces/NIC.1"},
        {"@odata.id": "/redfish/v1/Systems/1/EthernetInterfaces/NIC.2"}]}))
    .into_response()
}

async fn nic(State(s): State<S>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let sim = auth!(s, headers);
    let (mac, link) = if id == "NIC.1" {
        (sim.opts.mac.as_str(), "LinkUp")
    } else {
        ("AA:BB:CC:00:00:02", "LinkDown")
    };
    axum::Json(json!({"Id": id, "MACAddress": mac, "LinkStatus": link, "SpeedMbps": 25000}))
        .into_response()
}
