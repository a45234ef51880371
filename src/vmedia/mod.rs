//! Virtual media boot: the ISO image a BMC inserts into a server's virtual
//! CD drive (Redfish `VirtualMedia.InsertMedia`), booting on UEFI firmware
//! straight into the kernel and initrd with the command line of one boot.
//!
//! The image is an ISO 9660 volume whose El Torito catalog names one
//! no-emulation EFI boot image: a FAT volume holding systemd-boot as
//! `EFI/BOOT/BOOTX64.EFI` (the removable-media path firmware looks for), a
//! `loader/loader.conf` that boots the one entry at once, the entry
//! `loader/entries/metalherd.conf`, and the kernel and initrd beside it.
//! Everything is inside the FAT volume because systemd-boot reads only the
//! volume it was loaded from. The command line carries a per-boot secret,
//! so an image is built per boot, and no error message ever quotes it.
//! The kernel gets it as given, behind the `initrd=\initrd` that Debian
//! 12's systemd-boot (252) puts in front (checked under OVMF by
//! `tests/virtual_media_iso_boots.rs`).
//!
//! This module makes bytes: [`build_iso`] is pure; [`write_iso_file`] only
//! adds reading the inputs and one atomic, private (0600) write. It does
//! not talk to BMCs or serve the image; those belong to `bmc` and `http`.

mod fat;
mod iso;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use fat::FatFile;

/// What one boot needs.
pub struct BootMedia<'a> {
    /// The EFI boot loader: systemd-boot (`systemd-bootx64.efi`).
    pub loader: &'a [u8],
    /// The Linux kernel (an EFI-stub bzImage).
    pub kernel: &'a [u8],
    pub initrd: &'a [u8],
    /// The kernel command line, passed through verbatim.
    pub cmdline: &'a str,
}

/// Where Debian's systemd-boot-efi package puts the loader.
pub const SYSTEMD_BOOT: &str = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi";

/// Boot the one entry at once; no menu, no editing the command line.
const LOADER_CONF: &str = "timeout 0\ndefault metalherd.conf\neditor no\n";
/// What systemd-boot 252 (Debian 12's) puts in front of the entry's
/// options, for kernels that cannot take the initrd over LoadFile2.
const LOADER_PREFIX: &str = "initrd=\\initrd ";
/// x86's COMMAND_LINE_SIZE (2048, the terminating NUL included) less that
/// prefix: the kernel silently cuts what is longer.
const MAX_CMDLINE: usize = 2047 - LOADER_PREFIX.len();

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VmediaError {
    #[error("vmedia: reading the {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("vmedia: writing the ISO image {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// File work around a build (the caller's, e.g. making the directory).
    #[error("vmedia: {0}")]
    Io(#[from] std::io::Error),
    #[error("vmedia: FAT boot image: {what}: {source}")]
    Fat {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "vmedia: the boot image would be {bytes} bytes, more than the {limit} an ISO 9660 file holds"
    )]
    TooLarge { bytes: u64, limit: u64 },
    #[error("vmedia: the {what} is empty")]
    Empty { what: &'static str },
    #[error("vmedia: the {what} is not an EFI executable (no MZ header)")]
    NotEfi { what: &'static str },
    #[error("vmedia: kernel command line refused: {0}")]
    Cmdline(CmdlineProblem),
}

/// Why a command line would not reach the kernel as given. The command
/// line itself is never shown: it carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmdlineProblem {
    /// systemd-boot ends a line at CR, LF or NUL, and other control
    /// characters (tabs too) have no business on a command line.
    #[error("it contains the control character U+{code:04X}")]
    ControlCharacter { code: u32 },
    /// systemd-boot strips one pair of quotes around a whole value.
    #[error("it starts and ends with a double quote (the loader would strip them)")]
    Quoted,
    #[error("it is {len} bytes long, more than the kernel's {MAX_CMDLINE}")]
    TooLong { len: usize },
}

/// Check that `cmdline` survives the loader entry: systemd-boot drops
/// spaces at either end of a value (the kernel would ignore them anyway);
/// everything else reaches the kernel byte for byte, or is refused here.
/// Debian 12's systemd-boot puts `initrd=\initrd ` in front of it.
pub fn check_cmdline(cmdline: &str) -> Result<(), CmdlineProblem> {
    if let Some(c) = cmdline.chars().find(|c| c.is_control()) {
        return Err(CmdlineProblem::ControlCharacter { code: u32::from(c) });
    }
    let value = cmdline.trim_matches(' ');
    if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
        return Err(CmdlineProblem::Quoted);
    }
    if value.len() > MAX_CMDLINE {
        return Err(CmdlineProblem::TooLong { len: value.len() });
    }
    Ok(())
}

/// The systemd-boot entry (Boot Loader Specification type #1). A blank
/// command line gets no `options` line: systemd-boot ignores a key
/// without a value anyway.
fn loader_entry(cmdline: &str) -> String {
    let mut e = String::from("title metalherd\nlinux /vmlinuz\ninitrd /initrd\n");
    if !cmdline.trim_matches(' ').is_empty() {
        e.push_str("options ");
        e.push_str(cmdline);
        e.push('\n');
    }
    e
}

/// Build the whole ISO image in memory: the FAT volume is written straight
/// into the image's tail, so the inputs and the image are all it holds.
pub fn build_iso(m: &BootMedia) -> Result<Vec<u8>, VmediaError> {
    check_cmdline(m.cmdline).map_err(VmediaError::Cmdline)?;
    for (what, data) in [
        ("loader", m.loader),
        ("kernel", m.kernel),
        ("initrd", m.initrd),
    ] {
        if data.is_empty() {
            return Err(VmediaError::Empty { what });
        }
    }
    for (what, data) in [("loader", m.loader), ("kernel", m.kernel)] {
        if !data.starts_with(b"MZ") {
            return Err(VmediaError::NotEfi { what });
        }
    }
    let entry = loader_entry(m.cmdline);
    let files = [
        FatFile {
            path: "EFI/BOOT/BOOTX64.EFI",
            data: m.loader,
        },
        FatFile {
            path: "loader/loader.conf",
            data: LOADER_CONF.as_bytes(),
        },
        FatFile {
            path: "loader/entries/metalherd.conf",
            data: entry.as_bytes(),
        },
        FatFile {
            path: "vmlinuz",
            data: m.kernel,
        },
        FatFile {
            path: "initrd",
            data: m.initrd,
        },
    ];
    let fat_len = fat::volume_len(&files)?;
    let header = iso::header(fat_len)?;
    let too_large = |bytes| VmediaError::TooLarge {
        bytes,
        limit: usize::MAX as u64,
    };
    let total = usize::try_from(iso::image_len(fat_len)).map_err(|_| too_large(fat_len))?;
    let fat_end = header.len() + usize::try_from(fat_len).map_err(|_| too_large(fat_len))?;
    let mut image = vec![0u8; total];
    image[..header.len()].copy_from_slice(&header);
    fat::write_volume(&mut image[header.len()..fat_end], &files)?;
    Ok(image)
}

/// Read the loader, kernel and initrd, build the image and write it to
/// `path` atomically (temporary file, fsync, rename) with mode 0600, since
/// the command line inside carries a secret.
pub fn write_iso_file(
    path: &Path,
    loader: &Path,
    kernel: &Path,
    initrd: &Path,
    cmdline: &str,
) -> Result<(), VmediaError> {
    let read = |what: &'static str, p: &Path| {
        std::fs::read(p).map_err(|source| VmediaError::Read {
            what,
            path: p.to_path_buf(),
            source,
        })
    };
    let loader = read("loader", loader)?;
    let kernel = read("kernel", kernel)?;
    let initrd = read("initrd", initrd)?;
    let image = build_iso(&BootMedia {
        loader: &loader,
        kernel: &kernel,
        initrd: &initrd,
        cmdline,
    })?;
    crate::private_file::replace(path, &image).map_err(|source| VmediaError::Write {
        path: path.to_path_buf(),
        source,
    })
}
