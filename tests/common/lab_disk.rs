//! A lab VM's disk image read from the host, as the lab stories check it:
//! its partition table (`sfdisk --json` on the image file), the first line
//! of a partition (where the lab's test OS writes its stamps), and what is
//! left of partition tables and filesystem signatures after a wipe. Read
//! the image of a VM that is off, or data its guest has synced.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// One partition of the table: its GPT label and first sector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    pub start: u64,
}

/// The partitions of the image's table; `None` when sfdisk finds no table.
pub fn partitions(img: &Path) -> Option<Vec<Part>> {
    let out = Command::new("sfdisk")
        .arg("--json")
        .arg(img)
        .output()
        .expect("sfdisk");
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let parts = v.pointer("/partitiontable/partitions")?.as_array()?;
    Some(
        parts
            .iter()
            .map(|p| Part {
                name: p["name"].as_str().unwrap_or_default().to_string(),
                start: p["start"].as_u64().unwrap_or_default(),
            })
            .collect(),
    )
}

/// The partition labelled `name`, if the table has one.
pub fn partition(img: &Path, name: &str) -> Option<Part> {
    partitions(img)?.into_iter().find(|p| p.name == name)
}

/// The first line of the sector at `lba` (lossy UTF-8, up to a newline or
/// NUL).
pub fn first_line(img: &Path, lba: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(img).expect("open disk image");
    f.seek(SeekFrom::Start(lba * 512)).expect("seek");
    let mut sector = [0u8; 512];
    f.read_exact(&mut sector).expect("read a sector");
    let end = sector
        .iter()
        .position(|b| *b == b'\n' || *b == 0)
        .unwrap_or(512);
    String::from_utf8_lossy(&sector[..end]).into_owned()
}

/// What still looks like a partition table or a filesystem signature: the
/// MBR boot signature, the primary and backup GPT headers, anything
/// `wipefs` finds on the whole image, and anything `blkid` finds at each of
/// `starts` (sectors where partitions used to begin). Empty: wiped.
pub fn leftovers(img: &Path, starts: &[u64]) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(img).expect("open disk image");
    let mut head = [0u8; 1024];
    f.read_exact(&mut head).expect("read the first sectors");
    let mut tail = [0u8; 512];
    f.seek(SeekFrom::End(-512)).expect("seek");
    f.read_exact(&mut tail).expect("read the last sector");
    let mut found = Vec::new();
    if head[510..512] == [0x55, 0xaa] {
        found.push("MBR boot signature at 510".to_string());
    }
    if &head[512..520] == b"EFI PART" {
        found.push("primary GPT header at LBA 1".to_string());
    }
    if &tail[..8] == b"EFI PART" {
        found.push("backup GPT header at the last LBA".to_string());
    }
    let out = Command::new("wipefs")
        .args(["--no-act", "--noheadings"])
        .arg(img)
        .output()
        .expect("wipefs");
    let listed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !listed.is_empty() {
        found.push(format!("wipefs: {listed}"));
    }
    for s in starts {
        let out = Command::new("blkid")
            .args([
                "--probe",
                "--offset",
                &(s * 512).to_string(),
                "-o",
                "export",
            ])
            .arg(img)
            .output()
            .expect("blkid");
        let probed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("TYPE="))
            .map(str::to_string)
            .collect();
        if !probed.is_empty() {
            let probed = probed.join(" ");
            found.push(format!("blkid at sector {s}: {probed}"));
        }
    }
    found
}
