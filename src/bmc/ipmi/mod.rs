//! IPMI 2.0 over LAN (RMCP+) driver for the [`Bmc`] trait, cipher suites 3
//! and 17. The protocol core is sans-IO: [`wire`] (packets), [`crypto`]
//! (RAKP codes, keys, integrity, AES), [`handshake`] (session setup state
//! machine), [`session`] (sequence numbers, reply matching), [`commands`]
//! and [`fru`] (command payloads). [`client`] is the only file with a
//! socket; `link` manages one BMC's session (resolve, negotiate the suite,
//! re-open, close). This file maps the [`Bmc`] operations to commands and
//! verifies every action: boot overrides are read back, power actions are
//! polled until reached. Credentials are used only for the handshake's key
//! computations; nothing here logs them or puts them in an error.
//!
//! The driver is written here rather than on the `ipmi-rs` crate: that
//! crate has no cipher suite 17 (its SHA-256 path is unimplemented), insists
//! on an ASF presence ping that pyghmi's BMC and some real ones never
//! answer, blocks a thread per call, and offers no typed chassis commands,
//! which are most of what provisioning sends.

pub mod client;
pub mod commands;
pub mod crypto;
pub mod error;
pub mod fru;
pub mod handshake;
mod link;
pub mod metrics;
pub mod session;
pub mod wire;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use tracing::Instrument;

pub use crypto::CipherSuite;
pub use error::IpmiError;

use self::commands::*;
use self::link::Link;
use crate::bmc::quirks::{BmcIdentity, BootModeWithOverride, Protocol, QuirkTable, Quirks};
use crate::bmc::{
    Bmc, BmcError, BootDevice, Credentials, FirmwareMode, Inventory, PowerAction, PowerState,
    Timing,
};

/// FRU images larger than this are not read (inventory needs a few areas).
const MAX_FRU_BYTES: usize = 4096;
/// Bytes per Read FRU Data request (fits every BMC's message limit).
const FRU_CHUNK: u8 = 32;

/// One BMC reached over IPMI LAN. Holds one RMCP+ session, opened on first
/// use (or by [`IpmiBmc::connect`]) and re-opened when idle or dead.
pub struct IpmiBmc {
    link: Link,
    table: std::sync::Arc<QuirkTable>,
    /// Resolved from Device ID and FRU on first need.
    quirks: tokio::sync::OnceCell<Quirks>,
}

impl std::fmt::Debug for IpmiBmc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpmiBmc")
            .field("address", &self.link.address)
            .finish_non_exhaustive()
    }
}

impl IpmiBmc {
    /// A driver that connects on first use: nothing is sent yet. With
    /// `cipher_suite` None it tries suite 17 and falls back to 3 when the
    /// BMC refuses 17 (a refusal is an answer, not silence).
    pub fn new(
        host: &str,
        port: u16,
        credentials: Credentials,
        cipher_suite: Option<CipherSuite>,
        timing: Timing,
    ) -> IpmiBmc {
        IpmiBmc {
            link: Link::new(host, port, credentials, cipher_suite, timing),
            table: std::sync::Arc::new(QuirkTable::builtin()),
            quirks: tokio::sync::OnceCell::new(),
        }
    }

    /// Match quirks against `table` instead of the built-in one.
    pub fn with_quirks(mut self, table: std::sync::Arc<QuirkTable>) -> IpmiBmc {
        self.table = table;
        self
    }

    /// The quirks in effect, from the BMC's manufacturer, product and
    /// firmware revision (read once).
    pub async fn quirks(&self) -> Result<&Quirks, BmcError> {
        self.quirks
            .get_or_try_init(|| async {
                let inv = self.inventory().await?;
                let q = self.table.resolve(&BmcIdentity {
                    protocol: Protocol::Ipmi,
                    manufacturer: inv.manufacturer.as_deref(),
                    oem_keys: Vec::new(),
                    model: inv.model.as_deref(),
                    firmware: inv.firmware_version.as_deref(),
                });
                tracing::debug!(address = %self.link.address, quirks = %q.label(), "ipmi quirks resolved");
                Ok(q)
            })
            .await
    }

    /// Resolve `host`, open an RMCP+ session with `cipher_suite` and raise
    /// it to administrator privilege. A wrong password is
    /// [`BmcError::BadCredentials`].
    pub async fn connect(
        host: &str,
        port: u16,
        credentials: Credentials,
        cipher_suite: CipherSuite,
        timing: Timing,
    ) -> Result<IpmiBmc, BmcError> {
        let bmc = IpmiBmc::new(host, port, credentials, Some(cipher_suite), timing);
        bmc.link.ensure_open().await.map_err(|e| bmc.err(e))?;
        Ok(bmc)
    }

    /// [`IpmiBmc::connect`] with suite 17, or 3 when the BMC refuses 17.
    pub async fn connect_best(
        host: &str,
        port: u16,
        credentials: Credentials,
        timing: Timing,
    ) -> Result<IpmiBmc, BmcError> {
        let bmc = IpmiBmc::new(host, port, credentials, None, timing);
        bmc.link.ensure_open().await.map_err(|e| bmc.err(e))?;
        Ok(bmc)
    }

    pub fn address(&self) -> &str {
        &self.link.address
    }

    /// The cipher suite in use, once a session was opened.
    pub async fn suite(&self) -> Option<CipherSuite> {
        self.link.suite().await
    }

    async fn call(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<wire::Response, IpmiError> {
        self.link.call(netfn, cmd, data).await
    }

    async fn call_ok(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
        self.link.call_ok(netfn, cmd, data).await
    }

    fn err(&self, e: IpmiError) -> BmcError {
        e.into_bmc_error(&self.link.address)
    }

    /// IPMI has no virtual media (vendors add it over their web UI or
    /// Redfish); nothing is sent.
    fn no_virtual_media(&self) -> BmcError {
        BmcError::Unsupported {
            address: self.link.address.clone(),
            what: "virtual media over IPMI (use the BMC's Redfish address)".into(),
        }
    }

    /// Current boot flags (parameter 5), as read back from the BMC.
    pub async fn boot_flags(&self) -> Result<BootFlags, BmcError> {
        let d = self
            .call_ok(
                NETFN_CHASSIS,
                CMD_GET_BOOT_OPTIONS,
                &get_boot_flags_request(),
            )
            .await
            .map_err(|e| self.err(e))?;
        parse_boot_flags(&d).map_err(|e| self.err(e))
    }

    /// Write boot flags the way ipmitool's `chassis bootdev` does:
    /// set-in-progress, boot info acknowledge, flags, commit, set-complete.
    /// BMCs without set-in-progress (a completion code) are tolerated.
    async fn write_boot_flags(&self, flags: &BootFlags) -> Result<(), IpmiError> {
        let set = |param: u8, value: Vec<u8>| async move {
            self.call(
                NETFN_CHASSIS,
                CMD_SET_BOOT_OPTIONS,
                &set_boot_param(param, &value),
            )
            .await
        };
        let in_progress = set(PARAM_SET_IN_PROGRESS, vec![0x01]).await?.completion == 0;
        let ack = set(PARAM_BOOT_INFO_ACK, vec![0x01, 0x01]).await?;
        if ack.completion != 0 {
            tracing::debug!(code = ack.completion, "boot info acknowledge refused");
        }
        let r = set(PARAM_BOOT_FLAGS, flags.0.to_vec()).await?;
        if in_progress {
            if r.completion == 0 {
                set(PARAM_SET_IN_PROGRESS, vec![0x02]).await?;
            }
            set(PARAM_SET_IN_PROGRESS, vec![0x00]).await?;
        }
        if r.completion != 0 {
            return Err(IpmiError::Completion {
                netfn: NETFN_CHASSIS,
                cmd: CMD_SET_BOOT_OPTIONS,
                code: r.completion,
            });
        }
        Ok(())
    }

    /// Read the FRU 0 image's header and its board and product areas.
    async fn read_fru(&self) -> Result<fru::FruInfo, IpmiError> {
        let size = parse_fru_info(&self.call_ok(NETFN_STORAGE, CMD_FRU_INFO, &[0]).await?)?
            .min(MAX_FRU_BYTES);
        let header = self.read_fru_bytes(0, 8.min(size)).await?;
        let (board, product) = fru::area_offsets(&header)?;
        let mut image = vec![0u8; size];
        image[..header.len()].copy_from_slice(&header);
        for off in [board, product].into_iter().flatten() {
            if off + 2 > size {
                return Err(IpmiError::Malformed {
                    what: "FRU",
                    detail: "area offset past the end".into(),
                });
            }
            let head = self.read_fru_bytes(off, 2).await?;
            let len = fru::area_len(&head)?.min(size - off);
            let area = self.read_fru_bytes(off, len).await?;
            image[off..off + area.len()].copy_from_slice(&area);
        }
        fru::parse(&image)
    }

    async fn read_fru_bytes(&self, offset: usize, len: usize) -> Result<Vec<u8>, IpmiError> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let at = offset + out.len();
            let count = (len - out.len()).min(FRU_CHUNK as usize) as u8;
            let d = self
                .call_ok(
                    NETFN_STORAGE,
                    CMD_FRU_READ,
                    &fru_read_request(0, at as u16, count),
                )
                .await?;
            let got = parse_fru_read(&d)?;
            if got.is_empty() {
                return Err(IpmiError::Malformed {
                    what: "FRU data",
                    detail: "empty read".into(),
                });
            }
            out.extend_from_slice(&got[..got.len().min(len - out.len())]);
        }
        Ok(out)
    }

    /// Poll until the power state is `wanted` and has held for the quirks'
    /// settle time.
    async fn wait_power(
        &self,
        wanted: PowerState,
        settle: std::time::Duration,
    ) -> Result<(), BmcError> {
        let start = tokio::time::Instant::now();
        let mut held_since: Option<tokio::time::Instant> = None;
        let deadline = self.link.timing.power_deadline + settle;
        loop {
            let last = self.power_state().await?;
            if last == wanted {
                let since = *held_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= settle {
                    return Ok(());
                }
            } else {
                held_since = None;
            }
            if start.elapsed() >= deadline {
                return Err(BmcError::PowerStateNotReached {
                    address: self.link.address.clone(),
                    wanted,
                    last,
                    after: deadline,
                });
            }
            tokio::time::sleep(self.link.timing.poll_interval).await;
        }
    }
}

/// A dropped driver still closes its session when it can (inside a tokio
/// runtime, lock free): BMCs allow few sessions, and leaked ones only
/// time out after a minute or more.
impl Drop for IpmiBmc {
    fn drop(&mut self) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if let Some(mut conn) = self.link.take_conn() {
            handle.spawn(async move { link::close_conn(&mut conn).await });
        }
    }
}

#[async_trait]
impl Bmc for IpmiBmc {
    async fn power_state(&self) -> Result<PowerState, BmcError> {
        let d = self
            .call_ok(NETFN_CHASSIS, CMD_CHASSIS_STATUS, &[])
            .await
            .map_err(|e| self.err(e))?;
        parse_chassis_status(&d).map_err(|e| self.err(e))
    }

    async fn power(&self, action: PowerAction) -> Result<(), BmcError> {
        let span = tracing::info_span!("ipmi_power", bmc = %self.link.address, ?action);
        async {
            let settle = self.quirks().await?.power_settle;
            let current = self.power_state().await?;
            let code = chassis_control_code(action, current);
            self.call_ok(NETFN_CHASSIS, CMD_CHASSIS_CONTROL, &[code])
                .await
                .map_err(|e| self.err(e))?;
            self.wait_power(action.target(), settle).await
        }
        .instrument(span)
        .await
    }

    async fn set_boot_once(&self, device: BootDevice, mode: FirmwareMode) -> Result<(), BmcError> {
        let span = tracing::info_span!("ipmi_boot", bmc = %self.link.address, ?device, ?mode);
        async {
            let quirks = self.quirks().await?;
            let mode = match quirks.boot_mode_with_override {
                // Without the EFI bit the flags say nothing of the mode.
                BootModeWithOverride::Never => FirmwareMode::Legacy,
                _ => mode,
            };
            let kept_ok = quirks.once_kept_as_continuous;
            let wanted = BootFlags::one_time(device, mode);
            self.write_boot_flags(&wanted)
                .await
                .map_err(|e| self.err(e))?;
            let got = self.boot_flags().await?;
            // A persistent flag where one-time was asked: the server would
            // boot that device on every start.
            let kept = got.0[0] & BootFlags::VALID != 0 && got.0[0] & BootFlags::PERSISTENT != 0;
            let honoured = got.honours(&wanted);
            if !honoured || (kept && !kept_ok) {
                return Err(BmcError::BootOverrideIgnored {
                    address: self.link.address.clone(),
                    wanted: wanted.hex(),
                    got: got.hex(),
                    kept_continuous: honoured && kept,
                });
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    async fn inventory(&self) -> Result<Inventory, BmcError> {
        let id = parse_device_id(
            &self
                .call_ok(NETFN_APP, CMD_DEVICE_ID, &[])
                .await
                .map_err(|e| self.err(e))?,
        )
        .map_err(|e| self.err(e))?;
        // GUID and FRU are optional in IPMI: a BMC without them still has
        // an inventory. Timeouts and transport errors are not tolerated.
        let uuid = match self.call_ok(NETFN_APP, CMD_SYSTEM_GUID, &[]).await {
            Ok(d) => parse_system_guid(&d).ok(),
            Err(e @ (IpmiError::Timeout(_) | IpmiError::Io(_))) => return Err(self.err(e)),
            Err(_) => None,
        };
        let fru = match self.read_fru().await {
            Ok(f) => f,
            Err(e @ (IpmiError::Timeout(_) | IpmiError::Io(_))) => return Err(self.err(e)),
            Err(e) => {
                tracing::debug!(error = %e, "no usable FRU 0");
                fru::FruInfo::default()
            }
        };
        Ok(Inventory {
            manufacturer: fru
                .product_manufacturer
                .or(fru.board_manufacturer)
                .or_else(|| manufacturer_name(id.manufacturer_id).map(str::to_string))
                .or_else(|| Some(format!("IANA {}", id.manufacturer_id))),
            model: fru.product_name.or(fru.board_product),
            serial_number: fru.product_serial.or(fru.board_serial),
            uuid,
            firmware_version: Some(id.firmware),
            ..Inventory::default()
        })
    }

    async fn insert_media(&self, image_url: &str) -> Result<(), BmcError> {
        let _ = image_url;
        Err(self.no_virtual_media())
    }

    async fn eject_media(&self) -> Result<(), BmcError> {
        Err(self.no_virtual_media())
    }

    async fn applied_quirks(&self) -> Result<Vec<String>, BmcError> {
        Ok(self.quirks().await?.applied.clone())
    }

    async fn close(&self) -> Result<(), BmcError> {
        self.link.close().await;
        Ok(())
    }
}
