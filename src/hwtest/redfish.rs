//! The Redfish-only checks of `hw-test`: TLS, Basic and session login (and
//! the optional session-limit probe, every probe session deleted again),
//! and the boot mode the System offers. Then the common checks run through
//! the Redfish driver.

use std::time::Instant;

use reqwest::StatusCode;
use serde_json::Value;

use super::report::{Report, Status};
use super::{Options, OverrideReader, OverrideView, Progress, check, secs};
use crate::bmc::quirks::{QuirkSet, Quirks};
use crate::bmc::redfish::RedfishBmc;
use crate::bmc::redfish::client::http_client;
use crate::bmc::{BmcError, BootDevice, FirmwareMode};

pub async fn run(
    opts: &Options,
    base: url::Url,
    system_path: Option<String>,
    report: &mut Report,
    progress: Progress<'_>,
) -> QuirkSet {
    if base.scheme() == "https" {
        progress("tls: reading the certificate chain");
        let host = base.host_str().unwrap_or_default().to_string();
        let port = base.port_or_known_default().unwrap_or(443);
        match super::tls::inspect(
            &host,
            port,
            opts.ca_pem.as_deref(),
            opts.timing.request_timeout,
        )
        .await
        {
            Ok(t) => {
                let status = if t.verified {
                    Status::Pass
                } else {
                    Status::Fail
                };
                let detail = format!(
                    "names {:?}, chain of {}{}{}",
                    t.names,
                    t.chain_length,
                    if t.self_signed { ", self-signed" } else { "" },
                    t.verify_error
                        .as_ref()
                        .map(|e| format!(", not trusted: {e}"))
                        .unwrap_or_default()
                );
                report.push(check("tls", status, None, detail));
                report.tls = Some(t);
            }
            Err(e) => report.push(check("tls", Status::Fail, None, e.to_string())),
        }
    } else {
        report.push(check(
            "tls",
            Status::Skipped,
            None,
            "plain http: nothing to verify (use https on real BMCs)",
        ));
    }
    let http = match http_client(&opts.tls, &opts.timing) {
        Ok(c) => c,
        Err(e) => {
            report.push(check("login-basic", Status::Fail, None, e.to_string()));
            return QuirkSet::default();
        }
    };
    let url = |p: &str| base.join(p).map_err(|e| e.to_string());
    let user = opts.credentials.username.clone();
    let pass = opts.credentials.password().to_string();

    // Basic auth.
    progress("login-basic: GET /redfish/v1/Systems with Basic auth");
    let start = Instant::now();
    let basic = match url("/redfish/v1/Systems") {
        Ok(u) => http
            .get(u)
            .basic_auth(&user, Some(&pass))
            .send()
            .await
            .map(|r| r.status()),
        Err(e) => {
            report.push(check("login-basic", Status::Fail, None, e));
            return QuirkSet::default();
        }
    };
    match basic {
        Ok(s) if s.is_success() => report.push(check(
            "login-basic",
            Status::Pass,
            secs(start.elapsed()),
            "Basic auth accepted",
        )),
        Ok(s) if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN => report.push(check(
            "login-basic",
            Status::Fail,
            None,
            format!("HTTP {s}: bad credentials or Basic auth refused"),
        )),
        Ok(s) => report.push(check(
            "login-basic",
            Status::Fail,
            None,
            format!("HTTP {s}"),
        )),
        Err(e) => report.push(check(
            "login-basic",
            Status::Fail,
            None,
            format!("unreachable: {e}"),
        )),
    }

    // SessionService.
    progress("login-session: POST to the SessionService");
    let sessions = sessions_path(&http, &base).await;
    let open = |http: reqwest::Client, u: url::Url| {
        let (user, pass) = (user.clone(), pass.clone());
        async move {
            let r = http
                .post(u)
                .json(&serde_json::json!({"UserName": user, "Password": pass}))
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status();
            let token = r
                .headers()
                .get("x-auth-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let loc = r
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok::<_, String>((status, token, loc))
        }
    };
    let close = |http: reqwest::Client, base: url::Url, token: String, loc: Option<String>| async move {
        let Some(loc) = loc else { return false };
        let Ok(u) = base.join(&loc) else { return false };
        http.delete(u)
            .header("X-Auth-Token", token)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success() || r.status() == StatusCode::NOT_FOUND)
    };
    let mut sessions_ok = false;
    match &sessions {
        None => report.push(check(
            "login-session",
            Status::NotSupported,
            None,
            "the service root links no SessionService (Basic auth only)",
        )),
        Some(path) => match url(path) {
            Err(e) => report.push(check("login-session", Status::Fail, None, e)),
            Ok(u) => {
                let start = Instant::now();
                match open(http.clone(), u).await {
                    Ok((s, Some(token), loc)) if s.is_success() => {
                        let took = secs(start.elapsed());
                        let closed = close(http.clone(), base.clone(), token, loc).await;
                        sessions_ok = true;
                        report.push(check(
                            "login-session",
                            if closed { Status::Pass } else { Status::Fail },
                            took,
                            if closed {
                                "session opened and deleted"
                            } else {
                                "session opened but could not be deleted"
                            },
                        ));
                    }
                    Ok((s, _, _))
                        if s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN =>
                    {
                        report.push(check(
                            "login-session",
                            Status::Fail,
                            None,
                            format!("HTTP {s}: credentials refused"),
                        ))
                    }
                    Ok((s, _, _)) => report.push(check(
                        "login-session",
                        Status::NotSupported,
                        None,
                        format!("HTTP {s}, no token: Basic auth only"),
                    )),
                    Err(e) => report.push(check("login-session", Status::Fail, None, e)),
                }
            }
        },
    }
    if let Some(cap) = opts.session_limit_probe {
        if !sessions_ok {
            report.push(check(
                "session-limit",
                Status::NotSupported,
                None,
                "no sessions to count",
            ));
        } else if let Some(Ok(u)) = sessions.as_deref().map(url) {
            progress(&format!("session-limit: opening up to {cap} sessions"));
            let mut held = Vec::new();
            let mut refused = None;
            for i in 0..cap {
                match open(http.clone(), u.clone()).await {
                    Ok((s, Some(t), loc)) if s.is_success() => held.push((t, loc)),
                    Ok((s, _, _)) => {
                        refused = Some(format!("session {} refused with HTTP {s}", i + 1));
                        break;
                    }
                    Err(e) => {
                        refused = Some(format!("session {} failed: {e}", i + 1));
                        break;
                    }
                }
            }
            let opened = held.len();
            let mut closed = 0;
            for (t, loc) in held {
                if close(http.clone(), base.clone(), t, loc).await {
                    closed += 1;
                }
            }
            let status = if closed == opened {
                Status::Pass
            } else {
                Status::Fail
            };
            let detail = match refused {
                Some(r) => {
                    format!("{r}; limit {opened}; {closed} of {opened} probe sessions deleted")
                }
                None => format!(
                    "all {cap} accepted (the cap); {closed} of {opened} probe sessions deleted"
                ),
            };
            report.push(check("session-limit", status, None, detail));
        }
    }

    let bmc = match RedfishBmc::new(
        base.clone(),
        system_path,
        opts.credentials.clone(),
        &opts.tls,
        opts.timing,
    ) {
        Ok(b) => b.with_quirks(opts.quirks.clone()),
        Err(e) => {
            report.push(check("inventory", Status::Fail, None, e.to_string()));
            return QuirkSet::default();
        }
    };
    let reader = RedfishOverride { bmc: &bmc };
    // Boot mode: what the System shows and offers.
    if let Ok(sys) = reader.system().await {
        let boot = &sys["Boot"];
        let mode = boot["BootSourceOverrideMode"].as_str();
        let allowed: Vec<&str> = boot["BootSourceOverrideMode@Redfish.AllowableValues"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match mode {
            None => report.push(check("boot-mode", Status::NotSupported, None, "no BootSourceOverrideMode: the mode cannot be set with the override (set it in the BIOS)")),
            Some(m) => {
                let settable = if allowed.is_empty() {
                    "settable with the override (no AllowableValues listed)".to_string()
                } else {
                    format!("settable to {}", allowed.join(", "))
                };
                report.push(check("boot-mode", Status::Pass, None, format!("{m}; {settable}")));
            }
        }
    }
    if let Ok(sys) = reader.system().await {
        progress("bios, simple-update, volumes: reading what the BMC offers");
        super::day_two::run(&bmc, &sys, report).await;
    }
    let set = super::power::common(opts, &bmc, &reader, report, progress).await;
    super::vmedia_check::run(opts, &bmc, &reader, &set, report, progress).await;
    super::day_two::bios_applied(opts, &bmc, report, progress).await;
    let _ = crate::bmc::Bmc::close(&bmc).await;
    set
}

/// The SessionService's Sessions collection, from the service root.
async fn sessions_path(http: &reqwest::Client, base: &url::Url) -> Option<String> {
    let u = base.join("/redfish/v1/").ok()?;
    let root: Value = http.get(u).send().await.ok()?.json().await.ok()?;
    if let Some(p) = root["Links"]["Sessions"]["@odata.id"].as_str() {
        return Some(p.to_string());
    }
    root["SessionService"]["@odata.id"]
        .as_str()
        .map(|s| format!("{}/Sessions", s.trim_end_matches('/')))
}

struct RedfishOverride<'a> {
    bmc: &'a RedfishBmc,
}

impl RedfishOverride<'_> {
    async fn system(&self) -> Result<Value, BmcError> {
        let path = self.bmc.system_path().await?;
        self.bmc.get_value(&path).await
    }
}

#[async_trait::async_trait]
impl OverrideReader for RedfishOverride<'_> {
    async fn read(&self) -> Result<OverrideView, BmcError> {
        let sys = self.system().await?;
        let b = &sys["Boot"];
        let target = b["BootSourceOverrideTarget"].as_str().unwrap_or("-");
        let enabled = b["BootSourceOverrideEnabled"].as_str().unwrap_or("-");
        let mode = b["BootSourceOverrideMode"].as_str().unwrap_or("-");
        Ok(OverrideView {
            network: target == "Pxe",
            persistent: enabled == "Continuous",
            active: enabled == "Once" || enabled == "Continuous",
            device: match target {
                "Pxe" => Some(BootDevice::Network),
                "Hdd" => Some(BootDevice::Disk),
                "Cd" => Some(BootDevice::Cd),
                _ => None,
            },
            mode: match mode {
                "UEFI" => Some(FirmwareMode::Uefi),
                "Legacy" => Some(FirmwareMode::Legacy),
                _ => None,
            },
            text: format!("{target}/{enabled}/{mode}"),
        })
    }
    async fn quirks(&self) -> Result<Quirks, BmcError> {
        self.bmc.quirks().await
    }
    async fn disable(&self) -> Result<(), BmcError> {
        self.bmc.disable_boot_override().await
    }
}
